//! DOCX search benchmark, side by side in one run: ingest the 773-page rclone DOCX with
//! Quarry's docx-search (in the host, the real embedder component, one instance per core) with
//! its model run by tract (fp32) and by onnxruntime (fp32, the packaged int8 and the q8 that
//! `make models` quantises), each in a process of its
//! own so that its peak RSS is its own; then with the CrewAI-equivalent Python pipeline
//! (`crewai_docx.py`: python-docx, 2500/250 chunks, the same model under onnxruntime with as
//! many threads, chromadb or numpy), and with the real CrewAI `DOCXSearchTool`
//! (`crewai_real_docx.py`, crewai 1.15.30 from the tests' venv, its ONNX embedder on the same
//! MiniLM files, offline). Prints phase times, chunk count, tokens embedded, tokens per second
//! and CPU seconds per 1,000 tokens over the whole ingest (the process's CPU, every thread), peak
//! RSS, warm query p50/p99 over 100 queries, the CPU, and the ratios to real CrewAI.
//!
//! Run with `make bench-docx` (or `cargo bench -p quarry-tests --bench docx`). The pipeline uses
//! `$QUARRY_BENCH_VENV` (default `~/.cache/quarry/bench-venv`, made by `make bench-docx`), real
//! CrewAI the tests' venv (`tests/mcp/venvs.sh`). `QUARRY_BENCH_CHUNKING=crewai` runs Quarry with
//! CrewAI's 2500/250 characters instead of its default token-window chunks.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use quarry::eval::score::percentile;
use quarry_tests::{DOCX_SEARCH, EMBEDDER_ONNX, TestEnv, models_dir, shared_data};
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

/// The Quarry configurations compared: (backend, model directory, label).
const RUNS: [(&str, &str, &str); 4] = [
    ("tract", "all-minilm-l6-v2", "quarry tract fp32"),
    ("onnxruntime", "all-minilm-l6-v2", "quarry ort fp32"),
    ("onnxruntime", "all-minilm-l6-v2-int8", "quarry ort int8"),
    ("onnxruntime", "all-minilm-l6-v2-q8", "quarry ort q8"),
];

/// One Quarry ingest and 100 queries (in the process of its own that `main` starts).
async fn quarry_run(backend: &str, model: &str, docx: &std::path::Path) -> Value {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunking = std::env::var("QUARRY_BENCH_CHUNKING").unwrap_or_else(|_| "window".into());
    let (_, queries) = questions();
    // Fixed mode, so the document is ingested when the instance opens.
    let env = TestEnv::new();
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(DOCX_SEARCH, "docx");
    std::fs::create_dir_all(env.path("docs")).unwrap();
    std::fs::copy(docx, env.path("docs/rclone.docx")).unwrap();
    let config = quarry_tests::embedder_on(cores, backend, model)
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
    let (start, cpu) = (Instant::now(), quarry_tests::cpu_seconds(std::process::id()));
    let host = env.host(&config).await;
    let open_s = start.elapsed().as_secs_f64();
    // Opening the host ingests the document (fixed mode): its CPU is the ingest's.
    let ingest_cpu_s = quarry_tests::cpu_seconds(std::process::id()) - cpu;
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
    json!({
        "runs_on": host.apps().nn.models.runs_on().join(", "),
        "open_s": open_s,
        "parse_ms": ms("parse_ms"), "chunk_ms": ms("chunk_ms"), "embed_ms": ms("embed_ms"), "index_ms": ms("index_ms"),
        "ingest_s": (ms("load_ms") + ms("parse_ms") + ms("chunk_ms") + ms("embed_ms") + ms("index_ms")) / 1000.0,
        "chunks": opened["chunks"], "tokens": opened["tokens"], "ingest_cpu_s": ingest_cpu_s,
        "query_p50_ms": percentile(&lat, 0.5), "query_p99_ms": percentile(&lat, 0.99),
        "peak_rss_mb": peak_rss_mb(),
    })
}

/// Runs a Python script of the bench with `python`; its JSON, and its wall time.
fn python(python: &std::path::Path, script: &str, args: &[String]) -> Value {
    let script = quarry_tests::crate_dir().join("benches").join(script);
    let t = Instant::now();
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}); `make bench-docx` makes its venvs", python.display()));
    assert!(out.status.success(), "{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    let mut v: Value = serde_json::from_slice(&out.stdout).expect("python JSON");
    v["wall_s"] = json!(t.elapsed().as_secs_f64());
    v
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let docx = shared_data().join("docx/generated/rclone_manual.pandoc.docx");
    assert!(docx.is_file(), "{} is missing (set QUARRY_SHARED_DATA)", docx.display());
    // In a child: one Quarry configuration, its JSON on stdout.
    if let Ok(run) = std::env::var("QUARRY_BENCH_DOCX_RUN") {
        let (backend, model) = run.split_once(':').expect("BACKEND:MODEL");
        println!("{}", quarry_run(backend, model, &docx).await);
        return;
    }
    let chunking = std::env::var("QUARRY_BENCH_CHUNKING").unwrap_or_else(|_| "window".into());
    let (questions_path, _) = questions();
    let mut columns: Vec<(String, Value)> = Vec::new();
    for (backend, model, label) in RUNS {
        let out = Command::new(std::env::current_exe().unwrap())
            .env("QUARRY_BENCH_DOCX_RUN", format!("{backend}:{model}"))
            .output()
            .expect("the bench in a child process");
        assert!(out.status.success(), "{label}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().rev().find(|l| l.starts_with('{')).expect("the child's JSON");
        columns.push((label.to_string(), serde_json::from_str(line).unwrap()));
    }
    let args = [
        docx.display().to_string(),
        models_dir().join("all-minilm-l6-v2").display().to_string(),
        questions_path.display().to_string(),
        cores.to_string(),
    ];
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_default());
    let venv = std::env::var_os("QUARRY_BENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/quarry/bench-venv"));
    let mut pipeline = python(&venv.join("bin/python"), "crewai_docx.py", &args);
    pipeline["ingest_s"] = json!(
        (pms(&pipeline, "parse_ms")
            + pms(&pipeline, "chunk_ms")
            + pms(&pipeline, "embed_ms")
            + pms(&pipeline, "index_ms"))
            / 1000.0
    );
    let crewai_venv = std::env::var_os("QUARRY_VENVS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/quarry/venvs"))
        .join("crewai");
    let crewai = python(&crewai_venv.join("bin/python"), "crewai_real_docx.py", &args);
    columns.push(("python pipeline".into(), pipeline.clone()));
    columns.push(("real crewai".into(), crewai.clone()));

    println!("DOCX ingest + search, rclone manual ({} bytes), {cores} cores", std::fs::metadata(&docx).unwrap().len());
    println!("{}", quarry_tests::cpu_line());
    for (label, v) in &columns[..RUNS.len()] {
        println!(
            "{label}: {} ; chunking {chunking}, {cores} embedder instances, host open {:.1} s",
            v["runs_on"].as_str().unwrap_or(""),
            pms(v, "open_s")
        );
    }
    println!(
        "python pipeline: {} ({}), {cores} onnxruntime threads, wall {:.1} s",
        pipeline["pipeline"].as_str().unwrap_or(""),
        pipeline["index"].as_str().unwrap_or(""),
        pms(&pipeline, "wall_s")
    );
    println!(
        "real crewai: {} ({}), wall {:.1} s with its import ({:.1} s)",
        crewai["pipeline"].as_str().unwrap_or(""),
        crewai["index"].as_str().unwrap_or(""),
        pms(&crewai, "wall_s"),
        pms(&crewai, "import_s")
    );
    println!();
    print!("{:<18}", "measure");
    for (label, _) in &columns {
        print!(" {label:>18}");
    }
    println!();
    let per_tok: Measure = |v| pms(v, "embed_ms") * 1000.0 / pms(v, "tokens");
    // Each row with its decimals: CPU seconds per 1,000 tokens are fractions of a second.
    let rows: [(&str, Measure, usize); 12] = [
        ("parse ms", |v| pms(v, "parse_ms"), 1),
        ("chunk ms", |v| pms(v, "chunk_ms"), 1),
        ("embed ms", |v| pms(v, "embed_ms"), 1),
        ("ingest s", |v| pms(v, "ingest_s"), 1),
        ("chunks", |v| pms(v, "chunks"), 1),
        ("tokens embedded", |v| pms(v, "tokens"), 1),
        ("embed µs/token", per_tok, 1),
        ("tokens/s (ingest)", |v| pms(v, "tokens") / pms(v, "ingest_s"), 1),
        ("CPU s/1k tokens", |v| pms(v, "ingest_cpu_s") * 1000.0 / pms(v, "tokens"), 3),
        ("peak RSS MB", |v| pms(v, "peak_rss_mb"), 1),
        ("query p50 ms", |v| pms(v, "query_p50_ms"), 1),
        ("query p99 ms", |v| pms(v, "query_p99_ms"), 1),
    ];
    for (name, get, decimals) in &rows {
        print!("{name:<18}");
        for (_, v) in &columns {
            print!(" {:>18.*}", decimals, get(v));
        }
        println!();
    }
    let crewai_ingest = pms(&crewai, "ingest_s");
    println!();
    for (label, v) in &columns[..RUNS.len()] {
        println!(
            "{label}: ingest {:.2}x real crewai's, embed µs/token {:.2}x the python pipeline's, peak RSS {:.0} MB, query p50 {:.1} ms",
            pms(v, "ingest_s") / crewai_ingest,
            per_tok(v) / per_tok(&pipeline),
            pms(v, "peak_rss_mb"),
            pms(v, "query_p50_ms")
        );
    }
    println!(
        "the python pipeline drops the document's {} tables; its chunks and real crewai's are cut at 256 tokens by the embedder",
        pipeline["tables_dropped"]
    );
}

/// How a row of the table reads its figure from one run's JSON.
type Measure = fn(&Value) -> f64;

/// A measure of one run's JSON, NaN where the run did not report it.
fn pms(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}
