//! The tool: configuration, CrewAI's schemas and description, loading, the index, search and
//! its output. Everything outside the component (files, HTTP, the embedder) comes through
//! [`Env`], so this module is tested natively with a fake one.
//!
//! Modes, as CrewAI's DOCXSearchTool:
//! - general (`config` without `docx`): args `{docx, search_query}`, both required;
//! - fixed (`config.docx` set): the document is indexed at open, the description names it, and
//!   args are `{search_query}` with an optional `docx` (CrewAI bug #7356 still requires it).
//!
//! A `docx` given in a call is added to the index (a no-op when its content, the model and the
//! chunking are unchanged), then the search is limited to it. Without one, the search covers
//! every indexed document.

use std::time::Duration;

use rag_core::chunk::{Chunking, RESERVED_TOKENS};
use rag_core::hybrid::{self, LEG_DEPTH};
use rag_core::score::json_f32;
use rag_core::store::{Index, StoreError, content_hash};
use serde::Deserialize;
use serde_json::{Value, json};
use tool_guest::args::{JsonSchema, Spec, names, unknown_key};

use crate::extract;
use crate::sections;

/// The tool's name in `specs`.
pub const TOOL_NAME: &str = "search_docx";
/// CrewAI's description in general mode.
pub const GENERAL_DESCRIPTION: &str = "A tool that can be used to semantic search a query from a DOCX's content.";
/// CrewAI's default threshold, on the normalised score of `rag_core::score`.
pub const DEFAULT_THRESHOLD: f32 = 0.6;
/// CrewAI's default number of results.
pub const DEFAULT_LIMIT: usize = 5;
/// The most results a call may ask for.
pub const MAX_LIMIT: usize = 100;

/// The spec of an instance: in general mode (`general`) `docx` is required.
fn spec(description: String, general: bool, threshold: f32, limit: usize) -> Spec {
    let spec = Spec::of::<Args>(TOOL_NAME, description)
        .describe("similarity_threshold", format!("Minimum relevance score in [0, 1] (default {threshold})"))
        .describe("limit", format!("Most results to return (default {limit})"));
    if general { spec.require("docx") } else { spec }
}

/// A call's arguments, as the schema gives them (the call checks them by hand, in CrewAI's
/// words: see [`DocxTool::call`]).
#[derive(JsonSchema)]
#[allow(dead_code, reason = "the type is the schema; the call reads the JSON object")]
#[serde(deny_unknown_fields)]
struct Args {
    /// File path or URL of a DOCX file to be searched
    docx: Option<String>,
    /// Mandatory search query you want to use to search the DOCX's content
    search_query: String,
    #[schemars(range(min = 0, max = 1))]
    similarity_threshold: Option<f64>,
    #[schemars(range(min = 1, max = MAX_LIMIT))]
    limit: Option<u64>,
}
/// CrewAI's download timeout.
pub const DEFAULT_DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest document accepted, by default.
pub const DEFAULT_MAX_BYTES: u64 = 100 << 20;
/// The index file inside `index_dir`.
pub const INDEX_FILE: &str = "docx-search.qix";
/// Texts per embedder call while ingesting.
const EMBED_BATCH: usize = 32;

pub use tool_guest::tool::{BaseEnv, Hit, Model, Output, ToolError};

/// What the tool needs from outside beyond rag-core's [`BaseEnv`].
pub trait Env: BaseEnv {
    /// Directories the host granted (guest paths).
    fn granted_dirs(&self) -> Vec<String>;
    /// Downloads an http(s) URL within `timeout`, refusing more than `max_bytes`.
    fn fetch(&self, url: &str, timeout: Duration, max_bytes: u64) -> Result<Vec<u8>, ToolError>;
}

/// `config` as the host passes it to `open`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Fixed mode: the document to index at open.
    docx: Option<String>,
    /// A read-write granted directory to keep the index in; without it the index lives in memory.
    index_dir: Option<String>,
    /// `"window"` (default), `"crewai"`, or a rag-core `Chunking` object.
    chunking: Option<ChunkingConfig>,
    similarity_threshold: Option<f32>,
    limit: Option<usize>,
    max_bytes: Option<u64>,
    download_timeout_secs: Option<u64>,
    /// `"hybrid"` (default) or `"vector"` (CrewAI's ranking).
    retrieval: Option<String>,
}

/// How search ranks chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retrieval {
    /// Vectors and BM25 fused by rank (rag-core's hybrid search): the default.
    Hybrid,
    /// Vectors alone, by score: CrewAI's DOCXSearchTool ranking.
    Vector,
}

impl Retrieval {
    fn name(self) -> &'static str {
        match self {
            Retrieval::Hybrid => "hybrid",
            Retrieval::Vector => "vector",
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ChunkingConfig {
    Named(String),
    Explicit(Chunking),
}

/// One configured instance.
pub struct DocxTool<E: Env> {
    env: E,
    model: Model,
    fixed: Option<String>,
    chunking: Chunking,
    index: Index,
    index_path: Option<String>,
    threshold: f32,
    limit: usize,
    retrieval: Retrieval,
    max_bytes: u64,
    timeout: Duration,
    /// What indexing the fixed document at prepare did.
    opened: Option<Added>,
    /// Whether [`DocxTool::prepare`] has run.
    prepared: bool,
}

/// What adding a document did, and how long each phase took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Added {
    /// Chunks the document has in the index.
    pub chunks: usize,
    /// True when it was already indexed with this content, model and chunking: nothing was done.
    pub unchanged: bool,
    /// Bytes of the file.
    pub bytes: usize,
    /// Tokens embedded (as the embedder counts them, prefixes and special tokens excluded).
    pub tokens: u64,
    /// Milliseconds reading the file (or downloading it).
    pub load_ms: u64,
    /// Milliseconds vetting and parsing the DOCX.
    pub parse_ms: u64,
    /// Milliseconds chunking (token counting included).
    pub chunk_ms: u64,
    /// Milliseconds embedding.
    pub embed_ms: u64,
    /// Milliseconds indexing and saving.
    pub index_ms: u64,
}

impl Added {
    fn json(&self) -> Value {
        json!({
            "chunks": self.chunks, "unchanged": self.unchanged, "bytes": self.bytes, "tokens": self.tokens,
            "load_ms": self.load_ms, "parse_ms": self.parse_ms, "chunk_ms": self.chunk_ms,
            "embed_ms": self.embed_ms, "index_ms": self.index_ms,
        })
    }
}

fn ms_since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn invalid_config(m: impl Into<String>) -> ToolError {
    ToolError::InvalidConfig(m.into())
}

fn check_threshold(t: f32, what: &str) -> Result<f32, String> {
    if (0.0..=1.0).contains(&t) {
        Ok(t)
    } else {
        Err(format!("{what} must be between 0 and 1 (a normalised score; 0.6 is CrewAI's default), got {t}"))
    }
}

fn check_limit(l: usize, what: &str) -> Result<usize, String> {
    if (1..=MAX_LIMIT).contains(&l) { Ok(l) } else { Err(format!("{what} must be between 1 and {MAX_LIMIT}, got {l}")) }
}

impl<E: Env> DocxTool<E> {
    /// Validates `config`, loads the saved index if there is one, and in fixed mode indexes the
    /// document: [`DocxTool::configure`], then [`DocxTool::prepare`].
    pub fn open(config: &str, env: E) -> Result<Self, ToolError> {
        let mut tool = Self::configure(config, env)?;
        tool.prepare()?;
        Ok(tool)
    }

    /// Validates `config`: cheap, and all the tool's spec needs.
    pub fn configure(config: &str, env: E) -> Result<Self, ToolError> {
        let cfg: Config = if config.trim().is_empty() {
            Config::default()
        } else {
            serde_json::from_str(config).map_err(|e| {
                invalid_config(format!(
                    "config: {e} (accepted keys: docx, index_dir, chunking, similarity_threshold, limit, retrieval, max_bytes, download_timeout_secs)"
                ))
            })?
        };
        let model = env.model();
        if model.dimension == 0 {
            return Err(ToolError::Upstream("the embedder reports dimension 0: no model is loaded".into()));
        }
        let chunking = match cfg.chunking {
            None => Chunking::for_window(model.max_tokens),
            Some(ChunkingConfig::Named(n)) if n == "window" => Chunking::for_window(model.max_tokens),
            Some(ChunkingConfig::Named(n)) if n == "crewai" => Chunking::crewai(),
            Some(ChunkingConfig::Named(n)) => {
                return Err(invalid_config(format!(
                    "chunking: unknown preset {n:?}; use \"window\" (default), \"crewai\" or an object"
                )));
            }
            Some(ChunkingConfig::Explicit(c)) => {
                if let Chunking::Tokens { max_tokens, .. } = c
                    && max_tokens + RESERVED_TOKENS > model.max_tokens
                {
                    return Err(invalid_config(format!(
                        "chunking: max_tokens {max_tokens} does not fit the model's window of {} tokens ({RESERVED_TOKENS} are reserved); use at most {}",
                        model.max_tokens,
                        model.max_tokens.saturating_sub(RESERVED_TOKENS)
                    )));
                }
                c
            }
        };
        // Sizes that cannot work are refused now, not at the first document.
        chunking.validate().map_err(|e| invalid_config(e.to_string()))?;
        let threshold = check_threshold(cfg.similarity_threshold.unwrap_or(DEFAULT_THRESHOLD), "similarity_threshold")
            .map_err(invalid_config)?;
        let limit = check_limit(cfg.limit.unwrap_or(DEFAULT_LIMIT), "limit").map_err(invalid_config)?;
        let retrieval = match cfg.retrieval.as_deref() {
            None | Some("hybrid") => Retrieval::Hybrid,
            Some("vector") => Retrieval::Vector,
            Some(other) => {
                return Err(invalid_config(format!(
                    "retrieval: unknown mode {other:?}; use \"hybrid\" (default: vectors and keywords) or \"vector\" (CrewAI's ranking)"
                )));
            }
        };
        let index_path = match cfg.index_dir {
            Some(dir) => {
                if !env.granted_dirs().iter().any(|g| within(&normalise(&dir), g)) {
                    return Err(ToolError::Denied(format!(
                        "index_dir {dir:?} is not a granted directory; grant it read-write in the host config (grants.dirs, mode = \"rw\")"
                    )));
                }
                Some(format!("{}/{INDEX_FILE}", dir.trim_end_matches('/')))
            }
            None => None,
        };
        let index = Index::new(&model.id, model.dimension);
        if let Some(docx) = &cfg.docx
            && !docx.starts_with("http://")
            && !docx.starts_with("https://")
            && std::fs::metadata(docx).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            // A missing document is refused at load, in the words reading it would use; reading
            // and indexing it wait for prepare.
            return Err(ToolError::NotFound(format!("File does not exist: {docx}")));
        }
        Ok(DocxTool {
            env,
            model,
            fixed: cfg.docx.clone(),
            chunking,
            index,
            index_path,
            threshold,
            limit,
            retrieval,
            max_bytes: cfg.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
            timeout: Duration::from_secs(cfg.download_timeout_secs.unwrap_or(DEFAULT_DOWNLOAD_TIMEOUT.as_secs())),
            opened: None,
            prepared: false,
        })
    }

    /// Loads the saved index if there is one and, in fixed mode, indexes the document (the
    /// heavy part of opening). Runs once; a call before it runs it first.
    pub fn prepare(&mut self) -> Result<(), ToolError> {
        if self.prepared {
            return Ok(());
        }
        let (model, env, index_path) = (&self.model, &self.env, &self.index_path);
        let index = match &index_path {
            None => Index::new(&model.id, model.dimension),
            Some(p) => match Index::load(std::path::Path::new(p), &model.id, model.dimension) {
                Ok(Some(i)) => i,
                Ok(None) => Index::new(&model.id, model.dimension),
                Err(e @ (StoreError::Corrupt { .. } | StoreError::OtherModel { .. })) => {
                    env.log(&format!("warning: {e}"));
                    Index::new(&model.id, model.dimension)
                }
                Err(e) => return Err(ToolError::Upstream(e.to_string())),
            },
        };
        self.index = index;
        if let Some(docx) = self.fixed.clone() {
            let added = self.add(&docx).map_err(|e| match e {
                ToolError::InvalidArgs(m) => invalid_config(format!("docx: {m}")),
                other => other,
            })?;
            self.opened = Some(added);
        }
        self.prepared = true;
        Ok(())
    }

    /// The tool's description: CrewAI's, rewritten to name the document in fixed mode.
    pub fn description(&self) -> String {
        match &self.fixed {
            Some(d) => format!("A tool that can be used to semantic search a query the {d} DOCX's content."),
            None => GENERAL_DESCRIPTION.to_string(),
        }
    }

    /// The tool's spec: CrewAI's fields, `docx` required only in general mode.
    pub fn spec(&self) -> Spec {
        spec(self.description(), self.fixed.is_none(), self.threshold, self.limit)
    }

    /// The index (for tests and stats).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Runs a call: `args` as the schema describes.
    pub fn call(&mut self, args: &str) -> Result<Output, ToolError> {
        self.prepare()?;
        let args: Value = serde_json::from_str(args)
            .map_err(|e| ToolError::InvalidArgs(format!("arguments are not a JSON object: {e}")))?;
        let obj = args.as_object().ok_or_else(|| ToolError::InvalidArgs("arguments must be a JSON object".into()))?;
        // `retrieval` is eval-only (not in the schema): `quarry eval --compare` asks for each mode.
        if let Some(k) = unknown_key::<Args>(obj, &["retrieval"]) {
            return Err(ToolError::InvalidArgs(format!(
                "unknown argument `{k}`; accepted: {}",
                names::<Args>().join(", ")
            )));
        }
        let text_arg = |k: &str| -> Result<Option<String>, ToolError> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(ToolError::InvalidArgs(format!("`{k}` must be a string, got {other}"))),
            }
        };
        let query = text_arg("search_query")?.unwrap_or_default();
        if query.trim().is_empty() {
            return Err(ToolError::InvalidArgs("`search_query` is required and must not be empty".into()));
        }
        let docx = text_arg("docx")?;
        if docx.is_none() && self.fixed.is_none() {
            return Err(ToolError::InvalidArgs(
                "`docx` is required: the file path or URL of a DOCX file to search".into(),
            ));
        }
        let threshold = match obj.get("similarity_threshold") {
            None | Some(Value::Null) => self.threshold,
            Some(v) => {
                let t = v.as_f64().ok_or_else(|| {
                    ToolError::InvalidArgs(format!("`similarity_threshold` must be a number, got {v}"))
                })?;
                check_threshold(t as f32, "`similarity_threshold`").map_err(ToolError::InvalidArgs)?
            }
        };
        let limit = match obj.get("limit") {
            None | Some(Value::Null) => self.limit,
            Some(v) => {
                let l = v
                    .as_u64()
                    .ok_or_else(|| ToolError::InvalidArgs(format!("`limit` must be a positive integer, got {v}")))?;
                check_limit(usize::try_from(l).unwrap_or(usize::MAX), "`limit`").map_err(ToolError::InvalidArgs)?
            }
        };
        let retrieval = match text_arg("retrieval")?.as_deref() {
            None => self.retrieval,
            Some("global_hybrid") => Retrieval::Hybrid,
            Some("global_vector") => Retrieval::Vector,
            Some(other) => {
                return Err(ToolError::InvalidArgs(format!(
                    "retrieval {other:?} is not offered: docx-search does not route; use \"global_hybrid\" or \"global_vector\""
                )));
            }
        };
        let added = match &docx {
            Some(d) => Some(self.add(d)?),
            None => None,
        };
        self.search(&query, Search { threshold, limit, retrieval }, docx.as_deref(), added)
    }

    /// Indexes `source` (a path in a granted directory, or an http(s) URL) unless it is already
    /// indexed with the same content, model and chunking. On any error the index is unchanged.
    pub fn add(&mut self, source: &str) -> Result<Added, ToolError> {
        let t = std::time::Instant::now();
        let bytes = self.load(source)?;
        let mut added = Added { bytes: bytes.len(), load_ms: ms_since(t), ..Added::default() };
        let sha = content_hash(&bytes);
        let key = self.chunking.key();
        if self.index.is_current(source, &sha, &key) {
            added.chunks = self.index.documents().get(source).map_or(0, |d| d.chunks);
            added.unchanged = true;
            return Ok(added);
        }
        let t = std::time::Instant::now();
        let doc = extract::extract(&bytes).map_err(|e| ToolError::InvalidArgs(format!("cannot read {source}: {e}")))?;
        drop(bytes);
        added.parse_ms = ms_since(t);
        let t = std::time::Instant::now();
        let chunks = self.chunk(&doc, source)?;
        drop(doc);
        if chunks.is_empty() {
            return Err(ToolError::InvalidArgs(format!("cannot read {source}: the document contains no text")));
        }
        added.chunk_ms = ms_since(t);
        let t = std::time::Instant::now();
        let texts: Vec<String> = chunks.iter().map(sections::DocChunk::embedding_text).collect();
        let mut vectors = Vec::with_capacity(texts.len());
        let task = format!("embedding {source}");
        self.env.progress(&task, 0, texts.len() as u64, "chunks");
        for batch in texts.chunks(EMBED_BATCH) {
            vectors.extend(self.env.embed(batch, false)?);
            self.env.progress(&task, vectors.len() as u64, texts.len() as u64, "chunks");
        }
        added.embed_ms = ms_since(t);
        // For the report only: token chunks know their size; character chunks are counted
        // now, timed apart so that embed_ms is embedding alone.
        added.tokens = match chunks.iter().map(|c| c.tokens.map(|n| n as u64)).sum::<Option<u64>>() {
            Some(n) => n,
            None => self.env.count_tokens(&texts)?.iter().map(|&n| u64::from(n)).sum(),
        };
        let t = std::time::Instant::now();
        let records = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| (c.text.clone(), json!({"heading_path": c.heading_path, "chunk_index": i})))
            .collect();
        self.index.put(source, &sha, &key, records, &vectors).map_err(|e| ToolError::Internal(e.to_string()))?;
        if let Some(p) = &self.index_path
            && let Err(e) = self.index.save(std::path::Path::new(p))
        {
            // Search still works from memory; the next open re-embeds what was not saved.
            self.env.log(&format!("warning: {e}"));
        }
        added.index_ms = ms_since(t);
        added.chunks = chunks.len();
        Ok(added)
    }

    fn chunk(&self, doc: &extract::Extracted, source: &str) -> Result<Vec<sections::DocChunk>, ToolError> {
        let sections = sections::sections(doc);
        let tokens = match self.chunking {
            Chunking::Tokens { .. } => Some(self.section_tokens(&sections)?),
            Chunking::Characters { .. } => None,
        };
        sections::chunk(&sections, &self.chunking, tokens.as_deref())
            .map_err(|e| ToolError::Internal(format!("chunking {source}: {e}")))
    }

    /// Every section's token spans and path-line count, from one embedder call: candidate
    /// chunks are then sized locally.
    fn section_tokens(&self, sections: &[sections::Section]) -> Result<Vec<sections::SectionTokens>, ToolError> {
        let lines: Vec<String> =
            sections.iter().map(|s| s.path_line().map(|l| format!("{l}\n")).unwrap_or_default()).collect();
        let texts: Vec<String> = sections.iter().map(|s| s.text.clone()).chain(lines).collect();
        let mut spans = self.env.token_spans(&texts)?;
        if spans.len() != texts.len() {
            return Err(ToolError::Upstream(format!(
                "the embedder tokenised {} texts of {}",
                spans.len(),
                texts.len()
            )));
        }
        let lines = spans.split_off(sections.len());
        Ok(spans
            .into_iter()
            .zip(lines)
            .map(|(text, line)| sections::SectionTokens { text, path_line: line.len() })
            .collect())
    }

    fn load(&self, source: &str) -> Result<Vec<u8>, ToolError> {
        let s = source.trim();
        if s.is_empty() {
            return Err(ToolError::InvalidArgs(format!("Source must be a valid file path or URL, got: {source:?}")));
        }
        let lower = s.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return self.env.fetch(s, self.timeout, self.max_bytes);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(ToolError::Denied(format!(
                "Blocked unsafe URL scheme {scheme:?} in {source}: only http(s) URLs and paths in granted directories are allowed"
            )));
        }
        let path = normalise(s);
        let granted = self.env.granted_dirs();
        if !granted.iter().any(|g| within(&path, g)) {
            return Err(ToolError::Denied(format!(
                "Blocked unsafe path outside the granted directories: {source} (granted: {})",
                if granted.is_empty() { "none".to_string() } else { granted.join(", ") }
            )));
        }
        self.env.read_file(&path, self.max_bytes)
    }

    /// The best chunks for `query` (in document `only`, when given), by `how.retrieval`, as
    /// (position, normalised vector score), best first.
    fn rank(
        &mut self,
        query: &str,
        qv: &[f32],
        how: Search,
        only: Option<&str>,
    ) -> Result<Vec<(usize, f32)>, ToolError> {
        let failed = |e: StoreError| ToolError::Internal(e.to_string());
        // The chunks of document `only`, by position; none when every document is searched.
        let allowed: Option<Vec<bool>> = only.map(|d| self.index.chunks().iter().map(|c| c.source == d).collect());
        let by_position = |i: usize| allowed.as_ref().is_none_or(|a| a[i]);
        let filter = allowed.as_ref().map(|_| &by_position as &dyn Fn(usize) -> bool);
        match how.retrieval {
            Retrieval::Vector => Ok(self
                .index
                .nearest(qv, how.limit, filter)
                .map_err(failed)?
                .into_iter()
                .filter(|&(_, score)| score >= how.threshold)
                .collect()),
            Retrieval::Hybrid => {
                let by_vector: Vec<usize> =
                    self.index.nearest(qv, LEG_DEPTH, filter).map_err(failed)?.into_iter().map(|(i, _)| i).collect();
                let keep = |c: &rag_core::store::StoredChunk| only.is_none_or(|d| c.source == d);
                let by_keyword: Vec<usize> = self
                    .index
                    .keyword_search(
                        query,
                        LEG_DEPTH,
                        only.map(|_| &keep as &dyn Fn(&rag_core::store::StoredChunk) -> bool),
                    )
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect();
                let index = &self.index;
                let score = |i: usize| rag_core::score::from_cosine(rag_core::score::dot(qv, index.vector(i)));
                let pool = how.limit.saturating_mul(hybrid::DIVERSITY_POOL);
                let fused = hybrid::fuse(&by_vector, &by_keyword, pool, how.threshold, score);
                // One passage per section (document and heading path) first.
                let chunks = index.chunks();
                let section = |f: &hybrid::Fused| {
                    let c = &chunks[f.position];
                    (c.source.clone(), c.meta.get("heading_path").map(Value::to_string))
                };
                Ok(hybrid::spread(fused, how.limit, section).into_iter().map(|f| (f.position, f.score)).collect())
            }
        }
    }

    fn search(
        &mut self,
        query: &str,
        how: Search,
        only: Option<&str>,
        added: Option<Added>,
    ) -> Result<Output, ToolError> {
        let Search { threshold, limit, retrieval } = how;
        let qv = self.env.embed(&[query.to_string()], true)?;
        let qv = qv.into_iter().next().ok_or_else(|| ToolError::Upstream("the embedder returned no vector".into()))?;
        let found = self.rank(query, &qv, how, only)?;
        let chunks = self.index.chunks();
        let hits: Vec<Hit> = found
            .iter()
            .map(|&(i, score)| {
                let chunk = &chunks[i];
                let mut meta = chunk.meta.clone();
                if let Some(m) = meta.as_object_mut() {
                    let path: Vec<String> = m
                        .get("heading_path")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                        .unwrap_or_default();
                    m.insert("heading".into(), Value::String(path.join(" > ")));
                    m.insert("document".into(), Value::String(chunk.source.clone()));
                }
                Hit {
                    content: chunk.text.clone(),
                    score: Some(score),
                    source: Some(chunk.source.clone()),
                    metadata: meta,
                }
            })
            .collect();
        let text = if hits.is_empty() {
            "No relevant content found.".to_string()
        } else {
            let joined: Vec<&str> = hits.iter().map(|h| h.content.as_str()).collect();
            format!("Relevant Content:\n{}", joined.join("\n\n"))
        };
        let mut extra = json!({
            "model": self.model.id,
            "chunking": self.chunking.key(),
            "similarity_threshold": json_f32(threshold),
            "limit": limit,
            "retrieval": retrieval.name(),
            "documents": self.index.documents().len(),
            "chunks": self.index.chunks().len(),
        });
        if let (Some(a), Some(d)) = (&self.opened, &self.fixed) {
            extra["opened"] = a.json();
            extra["opened"]["docx"] = json!(d);
        }
        if let (Some(a), Some(d)) = (added, only) {
            extra["added"] = a.json();
            extra["added"]["docx"] = json!(d);
        }
        Ok(Output { text, hits, extra })
    }
}

/// How one search ranks and cuts.
#[derive(Clone, Copy, Debug)]
struct Search {
    threshold: f32,
    limit: usize,
    retrieval: Retrieval,
}

/// `path` made absolute (relative paths are relative to `/`) with `.` and `..` resolved
/// lexically, so `..` cannot climb out of a granted directory.
pub fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Whether normalised `path` is `dir` or inside it.
fn within(path: &str, dir: &str) -> bool {
    let dir = normalise(dir);
    dir == "/" || path == dir || path.starts_with(&format!("{dir}/"))
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    /// The derived schema is the one written by hand before (as of c8d5fbc), in both modes.
    #[test]
    fn the_derived_schema_is_the_hand_written_one() {
        let expected = |required: Value| {
            json!({
                "type": "object",
                "properties": {
                    "docx": {"type": "string", "description": "File path or URL of a DOCX file to be searched"},
                    "search_query": {
                        "type": "string",
                        "description": "Mandatory search query you want to use to search the DOCX's content"
                    },
                    "similarity_threshold": {
                        "type": "number", "minimum": 0, "maximum": 1,
                        "description": "Minimum relevance score in [0, 1] (default 0.4)"
                    },
                    "limit": {
                        "type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                        "description": "Most results to return (default 5)"
                    }
                },
                "required": required,
                "additionalProperties": false
            })
        };
        let general = spec(String::new(), true, 0.4, 5);
        assert_eq!(general.schema, expected(json!(["docx", "search_query"])));
        assert_eq!(spec(String::new(), false, 0.4, 5).schema, expected(json!(["search_query"])));
    }
}
