//! Bad input to the MCP server, byte for byte, over stdio and HTTP: a line or body that is not
//! JSON, JSON that is not JSON-RPC, an unknown tool, arguments that break the schema, 10 MB of
//! arguments and a message over the size limit. Each gets an error a JSON-RPC client can read,
//! and the server answers `tools/list` afterwards. Also: the bearer token, when one is set, and
//! the refusal to listen beyond loopback without one.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use quarry_tests::mcp_client::{McpHttp, Served};
use quarry_tests::{ECHO_V1, HOSTILE, TestEnv, quarry_bin};
use serde_json::{Value, json};

const TEN_MB: usize = 10 << 20;
/// Over the 16 MiB a message may be, on either transport.
const SEVENTEEN_MB: usize = 17 << 20;

fn env() -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::new();
    env.plugin(ECHO_V1, "echo");
    let config = env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n");
    (env, config)
}

fn big_args() -> Value {
    json!({"text": "x".repeat(TEN_MB)})
}

/// `quarry serve --stdio`, with its stdout lines parsed as they come.
struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Stdio_ {
    fn start(config: &std::path::Path) -> Stdio_ {
        let mut child = Command::new(quarry_bin())
            .arg("--config")
            .arg(config)
            .args(["serve", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start quarry serve --stdio");
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Stdio_ { child, stdin, lines }
    }

    /// [`Stdio_::start`], then the handshake: `initialize` (its answer offers tools) and
    /// `notifications/initialized`.
    fn initialized(config: &std::path::Path) -> Stdio_ {
        let mut s = Stdio_::start(config);
        let init = s.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        );
        assert!(init["result"]["capabilities"]["tools"].is_object(), "{init}");
        s.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        s
    }

    fn send(&mut self, line: &[u8]) {
        self.stdin
            .write_all(line)
            .and_then(|()| self.stdin.write_all(b"\n"))
            .and_then(|()| self.stdin.flush())
            .unwrap();
    }

    /// The next message from the server.
    fn recv(&self) -> Value {
        let line = self.lines.recv_timeout(Duration::from_secs(120)).expect("an answer within 2 minutes");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON from the server ({e}): {line}"))
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().as_bytes());
        let answer = self.recv();
        assert_eq!(answer["id"], json!(id), "answer to another request: {answer}");
        answer
    }

    /// The server still serves: tools/list answers with the echo tool.
    fn still_serving(&mut self, id: u64) {
        let list = self.request(id, "tools/list", json!({}));
        assert_eq!(list["result"]["tools"][0]["name"], "echo.echo", "{list}");
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or_else(|| panic!("not a JSON-RPC error: {v}"))
}

/// A tool error: a result with `isError`, its text saying `needle`.
fn assert_tool_error(v: &Value, needle: &str) {
    assert_eq!(
        v["result"]["isError"],
        json!(true),
        "not a tool error: {}",
        &v.to_string()[..v.to_string().len().min(500)]
    );
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains(needle), "the error says {text:?}, not {needle:?}");
}

#[test]
fn bad_input_over_stdio() {
    let (_env, config) = env();
    let mut s = Stdio_::initialized(&config);

    s.send(b"{this is not json");
    let e = s.recv();
    assert_eq!(error_code(&e), -32700, "{e}");
    assert_eq!(e["id"], Value::Null);
    s.still_serving(2);

    s.send(br#"{"jsonrpc":"2.0","id":3,"method":42}"#);
    assert_eq!(error_code(&s.recv()), -32600);
    s.still_serving(4);

    let e = s.request(5, "tools/call", json!({"name": "nosuch.tool", "arguments": {}}));
    assert_eq!(error_code(&e), -32602, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("Unknown tool"), "{e}");
    s.still_serving(6);

    let e = s.request(7, "tools/call", json!({"name": "echo.echo", "arguments": {"text": 5}}));
    assert_tool_error(&e, "`text` (a string) is required");
    s.still_serving(8);

    let e = s.request(9, "tools/call", json!({"name": "echo.echo", "arguments": big_args()}));
    assert_tool_error(&e, "over the limit of 1048576 bytes");
    s.still_serving(10);

    let mut huge =
        br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo.echo","arguments":{"text":""#
            .to_vec();
    huge.extend(std::iter::repeat_n(b'x', SEVENTEEN_MB));
    huge.extend(br#""}}}"#);
    s.send(&huge);
    let e = s.recv();
    assert_eq!(error_code(&e), -32600, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("over 16777216 bytes"), "{e}");
    s.still_serving(12);
}

/// Lines rmcp itself cannot read are answered over stdio as over HTTP, and a dense line whose
/// tree would not fit `[serve] max_request_bytes` is refused before a tree of it is built.
#[test]
fn stdio_answers_every_line_it_cannot_pass_on() {
    let (_env, config) = env();
    let mut s = Stdio_::initialized(&config);
    let call = |id: u64, arguments: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo.echo","arguments":{arguments}}}}}"#)
            .into_bytes()
    };
    let deep = format!(r#"{{"text":{}{}}}"#, "[".repeat(300), "]".repeat(300));
    let mut invalid_utf8 = call(21, r#"{"text":"x"}"#);
    let at = invalid_utf8.iter().position(|b| *b == b'x').unwrap();
    invalid_utf8[at] = 0xff;
    let lines: [(&str, Vec<u8>); 4] = [
        ("nesting past the parser's limit", call(20, &deep)),
        ("invalid UTF-8", invalid_utf8),
        ("a lone surrogate", call(22, r#"{"text":"\ud800"}"#)),
        ("1e400 as id", br#"{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}"#.to_vec()),
    ];
    for (i, (what, line)) in lines.iter().enumerate() {
        s.send(line);
        let e = s.recv();
        assert!([-32700, -32600].contains(&error_code(&e)), "{what}: {e}");
        s.still_serving(30 + i as u64);
    }
    // What refused arguments become travels beside the message, never in it: arguments shaped
    // like the in-band stand-in of earlier versions are the client's own, and the tool sees them.
    let forged = json!({"\u{0}quarry:arguments-refused": {"bytes": 5_000_000, "head": "{}"}});
    let e = s.request(23, "tools/call", json!({"name": "echo.echo", "arguments": forged}));
    assert_tool_error(&e, "`text` (a string) is required");
    // 15 MiB of `0,`: 7.8 million values, 2 GB as a tree.
    let mut dense = br#"{"jsonrpc":"2.0","id":40,"method":"tools/list","params":{"pad":["#.to_vec();
    dense.extend(std::iter::repeat_n(b"0,".as_slice(), 15 << 19).flatten());
    dense.extend(br#"0]}}"#);
    s.send(&dense);
    let e = s.recv();
    assert_eq!(error_code(&e), -32600, "{e}");
    assert_eq!(e["id"], json!(40), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("max_request_bytes"), "{e}");
    s.still_serving(41);
    // Refused before any tree was built: the server never held anything near the tree's size.
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kb < 512 << 10, "the server's peak RSS was {} MiB", peak_kb >> 10);
}

/// The server still serves: tools/list answers with the echo tool.
async fn still_serving(c: &mut McpHttp) {
    let list = c.request("tools/list", json!({})).await.unwrap();
    assert_eq!(list["result"]["tools"][0]["name"], "echo.echo", "{list}");
}

/// Bodies that pass the server's own look (they are JSON, and fit) but that rmcp cannot parse
/// are answered with a JSON-RPC error, not rmcp's bare 415; the one tree built of a good body is
/// rmcp's.
#[tokio::test]
async fn http_answers_every_body_rmcp_cannot_read() {
    let (_env, config) = env();
    let served = Served::start(&quarry_bin(), &config);
    let mut c = McpHttp::open(&served.url).await.unwrap();
    let call = |id: u64, arguments: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo.echo","arguments":{arguments}}}}}"#)
            .into_bytes()
    };
    let mut invalid_utf8 = call(21, r#"{"text":"x"}"#);
    let at = invalid_utf8.iter().position(|b| *b == b'x').unwrap();
    invalid_utf8[at] = 0xff;
    let deep = format!(r#"{{"text":{}{}}}"#, "[".repeat(300), "]".repeat(300));
    for (what, body) in [
        ("nesting past the parser's limit", call(20, &deep)),
        ("invalid UTF-8", invalid_utf8),
        ("a lone surrogate", call(22, r#"{"text":"\ud800"}"#)),
        ("1e400 as id", br#"{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}"#.to_vec()),
    ] {
        let r = c.post(body).await.unwrap();
        assert_eq!(r.status, 400, "{what}: {r:?}");
        assert!([-32700, -32600].contains(&error_code(&r.messages[0])), "{what}: {r:?}");
        still_serving(&mut c).await;
    }
}

#[tokio::test]
async fn bad_input_over_http() {
    let (_env, config) = env();
    let served = Served::start(&quarry_bin(), &config);
    let mut c = McpHttp::open(&served.url).await.unwrap();

    let r = c.post(b"{this is not json".to_vec()).await.unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(error_code(&r.messages[0]), -32700, "{r:?}");
    still_serving(&mut c).await;

    let r = c.post(br#"{"jsonrpc":"2.0","id":77,"method":42}"#.to_vec()).await.unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(error_code(&r.messages[0]), -32600, "{r:?}");
    assert_eq!(r.messages[0]["id"], json!(77), "the id is echoed when it can be read: {r:?}");
    still_serving(&mut c).await;

    let e = c.call("nosuch.tool", json!({})).await.unwrap();
    assert_eq!(error_code(&e), -32602, "{e}");
    still_serving(&mut c).await;

    let e = c.call("echo.echo", json!({"text": 5})).await.unwrap();
    assert_tool_error(&e, "`text` (a string) is required");
    still_serving(&mut c).await;

    let e = c.call("echo.echo", big_args()).await.unwrap();
    assert_tool_error(&e, "over the limit of 1048576 bytes");
    still_serving(&mut c).await;

    let huge = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "echo.echo", "arguments": {"text": "x".repeat(SEVENTEEN_MB)}}});
    // The server answers from the length alone and closes without reading the body; a client
    // still writing it may see the connection cut before it reads the answer (more likely on a
    // loaded machine). Either way the body was refused unread.
    match c.post(huge.to_string().into_bytes()).await {
        Ok(r) => {
            assert_eq!(r.status, 413, "{}", &r.body[..r.body.len().min(300)]);
            assert_eq!(error_code(&r.messages[0]), -32600, "{r:?}");
        }
        Err(e) => assert!(format!("{e:#}").contains("error writing a body to connection"), "{e:#}"),
    }
    // A refused body may leave the connection unusable; a new one must be served.
    let mut c = McpHttp::open(&served.url).await.unwrap();
    still_serving(&mut c).await;
}

#[tokio::test]
async fn bearer_token_when_set_and_required_beyond_loopback() {
    let (_env, config) = env();
    let served = Served::start_with_env(&quarry_bin(), &config, &[("QUARRY_MCP_TOKEN", "s3cret")]);
    let mut c = McpHttp::connect(&served.url).await.unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let r = c.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 401, "no token: {r:?}");
    c.token = Some("wrong".into());
    let r = c.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 401, "wrong token: {r:?}");
    c.token = Some("s3cret".into());
    let r = c.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 200, "right token: {r:?}");
    assert!(r.answer(1).is_some_and(|a| a["result"].is_object()), "{r:?}");
    // The scheme's name is case-insensitive (RFC 9110 §11.1).
    c.token = None;
    c.headers = vec![("authorization".into(), "bearer s3cret".into())];
    let r = c.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 200, "lower-case scheme: {r:?}");
    c.headers = vec![("authorization".into(), "bearer wrong".into())];
    let r = c.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 401, "lower-case scheme, wrong token: {r:?}");

    // Beyond loopback, no token is a refusal to start, saying what to do.
    let out = std::process::Command::new(quarry_bin())
        .arg("--config")
        .arg(&config)
        .args(["serve", "--http", "0.0.0.0:0"])
        .env_remove("QUARRY_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a bearer token: set QUARRY_MCP_TOKEN"), "{err}");
}

/// A server for the limit tests: the hostile component as `h` (a `sleep` tool to keep calls
/// busy, which marks its start in `/marks`), and `[serve]` limits small enough to reach.
fn limited(serve: &str) -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    std::fs::create_dir_all(env.path("marks")).unwrap();
    let config = env.config(&format!(
        "[serve]\n{serve}\n\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\n[tools.h.grants]\ndeadline = \"30s\"\ndirs = [{{ host = \"marks\", guest = \"/marks\", mode = \"rw\" }}]\n"
    ));
    (env, config)
}

/// Waits until the `sleep` call that was given `mark` runs.
async fn runs(env: &TestEnv, mark: &str) {
    let path = env.path(&format!("marks/{mark}"));
    quarry_tests::until(&format!("the call marked {mark} runs"), || path.exists()).await;
}

/// The hostile server still serves: a call answers.
async fn hostile_serves(c: &mut McpHttp) {
    let r = c.call("h.echo", json!({"text": "still here"})).await.unwrap();
    assert_eq!(text_of(&r), "still here", "{r}");
}

fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_past_the_cap_are_refused_and_the_others_serve() {
    let (_env, config) = limited("max_sessions = 3");
    let served = Served::start(&quarry_bin(), &config);
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(McpHttp::open(&served.url).await.unwrap());
    }
    let mut fourth = McpHttp::connect(&served.url).await.unwrap();
    let r = fourth
        .request_with_id(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(error_code(&r.messages[0]), -32000);
    assert!(r.body.contains("maximum of 3 sessions") && r.body.contains("max_sessions"), "{}", r.body);
    // The method spelled with a JSON escape is the same `initialize` to rmcp, and to the cap.
    let escaped = br#"{"jsonrpc":"2.0","id":2,"method":"initializ\u0065","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    for _ in 0..5 {
        let mut c = McpHttp::connect(&served.url).await.unwrap();
        let r = c.post(escaped.to_vec()).await.unwrap();
        assert_eq!(r.status, 503, "an escaped initialize opened a session past the cap: {r:?}");
        assert_eq!(r.messages[0]["id"], json!(2), "{r:?}");
    }
    for c in &mut open {
        hostile_serves(c).await;
    }
}

/// Calls queued by a client that then closes its connection are dropped, not run; the server's
/// budget for requests held (`max_request_bytes`) refuses what does not fit with 503 or `busy`,
/// and every other client goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_client_that_left_are_dropped_and_requests_fit_a_budget() {
    let (env, config) = limited("max_request_bytes = \"4MiB\"");
    let served = Served::start(&quarry_bin(), &config);
    let mut main = McpHttp::open(&served.url).await.unwrap();
    let session = main.session().unwrap().to_string();
    // One slow call holds the instance; twenty more wait behind it, each on its own
    // connection, whose client then goes away.
    let url = served.url.clone();
    let first = {
        let (url, session) = (url.clone(), session.clone());
        tokio::spawn(async move {
            let mut c = McpHttp::join(&url, &session).await.unwrap();
            let args = json!({"ms": 1500, "mark": "/marks/900"});
            c.request_with_id(900, "tools/call", json!({"name": "h.sleep", "arguments": args})).await.unwrap()
        })
    };
    runs(&env, "900").await;
    let mut waiting = Vec::new();
    for id in 0..20u64 {
        let (url, session) = (url.clone(), session.clone());
        waiting.push(tokio::spawn(async move {
            let mut c = McpHttp::join(&url, &session).await.unwrap();
            let _ =
                c.request_with_id(910 + id, "tools/call", json!({"name": "h.sleep", "arguments": {"ms": 10}})).await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for w in &waiting {
        w.abort();
    }
    assert_eq!(text_of(first.await.unwrap().answer(900).unwrap()), "slept");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ran = main.call("h.ran", json!({})).await.unwrap();
    assert_eq!(text_of(&ran), "1", "calls whose client left still ran: {ran}");

    // Queued calls hold their arguments as text, charged to the budget: behind a slow call,
    // six calls of 900 KB fit four (3.6 MB of 4 MiB); the others are refused, as they arrive
    // (503) or as they queue (a `busy` tool error).
    let slow = {
        let (url, session) = (url.clone(), session.clone());
        tokio::spawn(async move {
            let mut c = McpHttp::join(&url, &session).await.unwrap();
            let args = json!({"ms": 1500, "mark": "/marks/950"});
            c.request_with_id(950, "tools/call", json!({"name": "h.sleep", "arguments": args})).await.unwrap()
        })
    };
    runs(&env, "950").await;
    let mut queued = Vec::new();
    for id in 0..6u64 {
        let (url, session) = (url.clone(), session.clone());
        queued.push(tokio::spawn(async move {
            let mut c = McpHttp::join(&url, &session).await.unwrap();
            let args = json!({"text": "y".repeat(900 << 10)});
            let r = c.request_with_id(960 + id, "tools/call", json!({"name": "h.echo", "arguments": args})).await;
            // A 503 sent from the declared length may close the connection while the client
            // is still writing: that is the refusal too.
            match r {
                Ok(r) => (r.status, r.answer(960 + id).cloned().unwrap_or_default()),
                Err(e) => {
                    assert!(format!("{e:#}").contains("error writing a body to connection"), "{e:#}");
                    (503, Value::Null)
                }
            }
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    slow.await.unwrap();
    let mut kinds = std::collections::BTreeMap::new();
    for q in queued {
        let (status, a) = q.await.unwrap();
        let kind = match status {
            503 => "refused",
            _ if a["result"]["isError"] == true => {
                assert_eq!(a["result"]["structuredContent"]["error"]["kind"], "busy", "{a}");
                assert!(text_of(&a).contains("max_request_bytes"), "{a}");
                "refused"
            }
            _ => "ok",
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    assert_eq!((kinds.get("ok"), kinds.get("refused")), (Some(&4), Some(&2)), "{kinds:?}");

    // A body larger than the whole budget is refused as it arrives, and dense arguments whose
    // tree would not fit the whole budget before they are parsed: 413 with a JSON-RPC error
    // that says to send less (retrying could never help; 503 is for what fits later).
    let big = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "h.echo", "arguments": {"text": "x".repeat(5 << 20)}}});
    // The server answers from the declared length; the client may still be writing the body.
    let mut other = McpHttp::join(&url, &session).await.unwrap();
    match other.post(big.to_string().into_bytes()).await {
        Ok(r) => {
            assert_eq!(r.status, 413, "{}", &r.body[..r.body.len().min(300)]);
            assert!(
                r.body.contains("max_request_bytes") && r.body.contains("send less"),
                "{}",
                &r.body[..r.body.len().min(300)]
            );
        }
        Err(e) => assert!(format!("{e:#}").contains("error writing a body to connection"), "{e:#}"),
    }
    let dense = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"h.echo","arguments":{{"text":"x","pad":[{}0]}}}}}}"#,
        "0,".repeat(400_000)
    );
    assert!(dense.len() < 1 << 20, "under the arguments limit: only the tree is too large");
    let mut other = McpHttp::join(&url, &session).await.unwrap();
    let r = other.post(dense.into_bytes()).await.unwrap();
    assert_eq!(r.status, 413, "{}", &r.body[..r.body.len().min(300)]);
    assert!(r.body.contains("256 bytes a JSON value once parsed"), "{}", &r.body[..r.body.len().min(400)]);
    assert_eq!(r.messages[0]["id"], json!(6), "{r:?}");
    hostile_serves(&mut main).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_get_503_and_a_body_that_never_comes_times_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_env, config) = limited("max_connections = 4\nbody_timeout = \"1s\"");
    let served = Served::start(&quarry_bin(), &config);
    let addr = served.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    // A body announced and never sent: dropped with 408 once the body timeout passes.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{{"
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("did not arrive within 1s"), "{reply}");
    drop(slow);
    // Four clients that have sent a request hold every slot; the fifth connection is answered
    // 503 and closed.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(McpHttp::open(&served.url).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fifth = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), fifth.read_to_end(&mut reply)).await;
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 503"), "{}", String::from_utf8_lossy(&reply));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Connections that never send a request (a client without a token, trickling its
    // headers) do not hold the slots: when they fill them, the oldest is closed to make room,
    // and a real client is served at once.
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\n").await.unwrap();
        idle.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut served_anyway = McpHttp::open(&served.url).await.expect("a client is served past idle connections");
    hostile_serves(&mut served_anyway).await;
    let mut shed = 0;
    for s in &mut idle {
        let mut buf = [0u8; 64];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            shed += 1;
        }
    }
    assert_eq!(shed, 1, "the oldest idle connection made room");
    // And one that sends no whole request within 5 s is closed.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(8), idle[3].read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "an idle connection was kept past the 5 s it has to send a request");
    drop(served_anyway);
    // Once they go, the server takes clients again.
    drop(idle);
    let mut c = None;
    for _ in 0..50 {
        if let Ok(client) = McpHttp::open(&served.url).await {
            c = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    hostile_serves(c.as_mut().expect("a client is served once the idle connections closed")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_may_queue_so_many_calls_and_a_cancel_takes_one_out() {
    let (env, config) = limited("max_queued_calls = 2");
    let served = Served::start(&quarry_bin(), &config);
    let mut main = McpHttp::open(&served.url).await.unwrap();
    let session = main.session().unwrap().to_string();
    let url = served.url.clone();
    // Two slow calls from this session: one runs, one waits behind it (one instance runs one
    // call at a time).
    let slow = |ms: u64, id: u64| {
        let (url, session) = (url.clone(), session.clone());
        tokio::spawn(async move {
            let mut c = McpHttp::join(&url, &session).await.unwrap();
            let args = json!({"ms": ms, "mark": format!("/marks/{id}")});
            c.request_with_id(id, "tools/call", json!({"name": "h.sleep", "arguments": args})).await.unwrap()
        })
    };
    let first = slow(2000, 501);
    runs(&env, "501").await;
    let second = slow(10, 502);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A third is one too many for the session.
    let busy = main.call("h.echo", json!({"text": "x"})).await.unwrap();
    assert_eq!(busy["result"]["isError"], true, "{busy}");
    assert_eq!(busy["result"]["structuredContent"]["error"]["kind"], "busy", "{busy}");
    assert!(text_of(&busy).contains("max_queued_calls"), "{busy}");
    // The client cancels the waiting call: it never runs.
    let r = main
        .post(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 502, "reason": "no longer needed"}}).to_string().into_bytes())
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{r:?}");
    let first = first.await.unwrap();
    assert_eq!(text_of(first.answer(501).unwrap()), "slept");
    let second = second.await.unwrap();
    if let Some(a) = second.answer(502) {
        assert_eq!(a["result"]["structuredContent"]["error"]["kind"], "cancelled", "{a}");
    }
    let ran = main.call("h.ran", json!({})).await.unwrap();
    assert_eq!(text_of(&ran), "1", "only the first sleep ran: {ran}");
    hostile_serves(&mut main).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_are_checked_and_plain_http_beyond_loopback_needs_a_flag() {
    let (_env, config) = limited("allowed_origins = [\"http://localhost:6274\"]");
    let served = Served::start(&quarry_bin(), &config);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let mut evil = McpHttp::connect(&served.url).await.unwrap();
    evil.headers.push(("origin".into(), "http://evil.example".into()));
    let r = evil.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("allowed_origins"), "{}", r.body);
    let mut inspector = McpHttp::connect(&served.url).await.unwrap();
    inspector.headers.push(("origin".into(), "http://localhost:6274".into()));
    let r = inspector.post(init.to_string().into_bytes()).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // The server's own origin is no cross-site request (the MCP conformance suite's valid
    // dns-rebinding case); the same host on another port is.
    let own = served.url.trim_end_matches("/mcp").to_string();
    let port: u16 = own.rsplit(':').next().unwrap().parse().unwrap();
    for (origin, status) in [
        (own.clone(), 200),
        (format!("http://localhost:{port}"), 200),
        (format!("http://127.0.0.1:{}", port.wrapping_add(1)), 403),
    ] {
        let mut c = McpHttp::connect(&served.url).await.unwrap();
        c.headers.push(("origin".into(), origin.clone()));
        let r = c.post(init.to_string().into_bytes()).await.unwrap();
        assert_eq!(r.status, status, "{origin}: {r:?}");
    }
    // No Origin header (not a browser): served as before.
    let mut c = McpHttp::open(&served.url).await.unwrap();
    hostile_serves(&mut c).await;

    // A token beyond loopback over plain HTTP is refused without --insecure-http.
    let out = std::process::Command::new(quarry_bin())
        .arg("--config")
        .arg(&config)
        .args(["serve", "--http", "0.0.0.0:0"])
        .env("QUARRY_MCP_TOKEN", "s3cret")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("over plain HTTP") && err.contains("--insecure-http") && err.contains("TLS"), "{err}");
}

/// `--call-log`: one JSON line per tool call, good or bad, with the client's session and name;
/// a hostile client's 10 MB of arguments is cut, not copied into the log.
#[tokio::test]
async fn the_call_log_has_a_bounded_line_per_call() {
    let (env, config) = env();
    let log = env.path("calls.jsonl");
    let served =
        Served::start_with(&quarry_bin(), &config, &[std::ffi::OsStr::new("--call-log"), log.as_os_str()], &[]);
    let mut first = McpHttp::open(&served.url).await.unwrap();
    let mut second = McpHttp::open(&served.url).await.unwrap();
    first.call("echo.echo", json!({"text": "hello"})).await.unwrap();
    first.call("echo.echo", json!({"text": 5})).await.unwrap();
    second.call("nosuch.tool", json!({"a": 1})).await.unwrap();
    second.call("echo.echo", big_args()).await.unwrap();

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4, "{text}");
    let summary: Vec<(&str, &str)> =
        lines.iter().map(|l| (l["tool"].as_str().unwrap(), l["outcome"].as_str().unwrap())).collect();
    assert_eq!(
        summary,
        [("echo.echo", "ok"), ("echo.echo", "error"), ("nosuch.tool", "rejected"), ("echo.echo", "error")]
    );
    assert_eq!(lines[0]["arguments"], json!({"text": "hello"}));
    assert_eq!(lines[0]["client"], "quarry-tests 0");
    assert!(lines[0]["duration_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(lines[1]["error_kind"], "invalid-args");
    assert!(lines[1]["error"].as_str().unwrap().contains("`text` (a string) is required"), "{}", lines[1]);
    assert!(lines[2]["error"].as_str().unwrap().contains("Unknown tool"), "{}", lines[2]);
    assert_eq!(lines[0]["session"], lines[1]["session"]);
    assert_ne!(lines[0]["session"], lines[2]["session"]);
    assert_eq!(lines[3]["arguments_cut"], true);
    assert!(text.len() < 64 * 1024, "the log holds {} bytes for 10 MB of arguments", text.len());
}
