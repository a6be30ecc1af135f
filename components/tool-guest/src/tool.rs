//! What every tool component has in common with its host: the error kinds of WIT's
//! `tool-error`, the shape of a call's output, the embedding model's
//! identity, and what a RAG tool asks of its environment ([`BaseEnv`]). Plain Rust, so a tool's
//! logic is tested natively; `tool-guest` maps these onto the WIT bindings, once for every
//! component.

/// Why a call or an open failed; maps one-to-one onto WIT's `tool-error`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolError {
    /// Arguments that do not fit the schema, or a document that cannot be read.
    #[error("{0}")]
    InvalidArgs(String),
    /// A bad configuration.
    #[error("{0}")]
    InvalidConfig(String),
    /// A named thing (file, chapter) that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The embedder or a download failed.
    #[error("{0}")]
    Upstream(String),
    /// Outside the grants.
    #[error("{0}")]
    Denied(String),
    /// A bug.
    #[error("{0}")]
    Internal(String),
}

/// One token of a text, as the byte range `(start, end)` of it that the embedder's tokenizer
/// read (WIT's `token-span`; the same pair as a RAG library's chunker takes).
pub type TokenSpan = (u32, u32);

/// The embedding model, as the embedder reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    /// Model id.
    pub id: String,
    /// Vector length.
    pub dimension: usize,
    /// Window in tokens.
    pub max_tokens: usize,
}

/// Where a hit lies in its source (WIT's `location`): Quarry's own terms, which clients and
/// `quarry eval` read without knowing the tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Location {
    /// The heading path from the top of the document, outermost first; empty before the first
    /// heading.
    pub path: Vec<String>,
    /// The lines it spans, 1-based, both inclusive.
    pub lines: Option<(u32, u32)>,
    /// The id of the chapter it lies in, for a tool that numbers chapters.
    pub chapter: Option<String>,
}

/// One result of a call, as WIT's `hit` carries it (each component maps it onto its bindings).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The retrieved text.
    pub content: String,
    /// A relevance score in [0, 1], when the tool has one.
    pub score: Option<f32>,
    /// Where the content came from.
    pub source: Option<String>,
    /// Where in its source, when the tool knows.
    pub location: Option<Location>,
    /// A resource holding the hit (`quarry://self/...`), which the client may read.
    pub resource: Option<String>,
    /// The tool's own further fields, a JSON object.
    pub metadata: serde_json::Value,
}

/// One chapter a question was routed to (WIT's `routed-chapter`).
#[derive(Debug, Clone, PartialEq)]
pub struct RoutedChapter {
    /// Its id.
    pub chapter: String,
    /// Its heading path, outermost first.
    pub path: Vec<String>,
    /// How sure the tool is, in [0, 1].
    pub confidence: Option<f32>,
}

/// Where a tool that routes sent a question (WIT's `route`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route {
    /// The chapters searched, best first.
    pub chapters: Vec<RoutedChapter>,
    /// Every top-level chapter's title, most likely first.
    pub ranking: Vec<String>,
}

/// A call's result, as WIT's `tool-output` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The whole answer as an LLM reads it.
    pub text: String,
    /// The results, typed.
    pub hits: Vec<Hit>,
    /// Where the question was routed, for a tool that routes.
    pub route: Option<Route>,
    /// The tool's own further data (paging tokens, the query's settings).
    pub extra: serde_json::Value,
    /// Blocks after the text (links to the resources the hits lie in); usually none.
    pub content: Vec<crate::catalog::Block>,
}

/// What every RAG tool asks of its environment: the host-linked embedder, granted files, the
/// log and the progress bar. A tool's own `Env` extends it with what only that tool needs;
/// `tool-guest` implements it once over the WIT imports.
pub trait BaseEnv {
    /// The embedder's model.
    fn model(&self) -> Model;
    /// Embeds texts as queries or documents, one vector each.
    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError>;
    /// Tokens each text takes in the embedder's window.
    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, ToolError>;
    /// Each text's tokens as byte spans of it, in order (a chunker sizes chunks by them).
    fn token_spans(&self, texts: &[String]) -> Result<Vec<Vec<TokenSpan>>, ToolError>;
    /// Reads a granted file, refusing more than `max_bytes` (see [`read_file`]).
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ToolError>;
    /// A line for the host's log.
    fn log(&self, line: &str);
    /// Reports progress of long work.
    fn progress(&self, task: &str, done: u64, total: u64, unit: &str);
    /// Opens corpus `name`, kept by the host (WIT's `corpus`), for vectors of `shape`. An
    /// environment without host corpora refuses.
    fn open_corpus(
        &self,
        name: &str,
        shape: rag_core::corpus::Shape,
    ) -> Result<std::rc::Rc<dyn rag_core::corpus::Corpus>, ToolError> {
        let _ = shape;
        Err(ToolError::InvalidConfig(format!("corpus {name:?}: this environment keeps no corpora")))
    }
    /// Asks the MCP client behind the call (WIT's `client.ask`): `params` are the JSON params of
    /// the request `kind` names, the answer its JSON result. An environment without a client
    /// answers `Unsupported`.
    fn ask(&self, key: &str, kind: Ask, params: &serde_json::Value) -> Result<serde_json::Value, AskError> {
        let _ = (key, params);
        Err(AskError::Unsupported(format!("no client to ask for {kind:?}")))
    }
}

/// What a tool may ask its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A completion from the client's model.
    Sampling,
    /// A form the user fills in.
    Elicitation,
    /// The client's roots.
    Roots,
}

/// Why a question got no answer (WIT's `ask-error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskError {
    /// The client cannot answer it, or the grant does not allow asking: go on without.
    Unsupported(String),
    /// The answer comes with the call made again: return now.
    Pending,
    /// The client refused or failed.
    Failed(String),
}

/// A corpus's error as a tool's: a shape mismatch is the config's fault (another model, another
/// corpus), a refusal the grant's, the rest the host's.
pub fn corpus_error(e: rag_core::corpus::CorpusError) -> ToolError {
    use rag_core::corpus::CorpusError as E;
    match e {
        E::Shape(m) => ToolError::InvalidConfig(m),
        E::Denied(m) => ToolError::Denied(m),
        E::Invalid(m) => ToolError::Internal(m),
        E::Busy(m) | E::Unavailable(m) => ToolError::Upstream(m),
    }
}

/// Reads `path` (a file the host granted), refusing more than `max_bytes` before reading it.
/// `what` names the kind of file expected, for messages ("a DOCX file"). A missing file is
/// CrewAI's `File does not exist: ...`; a refused one is `Blocked unsafe path ...`.
pub fn read_file(path: &str, max_bytes: u64, what: &str) -> Result<Vec<u8>, ToolError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound(format!("File does not exist: {path}")),
        std::io::ErrorKind::PermissionDenied => ToolError::Denied(format!("Blocked unsafe path {path}: {e}")),
        _ => ToolError::InvalidArgs(format!("cannot open {path}: {e}")),
    })?;
    let meta = file.metadata().map_err(|e| ToolError::InvalidArgs(format!("cannot read {path}: {e}")))?;
    if meta.is_dir() {
        return Err(ToolError::InvalidArgs(format!("{path} is a directory, not {what}")));
    }
    if meta.len() > max_bytes {
        return Err(ToolError::InvalidArgs(format!(
            "{path} is {} bytes, over the {max_bytes}-byte limit (config max_bytes)",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grows after the check is still cut at the limit.
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::InvalidArgs(format!("cannot read {path}: {e}")))?;
    if bytes.len() as u64 > max_bytes {
        return Err(ToolError::InvalidArgs(format!("{path} grew past the {max_bytes}-byte limit (config max_bytes)")));
    }
    Ok(bytes)
}

pub use crate::args::Spec;

/// Refuses a call to a tool other than `offered`, the one tool of a single-tool component.
pub fn check_tool(tool: &str, offered: &str) -> Result<(), ToolError> {
    if tool == offered {
        Ok(())
    } else {
        Err(ToolError::NotFound(format!("no tool `{tool}`; this component offers `{offered}`")))
    }
}
