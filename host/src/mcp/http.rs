//! MCP over streamable HTTP, at `/mcp` on one address.
//!
//! - Handshake-era clients get a session each (`Mcp-Session-Id`) and a GET stream on
//!   which `tools/list_changed` arrives; 2026-07-28 requests are served statelessly.
//! - Loopback only by default. Any other address needs a bearer token
//!   ([`TOKEN_ENV`]), checked on every request; on loopback the token is optional, and
//!   rmcp's Host-header check stops DNS-rebinding pages from reaching the server.
//! - A body that is not one JSON-RPC message gets a JSON-RPC error (400), one over
//!   [`MAX_BODY_BYTES`] gets 413 with one; a client that sends its headers slower than
//!   [`HEADER_TIMEOUT`], or its body slower than `[serve] body_timeout`, is dropped (408).
//! - What clients hold is bounded (`[serve]`, see [`crate::config::ServeConfig`]): open
//!   connections (one more is answered 503 and closed), sessions (a new `initialize` beyond the
//!   cap gets 503 with a JSON-RPC error) and tool calls waiting or running per session (one
//!   more is a tool error).
//! - A request carrying an `Origin` header (a browser) is refused with 403 unless the origin
//!   is in `[serve] allowed_origins`, as the MCP specification requires of servers.
//! - A bearer token over plain HTTP beyond loopback travels in clear: that needs
//!   `--insecure-http`, and TLS belongs in a proxy in front.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::config::ServeConfig;
use crate::mcp::ServeError;
use crate::mcp::call_log::CallLog;
use crate::mcp::handler::QuarryMcp;
use crate::mcp::notify::{Peers, fan_out};
use crate::registry::Registry;

/// The environment variable holding the bearer token clients must send.
pub const TOKEN_ENV: &str = "QUARRY_MCP_TOKEN";
/// The path the server answers on.
pub const PATH: &str = "/mcp";
/// The largest request body accepted (16 MiB, as over stdio).
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// How long a handshake-era session may sit idle before the server forgets it. rmcp's default
/// is 5 minutes, shorter than an agent may think between two tool calls; a forgotten session
/// answers 404 and the client must start over.
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);
/// How long a client may take to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How to serve.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen; port 0 picks a free port.
    pub addr: SocketAddr,
    /// The bearer token clients must send; required unless `addr` is loopback.
    pub token: Option<String>,
    /// The limits (`[serve]` and its flags).
    pub limits: ServeConfig,
    /// Serve a token beyond loopback over plain HTTP anyway (`--insecure-http`).
    pub insecure_http: bool,
    /// Where every tool call is logged (`--call-log`), if anywhere.
    pub call_log: Option<Arc<CallLog>>,
}

impl HttpOptions {
    /// Options for `addr` with the default limits, no token.
    pub fn new(addr: SocketAddr) -> Self {
        HttpOptions { addr, token: None, limits: ServeConfig::default(), insecure_http: false, call_log: None }
    }
}

/// A bound server, before it serves: [`HttpServer::addr`] is the real address (with the
/// port chosen when 0 was asked for).
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    host: Arc<Registry>,
    peers: Arc<Peers>,
    stop: CancellationToken,
    connections: Arc<tokio::sync::Semaphore>,
}

/// What every connection's requests need.
struct Shared {
    service: StreamableHttpService<QuarryMcp, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    token: Option<String>,
    limits: ServeConfig,
}

impl HttpServer {
    /// Binds `options.addr`; refuses a non-loopback address without a token.
    pub async fn bind(host: Arc<Registry>, options: HttpOptions) -> Result<HttpServer, ServeError> {
        let token = options.token.filter(|t| !t.is_empty());
        let loopback = options.addr.ip().is_loopback();
        if !loopback && token.is_none() {
            return Err(ServeError::NoToken(options.addr));
        }
        if !loopback && !options.insecure_http {
            return Err(ServeError::PlainHttp(options.addr));
        }
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|source| ServeError::Bind { addr: options.addr, source })?;
        let stop = CancellationToken::new();
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(true)
            .with_max_request_body_bytes(MAX_BODY_BYTES)
            .with_cancellation_token(stop.child_token());
        if !loopback {
            // Remote clients name the server by whatever host they reach it as; the bearer
            // token, not the Host header, is what keeps strangers out.
            config = config.disable_allowed_hosts();
        }
        let peers = Arc::new(Peers::default());
        let handler = QuarryMcp::new(host.clone(), peers.clone())
            .with_queue_cap(options.limits.max_queued_calls)
            .with_call_log(options.call_log.clone());
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(SESSION_IDLE);
        let sessions = Arc::new(sessions);
        // One handler per session, each with its own count of calls.
        let service = StreamableHttpService::new(move || Ok(handler.for_session()), sessions.clone(), config);
        let connections = Arc::new(tokio::sync::Semaphore::new(options.limits.max_connections));
        let shared = Arc::new(Shared { service, sessions, token, limits: options.limits });
        Ok(HttpServer { listener, shared, host, peers, stop, connections })
    }

    /// The address actually bound.
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A token that stops the server when cancelled.
    pub fn stopper(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Accepts connections until stopped.
    pub async fn serve(self) -> Result<(), ServeError> {
        let fan = tokio::spawn(fan_out(self.host.clone(), self.peers.clone()));
        loop {
            let (stream, remote) = tokio::select! {
                () = self.stop.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, don't spin.
                        tracing::warn!(target: "quarry::mcp", "accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(permit) = self.connections.clone().try_acquire_owned() else {
                if let Some(held) = REFUSALS_LOG.take() {
                    tracing::warn!(target: "quarry::mcp", %remote, "refused a connection: {} are open ([serve] max_connections); {held} more refused since the last line", self.shared.limits.max_connections);
                }
                tokio::spawn(refuse_connection(stream));
                continue;
            };
            // A response goes out in several writes (an SSE priming event, the message, the end
            // of the stream); with Nagle's algorithm on, the client's delayed ACK adds ~40 ms.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(target: "quarry::mcp", %remote, "cannot set TCP_NODELAY: {e}");
            }
            let shared = self.shared.clone();
            let stop = self.stop.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(route(&shared, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), svc);
                tokio::select! {
                    res = conn => if let Err(e) = res {
                        tracing::debug!(target: "quarry::mcp", %remote, "connection ended: {e}");
                    },
                    () = stop.cancelled() => {}
                }
            });
        }
        fan.abort();
        Ok(())
    }
}

/// Log lines for refused connections and sessions: a client chooses how many it sends.
static REFUSALS_LOG: crate::log_budget::LogBudget = crate::log_budget::LogBudget::new(5, Duration::from_secs(1));

/// Answers a connection over the cap with 503 and closes it, within a second.
async fn refuse_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "too many connections; try again later\n";
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
}

async fn route(shared: &Shared, req: Request<Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
    let service = &shared.service;
    if req.uri().path() != PATH {
        return plain(StatusCode::NOT_FOUND, &format!("not found; the MCP endpoint is {PATH}"));
    }
    if let Some(origin) = req.headers().get(hyper::header::ORIGIN) {
        let allowed =
            origin.to_str().is_ok_and(|o| shared.limits.allowed_origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
        if !allowed {
            let shown = crate::text::quoted_prefix(&String::from_utf8_lossy(origin.as_bytes()), 100);
            return plain(
                StatusCode::FORBIDDEN,
                &format!(
                    "origin {shown} is not allowed; add it to [serve] allowed_origins (or --allowed-origin) to let that page call this server"
                ),
            );
        }
    }
    if let Some(expected) = shared.token.as_deref() {
        let sent = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !sent.is_some_and(|s| same(s.as_bytes(), expected.as_bytes())) {
            let mut r =
                plain(StatusCode::UNAUTHORIZED, "missing or wrong bearer token (Authorization: Bearer <token>)");
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    let ends_session = req.method() == hyper::Method::DELETE;
    let response = if req.method() == hyper::Method::POST {
        let (parts, body) = req.into_parts();
        match read_message(body, shared.limits.body_timeout).await {
            Ok(bytes) => {
                if !parts.headers.contains_key("mcp-session-id")
                    && is_initialize(&bytes)
                    && shared.sessions.sessions.read().await.len() >= shared.limits.max_sessions
                {
                    let msg = format!(
                        "the server holds its maximum of {} sessions; end idle ones (HTTP DELETE with their Mcp-Session-Id) or raise [serve] max_sessions",
                        shared.limits.max_sessions
                    );
                    let id = serde_json::from_slice::<serde_json::Value>(&bytes)
                        .ok()
                        .and_then(|v| v.get("id").cloned())
                        .unwrap_or(serde_json::Value::Null);
                    return rpc_error(StatusCode::SERVICE_UNAVAILABLE, -32000, &msg, id);
                }
                service.handle(Request::from_parts(parts, Full::new(bytes))).await
            }
            Err(refusal) => return refusal,
        }
    } else {
        service.handle(req).await
    };
    if ends_session && response.status() == StatusCode::ACCEPTED {
        // rmcp acknowledges a session's end with 202; the Python SDK 1.x (CrewAI's) logs
        // "Session termination failed" on anything but 200 or 204.
        let mut done = Response::new(Full::new(Bytes::new()).boxed());
        *done.status_mut() = StatusCode::NO_CONTENT;
        return done;
    }
    response
}

/// Reads a POST body (at most [`MAX_BODY_BYTES`]) and checks it is one JSON-RPC message.
///
/// rmcp answers a body that is not JSON, or not a JSON-RPC message, with a bare
/// `415 Unsupported Media Type`; a JSON-RPC client should get a JSON-RPC error it can read:
/// parse error (-32700) or invalid request (-32600), with `id` when one can be found.
async fn read_message(body: Incoming, timeout: Duration) -> Result<Bytes, Response<BoxBody<Bytes, Infallible>>> {
    let read = tokio::time::timeout(timeout, http_body_util::Limited::new(body, MAX_BODY_BYTES).collect()).await;
    let Ok(read) = read else {
        let msg = format!("the request body did not arrive within {timeout:?}; send it at once");
        return Err(rpc_error(StatusCode::REQUEST_TIMEOUT, -32600, &msg, serde_json::Value::Null));
    };
    let bytes = match read {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let msg = format!("the request is over {MAX_BODY_BYTES} bytes; send less");
            return Err(rpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, &msg, serde_json::Value::Null));
        }
        Err(e) => {
            let msg = format!("cannot read the request body: {e}");
            return Err(rpc_error(StatusCode::BAD_REQUEST, -32600, &msg, serde_json::Value::Null));
        }
    };
    if let Err(e) = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes) {
        let (code, what) = if e.is_syntax() || e.is_eof() {
            (-32700, "parse error: the body is not JSON")
        } else {
            (-32600, "invalid request: the body is not a JSON-RPC 2.0 request, notification or response")
        };
        let id = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .filter(|id| id.is_string() || id.is_number())
            .unwrap_or(serde_json::Value::Null);
        return Err(rpc_error(StatusCode::BAD_REQUEST, code, &format!("{what} ({e})"), id));
    }
    Ok(bytes)
}

/// Whether a body is an `initialize` request (which opens a session).
fn is_initialize(bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
    }
    serde_json::from_slice::<Method>(bytes).is_ok_and(|m| m.method == Some("initialize"))
}

fn rpc_error(
    status: StatusCode,
    code: i64,
    message: &str,
    id: serde_json::Value,
) -> Response<BoxBody<Bytes, Infallible>> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// Compares in time that depends only on the lengths, so the token can't be guessed byte by byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn plain(status: StatusCode, message: &str) -> Response<BoxBody<Bytes, Infallible>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{message}\n"))).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn token_comparison() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
