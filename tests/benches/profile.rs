//! Where one `search` call's CPU goes: `perf record` on `quarry serve --http` (the release
//! binary, host/demo.toml: the rclone manual, real MiniLM) while one client makes `search`
//! calls over MCP, one at a time; the samples are then attributed to what the host does for a
//! call, by the shared object and symbol perf resolved for them:
//!
//! | part | samples |
//! |---|---|
//! | guest code (wasm) | code wasmtime compiled: chapter-rag's routing, fusion and formatting, the embedder's tokenizer and pooling; perf sees it as anonymous executable memory |
//! | inference | onnxruntime's library (`libonnxruntime.so`, the demo's backend), or `tract_*` and its assembly kernels (`*_mmm_*`): the model's matrix products |
//! | corpus (kNN, BM25, filters) | `quarry_corpus`, `rag_core`: the host's index |
//! | wasmtime (calls, memory, epochs) | `wasmtime*`, `cranelift*`: crossing into and out of the sandbox, instantiation |
//! | MCP, HTTP, JSON | `rmcp`, `hyper`, `http`, `serde_json`, `bytes` |
//! | async runtime | `tokio` |
//! | allocator, libc | `libc.so`, `malloc`, `memcpy` |
//! | kernel | `[kernel.kallsyms]`: syscalls, page faults, scheduling |
//! | rest of the host | the other `quarry` symbols |
//!
//! It prints the table with each part's share and its CPU ms per call (the server's CPU from
//! `/proc/PID/stat` over the same calls), and the calls' wall time. Run with `make profile`
//! (needs `perf`; Debian: `apt install linux-perf`, and `kernel.perf_event_paranoid` at most 1,
//! or root).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use quarry_tests::mcp_client::{McpHttp, Served};
use quarry_tests::{CHAPTER_RAG, quarry_bin};
use serde_json::json;

/// Calls profiled.
const CALLS: usize = 300;

/// Whether a sample of (`dso`, `symbol`) belongs to a part.
type Claims = fn(&str, &str) -> bool;

/// The parts of a call, each with the rule that claims a sample, in order.
const PARTS: [(&str, Claims); 9] = [
    ("kernel", |dso, _| dso.contains("kernel")),
    // tract's kernels are assembly: `avx512_mmm_f32_64x3_...`, `fma_mmm_...`.
    ("inference", |dso, sym| {
        dso.contains("onnxruntime") || sym.contains("tract_") || sym.contains("_mmm_") || sym.contains("sigmoid")
    }),
    ("corpus (kNN, BM25, filters)", |_, sym| sym.contains("quarry_corpus") || sym.contains("rag_core")),
    ("wasmtime (calls, memory, epochs)", |dso, sym| {
        sym.contains("wasmtime") || sym.contains("cranelift") || dso.contains("wasmtime")
    }),
    ("MCP, HTTP, JSON", |_, sym| {
        ["rmcp", "hyper", "http::", "serde_json", "bytes::", "h2::"].iter().any(|p| sym.contains(p))
    }),
    ("async runtime", |_, sym| sym.contains("tokio")),
    ("allocator, libc", |dso, sym| {
        dso.contains("libc") || dso.contains("ld-linux") || sym.contains("malloc") || sym.contains("mem")
    }),
    ("rest of the host", |dso, sym| dso == "quarry" && sym != "[unknown]"),
    ("guest code (wasm)", |_, _| true),
];

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if Command::new("perf").arg("--version").output().is_err() {
        println!("perf is not installed (Debian: apt install linux-perf); nothing profiled");
        return;
    }
    let root = quarry_tests::crate_dir().join("..");
    let config = root.join("host/demo.toml");
    let guest_dir =
        PathBuf::from(CHAPTER_RAG).ancestors().nth(3).expect("<guest>/wasm32-wasip2/release/x.wasm").to_path_buf();
    // SAFETY: set before any thread of ours reads the environment (the runtime's workers don't).
    unsafe { std::env::set_var("QUARRY_GUEST_DIR", &guest_dir) };
    let questions = quarry_tests::rclone_questions();
    let served = Served::start(&quarry_bin(), &config);
    let mut client = McpHttp::open(&served.url).await.expect("MCP session");
    let mut call = async |i: usize| {
        let r = client.call("rclone.search", json!({"question": questions[i % questions.len()]})).await.expect("call");
        assert_eq!(r["result"]["isError"], json!(false), "search failed: {r}");
    };
    for i in 0..30 {
        call(i).await; // warm-up: the index open, the code paths taken once
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "-F", "1999", "-g", "-o"])
        .arg(&data)
        .args(["-p", &served.pid().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf record");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let cpu = quarry_tests::cpu_seconds(served.pid());
    let t = Instant::now();
    for i in 0..CALLS {
        call(i).await;
    }
    let wall_ms = t.elapsed().as_secs_f64() * 1e3 / CALLS as f64;
    let cpu_ms = (quarry_tests::cpu_seconds(served.pid()) - cpu) * 1e3 / CALLS as f64;
    // SIGINT: perf writes its file and exits.
    Command::new("kill").args(["-INT", &perf.id().to_string()]).status().expect("kill perf");
    perf.wait().expect("perf record");
    let report = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--percent-limit", "0", "--sort", "dso,sym", "-g", "none", "-i"])
        .arg(&data)
        .output()
        .expect("perf report");
    let text = String::from_utf8_lossy(&report.stdout);
    let mut shares = vec![0f64; PARTS.len()];
    let mut top: Vec<(f64, String)> = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())) {
        // "    12.34%  quarry  [.] tract_linalg::..."
        let mut words = line.split_whitespace();
        let Some(pct) = words.next().and_then(|p| p.trim_end_matches('%').parse::<f64>().ok()) else { continue };
        let dso = words.next().unwrap_or_default().to_string();
        let sym: String = words.skip(1).collect::<Vec<_>>().join(" ");
        let part = PARTS.iter().position(|(_, claims)| claims(&dso, &sym)).expect("the last part claims all");
        shares[part] += pct;
        top.push((pct, format!("{dso} {sym}")));
    }
    let total: f64 = shares.iter().sum::<f64>().max(1e-9);
    println!("{}", quarry_tests::cpu_line());
    println!(
        "rclone.search over MCP, one client, {CALLS} calls: {wall_ms:.1} ms wall and {cpu_ms:.1} ms of server CPU per call"
    );
    println!("| part | share of server CPU | CPU ms per call |");
    println!("|---|---|---|");
    for ((name, _), share) in PARTS.iter().zip(&shares) {
        let share = share / total;
        println!("| {name} | {:.1}% | {:.2} |", share * 100.0, share * cpu_ms);
    }
    top.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("\nthe 15 hottest symbols:");
    for (pct, what) in top.iter().take(15) {
        println!("  {pct:5.2}%  {}", what.chars().take(140).collect::<String>());
    }
}
