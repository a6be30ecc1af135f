//! Hybrid search (vectors and BM25, fused by reciprocal rank) and routing a question to
//! chapters.
//!
//! Routing without a language model: the question's best passages across the whole manual
//! (hybrid search) vote for the chapters that hold them. A top-level chapter's evidence is its
//! best passage's fused score plus a quarter of its next one's, and so on; the candidates are the
//! 1–3 chapters with the most evidence, and a chapter's confidence is a calibrated probability
//! that it holds the answer ([`Calibration`]: its lead over the best other chapter and its share
//! of the evidence). A candidate narrows to one of its sections only when that section holds at
//! least [`Params::narrow_share`] of all the votes. `search` then looks inside the routed
//! chapters and in the sections of the whole manual's best few passages
//! ([`Params::keep_top`]), or everywhere when the route is unsure ([`Params::widen_below`]).
//! The constants are [`Params`], judged on six development manuals at once (`make eval`).

use std::collections::HashMap;

use rag_core::corpus::{Clause, Match};
use rag_core::hybrid::{self, LEG_DEPTH};
use rag_core::score::from_cosine;
use serde::Serialize;
use tool_guest::tool::{ToolError, corpus_error};

use crate::index::Built;

/// The most chapters a route returns.
pub const MAX_ROUTED: usize = 3;

/// How a question is routed and searched: the constants of routing, in one place so that
/// `make eval` can judge each on every development manual (the defaults are what it chose).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Passages that vote when routing.
    pub voters: usize,
    /// How much a voter's place counts: the voter at place r (from 1) of the fused ranking
    /// brings `1 / (vote_k + r)`; 0 brings its fused score (`Σ weight / (60 + rank)` over the
    /// legs, nearly flat over 40 places, so a route counts passages).
    pub vote_k: f32,
    /// Each further passage of a chapter counts this much as the one before: a chapter is
    /// judged mostly by its best passage, a little by its next ones.
    pub decay: f32,
    /// A section must hold this share of its chapter's evidence to be routed to instead of it.
    pub narrow_share: f32,
    /// A candidate needs this fraction of the best candidate's evidence.
    pub candidate_floor: f32,
    /// The vector leg's weight in the fusion (the keyword leg's is 1), for routing and search.
    pub vector_weight: f32,
    /// A chapter's evidence is divided by its size relative to the mean chapter's (in chunks)
    /// to this power: 0 counts passages as they come, 1 judges a chapter by what it holds
    /// beyond what its size would give by chance.
    pub size_power: f32,
    /// When the route's confidence is below this, it is unsure and `search` looks in the
    /// whole manual instead of the routed chapters (0: never).
    pub widen_below: f32,
    /// `search` also looks in the sections that hold the whole manual's best `keep_top`
    /// passages, so that a route cannot lose what the global search is surest of.
    pub keep_top: usize,
    /// How evidence becomes a confidence.
    pub calibration: Calibration,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            voters: 40,
            vote_k: 0.0,
            decay: 0.25,
            narrow_share: 0.7,
            candidate_floor: 0.1,
            vector_weight: rag_core::hybrid::VECTOR_WEIGHT,
            size_power: 0.0,
            widen_below: 0.5,
            keep_top: 5,
            // Fitted on the six development manuals (`make eval EVAL_ARGS=--calibrate`).
            calibration: Calibration { bias: 1.52, lead: 13.08, share: 0.81 },
        }
    }
}

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

/// Where a search looks: the whole manual, or inside these chapters (ids; a chunk of merged
/// chapters counts for each).
pub type Within<'a> = Option<&'a [String]>;

fn filter(built: &Built, within: Within<'_>) -> rag_core::corpus::Filter {
    let f = built.filter();
    match within {
        None => f,
        Some(ids) => f.and(Clause { field: "within".into(), values: ids.to_vec(), how: Match::Exact }),
    }
}

/// Vector-only search: the `k` nearest chunks `within`.
pub fn vector_only(built: &Built, query: &Query, k: usize, within: Within<'_>) -> Result<Vec<Scored>, ToolError> {
    let hits = built.corpus.nearest(&query.vector, k, &filter(built, within)).map_err(corpus_error)?;
    hits.into_iter()
        .enumerate()
        .map(|(r, f)| {
            Ok(Scored { chunk: built.position(&f.id)?, fused: 1.0 / (61.0 + r as f32), score: from_cosine(f.score) })
        })
        .collect()
}

/// Hybrid search: vectors and BM25 `within`, fused by rank (the vector leg at
/// `vector_weight`); chunks whose vector score is below `threshold` are dropped; the best `k`.
pub fn hybrid(
    built: &Built,
    query: &Query,
    k: usize,
    threshold: f32,
    vector_weight: f32,
    within: Within<'_>,
) -> Result<Vec<Scored>, ToolError> {
    let depth = LEG_DEPTH.max(k);
    let filter = filter(built, within);
    let near = built.corpus.nearest(&query.vector, depth, &filter).map_err(corpus_error)?;
    let words = built.corpus.keyword(&query.text, Some(&query.vector), depth, &filter).map_err(corpus_error)?;
    // Each candidate's vector score: the vector leg's own, or what the keyword leg carries.
    let mut score: HashMap<usize, f32> = HashMap::with_capacity(near.len() + words.len());
    let mut by_vector = Vec::with_capacity(near.len());
    for f in &near {
        let i = built.position(&f.id)?;
        score.insert(i, from_cosine(f.score));
        by_vector.push(i);
    }
    let mut by_keyword = Vec::with_capacity(words.len());
    for f in &words {
        let i = built.position(&f.id)?;
        score.entry(i).or_insert_with(|| from_cosine(f.similarity.unwrap_or(-1.0)));
        by_keyword.push(i);
    }
    Ok(hybrid::fuse_weighted(&by_vector, &by_keyword, vector_weight, k, threshold, |i| {
        score.get(&i).copied().unwrap_or(0.0)
    })
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
    /// How likely its chapter holds the answer ([`Calibration`]), in [0, 1].
    #[serde(serialize_with = "rag_core::score::serialize_f32")]
    pub confidence: f32,
}

/// The route's confidence: `σ(bias + lead·ln(e / e') + share·ln(e / total))` for a chapter of
/// evidence `e`, against the best other chapter's `e'`, out of all the evidence. Fitted on the
/// development manuals (`make eval EVAL_ARGS=--calibrate`, leave-one-manual-out), so that a
/// confidence of 0.7 means the top chapter held the answer about 70% of the time there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// The intercept.
    pub bias: f32,
    /// The weight of the chapter's lead over the best other one (log ratio).
    pub lead: f32,
    /// The weight of the chapter's share of all the evidence (log).
    pub share: f32,
}

impl Calibration {
    /// The confidence of a chapter with evidence `e`, the best other chapter having `other`,
    /// out of `total`.
    pub fn confidence(&self, e: f32, other: f32, total: f32) -> f32 {
        let tiny = f32::MIN_POSITIVE;
        let lead = if other > 0.0 { (e.max(tiny) / other).ln() } else { 5.0 };
        let x = self.bias + self.lead * lead + self.share * (e.max(tiny) / total.max(tiny)).ln();
        1.0 / (1.0 + (-x).exp())
    }
}

/// Where a question should be looked up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Route {
    /// 1–3 chapters, best first.
    pub chapters: Vec<Routed>,
    /// How likely the best chapter holds the answer ([`Calibration`]), in [0, 1].
    #[serde(serialize_with = "rag_core::score::serialize_f32")]
    pub confidence: f32,
    /// The best chapter's share of all the evidence, in [0, 1].
    #[serde(skip)]
    pub share: f32,
    /// One line saying why.
    pub reason: String,
    /// Every top-level chapter with evidence, best first (ids), for ranking beyond the routed ones.
    #[serde(skip)]
    pub ranking: Vec<usize>,
    /// The best chapter's share of the evidence of the best two, in [0.5, 1] (1 with one).
    #[serde(skip)]
    pub margin: f32,
    /// The sections of the whole manual's best passages ([`Params::keep_top`]), searched too.
    #[serde(skip)]
    pub kept: Vec<usize>,
    /// The calibrated confidence of each chapter of `ranking`, in its order.
    #[serde(skip)]
    pub confidences: Vec<f32>,
    /// Which route answered.
    pub routed_by: RoutedBy,
    /// What the client's model picked, when it was asked and named chapters of the manual.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelPick>,
    /// Why the client's model, asked, did not route (its answer unusable, or its call failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// The chapters the client's model named that the manual has, best first, with what it said of
/// them (see the `model_route` module, which asks it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelPick {
    /// Their positions in the tree.
    #[serde(skip)]
    pub nodes: Vec<usize>,
    /// Their ids.
    pub chapters: Vec<String>,
    /// The confidence the model stated, as it stated it: uncalibrated.
    #[serde(serialize_with = "serialize_opt_f32")]
    pub confidence: Option<f32>,
    /// Its reason, cut at 300 bytes.
    pub reason: String,
}

fn serialize_opt_f32<S: serde::Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => rag_core::score::serialize_f32(x, s),
        None => s.serialize_none(),
    }
}

/// Which route answered a question.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutedBy {
    /// The embeddings alone (the client's model not asked, or its answer unusable).
    #[default]
    Embeddings,
    /// The client's model's pick fused with the embeddings (`model_route::fuse`).
    ClientModelAndEmbeddings,
    /// Not routed: a global search.
    NotRouted,
}

impl Route {
    /// A route to nothing, saying why.
    pub fn none(reason: String, routed_by: RoutedBy) -> Route {
        Route {
            chapters: Vec::new(),
            confidence: 0.0,
            share: 0.0,
            reason,
            ranking: Vec::new(),
            margin: 0.0,
            kept: Vec::new(),
            confidences: Vec::new(),
            routed_by,
            model: None,
            fallback: None,
        }
    }
}

/// Routes `question` (embedded as `query`).
pub fn route(built: &Built, query: &Query, p: &Params) -> Result<Route, ToolError> {
    let voters = hybrid(built, query, p.voters, 0.0, p.vector_weight, None)?;
    let tree = &built.tree;
    // Evidence per node: its best passages' fused scores, halving from one to the next, so that
    // a chapter with one excellent passage is not outvoted by a long one with many middling ones.
    let mut seen = vec![0u32; tree.nodes.len()];
    let mut evidence = vec![0f32; tree.nodes.len()];
    // All of it, undecayed, for narrowing: a section must hold most of the chapter's matches.
    let mut mass = vec![0f32; tree.nodes.len()];
    for (place, v) in voters.iter().enumerate() {
        let vote = if p.vote_k > 0.0 { 1.0 / (p.vote_k + place as f32 + 1.0) } else { v.fused };
        let mut at = Some(built.chunks[v.chunk].chapter);
        while let Some(n) = at {
            mass[n] += vote;
            evidence[n] += vote * p.decay.powi(seen[n] as i32);
            seen[n] += 1;
            at = tree.nodes[n].parent;
        }
    }
    // The chapters routed among: the top-level ones, or where the tree first branches below a
    // lone title.
    let (branches, level) = tree.branches();
    let branch_of = tree.branch_of();
    if p.size_power != 0.0 {
        // Chunks per chapter, against the mean chapter's.
        let mut size = vec![0usize; tree.nodes.len()];
        for c in &built.chunks {
            if let Some(b) = branch_of[c.chapter] {
                size[b] += 1;
            }
        }
        let sized: Vec<usize> = branches.iter().map(|&r| size[r]).filter(|&n| n > 0).collect();
        let mean = sized.iter().sum::<usize>() as f32 / sized.len().max(1) as f32;
        for &r in branches {
            if size[r] > 0 {
                evidence[r] /= (size[r] as f32 / mean).powf(p.size_power);
            }
        }
    }
    let total: f32 = branches.iter().map(|&r| evidence[r]).sum();
    let total_mass: f32 = branches.iter().map(|&r| mass[r]).sum();
    let mut tops: Vec<usize> = branches.iter().copied().filter(|&r| evidence[r] > 0.0).collect();
    tops.sort_by(|&a, &b| evidence[b].total_cmp(&evidence[a]).then(a.cmp(&b)));
    let Some(&best) = tops.first() else {
        return Ok(Route::none("no passage of the manual matches the question".into(), RoutedBy::Embeddings));
    };
    let mut chapters = Vec::new();
    let mut narrowed = Vec::new();
    for &top in tops.iter().take(MAX_ROUTED) {
        if evidence[top] < p.candidate_floor * evidence[best] {
            break;
        }
        // Narrow while one section holds most of all the votes (undecayed: a single strong
        // passage is not enough to leave the rest of the chapter out).
        let mut node = top;
        loop {
            let child = tree.nodes[node].children.iter().copied().max_by(|&a, &b| mass[a].total_cmp(&mass[b]));
            match child {
                Some(c) if mass[c] >= p.narrow_share * total_mass => node = c,
                _ => break,
            }
        }
        let other = tops.iter().filter(|&&t| t != top).map(|&t| evidence[t]).fold(0.0, f32::max);
        if node != top {
            narrowed.push(format!("{} \"{}\"", tree.nodes[node].id, tree.nodes[node].title));
        }
        chapters.push(Routed {
            node,
            chapter_id: tree.nodes[node].id.clone(),
            title: tree.nodes[node].title.clone(),
            path: tree.path(node),
            confidence: p.calibration.confidence(evidence[top], other, total),
        });
    }
    let share = evidence[best] / total;
    let confidence = chapters.first().map_or(0.0, |c| c.confidence);
    let held = voters.iter().filter(|v| branch_of[built.chunks[v.chunk].chapter] == Some(best)).count();
    let mut reason = format!(
        "{held} of the {} passages that best match the question are in {} \"{}\" ({:.0}% of the evidence)",
        voters.len(),
        tree.nodes[best].id,
        tree.nodes[best].title,
        share * 100.0
    );
    if level > 1
        && let Some(parent) = tree.nodes[best].parent
    {
        reason.push_str(&format!(
            "; routed among the {} level-{level} chapters of {} \"{}\", where the manual first branches",
            branches.len(),
            tree.nodes[parent].id,
            tree.nodes[parent].title
        ));
    }
    if !narrowed.is_empty() {
        reason.push_str(&format!(
            "; narrowed to {} (holding over {:.0}% of the matching passages)",
            narrowed.join(", "),
            p.narrow_share * 100.0
        ));
    } else if chapters.len() > 1 {
        reason.push_str("; no single section stands out, so whole chapters are searched");
    }
    let margin = match tops.get(1) {
        Some(&second) => evidence[best] / (evidence[best] + evidence[second]),
        None => 1.0,
    };
    let kept = voters.iter().take(p.keep_top).map(|v| built.chunks[v.chunk].chapter).collect();
    // Each chapter against the best other: the second for the best, the best for the rest.
    let second = tops.get(1).map_or(0.0, |&s| evidence[s]);
    let confidences = tops
        .iter()
        .map(|&t| p.calibration.confidence(evidence[t], if t == best { second } else { evidence[best] }, total))
        .collect();
    Ok(Route {
        chapters,
        confidence,
        share,
        reason,
        ranking: tops,
        margin,
        kept,
        confidences,
        routed_by: RoutedBy::Embeddings,
        model: None,
        fallback: None,
    })
}
