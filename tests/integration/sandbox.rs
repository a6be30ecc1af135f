//! Each hostile attempt is contained with a clear error, and the host then
//! serves the next call correctly.

use std::time::{Duration, Instant};

use quarry::bindings::ToolError;
use quarry_tests::{CallError, Fault, HOSTILE, TestEnv, within};

/// A hostile instance with a read-only `/data`, a writable `/scratch`, tight limits and no HTTP grant.
async fn hostile(env: &TestEnv, extra_grants: &str) -> std::sync::Arc<quarry::Registry> {
    std::fs::write(env.path("secret.txt"), "outside the grant").unwrap();
    env.host(&quarry_tests::hostile_config(env, "1s", extra_grants)).await
}

async fn call(host: &quarry::Registry, tool: &str, args: &str) -> Result<String, CallError> {
    within(30, host.call(tool, args)).await.map(|o| o.text)
}

/// The control call every containment test ends with.
async fn still_serves(host: &quarry::Registry) {
    assert_eq!(call(host, "h.echo", r#"{"text":"after"}"#).await.unwrap(), "after");
    assert_eq!(call(host, "h.read_file", r#"{"path":"/data/ok.txt"}"#).await.unwrap(), "granted content");
}

fn tool_error(r: Result<String, CallError>) -> ToolError {
    match r {
        Err(CallError::Tool { error, .. }) => error,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

fn fault(r: Result<String, CallError>) -> Fault {
    match r {
        Err(CallError::Fault { fault, .. }) => fault,
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[tokio::test]
async fn read_outside_preopen_is_denied() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let secret = env.path("secret.txt");
    for path in [secret.to_str().unwrap(), "/etc/passwd", "/data/../secret.txt", "secret.txt"] {
        let err = tool_error(call(&host, "h.read_file", &serde_json::json!({ "path": path }).to_string()).await);
        let (_, msg) = err.parts();
        assert!(!msg.contains("outside the grant"), "{path}: leaked {msg}");
        assert!(msg.contains("read failed"), "{path}: {msg}");
    }
    still_serves(&host).await;
}

#[tokio::test]
async fn write_into_read_only_preopen_is_denied() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let err = tool_error(call(&host, "h.write_file", r#"{"path":"/data/new.txt","content":"x"}"#).await);
    assert!(err.parts().1.contains("write failed"), "{err:?}");
    assert!(!env.path("data/new.txt").exists(), "a read-only grant was written to");
    let err = tool_error(call(&host, "h.write_file", r#"{"path":"/data/ok.txt","content":"x"}"#).await);
    assert!(err.parts().1.contains("write failed"), "{err:?}");
    assert_eq!(std::fs::read_to_string(env.path("data/ok.txt")).unwrap(), "granted content");
    // The writable grant does work, so the refusal above is the grant, not a broken guest.
    call(&host, "h.write_file", r#"{"path":"/scratch/new.txt","content":"x"}"#).await.unwrap();
    assert_eq!(std::fs::read_to_string(env.path("scratch/new.txt")).unwrap(), "x");
    still_serves(&host).await;
}

#[tokio::test]
async fn no_environment_reaches_the_guest() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    assert!(std::env::vars().count() > 0);
    assert_eq!(call(&host, "h.env", "{}").await.unwrap(), "[]");
}

#[tokio::test]
async fn http_to_forbidden_addresses_is_refused_before_connecting() {
    let env = TestEnv::new();
    // Even allowlisted, these addresses need a private_networks grant.
    let host = hostile(&env, r#"http = ["http://169.254.169.254", "http://127.0.0.1:9", "http://10.0.0.1"]"#).await;
    for (url, kind, net) in [
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata", "169.254.169.254/32"),
        ("http://127.0.0.1:9/", "loopback", "127.0.0.1/32"),
        ("http://10.0.0.1/", "private", "10.0.0.1/32"),
    ] {
        let started = Instant::now();
        let err = tool_error(call(&host, "h.http_get", &serde_json::json!({ "url": url }).to_string()).await);
        let (k, msg) = err.parts();
        assert_eq!(k, "denied", "{msg}");
        assert!(msg.contains(kind) && msg.contains(net) && msg.contains("grants.private_networks"), "{url}: {msg}");
        assert!(started.elapsed() < Duration::from_secs(2), "{url} took {:?}: it tried to connect", started.elapsed());
    }
    still_serves(&host).await;
}

#[tokio::test]
async fn http_without_allowlist_entry_names_the_entry_to_add() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let err = tool_error(call(&host, "h.http_get", r#"{"url":"http://10.0.0.1/x"}"#).await);
    let msg = err.parts().1;
    assert!(
        msg.contains("not in the allowlist") && msg.contains(r#"add "http://10.0.0.1" to its grants.http"#),
        "{msg}"
    );
    still_serves(&host).await;
}

/// A one-shot HTTP server on loopback that answers every request with `body`.
async fn tiny_server(body: &'static str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let resp = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    port
}

#[tokio::test]
async fn name_resolving_to_loopback_is_refused_unless_granted() {
    let port = tiny_server("from loopback").await;
    let env = TestEnv::new();
    let host = hostile(&env, &format!(r#"http = ["http://localhost:{port}"]"#)).await;
    let err = tool_error(call(&host, "h.http_get", &format!(r#"{{"url":"http://localhost:{port}/"}}"#)).await);
    let msg = err.parts().1;
    assert!(msg.contains("localhost resolves to it") && msg.contains("loopback"), "{msg}");
    still_serves(&host).await;

    // With the network granted, the same request goes through: the policy, not the guest, refused it.
    let env = TestEnv::new();
    let host = hostile(
        &env,
        &format!("http = [\"http://localhost:{port}\"]\nprivate_networks = [\"127.0.0.0/8\", \"::1/128\"]"),
    )
    .await;
    let body = call(&host, "h.http_get", &format!(r#"{{"url":"http://localhost:{port}/"}}"#)).await.unwrap();
    assert_eq!(body, "status 200: from loopback");
}

#[tokio::test]
async fn endless_loop_misses_its_deadline() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let started = Instant::now();
    let f = fault(call(&host, "h.spin", "{}").await);
    assert!(matches!(f, Fault::Deadline(d) if d == Duration::from_secs(1)), "{f:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "deadline fired after {:?}", started.elapsed());
    still_serves(&host).await;
}

#[tokio::test]
async fn memory_bomb_is_out_of_memory() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let f = fault(call(&host, "h.alloc", r#"{"mb": 4096}"#).await);
    assert!(matches!(f, Fault::OutOfMemory { limit, .. } if limit == 64 << 20), "{f:?}");
    // Within the grant, allocation works.
    assert_eq!(call(&host, "h.alloc", r#"{"mb": 16}"#).await.unwrap(), "allocated 16 MiB");
    still_serves(&host).await;
}

#[tokio::test]
async fn unbounded_recursion_is_a_stack_overflow() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    let f = fault(call(&host, "h.recurse", "{}").await);
    assert!(matches!(f, Fault::StackOverflow), "{f:?}");
    still_serves(&host).await;
    // Recursion through the linear-memory stack runs off the bottom of memory.
    match fault(call(&host, "h.recurse_shadow", "{}").await) {
        Fault::Trap { message, .. } => assert!(message.contains("stack overflow"), "{message}"),
        f => panic!("expected a trap, got {f:?}"),
    }
    still_serves(&host).await;
}

#[tokio::test]
async fn hundred_megabyte_output_is_refused() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    // 100 MB does not fit the 64 MiB grant: contained as out of memory.
    let f = fault(call(&host, "h.big_output", r#"{"mb": 100}"#).await);
    assert!(matches!(f, Fault::OutOfMemory { .. }), "{f:?}");
    still_serves(&host).await;

    // With memory for it, the host refuses the output itself.
    let env = TestEnv::new();
    let host = env
        .host(&format!(
            "[tools.h]\ncomponent = {:?}\n[tools.h.grants]\nmemory = \"512MiB\"\nmax_output = \"16MiB\"\n",
            env.plugin(HOSTILE, "big")
        ))
        .await;
    match call(&host, "h.big_output", r#"{"mb": 100}"#).await {
        Err(CallError::OutputTooLarge { size, limit, .. }) => {
            assert_eq!(size, 100 << 20);
            assert_eq!(limit, 16 << 20);
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
    assert_eq!(call(&host, "h.echo", r#"{"text":"after"}"#).await.unwrap(), "after");
}

#[tokio::test]
async fn panic_is_a_trap_with_its_message() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    match fault(call(&host, "h.panic", "{}").await) {
        Fault::Trap { stderr, .. } => {
            let s = stderr.unwrap_or_default();
            assert!(s.contains("panicked on purpose"), "{s}");
        }
        f => panic!("expected a trap, got {f:?}"),
    }
    still_serves(&host).await;
}

#[tokio::test]
async fn faults_in_a_row_each_get_a_fresh_instance() {
    let env = TestEnv::new();
    let host = hostile(&env, "").await;
    for _ in 0..3 {
        fault(call(&host, "h.panic", "{}").await);
        fault(call(&host, "h.recurse", "{}").await);
    }
    still_serves(&host).await;
}
