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
    /// Counts the tokens of `texts` in order (see the WIT `count-tokens`).
    fn count_tokens(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>>;
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
            None => Ok(Err(no_embedder())),
        }
    }

    async fn count_tokens(&mut self, texts: Vec<String>) -> wasmtime::Result<Result<Vec<u32>, EmbedError>> {
        match &self.embedder {
            Some(e) => Ok(e.count_tokens(texts).await),
            None => Ok(Err(no_embedder())),
        }
    }
}

fn no_embedder() -> EmbedError {
    EmbedError::Unavailable(
        "no embedder is linked to this tool instance; set `embedder = \"NAME\"` in its config".into(),
    )
}

/// An embedder component: a pool of instances, each in its own store, each
/// having run `model.load(config)`. Small requests go to one instance; a large
/// batch is split into contiguous chunks run in parallel, one per instance, so
/// ingest uses every core. Faults recycle the instance that had them.
pub struct ComponentEmbedder {
    config: Arc<InstanceConfig>,
    engine: QuarryEngine,
    pre: EmbedderHostPre<StoreState>,
    info: ModelInfo,
    /// SHA-256 of the component version.
    pub hash: [u8; 32],
    members: Vec<tokio::sync::Mutex<Option<Live>>>,
    next: std::sync::atomic::AtomicUsize,
}

struct Live {
    store: Store<StoreState>,
    bindings: EmbedderHost,
}

/// Below this many texts per instance, a batch is not worth splitting.
const MIN_CHUNK: usize = 4;

impl ComponentEmbedder {
    /// Compiles the embedder configured by `config` and starts its pool
    /// (`config.pool` instances, loaded concurrently).
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
        let size = config.pool.max(1);
        let mut tasks = Vec::with_capacity(size);
        for _ in 0..size {
            let (engine, config, pre) = (engine.clone(), config.clone(), pre.clone());
            tasks.push(tokio::spawn(async move { start(&engine, &config, &pre).await }));
        }
        let mut members = Vec::with_capacity(size);
        let mut info = None;
        for t in tasks {
            let (live, i) = t.await.map_err(|e| link(format!("loader task failed: {e}")))??;
            info.get_or_insert(i);
            members.push(tokio::sync::Mutex::new(Some(live)));
        }
        let info = info.ok_or_else(|| link("empty pool".into()))?;
        tracing::info!(target: "quarry::embedder", embedder = %config.name, pool = size, model = %info.id, "embedder ready");
        Ok(ComponentEmbedder {
            config,
            engine: engine.clone(),
            pre,
            info,
            hash,
            members,
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Embeds `texts`, splitting a large batch over the pool (see the type docs).
    pub async fn embed_batch(
        self: Arc<Self>,
        texts: Vec<String>,
        kind: InputKind,
    ) -> Result<Vec<Embedding>, EmbedError> {
        let n = self.members.len();
        if n == 1 || texts.len() < 2 * MIN_CHUNK {
            let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % n;
            return self.run_on(i, texts, kind).await;
        }
        let chunk = texts.len().div_ceil(n).max(MIN_CHUNK);
        let mut tasks = Vec::new();
        let mut rest = texts;
        let mut i = 0;
        while !rest.is_empty() {
            let tail = rest.split_off(chunk.min(rest.len()));
            let part = std::mem::replace(&mut rest, tail);
            let me = self.clone();
            // Spawned, not joined in place: each chunk must run on its own worker thread.
            tasks.push(tokio::spawn(async move { me.run_on(i, part, kind).await }));
            i += 1;
        }
        let mut out = Vec::new();
        for t in tasks {
            out.extend(t.await.map_err(|e| EmbedError::Internal(format!("embed task failed: {e}")))??);
        }
        Ok(out)
    }

    async fn run_on(&self, member: usize, texts: Vec<String>, kind: InputKind) -> Result<Vec<Embedding>, EmbedError> {
        let kind = match kind {
            InputKind::Query => ex::InputKind::Query,
            InputKind::Document => ex::InputKind::Document,
        };
        let out = self
            .on_member(member, |live| {
                Box::pin(async move {
                    live.bindings.quarry_retrieval_embedder().call_embed(&mut live.store, &texts, kind).await
                })
            })
            .await?;
        Ok(out.into_iter().map(|e| Embedding { vector: e.vector, truncated: e.truncated }).collect())
    }

    /// Counts tokens on one member of the pool (tokenising is cheap: no splitting).
    pub async fn count_tokens(&self, texts: Vec<String>) -> Result<Vec<u32>, EmbedError> {
        let member = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.members.len();
        self.on_member(member, |live| {
            Box::pin(async move {
                live.bindings.quarry_retrieval_embedder().call_count_tokens(&mut live.store, &texts).await
            })
        })
        .await
    }

    /// Runs one export call on pool member `member` (restarting it if a fault recycled it),
    /// bounded by the embedder's deadline; a fault recycles the member.
    async fn on_member<T>(
        &self,
        member: usize,
        call: impl for<'a> FnOnce(&'a mut Live) -> BoxFuture<'a, wasmtime::Result<Result<T, ex::EmbedError>>>,
    ) -> Result<T, EmbedError> {
        let name = &self.config.name;
        let mut guard = self.members[member].lock().await;
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
        let res = tokio::time::timeout(deadline + WALL_GRACE, call(live)).await;
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
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// The model's identity.
    pub fn info(&self) -> ModelInfo {
        self.info.clone()
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
        Box::pin(self.current().embed_batch(texts, kind))
    }

    fn count_tokens(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<u32>, EmbedError>> {
        let current = self.current();
        Box::pin(async move { current.count_tokens(texts).await })
    }
}
