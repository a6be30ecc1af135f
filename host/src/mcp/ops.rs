//! The operator's endpoints of `quarry serve --http`, beside the MCP endpoint:
//! - `/healthz`: the process answers (a load balancer's liveness probe);
//! - `/readyz`: every configured instance has loaded and prepared, and the capabilities reach
//!   what they serve from (a corpus directory, a corpus's cluster): 200, or 503 with what is
//!   missing;
//! - `/metrics`: the Prometheus text exposition ([`crate::metrics`]).
//!
//! The probes are answered in front of every check of the MCP endpoint (a balancer sends no
//! token and no `Origin`), and say only whether; the details of a 503 (instance names, why one
//! failed) go only to a caller that sends the bearer token, when one is configured. `/metrics`
//! is behind the same checks as `/mcp` (Prometheus sends the token with `authorization`).

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Response, StatusCode};

use crate::registry::Registry;
use crate::support::exposition::{CONTENT_TYPE, Exposition, Kind};

/// The liveness probe's path.
pub const HEALTHZ: &str = "/healthz";
/// The readiness probe's path.
pub const READYZ: &str = "/readyz";
/// The metrics' path.
pub const METRICS: &str = "/metrics";

/// What the HTTP server knows of its clients, for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerFigures {
    /// Connections open now.
    pub connections: usize,
    /// Handshake-era sessions held now.
    pub sessions: usize,
}

/// An HTTP answer of the MCP endpoint or a probe, its body boxed.
pub type HttpReply = Response<BoxBody<Bytes, Infallible>>;

/// The answer to a probe (`path` is [`HEALTHZ`] or [`READYZ`]), or `None` for another path.
/// `details`: whether the caller may read why the host is not ready.
pub async fn probe(registry: &Registry, method: &Method, path: &str, details: bool) -> Option<HttpReply> {
    if path != HEALTHZ && path != READYZ {
        return None;
    }
    if method != Method::GET && method != Method::HEAD {
        return Some(not_allowed());
    }
    if path == HEALTHZ {
        return Some(reply(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()));
    }
    let report = registry.readiness().await;
    let status = if report.ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = if report.ready() {
        serde_json::json!({"ready": true})
    } else if details {
        serde_json::json!({"ready": false, "waiting": report.waiting, "failed": report.failed})
    } else {
        serde_json::json!({
            "ready": false,
            "waiting": report.waiting.len(),
            "failed": report.failed.len(),
            "details": "send the bearer token (Authorization: Bearer <token>) to see what is missing",
        })
    };
    Some(reply(status, "application/json", format!("{body}\n")))
}

/// The answer to `GET /metrics` (another method is refused before, with the MCP endpoint's
/// checks).
pub fn metrics(registry: &Registry, server: ServerFigures) -> HttpReply {
    let mut e = Exposition::default();
    crate::metrics::write(registry, &mut e);
    e.single("quarry_http_connections_open", Kind::Gauge, "HTTP connections open now.", server.connections as f64);
    e.single("quarry_mcp_sessions", Kind::Gauge, "Handshake-era MCP sessions held now.", server.sessions as f64);
    reply(StatusCode::OK, CONTENT_TYPE, e.finish())
}

/// 405 to a method other than `GET` or `HEAD`.
pub fn not_allowed() -> HttpReply {
    let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", "use GET\n".into());
    r.headers_mut().insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
    r
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> HttpReply {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    // A probe's answer is of this moment: no cache in between may keep it.
    h.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    r
}
