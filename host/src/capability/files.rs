//! The `dirs` grant: host directories made visible to a guest, read-only or read-write, as
//! WASI preopens; and what wasmtime-wasi does not enforce on them: a quota on read-write grants,
//! and no opening of anything but regular files and directories.
//!
//! wasmtime-wasi 48 has no filesystem hook, so the linker shadows the few `wasi:filesystem`
//! functions that create or grow files, or open them, with wrappers that check first and then
//! call wasmtime-wasi's own implementation ([`add_to_linker`]):
//! - `descriptor.write`, `set-size`: the growth past the file's current size is charged;
//! - `write-via-stream`, `append-via-stream`: the stream is wrapped, and each write is
//!   charged its growth before it is passed on;
//! - `open-at` with `create` of a file that does not exist, `create-directory-at`,
//!   `symlink-at`, `link-at`: one file each;
//! - `open-at` of an existing FIFO, socket or device is refused (`not-permitted`): opening a
//!   FIFO blocks a host thread until a writer appears, and a call's deadline abandons the
//!   call, not the thread.
//!
//! **Quota** (`quota = { bytes = "1GiB", files = 10000 }` on a `mode = "rw"` grant, by default
//! [`DEFAULT_QUOTA_BYTES`] and [`DEFAULT_QUOTA_FILES`]): the usage of a host directory (bytes
//! of its files, and how many files, directories and links it holds, all the way down) is
//! measured when an instance first uses it, shared by every instance granted the same
//! directory, and charged as above. A charge that would pass the quota measures the directory
//! again first (at most once a second), so deletions and overwrites count, then refuses with
//! `insufficient-space` (`ENOSPC`, as a full disk or a filesystem out of inodes would), and the
//! host logs that the quota was reached (under a rate budget). A wasi-libc guest sees ENOSPC
//! from `write` at an offset, `ftruncate` and creating a file; a write through a stream (what
//! Rust's `std::fs::File::write` uses) reports only that the operation failed, which wasi-libc
//! turns into EIO. Within one call a guest can therefore pass the quota by at most one
//! write (a stream write is at most 4 KiB to 1 MiB) and never create a file past it; it can
//! still read, overwrite within the sizes it has, truncate and delete.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Deserialize;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Filesize, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynOutputStream, FsResult, OutputStream, Pollable, StreamError, StreamResult};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::support::values::{ByteSize, KeyError, expand_path};

/// Bytes a read-write grant may hold when its config gives no quota.
pub const DEFAULT_QUOTA_BYTES: u64 = 1 << 30;
/// Files, directories and links a read-write grant may hold when its config gives no quota.
pub const DEFAULT_QUOTA_FILES: u64 = 10_000;
/// Log lines of refused writes and opens, all instances together: a guest repeats them at will.
static REFUSALS_LOG: crate::support::log_budget::LogBudget =
    crate::support::log_budget::LogBudget::new(10, Duration::from_secs(1));
/// How often a directory may be measured again when a charge would pass its quota.
const REMEASURE_EVERY: Duration = Duration::from_secs(1);

/// One entry of `dirs` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDir {
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
    pub quota: Option<Quota>,
}

/// Validates `dirs`: existing host directories (relative to `base`), absolute and distinct
/// guest paths, quotas on read-write grants only.
pub fn grant(raw: Vec<RawDir>, base: &Path) -> Result<Vec<DirGrant>, KeyError> {
    let mut dirs: Vec<DirGrant> = Vec::new();
    for (i, d) in raw.into_iter().enumerate() {
        let k = format!("dirs[{i}]");
        let host = base.join(expand_path(&d.host).map_err(|m| KeyError::new(format!("{k}.host"), m))?);
        if !host.is_dir() {
            return Err(KeyError::new(
                format!("{k}.host"),
                format!("{} is not a directory; create it or fix the path", host.display()),
            ));
        }
        if !d.guest.starts_with('/') {
            return Err(KeyError::new(
                format!("{k}.guest"),
                format!("guest path {:?} must be absolute, like \"/data\"", d.guest),
            ));
        }
        if dirs.iter().any(|x| x.guest == d.guest) {
            return Err(KeyError::new(format!("{k}.guest"), format!("guest path {:?} is granted twice", d.guest)));
        }
        let writable = matches!(d.mode, DirMode::Rw);
        let quota = match (writable, d.quota) {
            (false, Some(_)) => {
                return Err(KeyError::new(
                    format!("{k}.quota"),
                    "a quota applies only to a read-write grant (mode = \"rw\"); remove it",
                ));
            }
            (false, None) => None,
            (true, q) => {
                let default = Quota::default();
                let quota = Quota {
                    bytes: q.as_ref().and_then(|q| q.bytes).map_or(default.bytes, |b| b.0),
                    files: q.as_ref().and_then(|q| q.files).unwrap_or(default.files),
                };
                if quota.bytes == 0 || quota.files == 0 {
                    return Err(KeyError::new(
                        format!("{k}.quota"),
                        "bytes and files must be above zero; for no writes at all, grant mode = \"ro\"",
                    ));
                }
                Some(quota)
            }
        };
        dirs.push(DirGrant { host: std::fs::canonicalize(&host).unwrap_or(host), guest: d.guest, writable, quota });
    }
    Ok(dirs)
}

/// The directory capability: `dirs` grants as WASI preopens, with quotas on read-write ones.
pub struct Files;

impl super::Capability for Files {
    const GRANT_KEYS: &'static [&'static str] = &["dirs"];

    type RawGrant = Vec<RawDir>;
    type Grant = Vec<DirGrant>;
    type RawSection = ();
    type RawHost = ();
    type Section = ();
    type AppState = AppState;
    type State = FileGuard;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Vec<RawDir>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = map.next_value()?;
        Ok(())
    }

    fn grant(raw: Vec<RawDir>, _: &(), cx: &super::GrantContext<'_>) -> Result<Vec<DirGrant>, KeyError> {
        grant(raw, cx.base)
    }

    fn writable_dirs(grant: &Vec<DirGrant>) -> Vec<(String, PathBuf)> {
        grant
            .iter()
            .enumerate()
            .filter(|(_, d)| d.writable)
            .map(|(i, d)| (format!("dirs[{i}].host"), d.host.clone()))
            .collect()
    }

    fn state(
        grant: &Vec<DirGrant>,
        app: &AppState,
        cx: &mut super::StoreContext<'_>,
    ) -> Result<FileGuard, SandboxError> {
        preopen(grant, app, cx.wasi)
    }

    fn link<T: super::CapabilityStore>(l: &mut wasmtime::component::Linker<T>) -> wasmtime::Result<()> {
        link(l, |t| view(t.parts()))
    }
}

impl Files {
    /// Preopens host directory `host` read-only as `guest` in the store being built: another
    /// capability's own files (a granted model's directory).
    pub fn grant_read_only(cx: &mut super::StoreContext<'_>, host: &Path, guest: &str) -> Result<(), SandboxError> {
        preopen_read_only(host, guest, cx.wasi)
    }
}

/// Why a directory grant could not be applied to a new store.
#[derive(Debug, thiserror::Error)]
#[error("cannot grant directory {host} as {guest}: {message}")]
pub struct SandboxError {
    host: String,
    guest: String,
    message: String,
}

/// Preopens `dirs` in `wasi` with their permissions; the state that enforces their quotas.
///
/// Where every directory is read-only, the guest's file operations run on its own thread
/// instead of a hop to the runtime's blocking pool and back: each is then a stat, an open or a
/// read of at most 64 KiB (wasmtime-wasi's cap), short enough to do in place. The hops cost
/// chapter-rag's pool of two about 5% of its calls a second on 2 cores (the manual's freshness
/// check is two file operations a call; each hop wakes a thread). A writable directory keeps them:
/// a write or a sync can take long, and would hold one of the runtime's workers meanwhile.
pub fn preopen(dirs: &[DirGrant], app: &AppState, wasi: &mut WasiCtxBuilder) -> Result<FileGuard, SandboxError> {
    wasi.allow_blocking_current_thread(dirs.iter().all(|d| !d.writable));
    let mut files = FileGuard::default();
    for d in dirs {
        let perms = if d.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
        if let Some(quota) = d.quota {
            files.add(&d.guest, QuotaGrant::new(app, &d.host, quota));
        }
        wasi.preopened_dir(&d.host, &d.guest, perms).map_err(|e| SandboxError {
            host: d.host.display().to_string(),
            guest: d.guest.clone(),
            message: format!("{e:#}"),
        })?;
    }
    Ok(files)
}

/// Preopens host directory `host` read-only as `guest` (a capability's own files, such as a
/// granted model's directory).
pub fn preopen_read_only(host: &Path, guest: &str, wasi: &mut WasiCtxBuilder) -> Result<(), SandboxError> {
    wasi.preopened_dir(host, guest, FsPerms::ReadOnly).map_err(|e| SandboxError {
        host: host.display().to_string(),
        guest: guest.to_string(),
        message: format!("{e:#}"),
    })?;
    Ok(())
}

/// A read-write grant's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Bytes of file content.
    pub bytes: u64,
    /// Files, directories and links.
    pub files: u64,
}

impl Default for Quota {
    fn default() -> Self {
        Quota { bytes: DEFAULT_QUOTA_BYTES, files: DEFAULT_QUOTA_FILES }
    }
}

/// What one host directory holds, shared by every instance granted it.
struct Usage {
    root: PathBuf,
    bytes: AtomicU64,
    files: AtomicU64,
    measured: Mutex<Option<Instant>>,
}

/// The directory capability's state for one app: the usage of every read-write directory its
/// instances are granted, shared by the instances granted the same directory.
#[derive(Default)]
pub struct AppState {
    usage: Mutex<HashMap<PathBuf, Weak<Usage>>>,
}

impl Usage {
    /// The shared usage of `root`, measured now if no instance holds it yet.
    fn of(app: &AppState, root: &Path, quota: Quota) -> Arc<Usage> {
        let mut all = app.usage.lock();
        if let Some(u) = all.get(root).and_then(Weak::upgrade) {
            return u;
        }
        let u = Arc::new(Usage {
            root: root.to_path_buf(),
            bytes: AtomicU64::new(0),
            files: AtomicU64::new(0),
            measured: Mutex::new(None),
        });
        u.measure(quota);
        all.retain(|_, w| w.strong_count() > 0);
        all.insert(root.to_path_buf(), Arc::downgrade(&u));
        u
    }

    /// Walks the directory (without following links), stopping once past `quota`: the walk
    /// costs at most the quota's number of entries.
    fn measure(&self, quota: Quota) {
        let (mut bytes, mut files) = (0u64, 0u64);
        let mut stack = vec![self.root.clone()];
        'walk: while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                files += 1;
                if files > quota.files {
                    break 'walk;
                }
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(entry.path());
                } else {
                    bytes = bytes.saturating_add(meta.len());
                }
            }
        }
        self.bytes.store(bytes, Ordering::Relaxed);
        self.files.store(files, Ordering::Relaxed);
        *self.measured.lock() = Some(Instant::now());
    }
}

/// One read-write grant's quota and the shared usage of its directory.
pub struct QuotaGrant {
    quota: Quota,
    usage: Arc<Usage>,
}

impl QuotaGrant {
    /// The grant of `quota` over host directory `root`, its usage shared within `app`.
    pub fn new(app: &AppState, root: &Path, quota: Quota) -> Arc<QuotaGrant> {
        Arc::new(QuotaGrant { quota, usage: Usage::of(app, root, quota) })
    }

    /// Bytes and files in use now, as last counted.
    pub fn used(&self) -> (u64, u64) {
        (self.usage.bytes.load(Ordering::Relaxed), self.usage.files.load(Ordering::Relaxed))
    }

    /// Charges `bytes` and `files`, or refuses if that would pass the quota (after measuring
    /// again, when the last measure is over [`REMEASURE_EVERY`] old).
    fn charge(&self, bytes: u64, files: u64) -> Result<(), ErrorCode> {
        if bytes == 0 && files == 0 {
            return Ok(());
        }
        let fits = |u: &Usage| {
            u.bytes.load(Ordering::Relaxed).saturating_add(bytes) <= self.quota.bytes
                && u.files.load(Ordering::Relaxed).saturating_add(files) <= self.quota.files
        };
        if !fits(&self.usage) {
            let stale = self.usage.measured.lock().is_none_or(|t| t.elapsed() >= REMEASURE_EVERY);
            if stale {
                self.usage.measure(self.quota);
            }
            if !fits(&self.usage) {
                if let Some(held) = REFUSALS_LOG.take() {
                    tracing::warn!(
                        target: "quarry::sandbox",
                        dir = %self.usage.root.display(),
                        "a write was refused: the directory is at its grants.dirs quota ({} bytes, {} files); raise `quota` on the grant if the work is legitimate{}",
                        self.quota.bytes,
                        self.quota.files,
                        crate::support::log_budget::held_note(held)
                    );
                }
                return Err(ErrorCode::InsufficientSpace);
            }
        }
        self.usage.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.usage.files.fetch_add(files, Ordering::Relaxed);
        Ok(())
    }
}

/// A store's view of its directory grants: which descriptors lie under a quota'd grant.
#[derive(Default)]
pub struct FileGuard {
    /// Guest path of each read-write preopen, with its quota.
    preopens: HashMap<String, Arc<QuotaGrant>>,
    /// Descriptors (by table index) opened under a quota'd preopen, and the preopens
    /// themselves. An index is reused after its descriptor is dropped; the entry is then
    /// replaced by `open-at` or `get-directories`, the only ways to make a descriptor.
    descriptors: HashMap<u32, Arc<QuotaGrant>>,
}

impl FileGuard {
    /// Puts preopen `guest` under `grant`.
    pub fn add(&mut self, guest: &str, grant: Arc<QuotaGrant>) {
        self.preopens.insert(guest.to_string(), grant);
    }

    fn quota_of(&self, fd: &Resource<Descriptor>) -> Option<Arc<QuotaGrant>> {
        self.descriptors.get(&fd.rep()).cloned()
    }

    fn charge(&self, fd: &Resource<Descriptor>, bytes: u64, files: u64) -> Result<(), ErrorCode> {
        match self.quota_of(fd) {
            Some(q) => q.charge(bytes, files),
            None => Ok(()),
        }
    }
}

/// What the shadowed functions need of a store, borrowed together: the WASI filesystem, the
/// guard of its grants, and the instance's name for the log.
pub struct View<'a> {
    /// wasmtime-wasi's filesystem state and the resource table.
    pub fs: WasiFilesystemCtxView<'a>,
    /// The quotas of the store's read-write grants.
    pub guard: &'a mut FileGuard,
    /// The instance's name.
    pub instance: &'a str,
}

/// The [`View`] of a store.
pub fn view(parts: super::StoreView<'_>) -> View<'_> {
    View {
        fs: WasiFilesystemCtxView { ctx: parts.wasi.filesystem(), table: parts.table },
        guard: parts.states.get_mut::<Files>(),
        instance: parts.instance,
    }
}

/// A wasmtime-wasi result as the guest's `result<T, error-code>`, traps kept as traps.
fn guest<T>(r: FsResult<T>) -> wasmtime::Result<Result<T, ErrorCode>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(e.downcast()?)),
    }
}

fn borrow(fd: &Resource<Descriptor>) -> Resource<Descriptor> {
    Resource::new_borrow(fd.rep())
}

/// The size of the file behind `fd`, or `None` for a directory or an unknown descriptor.
fn file_size(view: &WasiFilesystemCtxView<'_>, fd: &Resource<Descriptor>) -> Option<(u64, Arc<std::fs::File>)> {
    match view.table.get(fd).ok()? {
        Descriptor::File(f) => Some((f.file.metadata().ok()?.len(), f.file.clone())),
        Descriptor::Dir(_) => None,
    }
}

/// Shadows the `wasi:filesystem` functions named in the module docs, on the [`View`] that `get`
/// finds in the store. Call after WASI is linked.
pub fn link<T: Send + 'static>(linker: &mut Linker<T>, get: fn(&mut T) -> View<'_>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut preopens = linker.instance("wasi:filesystem/preopens@0.2.12")?;
    preopens.func_wrap("get-directories", move |mut store: StoreContextMut<'_, T>, (): ()| {
        let View { fs: mut view, guard, .. } = get(store.data_mut());
        let dirs = view.get_directories()?;
        for (fd, guest) in &dirs {
            match guard.preopens.get(guest) {
                Some(q) => guard.descriptors.insert(fd.rep(), q.clone()),
                None => guard.descriptors.remove(&fd.rep()),
            };
        }
        Ok((dirs,))
    })?;

    let mut types = linker.instance("wasi:filesystem/types@0.2.12")?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        move |mut store: StoreContextMut<'_, T>,
              (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let View { fs: mut view, guard, instance } = get(store.data_mut());
                let exists = match view.stat_at(borrow(&fd), path_flags, path.clone()).await {
                    Ok(stat) => {
                        let openable = matches!(
                            stat.type_,
                            DescriptorType::RegularFile | DescriptorType::Directory | DescriptorType::SymbolicLink
                        );
                        if !openable {
                            if let Some(held) = REFUSALS_LOG.take() {
                                tracing::warn!(
                                    target: "quarry::sandbox",
                                    instance,
                                    "refused to open {}: it is a {:?}, not a regular file or directory{}",
                                    crate::support::text::quoted_prefix(&path, 200),
                                    stat.type_,
                                    crate::support::log_budget::held_note(held)
                                );
                            }
                            return Ok((Err(ErrorCode::NotPermitted),));
                        }
                        true
                    }
                    Err(_) => false,
                };
                if oflags.contains(OpenFlags::CREATE)
                    && !exists
                    && let Err(code) = guard.charge(&fd, 0, 1)
                {
                    return Ok((Err(code),));
                }
                let quota = guard.quota_of(&fd);
                let opened = guest(view.open_at(fd, path_flags, path, oflags, flags).await)?;
                if let Ok(new) = &opened {
                    match quota {
                        Some(q) => guard.descriptors.insert(new.rep(), q),
                        None => guard.descriptors.remove(&new.rep()),
                    };
                }
                Ok((opened,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.write",
        move |mut store: StoreContextMut<'_, T>, (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, Filesize)| {
            Box::new(async move {
                let View { fs: mut view, guard, .. } = get(store.data_mut());
                if let Some((size, _)) = file_size(&view, &fd) {
                    let growth = offset.saturating_add(buf.len() as u64).saturating_sub(size);
                    if let Err(code) = guard.charge(&fd, growth, 0) {
                        return Ok((Err(code),));
                    }
                }
                Ok((guest(view.write(fd, buf, offset).await)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-size",
        move |mut store: StoreContextMut<'_, T>, (fd, size): (Resource<Descriptor>, Filesize)| {
            Box::new(async move {
                let View { fs: mut view, guard, .. } = get(store.data_mut());
                if let Some((now, _)) = file_size(&view, &fd)
                    && let Err(code) = guard.charge(&fd, size.saturating_sub(now), 0)
                {
                    return Ok((Err(code),));
                }
                Ok((guest(view.set_size(fd, size).await)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        move |mut store: StoreContextMut<'_, T>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let View { fs: mut view, guard, .. } = get(store.data_mut());
                if let Err(code) = guard.charge(&fd, 0, 1) {
                    return Ok((Err(code),));
                }
                Ok((guest(view.create_directory_at(fd, path).await)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        move |mut store: StoreContextMut<'_, T>, (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let View { fs: mut view, guard, .. } = get(store.data_mut());
                if let Err(code) = guard.charge(&fd, 0, 1) {
                    return Ok((Err(code),));
                }
                Ok((guest(view.symlink_at(fd, old, new).await)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.link-at",
        move |mut store: StoreContextMut<'_, T>,
         (fd, flags, old, to, new): (Resource<Descriptor>, PathFlags, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let View { fs: mut view, guard, .. } = get(store.data_mut());
                if let Err(code) = guard.charge(&to, 0, 1) {
                    return Ok((Err(code),));
                }
                Ok((guest(view.link_at(fd, flags, old, to, new).await)?,))
            })
        },
    )?;
    types.func_wrap(
        "[method]descriptor.write-via-stream",
        move |mut store: StoreContextMut<'_, T>, (fd, offset): (Resource<Descriptor>, Filesize)| {
            let View { fs: mut view, guard, .. } = get(store.data_mut());
            let quota = guard.quota_of(&fd);
            let file = file_size(&view, &fd).map(|(_, f)| f);
            let stream = guest(view.write_via_stream(borrow(&fd), offset))?;
            Ok((wrap(&mut view, stream, quota, file, Some(offset))?,))
        },
    )?;
    types.func_wrap(
        "[method]descriptor.append-via-stream",
        move |mut store: StoreContextMut<'_, T>, (fd,): (Resource<Descriptor>,)| {
            let View { fs: mut view, guard, .. } = get(store.data_mut());
            let quota = guard.quota_of(&fd);
            let file = file_size(&view, &fd).map(|(_, f)| f);
            let stream = guest(view.append_via_stream(borrow(&fd)))?;
            Ok((wrap(&mut view, stream, quota, file, None)?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Puts a quota'd file stream behind a [`QuotaStream`].
fn wrap(
    view: &mut WasiFilesystemCtxView<'_>,
    stream: Result<Resource<DynOutputStream>, ErrorCode>,
    quota: Option<Arc<QuotaGrant>>,
    file: Option<Arc<std::fs::File>>,
    position: Option<u64>,
) -> wasmtime::Result<Result<Resource<DynOutputStream>, ErrorCode>> {
    let stream = match stream {
        Ok(s) => s,
        Err(code) => return Ok(Err(code)),
    };
    let (Some(quota), Some(file)) = (quota, file) else { return Ok(Ok(stream)) };
    let inner = view.table.delete(stream)?;
    Ok(Ok(view.table.push(Box::new(QuotaStream { inner, quota, file, position }) as DynOutputStream)?))
}

/// A file's output stream whose writes are charged to a quota first.
struct QuotaStream {
    inner: DynOutputStream,
    quota: Arc<QuotaGrant>,
    file: Arc<std::fs::File>,
    /// Where the next write lands; `None` when appending.
    position: Option<u64>,
}

#[wasmtime_wasi::async_trait]
impl OutputStream for QuotaStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let n = bytes.len() as u64;
        let growth = match self.position {
            None => n,
            Some(at) => at.saturating_add(n).saturating_sub(self.file.metadata().map_or(0, |m| m.len())),
        };
        if self.quota.charge(growth, 0).is_err() {
            return Err(StreamError::LastOperationFailed(std::io::Error::from_raw_os_error(libc::ENOSPC).into()));
        }
        self.inner.write(bytes)?;
        if let Some(at) = &mut self.position {
            *at = at.saturating_add(n);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for QuotaStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(toml_text: &str) -> Vec<RawDir> {
        #[derive(Deserialize)]
        struct D {
            dirs: Vec<RawDir>,
        }
        toml::from_str::<D>(toml_text).unwrap().dirs
    }

    #[test]
    fn dirs_are_checked_by_key_and_rw_grants_get_a_quota() {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir(base.path().join("d")).unwrap();
        let g = grant(dirs(r#"dirs = [{ host = "d", guest = "/d", mode = "rw" }]"#), base.path()).unwrap();
        assert_eq!(g[0].quota, Some(Quota::default()));
        assert!(g[0].writable);
        let g =
            grant(dirs(r#"dirs = [{ host = "d", guest = "/d", mode = "rw", quota = { files = 3 } }]"#), base.path())
                .unwrap();
        assert_eq!(g[0].quota, Some(Quota { bytes: DEFAULT_QUOTA_BYTES, files: 3 }));
        for (text, key, says) in [
            (r#"dirs = [{ host = "nope", guest = "/d" }]"#, "dirs[0].host", "is not a directory"),
            (r#"dirs = [{ host = "d", guest = "d" }]"#, "dirs[0].guest", "must be absolute"),
            (
                r#"dirs = [{ host = "d", guest = "/d" }, { host = "d", guest = "/d" }]"#,
                "dirs[1].guest",
                "granted twice",
            ),
            (
                r#"dirs = [{ host = "d", guest = "/d", quota = { files = 3 } }]"#,
                "dirs[0].quota",
                "only to a read-write grant",
            ),
            (
                r#"dirs = [{ host = "d", guest = "/d", mode = "rw", quota = { bytes = 0 } }]"#,
                "dirs[0].quota",
                "above zero",
            ),
        ] {
            let e = grant(dirs(text), base.path()).unwrap_err();
            assert!(e.key == key && e.message.contains(says), "{text}: {e:?}");
        }
    }
}
