//! What serves a tool's `embedder` import: the seam between the capability and whatever computes
//! embeddings (an embedder component pool today; native inference can be another backend).

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use crate::bindings::{EmbedError, Embedding, InputKind, ModelInfo, TokenSpan};

/// A boxed future, for object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Who asks for embeddings: the tool instance, and when its call must end.
#[derive(Clone, Copy, Debug)]
pub struct EmbedCaller<'a> {
    /// The tool instance's name (`""` for the host itself).
    pub client: &'a str,
    /// The deadline of the tool's call; none for the host itself.
    pub deadline: Option<Instant>,
}

impl EmbedCaller<'_> {
    /// The host itself (tests, benches): no tool, no deadline beyond the embedder's own.
    pub const HOST: EmbedCaller<'static> = EmbedCaller { client: "", deadline: None };
}

/// What serves a tool's embedder import.
pub trait EmbedderBackend: Send + Sync {
    /// The model's identity.
    fn info(&self) -> ModelInfo;
    /// Embeds `texts` in order for `caller`: callers share the backend's workers in turn, and
    /// the backend spends no time for a call past its deadline.
    fn embed_for(
        &self,
        caller: EmbedCaller<'_>,
        texts: Vec<String>,
        kind: InputKind,
    ) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>>;
    /// Counts the tokens of `texts` in order (see the WIT `count-tokens`).
    fn count_tokens_for(
        &self,
        caller: EmbedCaller<'_>,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>>;
    /// The byte spans of each text's tokens (see the WIT `token-spans`), checked: one list per
    /// text, spans inside their text and in order.
    fn token_spans_for(
        &self,
        caller: EmbedCaller<'_>,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Vec<TokenSpan>>, EmbedError>>;
    /// [`EmbedderBackend::embed_for`] for the host itself.
    fn embed(&self, texts: Vec<String>, kind: InputKind) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>> {
        self.embed_for(EmbedCaller::HOST, texts, kind)
    }
    /// [`EmbedderBackend::count_tokens_for`] for the host itself.
    fn count_tokens(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>> {
        self.count_tokens_for(EmbedCaller::HOST, texts)
    }
    /// [`EmbedderBackend::token_spans_for`] for the host itself.
    fn token_spans(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<TokenSpan>>, EmbedError>> {
        self.token_spans_for(EmbedCaller::HOST, texts)
    }
}
