//! The host configuration file (TOML): which tool instances to load, and what
//! each one is granted.
//!
//! ```toml
//! [host]
//! cache_dir = "/var/cache/quarry"   # precompiled components; default: $XDG_CACHE_HOME/quarry
//! max_component_size = "64MiB"      # larger component files are refused before compiling
//! compile_memory = "1GiB"           # what compiling one component may allocate (in a worker
//! compile_timeout = "60s"           #  process of the quarry binary), and how long it may take
//!
//! signed_by = { "ghcr.io/acme" = "keys/cosign.pub" }  # oci:// components under this registry or
//!                                   #  repository prefix must carry a cosign signature by this key
//!
//! [tools.manual]                    # one tool instance; its tools are `manual.<tool>`
//! component = "plugins/chapter-rag.wasm"   # relative to this file; or "builtin:chapter-rag"
//!                                   # (the components installed beside quarry, see support::builtin),
//!                                   # or "oci://REGISTRY/REPO@sha256:..." (or :TAG, pinned in quarry.lock)
//! signed_by = "keys/cosign.pub"     # oci:// only: refuse it unless signed by this key (before [host]'s)
//! embedder = "minilm"               # an [embedders.*] entry; required if the component imports one
//! pool = 2                          # instances serving calls in parallel (default 1; embedders:
//!                                   #  one per core); each has its own grants.memory
//! config = { path = "/manual/MANUAL.md" }  # passed to `open` as JSON
//!
//! [tools.manual.grants]
//! dirs = [{ host = "manuals", guest = "/manual", mode = "ro" }]  # mode: "ro" (default) or "rw"
//!                                   # rw grants: quota = { bytes = "1GiB", files = 10000 } (the defaults)
//! http = ["https://example.com", "http://*.internal.example:8080"]
//! private_networks = ["127.0.0.1/32"]  # the only way to reach loopback/private/link-local/metadata addresses
//! memory = "256MiB"                 # linear-memory limit
//! deadline = "10s"                  # per call, guest time and host calls together
//! prepare_deadline = "30m"          # the index build before the first call (default: the larger
//!                                   #  of deadline and 10 minutes); calls wait for it within deadline
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
//!
//! This module reads what every instance has (`[host]`, `[tools.*]`, `[embedders.*]`, the
//! limits of [`crate::support::limits`]) and `[serve]` ([`ServeConfig`]); each capability parses its own keys
//! of the grants and its own sections ([`crate::capability`]), and its errors come back here to
//! be given the file and the full key.

mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::capability::{self, CapabilitySections, Keyed};
use crate::support::builtin;
use crate::support::limits::{DEFAULT_DEADLINE, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY, MAX_MEMORY, MIN_PREPARE_DEADLINE};
use crate::support::values::{ByteSize, HumanDuration, KeyError, expand_path, valid_name};

pub use serve::ServeConfig;

/// What a missing config file's error adds: how to make one, or name another.
const MISSING: &str = "; write one for your documents with `quarry init --manual FILE` (or --docx FILE), or name another with -c FILE or $QUARRY_CONFIG";

/// A configuration error, always naming the file and the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}{}", if source.kind() == std::io::ErrorKind::NotFound { MISSING } else { "" })]
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
    /// The largest component file compiled (`[host] max_component_size`).
    pub max_component_bytes: u64,
    /// The memory and time one compilation may take (`[host] compile_memory`,
    /// `compile_timeout`).
    pub compile_limits: crate::support::limits::CompileLimits,
    /// Tool instances by name.
    pub tools: BTreeMap<String, InstanceConfig>,
    /// Embedder instances by name.
    pub embedders: BTreeMap<String, InstanceConfig>,
    /// The capabilities' operator-level sections (`[couchbase.NAME]`, `[models.NAME]`).
    pub sections: CapabilitySections,
    /// Limits of `quarry serve` (`[serve]`); flags override them.
    pub serve: ServeConfig,
}

/// One configured instance of a component.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceConfig {
    /// The instance name (the key under `[tools]` or `[embedders]`).
    pub name: String,
    /// Absolute path of the component file (for an `oci://` component, where the host keeps
    /// the version it runs, fetched there by `quarry::oci::fetch` before the registry loads).
    pub component: PathBuf,
    /// The `oci://` reference the component comes from, when it comes from a registry.
    pub oci: Option<String>,
    /// The public key whose cosign signature the `oci://` component must carry: the instance's
    /// `signed_by`, else the `[host] signed_by` entry of its registry or repository.
    pub signed_by: Option<PathBuf>,
    /// The `config` table as a JSON object, passed to `open`/`load`.
    pub config_json: String,
    /// The embedder instance serving this tool's `embedder` import.
    pub embedder: Option<String>,
    /// What the instance may touch.
    pub grants: Grants,
    /// How many instances serve in parallel (embedders: one per core by default; tools: 1).
    pub pool: usize,
    /// Whether MCP lists its tools and prompts by their own names (`search`) rather than
    /// `instance.search`: for clients that expect a server's fixed names. The host refuses a
    /// listed name that another instance's tool or prompt already has.
    pub bare_names: bool,
    /// URI schemes beside `quarry://self/` whose resources the operator gave this instance
    /// (`resource_schemes = ["test"]`: `test://…`), for a component whose clients expect its
    /// own URIs. Each scheme is one instance's.
    pub resource_schemes: Vec<String>,
}

impl InstanceConfig {
    /// The name MCP lists this instance's tool or prompt `name` under.
    pub fn listed_name(&self, name: &str) -> String {
        if self.bare_names { name.to_string() } else { format!("{}.{name}", self.name) }
    }
}

/// What an instance may touch: the limits every instance has, and each capability's grant
/// (read through this type as if they were its own fields). Everything else is denied.
#[derive(Debug, Clone, PartialEq)]
pub struct Grants {
    /// Linear-memory limit in bytes.
    pub memory: u64,
    /// Per-call deadline.
    pub deadline: Duration,
    /// Deadline of the instance's preparation (`prepare`: an index build).
    pub prepare_deadline: Duration,
    /// Largest output of one call, in bytes.
    pub max_output: u64,
    /// The capabilities' grants.
    pub caps: capability::Grants,
}

impl std::ops::Deref for Grants {
    type Target = capability::Grants;

    fn deref(&self) -> &capability::Grants {
        &self.caps
    }
}

impl std::ops::DerefMut for Grants {
    fn deref_mut(&mut self) -> &mut capability::Grants {
        &mut self.caps
    }
}

/// The config file: the host's own tables, and the capabilities' (`[couchbase.NAME]`,
/// `[models.NAME]`), read in one pass ([`Keyed`]).
type RawFile = Keyed<RawConfig, capability::RawCapabilitySections>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    host: Keyed<RawHost, capability::RawCapabilityHost>,
    #[serde(default)]
    tools: BTreeMap<String, RawInstance>,
    #[serde(default)]
    embedders: BTreeMap<String, RawInstance>,
    serve: Option<serve::RawServe>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHost {
    cache_dir: Option<PathBuf>,
    max_component_size: Option<crate::support::values::ByteSize>,
    compile_memory: Option<ByteSize>,
    compile_timeout: Option<HumanDuration>,
    #[serde(default)]
    signed_by: BTreeMap<String, PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    component: PathBuf,
    #[serde(default)]
    config: toml::Table,
    embedder: Option<String>,
    pool: Option<usize>,
    signed_by: Option<PathBuf>,
    #[serde(default)]
    bare_names: bool,
    #[serde(default)]
    resource_schemes: Vec<String>,
    #[serde(default)]
    grants: Keyed<RawLimits, capability::RawCapabilityGrants>,
}

/// The keys of `[tools.NAME.grants]` that every instance has; the rest are the capabilities'.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<ByteSize>,
    deadline: Option<HumanDuration>,
    prepare_deadline: Option<HumanDuration>,
    max_output: Option<ByteSize>,
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
        let Keyed { core: raw, caps: raw_sections } = toml::from_str::<RawFile>(text).map_err(|e| {
            ConfigError::Parse { path: path.to_path_buf(), message: e.to_string().trim_end().to_string() }
        })?;
        let Keyed { core: raw_host, caps: raw_host_caps } = raw.host;
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        let base = std::path::absolute(&base).unwrap_or(base);
        let invalid = |e: KeyError| ConfigError::Invalid { path: path.to_path_buf(), key: e.key, message: e.message };

        let cache_dir = match raw_host.cache_dir {
            Some(dir) => Some(base.join(expand_path(&dir).map_err(|m| invalid(KeyError::new("host.cache_dir", m)))?)),
            None => default_cache_dir(),
        };
        let max_component_bytes = match raw_host.max_component_size {
            None => crate::support::limits::DEFAULT_MAX_COMPONENT_BYTES,
            Some(b) if (1 << 20..=1 << 30).contains(&b.0) => b.0,
            Some(b) => {
                return Err(invalid(KeyError::new(
                    "host.max_component_size",
                    format!("{} bytes is out of range: between 1MiB and 1GiB", b.0),
                )));
            }
        };
        let mut compile_limits = crate::support::limits::CompileLimits::default();
        match raw_host.compile_memory {
            None => {}
            Some(b) if (64 << 20..=64 << 30).contains(&b.0) => compile_limits.memory = b.0,
            Some(b) => {
                return Err(invalid(KeyError::new(
                    "host.compile_memory",
                    format!("{} bytes is out of range: between 64MiB and 64GiB", b.0),
                )));
            }
        }
        match raw_host.compile_timeout {
            None => {}
            Some(d) if (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&d.0) => compile_limits.time = d.0,
            Some(d) => {
                return Err(invalid(KeyError::new(
                    "host.compile_timeout",
                    format!("{:?} is out of range: between 1s and 1h", d.0),
                )));
            }
        }
        let mut keys = BTreeMap::new();
        for (prefix, file) in raw_host.signed_by {
            let key = format!("host.signed_by.{prefix:?}");
            if prefix.contains("://") || prefix.contains('@') || prefix.is_empty() {
                return Err(invalid(KeyError::new(
                    key,
                    "name a registry (`\"ghcr.io\"`) or a repository prefix (`\"ghcr.io/acme\"`), without oci:// or a tag",
                )));
            }
            let file = public_key(&base, &file).map_err(|m| invalid(KeyError::new(key, m)))?;
            keys.insert(prefix.trim_end_matches('/').to_string(), file);
        }
        let sections = CapabilitySections::parse(raw_sections, raw_host_caps, &base).map_err(invalid)?;
        let cx = InstanceContext {
            config: path,
            base: &base,
            sections: &sections,
            cache_dir: cache_dir.as_deref(),
            keys: &keys,
        };
        let mut embedders = BTreeMap::new();
        for (name, inst) in raw.embedders {
            if inst.embedder.is_some() {
                return Err(invalid(KeyError::new(
                    format!("embedders.{name}.embedder"),
                    "an embedder cannot itself use an embedder; remove this key",
                )));
            }
            check_pool("embedders", &name, inst.pool).map_err(invalid)?;
            let cfg = validate_instance(&cx, "embedders", &name, inst).map_err(invalid)?;
            embedders.insert(name, cfg);
        }
        let mut tools = BTreeMap::new();
        for (name, mut inst) in raw.tools {
            check_pool("tools", &name, inst.pool).map_err(invalid)?;
            // One instance unless asked: each costs its own grants.memory, and a tool that
            // waits on a service gains little from more.
            inst.pool = Some(inst.pool.unwrap_or(1));
            let cfg = validate_instance(&cx, "tools", &name, inst).map_err(invalid)?;
            if let Some(e) = &cfg.embedder
                && !embedders.contains_key(e)
            {
                let known: Vec<_> = embedders.keys().map(String::as_str).collect();
                return Err(invalid(KeyError::new(
                    format!("tools.{name}.embedder"),
                    format!(
                        "no embedder named {e:?}; define [embedders.{e}] or use one of: {}",
                        if known.is_empty() { "(none defined)".to_string() } else { known.join(", ") }
                    ),
                )));
            }
            if let Some((other, scheme)) = tools.values().find_map(|o: &InstanceConfig| {
                cfg.resource_schemes.iter().find(|s| o.resource_schemes.contains(s)).map(|s| (o.name.clone(), s))
            }) {
                return Err(invalid(KeyError::new(
                    format!("tools.{name}.resource_schemes"),
                    format!(
                        "scheme {scheme:?} is given to instance {other:?} too; a scheme's resources are one instance's"
                    ),
                )));
            }
            tools.insert(name, cfg);
        }
        let serve = raw.serve.map_or_else(|| Ok(ServeConfig::default()), serve::RawServe::validate).map_err(invalid)?;
        let config = Config {
            path: path.to_path_buf(),
            cache_dir,
            max_component_bytes,
            compile_limits,
            tools,
            embedders,
            sections,
            serve,
        };
        config.check_overlaps(&base).map_err(invalid)?;
        Ok(config)
    }
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
    /// Refuses a read-write directory grant that holds code, models or config the host trusts:
    /// the precompiled cache (native code), a component's directory (hot swap would load what a
    /// guest wrote there, with every instance's grants), a `[models.NAME]` directory (the host's
    /// native ONNX parser reads it) or the config file's directory. A model directory is also
    /// refused the other way round: a read-write grant inside it could add what its manifest
    /// names.
    fn check_overlaps(&self, config_dir: &Path) -> Result<(), KeyError> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mut protected: Vec<(String, PathBuf)> = vec![("the config file's directory".into(), canon(config_dir))];
        let host_read: Vec<(String, PathBuf)> = self
            .sections
            .host_read_dirs()
            .into_iter()
            .map(|(section, dir)| (format!("the directory of {section}"), canon(&dir)))
            .collect();
        let mut host_read = host_read;
        if let Some(c) = &self.cache_dir {
            protected.push(("the precompiled-component cache (host.cache_dir)".into(), canon(c)));
            // The instances' own corpora: the host writes them, no guest may beside it.
            host_read.push(("the instances' own corpora".into(), canon(c).join(PRIVATE_DIRS)));
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
                for (key, dir) in inst.grants.caps.writable_dirs() {
                    let granted = canon(&dir);
                    let held = protected
                        .iter()
                        .find(|(_, p)| p.starts_with(&granted))
                        .or_else(|| host_read.iter().find(|(_, p)| p.starts_with(&granted) || granted.starts_with(p)));
                    if let Some((what, path)) = held {
                        return Err(KeyError::new(
                            format!("{section}.{name}.grants.{key}"),
                            format!(
                                "the read-write grant of {} reaches {what} ({}): a component could rewrite what the host loads and runs; grant a directory that holds none of these and is in none of the model directories, or make this grant read-only",
                                dir.display(),
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

/// What every instance is validated against.
#[derive(Clone, Copy)]
struct InstanceContext<'a> {
    /// The config file.
    config: &'a Path,
    /// The config file's directory.
    base: &'a Path,
    sections: &'a CapabilitySections,
    cache_dir: Option<&'a Path>,
    /// `[host] signed_by`: registry or repository prefix → public key file.
    keys: &'a BTreeMap<String, PathBuf>,
}

/// `file` (relative to the config's directory), checked to be a public key signatures can be
/// verified with.
fn public_key(base: &Path, file: &Path) -> Result<PathBuf, String> {
    let file = base.join(expand_path(file)?);
    #[cfg(feature = "oci")]
    quarry_oci::PublicKey::load(&file)?;
    Ok(file)
}

/// The key of `[host] signed_by` whose registry or repository prefix is the longest that
/// `reference` is under.
fn host_key_for(reference: &str, keys: &BTreeMap<String, PathBuf>) -> Option<PathBuf> {
    #[cfg(not(feature = "oci"))]
    let _ = (reference, keys);
    #[cfg(feature = "oci")]
    {
        let repo = quarry_oci::OciRef::parse(reference).ok()?.repository();
        keys.iter()
            .filter(|(prefix, _)| {
                repo.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, file)| file.clone())
    }
    #[cfg(not(feature = "oci"))]
    None
}

fn validate_instance(
    cx: &InstanceContext<'_>,
    section: &str,
    name: &str,
    raw: RawInstance,
) -> Result<InstanceConfig, KeyError> {
    let InstanceContext { base, sections, cache_dir, .. } = *cx;
    let key = |k: &str| format!("{section}.{name}{k}");
    if !valid_name(name) {
        return Err(KeyError::new(
            format!("{section}.{name}"),
            "instance names use lowercase letters, digits, `_` and `-` (at most 64)",
        ));
    }
    let oci = raw.component.to_str().filter(|c| c.starts_with(OCI_SCHEME)).map(str::to_string);
    let component = match (&oci, builtin::name_of(&raw.component)) {
        // Fetched before the registry loads (crate::oci::fetch); checked here.
        (Some(r), _) => oci_component_path(r, cache_dir).map_err(|m| KeyError::new(key(".component"), m))?,
        (None, Some(n)) => {
            builtin::resolve(builtin::Kind::Component, n).map_err(|m| KeyError::new(key(".component"), m))?
        }
        (None, None) => base.join(expand_path(&raw.component).map_err(|m| KeyError::new(key(".component"), m))?),
    };
    if oci.is_none() && !component.is_file() {
        return Err(KeyError::new(
            key(".component"),
            format!(
                "component file {} does not exist; build it (`make components`, or `make demo` for the main job's) or fix the path (relative paths start at the config file's directory)",
                component.display()
            ),
        ));
    }
    let signed_by = match (&oci, raw.signed_by) {
        (Some(_), Some(file)) => Some(public_key(base, &file).map_err(|m| KeyError::new(key(".signed_by"), m))?),
        (Some(r), None) => host_key_for(r, cx.keys),
        (None, Some(_)) => {
            return Err(KeyError::new(
                key(".signed_by"),
                "signatures are checked on components from registries (component = \"oci://...\"); remove this key or name an oci:// component",
            ));
        }
        (None, None) => None,
    };
    let config_json = serde_json::to_string(&raw.config)
        .map_err(|e| KeyError::new(key(".config"), format!("cannot be expressed as JSON: {e}")))?;
    let Keyed { core: limits, caps: raw_caps } = raw.grants;
    let memory = limits.memory.map_or(DEFAULT_MEMORY, |b| b.0);
    if !(1 << 20..=MAX_MEMORY).contains(&memory) {
        return Err(KeyError::new(
            key(".grants.memory"),
            format!("{memory} bytes is out of range: grant between 1MiB and 4GiB"),
        ));
    }
    let deadline = limits.deadline.map_or(DEFAULT_DEADLINE, |d| d.0);
    let prepare_deadline = limits.prepare_deadline.map_or(deadline.max(MIN_PREPARE_DEADLINE), |d| d.0);
    let max_output = limits.max_output.map_or(DEFAULT_MAX_OUTPUT, |b| b.0);
    let private = cache_dir.map(|c| private_dir(c, cx.config, name));
    let cx = capability::GrantContext { instance: name, base, deadline, private_dir: private.as_deref() };
    let caps = capability::Grants::parse(raw_caps, sections, &cx).map_err(|e| e.under(&key(".grants")))?;
    let pool = raw.pool.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if raw.bare_names && section != "tools" {
        return Err(KeyError::new(key(".bare_names"), "only tool instances are listed by name; remove this key"));
    }
    if !raw.resource_schemes.is_empty() && section != "tools" {
        return Err(KeyError::new(key(".resource_schemes"), "only tool instances have resources; remove this key"));
    }
    for scheme in &raw.resource_schemes {
        let ok = scheme.len() <= 32
            && scheme.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && scheme.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+.-".contains(&b));
        if !ok || scheme == "quarry" {
            return Err(KeyError::new(
                key(".resource_schemes"),
                format!(
                    "{} is not a scheme an instance can be given: lowercase letters, digits, `+`, `.` and `-`, at most 32, not `quarry` (the host's own)",
                    crate::support::text::quoted_prefix(scheme, 40)
                ),
            ));
        }
    }
    Ok(InstanceConfig {
        name: name.to_string(),
        component: std::fs::canonicalize(&component).unwrap_or(component),
        oci,
        signed_by,
        config_json,
        embedder: raw.embedder,
        pool,
        bare_names: raw.bare_names,
        resource_schemes: raw.resource_schemes,
        grants: Grants { memory, deadline, prepare_deadline, max_output, caps },
    })
}

/// The directory the host keeps for instance `name` of the config file `config` alone (its own
/// corpus, [`quarry_corpus::config::OWN`]): `<cache_dir>/instances/<name>-<12 hex digits>`, the
/// digits from the config file's canonical path, so that processes serving one config share it
/// and two configs with an instance of one name do not.
pub fn private_dir(cache_dir: &Path, config: &Path, name: &str) -> PathBuf {
    use sha2::Digest as _;
    let canon = std::fs::canonicalize(config).unwrap_or_else(|_| std::path::absolute(config).unwrap_or_default());
    let digest = sha2::Sha256::digest(canon.as_os_str().as_encoded_bytes());
    cache_dir.join(PRIVATE_DIRS).join(format!("{name}-{}", &hex::encode(digest)[..12]))
}

/// The folder of the cache under which each instance's private directory lies.
const PRIVATE_DIRS: &str = "instances";

/// The scheme of a registry reference in the config.
pub const OCI_SCHEME: &str = "oci://";

/// Where the host keeps the version of `reference` it runs, in the cache (`quarry::oci::fetch` puts
/// it there before the registry loads); an error when the
/// reference does not parse, there is no private cache, or this host has no registry client.
fn oci_component_path(reference: &str, cache_dir: Option<&Path>) -> Result<PathBuf, String> {
    if !cfg!(feature = "oci") {
        return Err(format!(
            "{reference:?}: this quarry was built without registry support (cargo feature `oci`); build the host with its default features (`make host`), or name a component file"
        ));
    }
    #[cfg(feature = "oci")]
    quarry_oci::OciRef::parse(reference).map_err(|e| e.to_string())?;
    let cache = cache_dir.ok_or_else(|| {
        "an oci:// component is kept in the host's private cache, and there is none: set [host] cache_dir".to_string()
    })?;
    use sha2::Digest as _;
    let name = hex::encode(sha2::Sha256::digest(reference.as_bytes()));
    Ok(cache.join("oci/refs").join(format!("{}.wasm", &name[..16])))
}

/// A pool of `[SECTION.NAME]` has 1 to 64 instances.
fn check_pool(section: &str, name: &str, pool: Option<usize>) -> Result<(), KeyError> {
    if pool == Some(0) || pool.is_some_and(|p| p > 64) {
        return Err(KeyError::new(format!("{section}.{name}.pool"), "pool must be between 1 and 64 instances"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_longest_registry_or_repository_prefix_names_the_key() {
        let keys: BTreeMap<String, PathBuf> =
            [("ghcr.io", "a.pub"), ("ghcr.io/acme", "b.pub"), ("127.0.0.1:5000", "c.pub")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
                .collect();
        let key = |r: &str| host_key_for(r, &keys).map(|p| p.display().to_string());
        assert_eq!(key("oci://ghcr.io/acme/echo:v1").as_deref(), Some("b.pub"));
        assert_eq!(key("oci://ghcr.io/acmeish/echo:v1").as_deref(), Some("a.pub"));
        assert_eq!(key(&format!("oci://127.0.0.1:5000/t/x@sha256:{}", "0".repeat(64))).as_deref(), Some("c.pub"));
        assert_eq!(key("oci://127.0.0.1:5001/t/x:v1"), None);
    }

    use super::*;

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
}
