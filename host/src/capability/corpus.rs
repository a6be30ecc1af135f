//! Corpora (`quarry:retrieval/corpus`), from the `quarry-corpus` crate; here, its place in the
//! capability list: `[corpora.NAME]` sections and `grants.corpora`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Linker;

pub use quarry_corpus::config::{CorpusGrant, CorpusSection, Mode, RawGrant, RawSection};
pub use quarry_corpus::host::{State, limits};

use super::{Capability, CapabilityStore, GrantContext, SandboxError, StoreContext};
use crate::support::exposition::{Exposition, Kind};
use crate::support::values::KeyError;
use quarry_corpus::Stored;

/// The corpus capability.
pub struct Corpora;

impl Capability for Corpora {
    const GRANT_KEYS: &'static [&'static str] = &["corpora"];
    const SECTION_KEYS: &'static [&'static str] = &["corpora"];

    type RawGrant = Vec<RawGrant>;
    type Grant = CorpusGrant;
    type RawSection = BTreeMap<String, RawSection>;
    type RawHost = ();
    /// The configured corpora.
    type Section = BTreeMap<String, Arc<CorpusSection>>;
    type AppState = ();
    type State = State;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Vec<RawGrant>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = map.next_value()?;
        Ok(())
    }

    fn read_section<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut BTreeMap<String, RawSection>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = map.next_value()?;
        Ok(())
    }

    fn section(
        raw: BTreeMap<String, RawSection>,
        _: (),
        base: &Path,
    ) -> Result<BTreeMap<String, Arc<CorpusSection>>, KeyError> {
        let mut corpora = BTreeMap::new();
        for (name, raw) in raw {
            let s =
                quarry_corpus::config::section(&name, raw, base).map_err(|e| e.under(&format!("corpora.{name}")))?;
            corpora.insert(name, Arc::new(s));
        }
        Ok(corpora)
    }

    fn grant(
        raw: Vec<RawGrant>,
        sections: &BTreeMap<String, Arc<CorpusSection>>,
        cx: &GrantContext<'_>,
    ) -> Result<CorpusGrant, KeyError> {
        let own = cx.private_dir.map(|d| d.join("corpus"));
        quarry_corpus::config::grant(raw, sections, own).map_err(|e| e.under("corpora"))
    }

    #[cfg(feature = "couchbase")]
    fn linked(all: &super::CapabilitySections) -> Result<Option<BTreeMap<String, Arc<CorpusSection>>>, KeyError> {
        use quarry_corpus::config::Backend;
        let mut linked = all.corpora.clone();
        for (name, section) in linked.iter_mut() {
            let Backend::Couchbase(target) = &section.backend else { continue };
            let Some(connection) = all.couchbase.get(&target.connection) else {
                let known: Vec<&str> = all.couchbase.keys().map(String::as_str).collect();
                return Err(KeyError::new(
                    format!("corpora.{name}.connection"),
                    format!(
                        "no [couchbase.{}] section defines this connection; add one (connection_string, username, password), or name one of: {}",
                        target.connection,
                        if known.is_empty() { "(none defined)".to_string() } else { known.join(", ") }
                    ),
                ));
            };
            let mut resolved = (**section).clone();
            if let Backend::Couchbase(t) = &mut resolved.backend {
                t.resolved = Some(connection.clone());
            }
            *section = Arc::new(resolved);
        }
        Ok(Some(linked))
    }

    fn host_read_dirs(sections: &BTreeMap<String, Arc<CorpusSection>>) -> Vec<(String, PathBuf)> {
        // The host writes a corpus's directory: no guest may write it beside the host.
        sections.values().filter_map(|s| s.dir().map(|d| (format!("corpora.{}", s.name), d.to_path_buf()))).collect()
    }

    /// Each local corpus: the configured ones with a database, and the instances' own that
    /// are open ([`quarry_corpus::host::figures`]), labelled by name and directory.
    fn metrics(sections: &BTreeMap<String, Arc<CorpusSection>>, _: &(), out: &mut Exposition) {
        type Value = fn(&Stored) -> Option<f64>;
        let figures = quarry_corpus::host::figures(sections.values().map(|s| &**s));
        let families: [(&str, &str, Value); 4] = [
            ("quarry_corpus_generation", "The committed generation of each local corpus.", |s| {
                Some(s.generation as f64)
            }),
            ("quarry_corpus_chunks", "Chunks in each local corpus.", |s| Some(s.chunks as f64)),
            (
                "quarry_corpus_bytes",
                "Bytes of each local corpus's chunks (ids, texts, metadata, fields, vectors).",
                |s| Some(s.bytes as f64),
            ),
            (
                "quarry_corpus_last_commit_timestamp_seconds",
                "When each local corpus was last committed to, in seconds since the Unix epoch (absent until this version commits to it).",
                |s| (s.committed_at > 0).then_some(s.committed_at as f64),
            ),
        ];
        for (name, help, value) in families {
            let mut family = out.family(name, Kind::Gauge, help);
            for f in &figures {
                if let Some(v) = value(&f.stored) {
                    family.sample(&[("corpus", &f.name), ("place", &f.place)], v);
                }
            }
        }
    }

    fn unreachable(
        sections: &BTreeMap<String, Arc<CorpusSection>>,
    ) -> impl std::future::Future<Output = Vec<String>> + Send {
        let sections: Vec<Arc<CorpusSection>> = sections.values().cloned().collect();
        async move {
            let mut lines = Vec::new();
            for s in sections {
                match s.dir() {
                    Some(dir) => lines.extend(unreachable_dir(&s.name, dir)),
                    // In a cluster: asked, if this host has it open, within a few seconds.
                    None => lines.extend(quarry_corpus::host::unreachable(&s).await),
                }
            }
            lines
        }
    }

    fn state(grant: &CorpusGrant, _: &(), cx: &mut StoreContext<'_>) -> Result<State, SandboxError> {
        Ok(State::new(grant, cx.max_output, cx.held))
    }

    /// A writer and its lease last the call that took them (see `quarry_corpus::host`).
    fn end_call(state: &mut State) -> impl std::future::Future<Output = ()> + Send {
        state.end_call();
        async {}
    }

    fn link<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        quarry_corpus::host::link(l, |t| {
            let p = t.parts();
            quarry_corpus::host::view(p.states.get_mut::<Corpora>(), p.deadline, p.memory, p.linear)
        })
    }
}

/// Why corpus `name`'s directory cannot serve now, if it cannot: it is there and can be listed,
/// or it is not there yet and its parent is (the first build makes it).
fn unreachable_dir(name: &str, dir: &Path) -> Option<String> {
    let why = match std::fs::read_dir(dir) {
        Ok(_) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match dir.parent().map(std::fs::metadata) {
            Some(Ok(m)) if m.is_dir() => return None,
            _ => "it is missing, and so is the directory it would be made in".to_string(),
        },
        Err(e) => e.to_string(),
    };
    Some(format!("corpora.{name}: cannot read {}: {why}", dir.display()))
}
