//! The SDK's types to and from the WIT bindings, and the imports as a [`BaseEnv`].

use crate::tool::{BaseEnv, Model, Output, TokenSpan, ToolError};

use crate::embedder::{self, EmbedError, InputKind};
use crate::types;

/// A tool's error as WIT's `tool-error`.
pub fn to_wit(e: ToolError) -> types::ToolError {
    match e {
        ToolError::InvalidArgs(m) => types::ToolError::InvalidArgs(m),
        ToolError::InvalidConfig(m) => types::ToolError::InvalidConfig(m),
        ToolError::NotFound(m) => types::ToolError::NotFound(m),
        ToolError::Upstream(m) => types::ToolError::Upstream(m),
        ToolError::Denied(m) => types::ToolError::Denied(m),
        ToolError::Internal(m) => types::ToolError::Internal(m),
    }
}

/// A call's result as WIT's `tool-output`.
pub fn output(out: Output) -> types::ToolOutput {
    types::ToolOutput {
        text: out.text,
        hits: out
            .hits
            .into_iter()
            .map(|h| types::Hit {
                content: h.content,
                score: h.score,
                source: h.source,
                metadata: h.metadata.to_string(),
            })
            .collect(),
        extra: Some(out.extra.to_string()),
    }
}

/// Specs as WIT's `tool-spec`s.
pub fn specs(list: impl IntoIterator<Item = crate::tool::Spec>) -> Vec<types::ToolSpec> {
    list.into_iter()
        .map(|s| types::ToolSpec { args_schema: s.schema_text(), name: s.name, description: s.description })
        .collect()
}

fn embed_err(e: EmbedError) -> ToolError {
    ToolError::Upstream(match e {
        EmbedError::InvalidInput(m) => format!("the embedder refused the input: {m}"),
        EmbedError::Unavailable(m) => format!("the embedder is unavailable: {m}"),
        EmbedError::Internal(m) => format!("the embedder failed: {m}"),
    })
}

/// The WIT imports as the SDK's [`BaseEnv`]: the host-linked embedder, the preopens, stderr
/// (the host's log) and the host's progress bar. A component implements its own `Env` on top.
pub struct GuestEnv {
    /// What files this component reads, for messages ("a DOCX file").
    pub file_kind: &'static str,
}

impl BaseEnv for GuestEnv {
    fn model(&self) -> Model {
        let i = embedder::info();
        Model { id: i.id, dimension: i.dimension as usize, max_tokens: i.max_tokens as usize }
    }

    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError> {
        let kind = if query { InputKind::Query } else { InputKind::Document };
        let out = embedder::embed(texts, kind).map_err(embed_err)?;
        if out.len() != texts.len() {
            return Err(ToolError::Upstream(format!(
                "the embedder returned {} vectors for {} texts",
                out.len(),
                texts.len()
            )));
        }
        Ok(out.into_iter().map(|e| e.vector).collect())
    }

    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, ToolError> {
        embedder::count_tokens(texts).map_err(embed_err)
    }

    fn token_spans(&self, texts: &[String]) -> Result<Vec<Vec<TokenSpan>>, ToolError> {
        let out = embedder::token_spans(texts).map_err(embed_err)?;
        Ok(out.into_iter().map(|t| t.into_iter().map(|s| (s.start, s.end)).collect()).collect())
    }

    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        crate::tool::read_file(path, max_bytes, self.file_kind)
    }

    fn log(&self, line: &str) {
        eprintln!("{line}");
    }

    fn progress(&self, task: &str, done: u64, total: u64, unit: &str) {
        crate::progress::report(task, done, total, unit);
    }

    fn open_corpus(
        &self,
        name: &str,
        shape: rag_core::corpus::Shape,
    ) -> Result<std::rc::Rc<dyn rag_core::corpus::Corpus>, ToolError> {
        let c = crate::host_corpus::open(name, shape).map_err(crate::tool::corpus_error)?;
        Ok(std::rc::Rc::new(c))
    }
}
