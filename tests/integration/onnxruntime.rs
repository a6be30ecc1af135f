//! The onnxruntime backend's failures, as an operator meets them: a library that is missing, a
//! library of an older onnxruntime, and a model onnxruntime refuses each fail the instances of
//! that model at load with what to do, while an instance of the same host whose model tract
//! runs keeps serving. Each case is its own `quarry` process: a process loads one library.

use std::path::Path;

use quarry_tests::{EMBED_PROBE, EMBEDDER_ONNX, Need, TestEnv, models_dir, run_quarry, skip_unless};

/// Two probe tools over the same MiniLM files: `a` through `[models.ort]` on onnxruntime (from
/// `library`, with `ort_dir` as its model directory), `b` through `[models.tr]` on tract.
fn env(library: &Path, ort_dir: &Path) -> TestEnv {
    let env = TestEnv::new();
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(EMBED_PROBE, "probe");
    let minilm = models_dir().join("all-minilm-l6-v2");
    let embedder = |name: &str| {
        format!(
            "[embedders.{name}]\ncomponent = \"plugins/embedder-onnx.wasm\"\nconfig = {{ model = \"{name}\" }}\n[embedders.{name}.grants]\nmodels = [\"{name}\"]\nmemory = \"1GiB\"\ndeadline = \"300s\"\n"
        )
    };
    env.config(&format!(
        "onnxruntime = {{ library = {library:?} }}\n\n[models.ort]\ndir = {ort_dir:?}\nbackend = \"onnxruntime\"\n[models.tr]\ndir = {minilm:?}\n\n{}{}\n[tools.a]\ncomponent = \"plugins/probe.wasm\"\nembedder = \"ort\"\n[tools.b]\ncomponent = \"plugins/probe.wasm\"\nembedder = \"tr\"\n",
        embedder("ort"),
        embedder("tr"),
    ));
    env
}

const TEXTS: &str = r#"{"texts": ["hello world"]}"#;

/// `a` fails with every one of `words` in its error; `b` answers with a 384-dimension vector.
fn a_fails_b_serves(env: &TestEnv, words: &[&str]) {
    let (code, out, err) = run_quarry(env, &["call", "b", TEXTS]);
    assert_eq!(code, 0, "the tract model keeps serving: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["vectors"][0].as_array().map(Vec::len), Some(384), "{out}");
    let (code, _, err) = run_quarry(env, &["call", "a", TEXTS]);
    assert_ne!(code, 0, "{err}");
    for w in words {
        assert!(err.contains(w), "{w:?} not in: {err}");
    }
}

#[test]
fn a_missing_library_fails_its_models_only() {
    if skip_unless(Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let missing = env.path("nowhere/libonnxruntime.so");
    let env = self::env(&missing, &models_dir().join("all-minilm-l6-v2"));
    a_fails_b_serves(&env, &["nowhere/libonnxruntime.so", "does not exist", "make models"]);
}

#[test]
fn an_older_onnxruntime_is_refused_naming_the_version_needed() {
    if skip_unless(Need::Models) || skip_unless(Need::OldOnnxruntime) {
        return;
    }
    let old = quarry_tests::old_onnxruntime();
    let env = env(&old, &models_dir().join("all-minilm-l6-v2"));
    a_fails_b_serves(&env, &[old.to_str().unwrap(), "onnxruntime 1.20.1", "1.22 or later"]);
}

#[test]
fn a_model_onnxruntime_refuses_is_an_error_at_load() {
    if skip_unless(Need::Models) || skip_unless(Need::Onnxruntime) {
        return;
    }
    let library = quarry::capability::nn::ort_library::locate(None).unwrap();
    // A model directory whose graph is not ONNX, its manifest agreeing (so only onnxruntime
    // can say no).
    let scratch = TestEnv::new();
    let dir = scratch.path("broken");
    std::fs::create_dir_all(&dir).unwrap();
    let src = models_dir().join("all-minilm-l6-v2");
    std::fs::copy(src.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let graph = b"\x08\x07this is not a graph".to_vec();
    std::fs::write(dir.join("model.onnx"), &graph).unwrap();
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("quarry-model.json")).unwrap()).unwrap();
    manifest["sha256"]["model.onnx"] = quarry_tests::sha256_hex(&graph).into();
    std::fs::write(dir.join("quarry-model.json"), manifest.to_string()).unwrap();
    let env = env(&library, &dir);
    a_fails_b_serves(&env, &["onnxruntime 1.", "refuses", "broken/model.onnx"]);
}
