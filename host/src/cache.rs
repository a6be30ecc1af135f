//! The precompiled-component cache.
//!
//! A component's machine code is cached on disk as
//! `<sha256 of the bytes>-<engine key>.cwasm`, where the engine key hashes
//! wasmtime's own compatibility hash (its version and every setting that
//! affects code generation). Loading a cached file takes about a millisecond;
//! compiling a large component takes seconds. Within a process, components are
//! also kept in memory by content hash, so the same bytes are never compiled
//! twice, whichever instances share them.
//!
//! Files are written to a temporary name and renamed into place, so a crash
//! never leaves a half-written entry. An unreadable or incompatible entry is
//! removed and recompiled.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

/// Where a loaded component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Already loaded in this process.
    Memory,
    /// Deserialized from the on-disk cache.
    Disk,
    /// Compiled now (and written to the cache).
    Compiled,
}

/// See the module docs.
pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
    memo: Mutex<HashMap<[u8; 32], Component>>,
}

impl ComponentCache {
    /// A cache in `dir` for components compiled by `engine`.
    pub fn new(dir: PathBuf, engine: &wasmtime::Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ComponentCache { dir, engine_key: format!("{:016x}", h.finish()), memo: Mutex::new(HashMap::new()) }
    }

    /// The SHA-256 of `bytes`, the cache's content key.
    pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
        Sha256::digest(bytes).into()
    }

    /// Path of the cache entry for `hash`.
    pub fn entry_path(&self, hash: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}-{}.cwasm", hex::encode(hash), self.engine_key))
    }

    /// Loads `bytes` as a component; see the module docs. The error is wasmtime's reason.
    pub fn load(&self, engine: &wasmtime::Engine, bytes: &[u8]) -> Result<(Component, CacheOutcome), String> {
        let hash = Self::content_hash(bytes);
        // Held across compilation on purpose: two loads of the same new bytes
        // must not both compile them.
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = memo.get(&hash) {
            return Ok((c.clone(), CacheOutcome::Memory));
        }
        let path = self.entry_path(&hash);
        if path.is_file() {
            // SAFETY: the cache directory belongs to this host user and its
            // entries are written only by `store` below; wasmtime also checks the
            // header, version and engine settings before using the code.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => {
                    memo.insert(hash, c.clone());
                    return Ok((c, CacheOutcome::Disk));
                }
                Err(e) => {
                    tracing::warn!("discarding unusable cache entry {}: {e}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let compiled = engine.precompile_component(bytes).map_err(|e| format!("{e:#}"))?;
        if let Err(e) = self.store(&path, &compiled) {
            tracing::warn!("cannot write cache entry {}: {e}", path.display());
        }
        // SAFETY: `compiled` was produced by this engine just now.
        let c = unsafe { Component::deserialize(engine, &compiled) }.map_err(|e| format!("{e:#}"))?;
        memo.insert(hash, c.clone());
        Ok((c, CacheOutcome::Compiled))
    }

    fn store(&self, path: &std::path::Path, compiled: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(compiled)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}
