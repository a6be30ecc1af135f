//! The six tools' arguments: each type is both what a call parses into and, derived, the
//! schema its spec gives (`tool_guest::args`). Defaults that depend on the instance are
//! patched in where the specs are made.

use serde::Deserialize;
use tool_guest::args::JsonSchema;

/// `list_chapter_tree`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// How many levels to show (below `under`, or from the top)
    #[schemars(range(min = 1, max = 6))]
    pub level: Option<usize>,
    /// Show only the chapters inside this chapter id
    pub under: Option<String>,
}

/// `get_chapter`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// A chapter id from list_chapter_tree, e.g. "3" or "3.4.1"
    pub chapter_id: String,
    /// Cut the text after this many characters
    #[schemars(range(min = 100))]
    pub max_chars: Option<usize>,
}

/// `route`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteArgs {
    /// The question, in words
    pub question: String,
}

/// `search_chapter_content`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchInArgs {
    /// A chapter id from list_chapter_tree, e.g. "3" or "3.4.1"
    pub chapter_id: Option<String>,
    /// Several chapter ids, instead of chapter_id
    #[schemars(length(min = 1))]
    pub chapter_ids: Option<Vec<String>>,
    /// What to look for
    pub query: String,
    #[schemars(range(min = 1, max = 50))]
    pub top_k: Option<usize>,
    /// Drop results scoring below this (normalised cosine)
    #[schemars(range(min = 0, max = 1))]
    pub similarity_threshold: Option<f32>,
}

/// `search`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// The question, in words
    pub question: String,
    /// Fragments to return
    #[schemars(range(min = 8, max = 12))]
    pub limit: Option<usize>,
    /// How to search: routed (default: inside the chapters the question routes to), or the whole manual by global_hybrid or global_vector search
    pub retrieval: Option<Retrieval>,
}

/// `search`'s `retrieval` (the variants undocumented, so that the schema is a plain `enum`):
/// the route's chapters searched by hybrid search, or the whole manual by hybrid or vector
/// search (what `quarry eval --compare` sets beside the routed search).
#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs, reason = "documented on the enum: a variant's doc would change the schema's form")]
pub enum Retrieval {
    Routed,
    GlobalHybrid,
    GlobalVector,
}

/// `validate_citations`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateArgs {
    /// Chapter ids the answer cites
    pub cited: Vec<String>,
    /// Chapter ids from route or search
    pub candidates: Vec<String>,
}
