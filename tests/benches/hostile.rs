//! What the host holds under each flood a hostile component or client can send: resident
//! memory, open file descriptors and threads of this process before and after, side by side.
//! The tests (tests/integration/hardening.rs) assert the caps; this prints what they cost.
//!
//! Run with `make bench-hostile` (or `cargo bench -p quarry-tests --bench hostile`).

use std::time::{Duration, Instant};

use quarry_tests::{EMBED_PROBE, HOSTILE, TOY_EMBEDDER, TestEnv};
use serde_json::json;

/// Resident memory (MiB), open file descriptors and threads of this process.
fn sample() -> (f64, usize, usize) {
    sample_of("self")
}

/// The same of process `pid` (`self` for this one).
fn sample_of(pid: &str) -> (f64, usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let count = |d: String| std::fs::read_dir(d).map(|r| r.count()).unwrap_or(0);
    (rss_kib / 1024.0, count(format!("/proc/{pid}/fd")), count(format!("/proc/{pid}/task")))
}

fn report(name: &str, before: (f64, usize, usize), outcome: &str, took: Duration) {
    report_of("self", name, before, outcome, took)
}

fn report_of(pid: &str, name: &str, before: (f64, usize, usize), outcome: &str, took: Duration) {
    let after = sample_of(pid);
    println!(
        "{name:<46} {:>7.0} {:>7.0} {:>5} {:>5} {:>5} {:>5} {:>8.2}  {outcome}",
        before.0,
        after.0,
        before.1,
        after.1,
        before.2,
        after.2,
        took.as_secs_f64()
    );
}

/// A server in a process of its own (so its sockets and threads are not counted here) that
/// accepts connections and never answers; killed when dropped.
struct Silent {
    child: std::process::Child,
    port: u16,
}

impl Drop for Silent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn silent_listener() -> Silent {
    let script = r#"
import socket, selectors
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1024)
print(s.getsockname()[1], flush=True)
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj is s:
            c, _ = s.accept(); sel.register(c, selectors.EVENT_READ)
        elif not key.fileobj.recv(65536):
            sel.unregister(key.fileobj); key.fileobj.close()
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 for the silent server");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    Silent { port: line.trim().parse().expect("the silent server's port"), child }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let silent = silent_listener();
    let port = silent.port;
    let env = TestEnv::new();
    for d in ["data", "scratch"] {
        std::fs::create_dir_all(env.path(d)).unwrap();
    }
    std::fs::write(env.path("data/ok.txt"), "ok").unwrap();
    std::process::Command::new("mkfifo").arg(env.path("data/fifo")).status().unwrap();
    env.plugin(HOSTILE, "hostile");
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(EMBED_PROBE, "probe");
    // A model for the wasi-nn rows, when `make models` has fetched one.
    let models = std::env::var_os("HOME")
        .map(|h| std::path::PathBuf::from(h).join(".cache/quarry/models/all-minilm-l6-v2"))
        .filter(|d| d.join("quarry-model.json").is_file());
    let model_section = models.as_ref().map(|d| format!("[models.m]\ndir = {:?}\n", d.display())).unwrap_or_default();
    let model_grant = if models.is_some() { r#"models = ["m"]"# } else { "" };
    let host = env
        .host(&format!(
            r#"
{model_section}
[embedders.alias]
component = "plugins/toy.wasm"
config = {{ dimension = 8, alias_floats = 1048576 }}
pool = 1
[embedders.alias.grants]
memory = "16MiB"

[tools.alias_probe]
component = "plugins/probe.wasm"
embedder = "alias"

[tools.n]
component = "plugins/hostile.wasm"
[tools.n.grants]
memory = "48MiB"
deadline = "60s"
{model_grant}

[tools.h]
component = "plugins/hostile.wasm"
[tools.h.grants]
dirs = [{{ host = "data", guest = "/data" }}, {{ host = "scratch", guest = "/scratch", mode = "rw", quota = {{ bytes = "16MiB" }} }}]
memory = "256MiB"
deadline = "10s"
http = ["http://127.0.0.1:{port}"]
private_networks = ["127.0.0.1/32"]
"#
        ))
        .await;
    let call = |tool: &'static str, args: serde_json::Value| {
        let host = host.clone();
        async move {
            match host.call(tool, &args.to_string()).await {
                Ok(o) => format!("ok: {}", quarry::support::text::cut(&o.text, 60)),
                Err(e) => quarry::support::text::cut(&e.to_string(), 90),
            }
        }
    };
    call("h.echo", json!({"text": "warm"})).await;
    println!(
        "{:<46} {:>7} {:>7} {:>5} {:>5} {:>5} {:>5} {:>8}  outcome of the last call",
        "flood (each call repeated)", "RSS MiB", "after", "fds", "after", "thr", "after", "seconds"
    );

    let floods: Vec<(&str, &'static str, serde_json::Value, usize)> = vec![
        ("header sets, 60 KiB each, 200 a call x 15", "h.hoard_fields", json!({"n": 200}), 15),
        ("request bodies, 60 KiB each, 100 a call x 30", "h.hoard_bodies", json!({"n": 100}), 30),
        ("refused requests, 1 MiB hosts, 200 a call x 5", "h.deny_flood", json!({"n": 200, "len": 1 << 20}), 5),
        (
            "requests to a silent server, 200 a call x 5",
            "h.http_flood",
            json!({"url": format!("http://127.0.0.1:{port}/"), "n": 200, "wait_ms": 200}),
            5,
        ),
        ("opens of a FIFO x 50", "h.read_file", json!({"path": "/data/fifo"}), 50),
        ("writes of 64 MiB into a 16 MiB quota x 3", "h.fill", json!({"path": "/scratch/f", "mb": 64}), 3),
        ("300,000 empty hits x 3", "h.many_hits", json!({"n": 300_000}), 3),
        ("a 20 MiB error message x 3", "h.big_error", json!({"mb": 20}), 3),
        ("unsent requests, 1 MiB strings, 20 a call x 5", "h.hoard_requests", json!({"n": 20, "len": 1 << 20}), 5),
        ("aliased embedder answers, 32 x 4 MiB x 5", "alias_probe", json!({"texts": vec!["t"; 32]}), 5),
        ("a panic after 64 KiB of stderr x 20", "h.shout_and_panic", json!({"kib": 64}), 20),
    ];
    for (name, tool, args, times) in floods {
        let before = sample();
        let t = Instant::now();
        let mut outcome = String::new();
        for _ in 0..times {
            outcome = call(tool, args.clone()).await;
        }
        report(name, before, &outcome, t.elapsed());
    }

    if models.is_some() {
        // 48 MiB granted; 16 MiB tensors asked for past it (the cap used to be 256 MiB a store).
        // The model is loaded (once per host) before the figures are taken.
        let compute = json!({"op": "compute", "inputs": [
            {"name": "input_ids", "dims": [1, 3], "ty": "i64", "tokens": true},
            {"name": "attention_mask", "dims": [1, 3], "ty": "i64"},
            {"name": "token_type_ids", "dims": [1, 3], "ty": "i64"}]});
        call("n.nn", compute.clone()).await;
        let before = sample();
        let t = Instant::now();
        let mut outcome = String::new();
        for _ in 0..3 {
            call("n.nn", json!({"op": "hoard_tensors", "n": 18, "mb": 16})).await;
            outcome = call("n.nn", compute.clone()).await;
            call("n.nn", json!({"op": "drop_all"})).await;
        }
        report("wasi-nn tensors, 18 x 16 MiB (48 MiB grant) x 3", before, &outcome, t.elapsed());
    }

    let before = sample();
    let t = Instant::now();
    let name = "h".repeat(15 << 20);
    let mut outcome = String::new();
    for _ in 0..5 {
        outcome = host
            .call(&name, "{}")
            .await
            .err()
            .map(|e| quarry::support::text::cut(&e.to_string(), 90))
            .unwrap_or_default();
    }
    report("unknown 15 MiB tool names x 5", before, &outcome, t.elapsed());

    // MCP over HTTP, against `quarry serve` in its own process (its figures are its own):
    // sessions and idle connections past their caps.
    let served_env = TestEnv::new();
    served_env.plugin(HOSTILE, "hostile");
    let config = served_env.config(
        "[serve]\nmax_sessions = 32\nmax_connections = 64\n\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\n",
    );
    let served = quarry_tests::mcp_client::Served::start(&quarry_tests::quarry_bin(), &config);
    let pid = served.pid().to_string();
    let before = sample_of(&pid);
    let t = Instant::now();
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..200 {
        match quarry_tests::mcp_client::McpHttp::open(&served.url).await {
            Ok(c) => {
                opened += 1;
                drop(c);
            }
            Err(_) => refused += 1,
        }
    }
    report_of(
        &pid,
        "MCP sessions opened (cap 32) x 200",
        before,
        &format!("{opened} opened, {refused} refused"),
        t.elapsed(),
    );
    let addr = served.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let before = sample_of(&pid);
    let t = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = tokio::net::TcpStream::connect(&addr).await {
            idle.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    report_of(
        &pid,
        "idle connections opened (cap 64) x 300",
        before,
        &format!("{} connected", idle.len()),
        t.elapsed(),
    );
    drop(idle);
    drop(served);

    // The next floods need sessions: a server of their own, with the default limits.
    let config = served_env.config("[tools.h]\ncomponent = \"plugins/hostile.wasm\"\n");
    let served = quarry_tests::mcp_client::Served::start(&quarry_tests::quarry_bin(), &config);
    let pid = served.pid().to_string();

    // Bodies whose parsed trees would be many times their size: dense arrays of 800 KB, 16 at
    // once, each on its own connection (the server charges their trees before building them).
    let before = sample_of(&pid);
    let t = Instant::now();
    let dense = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"h.echo","arguments":{{"text":"x","pad":[{}0]}}}}}}"#,
        "0,".repeat(400_000)
    );
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (url, body) = (served.url.clone(), dense.clone().into_bytes());
        tasks.push(tokio::spawn(async move {
            let mut c = quarry_tests::mcp_client::McpHttp::open(&url).await.ok()?;
            c.post(body).await.ok().map(|r| r.status)
        }));
    }
    let mut statuses = std::collections::BTreeMap::new();
    for t in tasks {
        *statuses.entry(t.await.ok().flatten().unwrap_or(0)).or_insert(0) += 1;
    }
    report_of(&pid, "dense 800 KB bodies, 16 at once", before, &format!("HTTP statuses {statuses:?}"), t.elapsed());

    // Calls queued behind a slow one by clients that then disconnect.
    let before = sample_of(&pid);
    let t = Instant::now();
    let mut main = quarry_tests::mcp_client::McpHttp::open(&served.url).await.unwrap();
    let session = main.session().unwrap().to_string();
    let slow = {
        let (url, session) = (served.url.clone(), session.clone());
        tokio::spawn(async move {
            let mut c = quarry_tests::mcp_client::McpHttp::join(&url, &session).await.unwrap();
            c.request_with_id(1, "tools/call", json!({"name": "h.sleep", "arguments": {"ms": 1000}})).await.ok()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut gone = Vec::new();
    for i in 0..30u64 {
        let (url, session) = (served.url.clone(), session.clone());
        let text = "q".repeat(256 << 10);
        gone.push(tokio::spawn(async move {
            let mut c = quarry_tests::mcp_client::McpHttp::join(&url, &session).await.unwrap();
            let _ = c
                .request_with_id(10 + i, "tools/call", json!({"name": "h.sleep", "arguments": {"ms": 1, "pad": text}}))
                .await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    gone.iter().for_each(|g| g.abort());
    let _ = slow.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran = main
        .call("h.ran", json!({}))
        .await
        .ok()
        .and_then(|r| r["result"]["content"][0]["text"].as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    report_of(
        &pid,
        "30 calls of 256 KiB queued, clients gone",
        before,
        &format!("{ran} sleeps ran (1 expected)"),
        t.elapsed(),
    );
    drop(served);

    // With a token: eight connections that never authenticate, trickling headers, against
    // `max_connections = 8`; an authenticated client comes after them.
    let token_config =
        served_env.config("[serve]\nmax_connections = 8\n\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\n");
    let served = quarry_tests::mcp_client::Served::start_with_env(
        &quarry_tests::quarry_bin(),
        &token_config,
        &[("QUARRY_MCP_TOKEN", "bench-token")],
    );
    let pid = served.pid().to_string();
    let addr = served.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let before = sample_of(&pid);
    let t = Instant::now();
    let mut trickling = Vec::new();
    for _ in 0..8 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\n").await;
            trickling.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut authed = quarry_tests::mcp_client::McpHttp::connect(&served.url).await.unwrap();
    authed.token = Some("bench-token".into());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    let status = authed
        .post(init.to_string().into_bytes())
        .await
        .map(|r| r.status.to_string())
        .unwrap_or_else(|e| e.to_string());
    report_of(
        &pid,
        "8 unauthenticated trickling connections (cap 8)",
        before,
        &format!("authenticated client: HTTP {status}"),
        t.elapsed(),
    );
    drop(trickling);
    drop(served);

    // A component file over `[host] max_component_size`, hot-swapped in: refused before
    // compiling (a 20 MiB component took 16-24 s and 1.7 GB to compile on 2 cores).
    let before = sample();
    let t = Instant::now();
    let big = vec![0u8; 20 << 20];
    let swap_env = TestEnv::new();
    swap_env.plugin(HOSTILE, "hostile");
    let path = swap_env.config("[tools.h]\ncomponent = \"plugins/hostile.wasm\"\n");
    let text =
        std::fs::read_to_string(&path).unwrap().replacen("[host]\n", "[host]\nmax_component_size = \"16MiB\"\n", 1);
    std::fs::write(&path, text).unwrap();
    let swap_host = quarry::Registry::new(quarry::Config::load(&path).unwrap()).unwrap();
    swap_host.load_all().await;
    let plugin = swap_env.path("plugins/hostile.wasm");
    swap_env.replace(&plugin, &big);
    let outcome = match swap_host.reload(&plugin.canonicalize().unwrap()).await {
        Ok(_) => "swapped".to_string(),
        Err(e) => {
            let e = e.to_string();
            let why = e.find("is over").map_or(e.as_str(), |i| &e[i..]);
            quarry::support::text::cut(why, 90)
        }
    };
    report("hot swap to a 20 MiB file (limit 16 MiB)", before, &outcome, t.elapsed());
    drop(silent);
}
