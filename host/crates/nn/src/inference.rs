//! Where inference runs: a thread per core off the async runtime, each pinned to its core where
//! the process owns its cores ([`crate::threads::pin_to`]), shared by every instance through a
//! [`FairQueue`], so a tool ingesting a manual takes its turn with a tool answering a query, and
//! the MCP server's workers stay free. The threads are their own, not the runtime's blocking
//! pool, which hands each job to whichever of its many threads is idle: with it, `perf sched`
//! showed jobs queued beside a busy core while the other idled (see [`crate::threads::pin_to`]).
//!
//! A job that starts while no other runs or waits, on a host that has been running one tool call
//! at most for a while, and whose input is large enough ([`wide_min_tokens`]: an ingest batch, a
//! long text), runs on every core ([`Threads::Every`]: tract splits its matrix products,
//! onnxruntime runs the session whose intra-op pool spans the cores). A question of a few dozen
//! tokens keeps to one thread on either backend: its products are too small to split, and the
//! other cores would only wait for them. Under load each job keeps to its own thread, which is
//! the faster way to use the cores for many jobs.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::tensor::{Code, NnError};
pub use crate::threads::Threads;
use crate::threads::cores;
use quarry_support::fair::FairQueue;

/// The least input (tokens across the batch, padding included) a job splits over every core:
/// `QUARRY_NN_WIDE_MIN_TOKENS`, else 256. Chosen with `make bench-mcp` (2 cores, a lone
/// `search`, whose question is 10 to 40 tokens): see tests/benches/README.md.
pub fn wide_min_tokens() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("QUARRY_NN_WIDE_MIN_TOKENS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(256)
    })
}

/// How long after two tool calls ran at once the host still counts as busy: calls of a loaded
/// pool come and go faster than this, a lone client's calls do not overlap.
const CONCURRENT_FOR: std::time::Duration = std::time::Duration::from_millis(250);

/// One app's inference slots, and what it knows of the tool calls running beside them.
pub struct InferenceThreads {
    queue: Arc<FairQueue>,
    /// Tool calls running, all instances together (see [`Busy`]).
    tool_calls: AtomicUsize,
    /// When two or more tool calls last ran at once, in milliseconds since `epoch`.
    last_concurrent_ms: AtomicU64,
    epoch: Instant,
    /// Jobs run to their end, and the time they took on their threads, in nanoseconds (for
    /// `/metrics`).
    jobs: AtomicU64,
    busy_nanos: Arc<AtomicU64>,
    /// The inference threads, one per slot of `queue` (a slot's permit is its thread's to use),
    /// started at the first job (empty until then, and again after a start that failed, so the
    /// next job tries again).
    workers: parking_lot::Mutex<Vec<std::sync::mpsc::Sender<Job>>>,
}

/// A job as its thread runs it.
type Job = Box<dyn FnOnce() + Send>;

/// Starts inference thread `slot`: it pins itself, then runs the jobs sent to it until the threads
/// is dropped.
fn start_thread(slot: usize) -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new().name(format!("quarry-nn-{slot}")).spawn(move || {
        crate::threads::pin_to(slot);
        while let Ok(job) = rx.recv() {
            job();
        }
    })?;
    Ok(tx)
}

/// What the threads have done and hold now, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Inference threads.
    pub slots: usize,
    /// Threads running a job now.
    pub busy: usize,
    /// Clients (tool instances) with jobs waiting for a thread.
    pub waiting: usize,
    /// Jobs started since the host started.
    pub jobs: u64,
    /// The time jobs spent running, in seconds.
    pub seconds: f64,
}

impl Default for InferenceThreads {
    fn default() -> Self {
        InferenceThreads {
            workers: parking_lot::Mutex::default(),
            queue: FairQueue::new(cores()),
            tool_calls: AtomicUsize::new(0),
            last_concurrent_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            jobs: AtomicU64::new(0),
            busy_nanos: Arc::default(),
        }
    }
}

/// Held while a tool's guest code runs (a call, a preparation). A job goes wide only when no
/// two tool calls have run at once for [`CONCURRENT_FOR`]: another call's guest code would share
/// the cores the wide job splits over, and tract's matrix products wait for their slowest
/// thread. Measured with `make bench-mcp` (2 cores, `pool = 2`, 8 clients): 81 calls/s when
/// jobs went wide beside another call's guest code, 106 when every job kept to one thread.
pub struct Busy(Arc<InferenceThreads>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.tool_calls.fetch_sub(1, Ordering::AcqRel);
    }
}

impl InferenceThreads {
    fn since_epoch_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A tool call starts running.
    pub fn enter(self: &Arc<Self>) -> Busy {
        let running = self.tool_calls.fetch_add(1, Ordering::AcqRel) + 1;
        if running > 1 {
            self.last_concurrent_ms.store(self.since_epoch_ms().max(1), Ordering::Release);
        }
        Busy(self.clone())
    }

    /// Whether the app is running one tool call at most, and has been for a while.
    fn quiet(&self) -> bool {
        let last = self.last_concurrent_ms.load(Ordering::Acquire);
        self.tool_calls.load(Ordering::Acquire) <= 1
            && (last == 0 || self.since_epoch_ms().saturating_sub(last) > CONCURRENT_FOR.as_millis() as u64)
    }

    /// Slots free now, and clients waiting (for tests and benches).
    pub fn load(&self) -> (usize, usize) {
        self.queue.load()
    }

    /// What the threads have done and hold now.
    pub fn stats(&self) -> Stats {
        let (free, waiting) = self.queue.load();
        let slots = cores();
        Stats {
            slots,
            busy: slots.saturating_sub(free),
            waiting,
            jobs: self.jobs.load(Ordering::Relaxed),
            seconds: self.busy_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }

    /// Runs `job` (on an input of `tokens`) on an inference thread when `client`'s turn comes,
    /// telling it the cores it may use (see the module docs), unless `deadline` passes first: a
    /// job never waits past it, and one that would start after it is refused. A caller
    /// that gives up does not stop a job that has started; the job keeps its slot until it ends,
    /// so the threads never run more jobs than there are slots.
    pub async fn run<T: Send + 'static>(
        &self,
        client: &str,
        deadline: Instant,
        tokens: usize,
        job: impl FnOnce(Threads) -> Result<T, NnError> + Send + 'static,
    ) -> Result<T, NnError> {
        let late = || NnError::new(Code::Timeout, "the call's deadline passed before the inference could start");
        let permit = tokio::time::timeout_at(deadline.into(), self.queue.acquire(client)).await.map_err(|_| late())?;
        if Instant::now() >= deadline {
            return Err(late());
        }
        let (free, waiting) = self.queue.load();
        let wide = cores() > 1 && tokens >= wide_min_tokens() && free + 1 == cores() && waiting == 0 && self.quiet();
        let threads = if wide { Threads::Every } else { Threads::One };
        self.jobs.fetch_add(1, Ordering::Relaxed);
        let busy = self.busy_nanos.clone();
        let failed = |why: &str| NnError::new(Code::Runtime, format!("the inference thread failed: {why}"));
        let thread = {
            let mut started = self.workers.lock();
            if started.is_empty() {
                *started = (0..cores())
                    .map(start_thread)
                    .collect::<Result<_, _>>()
                    .map_err(|e| failed(&format!("cannot start it: {e}")))?;
            }
            started[permit.worker()].clone()
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = thread.send(Box::new(move || {
            let _slot = permit;
            let started = Instant::now();
            // A panic ends the job, not the thread: the caller gets an error, the slot its thread.
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(threads)));
            busy.fetch_add(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
            let _ = tx.send(out);
        }));
        sent.map_err(|_| failed("it has stopped"))?;
        match rx.await {
            Ok(Ok(out)) => out,
            Ok(Err(_)) => Err(failed("the job panicked")),
            Err(_) => Err(failed("it dropped the job")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_never_waits_or_starts_past_its_deadline() {
        let pool = InferenceThreads::default();
        // Past already: refused without running.
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let e = pool
            .run("late", Instant::now(), 1, move |_| {
                r.store(true, Ordering::Relaxed);
                Ok(())
            })
            .await
            .unwrap_err();
        assert_eq!(e.code, Code::Timeout);
        assert!(!ran.load(Ordering::Relaxed));

        // Every slot busy for 2 s: a job due in 200 ms gives up in about that, and never runs.
        let (slots, _) = pool.load();
        let pool = Arc::new(pool);
        let busy: Vec<_> = (0..slots)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    pool.run("ingest", Instant::now() + Duration::from_secs(60), 1, |_| {
                        std::thread::sleep(Duration::from_secs(2));
                        Ok(())
                    })
                    .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (r, start) = (ran.clone(), Instant::now());
        let e = pool
            .run("query", Instant::now() + Duration::from_millis(200), 1, move |_| {
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
        assert_eq!(pool.run("query", Instant::now() + Duration::from_secs(5), 1, |_| Ok(7)).await.unwrap(), 7);
    }

    /// A job that panics fails its caller with an error; its thread lives on and runs the next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_fails_its_call_and_leaves_the_pool_working() {
        let pool = InferenceThreads::default();
        let soon = || Instant::now() + Duration::from_secs(10);
        let e = pool.run("a", soon(), 1, |_| -> Result<(), NnError> { panic!("a faulty backend") }).await.unwrap_err();
        assert_eq!(e.code, Code::Runtime);
        assert!(e.to_string().contains("panicked"), "{e}");
        // Every slot still runs jobs (the panicked one included), on threads named for the pool.
        for _ in 0..2 * cores() {
            let name = pool.run("a", soon(), 1, |_| Ok(std::thread::current().name().map(str::to_string))).await;
            assert!(name.unwrap().unwrap_or_default().starts_with("quarry-nn-"));
        }
        assert_eq!(pool.load().0, cores(), "every slot free again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_question_keeps_to_one_thread_and_a_lone_batch_goes_wide() {
        let pool = Arc::new(InferenceThreads::default());
        let due = || Instant::now() + Duration::from_secs(30);
        let threads =
            |pool: Arc<InferenceThreads>, tokens: usize| async move { pool.run("t", due(), tokens, Ok).await.unwrap() };
        let wide = if cores() > 1 { Threads::Every } else { Threads::One };
        assert_eq!(threads(pool.clone(), 48).await, Threads::One, "a question of 48 tokens");
        assert_eq!(threads(pool.clone(), wide_min_tokens()).await, wide, "a batch alone on the pool");

        // A batch that starts while another job runs keeps to one thread.
        let (started, release) = (Arc::new(tokio::sync::Notify::new()), Arc::new(AtomicBool::new(false)));
        let (s, r) = (started.clone(), release.clone());
        let other = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run("other", due(), 1, move |_| {
                    s.notify_one();
                    while !r.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Ok(())
                })
                .await
            }
        });
        started.notified().await;
        if cores() > 1 {
            assert_eq!(threads(pool.clone(), 4 * wide_min_tokens()).await, Threads::One, "a batch beside another job");
        }
        release.store(true, Ordering::Release);
        other.await.unwrap().unwrap();

        // Two tool calls at once: the host is busy for a while, and even a lone batch keeps to one thread.
        let (a, b) = (pool.enter(), pool.enter());
        drop((a, b));
        assert_eq!(
            threads(pool.clone(), 4 * wide_min_tokens()).await,
            Threads::One,
            "a batch just after two calls ran at once"
        );
    }
}
