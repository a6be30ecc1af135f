//! The registry: every configured tool instance, name resolution, calls, and
//! the atomic swap that hot reload performs.
//!
//! Swapping: [`Registry::reload`] walks what depends on a changed file (a component, a model a
//! section reads), the same for tools and embedders: it compiles the new component once and
//! opens (and prepares) every dependent *beside* the running ones (the first member of each
//! pool; the others prepare after); only when all of them have does it replace them, under a
//! write lock held for a few pointer stores.
//! Calls already running hold an `Arc` of the old instance and finish on it.
//! If the new version fails to compile, link or open, nothing changes and the
//! error says why.
//!
//! The core of the host:
//! - [`instance`] is one running tool instance (a pool of members), which runs any request kind
//!   of [`ask`] (a call, a resource read, a prompt, ...); `catalog` routes the requests beside
//!   calls to the instance that owns them;
//! - [`version`] is one component version, compiled once; [`specs`] checks what it offers;
//!   [`errors`] says why opening or a request failed;
//! - [`embedders`] is the embedder components as a pool, the embedder capability's backend;
//! - [`tool_metrics`] counts each tool's calls for `/metrics`.

pub mod ask;
mod catalog;
pub mod embedders;
pub mod errors;
pub mod instance;
pub mod specs;
pub mod tool_metrics;
pub mod uri_template;
pub mod version;

pub use catalog::{PromptEntry, ReadError, Target};

use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::Linker;

use crate::args::{Args, ArgsError};
use crate::bindings::ToolOutput;
use crate::capability::client::ListKind;
use crate::capability::embedder::EmbedderBackend;
use crate::config::{Config, InstanceConfig};
use crate::registry::ask::call::Call;
use crate::registry::embedders::{ComponentEmbedder, EmbedderSlot};
use crate::registry::errors::{CallError, OpenError};
use crate::registry::instance::{Caller, Readiness, ToolInstance};
pub use crate::registry::specs::ToolEntry;
use crate::registry::tool_metrics::ToolMetrics;
use crate::registry::version::{ComponentVersion, compile};
use crate::runtime::engine::{EngineError, QuarryEngine};
use crate::runtime::store::StoreState;

pub use crate::args::MAX_ARGS_BYTES;
/// The longest tool name looked up for suggestions; a longer one is no near miss.
pub const MAX_NAME_BYTES: usize = 256;
/// The longest reason kept for an instance that did not load.
pub const MAX_FAILURE_BYTES: usize = 4 << 10;
/// How long a listing waits for instances still opening before it lists the others. Opening
/// is reading a config and a manual and compiling a component (once; then cached): seconds at
/// most, so an instance still opening after this is slow for its own reasons, and CrewAI gives
/// up on a listing after 30 s.
pub const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a successful swap did.
#[derive(Debug, Clone)]
pub struct SwapReport {
    /// The component file.
    pub path: PathBuf,
    /// The instances now running the new version.
    pub instances: Vec<String>,
    /// SHA-256 (hex) of the new version.
    pub hash: String,
    /// Time from start of reload to the new version serving.
    pub elapsed: std::time::Duration,
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// No configured instance uses this file.
    #[error("{0} is not a configured component")]
    NotConfigured(PathBuf),
    /// The file is the version already serving.
    #[error("{0} is unchanged")]
    Unchanged(PathBuf),
    /// The new version was rejected; the old one keeps serving.
    #[error("new version of {path} rejected, the previous version keeps serving: {source}")]
    Rejected {
        /// The component file.
        path: PathBuf,
        /// Why.
        source: OpenError,
    },
    /// A changed model file was refused (its pin, its manifest); the loaded model keeps serving.
    #[error("changed model {path} refused, the model loaded before keeps serving: {message}")]
    ModelRefused {
        /// The model file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// Errors creating the host.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The engine could not be built.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Linking WASI or a capability failed (a bug).
    #[error("cannot link host capabilities: {0}")]
    Link(String),
}

/// Every loaded tool and embedder instance of one config: what the host serves.
pub struct Registry {
    config: Config,
    engine: QuarryEngine,
    linker: Linker<StoreState>,
    tools: RwLock<BTreeMap<String, Arc<ToolInstance>>>,
    /// Every tool of `tools`, sorted by qualified name: rebuilt with each change to `tools`,
    /// shared by every listing.
    listing: RwLock<Arc<[ToolEntry]>>,
    embedders: RwLock<BTreeMap<String, Arc<EmbedderSlot>>>,
    failed: Mutex<BTreeMap<String, String>>,
    changes: tokio::sync::broadcast::Sender<SwapReport>,
    /// Whether [`Registry::load_all`] has opened what it could: the tools are known.
    loaded: tokio::sync::watch::Sender<bool>,
    /// Instances [`Registry::load_all`] is still opening.
    opening: Mutex<std::collections::BTreeSet<String>>,
    /// Every tool's calls, errors and latency, for `/metrics`.
    metrics: ToolMetrics,
    /// Whether the one who loads the instances says their failures to prepare itself (the CLI's
    /// one-shot subcommands, which wait for [`Registry::prepared`]): then the log does not say
    /// them again.
    caller_reports: std::sync::atomic::AtomicBool,
}

/// Whether the host serves every configured tool, for `/readyz`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadyReport {
    /// What is still on its way: an instance opening or preparing.
    pub waiting: Vec<String>,
    /// What failed (an instance or embedder that did not load or prepare, a capability that
    /// cannot reach what it serves from), with why.
    pub failed: Vec<String>,
}

impl ReadyReport {
    /// Whether everything serves.
    pub fn ready(&self) -> bool {
        self.waiting.is_empty() && self.failed.is_empty()
    }
}

impl Registry {
    /// Builds the engine and links every capability. Loads nothing yet.
    pub fn new(config: Config) -> Result<Arc<Registry>, RegistryError> {
        let engine = QuarryEngine::with_cache(config.cache_dir.clone())?
            .with_max_component_bytes(config.max_component_bytes)
            .with_compile_limits(config.compile_limits);
        let linker = build_linker(engine.engine()).map_err(|e| RegistryError::Link(format!("{e:#}")))?;
        let (changes, _) = tokio::sync::broadcast::channel(64);
        Ok(Arc::new(Registry {
            config,
            engine,
            linker,
            tools: RwLock::default(),
            listing: RwLock::new(Arc::new([])),
            embedders: RwLock::default(),
            failed: Mutex::default(),
            changes,
            loaded: tokio::sync::watch::channel(false).0,
            opening: Mutex::default(),
            metrics: ToolMetrics::default(),
            caller_reports: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The engine.
    pub fn engine(&self) -> &QuarryEngine {
        &self.engine
    }

    /// The capabilities' state for this registry's stores (its models, its progress bus).
    pub fn apps(&self) -> &crate::capability::AppStates {
        self.engine.apps()
    }

    /// Loads every embedder, then opens every configured tool instance (the cheap part: the
    /// tools are known when it has opened) and starts preparing each in the background (index
    /// builds; see [`ToolInstance::prepare`]). Instances open side by side, each installed as
    /// it opens; [`Registry::loaded`] waits for them at most [`LIST_WAIT`], so an instance slow
    /// to open does not hold up the listing of the others: it is listed when it opens (with a
    /// [`SwapReport`], which MCP sessions hear as `tools/list_changed`), or fails on its own.
    /// Returns, once every instance has opened or failed, those that failed (sorted by name).
    pub async fn load_all(self: &Arc<Self>) -> Vec<(String, OpenError)> {
        let mut failures = self.open_embedders().await;
        let mut by_component: BTreeMap<PathBuf, Vec<InstanceConfig>> = BTreeMap::new();
        for cfg in self.config.tools.values() {
            by_component.entry(cfg.component.clone()).or_default().push(cfg.clone());
        }
        self.opening.lock().extend(self.config.tools.keys().cloned());
        let mut tasks = tokio::task::JoinSet::new();
        for (path, cfgs) in by_component {
            let this = self.clone();
            tasks.spawn(async move { this.open_component(path, cfgs).await });
        }
        let mut wait = std::pin::pin!(tokio::time::sleep(LIST_WAIT));
        loop {
            tokio::select! {
                next = tasks.join_next() => match next {
                    Some(Ok(f)) => failures.extend(f),
                    Some(Err(e)) => tracing::error!(target: "quarry::load", "an instance's opening task ended: {e}"),
                    None => break,
                },
                () = &mut wait, if !*self.loaded.borrow() => {
                    let still: Vec<String> = self.opening.lock().iter().cloned().collect();
                    tracing::warn!(target: "quarry::load", instances = ?still, "still opening after {LIST_WAIT:?}: the others' tools are listed; these follow when they open");
                    self.loaded.send_replace(true);
                }
            }
        }
        self.loaded.send_replace(true);
        failures.sort_by(|a, b| a.0.cmp(&b.0));
        failures
    }

    /// Loads every embedder (tools need them to open); returns those that failed.
    async fn open_embedders(&self) -> Vec<(String, OpenError)> {
        let mut failures = Vec::new();
        for (name, cfg) in &self.config.embedders {
            match ComponentEmbedder::open(&self.engine, &self.linker, Arc::new(cfg.clone())).await {
                Ok(e) => {
                    let info = e.info();
                    tracing::info!(target: "quarry::load", embedder = %name, model = %info.id, dimension = info.dimension, "loaded");
                    self.embedders.write().insert(name.clone(), Arc::new(EmbedderSlot::new(e)));
                }
                Err(e) => {
                    self.record_failure(&format!("embedders.{name}"), &e);
                    failures.push((format!("embedders.{name}"), e));
                }
            }
        }
        failures
    }

    /// Compiles `path` once and opens each of `cfgs` on it, side by side.
    async fn open_component(self: Arc<Self>, path: PathBuf, cfgs: Vec<InstanceConfig>) -> Vec<(String, OpenError)> {
        let start = Instant::now();
        let mut failures = Vec::new();
        let mut cfgs = cfgs.into_iter();
        // As many tries as instances until one compiles: each failing instance gets its own error.
        let (version, first) = loop {
            let Some(cfg) = cfgs.next() else { return failures };
            match ComponentVersion::load(&self.engine, &self.linker, &path).await {
                Ok(v) => break (v, cfg),
                Err(e) => {
                    self.record_failure(&cfg.name, &e);
                    self.opening.lock().remove(&cfg.name);
                    failures.push((cfg.name.clone(), e));
                }
            }
        };
        let mut tasks = tokio::task::JoinSet::new();
        for cfg in std::iter::once(first).chain(cfgs) {
            let (this, version, path) = (self.clone(), version.clone(), path.clone());
            tasks.spawn(async move {
                let outcome = this.open_instance(&cfg, version.clone()).await;
                this.opened(&cfg, &path, &version, outcome, start)
            });
        }
        failures.extend(tasks.join_all().await.into_iter().flatten());
        failures
    }

    /// Installs an instance that opened (unless a reload got there first) and starts preparing
    /// it; after [`Registry::loaded`], says so to whoever listens for list changes.
    fn opened(
        &self,
        cfg: &InstanceConfig,
        path: &Path,
        version: &ComponentVersion,
        outcome: Result<ToolInstance, OpenError>,
        start: Instant,
    ) -> Option<(String, OpenError)> {
        let name = &cfg.name;
        let inst = match outcome {
            Ok(inst) => Arc::new(inst),
            Err(e) => {
                self.record_failure(name, &e);
                self.opening.lock().remove(name);
                return Some((name.clone(), e));
            }
        };
        tracing::info!(target: "quarry::load", instance = %name, tools = inst.tools().len(), pool = inst.members(), elapsed = ?start.elapsed(), "opened; preparing");
        let installed = self.install_new(&inst);
        self.opening.lock().remove(name);
        if !installed {
            return None;
        }
        if *self.loaded.borrow() {
            let report = SwapReport {
                path: path.to_path_buf(),
                instances: vec![name.clone()],
                hash: hex::encode(version.hash),
                elapsed: start.elapsed(),
            };
            tracing::info!(target: "quarry::load", instance = %name, "listed late: it opened after the others were listed");
            let _ = self.changes.send(report);
        }
        let apps = self.engine.apps().clone();
        let caller_reports = self.caller_reports.load(std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(async move {
            let start = Instant::now();
            match inst.prepare().await {
                Ok(()) => {
                    tracing::info!(target: "quarry::load", instance = %inst.name, elapsed = ?start.elapsed(), "ready");
                    // A listing may have left its resources out while it prepared.
                    if inst.catalog.lists_resources {
                        apps.client.announce(&inst.name, ListKind::Resources);
                    }
                }
                Err(e) if caller_reports => {
                    tracing::debug!(target: "quarry::load", instance = %inst.name, "not prepared: {e}");
                }
                Err(e) => {
                    let why = crate::support::text::cut(&e.to_string(), MAX_FAILURE_BYTES);
                    tracing::error!(target: "quarry::load", instance = %inst.name, "not prepared (each call tries again): {why}");
                }
            }
        });
        None
    }

    /// Waits until [`Registry::load_all`] has returned (in another task): the tools are known.
    pub async fn loaded(&self) {
        let mut rx = self.loaded.subscribe();
        let _ = rx.wait_for(|l| *l).await;
    }

    /// Says that whoever loads the instances reports their failures to prepare itself (after
    /// [`Registry::prepared`]), so the log does not say them a second time.
    pub fn failures_reported_by_caller(&self) {
        self.caller_reports.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits until every tool instance has prepared or failed; returns those that failed, with why.
    pub async fn prepared(&self) -> Vec<(String, String)> {
        let tools: Vec<Arc<ToolInstance>> = self.tools.read().values().cloned().collect();
        let mut failed = Vec::new();
        for inst in tools {
            if let crate::registry::instance::Readiness::Failed(why) = inst.prepared().await {
                failed.push((inst.name.clone(), why));
            }
        }
        failed
    }

    /// Whether every configured instance and embedder has loaded and every instance has
    /// prepared, and the capabilities reach what they serve from. Waits for nothing but the
    /// capabilities' checks, each bounded.
    pub async fn readiness(&self) -> ReadyReport {
        let mut report = ReadyReport::default();
        let failures = self.failures();
        for (name, why) in &failures {
            report.failed.push(format!("{name}: did not load: {why}"));
        }
        let opening = self.opening.lock().clone();
        let tools = self.tools.read().clone();
        for name in self.config.tools.keys() {
            match tools.get(name).map(|inst| inst.readiness()) {
                Some(Readiness::Ready) => {}
                // With what it is doing: a host of a fleet may be waiting for another's build.
                Some(Readiness::Preparing) => {
                    report.waiting.push(format!("{name}: {}", tools.get(name).map(|i| i.status()).unwrap_or_default()))
                }
                Some(Readiness::Failed(why)) => report.failed.push(format!("{name}: preparation failed: {why}")),
                None if opening.contains(name) => report.waiting.push(format!("{name}: opening")),
                // Not served and not opening: its failure is listed above.
                None => {}
            }
        }
        // Before loading starts no instance is opening yet, and none is served.
        if report.waiting.is_empty() && !*self.loaded.borrow() {
            report.waiting.push("the host is still loading its instances".into());
        }
        report.failed.extend(self.config.sections.unreachable().await);
        report
    }

    /// Every serving tool instance, by name.
    pub fn instances(&self) -> Vec<Arc<ToolInstance>> {
        self.tools.read().values().cloned().collect()
    }

    /// Every tool's calls, errors and latency.
    pub fn metrics(&self) -> &ToolMetrics {
        &self.metrics
    }

    /// Tool instance `name`, if it opened.
    pub fn instance(&self, name: &str) -> Option<Arc<ToolInstance>> {
        self.tools.read().get(name).cloned()
    }

    fn record_failure(&self, name: &str, e: &OpenError) {
        // Kept for the life of the host and repeated in hints: a component chose part of it.
        let why = crate::support::text::cut(&e.to_string(), MAX_FAILURE_BYTES);
        // Debug only: load_all's caller says it (the CLI once, on stderr); at error level here
        // it was said twice.
        tracing::debug!(target: "quarry::load", instance = %name, "not loaded: {why}");
        self.failed.lock().insert(name.to_string(), why);
    }

    async fn open_instance(
        &self,
        cfg: &InstanceConfig,
        version: Arc<ComponentVersion>,
    ) -> Result<ToolInstance, OpenError> {
        let embedder: Option<Arc<dyn EmbedderBackend>> = match &cfg.embedder {
            None => None,
            Some(e) => {
                let slot = self.embedders.read().get(e).cloned();
                match slot {
                    Some(slot) => Some(slot),
                    None => {
                        return Err(OpenError::EmbedderUnavailable {
                            instance: cfg.name.clone(),
                            embedder: e.clone(),
                            reason: self
                                .failures()
                                .get(&format!("embedders.{e}"))
                                .cloned()
                                .unwrap_or_else(|| "not loaded".into()),
                        });
                    }
                }
            }
        };
        let inst = ToolInstance::open(&self.engine, Arc::new(cfg.clone()), version, embedder).await?;
        self.check_claims(&inst)?;
        Ok(inst)
    }

    /// Refuses an instance with `bare_names` whose tools take a name another instance answers
    /// to: the name of an instance in the config (it answers to it when it has one tool), or a
    /// tool another `bare_names` instance lists. Whichever loads second is refused, naming both.
    fn check_claims(&self, inst: &ToolInstance) -> Result<(), OpenError> {
        if !inst.config.bare_names {
            return Ok(());
        }
        let claimed = |name: &str, other: &str, how| OpenError::NameClaimed {
            instance: inst.name.clone(),
            name: name.to_string(),
            other: other.to_string(),
            how,
        };
        let tools = self.tools.read();
        for t in inst.tools().iter() {
            let name = t.spec.name.as_str();
            if let Some(other) = self.config.tools.keys().find(|i| *i != &inst.name && *i == name) {
                return Err(claimed(name, other, "is named"));
            }
            let listed_bare = tools
                .values()
                .find(|o| o.name != inst.name && o.config.bare_names && o.tools().iter().any(|e| e.spec.name == name));
            if let Some(other) = listed_bare {
                return Err(claimed(name, &other.name, "also lists bare"));
            }
        }
        Ok(())
    }

    /// Embedder `name`, if it is loaded: what tools' `embedder` imports call.
    pub fn embedder(&self, name: &str) -> Option<Arc<dyn EmbedderBackend>> {
        let slots = self.embedders.read();
        slots.get(name).map(|s| s.clone() as Arc<dyn EmbedderBackend>)
    }

    /// Serves embedder `name` from `e` from now on (its tools switch at their next embed; calls in
    /// flight finish on the old version), and forgets an earlier failure to load it.
    fn install_embedder(&self, name: &str, e: ComponentEmbedder) {
        let slot = self.embedders.read().get(name).cloned();
        match slot {
            Some(slot) => slot.replace(e),
            None => {
                self.embedders.write().insert(name.to_string(), Arc::new(EmbedderSlot::new(e)));
            }
        }
        self.failed.lock().remove(&format!("embedders.{name}"));
    }

    /// Instances that failed to load, with why.
    pub fn failures(&self) -> BTreeMap<String, String> {
        self.failed.lock().clone()
    }

    /// Every tool of every loaded instance, sorted by qualified name.
    pub fn tools(&self) -> Arc<[ToolEntry]> {
        self.listing.read().clone()
    }

    /// Tool `qualified` (`instance.tool`), if it is loaded.
    pub fn tool(&self, qualified: &str) -> Option<ToolEntry> {
        let listing = self.tools();
        listing.binary_search_by(|t| t.qualified.as_str().cmp(qualified)).ok().map(|i| listing[i].clone())
    }

    /// Serves `instances` from now on, replacing those of the same names, and lists their tools.
    fn install(&self, instances: impl IntoIterator<Item = Arc<ToolInstance>>) {
        let mut tools = self.tools.write();
        for inst in instances {
            tools.insert(inst.name.clone(), inst);
        }
        self.relist(&tools);
    }

    /// Serves `inst` unless an instance of its name is served (a reload that came first): whether
    /// it did.
    fn install_new(&self, inst: &Arc<ToolInstance>) -> bool {
        let mut tools = self.tools.write();
        if tools.contains_key(&inst.name) {
            return false;
        }
        tools.insert(inst.name.clone(), inst.clone());
        self.relist(&tools);
        true
    }

    /// Lists the tools again when a call of `inst` said they changed.
    fn relist_if_respecced(&self, inst: &ToolInstance) {
        if inst.take_respecced() {
            self.relist(&self.tools.write());
        }
    }

    /// Lists the tools of `tools`; called while they are still locked for writing, so that two
    /// installs cannot list out of order.
    fn relist(&self, tools: &BTreeMap<String, Arc<ToolInstance>>) {
        let mut listing: Vec<ToolEntry> = tools.values().flat_map(|inst| inst.tools().to_vec()).collect();
        listing.sort_by(|a, b| a.qualified.cmp(&b.qualified));
        // A bare name (`bare_names = true`) that another instance's tool also has: the first
        // instance by name keeps it, and the operator hears of it.
        listing.dedup_by(|b, a| {
            let twice = a.qualified == b.qualified;
            if twice {
                tracing::warn!(target: "quarry::load", tool = %b.qualified, "instances {} and {} both list this name; {} keeps it (rename one, or drop bare_names)", a.instance, b.instance, a.instance);
            }
            twice
        });
        *self.listing.write() = listing.into();
    }

    /// Calls `name` (`instance.tool`, or `instance` when it offers one tool) with `args`, JSON
    /// text as a user typed it: checked once to be an object, then passed on as it is.
    pub async fn call(&self, name: &str, args: &str) -> Result<ToolOutput, CallError> {
        let e = match Args::parse(args) {
            Ok(args) => return self.call_cancellable(name, &args, Caller::default(), std::future::pending()).await,
            Err(e) => e,
        };
        let started = Instant::now();
        let (inst, tool) = self.resolve(name)?;
        let qualified = format!("{}.{tool}", inst.name);
        let out = Err(match e {
            ArgsError::TooLarge(size) => CallError::ArgsTooLarge { tool: qualified, size, limit: MAX_ARGS_BYTES },
            ArgsError::NotAnObject(message) => {
                let tools = inst.tools();
                let example = tools
                    .iter()
                    .find(|t| t.spec.name == tool)
                    .map_or_else(|| "{}".into(), |t| crate::args::example(&t.schema));
                CallError::BadArgs { tool: qualified, example, message }
            }
        });
        self.count(&inst, &tool, started, &out);
        out
    }

    /// Counts a call of `inst`'s `tool` that started at `started` and ended as `out`.
    fn count(&self, inst: &ToolInstance, tool: &str, started: Instant, out: &Result<ToolOutput, CallError>) {
        self.relist_if_respecced(inst);
        let qualified = format!("{}.{tool}", inst.name);
        self.metrics.record(&qualified, started.elapsed(), out.as_ref().err().map(CallError::kind));
    }

    /// Calls `name` with `args` for `caller`, given up if `cancelled` completes before the call
    /// starts to run (see [`ToolInstance::ask`]).
    pub async fn call_cancellable(
        &self,
        name: &str,
        args: &Args,
        caller: Caller<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<ToolOutput, CallError> {
        let started = Instant::now();
        let (inst, tool) = self.resolve(name)?;
        let out = inst.ask(Call { tool: tool.clone(), args: args.clone() }, caller, cancelled).await;
        self.count(&inst, &tool, started, &out);
        out
    }

    fn resolve(&self, name: &str) -> Result<(Arc<ToolInstance>, String), CallError> {
        let listed = self.tool(name);
        let tools = self.tools.read();
        if let Some(entry) = listed
            && let Some(inst) = tools.get(&entry.instance)
        {
            return Ok((inst.clone(), entry.spec.name));
        }
        let (inst_name, tool) = match name.split_once('.') {
            Some((i, t)) => (i, Some(t)),
            None => (name, None),
        };
        if let Some(inst) = tools.get(inst_name) {
            match tool {
                Some(t) if inst.tools().iter().any(|e| e.spec.name == t) => {
                    return Ok((inst.clone(), t.to_string()));
                }
                None if inst.tools().len() == 1 => {
                    return Ok((inst.clone(), inst.tools()[0].spec.name.clone()));
                }
                _ => {}
            }
        }
        drop(tools);
        self.metrics.unknown_tool();
        let listing = self.tools();
        let all: Vec<&String> = listing.iter().map(|t| &t.qualified).collect();
        if name.len() > MAX_NAME_BYTES {
            // Suggestions cost time in proportion to the name's length: a name this long is
            // no typo, and is not echoed whole either.
            return Err(CallError::UnknownTool {
                name: crate::support::text::cut(name, 64),
                hint: format!("tool names are short; run `quarry list` to see the {} available tools", all.len()),
            });
        }
        let failed = self.failures();
        let hint = if self.opening.lock().contains(inst_name) {
            format!(
                "instance {inst_name:?} is still opening; its tools are listed when it has (a tools/list_changed says so)"
            )
        } else if let Some(why) = failed.get(inst_name) {
            format!("instance {inst_name:?} did not load: {why}")
        } else {
            let mut near: Vec<&String> = all.iter().copied().filter(|q| similar(q, name)).collect();
            near.truncate(5);
            if near.is_empty() {
                format!("run `quarry list` to see the {} available tools", all.len())
            } else {
                format!("did you mean {}?", near.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" or "))
            }
        };
        Err(CallError::UnknownTool { name: name.to_string(), hint })
    }

    /// Subscribes to successful swaps.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<SwapReport> {
        self.changes.subscribe()
    }

    /// Reloads what depends on the file at `path`, in one walk whatever the file is (see the
    /// module docs):
    /// 1. a file a capability's section reads (a model file of `[models.NAME]`) is loaded again
    ///    by its capability (unless it refuses it: a pin, a manifest); the changed sections are
    ///    then what the rest depends on;
    /// 2. the dependents: the embedders whose component is `path` or whose grants use a changed
    ///    section, and the tool instances whose component is `path`;
    /// 3. each is opened (and a tool prepared) beside the one serving, which serves meanwhile;
    ///    one already running this component version is left alone;
    /// 4. only when every one has opened are they swapped in, together: if one fails, nothing
    ///    changes and the error says why.
    ///
    /// Tools keep their link to an embedder (an [`EmbedderSlot`]) and see its new version at
    /// their next embed; tools granted a model directly get it at their next `load-by-name`.
    pub async fn reload(&self, path: &Path) -> Result<SwapReport, ReloadError> {
        let out = self.swap(path).await;
        match &out {
            Ok(_) => self.metrics.swap(true),
            // A file that changes nothing is no swap, and no failure.
            Err(ReloadError::NotConfigured(_) | ReloadError::Unchanged(_)) => {}
            Err(_) => self.metrics.swap(false),
        }
        out
    }

    /// [`Registry::reload`], uncounted.
    async fn swap(&self, path: &Path) -> Result<SwapReport, ReloadError> {
        let start = Instant::now();
        let sections = if self.config.sections.reads(path) { self.reload_sections(path).await? } else { Vec::new() };
        let uses_changed = |c: &InstanceConfig| sections.iter().any(|s| c.grants.caps.uses(s));
        let embedders: Vec<&InstanceConfig> =
            self.config.embedders.values().filter(|c| c.component == path || uses_changed(c)).collect();
        let tools: Vec<&InstanceConfig> = self.config.tools.values().filter(|c| c.component == path).collect();
        if sections.is_empty() && embedders.is_empty() && tools.is_empty() {
            return Err(ReloadError::NotConfigured(path.to_path_buf()));
        }
        let rejected = |source| ReloadError::Rejected { path: path.to_path_buf(), source };
        // Read and compiled once, for every dependent that runs it.
        let compiled = if embedders.iter().chain(&tools).any(|c| c.component == path) {
            Some(compile(&self.engine, path).await.map_err(rejected)?)
        } else {
            None
        };
        let mut hash = compiled.as_ref().map(|c| hex::encode(c.hash)).unwrap_or_default();
        let mut new_embedders = Vec::new();
        for cfg in embedders {
            let running = self.embedders.read().get(&cfg.name).map(|slot| slot.current().hash);
            let cfg_arc = Arc::new(cfg.clone());
            let e = match &compiled {
                Some(c) if cfg.component == path => {
                    if running == Some(c.hash) && !uses_changed(cfg) {
                        continue;
                    }
                    ComponentEmbedder::from_compiled(&self.engine, &self.linker, cfg_arc, c.clone()).await
                }
                // Restarted for a changed section: its own component, as it was.
                _ => ComponentEmbedder::open(&self.engine, &self.linker, cfg_arc).await,
            }
            .map_err(rejected)?;
            hash = hex::encode(e.hash);
            new_embedders.push((cfg.name.clone(), e));
        }
        let mut new_tools = Vec::new();
        if let Some(c) = &compiled
            && !tools.is_empty()
        {
            let version =
                ComponentVersion::from_compiled(&self.engine, &self.linker, path, c.clone()).map_err(rejected)?;
            for cfg in tools {
                if self.tools.read().get(&cfg.name).is_some_and(|i| i.version.hash == version.hash) {
                    continue;
                }
                let inst = Arc::new(self.open_instance(cfg, version.clone()).await.map_err(rejected)?);
                inst.prepare().await.map_err(rejected)?;
                new_tools.push(inst);
            }
        }
        if sections.is_empty() && new_embedders.is_empty() && new_tools.is_empty() {
            return Err(ReloadError::Unchanged(path.to_path_buf()));
        }
        // Every dependent opened: swapped in together.
        let mut instances: Vec<String> = Vec::new();
        for (name, e) in new_embedders {
            self.install_embedder(&name, e);
            instances.push(name);
        }
        let tool_names: Vec<String> = new_tools.iter().map(|i| i.name.clone()).collect();
        self.install(new_tools);
        {
            let mut failed = self.failed.lock();
            for i in &tool_names {
                failed.remove(i);
            }
        }
        instances.extend(tool_names);
        let report = SwapReport { path: path.to_path_buf(), instances, hash, elapsed: start.elapsed() };
        tracing::info!(target: "quarry::swap", path = %path.display(), sections = ?sections, instances = ?report.instances, elapsed = ?report.elapsed, "new version serving");
        let _ = self.changes.send(report.clone());
        Ok(report)
    }

    /// Loads again what the capabilities' sections read from `path`: the sections now serving
    /// a changed file, or why the file is refused (the loaded one keeps serving).
    async fn reload_sections(&self, path: &Path) -> Result<Vec<String>, ReloadError> {
        let refused = |message: String| ReloadError::ModelRefused { path: path.to_path_buf(), message };
        let (sections, apps, file) = (self.config.sections.clone(), self.engine.apps().clone(), path.to_path_buf());
        let changed = tokio::task::spawn_blocking(move || sections.reload(&file, &apps))
            .await
            .map_err(|e| refused(format!("the model loader failed: {e}")))?
            .map_err(refused)?;
        if changed.is_empty() {
            return Err(ReloadError::Unchanged(path.to_path_buf()));
        }
        Ok(changed)
    }
}

/// Links WASI 0.2 and every capability ([`crate::capability::link_all`]): the whole grant
/// surface. What each instance may actually use is decided per store by its [`StoreState`].
pub fn build_linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    crate::capability::link_all(&mut linker)?;
    Ok(linker)
}

/// Near-miss test for suggestions: a shared prefix of the instance part, or a small edit distance.
fn similar(candidate: &str, asked: &str) -> bool {
    let (ci, ai) = (candidate.split('.').next().unwrap_or(""), asked.split('.').next().unwrap_or(""));
    ci == ai
        || candidate.ends_with(&format!(".{asked}"))
        || strsim::levenshtein(ci, ai) <= 2
        || strsim::levenshtein(candidate, asked) <= 2
}
