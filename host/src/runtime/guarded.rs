//! Running guest code under a deadline: a store made for it, one guarded call at a time, and
//! the outcome classified as a value or a [`Fault`] after which the store must be dropped.
//!
//! The guest yields its worker thread at every epoch tick (so long calls never starve the
//! others) and is interrupted once its call's absolute deadline has passed; a wall-clock
//! timeout bounds time blocked in host calls too, which epochs do not count. This module knows
//! no capability: it sees them as the store's bundle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTableError;
use wasmtime::{Store, Trap, UpdateDeadline};

use super::engine::QuarryEngine;
use super::limiter::{FREE_HANDLES, HOST_BYTES_PER_HANDLE};
use super::store::StoreState;
use crate::capability::CallCx;
use crate::capability::SandboxError;
use crate::capability::embedder::EmbedderBackend;
use crate::config::InstanceConfig;

/// Extra wall-clock time beyond the deadline before a call blocked in the host is abandoned.
pub(crate) const WALL_GRACE: Duration = Duration::from_millis(500);

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
    /// It held more host resources (wasi:http header sets, bodies, streams) than its memory
    /// grant allows.
    #[error(
        "held more host resources than its grants.memory allows ({limit} at once; past the first {}, each counts as {} KiB of host memory); release them, or raise grants.memory",
        FREE_HANDLES,
        HOST_BYTES_PER_HANDLE >> 10
    )]
    ResourceLimit {
        /// The number of resources it could hold when it was stopped.
        limit: usize,
    },
    /// Any other trap; the guest's last stderr lines are kept (a panic message, usually).
    #[error("trapped: {message}{}", stderr.as_ref().map(|s| format!("; its stderr said: {s}")).unwrap_or_default())]
    Trap {
        /// wasmtime's description.
        message: String,
        /// The guest's last stderr lines.
        stderr: Option<String>,
    },
}

/// A fresh store sandboxed by `config`'s grants. Its guest yields its thread at every epoch
/// tick and is interrupted once the running call's deadline ([`StoreState::begin_call`]) has
/// passed.
pub(crate) fn new_store(
    engine: &QuarryEngine,
    config: &InstanceConfig,
    embedder: Option<Arc<dyn EmbedderBackend>>,
) -> Result<Store<StoreState>, SandboxError> {
    let mut state = StoreState::new(config, embedder, engine.apps())?;
    state.yields = engine.yields();
    let memory = state.memory_limit();
    let mut store = Store::new(engine.engine(), state);
    store.limiter(StoreState::limiter);
    // What one lift from the guest may make the host allocate (a call's strings and lists, an
    // export's results): wasmtime's default is 128 MiB whatever the grant, and lists that all
    // alias one buffer lift to many times the guest's memory.
    store.set_hostcall_fuel(memory.clamp(1 << 20, DEFAULT_HOSTCALL_FUEL));
    if engine.yields() {
        // Yielding at each tick lets the runtime's other tasks (other calls, the MCP server's
        // accept loop, timers) run beside a long call on as few as two worker threads; the
        // deadline itself is the absolute instant of the call, so yielding never extends it.
        store.epoch_deadline_callback(|ctx| {
            Ok(if Instant::now() >= ctx.data().call_deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
    } else {
        store.epoch_deadline_trap();
    }
    Ok(store)
}

/// A boxed guest call on a store, for [`run_guarded`].
pub(crate) type GuestCall<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = wasmtime::Result<T>> + Send + 'a>>;

/// Runs one guest call on `store` under `deadline`: the epoch deadline (enforced by the
/// store's callback, see [`new_store`]), a wall-clock timeout for time blocked in host calls,
/// the end of the outgoing requests the call started, and the outcome classified as a value
/// or a [`Fault`] (after which the caller must drop the store), with the guest's stderr logged.
pub(crate) async fn run_guarded<T>(
    store: &mut Store<StoreState>,
    deadline: Duration,
    call: impl for<'a> FnOnce(&'a mut Store<StoreState>) -> GuestCall<'a, T>,
) -> Result<T, Fault> {
    run_guarded_for(store, deadline, CallCx::default(), call).await
}

/// [`run_guarded`] for a call that the capabilities see as `cx` (a tool's own code, or an
/// embedder's call for a tool's client).
pub(crate) async fn run_guarded_for<T>(
    store: &mut Store<StoreState>,
    deadline: Duration,
    cx: CallCx<'_>,
    call: impl for<'a> FnOnce(&'a mut Store<StoreState>) -> GuestCall<'a, T>,
) -> Result<T, Fault> {
    store.data_mut().begin_call(Instant::now() + deadline, &cx);
    // Yielding stores check their deadline at every tick; the others trap when it has passed.
    let yields = store.data().yields;
    store.set_epoch_deadline(if yields { 1 } else { QuarryEngine::ticks(deadline) });
    let res = tokio::time::timeout(deadline + WALL_GRACE, call(store)).await;
    store.data_mut().end_call().await;
    into_outcome(store, deadline, res)
}

pub(crate) type TimedOutcome<T> = Result<wasmtime::Result<T>, tokio::time::error::Elapsed>;

/// Turns the outcome of a guarded guest call into a value or a [`Fault`],
/// logging what the guest wrote to stderr.
fn into_outcome<T>(store: &mut Store<StoreState>, deadline: Duration, res: TimedOutcome<T>) -> Result<T, Fault> {
    let stderr = store.data().stderr.take();
    store.data_mut().logged = log_stderr(&stderr);
    let err = match res {
        Err(_) => return Err(Fault::Deadline(deadline)),
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => e,
    };
    if let Some(asked) = store.data().denied_growth() {
        return Err(Fault::OutOfMemory { asked, limit: store.data().memory_limit() });
    }
    if err.chain().any(|c| matches!(c.downcast_ref::<ResourceTableError>(), Some(ResourceTableError::Full))) {
        return Err(Fault::ResourceLimit { limit: store.data().handle_limit() });
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

/// wasmtime's own hostcall fuel: the most a lift may allocate when the grant is larger.
const DEFAULT_HOSTCALL_FUEL: usize = 128 << 20;
/// Most lines of one call's guest stderr logged, and the longest logged.
const STDERR_LINES_PER_CALL: usize = 16;
const STDERR_LINE_BYTES: usize = 1024;
/// The most of a guest's last words a fault carries.
const LAST_WORDS_BYTES: usize = 1024;
/// Guest stderr lines, all instances together: a guest writes as much as it likes.
static STDERR_LOG: crate::support::log_budget::LogBudget =
    crate::support::log_budget::LogBudget::new(32, Duration::from_millis(100));

/// Logs a call's guest stderr (lines that begin "warning:" as warnings): at most
/// [`STDERR_LINES_PER_CALL`] lines of at most [`STDERR_LINE_BYTES`], under the host's budget
/// for guest lines, with a count of the rest. Returns those lines (cut alike), for the caller of this call.
fn log_stderr(stderr: &str) -> Vec<String> {
    let mut lines = stderr.lines().filter(|l| !l.trim().is_empty());
    let mut kept = Vec::new();
    for line in lines.by_ref().take(STDERR_LINES_PER_CALL) {
        let line = crate::support::text::cut(line, STDERR_LINE_BYTES);
        if let Some(held) = STDERR_LOG.take() {
            let note = crate::support::log_budget::held_note(held);
            // A tool's "warning: …" (an index it cannot save, a manual it cannot parse) is for
            // the operator, who sees warnings by default.
            if line.starts_with("warning:") {
                tracing::warn!(target: "quarry::guest", "{line}{note}");
            } else {
                tracing::info!(target: "quarry::guest", "{line}{note}");
            }
        }
        kept.push(line);
    }
    let rest = lines.count();
    if rest > 0 && STDERR_LOG.take().is_some() {
        tracing::info!(target: "quarry::guest", "{rest} more lines of this call's stderr not logged");
    }
    kept
}

/// The guest's last two meaningful stderr lines, cut to [`LAST_WORDS_BYTES`]: for a Rust
/// panic, where it panicked and the message.
fn last_words(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(2)..];
    (!tail.is_empty()).then(|| crate::support::text::cut(&tail.join(" "), LAST_WORDS_BYTES))
}
