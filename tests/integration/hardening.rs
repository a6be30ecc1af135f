//! What a hostile component, client or document can make the host hold or do, bounded: each
//! test attacks the way a hostile party would (operations of `tests/components/hostile`, raw
//! clients, fixtures), asserts counts, refusals and error kinds, and ends with a call that
//! succeeds.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use quarry::bindings::ToolError;
use quarry_tests::{CallError, EMBED_PROBE, Fault, HOSTILE, TOY_EMBEDDER, TestEnv, quarry_bin, until, within};
use serde_json::{Value, json};

/// A hostile instance `h` with a read-only `/data`, a writable `/scratch`, 64 MiB and a 5 s
/// deadline, plus `extra` grants.
async fn hostile(env: &TestEnv, extra: &str) -> Arc<quarry::Registry> {
    env.host(&config(env, extra)).await
}

fn config(env: &TestEnv, extra: &str) -> String {
    quarry_tests::hostile_config(env, "5s", extra)
}

async fn call(host: &quarry::Registry, tool: &str, args: Value) -> Result<String, CallError> {
    within(60, host.call(tool, &args.to_string())).await.map(|o| o.text)
}

/// The control call each test ends with.
async fn still_serves(host: &quarry::Registry) {
    assert_eq!(call(host, "h.echo", json!({"text": "after"})).await.unwrap(), "after");
    assert_eq!(call(host, "h.read_file", json!({"path": "/data/ok.txt"})).await.unwrap(), "granted content");
}

fn tool_error(r: Result<String, CallError>) -> ToolError {
    match r {
        Err(CallError::Tool { error, .. }) => error,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hoarded_http_resources_hit_the_memory_grant() {
    for (tool, per_call) in [("hoard_fields", 200), ("hoard_bodies", 100)] {
        let env = TestEnv::new();
        let host = hostile(&env, "").await;
        // 64 MiB allows 256 resources free, then one per 128 KiB of grant left: a few hundred.
        let mut held = 0;
        let fault = loop {
            match call(&host, &format!("h.{tool}"), json!({"n": per_call})).await {
                Ok(text) => {
                    held += 1;
                    assert!(held < 10, "{tool}: still hoarding after {held} calls: {text}");
                }
                Err(CallError::Fault { fault, .. }) => break fault,
                Err(other) => panic!("{tool}: {other}"),
            }
        };
        assert!(held >= 1, "{tool}: the first call fits the grant");
        match &fault {
            Fault::ResourceLimit { limit } => assert!((256..1024).contains(limit), "{tool}: {limit}"),
            other => panic!("{tool}: expected a resource-limit fault, got {other:?}"),
        }
        assert!(fault.to_string().contains("held more host resources than its grants.memory allows"), "{fault}");
        still_serves(&host).await;
    }
}

/// Strings a guest sets on requests it never sends are bounded when they are stored: a 1 MiB
/// authority, method, path or scheme is refused by its setter, and what is kept is charged as
/// the request's resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_set_on_unsent_requests_are_bounded_where_stored() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let counts = |text: String| serde_json::from_str::<Value>(&text).unwrap();
    // At their bounds' side: short strings are kept (a 64-byte method and scheme, a 200-byte
    // authority, a 64-byte path).
    let ok = counts(call(&host, "h.hoard_requests", json!({"n": 10, "len": 64})).await.unwrap());
    assert_eq!(ok, json!({"authority": 10, "method": 10, "path": 10, "scheme": 10}));
    // Past them: every setter refuses, call after call, and nothing is kept.
    for _ in 0..5 {
        let big = counts(call(&host, "h.hoard_requests", json!({"n": 20, "len": 1 << 20})).await.unwrap());
        assert_eq!(big, json!({"authority": 0, "method": 0, "path": 0, "scheme": 0}));
    }
    // Between: an authority over 262 bytes and a path over 8 KiB are refused, a 300-byte path is not.
    let mid = counts(call(&host, "h.hoard_requests", json!({"n": 3, "len": 300})).await.unwrap());
    assert_eq!((mid["authority"].as_u64(), mid["path"].as_u64()), (Some(0), Some(3)), "{mid}");
    let long_path = counts(call(&host, "h.hoard_requests", json!({"n": 1, "len": 9000})).await.unwrap());
    assert_eq!(long_path["path"], 0, "{long_path}");
    // The requests kept are resources charged to the grant: hoarding enough of them faults.
    let mut fault = None;
    for _ in 0..10 {
        match call(&host, "h.hoard_requests", json!({"n": 200, "len": 64})).await {
            Ok(_) => continue,
            Err(CallError::Fault { fault: f, .. }) => fault = Some(f),
            Err(other) => panic!("{other}"),
        }
        break;
    }
    let fault = fault.expect("2,000 hoarded requests fit no 64 MiB grant");
    assert!(matches!(fault, Fault::ResourceLimit { .. }), "{fault:?}");
    still_serves(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_huge_hosts_are_few_and_short() {
    let env = TestEnv::new();
    // Checking 200 MiB of host names in the debug host takes seconds on a loaded machine; the
    // deadline is not what this test is about.
    let host = env.host(&quarry_tests::hostile_config(&env, "60s", "")).await;
    // 200 requests, each to a 250-byte host name that no grant allows: every one refused.
    let err = tool_error(call(&host, "h.deny_flood", json!({"n": 200, "len": 250})).await);
    let (kind, msg) = err.parts();
    // A tool error that follows refusals is `denied`, with the refusals noted.
    assert_eq!(kind, "denied", "{}", &msg[..msg.len().min(300)]);
    assert!(msg.starts_with("200 requests refused"), "{}", &msg[..msg.len().min(300)]);
    assert!(msg.len() < 8 << 10, "the error holds {} bytes", msg.len());
    assert!(msg.contains(&format!("and {} more refusals", 200 - quarry::capability::http::MAX_KEPT)), "{msg}");
    // 1 MiB host names never reach the policy: the guest's setter refuses them (the request
    // goes without an authority and fails), so nothing of them is kept.
    let err = tool_error(call(&host, "h.deny_flood", json!({"n": 200, "len": 1 << 20})).await);
    let msg = err.parts().1;
    assert!(msg.starts_with("200 requests refused") && msg.len() < 1024, "{}", &msg[..msg.len().min(300)]);
    // The records were drained with the call: the next call's error holds none of them.
    let err = tool_error(call(&host, "h.read_file", json!({"path": "/data/missing"})).await);
    assert!(!err.parts().1.contains("[host:"), "{err:?}");
    still_serves(&host).await;
}

#[test]
fn refusal_log_lines_are_rate_limited() {
    let env = TestEnv::new();
    let cfg = env.config(&config(&env, ""));
    let out = quarry_tests::run_with_timeout(
        {
            let mut c = std::process::Command::new(quarry_bin());
            c.arg("--config").arg(&cfg).args(["call", "h.deny_flood", r#"{"n": 300, "len": 200}"#]);
            c.env("RUST_LOG", "warn");
            c
        },
        Duration::from_secs(120),
    );
    let lines = out.stderr.lines().filter(|l| l.contains("WARN") && l.contains("refused")).count();
    assert!(lines >= 1, "{}", out.stderr);
    // A burst of 10, then one a second: far from one line per refusal.
    assert!(lines <= 20, "{lines} warning lines for 300 refusals:\n{}", out.stderr);
    assert!(out.stderr.len() < 64 << 10, "{} bytes of log", out.stderr.len());
}

/// A listener that accepts connections and never answers; counts them and tells when each closes.
struct Silent {
    port: u16,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    closed: Arc<std::sync::atomic::AtomicUsize>,
}

fn silent_listener() -> Silent {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, c) = (accepted.clone(), closed.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            a.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                // Read the request and whatever follows until the peer closes; never answer.
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                c.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Silent { port, accepted, closed }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outgoing_requests_are_capped_and_end_with_the_call() {
    use std::sync::atomic::Ordering;
    let silent = silent_listener();
    let env = TestEnv::new();
    let grants = format!("http = [\"http://127.0.0.1:{}\"]\nprivate_networks = [\"127.0.0.1/32\"]", silent.port);
    let host = hostile(&env, &grants).await;
    let cap = quarry::capability::http::MAX_IN_FLIGHT;
    let url = format!("http://127.0.0.1:{}/", silent.port);
    // A first flood, then at once a second: the first call's requests were ended with it, so
    // the second starts with every one of its permits.
    let first = call(&host, "h.http_flood", json!({"url": url, "n": 200, "wait_ms": 200})).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&first).unwrap()["pending"], cap, "{first}");
    let out = call(&host, "h.http_flood", json!({"url": url, "n": cap + 24, "wait_ms": 1000})).await.unwrap();
    let counts: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(counts["pending"], cap, "{counts}");
    assert_eq!(counts["limited"], 24, "{counts}");
    assert_eq!(silent.accepted.load(Ordering::SeqCst), 2 * cap, "connections the listener saw");
    // The call has returned: every connection it opened is closed, though the guest keeps its
    // futures.
    within(10, async {
        while silent.closed.load(Ordering::SeqCst) < 2 * cap {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // The MCP server of the same host still takes connections and calls.
    let server = quarry::mcp::http::HttpServer::bind(
        host.clone(),
        quarry::mcp::http::HttpOptions::new("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let addr = server.addr().unwrap();
    let stop = server.stopper();
    let serving = tokio::spawn(server.serve());
    let mut c = quarry_tests::mcp_client::McpHttp::open(&format!("http://{addr}/mcp")).await.unwrap();
    let r = c.call("h.echo", json!({"text": "over MCP"})).await.unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "over MCP", "{r}");
    stop.cancel();
    let _ = serving.await;
    still_serves(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_bounds_count_hits_errors_rejections_and_specs() {
    let env = TestEnv::new();
    let plugin = env.plugin(HOSTILE, "hostile");
    let host = env
        .host(&format!(
            "[tools.h]\ncomponent = {plugin:?}\n[tools.h.grants]\nmemory = \"512MiB\"\nmax_output = \"16MiB\"\n"
        ))
        .await;
    // 300,000 empty hits: no string bytes, but well over 16 MiB as records and JSON.
    match within(120, host.call("h.many_hits", r#"{"n": 300000}"#)).await {
        Err(CallError::OutputTooLarge { size, limit, .. }) => {
            assert_eq!(size, 300_000 * quarry::registry::ask::RECORD_OVERHEAD);
            assert_eq!(limit, 16 << 20);
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
    assert_eq!(within(60, host.call("h.many_hits", r#"{"n": 1000}"#)).await.unwrap().hits.len(), 1000);
    // A 20 MiB error message is cut.
    let err = tool_error(call(&host, "h.big_error", json!({"mb": 20})).await);
    let msg = err.parts().1;
    assert!(msg.len() <= quarry::registry::errors::MAX_ERROR_BYTES + 64, "{} bytes", msg.len());
    assert!(
        msg.ends_with(&format!("({} more bytes)", (20 << 20) - quarry::registry::errors::MAX_ERROR_BYTES)),
        "{}",
        &msg[msg.len() - 60..]
    );
    assert_eq!(call(&host, "h.echo", json!({"text": "after"})).await.unwrap(), "after");

    // A component that rejects its config with 50 MiB, and one with 100 KiB per tool spec.
    let env = TestEnv::new();
    let plugin = env.plugin(HOSTILE, "hostile");
    let cfg = quarry::Config::load(&env.config(&format!(
        "[tools.rejects]\ncomponent = {plugin:?}\nconfig = {{ reject_mb = 50 }}\n[tools.rejects.grants]\nmemory = \"512MiB\"\n\n\
         [tools.wordy]\ncomponent = {plugin:?}\nconfig = {{ spec_kib = 100 }}\n\n[tools.ok]\ncomponent = {plugin:?}\n"
    )))
    .unwrap();
    let host = quarry::Registry::new(cfg).unwrap();
    let failures = within(120, host.load_all()).await;
    assert_eq!(failures.len(), 2, "{failures:?}");
    let kept = host.failures();
    assert!(kept["rejects"].len() <= quarry::registry::MAX_FAILURE_BYTES + 64, "{} bytes kept", kept["rejects"].len());
    assert!(kept["wordy"].contains("more than 65536"), "{}", kept["wordy"]);
    // The hint that repeats the reason stays as short.
    match host.call("rejects.echo", "{}").await {
        Err(e @ CallError::UnknownTool { .. }) => assert!(e.to_string().len() < 8 << 10, "{}", e.to_string().len()),
        other => panic!("{other:?}"),
    }
    assert_eq!(within(30, host.call("ok.echo", r#"{"text":"fine"}"#)).await.unwrap().text, "fine");
}

#[tokio::test]
async fn an_unknown_huge_tool_name_is_refused_without_suggestions() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let name = "h".repeat(15 << 20);
    match host.call(&name, "{}").await {
        Err(e @ CallError::UnknownTool { .. }) => {
            let text = e.to_string();
            assert!(text.len() < 1024, "{} bytes", text.len());
            assert!(text.contains("tool names are short"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A near miss still gets its suggestion.
    let e = host.call("h.ehco", "{}").await.unwrap_err().to_string();
    assert!(e.contains("did you mean"), "{e}");
    still_serves(&host).await;
}

/// Bytes and files under `dir`, all the way down.
fn usage(dir: &std::path::Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        files += 1;
        let m = e.metadata().unwrap();
        if m.is_dir() {
            let (b, f) = usage(&e.path());
            bytes += b;
            files += f;
        } else {
            bytes += m.len();
        }
    }
    (bytes, files)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_quota_fail_with_an_io_error() {
    let env = TestEnv::new();
    let cfg = config(&env, "").replace(r#"mode = "rw" }"#, r#"mode = "rw", quota = { bytes = "4MiB", files = 20 } }"#);
    let host = env.host(&cfg).await;
    let err = tool_error(call(&host, "h.fill", json!({"path": "/scratch/big", "mb": 16})).await);
    let msg = err.parts().1;
    // 4 MiB fit; the fifth is refused (wasi-libc reports a refused stream write as EIO).
    assert!(msg.contains("write failed after 4 MiB"), "{msg}");
    let (bytes, _) = usage(&env.path("scratch"));
    // At most one write past the quota (a stream write is at most a few MiB).
    assert!(bytes <= (4 << 20) + (1 << 20), "{bytes} bytes written");
    let err = tool_error(call(&host, "h.touch_many", json!({"dir": "/scratch", "n": 100})).await);
    assert!(err.parts().1.contains("create failed after 19 files"), "{err:?}");
    let (_, files) = usage(&env.path("scratch"));
    assert_eq!(files, 20);
    // Deleting makes room again, once the directory is measured again (at most once a second,
    // when a write would pass the quota).
    std::fs::remove_file(env.path("scratch/big")).unwrap();
    let mut refused = 0;
    while let Err(e) = call(&host, "h.fill", json!({"path": "/scratch/small", "mb": 1})).await {
        // Refused by the quota until the directory is measured again (within about a second).
        refused += 1;
        assert!(refused < 100, "still refused after the quota's clock passed: {e:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    still_serves(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_a_granted_directory_is_refused_not_waited_on() {
    let env = TestEnv::new();
    let cfg = env.config(&config(&env, ""));
    let fifo = env.path("data/fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // A separate server process, so that its thread count is its own.
    let mut server = std::process::Command::new(quarry_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["serve", "--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = server.id();
    let mut stdin = server.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in stdout.lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    let answer = |id: u64| loop {
        let v = rx.recv_timeout(Duration::from_secs(60)).expect("an answer within a minute");
        if v["id"] == id {
            return v;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
    );
    answer(0);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let threads = || std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count();
    let read = |id: u64, path: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "h.read_file", "arguments": {"path": path}}});
    // Warm up the runtime's threads with ordinary reads first.
    for id in 1..=3 {
        send(read(id, "/data/ok.txt"));
        assert_eq!(answer(id)["result"]["content"][0]["text"], "granted content");
    }
    let before = threads();
    for id in 10..50 {
        send(read(id, "/data/fifo"));
        let r = answer(id);
        assert_eq!(r["result"]["isError"], true, "{r}");
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
        assert!(text.contains("read failed") && !text.contains("deadline"), "{text}");
    }
    let after = threads();
    // A blocked open would hold one thread per read (40); the runtime's blocking pool may grow
    // by a few threads on its own under load, and keeps idle ones for a while.
    assert!(after <= before + 8, "threads went from {before} to {after} over 40 reads of a FIFO");
    send(read(40, "/data/ok.txt"));
    assert_eq!(answer(40)["result"]["content"][0]["text"], "granted content");
    let _ = server.kill();
    let _ = server.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_do_not_hold_the_runtime_workers() {
    let env = TestEnv::new();
    let plugin = env.plugin(HOSTILE, "hostile");
    let one =
        |name: &str| format!("[tools.{name}]\ncomponent = {plugin:?}\n[tools.{name}.grants]\ndeadline = \"5s\"\n");
    let host = env.host(&format!("{}{}{}", one("h1"), one("h2"), one("h3"))).await;
    let spin = |h: Arc<quarry::Registry>, name: &'static str| tokio::spawn(async move { h.call(name, "{}").await });
    let (s1, s2) = (spin(host.clone(), "h1.spin"), spin(host.clone(), "h2.spin"));
    let busy = |name: &str| host.instance(name).is_some_and(|i| i.load().0 == 0);
    until("both spins run", || busy("h1") && busy("h2")).await;
    // Both workers are running a spinning guest; a third instance still answers.
    let out = within(4, host.call("h3.echo", r#"{"text":"still here"}"#)).await.unwrap();
    assert_eq!(out.text, "still here");
    assert!(!s1.is_finished() && !s2.is_finished(), "echo answered only after a spin ended");
    for s in [s1, s2] {
        assert!(matches!(s.await.unwrap(), Err(CallError::Fault { fault: Fault::Deadline(_), .. })));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_recycles_its_store() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    assert_eq!(call(&host, "h.sleep", json!({"ms": 10})).await.unwrap(), "slept");
    assert_eq!(call(&host, "h.ran", json!({})).await.unwrap(), "1");
    // The caller gives up while the guest waits in a host call.
    let gave_up = tokio::time::timeout(Duration::from_millis(200), host.call("h.sleep", r#"{"ms": 3000}"#)).await;
    assert!(gave_up.is_err());
    // The next call gets a fresh instance (its count starts again), not the abandoned store.
    assert_eq!(call(&host, "h.ran", json!({})).await.unwrap(), "0");
    still_serves(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedder_pool_serves_tools_in_turn() {
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    let probe = env.plugin(EMBED_PROBE, "probe");
    let host = env
        .host(&format!(
            "[embedders.toy]\ncomponent = \"plugins/toy.wasm\"\nconfig = {{ delay_ms = 300 }}\npool = 1\n\
             [tools.ingest]\ncomponent = {probe:?}\nembedder = \"toy\"\n[tools.ingest.grants]\ndeadline = \"60s\"\n\
             [tools.query]\ncomponent = {probe:?}\nembedder = \"toy\"\n[tools.query.grants]\ndeadline = \"60s\"\n"
        ))
        .await;
    // A batch of 4 chunks (4 x 300 ms on the one member), then a one-text query.
    let texts: Vec<String> = (0..4 * quarry::capability::embedder::MAX_CHUNK).map(|i| format!("text {i}")).collect();
    let h = host.clone();
    let args = json!({"texts": texts}).to_string();
    let ingest = tokio::spawn(async move { h.call("ingest", &args).await });
    // The ingest runs (its one member is taken): it embeds at once.
    until("the ingest runs", || host.instance("ingest").is_some_and(|i| i.load().0 == 0)).await;
    let out = within(30, host.call("query", r#"{"texts": ["one question"]}"#)).await.unwrap();
    assert!(out.text.contains("toy-trigram"));
    assert!(!ingest.is_finished(), "the query waited for the whole ingest");
    let ingested: Value = serde_json::from_str(&ingest.await.unwrap().unwrap().text).unwrap();
    assert_eq!(ingested["vectors"].as_array().unwrap().len(), 4 * quarry::capability::embedder::MAX_CHUNK);

    // An embed abandoned by its tool (deadline) recycles the member; the next tool's embed works.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), host.call("query", r#"{"texts": ["x"]}"#)).await;
    assert!(gave_up.is_err());
    let out = within(30, host.call("ingest", r#"{"texts": ["after"]}"#)).await.unwrap();
    assert!(out.text.contains("toy-trigram"), "{}", out.text);
}

#[test]
fn guest_text_reaches_the_terminal_escaped() {
    let env = TestEnv::new();
    let cfg = env.config(&config(&env, ""));
    // An OSC 52 clipboard write, a screen clear, and a right-to-left override (Trojan Source).
    let hostile_text = "title\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J done \u{202e}txt.exe";
    let args = json!({"text": hostile_text}).to_string();
    // Through a pseudo-terminal (util-linux `script`): escaped.
    let cmd =
        format!("{} --config {} call h.echo '{}'", quarry_bin().display(), cfg.display(), args.replace('\'', "'\\''"));
    let out = std::process::Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("title\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J done \\u{202e}txt.exe"), "{shown:?}");
    assert!(!shown.contains('\u{1b}'), "a raw escape reached the terminal: {shown:?}");
    assert!(!shown.contains('\u{202e}'), "a raw bidi override reached the terminal: {shown:?}");
    // Piped: byte for byte.
    let out = std::process::Command::new(quarry_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["call", "h.echo", &args])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n'), hostile_text);
}

#[test]
fn log_lines_in_a_pipe_carry_no_colour_codes() {
    let env = TestEnv::new();
    let cfg = env.config(&config(&env, ""));
    // A refused request is logged at WARN; stderr here is a pipe.
    let out = std::process::Command::new(quarry_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["call", "h.http_get", r#"{"url": "http://169.254.169.254/latest"}"#])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WARN"), "the refusal is logged: {err}");
    assert!(!err.contains('\u{1b}'), "colour codes in a pipe: {err:?}");
}

/// Every log line a guest can cause is under a budget: 200 refused opens of a FIFO and 180
/// refused creates past a quota, in one call each, log a burst of lines, not one a refusal.
#[test]
fn refusals_a_guest_repeats_log_a_few_lines() {
    let env = TestEnv::new();
    let cfg = config(&env, "").replace(r#"mode = "rw" }"#, r#"mode = "rw", quota = { files = 20 } }"#);
    let cfg = env.config(&cfg);
    std::process::Command::new("mkfifo").arg(env.path("data/fifo")).status().unwrap();
    for (args, refused, says) in [
        (json!({"path": "/data/fifo", "n": 200}), "200 refused", "refused to open"),
        (json!({"path": "/scratch/t", "n": 200, "create": true}), "180 refused", "a write was refused"),
    ] {
        let out = std::process::Command::new(quarry_bin())
            .arg("--config")
            .arg(&cfg)
            .args(["call", "h.try_many", &args.to_string()])
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(refused), "{stdout} {stderr}");
        let lines = stderr.lines().filter(|l| l.contains(says)).count();
        assert!((1..=12).contains(&lines), "{lines} lines for {refused}: {stderr}");
    }
}

/// A fault carries at most a kilobyte of the guest's last words, however much it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_carries_a_bounded_tail_of_stderr() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    match call(&host, "h.shout_and_panic", json!({"kib": 64})).await {
        Err(CallError::Fault { fault, .. }) => {
            let text = fault.to_string();
            assert!(
                text.contains("its stderr said: ") && text.contains("sssss"),
                "{}",
                quarry::support::text::cut(&text, 300)
            );
            assert!(text.len() < 2048, "{} bytes", text.len());
        }
        other => panic!("expected a fault, got {other:?}"),
    }
    still_serves(&host).await;
}

/// A component file over `[host] max_component_size` is refused before it is compiled, at load
/// and on a hot swap; the rest of the host serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_over_the_size_limit_is_refused_before_compiling() {
    let env = TestEnv::new();
    env.plugin(quarry_tests::ECHO_V1, "echo");
    // More than the limit, and not a component: compiling would fail too, but later and
    // otherwise. The echo component is well under the limit.
    assert!(std::fs::metadata(quarry_tests::ECHO_V1).unwrap().len() < 16 << 20);
    std::fs::write(env.path("plugins/huge.wasm"), vec![0u8; 17 << 20]).unwrap();
    let path = env
        .config("[tools.huge]\ncomponent = \"plugins/huge.wasm\"\n[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n");
    let text =
        std::fs::read_to_string(&path).unwrap().replacen("[host]\n", "[host]\nmax_component_size = \"16MiB\"\n", 1);
    std::fs::write(&path, text).unwrap();
    let host = quarry::Registry::new(quarry::Config::load(&path).unwrap()).unwrap();
    let failures = host.load_all().await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let why = failures[0].1.to_string();
    assert!(why.contains("huge.wasm is over 16777216 bytes, [host] max_component_size"), "{why}");
    assert_eq!(host.call("echo", r#"{"text":"x"}"#).await.unwrap().text, "hello x [v1]");
    // Out of range is a config error naming the key.
    let text = std::fs::read_to_string(&path).unwrap().replace("\"16MiB\"", "\"8GiB\"");
    std::fs::write(&path, text).unwrap();
    let e = quarry::Config::load(&path).unwrap_err().to_string();
    assert!(e.contains("host.max_component_size") && e.contains("between 1MiB and 1GiB"), "{e}");
}

/// An instance slow to open does not hold up the others: the listing waits for it at most
/// `LIST_WAIT`, lists the others, and the slow one follows with a change notice (what MCP
/// sessions hear as `tools/list_changed`); a call to it meanwhile says it is still opening.
/// (On c8d5fbc instances opened one after another and the listing waited for all of them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_open_does_not_hold_up_the_listing() {
    let env = TestEnv::new();
    let slow_ms = quarry::registry::LIST_WAIT.as_millis() as u64 + 8_000;
    let body = format!(
        "{}\n[tools.slow]\ncomponent = \"plugins/hostile.wasm\"\nconfig = {{ open_ms = {slow_ms}, label = \"slow\" }}\n\
         [tools.slow.grants]\ndeadline = \"60s\"\n",
        config(&env, "")
    );
    let host = quarry::Registry::new(quarry::Config::load(&env.config(&body)).unwrap()).unwrap();
    let mut changes = host.subscribe();
    let start = std::time::Instant::now();
    let loading = host.clone();
    let load = tokio::spawn(async move { loading.load_all().await });
    within(60, host.loaded()).await;
    let listed_after = start.elapsed();
    assert!(listed_after < Duration::from_millis(slow_ms), "listed after {listed_after:?}");
    let names: Vec<String> = host.tools().iter().map(|t| t.qualified.clone()).collect();
    assert!(names.iter().any(|n| n == "h.echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("slow.")), "{names:?}");
    assert_eq!(call(&host, "h.echo", json!({"text": "quick"})).await.unwrap(), "quick");
    match call(&host, "slow.echo", json!({"text": "x"})).await {
        Err(CallError::UnknownTool { hint, .. }) => assert!(hint.contains("still opening"), "{hint}"),
        other => panic!("expected an unknown tool, got {other:?}"),
    }
    let report = within(60, changes.recv()).await.unwrap();
    assert_eq!(report.instances, vec!["slow".to_string()]);
    assert!(host.tools().iter().any(|t| t.qualified == "slow.echo"));
    assert!(within(60, load).await.unwrap().is_empty());
    assert_eq!(call(&host, "slow.echo", json!({"text": "late"})).await.unwrap(), "late");
    still_serves(&host).await;
}

/// Hostile instances `a` and `b` (64 MiB, a 3 s deadline) granted corpora `names` read-write,
/// each a `[corpora.NAME]` in `corpus-NAME/`.
fn corpus_writers(env: &TestEnv, names: &[&str]) -> String {
    env.plugin(HOSTILE, "hostile");
    let grants: Vec<String> = names.iter().map(|n| format!("{{ name = \"{n}\", mode = \"rw\" }}")).collect();
    let mut body = String::new();
    for n in names {
        body += &format!("[corpora.{n}]\ndir = \"corpus-{n}\"\n");
    }
    for t in ["a", "b"] {
        body += &format!(
            "[tools.{t}]\ncomponent = \"plugins/hostile.wasm\"\n[tools.{t}.grants]\nmemory = \"64MiB\"\ndeadline = \"3s\"\ncorpora = [{}]\n",
            grants.join(", ")
        );
    }
    body
}

async fn corpus_write(host: &quarry::Registry, tool: &str, args: Value) -> Vec<Value> {
    serde_json::from_str(&call(host, tool, args).await.unwrap()).unwrap()
}

/// A writer kept across calls (in a static) keeps neither its lease nor its batch: another
/// instance writes at once after the call that took it ends, committed or not, and the kept
/// handle refuses everything, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corpus_writer_lasts_one_call() {
    let env = TestEnv::new();
    let host = env.host(&corpus_writers(&env, &["c"])).await;
    let kept = corpus_write(&host, "a.corpus_write", json!({"corpora": ["c"], "keep": true})).await;
    assert_eq!(kept, [json!({"ok": null})]);
    // The lease went with a's call: b neither waits for it nor gets `busy`.
    let start = std::time::Instant::now();
    let b = corpus_write(&host, "b.corpus_write", json!({"corpora": ["c"], "commit": true})).await;
    assert_eq!(b, [json!({"ok": 1})], "after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(2), "b waited {:?} for the lease", start.elapsed());
    // A committed writer lets the lease go at its commit.
    let committed =
        corpus_write(&host, "a.corpus_write", json!({"corpora": ["c"], "commit": true, "keep": true})).await;
    assert_eq!(committed, [json!({"ok": 2})]);
    assert_eq!(
        corpus_write(&host, "b.corpus_write", json!({"corpora": ["c"], "commit": true})).await,
        [json!({"ok": 3})]
    );
    // The kept handles refuse, and nothing they were given is committed.
    let said = corpus_write(&host, "a.corpus_kept", json!({})).await;
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].as_str().unwrap().contains("taken in an earlier call"), "{said:?}");
    assert!(said[1].as_str().unwrap().contains("has committed"), "{said:?}");
    assert_eq!(
        corpus_write(&host, "b.corpus_write", json!({"corpora": ["c"], "commit": true})).await,
        [json!({"ok": 4})]
    );
}

/// Pending batches count against the instance's one memory grant, all writers together: three
/// writers of 24 MiB each do not fit 64 MiB, whatever the corpus; what a call held is given back
/// when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_batches_share_the_instance_memory_grant() {
    let env = TestEnv::new();
    let host = env.host(&corpus_writers(&env, &["x", "y", "z"])).await;
    let kib = 24 << 10;
    let held =
        corpus_write(&host, "a.corpus_write", json!({"corpora": ["x", "y", "z"], "kib": kib, "keep": true})).await;
    assert_eq!(held[..2], [json!({"ok": null}), json!({"ok": null})], "{held:?}");
    let why = held[2]["error"].as_str().unwrap_or_else(|| panic!("the third batch fit: {held:?}"));
    assert!(why.contains("all its writers together") && why.contains("grants.memory"), "{why}");
    // The next call starts with nothing held: 24 MiB fit again, and commit.
    let again = corpus_write(&host, "a.corpus_write", json!({"corpora": ["z"], "kib": kib, "commit": true})).await;
    assert_eq!(again, [json!({"ok": 1})]);
    assert_eq!(call(&host, "a.echo", json!({"text": "after"})).await.unwrap(), "after");
}

/// A component names only its own resources (`quarry://self/...`): a template under another
/// instance's name is refused at open, saying so; listed resources and read answers that name
/// another's are dropped; a read goes only to the instance its URI names, and what a client
/// reads names the instance's URIs as listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_are_the_instances_own() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let claim = r#"
[tools.aaa]
component = "plugins/hostile.wasm"
config = { label = "aaa", templates = ["quarry://manual/chapter/{id}"] }
"#;
    let own = r#"
[tools.manual]
component = "plugins/hostile.wasm"
config = { label = "manual", templates = ["quarry://self/chapter/{id}"] }
[tools.lister]
component = "plugins/hostile.wasm"
config = { label = "lister", resources = ["quarry://self/r/1", "quarry://manual/r/2", "file:///etc/passwd"] }
"#;
    let host = quarry::Registry::new(quarry::Config::load(&env.config(&format!("{claim}{own}"))).unwrap()).unwrap();
    let failures = within(60, host.load_all()).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let (name, why) = (&failures[0].0, failures[0].1.to_string());
    assert_eq!(name, "aaa");
    assert!(
        why.contains("\"quarry://manual/chapter/{id}\" is not the component's own") && why.contains("quarry://self/"),
        "{why}"
    );

    let host = env.host(own).await;
    let caller = quarry::registry::instance::Caller::default();
    let listed: Vec<String> = within(60, host.resources(caller)).await.unwrap().into_iter().map(|r| r.uri).collect();
    assert_eq!(listed, ["quarry://lister/r/1"]);
    let read = |uri: &'static str| {
        let host = host.clone();
        async move { within(60, host.read(uri, caller, std::future::pending())).await }
    };
    let text = |c: &quarry::bindings::quarry::retrieval::types::Contents| match &c.body {
        quarry::bindings::quarry::retrieval::types::Body::Text(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    // manual's template, read: manual answers, its own URI only, its text qualified.
    let got = read("quarry://manual/chapter/3").await.unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].uri, "quarry://manual/chapter/3");
    // It was asked about its own name for it, and what it wrote names the listed URIs.
    assert_eq!(text(&got[0]), "manual read quarry://manual/chapter/3; see also quarry://manual/r/next");
    // A URI nobody owns, and another scheme, ask nobody (lister would answer anything).
    for uri in ["quarry://nobody/r/1", "file:///etc/passwd"] {
        let r = read(uri).await;
        assert!(matches!(r, Err(quarry::registry::ReadError::NotFound(_))), "{uri}: {r:?}");
    }
}

/// With `bare_names`, a tool may not take a name another instance answers to: hostile's bare
/// `echo` against a one-tool instance named `echo` is refused at load, naming both, and `echo`
/// still runs the instance of that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_name_another_instance_answers_to_is_refused() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    env.plugin(quarry_tests::ECHO_V1, "echo");
    let body = r#"
[tools.aaa]
component = "plugins/hostile.wasm"
bare_names = true
[tools.echo]
component = "plugins/echo.wasm"
"#;
    let host = quarry::Registry::new(quarry::Config::load(&env.config(body)).unwrap()).unwrap();
    let failures = within(60, host.load_all()).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let (name, why) = (&failures[0].0, failures[0].1.to_string());
    assert_eq!(name, "aaa");
    assert!(
        why.contains("lists tool \"echo\" by its bare name") && why.contains("instance \"echo\" is named"),
        "{why}"
    );
    let out = within(60, host.call("echo", r#"{"text": "whose"}"#)).await.unwrap();
    assert!(out.text != "whose" && out.text.contains("whose"), "echo-v1 greets; hostile would not: {}", out.text);
}

/// A client that never answers: it is asked once, and never says anything.
struct Unanswering(tokio::sync::Notify);

impl quarry::capability::client::Asker for Unanswering {
    fn declared(&self, _: quarry::capability::client::RequestKind) -> bool {
        true
    }

    fn ask<'a>(
        &'a self,
        _: quarry::capability::client::Question,
        wait: Duration,
    ) -> quarry::capability::client::Answer<'a> {
        self.0.notify_one();
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            Err(quarry::capability::client::AskError::Failed("no answer".into()))
        })
    }

    fn missing(&self, _: quarry::capability::client::RequestKind) {}
}

/// A call that waits for its client gives its pool member back meanwhile: with a pool of one,
/// another client's plain call runs at once while a silent client's question waits out its
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_its_client_holds_no_pool_member() {
    let env = TestEnv::new();
    env.plugin(quarry_tests::CONFORMANCE, "conformance");
    let host = env
        .host(
            r#"
[tools.c]
component = "plugins/conformance.wasm"
resource_schemes = ["test"]
pool = 1
grants = { client = ["elicitation"], deadline = "30s" }
"#,
        )
        .await;
    let silent = Arc::new(Unanswering(tokio::sync::Notify::new()));
    let asker: Arc<dyn quarry::capability::client::Asker> = silent.clone();
    let asking = quarry::registry::instance::Caller { client: "silent", listener: None, asker: Some(&asker) };
    let args = quarry::args::Args::parse(r#"{"message": "Your name?"}"#).unwrap();
    let waiting = host.call_cancellable("c.test_elicitation", &args, asking, std::future::pending());
    tokio::pin!(waiting);
    // Until the question is asked: the silent call then holds the only member's store.
    tokio::select! {
        out = &mut waiting => panic!("the silent call ended: {out:?}"),
        () = silent.0.notified() => {}
    }
    let plain = quarry::args::Args::parse("{}").unwrap();
    let other = host.call_cancellable("c.test_simple_text", &plain, Default::default(), std::future::pending());
    let out = tokio::select! {
        out = &mut waiting => panic!("the silent call ended first: {out:?}"),
        out = within(15, other) => out.unwrap(),
    };
    assert!(!out.text.is_empty());
}

/// `resources/list` answers within the listing bound, with what has prepared: an instance still
/// preparing is left out, and says so by a resources list change once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_listing_does_not_wait_for_a_slow_preparation() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let prepare_ms = quarry::registry::LIST_WAIT.as_millis() as u64 + 15_000;
    let body = format!(
        r#"
[tools.quick]
component = "plugins/hostile.wasm"
config = {{ label = "quick", resources = ["quarry://self/r/1"] }}
[tools.slow]
component = "plugins/hostile.wasm"
config = {{ label = "slow", resources = ["quarry://self/r/2"], prepare_ms = {prepare_ms} }}
[tools.slow.grants]
deadline = "60s"
"#
    );
    let host = env.opened_host(&body).await;
    within(60, host.instance("quick").unwrap().prepared()).await;
    let mut changes = host.apps().client.subscribe();
    let caller = quarry::registry::instance::Caller::default();
    let listed: Vec<String> = within(60, host.resources(caller)).await.unwrap().into_iter().map(|r| r.uri).collect();
    assert_eq!(listed, ["quarry://quick/r/1"]);
    let slow = host.instance("slow").unwrap();
    assert_eq!(slow.readiness(), quarry::registry::instance::Readiness::Preparing, "the listing waited for it");
    // quick's own announcement (of its readiness) may still be on its way: slow's is the one
    // this waits for.
    let change = within(60, async {
        loop {
            let c = changes.recv().await.unwrap();
            if c.instance != "quick" {
                break c;
            }
        }
    })
    .await;
    assert_eq!((change.instance.as_str(), change.kind), ("slow", quarry::capability::client::ListKind::Resources));
    let listed: Vec<String> = within(60, host.resources(caller)).await.unwrap().into_iter().map(|r| r.uri).collect();
    assert_eq!(listed, ["quarry://quick/r/1", "quarry://slow/r/2"]);
}

/// `quarry serve --http` over the conformance component as instance `c` (its tools by their bare
/// names, its `test://` resources its own), with `instance` (its pool and grants) added.
fn conformance_served(env: &TestEnv, instance: &str) -> quarry_tests::mcp_client::Served {
    env.plugin(quarry_tests::CONFORMANCE, "conformance");
    let config = env.config(&format!(
        "[tools.c]\ncomponent = \"plugins/conformance.wasm\"\nbare_names = true\nresource_schemes = [\"test\"]\n{instance}\n"
    ));
    quarry_tests::mcp_client::Served::start(&quarry_bin(), &config)
}

/// A 2026-07-28 request state carries the caller's answers, so it is the caller's own: over
/// HTTP it is bound to the Authorization the request came with. The same caller brings it back
/// and the call completes; another bearer token, none, or the state on other arguments is
/// refused (cbf06d5 accepted it from anyone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_is_the_callers_own() {
    let env = TestEnv::new();
    let served = conformance_served(&env, "pool = 1\ngrants = { client = [\"elicitation\"] }");
    let tool = "test_input_required_result_request_state";
    // One stateless request, as the conformance suite sends it.
    let call = |token: Option<&'static str>, extra: Value| {
        let url = served.url.clone();
        async move {
            let mut c = quarry_tests::mcp_client::McpHttp::connect(&url).await.unwrap();
            c.token = token.map(str::to_string);
            c.headers = vec![
                ("mcp-protocol-version".into(), "2026-07-28".into()),
                ("mcp-method".into(), "tools/call".into()),
                ("mcp-name".into(), tool.into()),
            ];
            let mut params = json!({
                "name": tool,
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "quarry-tests", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}
                }
            });
            params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            within(60, c.request("tools/call", params)).await.unwrap()
        }
    };
    let first = call(Some("alice"), json!({})).await;
    let state = first["result"]["requestState"].as_str().unwrap_or_else(|| panic!("no request state: {first}"));
    let key = first["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = |state: &str| {
        json!({
            "inputResponses": { key.clone(): {"action": "accept", "content": {"ok": true}} },
            "requestState": state
        })
    };
    for (token, extra) in [
        (Some("mallory"), answer(state)),
        (None, answer(state)),
        (Some("alice"), {
            let mut a = answer(state);
            a["arguments"] = json!({"other": 1});
            a
        }),
    ] {
        let replayed = call(token, extra).await;
        let message =
            replayed["error"]["message"].as_str().unwrap_or_else(|| panic!("{token:?}: accepted: {replayed}"));
        assert!(message.contains("requestState was not accepted"), "{token:?}: {message}");
    }
    let done = call(Some("alice"), answer(state)).await;
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{done}"));
    assert!(text.starts_with("state-ok: confirmed"), "{done}");
}

/// A client that never answers costs only itself, and a bounded amount: one handshake-era
/// session over HTTP that sends eight calls asking it a question and answers none has four
/// questions waiting at most; the other four calls are refused at once with why, while the
/// waiting ones last until their deadline (cbf06d5: all eight waited, each holding a store).
/// A pool of four, so that eight calls run at once (a member lends its store to one waiting
/// call at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_leaves_at_most_four_questions_waiting() {
    use quarry_tests::mcp_client::McpHttp;
    let env = TestEnv::new();
    let served = conformance_served(&env, "pool = 4\ngrants = { client = [\"elicitation\"], deadline = \"10s\" }");
    let mut first = McpHttp::connect(&served.url).await.unwrap();
    let init = first
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "silent", "version": "0"}}),
        )
        .await
        .unwrap();
    assert!(init.get("result").is_some(), "{init}");
    first
        .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string().into_bytes())
        .await
        .unwrap();
    let session = first.session().unwrap().to_string();
    let calls = (0..8).map(|_| {
        let (url, session) = (served.url.clone(), session.clone());
        tokio::spawn(async move {
            let mut c = McpHttp::join(&url, &session).await.unwrap();
            // Request ids differ within the session (`join` starts each client's elsewhere).
            c.call("test_elicitation", json!({"message": "Your name?"})).await.unwrap().to_string()
        })
    });
    // Each call ends one of two ways: refused at its question, or its question asked and left
    // unanswered until the deadline.
    let (mut refused, mut waited) = (0, 0);
    for call in calls.collect::<Vec<_>>() {
        let body = within(60, call).await.unwrap();
        if body.contains("questions waiting for its answers already") {
            refused += 1;
        } else {
            assert!(body.contains("the client did not answer"), "{body}");
            waited += 1;
        }
    }
    assert_eq!((refused, waited), (4, 4), "four of eight questions refused, four asked");
}
