//! `[serve]`: what `quarry serve` lets MCP clients hold.

use std::time::Duration;

use serde::Deserialize;

use crate::values::{HumanDuration, KeyError};

/// `[serve]`: what `quarry serve` lets clients hold. Every field has a default; a flag of the
/// same name overrides the file.
///
/// ```toml
/// [serve]
/// max_sessions = 128        # MCP sessions (handshake-era clients) at once, HTTP
/// max_connections = 256     # open HTTP connections
/// max_queued_calls = 32     # tool calls one session may have waiting or running
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
            body_timeout: Duration::from_secs(30),
            allowed_origins: Vec::new(),
        }
    }
}

impl ServeConfig {
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
        Ok(ServeConfig {
            max_sessions: count(self.max_sessions, d.max_sessions, "max_sessions")?,
            max_connections: count(self.max_connections, d.max_connections, "max_connections")?,
            max_queued_calls: count(self.max_queued_calls, d.max_queued_calls, "max_queued_calls")?,
            body_timeout: self.body_timeout.map_or(d.body_timeout, |t| t.0),
            allowed_origins: self.allowed_origins,
        })
    }
}
