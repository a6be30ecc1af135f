//! What serves a tool's `embedder` import: the seam between the capability and whatever computes
//! embeddings (an embedder component pool today; native inference can be another backend).

use std::future::Future;
use std::pin::Pin;

use crate::bindings::{EmbedError, Embedding, InputKind, ModelInfo};

/// A boxed future, for object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What serves a tool's embedder import.
pub trait EmbedderBackend: Send + Sync {
    /// The model's identity.
    fn info(&self) -> ModelInfo;
    /// Embeds `texts` in order for `client` (the calling tool instance: clients share the
    /// backend's workers in turn).
    fn embed_for(
        &self,
        client: &str,
        texts: Vec<String>,
        kind: InputKind,
    ) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>>;
    /// Counts the tokens of `texts` in order (see the WIT `count-tokens`).
    fn count_tokens_for(&self, client: &str, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>>;
    /// [`EmbedderBackend::embed_for`] for the host itself.
    fn embed(&self, texts: Vec<String>, kind: InputKind) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>> {
        self.embed_for("", texts, kind)
    }
    /// [`EmbedderBackend::count_tokens_for`] for the host itself.
    fn count_tokens(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>> {
        self.count_tokens_for("", texts)
    }
}
