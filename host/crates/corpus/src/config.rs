//! `[corpora.NAME]` (where the operator keeps a corpus) and `grants.corpora` (which corpora an
//! instance may open, and whether it may write them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quarry_support::values::{ByteSize, KeyError, expand_path, valid_name};
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
}

/// A corpus the operator configured.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusSection {
    /// Its name (`[corpora.NAME]`).
    pub name: String,
    /// The directory of its generations.
    pub dir: PathBuf,
    /// The most bytes it may hold; a commit past it is refused.
    pub max_bytes: u64,
}

/// Validates `[corpora.NAME]`; an error's key is relative to the section.
pub fn section(name: &str, raw: RawSection, base: &Path) -> Result<CorpusSection, KeyError> {
    if !valid_name(name) {
        return Err(KeyError::new("", format!("{name:?} is not a corpus name: use a-z, 0-9, _ and -, at most 64")));
    }
    match raw.backend.as_deref() {
        None | Some("local") => {}
        Some(other) => {
            return Err(KeyError::new(
                "backend",
                format!("unknown backend {other:?}; this host keeps corpora on its own disk: backend = \"local\""),
            ));
        }
    }
    let dir = raw.dir.ok_or_else(|| KeyError::new("dir", "say where the corpus is kept: dir = \"path\""))?;
    let dir = base.join(expand_path(&dir).map_err(|m| KeyError::new("dir", m))?);
    let max_bytes = raw.max_bytes.map_or(DEFAULT_MAX_BYTES, |b| b.0);
    if max_bytes == 0 {
        return Err(KeyError::new("max_bytes", "a corpus needs room: give a size such as \"1GiB\""));
    }
    Ok(CorpusSection { name: name.to_string(), dir, max_bytes })
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

/// The corpora an instance may open (`grants.corpora`), by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CorpusGrant {
    /// Each granted corpus's section and mode.
    pub corpora: BTreeMap<String, (Arc<CorpusSection>, Mode)>,
}

/// Validates `grants.corpora`: each a configured corpus, named once.
pub fn grant(raw: Vec<RawGrant>, sections: &BTreeMap<String, Arc<CorpusSection>>) -> Result<CorpusGrant, KeyError> {
    let mut corpora = BTreeMap::new();
    for (i, g) in raw.into_iter().enumerate() {
        let key = format!("[{i}].name");
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
    Ok(CorpusGrant { corpora })
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
        assert_eq!(s.dir, Path::new("/etc/quarry/corpora/rclone"));
        assert_eq!(s.max_bytes, DEFAULT_MAX_BYTES);
        let e = section("rclone", raw("backend = \"s3\"\ndir = \"d\""), base).unwrap_err();
        assert_eq!(e.key, "backend");
        assert!(e.message.contains("backend = \"local\""), "{}", e.message);
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
        let g = grant(entries(r#"corpora = [{ name = "rclone", mode = "rw" }]"#), &sections).unwrap();
        assert_eq!(g.corpora["rclone"].1, Mode::Rw);
        assert_eq!(
            grant(entries(r#"corpora = [{ name = "rclone" }]"#), &sections).unwrap().corpora["rclone"].1,
            Mode::Ro
        );
        let e = grant(entries(r#"corpora = [{ name = "other" }]"#), &sections).unwrap_err();
        assert_eq!(e.key, "[0].name");
        assert!(e.message.contains("define [corpora.other]") && e.message.contains("rclone"), "{}", e.message);
        let e = grant(entries(r#"corpora = [{ name = "rclone" }, { name = "rclone", mode = "rw" }]"#), &sections);
        assert!(e.unwrap_err().message.contains("granted twice"));
    }
}
