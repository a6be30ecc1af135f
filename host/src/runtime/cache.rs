//! The precompiled-component cache.
//!
//! A component's machine code is cached on disk as
//! `<sha256 of the bytes>-<engine key>.cwasm`, where the engine key hashes
//! wasmtime's own compatibility hash (its version and every setting that
//! affects code generation). Loading a cached file takes about a millisecond;
//! compiling a large component takes seconds. Within a process, components are
//! also kept in memory by content hash while an instance uses them, so the same
//! bytes are never compiled twice, whichever instances share them; a version that
//! no instance uses any more (swapped out) is forgotten.
//!
//! Compiling is bounded: in a worker process under a memory and a time limit where there is
//! one ([`super::compile`]); one component compiles at a time (wasmtime already spreads one
//! compilation over every core, and its peak memory grows with them), two loads of the same
//! new bytes wait for one compilation, and no lock is held across it that a load of other
//! bytes (from memory or disk) would wait on.
//!
//! Files are written to a temporary name and renamed into place, so a crash
//! never leaves a half-written entry. An unreadable or incompatible entry is
//! removed and recompiled.
//!
//! A cache entry is native code the host runs, and wasmtime checks only its header, so an
//! entry is trusted only as much as the directory it comes from: the directory must belong to
//! the host's user and be writable by no one else, and so must the entry (a regular file,
//! opened without following links, checked on the open file). Otherwise the component is
//! compiled, with a warning that says how to fix the directory. The directory is created
//! `0700`. With no cache directory at all (no `HOME`, no `XDG_CACHE_HOME`, no
//! `QUARRY_CACHE_DIR`), components are compiled in memory at every start: there is no shared
//! fallback such as `/tmp`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::compile::{CompileError, CompileLimits};

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
    /// `None`: compile in memory only.
    dir: Option<PathBuf>,
    engine_key: String,
    /// Components some instance holds, by content hash.
    memo: Mutex<HashMap<[u8; 32], Weak<Component>>>,
    /// One gate per content hash being loaded: loads of the same bytes take turns.
    gates: Mutex<HashMap<[u8; 32], Arc<Mutex<()>>>>,
    /// Held while compiling: one compilation at a time.
    compiling: Mutex<()>,
}

/// Why a directory or an entry is not trusted with native code.
fn untrusted(meta: &std::fs::Metadata) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        Some(format!("it belongs to uid {}, not to this user (uid {me})", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!("others may write to it (mode {:o})", meta.mode() & 0o777))
    } else {
        None
    }
}

/// Why the directory `dir` is not trusted with what the host runs (none: it is, or it is not
/// there): `oci://` components are kept in the cache under the same rule as compiled ones.
pub fn untrusted_dir(dir: &Path) -> Option<String> {
    std::fs::symlink_metadata(dir).ok().and_then(|m| untrusted(&m))
}

impl ComponentCache {
    /// A cache in `dir` (or in memory only, for `None`) for components compiled by `engine`.
    pub fn new(dir: Option<PathBuf>, engine: &wasmtime::Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        if dir.is_none() {
            tracing::warn!(
                target: "quarry::cache",
                "no cache directory (HOME, XDG_CACHE_HOME and QUARRY_CACHE_DIR are unset): components are compiled at every start; set QUARRY_CACHE_DIR or [host] cache_dir"
            );
        }
        ComponentCache {
            dir,
            engine_key: format!("{:016x}", h.finish()),
            memo: Mutex::default(),
            gates: Mutex::default(),
            compiling: Mutex::default(),
        }
    }

    /// Components held in memory now (by some instance).
    pub fn in_memory(&self) -> usize {
        self.live().len()
    }

    /// The memo, without the components no instance holds any more.
    fn live(&self) -> parking_lot::MutexGuard<'_, HashMap<[u8; 32], Weak<Component>>> {
        let mut memo = self.memo.lock();
        memo.retain(|_, c| c.strong_count() > 0);
        memo
    }

    fn remembered(&self, hash: &[u8; 32]) -> Option<Arc<Component>> {
        self.live().get(hash).and_then(Weak::upgrade)
    }

    fn remember(&self, hash: [u8; 32], c: Component) -> Arc<Component> {
        let c = Arc::new(c);
        self.memo.lock().insert(hash, Arc::downgrade(&c));
        c
    }

    /// The cache directory, created `0700` if missing, if it may be trusted; else why not.
    fn trusted_dir(&self) -> Option<&Path> {
        let dir = self.dir.as_deref()?;
        if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
            tracing::warn!(target: "quarry::cache", "cannot create the cache directory {}: {e}", dir.display());
            return None;
        }
        let why = match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => Some("it is not a directory".to_string()),
            Ok(meta) => untrusted(&meta),
            Err(e) => Some(e.to_string()),
        };
        match why {
            None => Some(dir),
            Some(why) => {
                tracing::warn!(
                    target: "quarry::cache",
                    "not using the precompiled cache in {}: {why}; components are compiled instead. Give the directory to this user with mode 0700, or set QUARRY_CACHE_DIR to one that is",
                    dir.display()
                );
                None
            }
        }
    }

    /// Whether entry `path` is a regular file (not a link) that this user owns and no one else
    /// may write, checked on the opened file itself. The directory passed the same check, so no
    /// one else can replace the entry between this check and wasmtime's own open.
    fn check_entry(path: &Path) -> std::io::Result<Result<(), String>> {
        let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Ok(Err("it is not a regular file".into()));
        }
        Ok(untrusted(&meta).map_or(Ok(()), Err))
    }

    /// The SHA-256 of `bytes`, the cache's content key.
    pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
        Sha256::digest(bytes).into()
    }

    /// Path of the cache entry for `hash` in `dir`.
    fn entry_path(&self, dir: &Path, hash: &[u8; 32]) -> PathBuf {
        dir.join(format!("{}-{}.cwasm", hex::encode(hash), self.engine_key))
    }

    /// Loads `bytes` as a component; see the module docs. A compilation runs within `limits`
    /// (see [`super::compile`]). The component stays in memory while the returned `Arc` (or a
    /// clone) lives.
    pub fn load(
        &self,
        engine: &wasmtime::Engine,
        bytes: &[u8],
        limits: CompileLimits,
    ) -> Result<(Arc<Component>, CacheOutcome), CompileError> {
        let hash = Self::content_hash(bytes);
        // Two loads of the same new bytes must not both compile them: they take turns at this
        // gate, and the second finds the first's component in memory.
        let gate = {
            let mut gates = self.gates.lock();
            gates.retain(|_, g| Arc::strong_count(g) > 1);
            gates.entry(hash).or_default().clone()
        };
        let _turn = gate.lock();
        if let Some(c) = self.remembered(&hash) {
            return Ok((c, CacheOutcome::Memory));
        }
        let path = self.trusted_dir().map(|dir| self.entry_path(dir, &hash));
        if let Some(path) = &path {
            match Self::check_entry(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(target: "quarry::cache", "cannot read cache entry {}: {e}", path.display()),
                Ok(Err(why)) => {
                    tracing::warn!(target: "quarry::cache", "not loading cache entry {}: {why}; compiling instead", path.display());
                    let _ = std::fs::remove_file(path);
                }
                // SAFETY: the file belongs to this host user and no one else may write it or
                // its directory, whose entries are written only by `store` below; wasmtime also
                // checks the header, version and engine settings before using the code.
                Ok(Ok(())) => match unsafe { Component::deserialize_file(engine, path) } {
                    Ok(c) => return Ok((self.remember(hash, c), CacheOutcome::Disk)),
                    Err(e) => {
                        tracing::warn!(target: "quarry::cache", "discarding unusable cache entry {}: {e}", path.display());
                        let _ = std::fs::remove_file(path);
                    }
                },
            }
        }
        let compiled = {
            let _slot = self.compiling.lock();
            super::compile::precompile(engine, bytes, limits)?
        };
        if let Some(path) = &path
            && let Err(e) = Self::store(path, &compiled)
        {
            tracing::warn!(target: "quarry::cache", "cannot write cache entry {}: {e}", path.display());
        }
        // SAFETY: `compiled` was produced just now by this engine, or by the compile worker:
        // this binary, run by this user, with this engine's configuration (wasmtime checks the
        // header, version and settings too).
        let c = unsafe { Component::deserialize(engine, &compiled) }
            .map_err(|e| CompileError::Invalid(format!("{e:#}")))?;
        Ok((self.remember(hash, c), CacheOutcome::Compiled))
    }

    fn store(path: &Path, compiled: &[u8]) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        // Private to this user (tempfile creates 0600), like the directory.
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(compiled)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}
