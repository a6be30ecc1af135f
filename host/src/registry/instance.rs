//! One loaded component version ([`ComponentVersion`]) and one running tool instance
//! ([`ToolInstance`]): instantiate, `open`, `call` under a deadline, and
//! recycle after a fault.
//!
//! Lifecycle: [`ComponentVersion::load`] compiles (or loads from cache) and
//! pre-instantiates a component once per version. [`ToolInstance::open`]
//! instantiates it in a fresh store (microseconds with the pooling allocator),
//! calls `open(config)` and `specs()`: cheap, so the tools are listed at once.
//! [`ToolInstance::prepare`] then runs the guest's `prepare` (an index build) on each member of
//! the pool, which joins the fair queue once prepared; calls wait for a member, forwarding the
//! preparation's progress, within the instance's deadline. Each [`ToolInstance::call`] runs through
//! [`run_guarded`] (see [`crate::runtime::guarded`]) on a member of the instance's
//! [`StorePool`], which keeps the pool's rules: on any trap, out-of-memory, resource exhaustion or
//! missed deadline the store is dropped and the next call starts a new one; a store whose call
//! future is dropped part-way (a timeout, a cancelled caller) is dropped with it, never reused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::Store;
use wasmtime::component::{Component, Linker, ResourceAny};

use crate::args::Args;
use crate::bindings::quarry::retrieval::types::Catalog;
use crate::bindings::{ToolError, ToolHost, ToolHostPre, ToolOutput, ToolSpec};
use crate::capability::CallCx;
use crate::capability::client::{Asker, Client, ListKind};
use crate::capability::embedder::{EMBEDDER_IMPORT, EmbedderBackend};
use crate::capability::progress::{self, Report};
use crate::config::InstanceConfig;
use crate::runtime::cache::ComponentCache;
use crate::runtime::engine::{EngineError, QuarryEngine};
pub use crate::runtime::guarded::Fault;
use crate::runtime::guarded::{new_store, run_guarded, run_guarded_for};
use crate::runtime::pool::{Lease, StorePool};
use crate::runtime::store::StoreState;

pub use super::request::{Reply, Request};

/// The longest tool error message passed on (it is also cut to `max_output`).
pub const MAX_ERROR_BYTES: usize = 64 << 10;
/// The longest message of a component that rejected its config, kept for later hints.
pub const MAX_REJECTION_BYTES: usize = 4 << 10;
/// The most tools one instance may offer.
pub const MAX_TOOLS: usize = 128;
/// The largest description plus argument schema of one tool.
pub const MAX_SPEC_BYTES: usize = 64 << 10;
/// What each hit costs in output beside its strings: the record, and the JSON object it
/// becomes for MCP and `--json` (`{"content":"","score":null,"source":null,"metadata":{}}`).
pub const HIT_OVERHEAD: usize = super::request::RECORD_OVERHEAD;

/// One version of a component, compiled and pre-instantiated.
pub struct ComponentVersion {
    /// SHA-256 of its bytes.
    pub hash: [u8; 32],
    /// The version it carries (its `version` custom section), if any.
    pub version: Option<String>,
    /// Whether it imports the embedder.
    pub imports_embedder: bool,
    pre: ToolHostPre<StoreState>,
    /// Keeps the compiled component in the engine's memory while this version serves.
    _component: Arc<Component>,
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
        source: crate::capability::SandboxError,
    },
    /// `open` returned an error.
    #[error("tool instance {instance:?} rejected its config: {}", error.describe())]
    Rejected {
        /// The instance.
        instance: String,
        /// The component's reason.
        error: ToolError,
    },
    /// `prepare` returned an error.
    #[error("tool instance {instance:?} could not prepare: {}", error.describe())]
    Unprepared {
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
    /// With `bare_names`, it lists a tool under a name another instance answers to.
    #[error(
        "tool instance {instance:?} lists tool {name:?} by its bare name (bare_names), which instance {other:?} {how}; a name two instances claim is refused: rename one instance, or drop bare_names"
    )]
    NameClaimed {
        /// The instance refused.
        instance: String,
        /// The name.
        name: String,
        /// The instance that answers to it too.
        other: String,
        /// How the other answers to it.
        how: &'static str,
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
    #[error("{tool}: arguments must be a JSON object, like '{example}': {message}")]
    BadArgs {
        /// The tool.
        tool: String,
        /// Arguments of the tool's schema ([`crate::args::example`]).
        example: String,
        /// The parser's reason.
        message: String,
    },
    /// The arguments are over [`crate::args::MAX_ARGS_BYTES`].
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
    /// The instance was still preparing when the call had waited its deadline.
    #[error(
        "{tool}: not ready yet: after waiting {}s the instance is still {status}; try again later",
        waited.as_secs()
    )]
    NotReady {
        /// The tool.
        tool: String,
        /// How long the call waited.
        waited: std::time::Duration,
        /// How far along the preparation is.
        status: String,
    },
    /// The caller gave up while the call waited for its instance; it never ran.
    #[error("{tool}: cancelled before it started")]
    Cancelled {
        /// The tool.
        tool: String,
    },
    /// Its instance could not prepare (build its index, say) for this call.
    #[error("{tool}: its instance could not prepare (each call tries again): {}", error.describe())]
    Unprepared {
        /// The tool.
        tool: String,
        /// The component's reason.
        error: ToolError,
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

impl CallError {
    /// The kind of failure, as `/metrics` counts it: one short name per variant, but a tool's
    /// `invalid-args` counts as `bad_args`.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "unknown_tool",
            // The client's arguments, whoever found them wrong: the host (not an object) or
            // the tool (a wrong type, a missing or unknown key, a value out of range).
            CallError::BadArgs { .. } | CallError::Tool { error: ToolError::InvalidArgs(_), .. } => "bad_args",
            CallError::ArgsTooLarge { .. } => "args_too_large",
            CallError::Tool { .. } => "tool_error",
            CallError::Fault { .. } => "fault",
            CallError::OutputTooLarge { .. } => "output_too_large",
            CallError::NotReady { .. } => "not_ready",
            CallError::Cancelled { .. } => "cancelled",
            CallError::Unprepared { .. } => "unprepared",
            CallError::Restart { .. } => "restart",
        }
    }
}

/// A component read and compiled: what the host knows of it before running it.
#[derive(Clone)]
pub(crate) struct Compiled {
    /// The compiled component.
    pub component: Arc<Component>,
    /// SHA-256 of its bytes.
    pub hash: [u8; 32],
    /// The version it says it is (its `version` custom section), bounded and checked.
    pub version: Option<String>,
}

/// Reads and compiles (or loads from cache) the component at `path`. A file over the engine's
/// [`QuarryEngine::max_component_bytes`] is refused before it is compiled: compiling takes time
/// and memory in proportion to its size.
pub(crate) async fn compile(engine: &QuarryEngine, path: &Path) -> Result<Compiled, OpenError> {
    use tokio::io::AsyncReadExt as _;
    let read_error = |source| EngineError::Read { path: path.to_path_buf(), source };
    let max = engine.max_component_bytes();
    let file = tokio::fs::File::open(path).await.map_err(read_error)?;
    let mut bytes = Vec::new();
    // Read one byte past the cap, so a file that grows while it is read is caught too.
    file.take(max.saturating_add(1)).read_to_end(&mut bytes).await.map_err(read_error)?;
    if bytes.len() as u64 > max {
        return Err(EngineError::TooLarge { path: path.to_path_buf(), limit: max }.into());
    }
    let hash = ComponentCache::content_hash(&bytes);
    let (engine2, path2) = (engine.clone(), path.to_path_buf());
    let (component, version) = tokio::task::spawn_blocking(move || {
        let version = crate::support::metadata::version(&bytes);
        engine2.load_component(&path2, &bytes).map(|(component, _)| (component, version))
    })
    .await
    .map_err(|e| OpenError::Link { path: path.to_path_buf(), message: format!("compiler task failed: {e}") })??;
    Ok(Compiled { component, hash, version })
}

impl ComponentVersion {
    /// Reads, compiles (or loads from cache) and pre-instantiates the component at `path`.
    pub async fn load(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        path: &Path,
    ) -> Result<Arc<ComponentVersion>, OpenError> {
        Self::from_compiled(engine, linker, path, compile(engine, path).await?)
    }

    /// Pre-instantiates `compiled`, read from `path`.
    pub(crate) fn from_compiled(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        path: &Path,
        compiled: Compiled,
    ) -> Result<Arc<ComponentVersion>, OpenError> {
        let Compiled { component, hash, version } = compiled;
        let imports_embedder =
            component.component_type().imports(engine.engine()).any(|(name, _)| name == EMBEDDER_IMPORT);
        let link = |message: String| OpenError::Link { path: path.to_path_buf(), message };
        let pre = linker.instantiate_pre(&component).map_err(|e| link(format!("{e:#}")))?;
        let pre = ToolHostPre::new(pre).map_err(|e| {
            link(format!("{e:#} (a tool component must export `quarry:retrieval/tool@0.5.0`; see wit/)"))
        })?;
        Ok(Arc::new(ComponentVersion { hash, version, imports_embedder, pre, _component: component }))
    }
}

struct Live {
    store: Store<StoreState>,
    /// Shared with each call's future, which must own what it uses.
    bindings: Arc<ToolHost>,
    handle: ResourceAny,
}

/// How far a tool instance is on its way to serving (see [`ToolInstance::prepare`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Its first member is running `prepare`.
    Preparing,
    /// At least one member has prepared; calls run.
    Ready,
    /// Its first member's `prepare` failed, with why; each call starts it again.
    Failed(String),
}

/// The severity of a line a [`Listener`] hears (the host's log levels).
pub use tracing::Level;

/// What a caller hears while its call waits and runs. Advisory: a slow listener loses
/// reports, never holds up the call.
pub trait Listener: Send + Sync {
    /// The latest progress of the work the call waits on (the instance's preparation) or runs.
    fn progress(&self, report: &Report);
    /// A host log line about this call: a refusal, a fault, a line the guest wrote.
    fn log(&self, level: tracing::Level, line: &str);
}

/// Who calls, for the fair queue, and who listens.
#[derive(Clone, Copy, Default)]
pub struct Caller<'a> {
    /// Calls queue in turn between clients (MCP sessions), first in first out within one.
    pub client: &'a str,
    /// Hears the call's progress and log lines.
    pub listener: Option<&'a dyn Listener>,
    /// Answers the questions the call asks its client (`quarry:retrieval/client`).
    pub asker: Option<&'a Arc<dyn Asker>>,
}

/// Reports forwarded to a listener at most this often.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// A JSON object, as a tool's schema is.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// One tool as listed to users: `instance.tool`. Built once when its instance opens.
#[derive(Debug, Clone)]
pub struct ToolEntry {
    /// `instance.tool`, unique and stable.
    pub qualified: String,
    /// The instance name.
    pub instance: String,
    /// The tool's spec as the component gave it.
    pub spec: ToolSpec,
    /// Its arguments' JSON Schema, parsed once (shared with every listing of it).
    pub schema: Arc<JsonObject>,
    /// SHA-256 (hex) of the component version serving it.
    pub component_hash: String,
    /// The version that component carries, if any.
    pub component_version: Option<String>,
}

/// A running tool instance: `pool` members of one component version and config, serving calls
/// in parallel, queued fairly between clients.
pub struct ToolInstance {
    /// Instance name from the config.
    pub name: String,
    /// Its configuration.
    pub config: Arc<InstanceConfig>,
    /// The component version it runs.
    pub version: Arc<ComponentVersion>,
    /// The tools it offers, as listed: read again when a call says they changed.
    tools: parking_lot::RwLock<Arc<[ToolEntry]>>,
    /// Set when [`ToolInstance::tools`] changed since the registry last listed them.
    respecced: std::sync::atomic::AtomicBool,
    /// Its resource templates and prompts, and whether it lists resources.
    pub catalog: Catalog,
    engine: QuarryEngine,
    embedder: Option<Arc<dyn EmbedderBackend>>,
    /// The members; each joins once prepared, and a call takes the first free one.
    pool: StorePool<Live>,
    /// Each member's latest progress report, by member.
    sinks: Vec<Arc<progress::Sink>>,
    readiness: tokio::sync::watch::Sender<Readiness>,
}

impl ToolInstance {
    /// Instantiates `version` for `config`, runs `open` and reads the specs: the cheap part,
    /// after which the tools can be listed. No call runs before [`ToolInstance::prepare`].
    pub async fn open(
        engine: &QuarryEngine,
        config: Arc<InstanceConfig>,
        version: Arc<ComponentVersion>,
        embedder: Option<Arc<dyn EmbedderBackend>>,
    ) -> Result<ToolInstance, OpenError> {
        let name = config.name.clone();
        if version.imports_embedder && embedder.is_none() {
            return Err(OpenError::NoEmbedder { instance: name });
        }
        let sinks: Vec<Arc<progress::Sink>> =
            (0..config.pool.max(1)).map(|_| Arc::new(tokio::sync::watch::channel(None).0)).collect();
        let mut live = start(engine, &config, &version, embedder.clone(), &sinks[0]).await?;
        let (bindings, handle) = (live.bindings.clone(), live.handle);
        let specs = run_guarded(&mut live.store, config.grants.deadline, |store| {
            Box::pin(async move { bindings.quarry_retrieval_tool().instance().call_specs(store, handle).await })
        })
        .await
        .map_err(|fault| OpenError::Fault { instance: name.clone(), fault })?;
        let tools = entries(&config, &version, specs)
            .map_err(|message| OpenError::BadSpec { instance: name.clone(), message })?;
        let (bindings, handle) = (live.bindings.clone(), live.handle);
        let catalog = run_guarded(&mut live.store, config.grants.deadline, |store| {
            Box::pin(async move { bindings.quarry_retrieval_tool().instance().call_catalog(store, handle).await })
        })
        .await
        .map_err(|fault| OpenError::Fault { instance: name.clone(), fault })?;
        check_catalog(&catalog, &config.resource_schemes)
            .map_err(|message| OpenError::BadSpec { instance: name.clone(), message })?;
        // The first member keeps the store it was opened in; the others start as they prepare.
        let mut first = Some(live);
        let pool = StorePool::idle(sinks.iter().map(|_| first.take()).collect());
        Ok(ToolInstance {
            name,
            config,
            version,
            tools: parking_lot::RwLock::new(tools.into()),
            respecced: std::sync::atomic::AtomicBool::new(false),
            catalog,
            engine: engine.clone(),
            embedder,
            pool,
            sinks,
            readiness: tokio::sync::watch::channel(Readiness::Preparing).0,
        })
    }

    /// Prepares every member, one after another (the first may build what the others reopen,
    /// an index on disk), each joining the pool as soon as it has. Returns once the first has
    /// prepared or failed, with its outcome; the others go on in the background. A member that
    /// fails joins too, without a store: the call that takes it starts it again.
    pub async fn prepare(self: &Arc<Self>) -> Result<(), OpenError> {
        let first = self.prepare_member(0).await;
        // Ready before the member joins: a call it serves must find the instance ready.
        self.readiness.send_replace(match &first {
            Ok(()) => Readiness::Ready,
            Err(e) => Readiness::Failed(crate::support::text::cut(&e.to_string(), MAX_REJECTION_BYTES)),
        });
        self.pool.join(0);
        if self.pool.len() > 1 {
            let this = self.clone();
            let ok = first.is_ok();
            tokio::spawn(async move {
                for i in 1..this.pool.len() {
                    // After a failure the others would fail alike: they start at their first call.
                    if ok && let Err(e) = this.prepare_member(i).await {
                        tracing::warn!(target: "quarry::load", instance = %this.name, member = i, "not prepared: {e}");
                    }
                    this.pool.join(i);
                }
            });
        }
        first
    }

    /// Whether the instance serves yet.
    pub fn readiness(&self) -> Readiness {
        self.readiness.borrow().clone()
    }

    /// Waits until the first member has prepared or failed.
    pub async fn prepared(&self) -> Readiness {
        let mut rx = self.readiness.subscribe();
        match rx.wait_for(|r| *r != Readiness::Preparing).await {
            Ok(r) => r.clone(),
            Err(_) => self.readiness(),
        }
    }

    /// How many members serve calls in parallel.
    pub fn pool(&self) -> usize {
        self.pool.len()
    }

    /// Members free now, and clients waiting for one (for tests and benches).
    pub fn load(&self) -> (usize, usize) {
        self.pool.load()
    }

    /// Starts member `i` (unless it kept the store it was opened in) and prepares it.
    async fn prepare_member(&self, i: usize) -> Result<(), OpenError> {
        let mut slot = self.pool.slot(i).await;
        let live = match slot.take() {
            Some(live) => live,
            None => self.start(i).await?,
        };
        *slot = Some(prepare(&self.config, live).await?);
        Ok(())
    }

    /// A fresh store for member `i`, opened.
    async fn start(&self, i: usize) -> Result<Live, OpenError> {
        start(&self.engine, &self.config, &self.version, self.embedder.clone(), &self.sinks[i]).await
    }

    /// Runs tool `tool` with `args` (a JSON object) on the first free member.
    pub async fn call(&self, tool: &str, args: &Args) -> Result<ToolOutput, CallError> {
        self.call_cancellable(tool, args, Caller::default(), std::future::pending()).await
    }

    /// [`ToolInstance::call`] for `caller`, given up if `cancelled` completes while the call
    /// still waits for a member (behind other calls, or for the instance to prepare). Once the
    /// call runs it runs to its end: stopping it part-way would cost the member its store.
    ///
    /// While the instance prepares, a call waits, forwarding the preparation's progress, for
    /// at most the instance's deadline; then it fails with [`CallError::NotReady`], which says
    /// how far along the preparation is.
    pub async fn call_cancellable(
        &self,
        tool: &str,
        args: &Args,
        caller: Caller<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<ToolOutput, CallError> {
        let request = Request::Call { tool: tool.to_string(), args: args.clone() };
        match self.request(&format!("{}.{tool}", self.name), request, caller, cancelled).await? {
            Reply::Output(out) => Ok(out),
            other => unreachable!("a call answered {other:?}"),
        }
    }

    /// Whether the tools changed since the last time this was asked (a call said so, and they
    /// were read again): the registry lists them again.
    pub fn take_respecced(&self) -> bool {
        self.respecced.swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// The tools it offers now.
    pub fn tools(&self) -> Arc<[ToolEntry]> {
        self.tools.read().clone()
    }

    /// Runs `request` the way [`ToolInstance::call_cancellable`] runs a call (`what` names it in
    /// errors: `instance.tool`, or the resource or prompt).
    pub async fn request(
        &self,
        what: &str,
        request: Request,
        caller: Caller<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<Reply, CallError> {
        let qualified = what.to_string();
        // A read's URI, a prompt's arguments, a completion's value come from the client.
        let size = request.bytes();
        if size > crate::args::MAX_ARGS_BYTES {
            return Err(CallError::ArgsTooLarge { tool: qualified, size, limit: crate::args::MAX_ARGS_BYTES });
        }
        let waited = Instant::now();
        let deadline = self.config.grants.deadline;
        let not_ready = async {
            tokio::time::sleep(deadline).await;
            if self.readiness() == Readiness::Preparing {
                return;
            }
            std::future::pending::<()>().await
        };
        let mut lease = {
            let acquire = self.pool.lease(caller.client);
            let forward = async {
                match caller.listener {
                    Some(l) if self.readiness() == Readiness::Preparing => {
                        let line = format!("{}: the call waits for the instance, still {}", self.name, self.status());
                        l.log(tracing::Level::INFO, &line);
                        let mut reports = self.sinks[0].subscribe();
                        reports.mark_changed();
                        forward_progress(&mut reports, l).await
                    }
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                p = acquire => p,
                () = cancelled => return Err(CallError::Cancelled { tool: qualified }),
                () = not_ready => {
                    return Err(CallError::NotReady { tool: qualified, waited: waited.elapsed(), status: self.status() })
                }
                never = forward => match never {},
            }
        };
        let member = lease.member();
        let run = async {
            // A member whose store a fault dropped starts again, and prepares, for this call.
            let restart = async {
                let live = self.start(member).await?;
                prepare(&self.config, live).await
            };
            let live = lease.take_or_start(restart).await.map_err(|e| match e {
                OpenError::Unprepared { error, .. } => CallError::Unprepared { tool: qualified.clone(), error },
                e => CallError::Restart { tool: qualified.clone(), source: Box::new(e) },
            })?;
            self.run(&qualified, &request, live, &mut lease, caller)
                .await
                .map(|r| r.qualify(&self.name, &self.config.resource_schemes))
        };
        let mut reports = self.sinks[member].subscribe();
        reports.mark_unchanged();
        let forward = async {
            match caller.listener {
                Some(l) => forward_progress(&mut reports, l).await,
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            biased;
            out = run => out,
            never = forward => match never {},
        };
        // The last report, if the pace held it back: the caller hears how the work ended.
        if let Some(l) = caller.listener
            && reports.has_changed().unwrap_or(false)
            && let Some(r) = reports.borrow_and_update().clone()
        {
            l.progress(&r);
        }
        drop(lease);
        outcome
    }

    /// What the preparation is doing, from its latest progress report.
    pub(crate) fn status(&self) -> String {
        match self.sinks[0].borrow().as_ref() {
            Some(r) => format!("preparing: {}", r.status()),
            None => "preparing (no progress reported yet)".to_string(),
        }
    }

    async fn run(
        &self,
        qualified: &str,
        request: &Request,
        mut live: Live,
        lease: &mut Lease<'_, Live>,
        caller: Caller<'_>,
    ) -> Result<Reply, CallError> {
        let listener = caller.listener;
        let (bindings, handle) = (live.bindings.clone(), live.handle);
        // Owned: the call's future may outlive this borrow of the caller's request.
        let owned = request.clone();
        let deadline = self.config.grants.deadline;
        let waits = Arc::new(tokio::sync::Notify::new());
        live.store.data_mut().caps.get_mut::<Client>().begin(
            caller.asker.cloned(),
            Instant::now() + deadline,
            waits.clone(),
        );
        // A call that waits for its client gives its member back to the pool meanwhile: a client
        // that does not answer then holds its own call's store, not the others' turns.
        let outcome = {
            let call = run_guarded_for(&mut live.store, deadline, CallCx::TOOL_CODE, |store| {
                Box::pin(async move { owned.invoke(&bindings, store, handle).await })
            });
            tokio::pin!(call);
            loop {
                tokio::select! {
                    biased;
                    out = &mut call => break out,
                    () = waits.notified(), if !lease.released() => {
                        lease.release();
                    }
                }
            }
        };
        let changed = live.store.data_mut().caps.get_mut::<Client>().end();
        if outcome.is_ok() && !changed.is_empty() {
            self.lists_changed(&mut live, &changed).await;
        }
        let refusals = live.store.data().take_refusals();
        let lines = live.store.data_mut().take_logged();
        if let Some(l) = listener {
            for line in &lines {
                l.log(tracing::Level::INFO, line);
            }
            for d in &refusals {
                l.log(tracing::Level::WARN, &format!("{qualified}: the sandbox refused: {d}"));
            }
        }
        let max_output = self.config.grants.max_output;
        let qualified = qualified.to_string();
        match outcome {
            Err(fault) => {
                lease.faulted(&qualified, &fault);
                if let Some(l) = listener {
                    l.log(tracing::Level::ERROR, &format!("{qualified}: {fault}; recycling the instance"));
                }
                Err(CallError::Fault { tool: qualified, fault })
            }
            Ok(Err(error)) => {
                lease.put_back(live);
                let cap = MAX_ERROR_BYTES.min(usize::try_from(max_output).unwrap_or(usize::MAX));
                Err(CallError::Tool { tool: qualified, error: with_denials(bounded(error, cap), &refusals) })
            }
            Ok(Ok(out)) => {
                lease.put_back(live);
                let size = out.size();
                if size as u64 > max_output {
                    return Err(CallError::OutputTooLarge { tool: qualified, size, limit: max_output });
                }
                Ok(out)
            }
        }
    }

    /// A call said `changed` lists of this instance changed: its tools are read again from the
    /// member that ran it (kept if they are unusable, with a warning), then the listening clients
    /// are told.
    async fn lists_changed(&self, live: &mut Live, changed: &[ListKind]) {
        if changed.contains(&ListKind::Tools) {
            let (bindings, handle) = (live.bindings.clone(), live.handle);
            let specs = run_guarded(&mut live.store, self.config.grants.deadline, |store| {
                Box::pin(async move { bindings.quarry_retrieval_tool().instance().call_specs(store, handle).await })
            })
            .await;
            match specs.map_err(|f| f.to_string()).and_then(|s| entries(&self.config, &self.version, s)) {
                Ok(tools) => {
                    *self.tools.write() = tools.into();
                    self.respecced.store(true, std::sync::atomic::Ordering::Release);
                }
                Err(e) => tracing::warn!(target: "quarry::load", instance = %self.name, "its tools changed, but: {e}"),
            }
        }
        live.store.data_mut().caps.get_mut::<Client>().announce(changed);
    }
}

/// The listed tools of `specs`, checked: named `instance.tool`, or by the tool's own name for an
/// instance whose config says `bare_names = true`.
fn entries(
    config: &InstanceConfig,
    version: &ComponentVersion,
    specs: Vec<ToolSpec>,
) -> Result<Vec<ToolEntry>, String> {
    let schemas = check_specs(&specs)?;
    let hash = hex::encode(version.hash);
    Ok(specs
        .into_iter()
        .zip(schemas)
        .map(|(spec, schema)| ToolEntry {
            qualified: config.listed_name(&spec.name),
            instance: config.name.clone(),
            spec,
            schema: Arc::new(schema),
            component_hash: hash.clone(),
            component_version: version.version.clone(),
        })
        .collect())
}

/// The most resource templates, and prompts, one instance may offer.
pub const MAX_CATALOG: usize = 128;

/// Checks an instance's catalog: names as tool names are, bounded counts, resource templates its
/// own (under `quarry://self/` or its `schemes`).
fn check_catalog(catalog: &Catalog, schemes: &[String]) -> Result<(), String> {
    if catalog.templates.len() > MAX_CATALOG || catalog.prompts.len() > MAX_CATALOG {
        return Err(format!("it offers more than {MAX_CATALOG} resource templates or prompts"));
    }
    // Each described in at most what a tool's spec may take.
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let template_bytes = |t: &crate::bindings::quarry::retrieval::types::ResourceTemplate| {
        t.uri_template.len() + t.name.len() + opt(&t.description) + opt(&t.mime_type)
    };
    let prompt_bytes = |p: &crate::bindings::quarry::retrieval::types::PromptSpec| {
        p.name.len()
            + p.description.len()
            + p.arguments.iter().map(|a| a.name.len() + opt(&a.description)).sum::<usize>()
    };
    if catalog
        .templates
        .iter()
        .map(template_bytes)
        .chain(catalog.prompts.iter().map(prompt_bytes))
        .any(|n| n > MAX_SPEC_BYTES)
    {
        return Err(format!("a resource template or prompt takes more than {MAX_SPEC_BYTES} bytes to describe"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in &catalog.prompts {
        let ok = !p.name.is_empty()
            && p.name.len() <= 64
            && p.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(format!(
                "prompt name {} must use lowercase letters, digits and `_` (at most 64)",
                crate::support::text::quoted_prefix(&p.name, 64)
            ));
        }
        if !seen.insert(p.name.as_str()) {
            return Err(format!("prompt name {:?} appears twice", p.name));
        }
    }
    for t in &catalog.templates {
        // The namespace is the host's to give: a component names only its own resources.
        if !crate::registry::request::owns(&t.uri_template, schemes) {
            return Err(format!(
                "resource template {} is not the component's own: a component names its resources under {} (the host lists them as quarry://INSTANCE/...), or in a scheme the operator gave its instance (`resource_schemes`), never another instance's",
                crate::support::text::quoted_prefix(&t.uri_template, 200),
                crate::registry::request::SELF_PREFIX
            ));
        }
        crate::registry::uri_template::Template::parse(&t.uri_template)
            .map_err(|e| format!("resource template {:?}: {e}", crate::support::text::cut(&t.uri_template, 200)))?;
    }
    Ok(())
}

/// Forwards the reports `rx` sees to `listener`, at most one per [`PROGRESS_EVERY`]. Never ends
/// (its type says so): the caller drops it.
async fn forward_progress(
    rx: &mut tokio::sync::watch::Receiver<Option<Report>>,
    listener: &dyn Listener,
) -> std::convert::Infallible {
    loop {
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
        let latest = rx.borrow_and_update().clone();
        if let Some(r) = latest {
            listener.progress(&r);
        }
        tokio::time::sleep(PROGRESS_EVERY).await;
    }
}

/// Instantiates `version` in a fresh sandbox, its progress kept in `sink`, and runs `open`.
async fn start(
    engine: &QuarryEngine,
    config: &InstanceConfig,
    version: &ComponentVersion,
    embedder: Option<Arc<dyn EmbedderBackend>>,
    sink: &Arc<progress::Sink>,
) -> Result<Live, OpenError> {
    let name = config.name.clone();
    let mut store = new_store(engine, config, embedder)
        .map_err(|source| OpenError::Sandbox { instance: config.name.clone(), source })?;
    store.data_mut().caps.get_mut::<progress::Reporting>().set_sink(sink.clone());
    // A corpus shared with other hosts relays its builder's progress to this store's sink, and
    // shares this store's while it builds.
    let link = store.data_mut().caps.get_mut::<progress::Reporting>().link();
    store.data_mut().caps.get_mut::<crate::capability::corpus::Corpora>().set_progress(Arc::new(link));
    let deadline = config.grants.deadline;
    let pre = version.pre.clone();
    let bindings =
        run_guarded(&mut store, deadline, |store| Box::pin(async move { pre.instantiate_async(store).await }))
            .await
            .map(Arc::new)
            .map_err(|fault| OpenError::Fault { instance: name.clone(), fault })?;
    let (b, json) = (bindings.clone(), config.config_json.clone());
    let opened = run_guarded(&mut store, deadline, |store| {
        Box::pin(async move { b.quarry_retrieval_tool().instance().call_open(store, &json).await })
    })
    .await;
    match opened {
        Err(fault) => Err(OpenError::Fault { instance: name, fault }),
        Ok(Err(error)) => Err(OpenError::Rejected { instance: name, error: bounded(error, MAX_REJECTION_BYTES) }),
        Ok(Ok(handle)) => Ok(Live { store, bindings, handle }),
    }
}

/// Runs `prepare` on an opened store, under the instance's `prepare_deadline`.
async fn prepare(config: &InstanceConfig, mut live: Live) -> Result<Live, OpenError> {
    let name = config.name.clone();
    let (b, handle) = (live.bindings.clone(), live.handle);
    let prepared = run_guarded_for(&mut live.store, config.grants.prepare_deadline, CallCx::TOOL_CODE, |store| {
        Box::pin(async move { b.quarry_retrieval_tool().instance().call_prepare(store, handle).await })
    })
    .await;
    match prepared {
        Err(fault) => Err(OpenError::Fault { instance: name, fault }),
        Ok(Err(error)) => Err(OpenError::Unprepared { instance: name, error: bounded(error, MAX_REJECTION_BYTES) }),
        Ok(Ok(())) => Ok(live),
    }
}

/// Appends the sandbox's refusals to a tool error so the user sees which grant would help; an
/// upstream failure the sandbox caused becomes `denied`.
fn with_denials(error: ToolError, refusals: &[String]) -> ToolError {
    if refusals.is_empty() {
        return error;
    }
    let note = format!(" [host: {}]", refusals.join("; "));
    match map_message(error, |m| m + &note) {
        ToolError::Upstream(m) => ToolError::Denied(m),
        other => other,
    }
}

/// A tool error with its message cut to `max` bytes: the guest chooses its length.
fn bounded(error: ToolError, max: usize) -> ToolError {
    map_message(error, |m| if m.len() > max { crate::support::text::cut(&m, max) } else { m })
}

/// `error` of the same kind with its message mapped by `f`.
fn map_message(error: ToolError, f: impl FnOnce(String) -> String) -> ToolError {
    match error {
        ToolError::InvalidArgs(m) => ToolError::InvalidArgs(f(m)),
        ToolError::InvalidConfig(m) => ToolError::InvalidConfig(f(m)),
        ToolError::NotFound(m) => ToolError::NotFound(f(m)),
        ToolError::Upstream(m) => ToolError::Upstream(f(m)),
        ToolError::Denied(m) => ToolError::Denied(f(m)),
        ToolError::Internal(m) => ToolError::Internal(f(m)),
    }
}

/// Checks what a component offers; returns each tool's schema, parsed once here.
fn check_specs(specs: &[ToolSpec]) -> Result<Vec<JsonObject>, String> {
    if specs.is_empty() {
        return Err("it offers no tools".into());
    }
    if specs.len() > MAX_TOOLS {
        return Err(format!("it offers {} tools, more than {MAX_TOOLS}", specs.len()));
    }
    if let Some(s) = specs.iter().find(|s| s.name.len() + s.description.len() + s.args_schema.len() > MAX_SPEC_BYTES) {
        return Err(format!(
            "tool {} takes {} bytes to describe, more than {MAX_SPEC_BYTES}",
            crate::support::text::quoted_prefix(&s.name, 64),
            s.name.len() + s.description.len() + s.args_schema.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut schemas = Vec::with_capacity(specs.len());
    for s in specs {
        let ok =
            !s.name.is_empty() && s.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok || s.name.len() > 64 {
            return Err(format!(
                "tool name {} must use lowercase letters, digits and `_` (at most 64)",
                crate::support::text::quoted_prefix(&s.name, 64)
            ));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(format!("tool name {:?} appears twice", s.name));
        }
        let schema: serde_json::Value = serde_json::from_str(&s.args_schema)
            .map_err(|e| format!("tool {:?}: args-schema is not JSON: {e}", s.name))?;
        match schema {
            serde_json::Value::Object(o) if o.get("type").and_then(|t| t.as_str()) == Some("object") => schemas.push(o),
            _ => {
                return Err(format!("tool {:?}: args-schema must be a JSON Schema with \"type\": \"object\"", s.name));
            }
        }
    }
    Ok(schemas)
}
