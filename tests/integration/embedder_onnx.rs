//! The real embedder component (tokenizers in the sandbox, the graph run by the host through
//! wasi-nn) against the reference embeddings, and its behaviour on hostile input.

use std::sync::Arc;

use quarry::bindings::InputKind;
use quarry::capability::embedder::EmbedderBackend;
use quarry_tests::{EMBED_PROBE, EMBEDDER_ONNX, TestEnv, models_dir, shared_data, within};

/// A host with embedder `m` serving model directory `model` from the models cache (as
/// `[models.m]`), run by tract.
async fn embedder(env: &TestEnv, model: &str) -> (Arc<quarry::Registry>, Arc<dyn EmbedderBackend>) {
    embedder_on(env, model, "tract").await
}

/// [`embedder`] with the model run by `backend`.
async fn embedder_on(env: &TestEnv, model: &str, backend: &str) -> (Arc<quarry::Registry>, Arc<dyn EmbedderBackend>) {
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(EMBED_PROBE, "probe");
    let host = env
        .host(&format!(
            r#"
[models.m]
dir = {:?}
backend = "{backend}"
[embedders.m]
component = "plugins/embedder-onnx.wasm"
config = {{ model = "m" }}
pool = 1
[embedders.m.grants]
models = ["m"]
memory = "1GiB"
deadline = "300s"

[tools.probe]
component = "plugins/probe.wasm"
embedder = "m"
"#,
            models_dir().join(model).display()
        ))
        .await;
    let e = host.embedder("m").expect("embedder loaded");
    (host, e)
}

fn reference(set: &str, file: &str) -> (Vec<String>, Vec<Vec<f64>>) {
    let dir = shared_data().join("embeddings").join(set);
    let read = |p: std::path::PathBuf| {
        std::fs::read_to_string(&p).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the shared data lives beside the checkout; set QUARRY_SHARED_DATA to elsewhere)",
                p.display()
            )
        })
    };
    let text = read(dir.join("sentences.txt"));
    let lines: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
    let refs: Vec<Vec<f64>> = serde_json::from_str(&read(dir.join(file))).unwrap();
    assert_eq!(lines.len(), refs.len());
    (lines, refs)
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * y).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

async fn parity(model: &str, set: &str, file: &str, min: f64) -> Arc<dyn EmbedderBackend> {
    parity_on(model, set, file, min, "tract").await
}

async fn parity_on(model: &str, set: &str, file: &str, min: f64, backend: &str) -> Arc<dyn EmbedderBackend> {
    let env = TestEnv::new();
    let (_host, e) = embedder_on(&env, model, backend).await;
    let (lines, refs) = reference(set, file);
    for (line, r) in lines.iter().zip(&refs) {
        // e5's sentences carry their prefix; the embedder adds it from the input kind.
        let (kind, text) = match (line.strip_prefix("query: "), line.strip_prefix("passage: ")) {
            (Some(t), _) => (InputKind::Query, t),
            (_, Some(t)) => (InputKind::Document, t),
            _ => (InputKind::Document, line.as_str()),
        };
        let out = within(120, e.embed(vec![text.to_string()], kind)).await.unwrap();
        let c = cosine(&out[0].vector, r);
        assert!(c >= min, "{model} on {backend}: cosine {c:.7} < {min} for {line:?}");
        assert!(!out[0].truncated, "{line:?} fits the window");
    }
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_fp32_matches_reference_and_survives_bad_input() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let e = parity("all-minilm-l6-v2", "minilm", "reference.json", 0.9999).await;
    let info = e.info();
    assert_eq!(
        (info.id.as_str(), info.dimension, info.max_tokens),
        ("sentence-transformers/all-MiniLM-L6-v2", 384, 256)
    );

    assert!(within(60, e.embed(vec![], InputKind::Query)).await.unwrap().is_empty());
    let megabyte = "lorem ipsum dolor sit amet ".repeat(40_000);
    let hostile = vec![
        String::new(),
        megabyte,
        "\u{0}\u{1}\u{7}\t\r\n\u{1b}[31m".to_string(),
        "🦀🚀👩‍👩‍👧‍👦 emoji only 🤖".to_string(),
        "mixed: English, 中文, русский, العربية, हिन्दी, 日本語".to_string(),
    ];
    let out = within(300, e.embed(hostile, InputKind::Document)).await.unwrap();
    assert_eq!(out.len(), 5);
    for v in &out {
        assert_eq!(v.vector.len(), 384);
        let n: f32 = v.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "not a unit vector: {n}");
    }
    assert!(out[1].truncated, "a 1 MB text must be reported truncated");
    assert!(!out[0].truncated && !out[2].truncated && !out[3].truncated && !out[4].truncated);
}

/// `token-spans` gives, for each text, the tokens `count-tokens` counts, where they lie.
async fn spans_agree_with_counts(e: &Arc<dyn EmbedderBackend>, texts: &[&str]) -> Vec<Vec<(u32, u32)>> {
    let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
    let counts = within(60, e.count_tokens(texts.clone())).await.unwrap();
    let spans = within(60, e.token_spans(texts.clone())).await.unwrap();
    assert_eq!(spans.len(), texts.len());
    for ((t, n), s) in texts.iter().zip(&counts).zip(&spans) {
        assert_eq!(s.len(), *n as usize, "{t:?}: {s:?}");
    }
    spans.into_iter().map(|s| s.into_iter().map(|s| (s.start, s.end)).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_spans_locate_the_counted_tokens() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let (_host, e) = embedder(&env, "all-minilm-l6-v2").await;
    let spans = spans_agree_with_counts(&e, &["Hello, world", "", "embeddings", "mixed: 中文 🦀"]).await;
    assert_eq!(spans[0], [(0, 5), (5, 6), (7, 12)]);
    assert!(spans[1].is_empty());
    // Word pieces of one word share it, in order.
    assert!(spans[2].len() > 1 && spans[2][0].0 == 0 && spans[2].last().unwrap().1 == 10, "{:?}", spans[2]);
    let env = TestEnv::new();
    let (_host, e5) = embedder(&env, "multilingual-e5-small").await;
    spans_agree_with_counts(&e5, &["北京是中国的首都吗", "Hello, world", "mixed: 中文 🦀"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_int8_matches_onnxruntime() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    parity("all-minilm-l6-v2-int8", "minilm", "reference-int8-onnxruntime.json", 0.999).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilingual_e5_matches_reference_with_its_prefixes() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let e = parity("multilingual-e5-small", "me5-small", "reference.json", 0.999).await;
    // The prefix matters: the same text as query and as passage embeds differently.
    let q = e.embed(vec!["北京是中国的首都吗".into()], InputKind::Query).await.unwrap();
    let p = e.embed(vec!["北京是中国的首都吗".into()], InputKind::Document).await.unwrap();
    assert_ne!(q[0].vector, p[0].vector);
}

/// The same models through wasi-nn with onnxruntime running the graph: the guest is the same
/// component, and the embeddings meet the same bars.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_model_matches_its_reference_on_onnxruntime() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models)
        || quarry_tests::skip_unless(quarry_tests::Need::Onnxruntime)
    {
        return;
    }
    parity_on("all-minilm-l6-v2", "minilm", "reference.json", 0.9999, "onnxruntime").await;
    parity_on("all-minilm-l6-v2-int8", "minilm", "reference-int8-onnxruntime.json", 0.999, "onnxruntime").await;
    let e = parity_on("multilingual-e5-small", "me5-small", "reference.json", 0.999, "onnxruntime").await;
    let q = e.embed(vec!["北京是中国的首都吗".into()], InputKind::Query).await.unwrap();
    assert_eq!(q[0].vector.len(), 384);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_reaches_the_model_through_its_import() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let (host, _) = embedder(&env, "all-minilm-l6-v2").await;
    let out = within(120, host.call("probe", r#"{"texts":["hello","world"],"kind":"document"}"#)).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(v["model"], "sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(v["vectors"][0].as_array().unwrap().len(), 384);
}

#[tokio::test]
async fn missing_or_corrupt_model_names_the_file_and_the_fix() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    let models = env.path("models");
    std::fs::create_dir_all(models.join("broken")).unwrap();
    let src = models_dir().join("all-minilm-l6-v2");
    std::fs::copy(src.join("quarry-model.json"), models.join("broken/quarry-model.json")).unwrap();
    std::fs::copy(src.join("tokenizer.json"), models.join("broken/tokenizer.json")).unwrap();
    std::fs::write(models.join("broken/model.onnx"), b"not the model").unwrap();
    let config = |dir: &str| {
        env.config(&format!(
            "[models.m]\ndir = \"models/{dir}\"\n[embedders.m]\ncomponent = \"plugins/embedder-onnx.wasm\"\nconfig = {{ model = \"m\" }}\npool = 1\n[embedders.m.grants]\nmodels = [\"m\"]\nmemory = \"1GiB\"\ndeadline = \"60s\"\n"
        ))
    };
    // A directory without the model is an operator mistake, reported when the config loads.
    let msg = quarry::Config::load(&config("absent")).unwrap_err().to_string();
    assert!(msg.contains("models/absent/model.onnx") && msg.contains("make models"), "absent: {msg}");
    // A corrupt model is found when the host reads it, and the embedder does not start.
    let host = quarry::Registry::new(quarry::Config::load(&config("broken")).unwrap()).unwrap();
    let failures = within(120, host.load_all()).await;
    let msg = failures.first().map(|f| f.1.to_string()).unwrap_or_default();
    assert!(msg.contains("/models/broken/model.onnx is corrupt") && msg.contains("make models"), "broken: {msg}");
}
