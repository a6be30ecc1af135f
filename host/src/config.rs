//! The host configuration file (TOML): which tool instances to load, and what
//! each one is granted.
//!
//! ```toml
//! [host]
//! cache_dir = "/var/cache/quarry"   # precompiled components; default: $XDG_CACHE_HOME/quarry
//!
//! [tools.manual]                    # one tool instance; its tools are `manual.<tool>`
//! component = "plugins/chapter-rag.wasm"   # relative to this file
//! embedder = "minilm"               # an [embedders.*] entry; required if the component imports one
//!                                   # ([embedders.NAME] entries take the same keys, plus `pool`:
//!                                   #  instances serving in parallel, default one per core)
//! config = { path = "/manual/MANUAL.md" }  # passed to `open` as JSON
//!
//! [tools.manual.grants]
//! dirs = [{ host = "manuals", guest = "/manual", mode = "ro" }]  # mode: "ro" (default) or "rw"
//!                                   # rw grants: quota = { bytes = "1GiB", files = 10000 } (the defaults)
//! http = ["https://example.com", "http://*.internal.example:8080"]
//! private_networks = ["127.0.0.1/32"]  # the only way to reach loopback/private/link-local/metadata addresses
//! memory = "256MiB"                 # linear-memory limit
//! deadline = "10s"                  # per call, guest time and host calls together
//! http_timeout = "30s"              # connect / first byte / between bytes
//! max_output = "16MiB"              # largest result a call may return
//! couchbase = { connection = "local", scopes = ["travel.inventory"] }  # see below
//!
//! [couchbase.local]                 # a named Couchbase connection, used by grants
//! connection_string = "couchbase://127.0.0.1"   # couchbases:// for TLS
//! username = "quarry"               # or username_env = "CB_USERNAME"
//! password_env = "CB_PASSWORD"      # or password = "..." (the environment keeps it out of files)
//! ca_file = "certs/ca.pem"          # couchbases:// only: trust this CA (PEM) instead of the system roots
//! accept_invalid_certs = false      # couchbases:// only: for development clusters, never production
//! ```
//!
//! Denied unless granted: every directory, every environment variable, every
//! outgoing connection, and every loopback, private, link-local or cloud-metadata
//! address even for an allowlisted host. Unknown keys are errors.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::http::{AllowEntry, Cidr, HttpPolicy};

/// Default linear-memory limit for an instance.
pub const DEFAULT_MEMORY: u64 = 256 << 20;
/// Default per-call deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Default bound on each phase of an outgoing HTTP request.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on the size of one call's output.
pub const DEFAULT_MAX_OUTPUT: u64 = 16 << 20;
/// The largest memory limit a grant may ask for (the pooling allocator reserves this per memory).
pub const MAX_MEMORY: u64 = 4 << 30;

/// A configuration error, always naming the file and the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong form.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// The parser's message, with line, column and key.
        message: String,
    },
    /// A value parsed but is not acceptable.
    #[error("invalid config file {path}: `{key}`: {message}")]
    Invalid {
        /// The config file.
        path: PathBuf,
        /// Dotted key, e.g. `tools.echo.grants.http[0]`.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// Where precompiled components are cached; `None` when there is nowhere private to
    /// put them (they are compiled at every start).
    pub cache_dir: Option<PathBuf>,
    /// Tool instances by name.
    pub tools: BTreeMap<String, InstanceConfig>,
    /// Embedder instances by name.
    pub embedders: BTreeMap<String, InstanceConfig>,
    /// Named Couchbase connections, referred to by `grants.couchbase.connection`.
    pub couchbase: BTreeMap<String, Arc<crate::couchbase::Connection>>,
    /// Limits of `quarry serve` (`[serve]`); flags override them.
    pub serve: ServeConfig,
}

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

/// One configured instance of a component.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceConfig {
    /// The instance name (the key under `[tools]` or `[embedders]`).
    pub name: String,
    /// Absolute path of the component file.
    pub component: PathBuf,
    /// The `config` table as a JSON object, passed to `open`/`load`.
    pub config_json: String,
    /// The embedder instance serving this tool's `embedder` import.
    pub embedder: Option<String>,
    /// What the instance may touch.
    pub grants: Grants,
    /// Embedders only: how many instances serve in parallel (default: one per core).
    pub pool: usize,
}

/// What an instance may touch. Everything else is denied.
#[derive(Debug, Clone, PartialEq)]
pub struct Grants {
    /// Preopened directories.
    pub dirs: Vec<DirGrant>,
    /// Outgoing HTTP policy.
    pub http: HttpPolicy,
    /// Linear-memory limit in bytes.
    pub memory: u64,
    /// Per-call deadline.
    pub deadline: Duration,
    /// Largest output of one call, in bytes.
    pub max_output: u64,
    /// Amazon Bedrock: which knowledge bases, and how to reach them. None: no Bedrock at all.
    pub bedrock: Option<crate::bedrock::BedrockGrant>,
    /// Couchbase: which connection, which buckets and scopes. None: no Couchbase at all.
    pub couchbase: Option<crate::couchbase::CouchbaseGrant>,
}

/// A directory made visible to the guest.
#[derive(Debug, Clone, PartialEq)]
pub struct DirGrant {
    /// Absolute host path.
    pub host: PathBuf,
    /// Path the guest sees.
    pub guest: String,
    /// Whether the guest may write.
    pub writable: bool,
    /// For a writable grant, how much the directory may hold.
    pub quota: Option<crate::files::Quota>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    host: RawHost,
    #[serde(default)]
    tools: BTreeMap<String, RawInstance>,
    #[serde(default)]
    embedders: BTreeMap<String, RawInstance>,
    #[serde(default)]
    couchbase: BTreeMap<String, RawConnection>,
    serve: Option<RawServe>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServe {
    max_sessions: Option<usize>,
    max_connections: Option<usize>,
    max_queued_calls: Option<usize>,
    body_timeout: Option<HumanDuration>,
    #[serde(default)]
    allowed_origins: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    connection_string: String,
    username: Option<String>,
    username_env: Option<String>,
    password: Option<String>,
    password_env: Option<String>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    accept_invalid_certs: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCouchbase {
    connection: String,
    scopes: Vec<String>,
    timeout: Option<HumanDuration>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHost {
    cache_dir: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    component: PathBuf,
    #[serde(default)]
    config: toml::Table,
    embedder: Option<String>,
    pool: Option<usize>,
    #[serde(default)]
    grants: RawGrants,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGrants {
    #[serde(default)]
    dirs: Vec<RawDir>,
    #[serde(default)]
    http: Vec<String>,
    #[serde(default)]
    private_networks: Vec<String>,
    memory: Option<ByteSize>,
    deadline: Option<HumanDuration>,
    http_timeout: Option<HumanDuration>,
    max_output: Option<ByteSize>,
    bedrock: Option<RawBedrock>,
    couchbase: Option<RawCouchbase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBedrock {
    knowledge_bases: Vec<String>,
    region: Option<String>,
    endpoint: Option<String>,
    profile: Option<String>,
    max_attempts: Option<u32>,
    attempt_timeout: Option<HumanDuration>,
    timeout: Option<HumanDuration>,
    connect_timeout: Option<HumanDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDir {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    mode: DirMode,
    quota: Option<RawQuota>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuota {
    bytes: Option<ByteSize>,
    files: Option<u64>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum DirMode {
    #[default]
    Ro,
    Rw,
}

/// A byte size written as `"64MiB"`, `"1GiB"`, `"512KiB"`, `"100MB"` or a plain integer of bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses a size, or says what form is accepted.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let unit = unit.trim();
        let mult: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            _ => u64::MAX,
        };
        let n: u64 = num
            .parse()
            .map_err(|_| String::new())
            .and_then(|n| if mult == u64::MAX { Err(String::new()) } else { Ok(n) })
            .map_err(|_| {
                format!("invalid size {s:?}: write a whole number and a unit, like \"64MiB\", \"1GiB\" or \"512KiB\"")
            })?;
        n.checked_mul(mult).map(ByteSize).ok_or_else(|| format!("size {s:?} is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"64MiB\" or a number of bytes")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration written as `"500ms"`, `"10s"`, `"2m"` or `"1h"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Parses a duration, or says what form is accepted.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let bad =
            || format!("invalid duration {s:?}: write a whole number and a unit, like \"500ms\", \"10s\" or \"2m\"");
        let n: u64 = num.parse().map_err(|_| bad())?;
        let d = match unit.trim() {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        if d.is_zero() {
            return Err(format!("duration {s:?} must be greater than zero"));
        }
        Ok(HumanDuration(d))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HumanDuration::parse(&s).map_err(de::Error::custom)
    }
}

impl Config {
    /// Reads and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(path, &text)
    }

    /// Validates `text` as if read from `path` (relative paths resolve against its directory).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        let base = std::path::absolute(&base).unwrap_or(base);
        let invalid = |key: String, message: String| ConfigError::Invalid { path: path.to_path_buf(), key, message };

        let cache_dir = match raw.host.cache_dir {
            Some(dir) => Some(base.join(expand_path(&dir).map_err(|m| invalid("host.cache_dir".into(), m))?)),
            None => default_cache_dir(),
        };
        let mut couchbase = BTreeMap::new();
        for (name, conn) in raw.couchbase {
            let conn = connection(&base, conn).map_err(|(k, m)| invalid(format!("couchbase.{name}.{k}"), m))?;
            couchbase.insert(name, Arc::new(conn));
        }
        let mut embedders = BTreeMap::new();
        for (name, inst) in raw.embedders {
            if inst.embedder.is_some() {
                return Err(invalid(
                    format!("embedders.{name}.embedder"),
                    "an embedder cannot itself use an embedder; remove this key".into(),
                ));
            }
            if inst.pool == Some(0) || inst.pool.is_some_and(|p| p > 64) {
                return Err(invalid(
                    format!("embedders.{name}.pool"),
                    "pool must be between 1 and 64 instances".into(),
                ));
            }
            let cfg = validate_instance(&base, "embedders", &name, inst, &couchbase, &invalid)?;
            embedders.insert(name, cfg);
        }
        let mut tools = BTreeMap::new();
        for (name, inst) in raw.tools {
            if inst.pool.is_some() {
                return Err(invalid(
                    format!("tools.{name}.pool"),
                    "`pool` sizes an embedder's instance pool; it applies only under [embedders.NAME]".into(),
                ));
            }
            let cfg = validate_instance(&base, "tools", &name, inst, &couchbase, &invalid)?;
            if let Some(e) = &cfg.embedder
                && !embedders.contains_key(e)
            {
                let known: Vec<_> = embedders.keys().map(String::as_str).collect();
                return Err(invalid(
                    format!("tools.{name}.embedder"),
                    format!(
                        "no embedder named {e:?}; define [embedders.{e}] or use one of: {}",
                        if known.is_empty() { "(none defined)".to_string() } else { known.join(", ") }
                    ),
                ));
            }
            tools.insert(name, cfg);
        }
        let serve = match raw.serve {
            None => ServeConfig::default(),
            Some(s) => {
                let d = ServeConfig::default();
                let count = |v: Option<usize>, default: usize, key: &str| match v {
                    None => Ok(default),
                    Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
                    Some(n) => {
                        Err(invalid(format!("serve.{key}"), format!("{n} is out of range: between 1 and 1000000")))
                    }
                };
                for (i, o) in s.allowed_origins.iter().enumerate() {
                    ServeConfig::check_origin(o).map_err(|m| invalid(format!("serve.allowed_origins[{i}]"), m))?;
                }
                ServeConfig {
                    max_sessions: count(s.max_sessions, d.max_sessions, "max_sessions")?,
                    max_connections: count(s.max_connections, d.max_connections, "max_connections")?,
                    max_queued_calls: count(s.max_queued_calls, d.max_queued_calls, "max_queued_calls")?,
                    body_timeout: s.body_timeout.map_or(d.body_timeout, |t| t.0),
                    allowed_origins: s.allowed_origins,
                }
            }
        };
        let config = Config { path: path.to_path_buf(), cache_dir, tools, embedders, couchbase, serve };
        config.check_overlaps(&base).map_err(|(key, message)| invalid(key, message))?;
        Ok(config)
    }
}

/// [`expand`] on a path; a path that is not UTF-8 is taken as it is.
fn expand_path(path: &Path) -> Result<PathBuf, String> {
    match path.to_str() {
        Some(s) => expand(s).map(PathBuf::from),
        None => Ok(path.to_path_buf()),
    }
}

/// Expands a path from the config: a leading `~/` is `$HOME/`, `${NAME}` is the host's
/// environment variable NAME (an error when unset or empty), `${NAME:-default}` falls back to
/// `default` (itself expanded). Lets one config name per-user places (models, caches, build
/// output) without hard-coding them. Grants are unchanged by it: the guest still sees only
/// what the expanded path names.
pub fn expand(path: &str) -> Result<String, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut out = String::new();
    let mut rest = path;
    if let Some(tail) = rest.strip_prefix("~/") {
        out.push_str(&var("HOME").ok_or("`~` needs $HOME, which is not set")?);
        out.push('/');
        rest = tail;
    }
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed `${{` in {path:?}"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad variable name {name:?} in {path:?}"));
        }
        match (var(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(&expand(d)?),
            (None, None) => {
                return Err(format!(
                    "{path:?} uses ${{{name}}}, which is not set; set it or write ${{{name}:-default}}"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `$QUARRY_CACHE_DIR`, else `$XDG_CACHE_HOME/quarry`, else `~/.cache/quarry`; with none of
/// them set, no cache (never a shared directory such as `/tmp`: its entries are native code).
pub fn default_cache_dir() -> Option<PathBuf> {
    default_cache_dir_from(|k| std::env::var_os(k))
}

fn default_cache_dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let set = |k: &str| var(k).filter(|d| !d.is_empty()).map(PathBuf::from);
    set("QUARRY_CACHE_DIR")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("quarry")))
        .or_else(|| set("HOME").map(|h| h.join(".cache").join("quarry")))
}

impl Config {
    /// Refuses a read-write directory grant that holds code or config the host trusts: the
    /// precompiled cache (native code), a component's directory (hot swap would load what a
    /// guest wrote there, with every instance's grants) or the config file's directory.
    fn check_overlaps(&self, config_dir: &Path) -> Result<(), (String, String)> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mut protected: Vec<(String, PathBuf)> = vec![("the config file's directory".into(), canon(config_dir))];
        if let Some(c) = &self.cache_dir {
            protected.push(("the precompiled-component cache (host.cache_dir)".into(), canon(c)));
        }
        for (section, instances) in [("tools", &self.tools), ("embedders", &self.embedders)] {
            for (name, inst) in instances {
                if let Some(dir) = inst.component.parent() {
                    protected.push((format!("the directory of {section}.{name}.component"), canon(dir)));
                }
            }
        }
        for (section, instances) in [("tools", &self.tools), ("embedders", &self.embedders)] {
            for (name, inst) in instances {
                for (i, d) in inst.grants.dirs.iter().enumerate().filter(|(_, d)| d.writable) {
                    if let Some((what, path)) = protected.iter().find(|(_, p)| p.starts_with(&d.host)) {
                        return Err((
                            format!("{section}.{name}.grants.dirs[{i}].host"),
                            format!(
                                "the read-write grant of {} holds {what} ({}): a component could rewrite what the host loads and runs; grant a directory that holds none of these, or make this grant read-only",
                                d.host.display(),
                                path.display()
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn validate_instance(
    base: &Path,
    section: &str,
    name: &str,
    raw: RawInstance,
    connections: &BTreeMap<String, Arc<crate::couchbase::Connection>>,
    invalid: &dyn Fn(String, String) -> ConfigError,
) -> Result<InstanceConfig, ConfigError> {
    let key = |k: &str| format!("{section}.{name}{k}");
    if !valid_name(name) {
        return Err(invalid(
            format!("{section}.{name}"),
            "instance names use lowercase letters, digits, `_` and `-` (at most 64)".into(),
        ));
    }
    let component = base.join(expand_path(&raw.component).map_err(|m| invalid(key(".component"), m))?);
    if !component.is_file() {
        return Err(invalid(
            key(".component"),
            format!(
                "component file {} does not exist; build it (see README.md) or fix the path (relative paths start at the config file's directory)",
                component.display()
            ),
        ));
    }
    let config_json = serde_json::to_string(&raw.config)
        .map_err(|e| invalid(key(".config"), format!("cannot be expressed as JSON: {e}")))?;

    let mut dirs: Vec<DirGrant> = Vec::new();
    for (i, d) in raw.grants.dirs.into_iter().enumerate() {
        let k = key(&format!(".grants.dirs[{i}]"));
        let host = base.join(expand_path(&d.host).map_err(|m| invalid(format!("{k}.host"), m))?);
        if !host.is_dir() {
            return Err(invalid(
                format!("{k}.host"),
                format!("{} is not a directory; create it or fix the path", host.display()),
            ));
        }
        if !d.guest.starts_with('/') {
            return Err(invalid(
                format!("{k}.guest"),
                format!("guest path {:?} must be absolute, like \"/data\"", d.guest),
            ));
        }
        if dirs.iter().any(|x| x.guest == d.guest) {
            return Err(invalid(format!("{k}.guest"), format!("guest path {:?} is granted twice", d.guest)));
        }
        let writable = matches!(d.mode, DirMode::Rw);
        let quota = match (writable, d.quota) {
            (false, Some(_)) => {
                return Err(invalid(
                    format!("{k}.quota"),
                    "a quota applies only to a read-write grant (mode = \"rw\"); remove it".into(),
                ));
            }
            (false, None) => None,
            (true, q) => {
                let default = crate::files::Quota::default();
                let quota = crate::files::Quota {
                    bytes: q.as_ref().and_then(|q| q.bytes).map_or(default.bytes, |b| b.0),
                    files: q.as_ref().and_then(|q| q.files).unwrap_or(default.files),
                };
                if quota.bytes == 0 || quota.files == 0 {
                    return Err(invalid(
                        format!("{k}.quota"),
                        "bytes and files must be above zero; for no writes at all, grant mode = \"ro\"".into(),
                    ));
                }
                Some(quota)
            }
        };
        dirs.push(DirGrant { host: std::fs::canonicalize(&host).unwrap_or(host), guest: d.guest, writable, quota });
    }

    let mut allow = Vec::new();
    for (i, entry) in raw.grants.http.iter().enumerate() {
        allow.push(AllowEntry::parse(entry).map_err(|m| invalid(key(&format!(".grants.http[{i}]")), m))?);
    }
    let mut private = Vec::new();
    for (i, net) in raw.grants.private_networks.iter().enumerate() {
        private.push(Cidr::parse(net).map_err(|m| invalid(key(&format!(".grants.private_networks[{i}]")), m))?);
    }
    let memory = raw.grants.memory.map_or(DEFAULT_MEMORY, |b| b.0);
    if !(1 << 20..=MAX_MEMORY).contains(&memory) {
        return Err(invalid(
            key(".grants.memory"),
            format!("{memory} bytes is out of range: grant between 1MiB and 4GiB"),
        ));
    }
    let http_timeout = raw.grants.http_timeout.map_or(DEFAULT_HTTP_TIMEOUT, |d| d.0);
    let deadline = raw.grants.deadline.map_or(DEFAULT_DEADLINE, |d| d.0);
    let bedrock = match raw.grants.bedrock {
        None => None,
        Some(b) => Some(bedrock_grant(b, deadline).map_err(|(k, m)| invalid(key(&format!(".grants.bedrock.{k}")), m))?),
    };
    let couchbase = match raw.grants.couchbase {
        None => None,
        Some(c) => Some(
            couchbase_grant(c, connections, deadline)
                .map_err(|(k, m)| invalid(key(&format!(".grants.couchbase.{k}")), m))?,
        ),
    };
    let pool = raw.pool.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    Ok(InstanceConfig {
        name: name.to_string(),
        component: std::fs::canonicalize(&component).unwrap_or(component),
        config_json,
        embedder: raw.embedder,
        pool,
        grants: Grants {
            dirs,
            http: HttpPolicy::new(name, allow, private, http_timeout),
            memory,
            deadline,
            max_output: raw.grants.max_output.map_or(DEFAULT_MAX_OUTPUT, |b| b.0),
            bedrock,
            couchbase,
        },
    })
}

/// Validates a `[couchbase.NAME]` connection and reads its credentials (from the environment
/// when `*_env` is given), so that a missing variable is reported at load, naming its key.
fn connection(base: &Path, raw: RawConnection) -> Result<crate::couchbase::Connection, (&'static str, String)> {
    let cs = raw.connection_string.trim().to_string();
    let tls = if cs.starts_with("couchbases://") {
        true
    } else if cs.starts_with("couchbase://") {
        false
    } else {
        return Err((
            "connection_string",
            format!(
                "{cs:?} is not a Couchbase connection string: write \"couchbase://HOST\" (or couchbases:// for TLS)"
            ),
        ));
    };
    if cs.split_once("://").is_none_or(|(_, rest)| rest.is_empty()) {
        return Err(("connection_string", format!("{cs:?} names no host, like \"couchbase://127.0.0.1\"")));
    }
    if !tls && (raw.ca_file.is_some() || raw.accept_invalid_certs) {
        let k = if raw.ca_file.is_some() { "ca_file" } else { "accept_invalid_certs" };
        return Err((k, "applies only to TLS connections: use a couchbases:// connection string".into()));
    }
    let secret = |plain: Option<String>,
                  env: Option<String>,
                  key: &'static str,
                  env_key: &'static str|
     -> Result<String, (&'static str, String)> {
        match (plain, env) {
            (Some(_), Some(_)) => Err((key, format!("give either {key} or {env_key}, not both"))),
            (Some(v), None) if !v.is_empty() => Ok(v),
            (Some(_), None) => Err((key, "is empty".into())),
            (None, Some(var)) => std::env::var(&var).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                (env_key, format!("environment variable {var} is not set; set it or write {key} directly"))
            }),
            (None, None) => Err((key, format!("missing: give {key} or {env_key}"))),
        }
    };
    let username = secret(raw.username, raw.username_env, "username", "username_env")?;
    let password = secret(raw.password, raw.password_env, "password", "password_env")?;
    let ca_pem = match raw.ca_file {
        None => None,
        Some(p) => {
            let p = base.join(expand_path(&p).map_err(|m| ("ca_file", m))?);
            let pem = std::fs::read(&p).map_err(|e| ("ca_file", format!("cannot read {}: {e}", p.display())))?;
            Some(pem)
        }
    };
    Ok(crate::couchbase::Connection {
        connection_string: cs,
        username,
        password: crate::couchbase::Secret(password),
        ca_pem,
        accept_invalid_certs: raw.accept_invalid_certs,
    })
}

/// Validates `grants.couchbase`: a known connection, `bucket.scope` or `bucket.*` entries, and
/// a timeout inside the instance's deadline (as for Bedrock: time blocked in a host call is not
/// counted by epochs, so the host call must end first).
fn couchbase_grant(
    raw: RawCouchbase,
    connections: &BTreeMap<String, Arc<crate::couchbase::Connection>>,
    deadline: Duration,
) -> Result<crate::couchbase::CouchbaseGrant, (&'static str, String)> {
    let connection = connections.get(&raw.connection).cloned().ok_or_else(|| {
        let known: Vec<_> = connections.keys().map(String::as_str).collect();
        (
            "connection",
            format!(
                "no connection named {:?}; define [couchbase.{}] or use one of: {}",
                raw.connection,
                raw.connection,
                if known.is_empty() { "(none defined)".to_string() } else { known.join(", ") }
            ),
        )
    })?;
    if raw.scopes.is_empty() {
        return Err((
            "scopes",
            "list the \"bucket.scope\" pairs this instance may use (\"bucket.*\" for a whole bucket)".into(),
        ));
    }
    let mut scopes = Vec::new();
    for s in &raw.scopes {
        // Bucket names may hold dots, scope names may not: the scope is after the last one.
        match s.rsplit_once('.') {
            Some((b, sc)) if !b.is_empty() && !sc.is_empty() => {
                crate::couchbase::check_bucket_name(b).map_err(|m| ("scopes", m))?;
                if sc != "*" {
                    crate::couchbase::check_scope_name(sc).map_err(|m| ("scopes", m))?;
                }
                scopes.push((b.to_string(), sc.to_string()))
            }
            _ => return Err(("scopes", format!("{s:?} is not \"bucket.scope\" or \"bucket.*\""))),
        }
    }
    let room = deadline.saturating_sub(Duration::from_secs(1)).max(deadline / 2);
    let timeout = match raw.timeout {
        None => crate::couchbase::DEFAULT_TIMEOUT.min(room),
        Some(d) if d.0 <= room => d.0,
        Some(d) => {
            return Err((
                "timeout",
                format!(
                    "{:?} does not fit in the call's grants.deadline of {deadline:?}: at most {room:?}; raise grants.deadline to wait longer",
                    d.0
                ),
            ));
        }
    };
    Ok(crate::couchbase::CouchbaseGrant { connection_name: raw.connection, connection, scopes, timeout })
}

/// Validates `grants.bedrock`. A Bedrock call must end inside the instance's `deadline`: time
/// blocked in a host call is not counted by epochs, so a call still waiting on AWS when the
/// deadline passes is abandoned as a fault and the instance recycled. The whole-call timeout
/// therefore defaults to 30 s or the deadline less a second, whichever is shorter, and may not
/// be set longer.
fn bedrock_grant(raw: RawBedrock, deadline: Duration) -> Result<crate::bedrock::BedrockGrant, (&'static str, String)> {
    let mut g = crate::bedrock::BedrockGrant::default();
    if raw.knowledge_bases.is_empty() {
        return Err((
            "knowledge_bases",
            "list the knowledge-base ids this instance may query (or \"*\" for any)".into(),
        ));
    }
    for kb in &raw.knowledge_bases {
        if kb != "*" {
            crate::bedrock::KbIdentifier::parse(kb)
                .map_err(|m| ("knowledge_bases", format!("{m}, an ARN pattern with `*` fields, or \"*\" for any")))?;
        }
    }
    g.knowledge_bases = raw.knowledge_bases;
    g.region = raw.region.filter(|r| !r.trim().is_empty());
    if let Some(e) = raw.endpoint {
        let ok = e
            .parse::<http::Uri>()
            .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
        if !ok {
            return Err((
                "endpoint",
                format!("{e:?} is not an http(s) URL, like \"https://bedrock-agent-runtime.us-east-1.amazonaws.com\""),
            ));
        }
        g.endpoint = Some(e);
    }
    g.profile = raw.profile;
    if let Some(n) = raw.max_attempts {
        if !(1..=10).contains(&n) {
            return Err(("max_attempts", format!("{n} is out of range: between 1 and 10 attempts")));
        }
        g.max_attempts = n;
    }
    let room = deadline.saturating_sub(Duration::from_secs(1)).max(deadline / 2);
    let within = |d: Option<HumanDuration>, default: Duration, key: &'static str| match d {
        None => Ok(default.min(room)),
        Some(d) if d.0 <= room => Ok(d.0),
        Some(d) => Err((
            key,
            format!(
                "{:?} does not fit in the call's grants.deadline of {deadline:?}: at most {room:?}; raise grants.deadline to wait longer",
                d.0
            ),
        )),
    };
    g.timeout = within(raw.timeout, g.timeout, "timeout")?;
    g.attempt_timeout = within(raw.attempt_timeout, g.attempt_timeout.min(g.timeout), "attempt_timeout")?;
    g.connect_timeout = within(raw.connect_timeout, g.connect_timeout, "connect_timeout")?;
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_expand_home_variables_and_defaults() {
        // HOME and PATH are set in any test run; the odd name is not.
        let home = std::env::var("HOME").unwrap();
        assert_eq!(expand("~/x").unwrap(), format!("{home}/x"));
        assert_eq!(expand("a/${HOME}/b").unwrap(), format!("a/{home}/b"));
        assert_eq!(expand("${QUARRY_TEST_UNSET_VAR_42:-~/m}").unwrap(), format!("{home}/m"));
        assert_eq!(expand("${QUARRY_TEST_UNSET_VAR_42:-rel/dir}/f").unwrap(), "rel/dir/f");
        assert_eq!(expand("plain/path").unwrap(), "plain/path");
        assert!(expand("${QUARRY_TEST_UNSET_VAR_42}").unwrap_err().contains("not set"));
        assert!(expand("${HOME").unwrap_err().contains("unclosed"));
        assert!(expand("${BAD-NAME}").unwrap_err().contains("bad variable name"));
    }

    #[test]
    fn no_shared_cache_directory_without_a_home() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| std::ffi::OsString::from(v))
        };
        assert_eq!(default_cache_dir_from(env(&[])), None);
        assert_eq!(default_cache_dir_from(env(&[("HOME", "")])), None);
        assert_eq!(default_cache_dir_from(env(&[("HOME", "/home/q")])), Some(PathBuf::from("/home/q/.cache/quarry")));
        assert_eq!(
            default_cache_dir_from(env(&[("HOME", "/home/q"), ("XDG_CACHE_HOME", "/c")])),
            Some(PathBuf::from("/c/quarry"))
        );
        assert_eq!(default_cache_dir_from(env(&[("QUARRY_CACHE_DIR", "/q")])), Some(PathBuf::from("/q")));
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(ByteSize::parse("64MiB").unwrap().0, 64 << 20);
        assert_eq!(ByteSize::parse("1 GiB").unwrap().0, 1 << 30);
        assert_eq!(ByteSize::parse("100MB").unwrap().0, 100_000_000);
        assert!(ByteSize::parse("64 parsecs").unwrap_err().contains("64MiB"));
        assert!(ByteSize::parse("-1MiB").is_err());
        assert_eq!(HumanDuration::parse("250ms").unwrap().0, Duration::from_millis(250));
        assert_eq!(HumanDuration::parse("2m").unwrap().0, Duration::from_secs(120));
        assert!(HumanDuration::parse("10").unwrap_err().contains("10s"));
        assert!(HumanDuration::parse("0s").is_err());
    }
}
