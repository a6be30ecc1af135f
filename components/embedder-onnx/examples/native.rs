//! Native tract on the same model and texts as the wasm benchmark, one thread:
//! splits the gap to onnxruntime into "tract vs onnxruntime" and "wasm vs native".
//!
//! `cargo run --release -p embedder-onnx --example native -- MODEL_DIR TEXTS_JSON`
//! (TEXTS_JSON from `models/bench_ort.py texts`; `make bench-embedder` runs it).

use std::time::{Duration, Instant};

use embedder_onnx::model::{Kind, Model};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, texts] = args.as_slice() else {
        eprintln!("usage: native MODEL_DIR TEXTS_JSON");
        std::process::exit(2);
    };
    let texts: std::collections::BTreeMap<String, Vec<String>> =
        serde_json::from_str(&std::fs::read_to_string(texts).expect("texts")).expect("texts json");
    let t = Instant::now();
    let model = Model::load(&serde_json::json!({ "model_dir": dir }).to_string()).expect("model");
    let load = t.elapsed().as_secs_f64();
    let mut out = serde_json::Map::new();
    for tokens in ["128", "256"] {
        let xs = &texts[tokens];
        model.embed(&xs[0], Kind::Document).expect("warm up");
        let start = Instant::now();
        let mut done = 0;
        while done < 32 || start.elapsed() < Duration::from_secs(3) {
            for x in xs {
                model.embed(x, Kind::Document).expect("embed");
                done += 1;
            }
        }
        out.insert(tokens.into(), (done as f64 / start.elapsed().as_secs_f64()).into());
    }
    println!("{}", serde_json::json!({ "load_s": load, "per_s": out }));
}
