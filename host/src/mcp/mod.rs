//! The MCP server: every tool of every loaded instance, served to agent
//! runtimes over stdio ([`stdio`]) or streamable HTTP ([`http`]).
//!
//! Built on `rmcp`, the official Rust SDK. Both protocol eras are served:
//! - the handshake era (`initialize`, then `tools/list`/`tools/call`; revisions
//!   2024-11-05 to 2025-11-25), which CrewAI's adapter speaks through the Python
//!   `mcp` 1.x SDK; tool-list changes reach these clients as
//!   `notifications/tools/list_changed` on their session;
//! - the stateless 2026-07-28 revision (`server/discover`, per-request version
//!   metadata), where list changes ride a `subscriptions/listen` stream.
//!
//! [`handler`] maps the registry to MCP tools and results; [`notify`] tells
//! connected clients when a hot swap changed the tools; [`listen`] sends a call's progress and
//! log lines to its client; [`call_log`] is the opt-in audit log of every tool call; [`ops`]
//! answers the operator's endpoints of the HTTP server (`/healthz`, `/readyz`, `/metrics`).

pub mod asking;
pub mod budget;
pub mod call_log;
pub mod handler;
pub mod http;
pub mod listen;
pub mod notify;
pub mod ops;
pub mod scan;
pub mod stdio;
pub mod subscriptions;

pub use handler::QuarryMcp;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The HTTP address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A non-loopback HTTP address without a bearer token.
    #[error(
        "refusing to serve MCP on {0} without a bearer token: set QUARRY_MCP_TOKEN (clients send `Authorization: Bearer <token>`), or listen on 127.0.0.1"
    )]
    NoToken(std::net::SocketAddr),
    /// A bearer token beyond loopback over plain HTTP, without `--insecure-http`.
    #[error(
        "refusing to serve MCP on {0} over plain HTTP: the bearer token and every call would travel in clear. Put a TLS proxy in front and listen on 127.0.0.1, or pass --insecure-http on a network you trust"
    )]
    PlainHttp(std::net::SocketAddr),
    /// The MCP session over stdio failed to start or broke.
    #[error("MCP over stdio: {0}")]
    Stdio(String),
    /// Watching the component directories for hot swap failed.
    #[error("cannot watch the component directories for new versions: {0}")]
    Watch(#[from] ::notify::Error),
}
