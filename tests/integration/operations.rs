//! `quarry serve --http` as a fleet member: the probes a load balancer sends (`/healthz`,
//! `/readyz`, answered without the MCP endpoint's token), and `/metrics` scraped by a real
//! Prometheus server (Debian's, started by tests/metrics/prometheus.sh), queried through its own
//! HTTP API.

use std::time::{Duration, Instant};

use quarry_tests::local_prometheus::{LocalPrometheus, fetch};
use quarry_tests::mcp_client::{McpHttp, Served};
use quarry_tests::{HOSTILE, Need, TestEnv, quarry_bin, skip_unless};
use serde_json::{Value, json};

const TOKEN: &str = "fleet-test-token";

/// `http://127.0.0.1:PORT` of a server whose MCP endpoint is `url`.
fn base(served: &Served) -> String {
    served.url.trim_end_matches("/mcp").to_string()
}

async fn get(url: &str, token: Option<&str>) -> (u16, Value) {
    let a = fetch("GET", url, token).await.unwrap();
    (a.status, serde_json::from_str(&a.body).unwrap_or(Value::String(a.body)))
}

/// A load balancer's view: alive at once; not ready while the instance prepares, saying what
/// it waits for only to a caller with the token; ready when it has prepared. `/metrics` is behind
/// the token like `/mcp`; other paths are not served.
#[tokio::test(flavor = "multi_thread")]
async fn the_probes_follow_preparation_and_need_no_token() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let config = env.config(
        "[tools.slow]\ncomponent = \"plugins/hostile.wasm\"\nconfig = { prepare_ms = 4000 }\n[tools.slow.grants]\ndeadline = \"60s\"\n",
    );
    let served = Served::start_with_env(&quarry_bin(), &config, &[("QUARRY_MCP_TOKEN", TOKEN)]);
    let base = base(&served);

    let alive = fetch("GET", &format!("{base}/healthz"), None).await.unwrap();
    assert_eq!((alive.status, alive.body.as_str()), (200, "ok\n"));

    // Loading, opening, then preparing: not ready throughout.
    let started = Instant::now();
    loop {
        let (status, body) = get(&format!("{base}/readyz"), Some(TOKEN)).await;
        assert_eq!(status, 503, "a 4 s preparation cannot be over yet: {body}");
        assert_eq!(body["failed"], json!([]), "{body}");
        // With what the preparation last reported.
        if body["waiting"][0].as_str().is_some_and(|w| w.starts_with("slow: preparing: preparing the fixture: ")) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "not preparing after 60 s: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = get(&format!("{base}/readyz"), None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert_eq!(body["waiting"], 1, "without the token only how many: {body}");
    assert!(!body.to_string().contains("slow"), "no instance names without the token: {body}");

    let started = Instant::now();
    loop {
        let (status, body) = get(&format!("{base}/readyz"), None).await;
        if status == 200 {
            assert_eq!(body, json!({"ready": true}));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "not ready after 60 s: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let refused = fetch("GET", &format!("{base}/metrics"), None).await.unwrap();
    assert_eq!(refused.status, 401, "{refused:?}");
    let m = fetch("GET", &format!("{base}/metrics"), Some(TOKEN)).await.unwrap();
    assert_eq!(m.status, 200, "{m:?}");
    assert!(m.content_type.starts_with("text/plain; version=0.0.4"), "{}", m.content_type);
    assert!(m.body.contains("quarry_instance_ready{tool_instance=\"slow\"} 1\n"), "{}", m.body);
    assert!(m.body.contains("quarry_instance_members{tool_instance=\"slow\"} 1\n"), "{}", m.body);
    assert_eq!(fetch("POST", &format!("{base}/metrics"), Some(TOKEN)).await.unwrap().status, 405);
    assert_eq!(fetch("POST", &format!("{base}/healthz"), None).await.unwrap().status, 405);
    let elsewhere = fetch("GET", &format!("{base}/status"), Some(TOKEN)).await.unwrap();
    assert_eq!(elsewhere.status, 404);
    assert!(elsewhere.body.contains("/readyz"), "{}", elsewhere.body);
}

/// A failed preparation and a corpus directory that cannot be made keep the host out of the
/// balancer's rotation, each named (to a caller with the token: here, none is configured).
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_instance_or_an_unreachable_corpus_is_not_ready() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let config = env.config(
        "[corpora.gone]\ndir = \"no/such/place/corpus\"\n\n[tools.broken]\ncomponent = \"plugins/hostile.wasm\"\nconfig = { prepare_error = \"the index is corrupt\" }\n",
    );
    let served = Served::start(&quarry_bin(), &config);
    let base = base(&served);
    let started = Instant::now();
    let body = loop {
        let (status, body) = get(&format!("{base}/readyz"), None).await;
        assert_eq!(status, 503, "{body}");
        if body["waiting"] == json!([]) {
            break body;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "still waiting after 60 s: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failed: Vec<&str> = body["failed"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(failed.len(), 2, "{body}");
    assert!(
        failed[0].starts_with("broken: preparation failed") && failed[0].contains("the index is corrupt"),
        "{body}"
    );
    assert!(failed[1].starts_with("corpora.gone: cannot read") && failed[1].contains("no/such/place/corpus"), "{body}");
    // Alive all the same: a restart would not help, and the operator reads why.
    assert_eq!(fetch("GET", &format!("{base}/healthz"), None).await.unwrap().status, 200);
}

/// A real Prometheus scrapes `/metrics` with the bearer token, and its own query API gives back
/// what the calls did: calls and errors by kind, the latency histogram, the instance's members
/// and the process's memory.
#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_what_the_calls_did() {
    if skip_unless(Need::Prometheus) {
        return;
    }
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let config =
        env.config("[tools.h]\ncomponent = \"plugins/hostile.wasm\"\npool = 2\n[tools.h.grants]\ndeadline = \"30s\"\n");
    let served = Served::start_with_env(&quarry_bin(), &config, &[("QUARRY_MCP_TOKEN", TOKEN)]);
    let target = base(&served).trim_start_matches("http://").to_string();

    let mut c = McpHttp::open_with_token(&served.url, Some(TOKEN)).await.unwrap();
    for i in 0..3 {
        let r = c.call("h.echo", json!({"text": format!("hello {i}")})).await.unwrap();
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    let r = c.call("h.panic", json!({})).await.unwrap();
    assert_eq!(r["result"]["isError"], true, "{r}");
    let r = c.call("h.echo", json!({"text": 7})).await.unwrap();
    assert_eq!(r["result"]["isError"], true, "a number is no text: {r}");
    let r = c.call("nope.echo", json!({})).await.unwrap();
    assert!(r.get("error").is_some() || r["result"]["isError"] == true, "{r}");

    let prometheus = LocalPrometheus::start(&target, Some(TOKEN)).await;
    prometheus.wait_for("up{job=\"quarry\"}", 60, |v| v == 1.0).await;
    assert_eq!(prometheus.wait_for("quarry_tool_calls_total{tool=\"h.echo\"}", 30, |v| v == 4.0).await, 4.0);
    prometheus.wait_for("quarry_tool_calls_total{tool=\"h.panic\"}", 30, |v| v == 1.0).await;
    prometheus.wait_for("quarry_tool_errors_total{tool=\"h.panic\",kind=\"fault\"}", 30, |v| v == 1.0).await;
    // The tool refused the arguments: the client's error, not the tool's.
    prometheus.wait_for("quarry_tool_errors_total{tool=\"h.echo\",kind=\"bad_args\"}", 30, |v| v == 1.0).await;
    prometheus.wait_for("sum(quarry_tool_errors_total{tool=\"h.echo\"})", 30, |v| v == 1.0).await;
    prometheus.wait_for("quarry_unknown_tool_calls_total", 30, |v| v == 1.0).await;
    prometheus.wait_for("quarry_tool_call_duration_seconds_count{tool=\"h.echo\"}", 30, |v| v == 4.0).await;
    // The buckets are cumulative and end with every call.
    prometheus
        .wait_for("quarry_tool_call_duration_seconds_bucket{tool=\"h.echo\",le=\"+Inf\"}", 30, |v| v == 4.0)
        .await;
    let p99 = prometheus
        .wait_for("histogram_quantile(0.99, quarry_tool_call_duration_seconds_bucket{tool=\"h.echo\"})", 30, |v| {
            v.is_finite()
        })
        .await;
    assert!(p99 > 0.0 && p99 <= 30.0, "p99 {p99}");
    prometheus.wait_for("quarry_instance_members{tool_instance=\"h\"}", 30, |v| v == 2.0).await;
    prometheus.wait_for("quarry_instance_queue_depth{tool_instance=\"h\"}", 30, |v| v == 0.0).await;
    prometheus.wait_for("quarry_mcp_sessions", 30, |v| v >= 1.0).await;
    prometheus.wait_for("quarry_http_connections_open", 30, |v| v >= 1.0).await;
    prometheus.wait_for("process_resident_memory_bytes{job=\"quarry\"}", 30, |v| v > 1e6).await;
}

/// What an operator alerts on, scraped by a real Prometheus that evaluates the guide's rules (docs/src/mcp.md)
/// (host/prometheus/alerts.yml): an instance that did not load is not ready (and its alert is
/// pending), each instance says which component version serves, a corpus its generation, size
/// and last commit, and a refused hot swap is counted and fires its alert while the old version
/// serves on; a good one is counted and changes the version shown.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_sees_versions_swaps_corpora_and_instances_not_ready() {
    if skip_unless(Need::Prometheus) {
        return;
    }
    let env = TestEnv::new();
    let plugin = env.plugin(HOSTILE, "hostile");
    env.plugin(HOSTILE, "bad");
    let config = env.config(
        "[corpora.c]\ndir = \"corpus\"\n\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\n[tools.h.grants]\ncorpora = [{ name = \"c\", mode = \"rw\" }]\ndeadline = \"30s\"\n\n[tools.bad]\ncomponent = \"plugins/bad.wasm\"\nconfig = { nope = 1 }\n",
    );
    let served = Served::start_with_env(&quarry_bin(), &config, &[("QUARRY_MCP_TOKEN", TOKEN)]);
    let target = base(&served).trim_start_matches("http://").to_string();
    let mut c = McpHttp::open_with_token(&served.url, Some(TOKEN)).await.unwrap();
    let r = c.call("h.corpus_write", json!({"corpora": ["c"], "kib": 4, "commit": true})).await.unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");

    let rules = quarry_tests::crate_dir().join("../host/prometheus/alerts.yml");
    let prometheus = LocalPrometheus::start_with_rules(&target, Some(TOKEN), Some(&rules)).await;
    prometheus.wait_for("quarry_instance_ready{tool_instance=\"h\"}", 60, |v| v == 1.0).await;
    prometheus.wait_for("quarry_instance_ready{tool_instance=\"bad\"}", 30, |v| v == 0.0).await;
    prometheus
        .wait_for(
            "count(ALERTS{alertname=\"QuarryInstanceNotReady\",tool_instance=\"bad\",alertstate=\"pending\"})",
            30,
            |v| v == 1.0,
        )
        .await;
    let sha = |bytes: &[u8]| {
        use sha2::Digest;
        hex::encode(&sha2::Sha256::digest(bytes)[..6])
    };
    let first = sha(&std::fs::read(&plugin).unwrap());
    prometheus
        .wait_for(&format!("quarry_instance_component_info{{tool_instance=\"h\",sha256=\"{first}\"}}"), 30, |v| {
            v == 1.0
        })
        .await;
    prometheus.wait_for("quarry_corpus_generation{corpus=\"c\"}", 30, |v| v == 1.0).await;
    prometheus.wait_for("quarry_corpus_chunks{corpus=\"c\"}", 30, |v| v >= 1.0).await;
    prometheus.wait_for("quarry_corpus_bytes{corpus=\"c\"}", 30, |v| v >= 4096.0).await;
    prometheus.wait_for("time() - quarry_corpus_last_commit_timestamp_seconds{corpus=\"c\"}", 30, |v| v < 600.0).await;

    // A broken replacement: refused, counted, alerted on; the first version serves on.
    prometheus.wait_for("quarry_swaps_total{outcome=\"failed\"}", 30, |v| v == 0.0).await;
    env.replace(&plugin, b"\0asm not a component");
    prometheus.wait_for("quarry_swaps_total{outcome=\"failed\"}", 60, |v| v == 1.0).await;
    prometheus.wait_for("count(ALERTS{alertname=\"QuarrySwapFailed\",alertstate=\"firing\"})", 30, |v| v == 1.0).await;
    let r = c.call("h.echo", json!({"text": "still here"})).await.unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");
    prometheus
        .wait_for(&format!("quarry_instance_component_info{{tool_instance=\"h\",sha256=\"{first}\"}}"), 30, |v| {
            v == 1.0
        })
        .await;

    // A good one (the same code, one more custom section): counted, and its version shown.
    let mut bytes = std::fs::read(HOSTILE).unwrap();
    let (name, payload) = (b"quarry-test", b"2");
    bytes.extend([0u8, (1 + name.len() + payload.len()) as u8, name.len() as u8]);
    bytes.extend(name);
    bytes.extend(payload);
    env.replace(&plugin, &bytes);
    prometheus.wait_for("quarry_swaps_total{outcome=\"swapped\"}", 60, |v| v == 1.0).await;
    let second = sha(&bytes);
    prometheus
        .wait_for(&format!("quarry_instance_component_info{{tool_instance=\"h\",sha256=\"{second}\"}}"), 30, |v| {
            v == 1.0
        })
        .await;
}
