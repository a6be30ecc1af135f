//! Embedder benchmark, printed side by side in one run:
//!
//! - sentences/s at 128 and 256 tokens, batch 1 and 32, for embedder-onnx in the host with 1
//!   instance and with N (one per core), its model run by tract and by onnxruntime (the same
//!   library as the Python rows), and for onnxruntime in Python on the same model file with 1
//!   and N threads (the venv `make models` made); the CPU and the instruction sets it offers;
//! - model load time, memory per instance (RSS growth per pool member);
//! - compiling the embedder component vs loading its cached precompiled form;
//! - batched tensors against one text per run, on the host's engine (tract) directly, one
//!   thread, texts of equal length (the best case for batching: no padding). The embedder
//!   sends one text per run because this comes out slower.
//!
//! Run with `make bench-embedder` (or `cargo bench -p quarry-tests --bench embedder`).
//! `QUARRY_BENCH_MODEL` picks the model directory (default all-minilm-l6-v2; `make
//! bench-embedder` runs it for all-minilm-l6-v2-int8 too).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry::bindings::InputKind;
use quarry::capability::embedder::EmbedderBackend;
use quarry::runtime::engine::QuarryEngine;
use quarry_tests::{EMBEDDER_ONNX, TestEnv, models_dir};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Sentences per second for `texts` sent `batch` at a time by `streams` concurrent callers.
async fn throughput(e: &Arc<dyn EmbedderBackend>, texts: &[String], batch: usize, streams: usize) -> f64 {
    let round = |e: Arc<dyn EmbedderBackend>, texts: Vec<String>| async move {
        for chunk in texts.chunks(batch) {
            e.embed(chunk.to_vec(), InputKind::Document).await.expect("embed");
        }
    };
    // Warm up once.
    round(e.clone(), texts[..batch].to_vec()).await;
    let start = Instant::now();
    let mut done = 0;
    while done < 64 || start.elapsed() < Duration::from_secs(3) {
        let mut tasks = Vec::new();
        for s in 0..streams {
            let part: Vec<String> =
                if batch == 1 { texts.iter().skip(s).step_by(streams).cloned().collect() } else { texts.to_vec() };
            done += part.len();
            tasks.push(tokio::spawn(round(e.clone(), part)));
        }
        for t in tasks {
            t.await.expect("stream");
        }
    }
    done as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = std::env::var("QUARRY_BENCH_MODEL").unwrap_or_else(|_| "all-minilm-l6-v2".into());
    let models = models_dir();
    let model_dir = models.join(&model);
    let python = models.join(".venv/bin/python");
    let script = quarry_tests::crate_dir().join("../components/embedder-onnx/models/bench_ort.py");
    let work = tempfile::tempdir().unwrap();
    let texts_json = work.path().join("texts.json");
    let ok = Command::new(&python).arg(&script).arg("texts").arg(&model_dir).arg(&texts_json).status().unwrap();
    assert!(ok.success(), "bench_ort.py texts failed");
    let texts: std::collections::BTreeMap<String, Vec<String>> =
        serde_json::from_str(&std::fs::read_to_string(&texts_json).unwrap()).unwrap();

    println!("model {model}, {cores} cores\n");

    // Compile vs cached load of the embedder component.
    let bytes = std::fs::read(EMBEDDER_ONNX).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let t = Instant::now();
    QuarryEngine::new(cache.path().to_path_buf()).unwrap().load_component(Path::new(EMBEDDER_ONNX), &bytes).unwrap();
    let compile = t.elapsed();
    let e = QuarryEngine::new(cache.path().to_path_buf()).unwrap();
    let t = Instant::now();
    e.load_component(Path::new(EMBEDDER_ONNX), &bytes).unwrap();
    let cached = t.elapsed();
    println!(
        "embedder component ({} KiB): compile {:.2} s, cached load {:.1} ms ({:.0}x)",
        bytes.len() / 1024,
        compile.as_secs_f64(),
        cached.as_secs_f64() * 1e3,
        compile.as_secs_f64() / cached.as_secs_f64()
    );

    // Warm the cache the hosts below use, so their load time is the model's, not the compiler's.
    QuarryEngine::new(quarry_tests::shared_cache()).unwrap().load_component(Path::new(EMBEDDER_ONNX), &bytes).unwrap();

    println!("{}", quarry_tests::cpu_line());
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    let configs = [(128, 1), (128, 32), (256, 1), (256, 32)];
    let library = quarry::capability::nn::ort_library::locate(None).expect("onnxruntime's library (make models)");
    for backend in ["tract", "onnxruntime"] {
        for pool in [1, cores] {
            let env = TestEnv::new();
            env.plugin(EMBEDDER_ONNX, "embedder-onnx");
            let rss0 = rss_bytes();
            let t = Instant::now();
            let host = env
                .host(&format!(
                    "onnxruntime = {{ library = {library:?} }}\n[models.m]\ndir = {:?}\nbackend = \"{backend}\"\n[embedders.m]\ncomponent = \"plugins/embedder-onnx.wasm\"\nconfig = {{ model = \"m\" }}\npool = {pool}\n[embedders.m.grants]\nmodels = [\"m\"]\nmemory = \"1GiB\"\ndeadline = \"600s\"\n",
                    model_dir.display()
                ))
                .await;
            let load = t.elapsed();
            let e = host.embedder("m").unwrap();
            let mut row = Vec::new();
            for (tokens, batch) in configs {
                let streams = if batch == 1 { pool } else { 1 };
                row.push(throughput(&e, &texts[&tokens.to_string()], batch, streams).await);
            }
            // After running, so that every member's session (onnxruntime makes them as needed)
            // is counted.
            let per_instance = rss_bytes().saturating_sub(rss0) / pool as u64;
            let runs_on = host.apps().nn.models.runs_on().join(", ");
            println!(
                "host on {runs_on}, {pool} instance(s): ready in {:.2} s (cached component; the model read, verified and optimised once by the host), RSS {:.0} MiB per instance after the run",
                load.as_secs_f64(),
                per_instance as f64 / (1 << 20) as f64
            );
            rows.push((format!("quarry on {backend}, {pool} instance(s)"), row));
        }
    }
    for threads in [1, cores] {
        let out = Command::new(&python)
            .arg(&script)
            .arg("run")
            .arg(&model_dir)
            .arg(&texts_json)
            .arg(threads.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "bench_ort.py run failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let row = v["results"].as_array().unwrap().iter().map(|r| r["per_s"].as_f64().unwrap()).collect();
        println!("onnxruntime (Python), {threads} thread(s): model load {:.2} s", v["load_s"].as_f64().unwrap());
        rows.push((format!("onnxruntime (Python), {threads} thread(s)"), row));
    }

    println!("\nsentences/s                              128 tok b1  128 tok b32  256 tok b1  256 tok b32");
    for (name, r) in &rows {
        println!("{name:<40} {:>10.1} {:>12.1} {:>11.1} {:>12.1}", r[0], r[1], r[2], r[3]);
    }
    let ratio = |a: usize, b: usize| -> String {
        rows[a].1.iter().zip(&rows[b].1).map(|(x, y)| format!("{:>10.2}x", x / y)).collect::<Vec<_>>().join(" ")
    };
    // rows: tract 1, tract N, onnxruntime 1, onnxruntime N, Python 1 thread, Python N threads.
    println!("\nquarry on tract, 1 instance / onnxruntime 1 thread              {}", ratio(0, 4));
    println!("quarry on tract, {cores} instances / onnxruntime {cores} threads            {}", ratio(1, 5));
    println!("quarry on onnxruntime, 1 instance / onnxruntime 1 thread        {}", ratio(2, 4));
    println!("quarry on onnxruntime, {cores} instances / onnxruntime {cores} threads      {}", ratio(3, 5));
    batching(&model_dir.join("model.onnx"));
}

/// tract's plan for inputs of shape `[batch, S]` (`batch` symbolic when `None`).
fn plan(path: &Path, batch: Option<usize>) -> Arc<tract_onnx::prelude::TypedRunnableModel> {
    use tract_onnx::prelude::*;
    let mut model = tract_onnx::onnx()
        .with_ignore_output_shapes(true)
        .with_ignore_value_info(true)
        .model_for_path(path)
        .expect("model.onnx");
    let (b, s) = (model.sym("B"), model.sym("S"));
    let b: TDim = batch.map_or(b.into(), TDim::from);
    for i in 0..model.input_outlets().expect("inputs").len() {
        let fact = TypedFact::dt_shape(DatumType::I64, [b.clone(), s.clone().into()]);
        model.set_input_fact(i, InferenceFact::from(fact)).expect("input fact");
    }
    model.into_optimized().and_then(|m| m.into_runnable()).expect("optimised plan")
}

/// Milliseconds per text for `reps` runs of `batch` texts of `len` tokens (the median run).
fn per_text(plan: &Arc<tract_onnx::prelude::TypedRunnableModel>, batch: usize, len: usize, reps: usize) -> f64 {
    use tract_onnx::prelude::*;
    let n = batch * len;
    let mut ms = Vec::new();
    for _ in 0..reps {
        let ids: Vec<i64> = (0..n as i64).map(|i| 1000 + i % 5000).collect();
        let inputs = tvec!(
            Tensor::from_shape(&[batch, len], &ids).expect("ids").into(),
            Tensor::from_shape(&[batch, len], &vec![1i64; n]).expect("mask").into(),
            Tensor::from_shape(&[batch, len], &vec![0i64; n]).expect("types").into()
        );
        let t = Instant::now();
        plan.run(inputs).expect("run");
        ms.push(t.elapsed().as_secs_f64() * 1e3 / batch as f64);
    }
    ms.sort_by(f64::total_cmp);
    ms[reps / 2]
}

fn batching(model: &Path) {
    let (one, many) = (plan(model, Some(1)), plan(model, None));
    println!("\nbatched tensors, tract natively, one thread: ms per text (batch 1 / batch n = speed-up)");
    for len in [128, 256] {
        let single = per_text(&one, 1, len, 10);
        for batch in [8, 32] {
            let batched = per_text(&many, batch, len, 3);
            println!(
                "{len} tokens: batch 1 {single:.1} ms, batch {batch} {batched:.1} ms per text ({:.2}x)",
                single / batched
            );
        }
    }
}
