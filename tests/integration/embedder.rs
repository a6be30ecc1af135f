//! A tool's `embedder` import is served by the embedder component its config names.

use quarry_tests::{EMBED_PROBE, HOSTILE, TOY_EMBEDDER, TestEnv, within};

const LINKED: &str = r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = { dimension = 8, max_tokens = 16 }

[tools.probe]
component = "plugins/probe.wasm"
embedder = "toy"
"#;

fn env() -> TestEnv {
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(EMBED_PROBE, "probe");
    env
}

#[tokio::test]
async fn tool_import_is_served_by_the_named_embedder() {
    let env = env();
    let host = env.host(LINKED).await;
    let info = host.embedder("toy").expect("loaded").info();
    assert_eq!((info.id.as_str(), info.dimension, info.max_tokens), ("toy-trigram", 8, 16));
    let long = vec!["word"; 20].join(" ");
    let args = serde_json::json!({ "texts": ["hello world", "hello world", "entirely different text", long] });
    let out = within(30, host.call("probe", &args.to_string())).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(v["model"], "toy-trigram");
    assert_eq!(v["dimension"], 8);
    let vectors: Vec<Vec<f64>> = serde_json::from_value(v["vectors"].clone()).unwrap();
    assert_eq!(vectors.len(), 4);
    for vec in &vectors {
        assert_eq!(vec.len(), 8);
        let norm: f64 = vec.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "not normalised: {norm}");
    }
    assert_eq!(vectors[0], vectors[1]);
    assert_ne!(vectors[0], vectors[2]);
    assert_eq!(v["truncated"], serde_json::json!([false, false, false, true]));
}

/// An embedder that answers fewer vectors than it was given texts is refused by the host,
/// naming it, before a tool could pair vectors with the wrong texts; a tool on a sound embedder
/// in the same host is served.
#[tokio::test]
async fn an_embedder_answering_the_wrong_count_is_refused() {
    let env = env();
    let faulty = r#"
[embedders.short]
component = "plugins/toy.wasm"
config = { dimension = 8, max_tokens = 16, short_answers = true }

[tools.short_probe]
component = "plugins/probe.wasm"
embedder = "short"
"#;
    let host = env.host(&format!("{LINKED}{faulty}")).await;
    let args = serde_json::json!({ "texts": ["hello world", "other text"] }).to_string();
    let err = within(30, host.call("short_probe", &args)).await.unwrap_err().to_string();
    assert!(err.contains("short") && err.contains("answered 1 results for 2 texts; it is faulty"), "{err}");
    let out = within(30, host.call("probe", &args)).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(v["vectors"].as_array().unwrap().len(), 2);
}

/// An embedder answering vectors of another width than its model's is refused as each part
/// arrives; one whose answers all alias one buffer cannot make the host lift more than the
/// embedder's memory grant (hostcall fuel), so the lift itself fails. A sound embedder in the
/// same host serves.
#[tokio::test]
async fn hostile_embedder_answers_are_bounded_where_they_arrive() {
    let env = env();
    let hostile = r#"
[embedders.wide]
component = "plugins/toy.wasm"
config = { dimension = 8, wide_answers = 1000 }
pool = 1

[embedders.alias]
component = "plugins/toy.wasm"
config = { dimension = 8, alias_floats = 1048576 }
pool = 1
[embedders.alias.grants]
memory = "16MiB"

[tools.wide_probe]
component = "plugins/probe.wasm"
embedder = "wide"

[tools.alias_probe]
component = "plugins/probe.wasm"
embedder = "alias"

[embedders.named]
component = "plugins/toy.wasm"
config = { dimension = 8, model_id = "MODEL_ID" }
pool = 1

[embedders.broad]
component = "plugins/toy.wasm"
config = { dimension = 60000 }
pool = 1

[tools.small_probe]
component = "plugins/probe.wasm"
embedder = "broad"
[tools.small_probe.grants]
memory = "4MiB"
"#;
    let host = env.host(&format!("{LINKED}{hostile}").replace("MODEL_ID", &"m".repeat(1 << 20))).await;
    // A model id is kept for the embedder's life: cut.
    assert!(host.embedder("named").unwrap().info().id.len() < 512);
    let args = serde_json::json!({ "texts": ["hello world", "other text"] }).to_string();
    let err = within(30, host.call("wide_probe", &args)).await.unwrap_err().to_string();
    assert!(err.contains("answered a vector of 1000 dimensions for a model of 8; it is faulty"), "{err}");
    // 32 texts x 4 MiB from one 4 MiB buffer: 128 MiB to lift, over the 16 MiB grant.
    let many = serde_json::json!({ "texts": vec!["t"; 32] }).to_string();
    let err = within(60, host.call("alias_probe", &many)).await.unwrap_err().to_string();
    assert!(err.contains("alias") && err.contains("recycled"), "the lift failed as a fault: {err}");
    assert!(!err.contains("dimensions"), "the answer was lifted before it was refused: {err}");
    // A tool's batch whose vectors would not fit the tool's own grant (20 x 240 KB, 4 MiB) is
    // refused before any embedder runs; a smaller one is served.
    let twenty = serde_json::json!({ "texts": vec!["t"; 20] }).to_string();
    let err = within(30, host.call("small_probe", &twenty)).await.unwrap_err().to_string();
    assert!(err.contains("over this tool's grants.memory of 4194304 bytes"), "{err}");
    within(30, host.call("small_probe", r#"{"texts": ["t"]}"#)).await.unwrap();
    let out = within(30, host.call("probe", &args)).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(v["vectors"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_tool_importing_an_embedder_must_name_one() {
    let env = env();
    let cfg = quarry::Config::load(&env.config("[tools.probe]\ncomponent = \"plugins/probe.wasm\"\n")).unwrap();
    let host = quarry::Registry::new(cfg).unwrap();
    let failures = host.load_all().await;
    let msg = failures[0].1.to_string();
    assert!(msg.contains("imports `quarry:retrieval/embedder@0.6.0`") && msg.contains("embedder = \"NAME\""), "{msg}");
}

#[tokio::test]
async fn a_failed_embedder_fails_its_tools_with_the_reason() {
    let env = env();
    let cfg = quarry::Config::load(&env.config(&LINKED.replace("dimension = 8", "dimension = 0"))).unwrap();
    let host = quarry::Registry::new(cfg).unwrap();
    let failures = host.load_all().await;
    let names: Vec<&str> = failures.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["embedders.toy", "probe"]);
    let msg = failures[1].1.to_string();
    assert!(msg.contains("needs embedder \"toy\"") && msg.contains("dimension must be at least 1"), "{msg}");
}

#[tokio::test]
async fn a_broken_embedder_version_is_rejected_and_the_old_keeps_serving() {
    let env = env();
    let host = env.host(LINKED).await;
    let toy = env.path("plugins/toy.wasm");
    env.replace(&toy, &std::fs::read(HOSTILE).unwrap());
    let err = within(60, host.reload(&toy.canonicalize().unwrap())).await.unwrap_err().to_string();
    assert!(err.contains("previous version keeps serving") && err.contains("quarry:retrieval/model"), "{err}");
    let out = within(30, host.call("probe", r#"{"texts":["still here"]}"#)).await.unwrap();
    assert!(out.text.contains("toy-trigram"), "{}", out.text);
}
