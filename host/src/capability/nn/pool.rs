//! Where inference runs: a bounded set of threads off the async runtime (one per core by
//! default), shared by every instance through a [`FairQueue`], so a tool ingesting a manual
//! takes its turn with a tool answering a query, and the MCP server's workers stay free.
//!
//! A job that starts while no other runs or waits and at most one tool call runs (a query on an
//! idle host) splits its matrix products over every core, as onnxruntime does for one run; under
//! load each job keeps to its own thread, which is the faster way to use the cores for many jobs.

use std::sync::{Arc, OnceLock};

use std::time::Instant;
use tract_linalg::multithread::{Executor, multithread_tract_scope};

use super::native::{Code, NnError};
use crate::fair::FairQueue;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The host's inference slots.
fn queue() -> &'static Arc<FairQueue> {
    static QUEUE: OnceLock<Arc<FairQueue>> = OnceLock::new();
    QUEUE.get_or_init(|| FairQueue::new(cores()))
}

/// tract's matrix products over every core, for a job alone on the pool.
fn wide() -> Executor {
    static WIDE: OnceLock<Executor> = OnceLock::new();
    WIDE.get_or_init(|| Executor::multithread_with_name(cores(), "quarry-nn")).clone()
}

/// Tool calls running in the host, all instances together (see [`Busy`]).
static TOOL_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Held while a tool's guest code runs (a call, a preparation): a job goes wide only when at most
/// one is running, since a second call's guest code would share the cores the wide job splits
/// over, and tract's matrix products wait for their slowest thread. Measured with `make
/// bench-mcp` (2 cores, `pool = 2`, 8 clients): 81 calls/s when jobs went wide beside another
/// call's guest code, 106 when they did not.
pub struct Busy(());

impl Busy {
    /// A tool call starts running.
    pub fn enter() -> Busy {
        TOOL_CALLS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        TOOL_CALLS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Slots free now, and clients waiting (for tests and benches).
pub fn load() -> (usize, usize) {
    queue().load()
}

/// Runs `job` on an inference thread when `client`'s turn comes, unless `deadline` passes
/// first: a job never waits past it, and one that would start after it is refused. A caller
/// that gives up does not stop a job that has started; the job keeps its slot until it ends,
/// so the pool never runs more jobs than it has slots.
pub async fn run<T: Send + 'static>(
    client: &str,
    deadline: Instant,
    job: impl FnOnce() -> Result<T, NnError> + Send + 'static,
) -> Result<T, NnError> {
    let late = || NnError::new(Code::Timeout, "the call's deadline passed before the inference could start");
    let permit = tokio::time::timeout_at(deadline.into(), queue().acquire(client)).await.map_err(|_| late())?;
    if Instant::now() >= deadline {
        return Err(late());
    }
    let (free, waiting) = queue().load();
    let calls = TOOL_CALLS.load(std::sync::atomic::Ordering::Acquire);
    let alone = cores() > 1 && free + 1 == cores() && waiting == 0 && calls <= 1;
    tokio::task::spawn_blocking(move || {
        let _slot = permit;
        if alone { multithread_tract_scope(wide(), job) } else { job() }
    })
    .await
    .map_err(|e| NnError::new(Code::Runtime, format!("the inference thread failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_never_waits_or_starts_past_its_deadline() {
        // Past already: refused without running.
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let e = run("late", Instant::now(), move || {
            r.store(true, Ordering::Relaxed);
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(e.code, Code::Timeout);
        assert!(!ran.load(Ordering::Relaxed));

        // Every slot busy for 2 s: a job due in 200 ms gives up in about that, and never runs.
        let (slots, _) = load();
        let busy: Vec<_> = (0..slots)
            .map(|_| {
                tokio::spawn(run("ingest", Instant::now() + Duration::from_secs(60), || {
                    std::thread::sleep(Duration::from_secs(2));
                    Ok(())
                }))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (r, start) = (ran.clone(), Instant::now());
        let e = run("query", Instant::now() + Duration::from_millis(200), move || {
            r.store(true, Ordering::Relaxed);
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(e.code, Code::Timeout);
        assert!(start.elapsed() < Duration::from_secs(1), "waited {:?}", start.elapsed());
        for b in busy {
            b.await.unwrap().unwrap();
        }
        assert!(!ran.load(Ordering::Relaxed), "a job refused at its deadline never runs");
        assert_eq!(run("query", Instant::now() + Duration::from_secs(5), || Ok(7)).await.unwrap(), 7);
    }
}
