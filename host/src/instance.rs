//! One loaded component version ([`Plugin`]) and one running tool instance
//! ([`ToolInstance`]): instantiate, `open`, `call` under a deadline, and
//! recycle after a fault.
//!
//! Lifecycle: [`Plugin::load`] compiles (or loads from cache) and
//! pre-instantiates a component once per version. [`ToolInstance::open`]
//! instantiates it in a fresh store (microseconds with the pooling allocator),
//! calls `open(config)` and `specs()`. Each [`ToolInstance::call`] sets a fresh
//! epoch deadline, runs under a wall-clock timeout too (time blocked in host
//! calls does not advance epochs), and on any trap, out-of-memory or missed
//! deadline drops the store; the next call starts a new one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker, ResourceAny};
use wasmtime::{Store, Trap};

use crate::bindings::{ToolError, ToolHost, ToolHostPre, ToolOutput, ToolSpec};
use crate::cache::{CacheOutcome, ComponentCache};
use crate::config::InstanceConfig;
use crate::embedder::{EMBEDDER_IMPORT, EmbedderBackend};
use crate::engine::{EngineError, QuarryEngine};
use crate::sandbox::StoreState;

/// Extra wall-clock time beyond the deadline before a call blocked in the host is abandoned.
pub(crate) const WALL_GRACE: Duration = Duration::from_millis(500);

/// One version of a component, compiled and pre-instantiated.
pub struct Plugin {
    /// The file it was read from.
    pub path: PathBuf,
    /// SHA-256 of its bytes.
    pub hash: [u8; 32],
    /// Whether it was compiled now or came from a cache.
    pub outcome: CacheOutcome,
    /// Whether it imports the embedder.
    pub imports_embedder: bool,
    pre: ToolHostPre<StoreState>,
}

/// Why a component could not be loaded or an instance opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading or compiling the component failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// It does not fit the host: a missing export, an import no capability provides.
    #[error("{path} cannot be linked: {message}")]
    Link {
        /// The component file.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
    /// The component needs an embedder and the config names none.
    #[error(
        "tool instance {instance:?} imports `{EMBEDDER_IMPORT}` but its config names no embedder; add `embedder = \"NAME\"` naming an [embedders.NAME] entry"
    )]
    NoEmbedder {
        /// The instance.
        instance: String,
    },
    /// The embedder this tool names did not load.
    #[error("tool instance {instance:?} needs embedder {embedder:?}, which did not load: {reason}")]
    EmbedderUnavailable {
        /// The instance.
        instance: String,
        /// The embedder it names.
        embedder: String,
        /// Why the embedder failed.
        reason: String,
    },
    /// An embedder component's `load` returned an error.
    #[error("embedder {instance:?} could not load its model: {reason}")]
    ModelRejected {
        /// The embedder instance.
        instance: String,
        /// The component's reason.
        reason: String,
    },
    /// The grants could not be applied.
    #[error("tool instance {instance:?}: {source}")]
    Sandbox {
        /// The instance.
        instance: String,
        /// Why.
        source: crate::sandbox::SandboxError,
    },
    /// `open` returned an error.
    #[error("tool instance {instance:?} rejected its config: {}", error.describe())]
    Rejected {
        /// The instance.
        instance: String,
        /// The component's reason.
        error: ToolError,
    },
    /// The component faulted while starting.
    #[error("tool instance {instance:?} failed while starting: {fault}")]
    Fault {
        /// The instance.
        instance: String,
        /// What happened.
        fault: Fault,
    },
    /// `specs` returned something unusable.
    #[error("tool instance {instance:?} describes its tools wrongly: {message}")]
    BadSpec {
        /// The instance.
        instance: String,
        /// What is wrong.
        message: String,
    },
}

/// A fault while running guest code; the instance is recycled after any of these.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fault {
    /// The deadline passed.
    #[error("missed its {0:?} deadline (raise grants.deadline if the work is legitimate)")]
    Deadline(Duration),
    /// The memory grant was exhausted.
    #[error("ran out of memory: it asked for {asked} bytes, over its grants.memory of {limit} bytes")]
    OutOfMemory {
        /// The size it tried to grow to.
        asked: usize,
        /// The grant.
        limit: usize,
    },
    /// The wasm stack overflowed.
    #[error("overflowed its stack (unbounded recursion)")]
    StackOverflow,
    /// Any other trap; the guest's last stderr lines are kept (a panic message, usually).
    #[error("trapped: {message}{}", stderr.as_ref().map(|s| format!("; its stderr said: {s}")).unwrap_or_default())]
    Trap {
        /// wasmtime's description.
        message: String,
        /// The guest's last stderr lines.
        stderr: Option<String>,
    },
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No such tool.
    #[error("no tool named {name:?}; {hint}")]
    UnknownTool {
        /// What was asked for.
        name: String,
        /// The nearest names, or how to list them.
        hint: String,
    },
    /// The arguments are not a JSON object.
    #[error("{tool}: arguments must be a JSON object, like '{{\"query\": \"...\"}}': {message}")]
    BadArgs {
        /// The tool.
        tool: String,
        /// The parser's reason.
        message: String,
    },
    /// The arguments are over [`crate::registry::MAX_ARGS_BYTES`].
    #[error("{tool}: the arguments are {size} bytes, over the limit of {limit} bytes; pass less text")]
    ArgsTooLarge {
        /// The tool.
        tool: String,
        /// Their size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The tool returned an error.
    #[error("{tool}: {}", error.describe())]
    Tool {
        /// The tool.
        tool: String,
        /// The tool's error, with the host's note appended when the sandbox refused something.
        error: ToolError,
    },
    /// The tool faulted; its instance was recycled.
    #[error("{tool}: {fault}; the instance was recycled and the next call gets a fresh one")]
    Fault {
        /// The tool.
        tool: String,
        /// What happened.
        fault: Fault,
    },
    /// The output is over the grant.
    #[error(
        "{tool}: its output of {size} bytes exceeds grants.max_output ({limit} bytes); ask for less (a smaller limit) or raise the grant"
    )]
    OutputTooLarge {
        /// The tool.
        tool: String,
        /// Bytes produced.
        size: usize,
        /// The grant.
        limit: u64,
    },
    /// Recycling the instance failed.
    #[error("{tool}: cannot restart its instance: {source}")]
    Restart {
        /// The tool.
        tool: String,
        /// Why.
        source: Box<OpenError>,
    },
}

/// Reads and compiles (or loads from cache) the component at `path`; returns it with its content hash.
pub(crate) async fn compile(
    engine: &QuarryEngine,
    path: &Path,
) -> Result<(Component, [u8; 32], CacheOutcome), OpenError> {
    let bytes = tokio::fs::read(path).await.map_err(|source| EngineError::Read { path: path.to_path_buf(), source })?;
    let hash = ComponentCache::content_hash(&bytes);
    let (engine2, path2) = (engine.clone(), path.to_path_buf());
    let (component, outcome) = tokio::task::spawn_blocking(move || engine2.load_component(&path2, &bytes))
        .await
        .map_err(|e| OpenError::Link { path: path.to_path_buf(), message: format!("compiler task failed: {e}") })??;
    Ok((component, hash, outcome))
}

impl Plugin {
    /// Reads, compiles (or loads from cache) and pre-instantiates the component at `path`.
    pub async fn load(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        path: &Path,
    ) -> Result<Arc<Plugin>, OpenError> {
        let (component, hash, outcome) = compile(engine, path).await?;
        let imports_embedder =
            component.component_type().imports(engine.engine()).any(|(name, _)| name == EMBEDDER_IMPORT);
        let link = |message: String| OpenError::Link { path: path.to_path_buf(), message };
        let pre = linker.instantiate_pre(&component).map_err(|e| link(format!("{e:#}")))?;
        let pre = ToolHostPre::new(pre).map_err(|e| {
            link(format!("{e:#} (a tool component must export `quarry:retrieval/tool@0.1.0`; see wit/)"))
        })?;
        Ok(Arc::new(Plugin { path: path.to_path_buf(), hash, outcome, imports_embedder, pre }))
    }
}

struct Live {
    store: Store<StoreState>,
    bindings: ToolHost,
    handle: ResourceAny,
}

/// A running tool instance.
pub struct ToolInstance {
    /// Instance name from the config.
    pub name: String,
    /// Its configuration.
    pub config: Arc<InstanceConfig>,
    /// The component version it runs.
    pub plugin: Arc<Plugin>,
    /// The tools it offers.
    pub specs: Vec<ToolSpec>,
    engine: QuarryEngine,
    embedder: Option<Arc<dyn EmbedderBackend>>,
    live: tokio::sync::Mutex<Option<Live>>,
}

impl ToolInstance {
    /// Instantiates `plugin` for `config`, runs `open` and reads the specs.
    pub async fn open(
        engine: &QuarryEngine,
        config: Arc<InstanceConfig>,
        plugin: Arc<Plugin>,
        embedder: Option<Arc<dyn EmbedderBackend>>,
    ) -> Result<ToolInstance, OpenError> {
        let name = config.name.clone();
        if plugin.imports_embedder && embedder.is_none() {
            return Err(OpenError::NoEmbedder { instance: name });
        }
        let mut live = start(engine, &config, &plugin, embedder.clone()).await?;
        let deadline = config.grants.deadline;
        live.store.set_epoch_deadline(QuarryEngine::ticks(deadline));
        let res = tokio::time::timeout(
            deadline + WALL_GRACE,
            live.bindings.quarry_retrieval_tool().instance().call_specs(&mut live.store, live.handle),
        )
        .await;
        let specs = settle(&mut live.store, deadline, res)
            .map_err(|fault| OpenError::Fault { instance: name.clone(), fault })?;
        check_specs(&specs).map_err(|message| OpenError::BadSpec { instance: name.clone(), message })?;
        Ok(ToolInstance {
            name,
            config,
            plugin,
            specs,
            engine: engine.clone(),
            embedder,
            live: tokio::sync::Mutex::new(Some(live)),
        })
    }

    /// Runs tool `tool` with `args` (a JSON object). Calls to one instance run one at a time.
    pub async fn call(&self, tool: &str, args: &str) -> Result<ToolOutput, CallError> {
        let qualified = format!("{}.{tool}", self.name);
        let mut guard = self.live.lock().await;
        if guard.is_none() {
            let live = start(&self.engine, &self.config, &self.plugin, self.embedder.clone())
                .await
                .map_err(|e| CallError::Restart { tool: qualified.clone(), source: Box::new(e) })?;
            *guard = Some(live);
        }
        let Some(live) = guard.as_mut() else {
            unreachable!("set just above");
        };
        let deadline = self.config.grants.deadline;
        live.store.set_epoch_deadline(QuarryEngine::ticks(deadline));
        let res = tokio::time::timeout(
            deadline + WALL_GRACE,
            live.bindings.quarry_retrieval_tool().instance().call_call(&mut live.store, live.handle, tool, args),
        )
        .await;
        let outcome = settle(&mut live.store, deadline, res);
        let denials = live.store.data().hooks.take_denials();
        match outcome {
            Err(fault) => {
                *guard = None;
                tracing::warn!(target: "quarry::call", tool = %qualified, "{fault}; recycling the instance");
                Err(CallError::Fault { tool: qualified, fault })
            }
            Ok(Err(error)) => Err(CallError::Tool { tool: qualified, error: with_denials(error, &denials) }),
            Ok(Ok(out)) => {
                let size = output_size(&out);
                if size as u64 > self.config.grants.max_output {
                    return Err(CallError::OutputTooLarge {
                        tool: qualified,
                        size,
                        limit: self.config.grants.max_output,
                    });
                }
                Ok(out)
            }
        }
    }
}

/// Instantiates `plugin` in a fresh sandbox and runs `open`.
async fn start(
    engine: &QuarryEngine,
    config: &InstanceConfig,
    plugin: &Plugin,
    embedder: Option<Arc<dyn EmbedderBackend>>,
) -> Result<Live, OpenError> {
    let name = config.name.clone();
    let mut store = new_store(engine, config, embedder)?;
    let deadline = config.grants.deadline;
    store.set_epoch_deadline(QuarryEngine::ticks(deadline));
    let res = tokio::time::timeout(deadline + WALL_GRACE, plugin.pre.instantiate_async(&mut store)).await;
    let bindings =
        settle(&mut store, deadline, res).map_err(|fault| OpenError::Fault { instance: name.clone(), fault })?;
    store.set_epoch_deadline(QuarryEngine::ticks(deadline));
    let res = tokio::time::timeout(
        deadline + WALL_GRACE,
        bindings.quarry_retrieval_tool().instance().call_open(&mut store, &config.config_json),
    )
    .await;
    match settle(&mut store, deadline, res) {
        Err(fault) => Err(OpenError::Fault { instance: name, fault }),
        Ok(Err(error)) => Err(OpenError::Rejected { instance: name, error }),
        Ok(Ok(handle)) => Ok(Live { store, bindings, handle }),
    }
}

/// A fresh store sandboxed by `config`'s grants, trapping at epoch deadlines.
pub(crate) fn new_store(
    engine: &QuarryEngine,
    config: &InstanceConfig,
    embedder: Option<Arc<dyn EmbedderBackend>>,
) -> Result<Store<StoreState>, OpenError> {
    let state = StoreState::new(config, embedder)
        .map_err(|source| OpenError::Sandbox { instance: config.name.clone(), source })?;
    let mut store = Store::new(engine.engine(), state);
    store.limiter(StoreState::limiter);
    store.epoch_deadline_trap();
    Ok(store)
}

pub(crate) type Timed<T> = Result<wasmtime::Result<T>, tokio::time::error::Elapsed>;

/// Turns the outcome of a guarded guest call into a value or a [`Fault`],
/// logging what the guest wrote to stderr.
pub(crate) fn settle<T>(store: &mut Store<StoreState>, deadline: Duration, res: Timed<T>) -> Result<T, Fault> {
    let stderr = store.data().stderr.take();
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        tracing::info!(target: "quarry::guest", "{line}");
    }
    let err = match res {
        Err(_) => return Err(Fault::Deadline(deadline)),
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => e,
    };
    if let Some(asked) = store.data_mut().limiter.denied.take() {
        return Err(Fault::OutOfMemory { asked, limit: store.data().limiter.limit() });
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Err(Fault::Deadline(deadline)),
        Some(Trap::StackOverflow) => Err(Fault::StackOverflow),
        other => {
            let message = match other {
                // Rust guests keep their stack in linear memory below the data;
                // overflowing it is the usual cause of this trap.
                Some(Trap::MemoryOutOfBounds) => format!(
                    "{} (in a Rust or C guest, often a stack overflow from deep recursion)",
                    Trap::MemoryOutOfBounds
                ),
                Some(t) => t.to_string(),
                None => format!("{err:#}"),
            };
            Err(Fault::Trap { message, stderr: last_words(&stderr) })
        }
    }
}

/// The guest's last two meaningful stderr lines: for a Rust panic, where it
/// panicked and the message.
fn last_words(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(2)..];
    (!tail.is_empty()).then(|| tail.join(" "))
}

/// Appends the sandbox's refusals to a tool error so the user sees which grant would help.
fn with_denials(error: ToolError, denials: &[String]) -> ToolError {
    if denials.is_empty() {
        return error;
    }
    let note = format!(" [host: {}]", denials.join("; "));
    match error {
        ToolError::InvalidArgs(m) => ToolError::InvalidArgs(m + &note),
        ToolError::InvalidConfig(m) => ToolError::InvalidConfig(m + &note),
        ToolError::NotFound(m) => ToolError::NotFound(m + &note),
        ToolError::Upstream(m) => ToolError::Denied(m + &note),
        ToolError::Denied(m) => ToolError::Denied(m + &note),
        ToolError::Internal(m) => ToolError::Internal(m + &note),
    }
}

fn output_size(out: &ToolOutput) -> usize {
    out.text.len()
        + out.extra.as_ref().map_or(0, String::len)
        + out
            .hits
            .iter()
            .map(|h| h.content.len() + h.metadata.len() + h.source.as_ref().map_or(0, String::len))
            .sum::<usize>()
}

fn check_specs(specs: &[ToolSpec]) -> Result<(), String> {
    if specs.is_empty() {
        return Err("it offers no tools".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in specs {
        let ok =
            !s.name.is_empty() && s.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(format!("tool name {:?} must use lowercase letters, digits and `_`", s.name));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(format!("tool name {:?} appears twice", s.name));
        }
        let schema: serde_json::Value = serde_json::from_str(&s.args_schema)
            .map_err(|e| format!("tool {:?}: args-schema is not JSON: {e}", s.name))?;
        if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(format!("tool {:?}: args-schema must be a JSON Schema with \"type\": \"object\"", s.name));
        }
    }
    Ok(())
}
