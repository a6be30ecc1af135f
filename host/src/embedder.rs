//! The `embedder` capability: a tool's `quarry:retrieval/embedder` import,
//! served by the embedder instance its config names.
//!
//! The host decides at load time: a component that imports `embedder` must name
//! one in its config (`embedder = "NAME"`), or loading fails with a config error.
//! Behind the import is an [`EmbedderBackend`], so the backend (an embedder
//! component in its own store, a pool of them, or native inference) can change
//! without touching any tool.

use std::future::Future;
use std::pin::Pin;

use crate::bindings::quarry::retrieval::embedder::Host;
use crate::bindings::{EmbedError, Embedding, InputKind, ModelInfo};
use crate::sandbox::StoreState;

/// The WIT name of the import.
pub const EMBEDDER_IMPORT: &str = "quarry:retrieval/embedder@0.1.0";

/// A boxed future, for object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What serves a tool's embedder import.
pub trait EmbedderBackend: Send + Sync {
    /// The model's identity.
    fn info(&self) -> ModelInfo;
    /// Embeds `texts` in order.
    fn embed(
        &self,
        texts: Vec<String>,
        kind: InputKind,
    ) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>>;
}

impl Host for StoreState {
    async fn info(&mut self) -> wasmtime::Result<ModelInfo> {
        match &self.embedder {
            Some(e) => Ok(e.info()),
            // Unreachable through configuration (load refuses it); a host fault if it happens.
            None => Err(wasmtime::format_err!(
                "no embedder is linked to this tool instance"
            )),
        }
    }

    async fn embed(
        &mut self,
        texts: Vec<String>,
        kind: InputKind,
    ) -> wasmtime::Result<Result<Vec<Embedding>, EmbedError>> {
        match &self.embedder {
            Some(e) => Ok(e.embed(texts, kind).await),
            None => Ok(Err(EmbedError::Unavailable(
                "no embedder is linked to this tool instance; set `embedder = \"NAME\"` in its config".into(),
            ))),
        }
    }
}
