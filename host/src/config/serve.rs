//! `[serve]`: what `quarry serve` lets MCP clients hold.

use std::time::Duration;

use serde::Deserialize;

use crate::support::values::{ByteSize, HumanDuration, KeyError};

/// The least `max_request_bytes` may be: one call's largest arguments, twice.
pub const MIN_REQUEST_BYTES: u64 = 2 << 20;

/// `[serve]`: what `quarry serve` lets clients hold. Every field has a default; a flag of the
/// same name overrides the file.
///
/// ```toml
/// [serve]
/// max_sessions = 128        # MCP sessions (handshake-era clients) at once, HTTP
/// max_connections = 256     # open HTTP connections
/// max_queued_calls = 32     # tool calls one session may have waiting or running
/// max_request_bytes = "128MiB"  # request bodies, their parsed trees and queued calls' arguments held at once, all clients
/// body_timeout = "30s"      # to send a request body, once the headers are in
/// allowed_origins = ["http://localhost:6274"]   # browser origins allowed; none by default
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// MCP sessions at once over HTTP.
    pub max_sessions: usize,
    /// Open HTTP connections.
    pub max_connections: usize,
    /// Tool calls one session may have waiting or running.
    pub max_queued_calls: usize,
    /// Bytes of requests held at once, all clients together: bodies being read, the JSON
    /// trees they are parsed into, and the arguments of calls waiting or running.
    pub max_request_bytes: usize,
    /// How long a client may take to send a request body.
    pub body_timeout: Duration,
    /// `Origin` values (`scheme://host[:port]`) a request may carry; a request without one
    /// (any client that is not a browser) is not affected.
    pub allowed_origins: Vec<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_sessions: 128,
            max_connections: 256,
            max_queued_calls: 32,
            max_request_bytes: 128 << 20,
            body_timeout: Duration::from_secs(30),
            allowed_origins: Vec::new(),
        }
    }
}

impl ServeConfig {
    /// Checks `max_request_bytes`: at least [`MIN_REQUEST_BYTES`], at most 1 TiB.
    pub fn check_request_bytes(n: u64) -> Result<usize, String> {
        if (MIN_REQUEST_BYTES..=1 << 40).contains(&n) {
            usize::try_from(n).map_err(|_| format!("{n} bytes does not fit this machine's address space"))
        } else {
            Err(format!("{n} bytes is out of range: between 2MiB and 1TiB"))
        }
    }

    /// Checks an `Origin` allowlist entry: `scheme://host[:port]`, no path.
    pub fn check_origin(origin: &str) -> Result<(), String> {
        let ok = origin.split_once("://").is_some_and(|(scheme, rest)| {
            matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains(['/', '?', '#', '@', ' '])
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{origin:?} is not an origin; write it as scheme://host[:port], like \"http://localhost:6274\""
            ))
        }
    }
}

/// `[serve]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServe {
    max_sessions: Option<usize>,
    max_connections: Option<usize>,
    max_queued_calls: Option<usize>,
    max_request_bytes: Option<ByteSize>,
    body_timeout: Option<HumanDuration>,
    #[serde(default)]
    allowed_origins: Vec<String>,
}

impl RawServe {
    /// Validates the limits and origins; errors name their key under `serve`.
    pub(super) fn validate(self) -> Result<ServeConfig, KeyError> {
        let d = ServeConfig::default();
        let count = |v: Option<usize>, default: usize, key: &str| match v {
            None => Ok(default),
            Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
            Some(n) => {
                Err(KeyError::new(format!("serve.{key}"), format!("{n} is out of range: between 1 and 1000000")))
            }
        };
        for (i, o) in self.allowed_origins.iter().enumerate() {
            ServeConfig::check_origin(o).map_err(|m| KeyError::new(format!("serve.allowed_origins[{i}]"), m))?;
        }
        let max_request_bytes = match self.max_request_bytes {
            None => d.max_request_bytes,
            Some(ByteSize(n)) => {
                ServeConfig::check_request_bytes(n).map_err(|m| KeyError::new("serve.max_request_bytes", m))?
            }
        };
        Ok(ServeConfig {
            max_sessions: count(self.max_sessions, d.max_sessions, "max_sessions")?,
            max_connections: count(self.max_connections, d.max_connections, "max_connections")?,
            max_queued_calls: count(self.max_queued_calls, d.max_queued_calls, "max_queued_calls")?,
            max_request_bytes,
            body_timeout: self.body_timeout.map_or(d.body_timeout, |t| t.0),
            allowed_origins: self.allowed_origins,
        })
    }
}
