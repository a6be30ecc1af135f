//! Hybrid search (vectors and BM25, fused by reciprocal rank) and routing a question to
//! chapters.
//!
//! Routing without a language model: the question's best passages across the whole manual
//! (hybrid search) vote for the chapters that hold them. A top-level chapter's evidence is its
//! best passage's fused score plus a quarter of its next one's, and so on; the candidates are the
//! 1–3 chapters with the most evidence, and a chapter's confidence is its share of all the
//! evidence. A candidate narrows to one of its sections only when that section holds at least
//! [`NARROW_SHARE`] of all the votes; below that confidence the route stays at (widens to) the
//! parent. On the development questions (`make eval`), narrowing more eagerly loses answers that
//! sit in a sibling section.

use rag_core::hybrid::{self, LEG_DEPTH};
use rag_core::score::{dot, from_cosine};
use serde::Serialize;
use tool_guest::tool::ToolError;

use crate::index::Built;

/// Passages that vote when routing.
const VOTERS: usize = 40;
/// A section must hold this share of its chapter's evidence to be routed to instead of it.
pub const NARROW_SHARE: f32 = 0.7;
/// A candidate needs this fraction of the best candidate's evidence.
const CANDIDATE_FLOOR: f32 = 0.1;
/// Each further passage of a chapter counts this much as the one before: a chapter is judged
/// mostly by its best passage, a little by its next ones.
const DECAY: f32 = 0.25;
/// The most chapters a route returns.
pub const MAX_ROUTED: usize = 3;

/// One hybrid result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scored {
    /// Position in [`Built::chunks`].
    pub chunk: usize,
    /// Fused rank score (higher is better; comparable within one search only).
    pub fused: f32,
    /// Normalised vector score of the chunk for the query ([`rag_core::score`]).
    pub score: f32,
}

/// A question as the searches use it: its words and its vector.
#[derive(Clone, Debug)]
pub struct Query {
    /// The question.
    pub text: String,
    /// Its embedding (as a query).
    pub vector: Vec<f32>,
}

impl Query {
    /// The normalised score of chunk `i` for this query.
    pub fn score(&self, built: &Built, i: usize) -> f32 {
        from_cosine(dot(&self.vector, built.index.vector(i)))
    }
}

/// Vector-only search: the `k` nearest chunks among `allowed`.
pub fn vector_only(
    built: &mut Built,
    query: &Query,
    k: usize,
    allowed: Option<&dyn Fn(usize) -> bool>,
) -> Result<Vec<Scored>, ToolError> {
    let hits = built.index.nearest(&query.vector, k, allowed).map_err(|e| ToolError::Upstream(e.to_string()))?;
    Ok(hits
        .into_iter()
        .enumerate()
        .map(|(r, (chunk, score))| Scored { chunk, fused: 1.0 / (61.0 + r as f32), score })
        .collect())
}

/// Hybrid search: vectors and BM25 among the chunks `allowed`, fused by rank; chunks whose
/// vector score is below `threshold` are dropped; the best `k`.
pub fn hybrid(
    built: &mut Built,
    query: &Query,
    k: usize,
    threshold: f32,
    allowed: Option<&dyn Fn(usize) -> bool>,
) -> Result<Vec<Scored>, ToolError> {
    let depth = LEG_DEPTH.max(k);
    let by_vector: Vec<usize> = built
        .index
        .nearest(&query.vector, depth, allowed)
        .map_err(|e| ToolError::Upstream(e.to_string()))?
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    let by_keyword: Vec<usize> = built.bm25.search(&query.text, depth, allowed).into_iter().map(|(i, _)| i).collect();
    Ok(hybrid::fuse(&by_vector, &by_keyword, k, threshold, |i| query.score(built, i))
        .into_iter()
        .map(|f| Scored { chunk: f.position, fused: f.fused, score: f.score })
        .collect())
}

/// One routed chapter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Routed {
    /// Position in the tree.
    #[serde(skip)]
    pub node: usize,
    /// Its id.
    pub chapter_id: String,
    /// Its title.
    pub title: String,
    /// Titles from the top down to it.
    pub path: Vec<String>,
    /// Its share of the evidence, in [0, 1].
    #[serde(serialize_with = "rag_core::score::serialize_f32")]
    pub confidence: f32,
}

/// Where a question should be looked up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Route {
    /// 1–3 chapters, best first.
    pub chapters: Vec<Routed>,
    /// The best chapter's share of all the evidence, in [0, 1].
    #[serde(serialize_with = "rag_core::score::serialize_f32")]
    pub confidence: f32,
    /// One line saying why.
    pub reason: String,
    /// Every top-level chapter with evidence, best first (ids), for ranking beyond the routed ones.
    #[serde(skip)]
    pub ranking: Vec<usize>,
}

/// Routes `question` (embedded as `query`).
pub fn route(built: &mut Built, query: &Query) -> Result<Route, ToolError> {
    let voters = hybrid(built, query, VOTERS, 0.0, None)?;
    let tree = &built.tree;
    // Evidence per node: its best passages' fused scores, halving from one to the next, so that
    // a chapter with one excellent passage is not outvoted by a long one with many middling ones.
    let mut seen = vec![0u32; tree.nodes.len()];
    let mut evidence = vec![0f32; tree.nodes.len()];
    // All of it, undecayed, for narrowing: a section must hold most of the chapter's matches.
    let mut mass = vec![0f32; tree.nodes.len()];
    for v in &voters {
        let mut at = Some(built.chunks[v.chunk].chapter);
        while let Some(n) = at {
            mass[n] += v.fused;
            evidence[n] += v.fused * DECAY.powi(seen[n] as i32);
            seen[n] += 1;
            at = tree.nodes[n].parent;
        }
    }
    let total: f32 = tree.roots.iter().map(|&r| evidence[r]).sum();
    let total_mass: f32 = tree.roots.iter().map(|&r| mass[r]).sum();
    let mut tops: Vec<usize> = tree.roots.iter().copied().filter(|&r| evidence[r] > 0.0).collect();
    tops.sort_by(|&a, &b| evidence[b].total_cmp(&evidence[a]).then(a.cmp(&b)));
    let Some(&best) = tops.first() else {
        return Ok(Route {
            chapters: Vec::new(),
            confidence: 0.0,
            reason: "no passage of the manual matches the question".into(),
            ranking: Vec::new(),
        });
    };
    let mut chapters = Vec::new();
    let mut narrowed = Vec::new();
    for &top in tops.iter().take(MAX_ROUTED) {
        if evidence[top] < CANDIDATE_FLOOR * evidence[best] {
            break;
        }
        // Narrow while one section holds most of all the votes (undecayed: a single strong
        // passage is not enough to leave the rest of the chapter out).
        let mut node = top;
        let mut share = evidence[top] / total;
        loop {
            let child = tree.nodes[node].children.iter().copied().max_by(|&a, &b| mass[a].total_cmp(&mass[b]));
            match child {
                Some(c) if mass[c] >= NARROW_SHARE * total_mass => {
                    share = mass[c] / total_mass;
                    node = c;
                }
                _ => break,
            }
        }
        if node != top {
            narrowed.push(format!("{} \"{}\"", tree.nodes[node].id, tree.nodes[node].title));
        }
        chapters.push(Routed {
            node,
            chapter_id: tree.nodes[node].id.clone(),
            title: tree.nodes[node].title.clone(),
            path: tree.path(node),
            confidence: share,
        });
    }
    let confidence = evidence[best] / total;
    let held = voters.iter().filter(|v| tree.top(built.chunks[v.chunk].chapter) == best).count();
    let mut reason = format!(
        "{held} of the {} passages that best match the question are in {} \"{}\" ({:.0}% of the evidence)",
        voters.len(),
        tree.nodes[best].id,
        tree.nodes[best].title,
        confidence * 100.0
    );
    if !narrowed.is_empty() {
        reason.push_str(&format!(
            "; narrowed to {} (holding over {:.0}% of the matching passages)",
            narrowed.join(", "),
            NARROW_SHARE * 100.0
        ));
    } else if chapters.len() > 1 {
        reason.push_str("; no single section stands out, so whole chapters are searched");
    }
    Ok(Route { chapters, confidence, reason, ranking: tops })
}
