//! Where inference time goes: sentences/s and time per kind of operator for one text of the
//! benchmark set. Built natively it profiles tract on the host. Built for wasm32-wasip2 and run
//! with the host's `wasi-run` example, it profiles the same code under the sandbox's code
//! generation, with or without epoch checks (`make profile-embedder` runs all three).
//!
//! `profile MODEL_DIR TEXTS_JSON [TOKENS]` (TEXTS_JSON from `models/bench_ort.py texts`).

use std::time::{Duration, Instant};

use embedder_onnx::model::{Kind, Model};

fn run(label: &str, dir: &str, xs: &[String]) -> Result<(), String> {
    let t = Instant::now();
    let model = Model::load(&serde_json::json!({ "model_dir": dir }).to_string()).map_err(|e| format!("{e:?}"))?;
    println!("{label}: model load {:.2} s", t.elapsed().as_secs_f64());
    let embed = |x: &String| model.embed(x, Kind::Document).map_err(|e| format!("{e:?}"));
    embed(&xs[0])?;
    let start = Instant::now();
    let mut done = 0;
    while done < 8 || start.elapsed() < Duration::from_secs(3) {
        embed(&xs[done % xs.len()])?;
        done += 1;
    }
    println!("{label}: {:.2} sentences/s", done as f64 / start.elapsed().as_secs_f64());
    let runs = 8;
    let spent = model.profile(&xs[0], runs).map_err(|e| format!("{e:?}"))?;
    let total: Duration = spent.iter().map(|(_, d)| *d).sum();
    println!("{label}: {:.1} ms per run, by operator:", total.as_secs_f64() * 1e3 / runs as f64);
    for (op, d) in spent.iter().take(6) {
        println!(
            "  {op:<28} {:>8.2} ms  {:>5.1}%",
            d.as_secs_f64() * 1e3 / runs as f64,
            100.0 * d.as_secs_f64() / total.as_secs_f64()
        );
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (dir, texts, tokens) = match args.as_slice() {
        [_, dir, texts] => (dir, texts, "128"),
        [_, dir, texts, tokens] => (dir, texts, tokens.as_str()),
        _ => {
            eprintln!("usage: profile MODEL_DIR TEXTS_JSON [TOKENS]");
            std::process::exit(2);
        }
    };
    let fail = |m: String| -> ! {
        eprintln!("profile: {m}");
        std::process::exit(1);
    };
    let json = std::fs::read_to_string(texts).unwrap_or_else(|e| fail(format!("{texts}: {e}")));
    let sets: std::collections::BTreeMap<String, Vec<String>> = serde_json::from_str(&json)
        .unwrap_or_else(|e| fail(format!("{texts}: {e} (write it with `bench_ort.py texts`)")));
    let Some(xs) = sets.get(tokens).filter(|x| !x.is_empty()) else {
        fail(format!("{texts} has no texts of {tokens} tokens; it has: {:?}", sets.keys().collect::<Vec<_>>()))
    };
    println!("{tokens} tokens, one text at a time");
    let label = if cfg!(target_arch = "wasm32") { "tract in wasm" } else { "tract native" };
    if let Err(e) = run(label, dir, xs) {
        fail(e);
    }
}
