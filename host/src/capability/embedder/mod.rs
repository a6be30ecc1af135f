//! The `embedder` capability: a tool's `quarry:retrieval/embedder` import, served by the
//! embedder its config names.
//!
//! The host decides at load time: a component that imports `embedder` must name one in its
//! config (`embedder = "NAME"`), or loading fails with a config error. Behind the import is an
//! [`EmbedderBackend`], so the backend (an embedder component in its own store, a pool of them,
//! or native inference) can change without touching any tool; the component pool that serves
//! it today is the host core's `embedders` module.

mod backend;

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::{HasData, Linker};

use crate::bindings::quarry::retrieval::embedder as wit;
use crate::bindings::{EmbedError, Embedding, InputKind, ModelInfo, TokenSpan};

pub use backend::{BoxFuture, EmbedCaller, EmbedderBackend};

/// The WIT name of the import.
pub const EMBEDDER_IMPORT: &str = "quarry:retrieval/embedder@0.6.0";
/// The most texts a backend embeds for one caller before it serves the next (the component
/// pool's chunk: callers share the pool in turn, chunk by chunk).
pub const MAX_CHUNK: usize = 32;

/// One store's embedder: the backend its tool is linked to, and the tool's name (the backend
/// serves its callers in turn, by name).
pub struct State {
    backend: Option<Arc<dyn EmbedderBackend>>,
    client: String,
}

impl State {
    /// The state of instance `client`, linked to `backend` (none for a tool that imports no
    /// embedder, and for embedders themselves).
    pub fn new(backend: Option<Arc<dyn EmbedderBackend>>, client: &str) -> State {
        State { backend, client: client.to_string() }
    }
}

/// The embedder capability. Its grant is the instance's `embedder = "NAME"`, which the config
/// checks (the backend comes with the store's context).
pub struct Embedder;

impl super::Capability for Embedder {
    type RawGrant = ();
    type Grant = ();
    type RawSection = ();
    type RawHost = ();
    type Section = ();
    type AppState = ();
    type State = State;

    fn grant(_: (), _: &(), _: &super::GrantContext<'_>) -> Result<(), crate::support::values::KeyError> {
        Ok(())
    }

    fn state(_: &(), _: &(), cx: &mut super::StoreContext<'_>) -> Result<State, super::SandboxError> {
        Ok(State::new(cx.embedder.clone(), cx.instance))
    }

    fn link<T: super::CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        link(l, |t| view(t.parts()))
    }
}

/// What the `embedder` functions need of a store: its state, and the running call's deadline
/// (the embedder spends no time for the call past it).
pub struct View<'a> {
    state: &'a mut State,
    deadline: Instant,
    /// The calling tool's memory grant: an answer larger than it could not be handed over.
    memory: usize,
}

/// The [`View`] of a store.
pub fn view(parts: super::StoreView<'_>) -> View<'_> {
    View { state: parts.states.get_mut::<Embedder>(), deadline: parts.deadline, memory: parts.memory }
}

/// What the answer of an embed of `texts` texts of a `dimension`-wide model holds, in bytes
/// (each vector's floats, its list and its record).
pub fn answer_bytes(texts: usize, dimension: u32) -> usize {
    texts.saturating_mul((dimension as usize).saturating_mul(4).saturating_add(16))
}

struct HasView;

impl HasData for HasView {
    type Data<'a> = View<'a>;
}

/// Adds the `embedder` interface, served by the [`View`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> View<'_>) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasView>(l, get)
}

impl View<'_> {
    fn caller(&self) -> EmbedCaller<'_> {
        EmbedCaller { client: &self.state.client, deadline: Some(self.deadline) }
    }
}

impl wit::Host for View<'_> {
    async fn info(&mut self) -> wasmtime::Result<ModelInfo> {
        match &self.state.backend {
            Some(e) => Ok(e.info()),
            // Unreachable through configuration (load refuses it); a host fault if it happens.
            None => Err(wasmtime::format_err!("no embedder is linked to this tool instance")),
        }
    }

    async fn embed(
        &mut self,
        texts: Vec<String>,
        kind: InputKind,
    ) -> wasmtime::Result<Result<Vec<Embedding>, EmbedError>> {
        match &self.state.backend {
            Some(e) => {
                // The whole batch's answer is held by the host until it is handed to the tool,
                // whose memory must then hold it: sized against the tool's grant first.
                let held = answer_bytes(texts.len(), e.info().dimension);
                if held > self.memory {
                    return Ok(Err(EmbedError::InvalidInput(format!(
                        "the vectors of {} texts would take {held} bytes, over this tool's grants.memory of {} bytes; embed fewer texts at once",
                        texts.len(),
                        self.memory
                    ))));
                }
                Ok(e.embed_for(self.caller(), texts, kind).await)
            }
            None => Ok(Err(no_embedder())),
        }
    }

    async fn count_tokens(&mut self, texts: Vec<String>) -> wasmtime::Result<Result<Vec<u32>, EmbedError>> {
        match &self.state.backend {
            Some(e) => Ok(e.count_tokens_for(self.caller(), texts).await),
            None => Ok(Err(no_embedder())),
        }
    }

    async fn token_spans(&mut self, texts: Vec<String>) -> wasmtime::Result<Result<Vec<Vec<TokenSpan>>, EmbedError>> {
        match &self.state.backend {
            Some(e) => Ok(e.token_spans_for(self.caller(), texts).await),
            None => Ok(Err(no_embedder())),
        }
    }
}

fn no_embedder() -> EmbedError {
    EmbedError::Unavailable(
        "no embedder is linked to this tool instance; set `embedder = \"NAME\"` in its config".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit::Host;

    /// A tool with no embedder linked (load refuses one that imports the interface) gets a
    /// service error saying what to set, and `info` is a host fault, not a made-up model.
    #[tokio::test]
    async fn without_a_backend_calls_say_what_to_configure() {
        let mut state = State::new(None, "t");
        let mut s = View { state: &mut state, deadline: std::time::Instant::now(), memory: 64 << 20 };
        let e = s.embed(vec!["x".into()], InputKind::Query).await.unwrap().unwrap_err();
        assert!(matches!(&e, EmbedError::Unavailable(m) if m.contains("embedder = \"NAME\"")), "{e:?}");
        assert!(s.count_tokens(vec![]).await.unwrap().is_err());
        assert!(s.info().await.is_err());
    }
}
