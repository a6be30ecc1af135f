//! Routing by the client's model: the write-up's router agent, asked through MCP sampling. The
//! model reads the top of the chapter tree and the question and names 1-3 chapter ids; the
//! ids it names that the manual has are the route. Where the client offers no sampling, or the
//! instance's grant does not allow asking (`client = ["sampling"]`), the embedding route serves.

use serde_json::{Value, json};
use tool_guest::tool::{Ask, AskError, ToolError};

use crate::env::Env;
use crate::search::{Route, Routed};
use crate::tree::Tree;

/// The most tree lines the model reads.
const MAX_LINES: usize = 400;
/// The most chapters a route names.
const MAX_CHAPTERS: usize = 3;
/// The question's key in a multi-round call.
const KEY: &str = "route";

/// What the client's model made of a question.
pub enum ModelRoute {
    /// It named chapters of the manual.
    Routed(Route),
    /// Nobody to ask (`None`), or it named none the manual has (why): route by embeddings.
    Fallback(Option<String>),
}

/// The router's instructions, as the write-up's router agent has them.
const SYSTEM: &str = "You are Router, an expert in the structure of technical documentation. From a manual's \
chapter tree alone (ids and titles, no text) you pick the 1-3 chapters most likely to answer a user's question.";

/// The tree's top two levels, one `id title` line each, indented by depth.
fn outline(tree: &Tree) -> String {
    let mut lines = Vec::new();
    let mut stack: Vec<(usize, usize)> = tree.roots.iter().rev().map(|&r| (r, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        if lines.len() >= MAX_LINES {
            lines.push("...".to_string());
            break;
        }
        let n = &tree.nodes[i];
        lines.push(format!("{}{} {}", "  ".repeat(depth), n.id, n.title));
        if depth == 0 {
            stack.extend(n.children.iter().rev().map(|&c| (c, 1)));
        }
    }
    lines.join("\n")
}

/// Asks the client's model to route `question`.
pub fn route(tree: &Tree, env: &dyn Env, question: &str) -> Result<ModelRoute, ToolError> {
    let prompt = format!(
        "Chapter tree:\n{}\n\nUser question: {question}\n\nAnswer with one JSON object and nothing else: \
         {{\"chapters\": [\"3.4\"], \"confidence\": 0.9, \"reason\": \"one sentence\"}}, where chapters are 1 to \
         {MAX_CHAPTERS} ids from the tree, best first.",
        outline(tree)
    );
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "systemPrompt": SYSTEM,
        "maxTokens": 300,
        "temperature": 0,
    });
    let answer = match env.ask(KEY, Ask::Sampling, &params) {
        Ok(a) => a,
        Err(AskError::Unsupported(_)) => return Ok(ModelRoute::Fallback(None)),
        Err(AskError::Pending) => return Err(ToolError::Internal("waiting for the client's model to route".into())),
        Err(AskError::Failed(m)) => {
            return Ok(ModelRoute::Fallback(Some(format!("the client's model did not route: {m}"))));
        }
    };
    let text = answer["content"]["text"].as_str().unwrap_or_default();
    Ok(parse(tree, text))
}

/// The route the model's answer names, if it names chapters the manual has.
fn parse(tree: &Tree, text: &str) -> ModelRoute {
    let json = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if a < b => serde_json::from_str::<Value>(&text[a..=b]).ok(),
        _ => None,
    };
    let Some(json) = json else {
        return ModelRoute::Fallback(Some("the client's model did not answer with JSON".into()));
    };
    let confidence = json["confidence"].as_f64().map_or(0.5, |c| c.clamp(0.0, 1.0)) as f32;
    let mut chapters: Vec<Routed> = Vec::new();
    let named: Vec<&str> =
        json["chapters"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    for id in named {
        if chapters.len() == MAX_CHAPTERS || chapters.iter().any(|c| c.chapter_id == id.trim()) {
            continue;
        }
        if let Some(i) = tree.find(id.trim()) {
            let n = &tree.nodes[i];
            chapters.push(Routed {
                node: i,
                chapter_id: n.id.clone(),
                title: n.title.clone(),
                path: tree.path(i),
                confidence,
            });
        }
    }
    if chapters.is_empty() {
        return ModelRoute::Fallback(Some("the client's model named no chapter of the manual".into()));
    }
    let why = json["reason"].as_str().unwrap_or("no reason given");
    ModelRoute::Routed(Route {
        chapters,
        confidence,
        share: 0.0,
        reason: format!("routed by the client's model: {}", cut(why, 300)),
        ranking: Vec::new(),
        margin: 0.0,
        kept: Vec::new(),
    })
}

/// `s`, at most `max` bytes of it (cut at a character boundary).
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
