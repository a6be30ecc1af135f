//! A bare MCP client over streamable HTTP, for what the SDK clients won't do: send malformed
//! requests on purpose (the bad-input tests) and drive many calls with little client overhead
//! (the MCP benchmark). One keep-alive HTTP/1.1 connection, one handshake-era session.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Every request waits at most this long.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// What the server answered.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON-RPC messages in the body (one for JSON, every `data:` event for SSE).
    pub messages: Vec<Value>,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The message answering request `id`, if any.
    pub fn answer(&self, id: u64) -> Option<&Value> {
        self.messages.iter().find(|m| m.get("id") == Some(&json!(id)))
    }
}

/// One session with one server.
pub struct McpHttp {
    url: hyper::Uri,
    send: SendRequest<Full<Bytes>>,
    session: Option<String>,
    next_id: u64,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
    /// More headers sent with every request (an `Origin`, say).
    pub headers: Vec<(String, String)>,
    /// How long one request may take (default [`TIMEOUT`]; a call that ingests a long document
    /// takes longer).
    pub timeout: Duration,
}

impl McpHttp {
    /// Connects to `url` (http://host:port/path) without a handshake.
    pub async fn connect(url: &str) -> anyhow::Result<McpHttp> {
        let uri: hyper::Uri = url.parse()?;
        let authority = uri.authority().ok_or_else(|| anyhow::anyhow!("no host in {url}"))?.to_string();
        let stream = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(&authority)).await??;
        stream.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(McpHttp { url: uri, send, session: None, next_id: 1, token: None, headers: Vec::new(), timeout: TIMEOUT })
    }

    /// The session this client is in, once the server gave it one.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Connects to `url` and joins `session` (another connection of the same client).
    pub async fn join(url: &str, session: &str) -> anyhow::Result<McpHttp> {
        let mut c = McpHttp::connect(url).await?;
        c.session = Some(session.to_string());
        // Request ids must not repeat within a session.
        c.next_id = 1_000 + rand_ish();
        Ok(c)
    }

    /// Sends request `method` with id `id` and waits for the whole reply.
    pub async fn request_with_id(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Reply> {
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().into_bytes())
            .await
    }

    /// Connects and does the handshake: `initialize`, then `notifications/initialized`.
    pub async fn open(url: &str) -> anyhow::Result<McpHttp> {
        McpHttp::open_with_token(url, None).await
    }

    /// [`McpHttp::open`], sending the bearer `token` with every request when given.
    pub async fn open_with_token(url: &str, token: Option<&str>) -> anyhow::Result<McpHttp> {
        let mut c = McpHttp::connect(url).await?;
        c.token = token.map(str::to_string);
        let init = c
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "quarry-tests", "version": "0"}}),
            )
            .await?;
        anyhow::ensure!(init.get("result").is_some(), "initialize failed: {init}");
        let r =
            c.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string().into_bytes()).await?;
        anyhow::ensure!(r.status == 202, "initialized: HTTP {} {}", r.status, r.body);
        Ok(c)
    }

    /// POSTs `body` as is, with the session's id once there is one.
    pub async fn post(&mut self, body: Vec<u8>) -> anyhow::Result<Reply> {
        let mut req = hyper::Request::post(self.url.clone())
            .header(hyper::header::HOST, self.url.authority().map(|a| a.to_string()).unwrap_or_default())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream");
        if let Some(t) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s).header("mcp-protocol-version", "2025-11-25");
        }
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(Full::new(Bytes::from(body)))?;
        // The connection is ready for the next request only once it has read the last response
        // to its end, which its task may not have done yet.
        tokio::time::timeout(self.timeout, self.send.ready()).await??;
        let res = tokio::time::timeout(self.timeout, self.send.send_request(req)).await??;
        let status = res.status().as_u16();
        if let Some(s) = res.headers().get("mcp-session-id") {
            self.session = Some(s.to_str()?.to_string());
        }
        let bytes = tokio::time::timeout(self.timeout, res.into_body().collect()).await??.to_bytes();
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let messages = match serde_json::from_str::<Value>(&body) {
            Ok(v) => vec![v],
            Err(_) => body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .collect(),
        };
        Ok(Reply { status, messages, body })
    }

    /// Sends request `method` and returns the message answering it.
    pub async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let r = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().into_bytes())
            .await?;
        r.answer(id).cloned().ok_or_else(|| anyhow::anyhow!("no answer to {method} (HTTP {}): {}", r.status, r.body))
    }

    /// `tools/call`: the message answering it.
    pub async fn call(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        self.request("tools/call", json!({"name": name, "arguments": arguments})).await
    }
}

/// A number that differs between calls in one process, for request ids.
fn rand_ish() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(100, Ordering::Relaxed)
}

/// `quarry serve --http 127.0.0.1:0` as a child process; killed when dropped.
pub struct Served {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl Served {
    /// Starts the server for `config` and waits (at most 5 minutes: the first start may build an
    /// index) until it says where it listens. Its stderr is passed on to ours.
    pub fn start(quarry: &std::path::Path, config: &std::path::Path) -> Served {
        Served::start_with_env(quarry, config, &[])
    }

    /// [`Served::start`] with extra environment variables.
    pub fn start_with_env(quarry: &std::path::Path, config: &std::path::Path, env: &[(&str, &str)]) -> Served {
        Served::start_with(quarry, config, &[], env)
    }

    /// [`Served::start`] with extra `serve` arguments and environment variables.
    pub fn start_with(
        quarry: &std::path::Path,
        config: &std::path::Path,
        args: &[&std::ffi::OsStr],
        env: &[(&str, &str)],
    ) -> Served {
        use std::io::BufRead;

        let mut child = std::process::Command::new(quarry)
            .arg("--config")
            .arg(config)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start quarry serve");
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("serving MCP at ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
                eprintln!("[quarry] {line}");
            }
        });
        let Ok(url) = rx.recv_timeout(Duration::from_secs(300)) else {
            let _ = child.kill();
            panic!("quarry serve --http did not start within 5 minutes");
        };
        Served { child, url }
    }
}

impl Served {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL: no clean-up runs) and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
