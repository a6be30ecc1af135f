//! What every RAG tool component has in common with its host: the error kinds of WIT's
//! `tool-error` and the embedding model's identity. Plain Rust, so a tool's logic is tested
//! natively; each component maps these onto its own WIT bindings.

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
