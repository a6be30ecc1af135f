//! The `embedder` capability: a tool's `quarry:retrieval/embedder` import,
//! served by the embedder instance its config names.
//!
//! The host decides at load time: a component that imports `embedder` must name
//! one in its config (`embedder = "NAME"`), or loading fails with a config error.
//! Behind the import is an [`EmbedderBackend`], so the backend (an embedder
//! component in its own store, a pool of them, or native inference) can change
//! without touching any tool. Today's backend is [`ComponentEmbedder`]: an
//! `[embedders.NAME]` component in its own sandbox, held in an [`EmbedderSlot`]
//! so either side can be hot-swapped alone.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use wasmtime::Store;
use wasmtime::component::Linker;

use crate::bindings::embedder_world::exports::quarry::retrieval::embedder as ex;
use crate::bindings::embedder_world::{EmbedderHost, EmbedderHostPre};
use crate::bindings::quarry::retrieval::embedder::Host;
use crate::bindings::{EmbedError, Embedding, InputKind, ModelInfo};
use crate::config::InstanceConfig;
use crate::engine::QuarryEngine;
use crate::instance::{OpenError, WALL_GRACE, compile, new_store, settle};
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
    fn embed(&self, texts: Vec<String>, kind: InputKind) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>>;
}

impl Host for StoreState {
    async fn info(&mut self) -> wasmtime::Result<ModelInfo> {
        match &self.embedder {
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
        match &self.embedder {
            Some(e) => Ok(e.embed(texts, kind).await),
            None => Ok(Err(EmbedError::Unavailable(
                "no embedder is linked to this tool instance; set `embedder = \"NAME\"` in its config".into(),
            ))),
        }
    }
}

/// An embedder component running in its own store: `model.load(config)` once,
/// then `embed` calls forwarded from tools. Faults recycle it like a tool.
pub struct ComponentEmbedder {
    config: Arc<InstanceConfig>,
    engine: QuarryEngine,
    pre: EmbedderHostPre<StoreState>,
    info: ModelInfo,
    /// SHA-256 of the component version.
    pub hash: [u8; 32],
    live: tokio::sync::Mutex<Option<Live>>,
}

struct Live {
    store: Store<StoreState>,
    bindings: EmbedderHost,
}

impl ComponentEmbedder {
    /// Compiles, instantiates and loads the embedder configured by `config`.
    pub async fn open(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        config: Arc<InstanceConfig>,
    ) -> Result<ComponentEmbedder, OpenError> {
        let path = &config.component;
        let (component, hash, _) = compile(engine, path).await?;
        let link = |message: String| OpenError::Link { path: path.clone(), message };
        let pre = linker.instantiate_pre(&component).map_err(|e| link(format!("{e:#}")))?;
        let pre = EmbedderHostPre::new(pre).map_err(|e| {
            link(format!(
                "{e:#} (an embedder component must export `quarry:retrieval/model` and `quarry:retrieval/embedder`; see wit/)"
            ))
        })?;
        let (live, info) = start(engine, &config, &pre).await?;
        Ok(ComponentEmbedder {
            config,
            engine: engine.clone(),
            pre,
            info,
            hash,
            live: tokio::sync::Mutex::new(Some(live)),
        })
    }

    async fn embed_inner(&self, texts: Vec<String>, kind: InputKind) -> Result<Vec<Embedding>, EmbedError> {
        let name = &self.config.name;
        let mut guard = self.live.lock().await;
        if guard.is_none() {
            let (live, _) = start(&self.engine, &self.config, &self.pre)
                .await
                .map_err(|e| EmbedError::Unavailable(format!("embedder {name:?} cannot restart: {e}")))?;
            *guard = Some(live);
        }
        let Some(live) = guard.as_mut() else {
            unreachable!("set just above");
        };
        let deadline = self.config.grants.deadline;
        live.store.set_epoch_deadline(QuarryEngine::ticks(deadline));
        let kind = match kind {
            InputKind::Query => ex::InputKind::Query,
            InputKind::Document => ex::InputKind::Document,
        };
        let res = tokio::time::timeout(
            deadline + WALL_GRACE,
            live.bindings.quarry_retrieval_embedder().call_embed(&mut live.store, &texts, kind),
        )
        .await;
        match settle(&mut live.store, deadline, res) {
            Err(fault) => {
                *guard = None;
                tracing::warn!(target: "quarry::embedder", embedder = %name, "{fault}; recycling the instance");
                Err(EmbedError::Unavailable(format!("embedder {name:?} {fault}; it was recycled")))
            }
            Ok(Err(e)) => Err(match e {
                ex::EmbedError::InvalidInput(m) => EmbedError::InvalidInput(m),
                ex::EmbedError::Unavailable(m) => EmbedError::Unavailable(m),
                ex::EmbedError::Internal(m) => EmbedError::Internal(m),
            }),
            Ok(Ok(v)) => Ok(v.into_iter().map(|e| Embedding { vector: e.vector, truncated: e.truncated }).collect()),
        }
    }
}

impl EmbedderBackend for ComponentEmbedder {
    fn info(&self) -> ModelInfo {
        self.info.clone()
    }

    fn embed(&self, texts: Vec<String>, kind: InputKind) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>> {
        Box::pin(self.embed_inner(texts, kind))
    }
}

/// Instantiates an embedder and runs `model.load(config)`.
async fn start(
    engine: &QuarryEngine,
    config: &InstanceConfig,
    pre: &EmbedderHostPre<StoreState>,
) -> Result<(Live, ModelInfo), OpenError> {
    let name = config.name.clone();
    let fault = |fault| OpenError::Fault { instance: name.clone(), fault };
    let mut store = new_store(engine, config, None)?;
    let deadline = config.grants.deadline;
    store.set_epoch_deadline(QuarryEngine::ticks(deadline));
    let res = tokio::time::timeout(deadline + WALL_GRACE, pre.instantiate_async(&mut store)).await;
    let bindings = settle(&mut store, deadline, res).map_err(fault)?;
    store.set_epoch_deadline(QuarryEngine::ticks(deadline));
    let res = tokio::time::timeout(
        deadline + WALL_GRACE,
        bindings.quarry_retrieval_model().call_load(&mut store, &config.config_json),
    )
    .await;
    match settle(&mut store, deadline, res).map_err(fault)? {
        Ok(i) => {
            Ok((Live { store, bindings }, ModelInfo { id: i.id, dimension: i.dimension, max_tokens: i.max_tokens }))
        }
        Err(e) => {
            let reason = match e {
                ex::EmbedError::InvalidInput(m) | ex::EmbedError::Unavailable(m) | ex::EmbedError::Internal(m) => m,
            };
            Err(OpenError::ModelRejected { instance: name.clone(), reason })
        }
    }
}

/// Serves a tool's embedder import from whichever version of an embedder is
/// current, so an embedder can be swapped without reopening its tools.
pub struct EmbedderSlot {
    current: RwLock<Arc<ComponentEmbedder>>,
}

impl EmbedderSlot {
    /// A slot serving `e`.
    pub fn new(e: ComponentEmbedder) -> Self {
        EmbedderSlot { current: RwLock::new(Arc::new(e)) }
    }

    /// The version serving now.
    pub fn current(&self) -> Arc<ComponentEmbedder> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the serving version; calls in flight finish on the old one.
    pub fn replace(&self, e: ComponentEmbedder) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(e);
    }
}

impl EmbedderBackend for EmbedderSlot {
    fn info(&self) -> ModelInfo {
        self.current().info()
    }

    fn embed(&self, texts: Vec<String>, kind: InputKind) -> BoxFuture<'_, Result<Vec<Embedding>, EmbedError>> {
        let current = self.current();
        Box::pin(async move { current.embed_inner(texts, kind).await })
    }
}
