//! Chapter RAG benchmark, in the real host with the real MiniLM embedder (one instance per core)
//! on the bundled rclone manual: the index build cold, after a one-chapter edit, and reopened
//! after a restart; then warm `route` and `search` latency, p50/p99 over 100 questions each
//! (the rclone development questions, cycled), beside the question's embedding alone.
//!
//! Run with `make bench-chapters` (or `cargo bench -p quarry-tests --bench chapters`). The cold
//! build embeds the whole manual: about 2 minutes on 2 cores with tract. `QUARRY_BENCH_BACKEND`
//! (tract, onnxruntime) and `QUARRY_BENCH_MODEL` (all-minilm-l6-v2, all-minilm-l6-v2-int8) pick
//! what runs the model; `make bench-chapters` runs tract fp32, onnxruntime fp32 and int8.

use std::time::Instant;

use quarry::eval::score::percentile;
use quarry_tests::{CHAPTER_RAG, EMBEDDER_ONNX, TestEnv, shared_data};
use serde_json::{Value, json};

fn questions() -> Vec<String> {
    let path = shared_data().join("manuals/rclone/questions.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let qs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["question"].as_str().map(str::to_string))
        .collect();
    qs.iter().cycle().take(100).cloned().collect()
}

async fn report(host: &quarry::Registry) -> Value {
    let out = host.call("manual.list_chapter_tree", "{}").await.expect("list_chapter_tree");
    serde_json::from_str::<Value>(out.extra.as_deref().unwrap_or("{}")).unwrap()["report"].clone()
}

async fn latency(host: &quarry::Registry, tool: &str, questions: &[String]) -> (f64, f64) {
    let mut ms = Vec::new();
    for q in questions {
        let t = Instant::now();
        host.call(tool, &json!({ "question": q }).to_string()).await.unwrap_or_else(|e| panic!("{tool}: {e}"));
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let manual = quarry_tests::crate_dir().join("../host/demo/rclone/MANUAL.md");
    let text = std::fs::read_to_string(&manual).expect("the bundled rclone manual");
    let env = TestEnv::new();
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(CHAPTER_RAG, "chapters");
    for d in ["docs", "index"] {
        std::fs::create_dir_all(env.path(d)).unwrap();
    }
    std::fs::write(env.path("docs/MANUAL.md"), &text).unwrap();
    let (backend, model) = quarry_tests::bench_model();
    println!("{}; model {model} on {backend}", quarry_tests::cpu_line());
    let config = quarry_tests::embedder_on(cores, &backend, &model)
        + r#"
[tools.manual]
component = "plugins/chapters.wasm"
embedder = "minilm"
config = { manual = "/docs/MANUAL.md", index_dir = "/index" }
[tools.manual.grants]
dirs = [{ host = "docs", guest = "/docs" }, { host = "index", guest = "/index", mode = "rw" }]
memory = "1GiB"
deadline = "3600s"
"#;

    let t = Instant::now();
    let host = env.host(&config).await;
    let cold = t.elapsed().as_secs_f64();
    let r = report(&host).await;
    println!(
        "cold build: {cold:.1} s ({} chapters, {} chunks, {} tokens embedded; parse {} ms, chunk {} ms, embed {} ms; {cores} embedder instances)",
        r["chapters"], r["chunks"], r["tokens_embedded"], r["parse_ms"], r["chunk_ms"], r["embed_ms"]
    );

    // Edit one chapter: a sentence added to "About rclone".
    let edited =
        text.replacen("Rclone is a command-line program", "Rclone, benchmarked here, is a command-line program", 1);
    assert_ne!(edited, text, "the edit must change the manual");
    std::fs::write(env.path("docs/MANUAL.md"), &edited).unwrap();
    let t = Instant::now();
    let r = report(&host).await;
    println!(
        "incremental rebuild after a one-chapter edit: {:.1} s ({} of {} chunks embedded, {} reused)",
        t.elapsed().as_secs_f64(),
        r["embedded"],
        r["chunks"],
        r["reused"]
    );
    drop(host);

    let t = Instant::now();
    let host = env.host(&config).await;
    println!("reopen after a restart: {:.1} s", t.elapsed().as_secs_f64());

    let qs = questions();
    let (p50, p99) = latency(&host, "manual.route", &qs).await;
    println!("route: p50 {p50:.1} ms, p99 {p99:.1} ms over {} calls", qs.len());
    let (p50, p99) = latency(&host, "manual.search", &qs).await;
    println!("search: p50 {p50:.1} ms, p99 {p99:.1} ms over {} calls", qs.len());

    // Where a query's time goes: the question's embedding alone, through the same embedder
    // (the component tokenises, the host runs the graph through wasi-nn), without the tool.
    let embedder = host.embedder("minilm").expect("the minilm embedder");
    let tokens = embedder.count_tokens(qs.clone()).await.expect("count_tokens");
    let mut ms = Vec::new();
    for q in &qs {
        let t = Instant::now();
        embedder.embed(vec![q.clone()], quarry::bindings::InputKind::Query).await.expect("embed");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    let mut tokens: Vec<u32> = tokens;
    tokens.sort();
    println!(
        "question embedding alone: p50 {:.1} ms, p99 {:.1} ms over {} calls (questions of {} tokens at the median, {} at most)",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        qs.len(),
        tokens[tokens.len() / 2],
        tokens[tokens.len() - 1]
    );
}
