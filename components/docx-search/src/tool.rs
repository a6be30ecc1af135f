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
//!
//! The index is a corpus ([`rag_core::corpus`], [`tool_guest::index_home`]): the host's when the
//! config names one (`corpus`), shared by every instance that opens it, the instance's own
//! (`corpus = "self"`, or `index_dir`), or one in memory. In it a document's
//! chunks are `KEY#POSITION`, with the fields `source` (the path or URL) and `doc` (the key: the
//! document's bytes, the chunking and the model). A document's first chunk also carries what
//! the tool needs to know of the document (`head`, `sha256`, `chunks`), so a document's
//! bookkeeping is read and written with it, per change; the corpus's notes keep only the number
//! of documents (`docx-search-documents`), and, from earlier versions, a listing under
//! `docx-search` that shrinks as those documents are indexed again.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use rag_core::chunk::{Chunking, RESERVED_TOKENS};
use rag_core::corpus::{Clause, Corpus, Filter, Match, Metric, Record, Shape};
use rag_core::hybrid::{self, LEG_DEPTH};
use rag_core::score::{from_cosine, json_f32};
use rag_core::store::{Index, StoreError, content_hash};
use serde::Deserialize;
use serde_json::{Value, json};
use tool_guest::args::{self, ArgsError, JsonSchema, Spec};

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

/// A call's arguments: the type the spec's schema is derived from and the call parses into
/// ([`DocxTool::call`]); blank values and ranges are checked after the parse, in CrewAI's words.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// File path or URL of a DOCX file to be searched
    docx: Option<String>,
    /// Mandatory search query you want to use to search the DOCX's content
    #[schemars(required)]
    search_query: Option<String>,
    #[schemars(range(min = 0, max = 1))]
    similarity_threshold: Option<f64>,
    #[schemars(range(min = 1, max = MAX_LIMIT))]
    limit: Option<u64>,
    /// How to rank: global_hybrid (vectors and keywords) or global_vector (CrewAI's ranking); default: the instance's config
    retrieval: Option<ArgRetrieval>,
}

/// [`Args`]'s `retrieval`: docx-search does not route, both search every document (what
/// `quarry eval --compare` sets for each); the variants undocumented, so that the schema is a
/// plain `enum`.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum ArgRetrieval {
    GlobalHybrid,
    GlobalVector,
}

/// A parse failure in this tool's words.
fn bad_args(e: ArgsError) -> ToolError {
    ToolError::InvalidArgs(match e {
        ArgsError::NotJson(e) => format!("arguments are not a JSON object: {e}"),
        ArgsError::NotObject => "arguments must be a JSON object".into(),
        ArgsError::Unknown { key, names } => format!("unknown argument `{key}`; accepted: {}", names.join(", ")),
        ArgsError::Missing(arg) => format!("`{arg}` is required"),
        ArgsError::Invalid { arg, got, .. } if arg == "retrieval" => format!(
            "retrieval {} is not offered: docx-search does not route; use \"global_hybrid\" or \"global_vector\"",
            got.strip_prefix("unknown variant ").unwrap_or("of this kind")
        ),
        ArgsError::Invalid { arg, .. } if arg == "limit" => "`limit` must be a positive integer".into(),
        ArgsError::Invalid { arg, expected, .. } => format!("`{arg}` must be {expected}"),
    })
}
/// CrewAI's download timeout.
pub const DEFAULT_DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest document accepted, by default.
pub const DEFAULT_MAX_BYTES: u64 = 100 << 20;
/// The index file inside `index_dir`.
pub const INDEX_FILE: &str = "docx-search.qix";
/// Texts per embedder call while ingesting.
const EMBED_BATCH: usize = 32;

pub use tool_guest::tool::{BaseEnv, Hit, Location, Model, Output, ToolError, corpus_error};

/// The key of the corpus's notes under which this tool keeps its documents.
const NOTES_KEY: &str = "docx-search";
/// Chunks per corpus call.
const CORPUS_BATCH: usize = 256;

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
    /// The corpus to keep the index in: a host corpus (`[corpora.NAME]`, granted `rw`), or
    /// `self`, the instance's own.
    corpus: Option<String>,
    /// A granted directory where an earlier version kept an index file: its documents move into
    /// the corpus once. Without `corpus`, it stands for `corpus = "self"`; without either the
    /// index lives in memory.
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
    /// The corpus the index is kept in, by name (none: in memory).
    corpus_name: Option<String>,
    /// The index, once prepared.
    corpus: Option<Rc<dyn Corpus>>,
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
                    "config: {e} (accepted keys: docx, corpus, index_dir, chunking, similarity_threshold, limit, retrieval, max_bytes, download_timeout_secs)"
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
        let corpus_name =
            tool_guest::index_home::configured(cfg.corpus, cfg.index_dir.as_deref()).map_err(invalid_config)?;
        let index_path = match cfg.index_dir {
            Some(dir) => {
                if !env.granted_dirs().iter().any(|g| within(&normalise(&dir), g)) {
                    return Err(ToolError::Denied(format!(
                        "index_dir {dir:?} is not a granted directory: grant it (read-only is enough: an index file there is moved into the corpus), or remove it and write corpus = \"self\""
                    )));
                }
                Some(format!("{}/{INDEX_FILE}", dir.trim_end_matches('/')))
            }
            None => None,
        };
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
            corpus_name,
            corpus: None,
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
        let shape = Shape { dimension: self.model.dimension, metric: Metric::Cosine };
        let (corpus, kept_in) =
            tool_guest::index_home::open(&self.env, self.corpus_name.as_deref(), shape).map_err(|e| match e {
                ToolError::InvalidArgs(m) => invalid_config(m),
                e => e,
            })?;
        self.corpus = Some(corpus);
        self.corpus_name = kept_in;
        // The index file of an earlier version: its documents come into the corpus (once, moved,
        // for a host corpus; at every start for one in memory).
        if let Some(p) = self.index_path.clone() {
            let (model, env) = (&self.model, &self.env);
            match Index::load(std::path::Path::new(&p), &model.id, model.dimension) {
                Ok(Some(index)) => {
                    let moved = self.import(&index)?;
                    if moved > 0 && self.corpus_name.is_some() {
                        self.env.log(&format!(
                            "moved {moved} documents of {p} into corpus {}; the file is no longer written and may be deleted",
                            self.corpus_name.as_deref().unwrap_or_default()
                        ));
                    }
                }
                Ok(None) => {}
                Err(e @ (StoreError::Corrupt { .. } | StoreError::OtherModel { .. })) => {
                    env.log(&format!("warning: {e}"));
                }
                Err(e) => return Err(ToolError::Upstream(e.to_string())),
            }
        }
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

    /// The corpus the index is kept in (prepared: opened).
    /// The corpus it serves from, once prepared.
    pub(crate) fn corpus_ref(&self) -> Result<Rc<dyn Corpus>, ToolError> {
        self.corpus()
    }

    /// The documents indexed, by source.
    pub(crate) fn documents_indexed(&self) -> Result<Vec<(String, DocNote)>, ToolError> {
        Ok(all_documents(&*self.corpus()?)?.into_iter().collect())
    }

    fn corpus(&self) -> Result<Rc<dyn Corpus>, ToolError> {
        self.corpus.clone().ok_or_else(|| ToolError::Internal("the index is not open: prepare first".into()))
    }

    /// Documents and chunks in the index.
    pub fn counts(&self) -> Result<(usize, u64), ToolError> {
        let info = self.corpus()?.info().map_err(corpus_error)?;
        Ok((document_count(&info.notes), info.chunks))
    }

    /// The key of `source` with content `sha` indexed with this chunking and model.
    fn doc_key(&self, source: &str, sha: &str) -> String {
        let mut k = content_hash(format!("{source}\n{sha}\n{}\n{}", self.chunking.key(), self.model.id).as_bytes());
        k.truncate(24);
        k
    }

    /// Brings the documents of an index file into the corpus (those it lacks), in one commit;
    /// returns how many.
    fn import(&self, index: &Index) -> Result<usize, ToolError> {
        let corpus = self.corpus()?;
        let notes = all_documents(&*corpus)?;
        let mut records = Vec::new();
        let mut docs = Vec::new();
        for (source, d) in index.documents() {
            let key = self.doc_key(source, &d.content_sha256);
            if d.chunking != self.chunking.key() || notes.get(source).is_some_and(|n| n.key == key) {
                continue;
            }
            let at = index.chunks().iter().enumerate().filter(|(_, c)| &c.source == source);
            for (n, (i, c)) in at.enumerate() {
                records.push(self.record(&key, source, n, c.text.clone(), index.vector(i).to_vec(), c.meta.clone()));
            }
            docs.push((source.clone(), DocNote { key, sha256: d.content_sha256.clone(), chunks: d.chunks }));
        }
        if docs.is_empty() {
            return Ok(0);
        }
        let moved = docs.len();
        self.store(docs, records)?;
        Ok(moved)
    }

    /// Chunk `n` of document `source` (key `key`) as the corpus keeps it.
    fn record(&self, key: &str, source: &str, n: usize, text: String, vector: Vec<f32>, meta: Value) -> Record {
        Record {
            id: format!("{key}#{n}"),
            text,
            vector,
            metadata: meta.to_string(),
            fields: [("source".to_string(), vec![source.to_string()]), ("doc".to_string(), vec![key.to_string()])]
                .into(),
        }
    }

    /// Stores documents `docs` with their chunks `records` under the corpus's lease, in one
    /// commit that also removes their earlier versions. Each document's first chunk carries its
    /// bookkeeping; the notes' count of documents goes up by the sources not indexed before.
    fn store(&self, docs: Vec<(String, DocNote)>, mut records: Vec<Record>) -> Result<(), ToolError> {
        let corpus = self.corpus()?;
        let mut writer = corpus.write().map_err(corpus_error)?;
        // Read under the lease: the notes and documents as the last writer left them.
        let info = corpus.info().map_err(corpus_error)?;
        let mut all: serde_json::Map<String, Value> = serde_json::from_str(&info.notes).unwrap_or_default();
        let mut legacy = documents(&info.notes);
        let mut count = match all.get(COUNT_KEY).and_then(Value::as_u64) {
            Some(n) => n as usize,
            // Written by an earlier version: its listing is every document there is.
            None => legacy.len(),
        };
        let fresh: std::collections::HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
        for (source, _) in &docs {
            let known = legacy.remove(source).is_some() || head(&*corpus, source)?.is_some();
            if !known {
                count += 1;
            }
            let mut stale = Vec::new();
            loop {
                let page = corpus.list(&Filter::exact("source", source), stale.len(), 4096).map_err(corpus_error)?;
                let done = page.len() < 4096;
                stale.extend(page);
                if done {
                    break;
                }
            }
            stale.retain(|id| !fresh.contains(id.as_str()));
            for ids in stale.chunks(CORPUS_BATCH) {
                writer.remove(ids.to_vec()).map_err(corpus_error)?;
            }
        }
        drop(fresh);
        for (_, note) in &docs {
            let head = format!("{}#0", note.key);
            if let Some(r) = records.iter_mut().find(|r| r.id == head) {
                r.fields.insert(HEAD_FIELD.into(), vec!["1".into()]);
                r.fields.insert(SHA_FIELD.into(), vec![note.sha256.clone()]);
                r.fields.insert(CHUNKS_FIELD.into(), vec![note.chunks.to_string()]);
            }
        }
        for batch in records.chunks(CORPUS_BATCH) {
            writer.upsert(batch.to_vec()).map_err(corpus_error)?;
        }
        if legacy.is_empty() {
            all.remove(NOTES_KEY);
        } else {
            all.insert(NOTES_KEY.into(), serde_json::to_value(&legacy).unwrap_or_default());
        }
        all.insert(COUNT_KEY.into(), json!(count));
        // Dropping the writer on an error discards the batch: the corpus stays as it was.
        writer.set_notes(notes_within_limit(all, legacy.len())?).map_err(corpus_error)?;
        writer.commit().map_err(corpus_error)?;
        Ok(())
    }

    /// Runs a call: `args` as the schema describes.
    pub fn call(&mut self, args: &str) -> Result<Output, ToolError> {
        self.prepare()?;
        let a: Args = args::parse_text(args).map_err(bad_args)?;
        let query = a.search_query.unwrap_or_default();
        if query.trim().is_empty() {
            return Err(ToolError::InvalidArgs("`search_query` is required and must not be empty".into()));
        }
        let docx = a.docx;
        if docx.is_none() && self.fixed.is_none() {
            return Err(ToolError::InvalidArgs(
                "`docx` is required: the file path or URL of a DOCX file to search".into(),
            ));
        }
        let threshold = match a.similarity_threshold {
            None => self.threshold,
            Some(t) => check_threshold(t as f32, "`similarity_threshold`").map_err(ToolError::InvalidArgs)?,
        };
        let limit = match a.limit {
            None => self.limit,
            Some(l) => {
                check_limit(usize::try_from(l).unwrap_or(usize::MAX), "`limit`").map_err(ToolError::InvalidArgs)?
            }
        };
        let retrieval = match a.retrieval {
            None => self.retrieval,
            Some(ArgRetrieval::GlobalHybrid) => Retrieval::Hybrid,
            Some(ArgRetrieval::GlobalVector) => Retrieval::Vector,
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
        let key = self.doc_key(source, &sha);
        if let Some(d) = document(&*self.corpus()?, source)?
            && d.key == key
        {
            added.chunks = d.chunks;
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
        if vectors.len() != chunks.len() {
            return Err(ToolError::Upstream(format!(
                "the embedder returned {} vectors for {} texts",
                vectors.len(),
                chunks.len()
            )));
        }
        let t = std::time::Instant::now();
        let records = chunks
            .iter()
            .zip(vectors)
            .enumerate()
            .map(|(i, (c, v))| {
                self.record(
                    &key,
                    source,
                    i,
                    c.text.clone(),
                    v,
                    json!({"heading_path": c.heading_path, "chunk_index": i}),
                )
            })
            .collect();
        let note = DocNote { key, sha256: sha, chunks: chunks.len() };
        self.store(vec![(source.to_string(), note)], records)?;
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
    /// (chunk, normalised vector score), best first.
    fn rank(&self, query: &str, qv: &[f32], how: Search, only: Option<&str>) -> Result<Vec<(Record, f32)>, ToolError> {
        let corpus = self.corpus()?;
        let filter = only.map_or_else(Filter::all, |d| Filter::exact("source", d));
        let fetch = |ids: Vec<String>| -> Result<Vec<Record>, ToolError> {
            let got = corpus.get_without_vectors(&ids).map_err(corpus_error)?;
            got.into_iter()
                .map(|r| r.ok_or_else(|| ToolError::Internal("a chunk the search found is not in the corpus".into())))
                .collect()
        };
        match how.retrieval {
            Retrieval::Vector => {
                let near = corpus.nearest(qv, how.limit, &filter).map_err(corpus_error)?;
                let kept: Vec<(String, f32)> = near
                    .into_iter()
                    .map(|f| (f.id, from_cosine(f.score)))
                    .filter(|&(_, score)| score >= how.threshold)
                    .collect();
                let scores: Vec<f32> = kept.iter().map(|k| k.1).collect();
                Ok(fetch(kept.into_iter().map(|k| k.0).collect())?.into_iter().zip(scores).collect())
            }
            Retrieval::Hybrid => {
                let near = corpus.nearest(qv, LEG_DEPTH, &filter).map_err(corpus_error)?;
                let words = corpus.keyword(query, Some(qv), LEG_DEPTH, &filter).map_err(corpus_error)?;
                // The legs' ids as numbers for the fusion, each with its vector score.
                let mut ids: Vec<String> = Vec::new();
                let mut number: HashMap<String, usize> = HashMap::new();
                let mut score: Vec<f32> = Vec::new();
                let mut leg = |found: Vec<rag_core::corpus::Found>, keyword: bool| -> Vec<usize> {
                    found
                        .into_iter()
                        .map(|f| {
                            let s = from_cosine(if keyword { f.similarity.unwrap_or(-1.0) } else { f.score });
                            *number.entry(f.id.clone()).or_insert_with(|| {
                                ids.push(f.id);
                                score.push(s);
                                ids.len() - 1
                            })
                        })
                        .collect()
                };
                let by_vector = leg(near, false);
                let by_keyword = leg(words, true);
                let pool = how.limit.saturating_mul(hybrid::DIVERSITY_POOL);
                let fused = hybrid::fuse(&by_vector, &by_keyword, pool, how.threshold, |i| score[i]);
                let records = fetch(fused.iter().map(|f| ids[f.position].clone()).collect())?;
                let ranked: Vec<(Record, f32)> = records.into_iter().zip(fused.iter().map(|f| f.score)).collect();
                // One passage per section (document and heading path) first.
                let section = |(r, _): &(Record, f32)| {
                    let meta: Value = serde_json::from_str(&r.metadata).unwrap_or_default();
                    (r.fields.get("source").cloned(), meta.get("heading_path").map(Value::to_string))
                };
                Ok(hybrid::spread(ranked, how.limit, section))
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
        let hits: Vec<Hit> = found
            .into_iter()
            .map(|(chunk, score)| {
                let source = chunk.fields.get("source").and_then(|s| s.first()).cloned().unwrap_or_default();
                let mut meta: Value = serde_json::from_str(&chunk.metadata).unwrap_or_default();
                let mut location = None;
                if let Some(m) = meta.as_object_mut() {
                    // The heading path is Quarry's (the hit's location); the rest is this tool's.
                    let path: Vec<String> =
                        m.remove("heading_path").and_then(|p| serde_json::from_value(p).ok()).unwrap_or_default();
                    m.insert("heading".into(), Value::String(path.join(" > ")));
                    m.insert("document".into(), Value::String(source.clone()));
                    location = Some(Location { path, lines: None, chapter: None });
                }
                Hit {
                    content: chunk.text,
                    score: Some(score),
                    source: Some(source),
                    location,
                    resource: None,
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
        let (documents, chunks) = self.counts()?;
        let mut extra = json!({
            "model": self.model.id,
            "chunking": self.chunking.key(),
            "similarity_threshold": json_f32(threshold),
            "limit": limit,
            "retrieval": retrieval.name(),
            "documents": documents,
            "chunks": chunks,
        });
        if let (Some(a), Some(d)) = (&self.opened, &self.fixed) {
            extra["opened"] = a.json();
            extra["opened"]["docx"] = json!(d);
        }
        if let (Some(a), Some(d)) = (added, only) {
            extra["added"] = a.json();
            extra["added"]["docx"] = json!(d);
        }
        Ok(Output { text, hits, route: None, extra, content: Vec::new() })
    }
}

/// How one search ranks and cuts.
#[derive(Clone, Copy, Debug)]
struct Search {
    threshold: f32,
    limit: usize,
    retrieval: Retrieval,
}

/// What the corpus's notes keep of one indexed document.
#[derive(Clone, Debug, serde::Serialize, Deserialize)]
pub(crate) struct DocNote {
    /// The key of its chunks (`KEY#POSITION`, field `doc`).
    pub(crate) key: String,
    /// sha256 of its bytes.
    sha256: String,
    /// How many chunks it has.
    pub(crate) chunks: usize,
}

/// The notes `all` as written, or, when an earlier version's listing (`listed` documents) makes
/// them larger than notes may be, which limit it is and what to do.
fn notes_within_limit(all: serde_json::Map<String, Value>, listed: usize) -> Result<String, ToolError> {
    let notes = Value::Object(all).to_string();
    let limit = rag_core::corpus::MAX_NOTES_BYTES;
    if notes.len() > limit {
        return Err(ToolError::InvalidConfig(format!(
            "this corpus's notes would hold {} bytes, over their limit of {limit}: an earlier version of docx-search listed its {listed} documents there; nothing was added. Give this tool another corpus (corpus = \"NAME\" in its config), or remove documents from this one",
            notes.len()
        )));
    }
    Ok(notes)
}

/// The field a document's first chunk carries the document's content hash in.
const SHA_FIELD: &str = "sha256";
/// The field a document's first chunk carries the document's number of chunks in.
const CHUNKS_FIELD: &str = "chunks";
/// The corpus notes' key for the number of documents indexed.
const COUNT_KEY: &str = "docx-search-documents";

/// The field that marks a document's first chunk (value `1`), so that a filter finds them.
const HEAD_FIELD: &str = "head";

/// Every document's first chunk.
fn heads() -> Filter {
    Filter::exact(HEAD_FIELD, "1")
}

/// A first chunk's document, by source.
fn note_of(r: &Record) -> Option<(String, DocNote)> {
    let one = |f: &str| r.fields.get(f)?.first().cloned();
    let chunks = one(CHUNKS_FIELD)?.parse().ok()?;
    Some((one("source")?, DocNote { key: one("doc")?, sha256: one(SHA_FIELD)?, chunks }))
}

/// What document `source`'s first chunk says of it, if the index holds it so.
fn head(corpus: &dyn Corpus, source: &str) -> Result<Option<DocNote>, ToolError> {
    let only = heads().and(Clause { field: "source".into(), values: vec![source.into()], how: Match::Exact });
    let ids = corpus.list(&only, 0, 1).map_err(corpus_error)?;
    let first = corpus.get_without_vectors(&ids).map_err(corpus_error)?.into_iter().flatten().next();
    Ok(first.as_ref().and_then(note_of).map(|(_, n)| n))
}

/// What the index holds of document `source`, if it holds it: read from its first chunk, or an
/// earlier version's listing in the notes.
fn document(corpus: &dyn Corpus, source: &str) -> Result<Option<DocNote>, ToolError> {
    match head(corpus, source)? {
        Some(n) => Ok(Some(n)),
        None => Ok(documents(&corpus.info().map_err(corpus_error)?.notes).remove(source)),
    }
}

/// Every document the index holds, by source (a listing: for resources and imports, not
/// searches).
fn all_documents(corpus: &dyn Corpus) -> Result<std::collections::BTreeMap<String, DocNote>, ToolError> {
    let mut out = documents(&corpus.info().map_err(corpus_error)?.notes);
    let mut offset = 0;
    loop {
        let page = corpus.list(&heads(), offset, 1024).map_err(corpus_error)?;
        offset += page.len();
        for r in corpus.get_without_vectors(&page).map_err(corpus_error)?.into_iter().flatten() {
            if let Some((source, note)) = note_of(&r) {
                out.insert(source, note);
            }
        }
        if page.len() < 1024 {
            return Ok(out);
        }
    }
}

/// The number of documents the notes say the index holds.
fn document_count(notes: &str) -> usize {
    let v: Value = serde_json::from_str(notes).unwrap_or_default();
    match v.get(COUNT_KEY).and_then(Value::as_u64) {
        Some(n) => n as usize,
        None => documents(notes).len(),
    }
}

/// The documents the corpus's notes list as this tool's, by source.
fn documents(notes: &str) -> std::collections::BTreeMap<String, DocNote> {
    let notes: Value = serde_json::from_str(notes).unwrap_or_default();
    notes.get(NOTES_KEY).and_then(|d| serde_json::from_value(d.clone()).ok()).unwrap_or_default()
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

    /// A parse failure names what was given, in this tool's words.
    #[test]
    fn a_retrieval_not_offered_is_named() {
        let e = args::parse::<Args>(&json!({"search_query": "q", "retrieval": "routed"})).map_err(bad_args).err();
        assert!(
            matches!(&e, Some(ToolError::InvalidArgs(m)) if m.starts_with("retrieval `routed` is not offered")),
            "{e:?}"
        );
        let e = args::parse::<Args>(&json!({"search_query": "q", "similarity_threshold": "x"})).map_err(bad_args);
        assert_eq!(e.err(), Some(ToolError::InvalidArgs("`similarity_threshold` must be a number".into())));
    }

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
                    },
                    "retrieval": {
                        "type": "string", "enum": ["global_hybrid", "global_vector"],
                        "description": "How to rank: global_hybrid (vectors and keywords) or global_vector (CrewAI's ranking); default: the instance's config"
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

#[cfg(test)]
mod notes_tests {
    use super::*;

    /// Notes past their limit (an earlier version's listing) are refused naming the limit and
    /// what to do; within it they are written as given.
    #[test]
    fn notes_past_their_limit_say_which_limit_and_what_to_do() {
        let small: serde_json::Map<String, Value> = [("other".to_string(), json!(1))].into_iter().collect();
        assert_eq!(notes_within_limit(small, 0).unwrap(), r#"{"other":1}"#);
        let big: serde_json::Map<String, Value> = [("x".to_string(), json!("y".repeat(70_000)))].into_iter().collect();
        let Err(ToolError::InvalidConfig(m)) = notes_within_limit(big, 460) else { panic!("past the limit") };
        assert!(m.contains("limit of 65536") && m.contains("460 documents") && m.contains("another corpus"), "{m}");
        assert!(m.contains("nothing was added"), "{m}");
    }

    /// The notes' count, or an earlier version's listing's length.
    #[test]
    fn documents_are_counted_from_the_notes() {
        assert_eq!(document_count(r#"{"docx-search-documents": 12}"#), 12);
        let listing = r#"{"docx-search": {"/a.docx": {"key": "k", "sha256": "s", "chunks": 3}}}"#;
        assert_eq!(document_count(listing), 1);
        assert_eq!(document_count("{}"), 0);
    }
}
