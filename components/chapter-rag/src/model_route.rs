//! Routing with the client's model: the write-up's router agent, asked through MCP sampling (or
//! an input-required round). The model reads the chapter tree and the question and names 1-3
//! chapter ids; its pick is fused with the embedding route ([`fuse`]), never put in its place:
//! a small model routes worse than the embeddings alone (README of chapter-rag), and a pick the
//! embeddings also rank high is the likeliest. Where the client offers no sampling, or the
//! instance's grant does not allow asking (`client = ["sampling"]`), the embedding route serves,
//! and the route says which answered ([`RoutedBy`]) and, when the model was asked, why its pick
//! was not used.
//!
//! What the model is shown: every chapter the route chooses among (the top-level ones, or where
//! a lone title first branches), then whole levels below them while [`MAX_LINES`] allows; a
//! chapter whose sections are not shown says how many it has; when the model's first pick hides
//! [`DESCEND_AT`] or more, the model is asked again inside it (a second round), and otherwise
//! the embeddings narrow inside it. The answer format's example names no id a manual can have
//! (`"ID"`), so a model that copies the example names nothing and falls back, rather than
//! routing to a real `3.4`.

use serde_json::{Value, json};
use tool_guest::tool::{Ask, AskError, ToolError};

use crate::env::Env;
use crate::search::{ModelPick, Route, RoutedBy};
use crate::tree::Tree;

/// The most tree lines the model reads (stated in the prompt).
pub const MAX_LINES: usize = 400;
/// The most chapters a route names.
const MAX_CHAPTERS: usize = 3;
/// The question's key in a multi-round call.
const KEY: &str = "route";
/// The key of the question asked again inside the first pick.
const DESCEND_KEY: &str = "route.within";

/// What the client's model made of a question.
pub enum ModelRoute {
    /// It named chapters of the manual.
    Picked(ModelPick),
    /// Nobody to ask (`None`), or it named none the manual has (why): the embeddings route.
    Fallback(Option<String>),
}

/// The router's instructions, as the write-up's router agent has them.
const SYSTEM: &str = "You are Router, an expert in the structure of technical documentation. From a manual's \
chapter tree alone (ids and titles, no text) you pick the 1-3 chapters most likely to answer a user's question.";

/// The tree as the model reads it, and which nodes that text shows.
pub struct Outline {
    text: String,
    shown: Vec<bool>,
}

/// The tree as the model reads it: every chapter routed among ([`Tree::branches`], with the
/// titles above them), then whole levels below while `max_lines` allows; one `id title` line
/// each, indented by depth, in document order. A chapter whose sections are left out ends
/// with `(+N sections)`.
pub fn outline(tree: &Tree, max_lines: usize) -> Outline {
    let (branches, level) = tree.branches();
    let mut shown = vec![false; tree.nodes.len()];
    // The lone titles above the branches.
    let mut at = tree.roots.first().copied();
    for _ in 1..level {
        let Some(n) = at else { break };
        shown[n] = true;
        at = tree.nodes[n].children.first().copied();
    }
    for &b in branches {
        shown[b] = true;
    }
    show_levels(tree, branches.to_vec(), &mut shown, max_lines);
    Outline { text: render(tree, &shown), shown }
}

/// Node `top` and whole levels of what lies inside it while `max_lines` allows, as
/// [`outline`] writes them.
fn outline_within(tree: &Tree, top: usize, max_lines: usize) -> String {
    let mut shown = vec![false; tree.nodes.len()];
    shown[top] = true;
    show_levels(tree, vec![top], &mut shown, max_lines);
    render(tree, &shown)
}

/// Marks the children of `frontier`, level by level, while the count of marked nodes stays
/// within `max_lines`.
fn show_levels(tree: &Tree, mut frontier: Vec<usize>, shown: &mut [bool], max_lines: usize) {
    let mut count = shown.iter().filter(|s| **s).count();
    loop {
        let next: Vec<usize> = frontier.iter().flat_map(|&n| tree.nodes[n].children.iter().copied()).collect();
        if next.is_empty() || count + next.len() > max_lines {
            return;
        }
        for &n in &next {
            shown[n] = true;
        }
        count += next.len();
        frontier = next;
    }
}

fn render(tree: &Tree, shown: &[bool]) -> String {
    let depth = |mut n: usize| {
        let mut d = 0;
        while let Some(p) = tree.nodes[n].parent {
            d += 1;
            n = p;
        }
        d
    };
    let mut lines = Vec::new();
    for (i, n) in tree.nodes.iter().enumerate().filter(|(i, _)| shown[*i]) {
        let hidden = n.children.iter().filter(|&&c| !shown[c]).count();
        let more = if hidden > 0 { format!(" (+{hidden} sections)") } else { String::new() };
        lines.push(format!("{}{} {}{more}", "  ".repeat(depth(i)), n.id, n.title));
    }
    lines.join("\n")
}

/// The answer format, the ids first and the reason short; its example names no id a manual can
/// have.
const FORMAT: &str = "Answer with one JSON object and nothing else, the ids first and the reason in at most ten \
words: {\"chapters\": [\"ID\", \"ID\"], \"confidence\": 0.5, \"reason\": \"...\"}, where each ID is replaced by an \
id from the tree above, best first, and confidence is how sure you are, from 0 to 1.";

/// A model's first pick with more sections than this not shown is asked again, inside it.
const DESCEND_AT: usize = 8;

/// Asks the client's model `prompt` under `key`: its answer's text, or what to do instead.
fn sample(env: &dyn Env, key: &str, prompt: String) -> Result<Result<String, ModelRoute>, ToolError> {
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "systemPrompt": SYSTEM,
        "maxTokens": 120,
        "temperature": 0,
    });
    Ok(match env.ask(key, Ask::Sampling, &params) {
        Ok(a) => Ok(a["content"]["text"].as_str().unwrap_or_default().to_string()),
        Err(AskError::Unsupported(_)) => Err(ModelRoute::Fallback(None)),
        Err(AskError::Pending) => return Err(ToolError::Internal("waiting for the client's model to route".into())),
        Err(AskError::Failed(m)) => Err(ModelRoute::Fallback(Some(format!("the client's model did not route: {m}")))),
    })
}

/// Asks the client's model to route `question`, showing it `outline` (of `tree`); when its
/// first pick is a chapter whose many sections it was not shown, asks again inside that
/// chapter (a second round).
pub fn ask(tree: &Tree, outline: &Outline, env: &dyn Env, question: &str) -> Result<ModelRoute, ToolError> {
    let (tree_text, shown) = (&outline.text, &outline.shown);
    let prompt = format!(
        "Chapter tree (every chapter of the top levels shown, {MAX_LINES} lines at most; \"(+N sections)\" marks a \
         chapter whose sections are not shown, and naming the chapter covers them):\n{tree_text}\n\nUser question: \
         {question}\n\n{FORMAT} Name 1 to {MAX_CHAPTERS} ids."
    );
    let text = match sample(env, KEY, prompt)? {
        Ok(text) => text,
        Err(instead) => return Ok(instead),
    };
    let mut pick = match parse(tree, &text, None) {
        ModelRoute::Picked(p) => p,
        fallback => return Ok(fallback),
    };
    let first = pick.nodes[0];
    let hidden = tree.nodes[first].children.iter().filter(|&&c| !shown[c]).count();
    if hidden >= DESCEND_AT {
        let n = &tree.nodes[first];
        let prompt = format!(
            "Chapter {} {} holds these sections:\n{}\n\nUser question: {question}\n\n{FORMAT} Name 1 id of this \
             chapter, or {} itself if no section fits better.",
            n.id,
            n.title,
            outline_within(tree, first, MAX_LINES),
            n.id
        );
        // An unusable second answer keeps the first pick: the chapter, narrowed by embeddings.
        if let Ok(text) = sample(env, DESCEND_KEY, prompt)?
            && let ModelRoute::Picked(inside) = parse(tree, &text, Some(first))
        {
            pick.nodes[0] = inside.nodes[0];
            pick.chapters[0] = inside.chapters[0].clone();
        }
    }
    Ok(ModelRoute::Picked(pick))
}

/// The chapters the model's answer names, if it names any the manual has (inside `within`,
/// when given).
fn parse(tree: &Tree, text: &str, within: Option<usize>) -> ModelRoute {
    let json = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if a < b => serde_json::from_str::<Value>(&text[a..=b]).ok(),
        _ => None,
    };
    let Some(json) = json else {
        return ModelRoute::Fallback(Some("the client's model did not answer with JSON".into()));
    };
    let mut pick = ModelPick {
        nodes: Vec::new(),
        chapters: Vec::new(),
        confidence: json["confidence"].as_f64().map(|c| c.clamp(0.0, 1.0) as f32),
        reason: cut(json["reason"].as_str().unwrap_or("no reason given"), 300).to_string(),
    };
    let named: Vec<&str> =
        json["chapters"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    for id in named {
        if pick.nodes.len() == MAX_CHAPTERS {
            break;
        }
        // An id the manual lacks (the example's "ID", one the model made up) is dropped.
        if let Some(i) = tree.find(id.trim())
            && !pick.nodes.contains(&i)
            && within.is_none_or(|w| tree.is_within(i, w))
        {
            pick.nodes.push(i);
            pick.chapters.push(tree.nodes[i].id.clone());
        }
    }
    if pick.nodes.is_empty() {
        let named = json["chapters"].to_string();
        return ModelRoute::Fallback(Some(format!(
            "the client's model named no chapter of the manual ({})",
            cut(&named, 100)
        )));
    }
    ModelRoute::Picked(pick)
}

/// The embedding route `route` with the model's `pick` fused in: each chapter routed among
/// scores `1/(1 + its rank in the pick) + 1/(1 + its rank by the embeddings)` (a rank it lacks
/// adds nothing; a tie goes to the embeddings' order), and the best [`MAX_CHAPTERS`] are the
/// route. Inside a chapter, the section the model named is kept, else the one the embeddings
/// narrowed to. Confidences stay the embeddings' calibrated ones; the model's stated one is
/// reported beside them, as the model's.
pub fn fuse(tree: &Tree, mut route: Route, pick: ModelPick) -> Route {
    let branch_of = tree.branch_of();
    let emb_rank = |b: usize| route.ranking.iter().position(|&r| r == b);
    // Chosen among what either routed (the embeddings' own routed chapters, not their whole
    // ranking: fusing does not widen a route the embeddings were sure of); the rest of the
    // ranking follows, for chapter recall beyond the route.
    let mut candidates: Vec<usize> = Vec::new();
    let routed = route.chapters.iter().filter_map(|c| branch_of[c.node]);
    for b in pick.nodes.iter().filter_map(|&n| branch_of[n]).chain(routed) {
        if !candidates.contains(&b) {
            candidates.push(b);
        }
    }
    let model_rank = |b: usize| pick.nodes.iter().position(|&n| branch_of[n] == Some(b));
    let score = |b: usize| {
        let s = |r: Option<usize>| r.map_or(0.0, |r| 1.0 / (2.0 + r as f32));
        s(model_rank(b)) + s(emb_rank(b))
    };
    candidates.sort_by(|&a, &b| {
        score(b)
            .total_cmp(&score(a))
            .then_with(|| emb_rank(a).unwrap_or(usize::MAX).cmp(&emb_rank(b).unwrap_or(usize::MAX)))
    });
    candidates.truncate(MAX_CHAPTERS);
    let chapters = candidates
        .iter()
        .map(|&b| {
            let node = pick
                .nodes
                .iter()
                .copied()
                .find(|&n| branch_of[n] == Some(b))
                .or_else(|| route.chapters.iter().map(|c| c.node).find(|&n| branch_of[n] == Some(b)))
                .unwrap_or(b);
            let confidence = emb_rank(b).and_then(|r| route.confidences.get(r).copied()).unwrap_or(0.0);
            crate::search::Routed {
                node,
                chapter_id: tree.nodes[node].id.clone(),
                title: tree.nodes[node].title.clone(),
                path: tree.path(node),
                confidence,
            }
        })
        .collect::<Vec<_>>();
    let agreed =
        chapters.first().zip(route.chapters.first()).is_some_and(|(f, e)| branch_of[f.node] == branch_of[e.node]);
    route.reason = format!(
        "the client's model named {} (its own confidence {}, uncalibrated: {}); fused with the embeddings, which {}: {}",
        pick.chapters.join(", "),
        pick.confidence.map_or("not given".to_string(), |c| format!("{c:.2}")),
        pick.reason,
        if agreed { "agree on the first" } else { "rank otherwise" },
        route.reason
    );
    route.confidence = chapters.first().map_or(0.0, |c| c.confidence);
    route.chapters = chapters;
    // The ranking beyond the route (`quarry eval`'s chapter recall): the route's, then the rest.
    let rest = route.ranking.iter().copied().filter(|b| !candidates.contains(b));
    let ranking: Vec<usize> = candidates.iter().copied().chain(rest).collect();
    route.confidences =
        ranking.iter().map(|&b| emb_rank(b).and_then(|r| route.confidences.get(r).copied()).unwrap_or(0.0)).collect();
    route.ranking = ranking;
    route.routed_by = RoutedBy::ClientModelAndEmbeddings;
    route.model = Some(pick);
    route
}

/// `s`, at most `max` bytes of it (cut at a character boundary).
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
