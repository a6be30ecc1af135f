//! The wasmtime engine: epoch interruption with a ticker thread, the pooling
//! allocator, and the precompiled-component cache.
//!
//! Defaults and why:
//! - epochs tick every [`EPOCH_TICK`]; each call sets its own deadline (deadlines
//!   are absolute, so a store's previous deadline must never carry over);
//! - the pooling allocator reserves address space for [`POOL_MEMORIES`] memories
//!   of up to [`MAX_MEMORY`] each, so instantiating (and recycling) an instance
//!   is a few microseconds; the per-instance limit is enforced by the store's
//!   limiter, not by the pool.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Component;

use super::cache::{CacheOutcome, ComponentCache};
use super::compile::{CompileError, CompileLimits};
use crate::capability::AppStates;
use crate::support::limits::DEFAULT_MAX_COMPONENT_BYTES;

/// How often the epoch advances.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
pub use super::settings::POOL_MEMORIES;

/// Errors building the engine or loading a component.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime rejected the engine configuration.
    #[error("cannot configure the wasm engine: {0}")]
    Config(String),
    /// The component file could not be read.
    #[error("cannot read component {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Compiling it went over `[host] compile_memory` or `compile_timeout`, or the worker failed.
    #[error("{path}: {source}")]
    CompileLimit {
        /// The file.
        path: PathBuf,
        /// Which limit, or what failed.
        source: CompileError,
    },
    /// The component file is over `[host] max_component_size`.
    #[error(
        "{path} is over {limit} bytes, [host] max_component_size: compiling it would take minutes and gigabytes; raise the limit if you trust this component"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The bytes are not a valid component for this engine.
    #[error("{path} is not a valid WebAssembly component: {message}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
}

/// The shared engine. Cheap to clone.
#[derive(Clone)]
pub struct QuarryEngine {
    engine: wasmtime::Engine,
    cache: Arc<ComponentCache>,
    yields: bool,
    max_component_bytes: u64,
    compile_limits: CompileLimits,
    /// The capabilities' app-level state: every store made with this engine shares it.
    apps: Arc<AppStates>,
}

impl QuarryEngine {
    /// Builds the engine and starts its epoch ticker; precompiled components go to `cache_dir`.
    pub fn new(cache_dir: PathBuf) -> Result<Self, EngineError> {
        Self::with_cache(Some(cache_dir))
    }

    /// [`QuarryEngine::new`], or with no disk cache at all for `None`.
    pub fn with_cache(cache_dir: Option<PathBuf>) -> Result<Self, EngineError> {
        let cfg = super::settings::config();
        let engine = wasmtime::Engine::new(&cfg).map_err(|e| EngineError::Config(format!("{e:#}")))?;
        start_ticker(engine.weak());
        let cache = Arc::new(ComponentCache::new(cache_dir, &engine));
        Ok(QuarryEngine {
            engine,
            cache,
            yields: true,
            max_component_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            compile_limits: CompileLimits::default(),
            apps: Arc::default(),
        })
    }

    /// The capabilities' app-level state of every store made with this engine (one per
    /// registry: its loaded models, inference threads, progress bus, lookup threads, directory
    /// usage).
    pub fn apps(&self) -> &Arc<AppStates> {
        &self.apps
    }

    /// The same engine, refusing component files over `bytes`.
    pub fn with_max_component_bytes(mut self, bytes: u64) -> Self {
        self.max_component_bytes = bytes;
        self
    }

    /// The same engine, compiling within `limits` (where it compiles in a worker; see
    /// [`super::compile`]).
    pub fn with_compile_limits(mut self, limits: CompileLimits) -> Self {
        self.compile_limits = limits;
        self
    }

    /// The largest component file this engine compiles.
    pub fn max_component_bytes(&self) -> u64 {
        self.max_component_bytes
    }

    /// The same engine whose stores trap at their deadline without yielding their thread at
    /// each tick before it. Only `make bench` uses it, to measure what yielding costs: a host
    /// serving more than one call at a time needs yielding (the tool instances' pools).
    pub fn without_yielding(mut self) -> Self {
        self.yields = false;
        self
    }

    /// Whether guest code yields its thread at every epoch tick.
    pub fn yields(&self) -> bool {
        self.yields
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// Loads the component in `bytes` (read from `path`): from memory or the
    /// on-disk cache when these exact bytes were compiled before, else compiles
    /// and caches it. Blocking: call off the async executor.
    pub fn load_component(
        &self,
        path: &std::path::Path,
        bytes: &[u8],
    ) -> Result<(Arc<Component>, CacheOutcome), EngineError> {
        self.cache.load(&self.engine, bytes, self.compile_limits).map_err(|e| match e {
            CompileError::Invalid(message) => EngineError::Compile { path: path.to_path_buf(), message },
            source => EngineError::CompileLimit { path: path.to_path_buf(), source },
        })
    }

    /// Components held in memory now (those some instance uses).
    pub fn components_in_memory(&self) -> usize {
        self.cache.in_memory()
    }

    /// Number of epoch ticks covering `d`, plus one so a deadline never fires early.
    pub fn ticks(d: Duration) -> u64 {
        (d.as_nanos() / EPOCH_TICK.as_nanos()) as u64 + 1
    }
}

/// Advances the epoch every tick until the engine is dropped.
fn start_ticker(weak: wasmtime::EngineWeak) {
    let spawned = std::thread::Builder::new().name("quarry-epoch".into()).spawn(move || {
        while let Some(engine) = weak.upgrade() {
            engine.increment_epoch();
            drop(engine);
            std::thread::sleep(EPOCH_TICK);
        }
    });
    if let Err(e) = spawned {
        // Without a ticker no deadline would ever fire; say so loudly.
        tracing::error!("cannot start the epoch ticker, call deadlines will not fire: {e}");
    }
}
