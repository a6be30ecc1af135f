//! MCP over streamable HTTP, at `/mcp` on one address.
//!
//! - Handshake-era clients get a session each (`Mcp-Session-Id`) and a GET stream on
//!   which `tools/list_changed` arrives; 2026-07-28 requests are served statelessly.
//! - Loopback only by default. Any other address needs a bearer token
//!   ([`TOKEN_ENV`]), checked on every request; on loopback the token is optional, and
//!   rmcp's Host-header check stops DNS-rebinding pages from reaching the server.
//! - A body that is not one JSON-RPC message gets a JSON-RPC error (400), one over
//!   [`MAX_BODY_BYTES`] gets 413 with one; a client that sends its headers slower than
//!   [`HEADER_TIMEOUT`] is dropped.

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

use crate::mcp::ServeError;
use crate::mcp::handler::QuarryMcp;
use crate::mcp::notify::{Peers, fan_out};
use crate::registry::Host;

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
}

/// A bound server, before it serves: [`HttpServer::addr`] is the real address (with the
/// port chosen when 0 was asked for).
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    service: Arc<StreamableHttpService<QuarryMcp, LocalSessionManager>>,
    token: Option<Arc<str>>,
    host: Arc<Host>,
    peers: Arc<Peers>,
    stop: CancellationToken,
}

impl HttpServer {
    /// Binds `options.addr`; refuses a non-loopback address without a token.
    pub async fn bind(host: Arc<Host>, options: HttpOptions) -> Result<HttpServer, ServeError> {
        let token = options.token.filter(|t| !t.is_empty());
        let loopback = options.addr.ip().is_loopback();
        if !loopback && token.is_none() {
            return Err(ServeError::NoToken(options.addr));
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
        let handler = QuarryMcp::new(host.clone(), peers.clone());
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(SESSION_IDLE);
        let service = StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(sessions), config);
        Ok(HttpServer { listener, service: Arc::new(service), token: token.map(Arc::from), host, peers, stop })
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
            // A response goes out in several writes (an SSE priming event, the message, the end
            // of the stream); with Nagle's algorithm on, the client's delayed ACK adds ~40 ms.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(target: "quarry::mcp", %remote, "cannot set TCP_NODELAY: {e}");
            }
            let (service, token) = (self.service.clone(), self.token.clone());
            let stop = self.stop.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (service, token) = (service.clone(), token.clone());
                    async move { Ok::<_, Infallible>(route(&service, token.as_deref(), req).await) }
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

async fn route(
    service: &StreamableHttpService<QuarryMcp, LocalSessionManager>,
    token: Option<&str>,
    req: Request<Incoming>,
) -> Response<BoxBody<Bytes, Infallible>> {
    if req.uri().path() != PATH {
        return plain(StatusCode::NOT_FOUND, &format!("not found; the MCP endpoint is {PATH}"));
    }
    if let Some(expected) = token {
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
        match read_message(body).await {
            Ok(bytes) => service.handle(Request::from_parts(parts, Full::new(bytes))).await,
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
async fn read_message(body: Incoming) -> Result<Bytes, Response<BoxBody<Bytes, Infallible>>> {
    let bytes = match http_body_util::Limited::new(body, MAX_BODY_BYTES).collect().await {
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
