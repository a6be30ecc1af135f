//! One running tool instance ([`ToolInstance`]): instantiate, `open`, run any request
//! ([`Ask`]) under a deadline, and recycle after a fault.
//!
//! Lifecycle: [`ComponentVersion::load`] compiles (or loads from cache) and
//! pre-instantiates a component once per version. [`ToolInstance::open`]
//! instantiates it in a fresh store (microseconds with the pooling allocator),
//! calls `open(config)` and `specs()`: cheap, so the tools are listed at once.
//! [`ToolInstance::prepare`] then runs the guest's `prepare` (an index build) on each member of
//! the pool, which joins the fair queue once prepared; calls wait for a member, forwarding the
//! preparation's progress, within the instance's deadline. Each [`ToolInstance::ask`] runs through
//! [`run_guarded`] (see [`crate::runtime::guarded`]) on a member of the instance's
//! [`StorePool`], which keeps the pool's rules: on any trap, out-of-memory, resource exhaustion or
//! missed deadline the store is dropped and the next call starts a new one; a store whose call
//! future is dropped part-way (a timeout, a cancelled caller) is dropped with it, never reused.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::args::Args;
use crate::bindings::quarry::retrieval::types::Catalog;
use crate::bindings::{ToolHost, ToolOutput};
use crate::capability::CallCx;
use crate::capability::client::{Asker, Client, ListKind};
use crate::capability::embedder::EmbedderBackend;
use crate::capability::progress::{self, Report};
use crate::config::InstanceConfig;
use crate::runtime::engine::QuarryEngine;
pub use crate::runtime::guarded::Fault;
use crate::runtime::guarded::{new_store, run_guarded, run_guarded_for};
use crate::runtime::pool::{Lease, StorePool};
use crate::runtime::store::StoreState;

use super::ask::Ask;
use super::ask::call::Call;
use super::errors::{CallError, MAX_ERROR_BYTES, MAX_REJECTION_BYTES, OpenError, bounded, with_denials};
use super::specs::{ToolEntry, check_catalog, entries};
use super::version::ComponentVersion;

/// What each hit costs in output beside its strings: the record, and the JSON object it
/// becomes for MCP and `--json` (`{"content":"","score":null,"source":null,"metadata":{}}`).
pub const HIT_OVERHEAD: usize = super::ask::RECORD_OVERHEAD;

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

    /// How many members serve calls in parallel (the config's `pool`).
    pub fn members(&self) -> usize {
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
        let call = Call { tool: tool.to_string(), args: args.clone() };
        self.ask(call, Caller::default(), std::future::pending()).await
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

    /// Asks `ask` (a tool call, a resource read, ...) of the first free member for `caller`,
    /// given up if `cancelled` completes while it still waits for a member (behind other
    /// calls, or for the instance to prepare). Once it runs it runs to its end: stopping it
    /// part-way would cost the member its store.
    ///
    /// While the instance prepares, it waits, forwarding the preparation's progress, for at most
    /// the instance's deadline; then it fails with [`CallError::NotReady`], which says how far
    /// along the preparation is. What the client sent with it is bounded here, once, for every
    /// kind ([`crate::args::fits`]).
    pub async fn ask<A: Ask>(
        &self,
        ask: A,
        caller: Caller<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<A::Answer, CallError> {
        let qualified = ask.what(&self.name);
        // A call's arguments, a read's URI, a prompt's arguments, a completion's value come
        // from the client.
        let size = ask.bytes();
        if !crate::args::fits(size) {
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
            let mut answer = self.run(&qualified, ask, live, &mut lease, caller).await?;
            A::qualify(&mut answer, &self.name, &self.config.resource_schemes);
            Ok(answer)
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

    async fn run<A: Ask>(
        &self,
        qualified: &str,
        ask: A,
        mut live: Live,
        lease: &mut Lease<'_, Live>,
        caller: Caller<'_>,
    ) -> Result<A::Answer, CallError> {
        let listener = caller.listener;
        // Owned: the guest call's future must own what it uses.
        let (bindings, handle) = (live.bindings.clone(), live.handle);
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
                Box::pin(async move { ask.invoke(&bindings, store, handle).await })
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
                let size = A::size(&out);
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
