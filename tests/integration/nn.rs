//! The `nn` capability (wasi-nn on native tract) in the real host: what a hostile component can
//! ask of it (forged models, ungranted names, bad tensors, hoarded graphs, contexts and
//! tensors) is refused with a wasi-nn error and then a good call succeeds; a model is loaded
//! once per host however many instances use it; a changed model file is loaded again, and a
//! pinned one that no longer matches is refused while the loaded one keeps serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quarry::bindings::InputKind;
use quarry_tests::{EMBED_PROBE, EMBEDDER_ONNX, TestEnv, models_dir, within};
use serde_json::{Value, json};

/// A copy of model directory `model` at `env/models/NAME` (its own file, so that its load
/// count is this test's alone).
fn model_copy(env: &TestEnv, model: &str, name: &str) -> PathBuf {
    let dest = env.path(&format!("models/{name}"));
    std::fs::create_dir_all(&dest).unwrap();
    for f in ["model.onnx", "tokenizer.json", "quarry-model.json"] {
        std::fs::copy(models_dir().join(model).join(f), dest.join(f)).unwrap();
    }
    dest
}

/// The hostile instance `h`, granted model `m` (`dir`, with `section_extra` lines such as a pin).
async fn hostile_with_model(env: &TestEnv, dir: &Path, section_extra: &str) -> Arc<quarry::Registry> {
    let config = quarry_tests::hostile_config(env, "60s", "models = [\"m\"]");
    env.host(&format!("{config}\n[models.m]\ndir = {:?}\n{section_extra}\n", dir.display())).await
}

/// [`hostile_with_model`] with the model run by `backend`.
async fn hostile_on(env: &TestEnv, dir: &Path, backend: &str, section_extra: &str) -> Arc<quarry::Registry> {
    hostile_with_model(env, dir, &format!("backend = \"{backend}\"\n{section_extra}")).await
}

async fn nn(host: &quarry::Registry, args: Value) -> Value {
    let out = within(120, host.call("h.nn", &args.to_string())).await.unwrap();
    serde_json::from_str(&out.text).unwrap()
}

/// A compute the model accepts: three token inputs of `n` tokens.
fn good_inputs(n: u32) -> Value {
    json!([
        {"name": "input_ids", "dims": [1, n], "ty": "i64", "tokens": true},
        {"name": "attention_mask", "dims": [1, n], "ty": "i64"},
        {"name": "token_type_ids", "dims": [1, n], "ty": "i64"},
    ])
}

async fn computes(host: &quarry::Registry) {
    let out = nn(host, json!({"op": "compute", "inputs": good_inputs(3)})).await;
    assert_eq!(out["outputs"][0]["name"], "last_hidden_state", "{out}");
    assert_eq!(out["outputs"][0]["dims"], json!([1, 3, 384]), "{out}");
}

fn assert_error(out: &Value, code: &str, words: &[&str]) {
    assert_eq!(out["error"], code, "{out}");
    let message = out["message"].as_str().unwrap_or_default();
    for w in words {
        assert!(message.contains(w), "{w:?} not in {message:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_models_and_ungranted_names_are_refused() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let host = hostile_with_model(&env, &models_dir().join("all-minilm-l6-v2"), "").await;
    let out = nn(&host, json!({"op": "load_bytes"})).await;
    assert_error(&out, "Security", &["models = [\"NAME\"]", "load-by-name"]);
    let out = nn(&host, json!({"op": "load", "name": "e5"})).await;
    assert_error(&out, "NotFound", &["not granted", "\"e5\"", "[\"m\"]"]);
    let out = nn(&host, json!({"op": "load", "name": "x".repeat(10_000)})).await;
    assert!(out["message"].as_str().unwrap().len() < 1000, "a guest's name is bounded in the message: {out}");
    computes(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tensors_get_errors_before_any_allocation() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let host = hostile_with_model(&env, &models_dir().join("all-minilm-l6-v2"), "").await;
    let mut inputs = good_inputs(3);
    // Dimensions whose product overflows u64: refused from the dimensions, with 8 bytes of data.
    inputs[0] = json!({"name": "input_ids", "dims": [65536, 65536, 65536, 65536, 2], "ty": "i64", "len": 8});
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "TooLarge", &["elements"]);
    // A dimension list the guest made long (100,000 ones: one element) is refused, not kept.
    let mut inputs = good_inputs(3);
    inputs[0] = json!({"name": "input_ids", "dims": vec![1; 100_000], "ty": "i64", "len": 8});
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "TooLarge", &["dimensions"]);
    let mut inputs = good_inputs(3);
    inputs[0]["len"] = json!(7);
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "InvalidArgument", &["holds 24 bytes"]);
    let mut inputs = good_inputs(3);
    inputs[2]["name"] = json!("token_type");
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "InvalidArgument", &["token_type_ids"]);
    let mut inputs = good_inputs(3);
    inputs[0] = json!({"name": "input_ids", "dims": [1, 3], "ty": "f32"});
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "InvalidArgument", &["I64", "F32"]);
    let mut inputs = good_inputs(3);
    inputs[1]["dims"] = json!([2, 3]);
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "InvalidArgument", &["attention_mask"]);
    let inputs = json!([good_inputs(3)[0], good_inputs(3)[1]]);
    assert_error(&nn(&host, json!({"op": "compute", "inputs": inputs})).await, "InvalidArgument", &["not given"]);
    computes(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_contexts_and_tensor_bytes_are_capped_per_instance() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let host = hostile_with_model(&env, &models_dir().join("all-minilm-l6-v2"), "").await;
    let out = nn(&host, json!({"op": "hoard_contexts", "n": 100})).await;
    assert_eq!(out["held"], quarry::capability::nn::MAX_CONTEXTS, "{out}");
    assert_error(&out["refused"], "TooLarge", &["execution contexts"]);
    nn(&host, json!({"op": "drop_all"})).await;
    let out = nn(&host, json!({"op": "hoard_graphs", "n": 100})).await;
    assert_eq!(out["held"], quarry::capability::nn::MAX_GRAPHS, "{out}");
    assert_error(&out["refused"], "TooLarge", &["graphs"]);
    nn(&host, json!({"op": "drop_all"})).await;
    // 16 MiB at a time: the host holds at most the instance's grants.memory (64 MiB here, not
    // the 256 MiB ceiling), then refuses (and keeps none of the refused tensor's data); a
    // compute past the cap says to drop tensors.
    nn(&host, json!({"op": "hoard_tensors", "n": 3, "mb": 16})).await;
    computes(&host).await;
    nn(&host, json!({"op": "hoard_tensors", "n": 4, "mb": 16})).await;
    let out = nn(&host, json!({"op": "compute", "inputs": good_inputs(3)})).await;
    assert_error(&out, "TooLarge", &["drop tensors", "grants.memory"]);
    nn(&host, json!({"op": "drop_all"})).await;
    computes(&host).await;
    // Well past the ceiling: the same.
    let n = (quarry::capability::nn::MAX_TENSOR_BYTES >> 24) + 2;
    nn(&host, json!({"op": "hoard_tensors", "n": n, "mb": 16})).await;
    let out = nn(&host, json!({"op": "compute", "inputs": good_inputs(3)})).await;
    assert_error(&out, "TooLarge", &["drop tensors"]);
    nn(&host, json!({"op": "drop_all"})).await;
    computes(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_load_serves_every_instance_and_tool() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let dir = model_copy(&env, "all-minilm-l6-v2", "shared");
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(EMBED_PROBE, "probe");
    let embedder = |name: &str| {
        format!(
            "[embedders.{name}]\ncomponent = \"plugins/embedder-onnx.wasm\"\nconfig = {{ model = \"m\" }}\npool = 2\n[embedders.{name}.grants]\nmodels = [\"m\"]\nmemory = \"1GiB\"\ndeadline = \"300s\"\n"
        )
    };
    let host = env
        .host(&format!(
            "[models.m]\ndir = {:?}\n{}{}[tools.p1]\ncomponent = \"plugins/probe.wasm\"\nembedder = \"e1\"\n[tools.p2]\ncomponent = \"plugins/probe.wasm\"\nembedder = \"e2\"\n",
            dir.display(),
            embedder("e1"),
            embedder("e2")
        ))
        .await;
    let texts: Vec<String> = (0..24).map(|i| format!("sentence number {i} about rclone bandwidth limits")).collect();
    let args = json!({ "texts": texts, "kind": "document" }).to_string();
    let (a, b) = tokio::join!(within(300, host.call("p1", &args)), within(300, host.call("p2", &args)));
    let (a, b): (Value, Value) =
        (serde_json::from_str(&a.unwrap().text).unwrap(), serde_json::from_str(&b.unwrap().text).unwrap());
    assert_eq!(a["vectors"], b["vectors"], "both embedders compute the same vectors");
    assert_eq!(a["vectors"].as_array().unwrap().len(), 24);
    // The same vectors as one text at a time through the other embedder.
    let one = host.embedder("e2").unwrap().embed(vec![texts[5].clone()], InputKind::Document).await.unwrap();
    let v5: Vec<f32> = serde_json::from_value(a["vectors"][5].clone()).unwrap();
    assert_eq!(one[0].vector, v5);
    let section = quarry::capability::nn::ModelSection {
        name: "m".into(),
        dir: dir.canonicalize().unwrap(),
        pin: None,
        backend: quarry::capability::nn::Backend::Tract,
    };
    assert_eq!(host.apps().nn.models.load_count(&section), 1, "4 embedder instances, 2 tools: one copy of the weights");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_model_is_loaded_again_unless_its_pin_refuses_it() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    changed_model_reloads("tract").await;
}

/// The same swap, with onnxruntime running the model: the files and pins are the host's, the
/// backend only what runs the graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_onnxruntime_a_changed_model_is_loaded_again_unless_its_pin_refuses_it() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models)
        || quarry_tests::skip_unless(quarry_tests::Need::Onnxruntime)
    {
        return;
    }
    changed_model_reloads("onnxruntime").await;
}

async fn changed_model_reloads(backend_name: &str) {
    let backend = match backend_name {
        "tract" => quarry::capability::nn::Backend::Tract,
        _ => quarry::capability::nn::Backend::Onnxruntime(quarry::capability::nn::ort_library::locate(None)),
    };
    let env = TestEnv::new();
    let (free, pinned) = (model_copy(&env, "all-minilm-l6-v2", "free"), model_copy(&env, "all-minilm-l6-v2", "pinned"));
    let sha = |dir: &Path| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(dir.join("model.onnx")).unwrap()))
    };
    let fp32 = sha(&free);
    let swap_to_int8 = |dir: &Path| {
        let int8 = models_dir().join("all-minilm-l6-v2-int8");
        let bytes = std::fs::read(int8.join("model.onnx")).unwrap();
        env.replace(&dir.join("model.onnx"), &bytes);
        env.replace(&dir.join("quarry-model.json"), &std::fs::read(int8.join("quarry-model.json")).unwrap());
    };
    let section = |dir: &Path| quarry::capability::nn::ModelSection {
        name: "m".into(),
        dir: dir.canonicalize().unwrap(),
        pin: None,
        backend: backend.clone(),
    };

    let host = hostile_on(&env, &free, backend_name, "").await;
    computes(&host).await;
    swap_to_int8(&free);
    computes(&host).await;
    assert_eq!(host.apps().nn.models.load_count(&section(&free)), 2, "unpinned: the new file is loaded");

    let env2 = TestEnv::new();
    let host = hostile_on(&env2, &pinned, backend_name, &format!("sha256 = \"{fp32}\"")).await;
    computes(&host).await;
    swap_to_int8(&pinned);
    // Refused (the host logs why); the pinned model loaded before keeps serving.
    computes(&host).await;
    assert_eq!(host.apps().nn.models.load_count(&section(&pinned)), 1, "pinned: the changed file is refused");
    // With nothing loaded before, a file that does not match its pin never serves.
    let env3 = TestEnv::new();
    let wrong = model_copy(&env3, "all-minilm-l6-v2", "wrong");
    let host = hostile_on(&env3, &wrong, backend_name, &format!("sha256 = \"{}\"", "0".repeat(64))).await;
    assert_error(&nn(&host, json!({"op": "load"})).await, "Security", &["pins", "sha256"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_model_file_swaps_the_embedders_that_use_it() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models) {
        return;
    }
    let env = TestEnv::new();
    let (free, pinned) = (model_copy(&env, "all-minilm-l6-v2", "free"), model_copy(&env, "all-minilm-l6-v2", "pinned"));
    let fp32 = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(pinned.join("model.onnx")).unwrap()))
    };
    env.plugin(EMBEDDER_ONNX, "embedder-onnx");
    env.plugin(EMBED_PROBE, "probe");
    let embedder = |name: &str, model: &str| {
        format!(
            "[embedders.{name}]\ncomponent = \"plugins/embedder-onnx.wasm\"\nconfig = {{ model = \"{model}\" }}\npool = 1\n[embedders.{name}.grants]\nmodels = [\"{model}\"]\nmemory = \"1GiB\"\ndeadline = \"300s\"\n[tools.{name}-probe]\ncomponent = \"plugins/probe.wasm\"\nembedder = \"{name}\"\n"
        )
    };
    let host = env
        .host(&format!(
            "[models.free]\ndir = {:?}\n[models.pinned]\ndir = {:?}\nsha256 = \"{fp32}\"\n{}{}",
            free.display(),
            pinned.display(),
            embedder("ef", "free"),
            embedder("ep", "pinned")
        ))
        .await;
    let vector = |tool: &'static str| {
        let host = host.clone();
        async move {
            let out = within(120, host.call(tool, r#"{"texts":["how do I limit bandwidth?"]}"#)).await.unwrap();
            let v: Value = serde_json::from_str(&out.text).unwrap();
            serde_json::from_value::<Vec<f32>>(v["vectors"][0].clone()).unwrap()
        }
    };
    let (before_free, before_pinned) = (vector("ef-probe").await, vector("ep-probe").await);
    let _watcher = quarry::watch::watch(host.clone()).expect("watch");
    let mut swaps = host.subscribe();
    let int8 = models_dir().join("all-minilm-l6-v2-int8");
    for dir in [&free, &pinned] {
        env.replace(&dir.join("model.onnx"), &std::fs::read(int8.join("model.onnx")).unwrap());
        env.replace(&dir.join("quarry-model.json"), &std::fs::read(int8.join("quarry-model.json")).unwrap());
    }
    // The unpinned model swaps its embedder; the pinned one is refused (and logged).
    let report = within(120, swaps.recv()).await.expect("swap event");
    assert_eq!(report.instances, vec!["ef".to_string()], "{report:?}");
    let after_free = vector("ef-probe").await;
    assert_ne!(after_free, before_free, "the int8 model serves now");
    let cos: f32 = after_free.iter().zip(&before_free).map(|(a, b)| a * b).sum();
    assert!(cos > 0.98, "the same sentence, a close vector: {cos}");
    let err = host.reload(&pinned.canonicalize().unwrap().join("model.onnx")).await.unwrap_err().to_string();
    assert!(err.contains("pins") && err.contains("keeps serving"), "{err}");
    assert_eq!(vector("ep-probe").await, before_pinned, "the pinned model keeps serving");
}
