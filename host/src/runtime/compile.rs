//! Compiling a component under a memory and a time limit.
//!
//! Compiling is the one thing the host does with a component's bytes before any grant applies,
//! and its cost is the component's to choose: a hostile 20 MiB component took 17.5 s and 1.7 GB
//! on 2 cores, more with more cores (wasmtime spreads one compilation over all of them). So the
//! `quarry` binary compiles in a child process of itself (`quarry __compile`, see
//! [`child_main`]): the bytes go to its stdin, the compiled artifact comes back on its stdout,
//! its data segment is limited to `[host] compile_memory` (`RLIMIT_DATA`: what its allocator
//! can get; the engine's address-space reservations are not data) and it is killed, with
//! anything it started, at `[host] compile_timeout`. It gets none of the host's environment
//! (a fleet's credentials are there) and confines itself before it reads the component: no
//! network, no file system, no programs ([`super::confine`]). The artifact then goes through the cache as one compiled in
//! process would (written privately, loaded only from a directory this user alone can write).
//!
//! A program that embeds the host as a library (the tests do) has no such binary to run: it
//! compiles in process, bounded by `max_component_size` only, unless it calls
//! [`use_worker`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use crate::support::limits::CompileLimits;

/// The argument that makes `quarry` a compile worker.
pub const WORKER_ARG: &str = "__compile";

static WORKER: OnceLock<PathBuf> = OnceLock::new();

/// Compiles in child processes of `exe` (the `quarry` binary) from now on.
pub fn use_worker(exe: PathBuf) {
    let _ = WORKER.set(exe);
}

/// Why a compilation gave nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CompileError {
    /// The bytes are not a valid component for this engine (wasmtime's reason).
    #[error("{0}")]
    Invalid(String),
    /// It needed more memory than allowed.
    #[error(
        "compiling it needs more than [host] compile_memory ({} MiB); raise that if you trust this component",
        .0 >> 20
    )]
    Memory(u64),
    /// It took longer than allowed.
    #[error("compiling it took longer than [host] compile_timeout ({0:?}); raise that if you trust this component")]
    Time(Duration),
    /// Something outside Quarry killed the worker (the system's OOM killer, an operator).
    #[error(
        "the compile worker was killed by signal {0} from outside Quarry (the system's out-of-memory killer, or an operator); see the system log, and try again"
    )]
    Killed(i32),
    /// The worker could not be run or ended otherwise.
    #[error("the compile worker failed: {0}")]
    Worker(String),
}

/// Compiles `bytes` with `engine`: in a worker process under `limits` where there is a worker,
/// else in this process.
pub fn precompile(engine: &wasmtime::Engine, bytes: &[u8], limits: CompileLimits) -> Result<Vec<u8>, CompileError> {
    match WORKER.get() {
        Some(exe) => in_worker(exe, bytes, limits),
        None => engine.precompile_component(bytes).map_err(|e| CompileError::Invalid(format!("{e:#}"))),
    }
}

/// Exit status of a worker whose input is not a valid component (its reason on stderr).
const EXIT_INVALID: i32 = 2;
/// Bytes of a worker's stderr kept for a message.
const STDERR_KEPT: u64 = 8 << 10;

/// The argument after [`WORKER_ARG`] that makes a worker a probe of its confinement (tests).
pub const PROBE_ARG: &str = "--probe";

/// The command of a worker of `exe` limited to `memory` bytes of data: no environment, in `/`,
/// a process group of its own, its three streams piped.
fn worker_command(exe: &Path, memory: u64) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg(WORKER_ARG)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    // SAFETY: between fork and exec the closure calls only setrlimit, which is async-signal-safe,
    // on a value built before the fork.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            let limit = libc::rlimit { rlim_cur: memory as libc::rlim_t, rlim_max: memory as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Runs the confinement probe in a worker of `exe`, as a compilation's worker is started and
/// confined: what it could do with `path` (a file the host can read) and `addr` (a TCP and UDP
/// address on this machine), and the environment it saw, as JSON.
pub fn probe(exe: &Path, path: &str, addr: &str) -> Result<serde_json::Value, String> {
    let mut cmd = worker_command(exe, CompileLimits::default().memory);
    cmd.args([PROBE_ARG, path, addr]).stdin(Stdio::null());
    let out = cmd.output().map_err(|e| format!("{}: {e}", exe.display()))?;
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{e}: {} {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Whether the layers a worker could not apply were logged already (once a process).
static GAPS_LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn in_worker(exe: &Path, bytes: &[u8], limits: CompileLimits) -> Result<Vec<u8>, CompileError> {
    let worker = |e: std::io::Error| CompileError::Worker(format!("{}: {e}", exe.display()));
    let memory = limits.memory;
    let mut cmd = worker_command(exe, memory);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(worker)?;
    let (mut stdin, stdout, stderr) =
        (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    // The input is written and the output and messages read on threads, so that no order of
    // events can fill a pipe and stall, and the time limit below holds whatever the worker does.
    // What it answers is at most what it may allocate.
    let bytes = bytes.to_vec();
    let feed = std::thread::spawn(move || stdin.write_all(&bytes));
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.take(memory).read_to_end(&mut v).map(|_| v)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.take(STDERR_KEPT).read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(worker)? {
            break status;
        }
        if start.elapsed() >= limits.time {
            // The group: whatever the worker started goes with it.
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill takes a pid and a signal.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(CompileError::Time(limits.time));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let fed = feed.join().map_err(|_| CompileError::Worker("its input writer panicked".into()))?;
    let artifact = out.join().map_err(|_| CompileError::Worker("its output reader panicked".into()))?;
    let message = err.join().unwrap_or_default();
    let gaps: Vec<&str> = message.lines().filter(|l| l.starts_with(super::confine::MISSING_PREFIX)).collect();
    if !gaps.is_empty() && !GAPS_LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(target: "quarry::compile", "the compile worker runs {}", gaps.join("; ").replace(super::confine::MISSING_PREFIX, "without "));
    }
    if status.success() {
        fed.map_err(worker)?;
        return artifact.map_err(worker);
    }
    if status.code() == Some(EXIT_INVALID) {
        return Err(CompileError::Invalid(message.trim().to_string()));
    }
    // Rust's allocator reports a failed allocation (RLIMIT_DATA) and aborts. A worker this
    // process did not kill was killed from outside: not a limit of Quarry's.
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    if message.contains("memory allocation of") {
        return Err(CompileError::Memory(limits.memory));
    }
    if let Some(signal) = signal.filter(|&s| s != libc::SIGABRT) {
        return Err(CompileError::Killed(signal));
    }
    Err(CompileError::Worker(format!("{status}: {}", crate::support::text::cut(message.trim(), 1024))))
}

/// The worker's side: reads a component from stdin, compiles it with the engine `quarry`
/// uses, writes the artifact to stdout. Returns the exit status.
pub fn child_main() -> i32 {
    // First, while it has one thread and before it reads a byte of the component.
    let args: Vec<String> = std::env::args().skip(2).collect();
    if let [probe, path, addr] = args.as_slice()
        && probe == PROBE_ARG
    {
        println!("{}", super::confine::probe(path, addr));
        return 0;
    }
    for gap in super::confine::confine().missing {
        eprintln!("{}{gap}", super::confine::MISSING_PREFIX);
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("cannot read the component: {e}");
        return 1;
    }
    // The engine's settings but not its pooling allocator: what is pooled is instances, which a
    // compiler never makes, and its reservations would count against the memory limit.
    let mut config = super::settings::config();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
    let engine = match wasmtime::Engine::new(&config) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot configure the wasm engine: {e:#}");
            return 1;
        }
    };
    match engine.precompile_component(&bytes) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("cannot write the artifact: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("{e:#}");
            EXIT_INVALID
        }
    }
}
