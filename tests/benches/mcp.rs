//! MCP benchmark: `tools/call` over streamable HTTP against `quarry serve --http` (the release
//! binary), at concurrency 1, 8 and 32, for a cheap call (`list_chapter_tree`) and a search
//! (`search`, real MiniLM), on the main job's config (host/demo.toml: the rclone manual). Each
//! concurrent client is its own session on its own connection. Beside it, in the same run, the
//! same calls in process (`Host::call`, no MCP), so the protocol's cost shows as a ratio.
//! Then `search` on a server whose `rclone` tool is a pool of two instances (`pool = 2`), beside
//! the `pool = 1` rows of the same run; and, per pool size (1, 2, 4), the index in a host corpus
//! (the demo's `corpus = "rclone"`) beside the index in each instance's memory (the same config
//! without it): calls/s, p50/p99, the server's CPU seconds per call and its resident memory. Last, on one server with a `docx-search` tool beside it, the cheap call's latency while that
//! tool ingests the rclone manual's DOCX, beside the same call on the idle server.
//!
//! Run with `make bench-mcp`. It reuses the demo index (`make demo` builds it; without it, the
//! first start embeds the manual: about 10 minutes on 2 cores).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry::eval::score::percentile;
use quarry_tests::mcp_client::{McpHttp, Served};
use quarry_tests::{CHAPTER_RAG, DOCX_SEARCH, quarry_bin, shared_data};
use serde_json::{Value, json};

/// The arguments of call `i` of `tool`.
fn args(tool: &str, i: usize, questions: &[String]) -> Value {
    match tool {
        "rclone.search" => json!({ "question": questions[i % questions.len()] }),
        _ => json!({}),
    }
}

struct Stats {
    p50: f64,
    p99: f64,
    per_sec: f64,
    /// The server's CPU (user and system) per call, in ms; NaN where it was not measured.
    cpu_ms: f64,
    /// This process's CPU per call (the bench's MCP clients), in ms; NaN where not measured.
    client_cpu_ms: f64,
}

fn stats(mut ms: Vec<f64>, wall: f64) -> Stats {
    ms.sort_by(f64::total_cmp);
    Stats {
        p50: percentile(&ms, 0.5),
        p99: percentile(&ms, 0.99),
        per_sec: ms.len() as f64 / wall,
        cpu_ms: f64::NAN,
        client_cpu_ms: f64::NAN,
    }
}

/// `calls` calls of `tool` spread over `clients` sessions, all at once, on `served` (its CPU
/// read from `/proc` around them).
async fn over_mcp(served: &Served, tool: &str, calls: usize, clients: usize, questions: &Arc<Vec<String>>) -> Stats {
    let url = served.url.as_str();
    let cpu = quarry_tests::cpu_seconds(served.pid());
    let mine = quarry_tests::cpu_seconds(std::process::id());
    let mut sessions = Vec::new();
    for _ in 0..clients {
        sessions.push(McpHttp::open(url).await.expect("MCP session"));
    }
    let start = Instant::now();
    let workers: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(w, mut c)| {
            let (tool, questions) = (tool.to_string(), questions.clone());
            tokio::spawn(async move {
                let mut ms = Vec::new();
                for i in (w..calls).step_by(clients) {
                    let t = Instant::now();
                    let r = c.call(&tool, args(&tool, i, &questions)).await.expect("tools/call");
                    assert_eq!(r["result"]["isError"], json!(false), "{tool} failed: {r}");
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                ms
            })
        })
        .collect();
    let mut ms = Vec::new();
    for w in workers {
        ms.extend(w.await.expect("worker"));
    }
    let mut s = stats(ms, start.elapsed().as_secs_f64());
    s.cpu_ms = (quarry_tests::cpu_seconds(served.pid()) - cpu) * 1e3 / calls as f64;
    s.client_cpu_ms = (quarry_tests::cpu_seconds(std::process::id()) - mine) * 1e3 / calls as f64;
    s
}

async fn in_process(host: &quarry::Registry, tool: &str, calls: usize, questions: &[String]) -> Stats {
    let start = Instant::now();
    let mut ms = Vec::new();
    for i in 0..calls {
        let t = Instant::now();
        host.call(tool, &args(tool, i, questions).to_string()).await.unwrap_or_else(|e| panic!("{tool}: {e}"));
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats(ms, start.elapsed().as_secs_f64())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let root = quarry_tests::crate_dir().join("..");
    let config = root.join("host/demo.toml");
    // The demo config finds the components in $QUARRY_GUEST_DIR: the ones built for the tests.
    let guest_dir =
        PathBuf::from(CHAPTER_RAG).ancestors().nth(3).expect("<guest>/wasm32-wasip2/release/x.wasm").to_path_buf();
    // SAFETY: set before any thread of ours reads the environment (the runtime's workers don't).
    unsafe { std::env::set_var("QUARRY_GUEST_DIR", &guest_dir) };
    let questions = Arc::new(quarry_tests::rclone_questions());
    let cases = [("rclone.list_chapter_tree", 2000), ("rclone.search", 160)];

    let t = Instant::now();
    let host = quarry::Registry::new(quarry::Config::load(&config).expect("host/demo.toml")).expect("host");
    let failures = host.load_all().await;
    assert!(failures.is_empty(), "{failures:?}");
    println!("in-process host loaded in {:.1} s", t.elapsed().as_secs_f64());
    let mut baseline = Vec::new();
    for (tool, calls) in cases {
        in_process(&host, tool, calls / 10, &questions).await; // warm-up
        baseline.push(in_process(&host, tool, calls / 2, &questions).await);
    }
    drop(host);

    let served = Served::start(&quarry_bin(), &config);
    println!("\n{}", quarry_tests::cpu_line());
    println!("tools/call over streamable HTTP ({}), one session per client:", served.url);
    let mut pool1 = Vec::new();
    println!("| call | clients | calls | calls/s | p50 ms | p99 ms | p50 vs in-process | server CPU ms per call |");
    println!("|---|---|---|---|---|---|---|---|");
    for ((tool, calls), base) in cases.into_iter().zip(&baseline) {
        over_mcp(&served, tool, calls / 10, 1, &questions).await; // warm-up
        println!(
            "| {tool} in process | 1 | {} | {:.0} | {:.2} | {:.2} | 1.00 | - |",
            calls / 2,
            base.per_sec,
            base.p50,
            base.p99
        );
        for clients in CLIENTS {
            let s = over_mcp(&served, tool, calls, clients, &questions).await;
            println!(
                "| {tool} | {clients} | {calls} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} |",
                s.per_sec,
                s.p50,
                s.p99,
                s.p50 / base.p50,
                s.cpu_ms
            );
            if tool == "rclone.search" {
                pool1.push(s);
            }
        }
    }
    drop(served);
    pools(&root, &config, &questions, &pool1).await;
    index_kept(&root, &config, &questions).await;
    during_ingest(&root, &config, &questions).await;
}

/// The client counts of the tables.
const CLIENTS: [usize; 3] = [1, 8, 32];
/// Calls of `search` per row of the pool table.
const POOL_CALLS: usize = 160;

/// host/demo.toml, its paths made absolute, written into `dir` with `extra` after the
/// `[tools.rclone]` line.
fn demo_variant(root: &std::path::Path, demo: &std::path::Path, dir: &std::path::Path, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(demo).expect("host/demo.toml");
    let text = text
        .replace("host = \"demo/rclone\"", &format!("host = {:?}", root.join("host/demo/rclone")))
        .replace("[tools.rclone]\n", &format!("[tools.rclone]\n{extra}"));
    let config = dir.join("quarry.toml");
    std::fs::write(&config, text).expect("write config");
    config
}

/// `search` over MCP with `pool = 1` (the rows measured above, on the demo config) and a pool
/// of one instance per core (at least 2: the same config with `pool = N`), side by side.
async fn pools(root: &std::path::Path, demo: &std::path::Path, questions: &Arc<Vec<String>>, pool1: &[Stats]) {
    let n = cores().max(2);
    let work = tempfile::tempdir().expect("temp dir");
    let config = demo_variant(root, demo, work.path(), &format!("pool = {n}\n"));
    let served = Served::start(&quarry_bin(), &config);
    over_mcp(&served, "rclone.search", POOL_CALLS / 10, n, questions).await; // warm-up: every member
    println!("\nrclone.search over MCP, pool = 1 against pool = {n} (tools.rclone.pool), {} cores:", cores());
    println!(
        "| clients | pool | calls/s | p50 ms | p99 ms | server CPU ms per call | client CPU ms per call | calls/s vs pool = 1 | p99 vs pool = 1 | calls/s the cores allow |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    // The bench's clients run on the same cores as the server: at these CPU costs per call the
    // cores cannot carry more than `cores / (server + client)` calls a second, whatever the pool.
    let allow = |s: &Stats| cores() as f64 * 1e3 / (s.cpu_ms + s.client_cpu_ms);
    for (clients, one) in CLIENTS.into_iter().zip(pool1) {
        let many = over_mcp(&served, "rclone.search", POOL_CALLS, clients, questions).await;
        println!(
            "| {clients} | 1 | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | 1.00 | 1.00 | {:.0} |",
            one.per_sec,
            one.p50,
            one.p99,
            one.cpu_ms,
            one.client_cpu_ms,
            allow(one)
        );
        println!(
            "| {clients} | {n} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} |",
            many.per_sec,
            many.p50,
            many.p99,
            many.cpu_ms,
            many.client_cpu_ms,
            many.per_sec / one.per_sec,
            many.p99 / one.p99,
            allow(&many)
        );
    }
}

/// The resident memory of process `pid`, in MB.
fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1e3
}

/// Clients of the index table's rows.
const INDEX_CLIENTS: usize = 8;

/// `search` at [`INDEX_CLIENTS`] clients per pool size, the index in a host corpus beside the
/// index in each instance's own memory (the demo config without `corpus`, its index file reused
/// so that nothing is embedded): the server's throughput, latency, CPU per call and memory.
async fn index_kept(root: &std::path::Path, demo: &std::path::Path, questions: &Arc<Vec<String>>) {
    println!(
        "
rclone.search over MCP at {INDEX_CLIENTS} clients, the index in a host corpus or in each instance, {} cores:",
        cores()
    );
    println!("| pool | index | calls/s | p50 ms | p99 ms | server CPU ms per call | server RSS MB |");
    println!("|---|---|---|---|---|---|---|");
    for pool in [1usize, 2, 4] {
        let mut rows = Vec::new();
        for kept in ["instance", "corpus"] {
            let work = tempfile::tempdir().expect("temp dir");
            let config = demo_variant(
                root,
                demo,
                work.path(),
                &format!(
                    "pool = {pool}
"
                ),
            );
            if kept == "instance" {
                // The same manual and model; the index file of the demo's index directory is reused.
                let text = std::fs::read_to_string(&config).expect("the config");
                let index = work.path().join("index");
                std::fs::create_dir_all(&index).expect("index dir");
                let demo_index = std::env::var("QUARRY_DEMO_INDEX").map(PathBuf::from).unwrap_or_else(|_| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/quarry/demo-index")
                });
                let _ = std::fs::copy(demo_index.join("chapter-rag.qix"), index.join("chapter-rag.qix"));
                let text = text.replace("corpus = \"rclone\", ", "").replace(
                    "{ host = \"${QUARRY_DEMO_INDEX:-~/.cache/quarry/demo-index}\", guest = \"/index\" }",
                    &format!("{{ host = {index:?}, guest = \"/index\", mode = \"rw\" }}"),
                );
                std::fs::write(&config, text).expect("write config");
            }
            let served = Served::start(&quarry_bin(), &config);
            // Warm-up: every member prepared and called.
            over_mcp(&served, "rclone.search", 4 * pool, pool, questions).await;
            let cpu = quarry_tests::cpu_seconds(served.pid());
            let s = over_mcp(&served, "rclone.search", POOL_CALLS, INDEX_CLIENTS, questions).await;
            let cpu_ms = (quarry_tests::cpu_seconds(served.pid()) - cpu) * 1e3 / POOL_CALLS as f64;
            rows.push((kept, s, cpu_ms, rss_mb(served.pid())));
        }
        for (kept, s, cpu_ms, rss) in rows {
            println!("| {pool} | {kept} | {:.0} | {:.1} | {:.1} | {cpu_ms:.1} | {rss:.0} |", s.per_sec, s.p50, s.p99);
        }
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `list_chapter_tree` from one client, a call every 50 ms, on the idle server and then while a
/// `docx-search` call on the same server ingests the rclone manual's DOCX (dynamic mode: the
/// document is named in the call).
async fn during_ingest(root: &std::path::Path, demo: &std::path::Path, questions: &Arc<Vec<String>>) {
    let work = tempfile::tempdir().expect("temp dir");
    let docs = work.path().join("docs");
    std::fs::create_dir_all(&docs).expect("docs dir");
    let docx = shared_data().join("docx/generated/rclone_manual.pandoc.docx");
    std::fs::copy(&docx, docs.join("rclone.docx")).unwrap_or_else(|e| panic!("{}: {e}", docx.display()));
    let config = demo_variant(root, demo, work.path(), "");
    let text = std::fs::read_to_string(&config).expect("the config");
    std::fs::write(
        &config,
        format!(
            "{text}\n[tools.docs]\ncomponent = {:?}\nembedder = \"minilm\"\n[tools.docs.grants]\ndirs = [{{ host = {:?}, guest = \"/docs\" }}]\nmemory = \"2GiB\"\ndeadline = \"1800s\"\n",
            DOCX_SEARCH,
            docs
        ),
    )
    .expect("write config");
    let served = Served::start(&quarry_bin(), &config);
    let cheap = "rclone.list_chapter_tree";
    let paced = |until: Option<tokio::task::JoinHandle<f64>>| {
        let url = served.url.clone();
        async move {
            let mut c = McpHttp::open(&url).await.expect("MCP session");
            let (mut ms, start) = (Vec::new(), Instant::now());
            while until.as_ref().map_or(ms.len() < 200, |t| !t.is_finished()) {
                let t = Instant::now();
                let r = c.call(cheap, json!({})).await.expect("tools/call");
                assert_eq!(r["result"]["isError"], json!(false), "{r}");
                ms.push(t.elapsed().as_secs_f64() * 1e3);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let ingest_s = match until {
                Some(t) => Some(t.await.expect("ingest task")),
                None => None,
            };
            (stats(ms.clone(), start.elapsed().as_secs_f64()), ms.len(), ingest_s)
        }
    };
    let (idle, idle_n, _) = paced(None).await;
    let mut ingester = McpHttp::open(&served.url).await.expect("MCP session");
    ingester.timeout = Duration::from_secs(1800);
    let question = questions[0].clone();
    let ingest = tokio::spawn(async move {
        let t = Instant::now();
        let args = json!({"docx": "/docs/rclone.docx", "search_query": question});
        let r = ingester.call("docs.search_docx", args).await.expect("ingest call");
        assert_eq!(r["result"]["isError"], json!(false), "the ingest failed: {r}");
        t.elapsed().as_secs_f64()
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (busy, busy_n, ingest_s) = paced(Some(ingest)).await;
    println!("\n{cheap} over MCP, 1 client, one call every 50 ms, on one `quarry serve`:");
    println!("| server | calls | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    println!("| idle | {idle_n} | {:.2} | {:.2} |", idle.p50, idle.p99);
    println!(
        "| while docs.search_docx ingests the rclone DOCX ({:.1} s) | {busy_n} | {:.2} | {:.2} |",
        ingest_s.unwrap_or(f64::NAN),
        busy.p50,
        busy.p99
    );
}
