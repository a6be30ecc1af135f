//! The guest side every RAG tool component shares, so that it is written once: the bindings of
//! Quarry's `types`, `embedder` and `progress` interfaces (components reuse them through
//! wit-bindgen's `with:`), and the mapping between them and rag-core's plain Rust types.
//! wasm32 only: natively the crate is empty.

#[cfg(target_arch = "wasm32")]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "rag-imports",
    });
}

#[cfg(target_arch = "wasm32")]
pub use bindings::quarry::retrieval::{embedder, progress, types};

#[cfg(target_arch = "wasm32")]
mod imports {
    use rag_core::tool::{Model, ToolError};

    use super::embedder::{self, EmbedError, InputKind};
    use super::types;

    /// rag-core's error as WIT's `tool-error`.
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

    fn embed_err(e: EmbedError) -> ToolError {
        ToolError::Upstream(match e {
            EmbedError::InvalidInput(m) => format!("the embedder refused the input: {m}"),
            EmbedError::Unavailable(m) => format!("the embedder is unavailable: {m}"),
            EmbedError::Internal(m) => format!("the embedder failed: {m}"),
        })
    }

    /// The host-linked embedder's model.
    pub fn model() -> Model {
        let i = embedder::info();
        Model { id: i.id, dimension: i.dimension as usize, max_tokens: i.max_tokens as usize }
    }

    /// Embeds texts as documents or as queries; one vector per text, checked.
    pub fn embed(texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError> {
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

    /// Tokens per text in the embedder's window.
    pub fn count_tokens(texts: &[String]) -> Result<Vec<u32>, ToolError> {
        embedder::count_tokens(texts).map_err(embed_err)
    }

    /// Reports progress to the host.
    pub fn progress(task: &str, done: u64, total: u64, unit: &str) {
        super::progress::report(task, done, total, unit);
    }
}

#[cfg(target_arch = "wasm32")]
pub use imports::{count_tokens, embed, model, progress, to_wit};
