//! `[corpora.NAME]` (where the operator keeps a corpus) and `grants.corpora` (which corpora an
//! instance may open, and whether it may write them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Duration;

use quarry_support::values::{ByteSize, HumanDuration, KeyError, expand_path, valid_name};
use serde::Deserialize;

/// A corpus holds at most this many bytes (texts, metadata, fields, vectors) unless its section
/// says otherwise: past wasm32's 4 GiB, which an index in a guest could never reach.
pub const DEFAULT_MAX_BYTES: u64 = 8 << 30;

/// `[corpora.NAME]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSection {
    backend: Option<String>,
    dir: Option<PathBuf>,
    max_bytes: Option<ByteSize>,
    connection: Option<String>,
    bucket: Option<String>,
    scope: Option<String>,
    collection: Option<String>,
    index: Option<String>,
    timeout: Option<HumanDuration>,
    lease_ttl: Option<HumanDuration>,
}

/// Where a corpus is kept.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    /// In a directory of this host (`backend = "local"`, the default).
    Local {
        /// The directory of its generations.
        dir: PathBuf,
    },
    /// In a collection of a Couchbase cluster (`backend = "couchbase"`), shared by every host
    /// that names it.
    Couchbase(CouchbaseTarget),
}

/// A corpus's place in a Couchbase cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct CouchbaseTarget {
    /// The `[couchbase.NAME]` connection.
    pub connection: String,
    /// The bucket, scope and collection.
    pub bucket: String,
    /// The scope.
    pub scope: String,
    /// The collection (one corpus per collection).
    pub collection: String,
    /// The Search index over it (made when missing).
    pub index: String,
    /// The bound on each call to the cluster.
    pub timeout: Duration,
    /// How long a writer's lease lasts unless renewed: how soon another host takes over from a
    /// writer that died.
    pub lease_ttl: Duration,
    /// The connection itself, once the host has found `[couchbase.NAME]` (after every section
    /// is read).
    #[cfg(feature = "couchbase")]
    pub resolved: Option<Arc<quarry_couchbase::Connection>>,
}

/// The name every instance opens its own corpus by (`corpus = "self"` in a tool's config): kept
/// by the host in its cache, private to the instance, read-write without a `grants.corpora`
/// entry. A tool without a corpus of the host's keeps its index there.
pub const OWN: &str = "self";

/// A Couchbase call waits at most this long unless the section says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// A writer's lease lasts this long unless renewed, unless the section says otherwise.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// A corpus the operator configured.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusSection {
    /// Its name (`[corpora.NAME]`).
    pub name: String,
    /// Where it is kept.
    pub backend: Backend,
    /// The most bytes it may hold; a commit past it is refused.
    pub max_bytes: u64,
}

impl CorpusSection {
    /// Its directory, when it is kept on this host.
    pub fn dir(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Local { dir } => Some(dir),
            Backend::Couchbase(_) => None,
        }
    }

    /// What names it among the corpora this process has open: its directory, or its cluster
    /// (by connection string, not by the connection's name, which two configs may give two
    /// clusters), collection and index.
    pub fn place(&self) -> String {
        match &self.backend {
            Backend::Local { dir } => dir.display().to_string(),
            Backend::Couchbase(t) => {
                #[cfg(feature = "couchbase")]
                let cluster = t.resolved.as_ref().map_or(t.connection.as_str(), |c| c.connection_string.as_str());
                #[cfg(not(feature = "couchbase"))]
                let cluster = t.connection.as_str();
                format!("{cluster}/{}.{}.{}#{}", t.bucket, t.scope, t.collection, t.index)
            }
        }
    }
}

/// Validates `[corpora.NAME]`; an error's key is relative to the section.
pub fn section(name: &str, raw: RawSection, base: &Path) -> Result<CorpusSection, KeyError> {
    if !valid_name(name) {
        return Err(KeyError::new("", format!("{name:?} is not a corpus name: use a-z, 0-9, _ and -, at most 64")));
    }
    if name == OWN {
        return Err(KeyError::new(
            "",
            "`self` names each instance's own corpus, which the host keeps in its cache; give this corpus another name",
        ));
    }
    let max_bytes = raw.max_bytes.map_or(DEFAULT_MAX_BYTES, |b| b.0);
    if max_bytes == 0 {
        return Err(KeyError::new("max_bytes", "a corpus needs room: give a size such as \"1GiB\""));
    }
    let couchbase_keys = [
        ("connection", raw.connection.is_some()),
        ("bucket", raw.bucket.is_some()),
        ("scope", raw.scope.is_some()),
        ("collection", raw.collection.is_some()),
        ("index", raw.index.is_some()),
        ("timeout", raw.timeout.is_some()),
        ("lease_ttl", raw.lease_ttl.is_some()),
    ];
    let backend = match raw.backend.as_deref() {
        None | Some("local") => {
            if let Some((k, _)) = couchbase_keys.iter().find(|(_, set)| *set) {
                return Err(KeyError::new(*k, "applies to backend = \"couchbase\" only; a local corpus has a dir"));
            }
            let dir = raw.dir.ok_or_else(|| KeyError::new("dir", "say where the corpus is kept: dir = \"path\""))?;
            Backend::Local { dir: base.join(expand_path(&dir).map_err(|m| KeyError::new("dir", m))?) }
        }
        Some("couchbase") => {
            if raw.dir.is_some() {
                return Err(KeyError::new("dir", "a Couchbase corpus is kept in its collection, not a dir; remove it"));
            }
            let need = |v: Option<String>, key: &'static str, example: &str| {
                v.filter(|v| !v.is_empty())
                    .ok_or_else(|| KeyError::new(key, format!("missing: name it, like {key} = \"{example}\"")))
            };
            let connection = need(raw.connection, "connection", "cluster")?;
            let bucket = need(raw.bucket, "bucket", "quarry")?;
            let scope = need(raw.scope, "scope", "corpora")?;
            let collection = need(raw.collection, "collection", name)?;
            let index = raw.index.unwrap_or_else(|| format!("quarry-{name}"));
            let timeout = raw.timeout.map_or(DEFAULT_TIMEOUT, |t| t.0);
            let lease_ttl = raw.lease_ttl.map_or(DEFAULT_LEASE_TTL, |t| t.0);
            if timeout.is_zero() || lease_ttl < Duration::from_secs(1) {
                let k = if timeout.is_zero() { "timeout" } else { "lease_ttl" };
                return Err(KeyError::new(k, "give a duration of a second or more, like \"30s\""));
            }
            #[cfg(not(feature = "couchbase"))]
            {
                let _ = (connection, bucket, scope, collection, index, timeout, lease_ttl);
                return Err(KeyError::new(
                    "backend",
                    "this host was built without Couchbase (cargo feature `couchbase`); use backend = \"local\", or a host built with it",
                ));
            }
            #[cfg(feature = "couchbase")]
            Backend::Couchbase(CouchbaseTarget {
                connection,
                bucket,
                scope,
                collection,
                index,
                timeout,
                lease_ttl,
                resolved: None,
            })
        }
        Some(other) => {
            return Err(KeyError::new(
                "backend",
                format!(
                    "unknown backend {other:?}: backend = \"local\" (this host's disk) or \"couchbase\" (a collection of a cluster)"
                ),
            ));
        }
    };
    Ok(CorpusSection { name: name.to_string(), backend, max_bytes })
}

/// How an instance may use a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Search it.
    #[default]
    Ro,
    /// Search and write it.
    Rw,
}

/// One entry of `grants.corpora` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGrant {
    name: String,
    #[serde(default)]
    mode: Mode,
}

/// The corpora an instance may open (`grants.corpora`), by name, and its own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CorpusGrant {
    /// Each granted corpus's section and mode.
    pub corpora: BTreeMap<String, (Arc<CorpusSection>, Mode)>,
    /// Where the host keeps the instance's own corpora ([`OWN`]), one per shape; `None` when
    /// the host has no cache directory.
    pub own: Option<PathBuf>,
}

impl CorpusGrant {
    /// The instance's own corpus for vectors of `shape`: a local corpus in [`CorpusGrant::own`]
    /// (one directory per shape, so that another model's dimension starts another corpus rather
    /// than failing to open the first).
    pub fn own_section(&self, shape: rag_core::corpus::Shape) -> Option<CorpusSection> {
        let metric = match shape.metric {
            rag_core::corpus::Metric::Cosine => "cosine",
            rag_core::corpus::Metric::Dot => "dot",
        };
        let dir = self.own.as_ref()?.join(format!("{}-{metric}", shape.dimension));
        Some(CorpusSection { name: OWN.to_string(), backend: Backend::Local { dir }, max_bytes: DEFAULT_MAX_BYTES })
    }
}

/// Validates `grants.corpora`: each a configured corpus, named once; `own` is where the host
/// keeps the instance's own corpora.
pub fn grant(
    raw: Vec<RawGrant>,
    sections: &BTreeMap<String, Arc<CorpusSection>>,
    own: Option<PathBuf>,
) -> Result<CorpusGrant, KeyError> {
    let mut corpora = BTreeMap::new();
    for (i, g) in raw.into_iter().enumerate() {
        let key = format!("[{i}].name");
        if g.name == OWN {
            return Err(KeyError::new(
                key,
                "every instance opens its own corpus `self` without a grant; remove this entry",
            ));
        }
        let Some(section) = sections.get(&g.name) else {
            let known: Vec<&str> = sections.keys().map(String::as_str).collect();
            let shown = if valid_name(&g.name) { g.name.as_str() } else { "NAME" };
            return Err(KeyError::new(
                key,
                format!(
                    "no corpus named {}; define [corpora.{shown}] with a dir, or use one of: {}",
                    quarry_support::text::quoted_prefix(&g.name, 64),
                    if known.is_empty() { "(none defined)".to_string() } else { known.join(", ") }
                ),
            ));
        };
        if corpora.insert(g.name.clone(), (section.clone(), g.mode)).is_some() {
            return Err(KeyError::new(key, format!("corpus {:?} is granted twice; keep one entry", g.name)));
        }
    }
    Ok(CorpusGrant { corpora, own })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(toml_text: &str) -> RawSection {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn sections_and_grants_are_checked_with_the_key_at_fault() {
        let base = Path::new("/etc/quarry");
        let s = section("rclone", raw("dir = \"corpora/rclone\""), base).unwrap();
        assert_eq!(s.dir(), Some(Path::new("/etc/quarry/corpora/rclone")));
        assert_eq!(s.max_bytes, DEFAULT_MAX_BYTES);
        let e = section("rclone", raw("backend = \"s3\"\ndir = \"d\""), base).unwrap_err();
        assert_eq!(e.key, "backend");
        assert!(e.message.contains("backend = \"local\""), "{}", e.message);
        let cb = section(
            "rclone",
            raw("backend = \"couchbase\"\nconnection = \"c\"\nbucket = \"b\"\nscope = \"s\"\ncollection = \"k\""),
            base,
        )
        .unwrap();
        let Backend::Couchbase(t) = &cb.backend else { panic!("{cb:?}") };
        assert_eq!((t.index.as_str(), t.timeout, t.lease_ttl), ("quarry-rclone", DEFAULT_TIMEOUT, DEFAULT_LEASE_TTL));
        assert_eq!(cb.dir(), None);
        let e = section("rclone", raw("backend = \"couchbase\"\nconnection = \"c\"\nbucket = \"b\""), base);
        assert_eq!(e.unwrap_err().key, "scope");
        let e = section("rclone", raw("dir = \"d\"\nbucket = \"b\""), base).unwrap_err();
        assert_eq!(e.key, "bucket");
        let e = section("rclone", raw("backend = \"couchbase\"\ndir = \"d\""), base).unwrap_err();
        assert_eq!(e.key, "dir");
        assert_eq!(section("rclone", raw(""), base).unwrap_err().key, "dir");
        assert_eq!(section("rclone", raw("dir = \"d\"\nmax_bytes = 0"), base).unwrap_err().key, "max_bytes");
        assert!(section("Bad Name", raw("dir = \"d\""), base).is_err());

        let sections = BTreeMap::from([("rclone".to_string(), Arc::new(s))]);
        let entries = |t: &str| -> Vec<RawGrant> {
            #[derive(Deserialize)]
            struct G {
                corpora: Vec<RawGrant>,
            }
            toml::from_str::<G>(t).unwrap().corpora
        };
        let g = grant(entries(r#"corpora = [{ name = "rclone", mode = "rw" }]"#), &sections, None).unwrap();
        assert_eq!(g.corpora["rclone"].1, Mode::Rw);
        assert_eq!(
            grant(entries(r#"corpora = [{ name = "rclone" }]"#), &sections, None).unwrap().corpora["rclone"].1,
            Mode::Ro
        );
        let e = grant(entries(r#"corpora = [{ name = "other" }]"#), &sections, None).unwrap_err();
        assert_eq!(e.key, "[0].name");
        assert!(e.message.contains("define [corpora.other]") && e.message.contains("rclone"), "{}", e.message);
        let e = grant(entries(r#"corpora = [{ name = "rclone" }, { name = "rclone", mode = "rw" }]"#), &sections, None);
        assert!(e.unwrap_err().message.contains("granted twice"));
        let e = grant(entries(r#"corpora = [{ name = "self", mode = "rw" }]"#), &sections, None).unwrap_err();
        assert!(e.message.contains("without a grant"), "{}", e.message);
        assert!(section("self", raw("dir = \"d\""), base).unwrap_err().message.contains("own corpus"));
        let g = grant(Vec::new(), &sections, Some(PathBuf::from("/c/instances/a-0/corpus"))).unwrap();
        let own = g.own_section(rag_core::corpus::Shape { dimension: 384, metric: rag_core::corpus::Metric::Cosine });
        assert_eq!(own.unwrap().dir(), Some(Path::new("/c/instances/a-0/corpus/384-cosine")));
    }
}
