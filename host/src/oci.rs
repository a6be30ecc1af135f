//! Components from OCI registries (`component = "oci://REGISTRY/REPO@sha256:…"` or `:TAG`):
//! resolved, pulled and checked (by `quarry-oci`) before the registry loads, the tags pinned in
//! `quarry.lock` beside the config.
//!
//! A component whose config names a key (`signed_by`, or `[host] signed_by` for its registry)
//! runs only when its digest carries a cosign signature by that key, checked before it is
//! downloaded.
//!
//! The version an instance runs is a file of its own in the cache (`oci/refs/HASH.wasm`, beside
//! a `.digest` naming it), replaced whole when its digest moves (`quarry pull`): the watcher
//! sees the new file and swaps the instance, as it does for any component file.

use std::path::{Path, PathBuf};

/// What [`fetch`] did for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The instance.
    pub instance: String,
    /// Its reference, as written.
    pub reference: String,
    /// The manifest digest it runs.
    pub digest: String,
    /// Whether the component was downloaded now (false: it was cached).
    pub downloaded: bool,
    /// Whether the instance's file changed (a new digest): a running host swaps it.
    pub moved: bool,
    /// The key whose signature it carries (its file and fingerprint), when the config asks
    /// for one.
    pub signed_by: Option<String>,
}

/// Why an `oci://` component is not there.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// One instance's component.
    #[error("{section}.{instance}.component: {source}")]
    Component {
        /// `tools` or `embedders`.
        section: &'static str,
        /// The instance.
        instance: String,
        /// What failed.
        source: quarry_oci::OciError,
    },
    /// The lock file.
    #[error("{0}")]
    Lock(quarry_oci::OciError),
    /// A component or the lock failed before anything was put in place.
    #[error("{failed}; nothing was changed: every instance keeps the version it runs, and quarry.lock is as it was")]
    Unchanged {
        /// What failed.
        failed: Box<FetchError>,
    },
    /// The cache is not this user's alone.
    #[error("{path}: {why}; components from registries are kept only in a cache this user alone can write")]
    Untrusted {
        /// The directory.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Putting the component in place.
    #[error("{path}: {source}")]
    Install {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Makes every `oci://` component of `config` present at its path: at the digest its reference
/// pins, else the one `quarry.lock` has for its tag (a tag the lock lacks is resolved, and with
/// `refresh` every tag is, and the lock written), downloaded unless cached. With the registry
/// down, what is pinned and cached still serves.
///
/// All or nothing: every component is resolved, checked and pulled into the cache first, then
/// the lock is written, then the instances' files are put in place (which a running host swaps
/// to). A failure before that changes nothing ([`FetchError::Unchanged`]).
pub async fn fetch(config: &crate::config::Config, refresh: bool) -> Result<Vec<Fetched>, FetchError> {
    use quarry_oci::{Lock, OciRef, Puller};
    let instances: Vec<(&'static str, &crate::config::InstanceConfig)> = config
        .tools
        .values()
        .map(|i| ("tools", i))
        .chain(config.embedders.values().map(|i| ("embedders", i)))
        .filter(|(_, i)| i.oci.is_some())
        .collect();
    let Some(cache) = config.cache_dir.as_deref().filter(|_| !instances.is_empty()) else {
        return Ok(Vec::new());
    };
    for dir in [cache.to_path_buf(), cache.join("oci"), cache.join("oci/sha256"), cache.join("oci/refs")] {
        if let Some(why) = crate::runtime::cache::untrusted_dir(&dir) {
            return Err(FetchError::Untrusted { path: dir, why });
        }
    }
    let lock_path = Lock::path_for(&config.path);
    let mut lock = Lock::load(&lock_path).map_err(FetchError::Lock)?;
    let mut locked = false;
    let puller = Puller::new(cache, config.max_component_bytes);
    // First every component is resolved, its signature checked and its bytes pulled into the
    // cache by digest, which nothing runs from: a failure here changes nothing.
    let mut ready = Vec::new();
    for (section, inst) in instances {
        let mut signed_by = None;
        let text = inst.oci.as_deref().unwrap_or_default();
        let failed = |source| FetchError::Unchanged {
            failed: Box::new(FetchError::Component { section, instance: inst.name.clone(), source }),
        };
        let r = OciRef::parse(text).map_err(failed)?;
        let digest = match (r.digest(), lock.components.get(text)) {
            (Some(d), _) => d.to_string(),
            (None, Some(d)) if !refresh => d.clone(),
            (None, _) => {
                let d = puller.resolve(&r).await.map_err(failed)?;
                if lock.components.get(text) != Some(&d) {
                    lock.components.insert(text.to_string(), d.clone());
                    locked = true;
                }
                d
            }
        };
        // Checked before anything is downloaded; once per digest and key, since neither changes
        // (so a verified, cached digest still serves with the registry down).
        let mut signed = None;
        if let Some(file) = &inst.signed_by {
            let key = quarry_oci::PublicKey::load(file)
                .map_err(|message| failed(quarry_oci::OciError::Refused { reference: text.to_string(), message }))?;
            let stamp = puller.path_of(&digest).with_extension(format!("signed-by-{}", &key.fingerprint()[7..]));
            if !stamp.is_file() {
                quarry_oci::verify(&r, &digest, &key).await.map_err(failed)?;
                signed = Some(stamp);
            }
            signed_by = Some(key.describe());
        }
        let pulled = puller.pull(&r, &digest).await.map_err(failed)?;
        if let Some(stamp) = signed {
            std::fs::write(&stamp, b"").map_err(|source| FetchError::Install { path: stamp, source })?;
        }
        ready.push((inst, text, digest, pulled, signed_by));
    }
    // Then the lock, then the instances' files: a running host swaps them only now, all of
    // them verified, and a restart runs what the lock says.
    if locked {
        lock.save(&lock_path).map_err(|e| FetchError::Unchanged { failed: Box::new(FetchError::Lock(e)) })?;
    }
    let mut out = Vec::new();
    for (inst, text, digest, pulled, signed_by) in ready {
        let moved = install(&pulled.path, &inst.component, &digest)?;
        out.push(Fetched {
            instance: inst.name.clone(),
            reference: text.to_string(),
            digest,
            downloaded: pulled.fetched,
            moved,
            signed_by,
        });
    }
    Ok(out)
}

/// Puts the cached component `blob` (of `digest`) at `path`, unless it is there already:
/// written beside it and renamed over it, so a watcher sees one whole new file.
fn install(blob: &Path, path: &Path, digest: &str) -> Result<bool, FetchError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Install { path, source }
    };
    let stamp = path.with_extension("digest");
    if path.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|d| d.trim() == digest) {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(failed(dir))?;
    let tmp = path.with_extension("wasm.tmp-new");
    std::fs::copy(blob, &tmp).map_err(failed(&tmp))?;
    std::fs::rename(&tmp, path).map_err(failed(path))?;
    // After the file: a stamp never names a digest whose file is not in place.
    std::fs::write(&stamp, format!("{digest}\n")).map_err(failed(&stamp))?;
    Ok(true)
}
