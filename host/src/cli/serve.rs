//! `quarry serve`: every tool over MCP (stdio or streamable HTTP), the components watched and
//! swapped as their files change.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{EXIT_OK, EXIT_TOOL, EXIT_USAGE, Outcome, fail, load_all, load_config, registry};
use crate::config::ServeConfig;
use crate::mcp::ServeError;
use crate::mcp::stdio::StdioLimits;
use crate::support::values::{ByteSize, HumanDuration};

/// `quarry serve`'s flags; each limit overrides its key of the config's `[serve]`.
#[derive(clap::Args, Debug)]
pub struct Flags {
    /// Speak MCP on stdin/stdout (logs go to stderr).
    #[arg(long, conflicts_with = "http", required_unless_present = "http")]
    pub stdio: bool,
    /// Speak streamable HTTP at http://ADDR/mcp, e.g. 127.0.0.1:8765. An address other
    /// than loopback needs a bearer token in $QUARRY_MCP_TOKEN, and --insecure-http.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve beyond loopback over plain HTTP: the token and every call travel in clear.
    /// Prefer a TLS proxy in front of a loopback address.
    #[arg(long, requires = "http")]
    pub insecure_http: bool,
    /// MCP sessions at once over HTTP (overrides [serve] max_sessions; default 128).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sessions: Option<u32>,
    /// Open HTTP connections (overrides [serve] max_connections; default 256).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Tool calls one session may have waiting or running (overrides [serve]
    /// max_queued_calls; default 32).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_queued_calls: Option<u32>,
    /// Bytes of requests held at once, all clients together, e.g. 128MiB (overrides
    /// [serve] max_request_bytes).
    #[arg(long, value_name = "SIZE", value_parser = |s: &str| ByteSize::parse(s).and_then(|b| ServeConfig::check_request_bytes(b.0)))]
    pub max_request_bytes: Option<usize>,
    /// Time a client has to send a request body, e.g. 30s (overrides [serve] body_timeout).
    #[arg(long, value_name = "DURATION", value_parser = |s: &str| HumanDuration::parse(s))]
    pub body_timeout: Option<HumanDuration>,
    /// A browser origin allowed to call the server, e.g. http://localhost:6274
    /// (repeatable; adds to [serve] allowed_origins).
    #[arg(long = "allowed-origin", value_name = "ORIGIN", value_parser = |s: &str| ServeConfig::check_origin(s).map(|()| s.to_string()))]
    pub allowed_origins: Vec<String>,
    /// Append one JSON line per tool call to FILE: time, client session, tool, arguments,
    /// outcome, duration (an audit log; off by default).
    #[arg(long, value_name = "FILE")]
    pub call_log: Option<PathBuf>,
}

impl Flags {
    /// The config's `[serve]` limits with these flags' overrides.
    fn limits(&self, config: &ServeConfig) -> ServeConfig {
        let mut limits = config.clone();
        if let Some(n) = self.max_sessions {
            limits.max_sessions = n as usize;
        }
        if let Some(n) = self.max_connections {
            limits.max_connections = n as usize;
        }
        if let Some(n) = self.max_queued_calls {
            limits.max_queued_calls = n as usize;
        }
        if let Some(n) = self.max_request_bytes {
            limits.max_request_bytes = n;
        }
        if let Some(t) = self.body_timeout {
            limits.body_timeout = t.0;
        }
        limits.allowed_origins.extend(self.allowed_origins.iter().cloned());
        limits
    }
}

/// Serves until the client leaves (stdio) or the process is interrupted (HTTP). Clients hear
/// `initialize` while the instances open, and `tools/list` as soon as they have; index builds
/// go on in the background.
pub async fn run(path: &Path, flags: Flags) -> Outcome {
    let registry = registry(load_config(path).await?)?;
    let loading = registry.clone();
    tokio::spawn(async move { load_all(&loading).await });
    let limits = flags.limits(&registry.config().serve);
    let log = flags
        .call_log
        .as_deref()
        .map(crate::mcp::call_log::CallLog::open)
        .transpose()
        .map_err(|e| fail(EXIT_USAGE, e))?
        .map(Arc::new);
    let _watcher = crate::watch::watch(registry.clone()).map_err(|e| fail(EXIT_TOOL, ServeError::Watch(e)))?;
    let served = match flags.http {
        None => {
            let stdio = StdioLimits { max_calls: limits.max_queued_calls, max_request_bytes: limits.max_request_bytes };
            crate::mcp::stdio::serve_stdio(registry, stdio, log).await
        }
        Some(addr) => {
            let token = std::env::var(crate::mcp::http::TOKEN_ENV).ok();
            let insecure_http = flags.insecure_http;
            let options = crate::mcp::http::HttpOptions { addr, token, limits, insecure_http, call_log: log };
            serve_http(registry, options).await
        }
    };
    served.map_err(|e| {
        let code = match e {
            ServeError::NoToken(_) | ServeError::PlainHttp(_) | ServeError::Bind { .. } => EXIT_USAGE,
            _ => EXIT_TOOL,
        };
        fail(code, e)
    })?;
    Ok(EXIT_OK)
}

/// Binds, says where it serves, and serves until interrupted.
async fn serve_http(
    registry: Arc<crate::registry::Registry>,
    options: crate::mcp::http::HttpOptions,
) -> Result<(), ServeError> {
    let server = crate::mcp::http::HttpServer::bind(registry, options).await?;
    match server.addr() {
        Ok(a) => {
            eprintln!("quarry: serving MCP at http://{a}{}", crate::mcp::http::PATH);
            use crate::mcp::ops::{HEALTHZ, METRICS, READYZ};
            eprintln!("quarry: probes at http://{a}{HEALTHZ} and {READYZ}, Prometheus metrics at {METRICS}");
        }
        Err(e) => eprintln!("quarry: serving MCP (address unknown: {e})"),
    }
    let stop = server.stopper();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    server.serve().await
}
