//! DOCX search benchmark, side by side in one run: ingest the 773-page rclone DOCX with
//! Quarry's docx-search (in the host, real MiniLM embedder, one instance per core), then with the
//! CrewAI-equivalent Python pipeline (`crewai_docx.py`: python-docx, 2500/250 chunks, the same
//! model under onnxruntime with as many threads, chromadb or numpy). Prints phase times, chunk
//! count, tokens embedded, peak RSS, warm query p50/p99 over 100 queries, and the ratios.
//!
//! Run with `make bench-docx` (or `cargo bench -p quarry-tests --bench docx`). The Python side
//! uses `$QUARRY_BENCH_VENV` (default `~/.cache/quarry/bench-venv`, made by `make bench-docx`).
//! `QUARRY_BENCH_CHUNKING=crewai` runs Quarry with CrewAI's 2500/250 characters instead of its
//! default token-window chunks.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use quarry::eval::score::percentile;
use quarry_tests::{DOCX_SEARCH, EMBEDDER_ONNX, TestEnv, minilm_embedder, models_dir, shared_data};
use serde_json::{Value, json};

/// Peak resident set of this process (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn questions() -> (PathBuf, Vec<String>) {
    let path = shared_data().join("manuals/rclone/questions.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let qs: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["question"].as_str().map(str::to_string))
        .collect();
    let qs = qs.iter().cycle().take(100).cloned().collect();
    (path, qs)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let docx = shared_data().join("docx/generated/rclone_manual.pandoc.docx");
    assert!(docx.is_file(), "{} is missing (set QUARRY_SHARED_DATA)", docx.display());
    let chunking = std::env::var("QUARRY_BENCH_CHUNKING").unwrap_or_else(|_| "window".into());
    let (questions_path, queries) = questions();

    // Quarry: fixed mode, so the document is ingested when the instance opens.
    let env = TestEnv::new();
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(DOCX_SEARCH, "docx");
    std::fs::create_dir_all(env.path("docs")).unwrap();
    std::fs::copy(&docx, env.path("docs/rclone.docx")).unwrap();
    let config = minilm_embedder(cores)
        + &format!(
            r#"
[tools.rclone]
component = "plugins/docx.wasm"
embedder = "minilm"
config = {{ docx = "/docs/rclone.docx", chunking = "{chunking}" }}
[tools.rclone.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
memory = "2GiB"
deadline = "3600s"
"#
        );
    let start = Instant::now();
    let host = env.host(&config).await;
    let open_s = start.elapsed().as_secs_f64();
    let call = |q: &str| {
        let host = host.clone();
        let args = json!({"search_query": q, "similarity_threshold": 0.0}).to_string();
        async move { host.call("rclone.search_docx", &args).await.expect("search") }
    };
    let first = call(&queries[0]).await;
    let extra: Value = serde_json::from_str(first.extra.as_deref().unwrap_or("{}")).unwrap();
    let opened = &extra["opened"];
    for q in &queries[..5] {
        call(q).await;
    }
    let mut lat = Vec::new();
    for q in &queries {
        let t = Instant::now();
        call(q).await;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    let ms = |k: &str| opened[k].as_f64().unwrap_or(f64::NAN);
    let quarry = json!({
        "parse_ms": ms("parse_ms"), "chunk_ms": ms("chunk_ms"), "embed_ms": ms("embed_ms"), "index_ms": ms("index_ms"),
        "ingest_s": (ms("load_ms") + ms("parse_ms") + ms("chunk_ms") + ms("embed_ms") + ms("index_ms")) / 1000.0,
        "chunks": opened["chunks"], "tokens": opened["tokens"],
        "query_p50_ms": percentile(&lat, 0.5), "query_p99_ms": percentile(&lat, 0.99),
        "peak_rss_mb": peak_rss_mb(),
    });
    drop(host);

    // Python, same machine, same model file, as many threads as Quarry has embedder instances.
    let venv = std::env::var_os("QUARRY_BENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/quarry/bench-venv"));
    let script = quarry_tests::crate_dir().join("benches/crewai_docx.py");
    let t = Instant::now();
    let out = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(&docx)
        .arg(models_dir().join("all-minilm-l6-v2"))
        .arg(&questions_path)
        .arg(cores.to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}); `make bench-docx` creates the venv", venv.display()));
    assert!(out.status.success(), "python pipeline failed: {}", String::from_utf8_lossy(&out.stderr));
    let py_wall = t.elapsed().as_secs_f64();
    let mut py: Value = serde_json::from_slice(&out.stdout).expect("python JSON");
    let pms = |k: &str| py[k].as_f64().unwrap_or(f64::NAN);
    py["ingest_s"] = json!((pms("parse_ms") + pms("chunk_ms") + pms("embed_ms") + pms("index_ms")) / 1000.0);

    println!("DOCX ingest + search, rclone manual ({} bytes), {cores} cores", std::fs::metadata(&docx).unwrap().len());
    println!("quarry: chunking {chunking}, {cores} embedder instances; host open {open_s:.1} s");
    println!(
        "python: {} ({}), {cores} onnxruntime threads, wall {py_wall:.1} s",
        py["pipeline"].as_str().unwrap_or(""),
        py["index"].as_str().unwrap_or("")
    );
    println!();
    println!("{:<22} {:>12} {:>12} {:>9}", "measure", "quarry", "python", "ratio q/p");
    let row = |name: &str, k: &str| {
        let (q, p) = (quarry[k].as_f64().unwrap_or(f64::NAN), py[k].as_f64().unwrap_or(f64::NAN));
        println!("{name:<22} {q:>12.1} {p:>12.1} {:>9.2}", q / p);
    };
    row("parse ms", "parse_ms");
    row("chunk ms", "chunk_ms");
    row("embed ms", "embed_ms");
    row("index ms", "index_ms");
    row("ingest s", "ingest_s");
    row("chunks", "chunks");
    row("tokens embedded", "tokens");
    row("peak RSS MB", "peak_rss_mb");
    row("query p50 ms", "query_p50_ms");
    row("query p99 ms", "query_p99_ms");
    let per_tok =
        |v: &Value| v["embed_ms"].as_f64().unwrap_or(f64::NAN) * 1000.0 / v["tokens"].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<22} {:>12.1} {:>12.1} {:>9.2}",
        "embed µs/token",
        per_tok(&quarry),
        per_tok(&py),
        per_tok(&quarry) / per_tok(&py)
    );
    println!(
        "python drops the document's {} tables; its chunks are cut at {} tokens by the embedder",
        py["tables_dropped"], 256
    );
}
