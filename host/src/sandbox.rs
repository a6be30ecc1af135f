//! Per-instance sandbox state: the WASI context built from an instance's grants,
//! its HTTP hooks, its memory limiter and its captured stderr.
//!
//! Denied by default: every environment variable, every argument, stdin, stdout,
//! every directory not granted, every socket and name lookup (`wasi:sockets`),
//! every outgoing HTTP request not allowlisted. Stderr is captured (capped) and
//! written to the log after each call.
//!
//! Memory the instance can make the host hold counts against its `grants.memory`:
//! - its linear memories, summed (a component may have several);
//! - its live host resources (wasi:http header sets, request bodies, streams, pollables),
//!   each charged [`HOST_BYTES_PER_HANDLE`], the most any of them can hold (header sets are
//!   capped at [`FIELD_SIZE_LIMIT`], an outgoing body buffers one chunk of at most
//!   [`BODY_CHUNK`], a response head is read into at most [`crate::http::RESPONSE_HEAD_MAX`]).
//!   The first [`FREE_HANDLES`] are not charged, so a guest at its memory limit can still open
//!   a file or write to stderr. Past the budget, the next resource is refused: the host call
//!   traps, the call fails as [`crate::Fault::ResourceLimit`] and the instance is recycled.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::config::InstanceConfig;
use crate::embedder::EmbedderBackend;
use crate::http::PolicyHooks;

/// How much of a guest's stderr is kept per call.
pub const STDERR_CAP: usize = 64 << 10;
/// The largest header set (names and values) a guest may build or receive.
pub const FIELD_SIZE_LIMIT: usize = 64 << 10;
/// The largest write to an outgoing body; one is buffered while the previous one is sent.
pub const BODY_CHUNK: usize = 64 << 10;
/// What one live host resource is charged against the memory grant: the most it can hold.
pub const HOST_BYTES_PER_HANDLE: usize = 128 << 10;
/// Host resources a guest may hold before any is charged.
pub const FREE_HANDLES: usize = 256;
/// Most table elements an instance may grow to.
const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Most core instances one component may create.
const MAX_INSTANCES: usize = 64;

/// The data of one instance's `Store`.
pub struct StoreState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    pub(crate) hooks: PolicyHooks,
    table: ResourceTable,
    limiter: MemoryLimiter,
    pub(crate) stderr: GuestLog,
    pub(crate) embedder: Option<Arc<dyn EmbedderBackend>>,
    /// The instance's Bedrock grant and client, when it has one.
    pub(crate) bedrock: Option<Arc<crate::bedrock::BedrockLink>>,
    /// The instance's Couchbase grant and connection, when it has one.
    pub(crate) couchbase: Option<Arc<crate::couchbase::CouchbaseLink>>,
    /// The instance's name, for tagging what it reports.
    pub(crate) instance: String,
    /// When the running call's deadline passes; the epoch callback interrupts the guest then.
    pub(crate) call_deadline: Instant,
    /// Quotas of the read-write directory grants.
    files: crate::files::FileGuard,
    /// Whether the guest yields its thread at each epoch tick (see [`crate::engine::QuarryEngine::without_yielding`]).
    pub(crate) yields: bool,
}

/// Why a sandbox could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot grant directory {host} as {guest}: {message}")]
pub struct SandboxError {
    host: String,
    guest: String,
    message: String,
}

impl StoreState {
    /// A sandbox holding exactly what `cfg` grants.
    pub fn new(cfg: &InstanceConfig, embedder: Option<Arc<dyn EmbedderBackend>>) -> Result<Self, SandboxError> {
        let stderr = GuestLog::default();
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        let mut files = crate::files::FileGuard::default();
        for d in &cfg.grants.dirs {
            let perms = if d.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            if let Some(quota) = d.quota {
                files.add(&d.guest, crate::files::QuotaGrant::new(&d.host, quota));
            }
            b.preopened_dir(&d.host, &d.guest, perms).map_err(|e| SandboxError {
                host: d.host.display().to_string(),
                guest: d.guest.clone(),
                message: format!("{e:#}"),
            })?;
        }
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(FIELD_SIZE_LIMIT);
        let limiter = MemoryLimiter::new(cfg.grants.memory as usize);
        let mut table = ResourceTable::new();
        table.set_max_capacity(limiter.handle_capacity(0));
        Ok(StoreState {
            wasi: b.build(),
            http,
            hooks: PolicyHooks::new(Arc::new(cfg.grants.http.clone())),
            table,
            limiter,
            stderr,
            embedder,
            bedrock: cfg.grants.bedrock.clone().map(|g| crate::bedrock::BedrockLink::new(g, cfg.grants.max_output)),
            couchbase: cfg
                .grants
                .couchbase
                .clone()
                .map(|g| crate::couchbase::CouchbaseLink::new(g, cfg.grants.max_output)),
            instance: cfg.name.clone(),
            call_deadline: Instant::now(),
            files,
            yields: true,
        })
    }

    /// The WASI filesystem view, the directory guard and the instance name, borrowed together.
    pub(crate) fn filesystem_parts(
        &mut self,
    ) -> (wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>, &mut crate::files::FileGuard, &str) {
        let view =
            wasmtime_wasi::filesystem::WasiFilesystemCtxView { ctx: self.wasi.filesystem(), table: &mut self.table };
        (view, &mut self.files, &self.instance)
    }

    /// The limiter, for `Store::limiter`: it sees the linear memories and the resource table.
    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        self
    }

    /// Prepares for a guest call that must end by `deadline`: a refused growth from an earlier
    /// call must not make this call's trap read as out of memory.
    pub(crate) fn begin_call(&mut self, deadline: Instant) {
        self.call_deadline = deadline;
        self.limiter.denied = None;
    }

    /// After a guest call: the outgoing requests it started end with it.
    pub(crate) async fn end_call(&mut self) {
        self.hooks.end_call().await;
    }

    /// The size a refused memory growth asked for, if one was refused during this call.
    pub(crate) fn denied_growth(&self) -> Option<usize> {
        self.limiter.denied
    }

    /// The memory grant, in bytes.
    pub(crate) fn memory_limit(&self) -> usize {
        self.limiter.limit
    }

    /// How many host resources the instance may hold now.
    pub(crate) fn handle_limit(&self) -> usize {
        self.table.max_capacity()
    }

    /// Live host resources (walks the table: for the rare memory growth and for messages).
    fn live_handles(&mut self) -> usize {
        self.table.iter_mut().count()
    }
}

impl ResourceLimiter for StoreState {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let handles = self.live_handles();
        let allowed = self.limiter.grow(current, desired, maximum, handles);
        if allowed {
            let cap = self.limiter.handle_capacity(self.limiter.total);
            self.table.set_max_capacity(cap);
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limiter.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limiter.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limiter.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limiter.limits.memories()
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

/// Enforces the memory grant over all of an instance's linear memories together (wasmtime's
/// own limit applies to each memory alone), with its host resources charged against the same
/// grant (see the module docs), and remembers a refused growth so a following trap can be
/// reported as out-of-memory rather than as a mystery.
pub struct MemoryLimiter {
    limits: StoreLimits,
    limit: usize,
    /// Bytes of linear memory across every memory of the store.
    total: usize,
    /// The size a refused growth asked for.
    pub denied: Option<usize>,
}

impl MemoryLimiter {
    /// A limiter granting `limit` bytes in all.
    pub fn new(limit: usize) -> Self {
        let limits = StoreLimitsBuilder::new()
            .memory_size(limit)
            .table_elements(MAX_TABLE_ELEMENTS)
            .instances(MAX_INSTANCES)
            .build();
        MemoryLimiter { limits, limit, total: 0, denied: None }
    }

    /// The grant, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Linear memory in use, all memories together.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether one memory may grow from `current` to `desired` bytes while the store holds
    /// `handles` host resources. Refuses rather than traps (StoreLimits' default): a guest that
    /// handles allocation failure keeps working; one that aborts is reported as out of memory.
    pub fn grow(&mut self, current: usize, desired: usize, maximum: Option<usize>, handles: usize) -> bool {
        let grown = self.total.saturating_sub(current).saturating_add(desired);
        let charged = handles.saturating_sub(FREE_HANDLES).saturating_mul(HOST_BYTES_PER_HANDLE);
        let allowed = grown.saturating_add(charged) <= self.limit && maximum.is_none_or(|m| desired <= m);
        if allowed {
            self.total = grown;
        } else {
            self.denied = Some(grown.saturating_add(charged));
        }
        allowed
    }

    /// How many host resources fit beside `linear` bytes of linear memory.
    pub fn handle_capacity(&self, linear: usize) -> usize {
        FREE_HANDLES + self.limit.saturating_sub(linear) / HOST_BYTES_PER_HANDLE
    }
}

/// Captures a guest's stderr, keeping at most [`STDERR_CAP`] bytes between drains.
#[derive(Clone, Default)]
pub struct GuestLog(Arc<Mutex<Vec<u8>>>);

impl GuestLog {
    /// Takes what was written since the last call.
    pub fn take(&self) -> String {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    // Synchronous, so a panic message written just before the trap is kept.
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

impl GuestLog {
    fn append(&self, buf: &[u8]) {
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let room = STDERR_CAP.saturating_sub(log.len());
        log.extend_from_slice(&buf[..buf.len().min(room)]);
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestLog {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always room: a chatty guest loses its excess output, not its progress.
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestLog {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestLog {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use wasmtime::component::{Component, Linker};

    use super::*;
    use crate::config::{Grants, InstanceConfig};
    use crate::engine::QuarryEngine;

    fn instance(memory: u64) -> InstanceConfig {
        InstanceConfig {
            name: "t".into(),
            component: "t.wasm".into(),
            config_json: "{}".into(),
            embedder: None,
            pool: 1,
            grants: Grants {
                dirs: Vec::new(),
                http: crate::http::HttpPolicy::deny_all("t"),
                memory,
                deadline: Duration::from_secs(10),
                max_output: 1 << 20,
                bedrock: None,
                couchbase: None,
            },
        }
    }

    /// A component of four core instances, each with its own memory, each growable from outside.
    const FOUR_MEMORIES: &str = r#"(component
        (core module $m
            (memory (export "mem") 1)
            (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))
        (core instance $a (instantiate $m))
        (core instance $b (instantiate $m))
        (core instance $c (instantiate $m))
        (core instance $d (instantiate $m))
        (func (export "grow-a") (param "pages" u32) (result s32) (canon lift (core func $a "grow")))
        (func (export "grow-b") (param "pages" u32) (result s32) (canon lift (core func $b "grow")))
        (func (export "grow-c") (param "pages" u32) (result s32) (canon lift (core func $c "grow")))
        (func (export "grow-d") (param "pages" u32) (result s32) (canon lift (core func $d "grow")))
    )"#;

    #[tokio::test]
    async fn the_memory_grant_covers_every_memory_together() {
        let engine = QuarryEngine::with_cache(None).unwrap();
        let component = Component::new(engine.engine(), wat::parse_str(FOUR_MEMORIES).unwrap()).unwrap();
        let grant = 64 << 20;
        let mut store = crate::instance::new_store(&engine, &instance(grant), None).unwrap();
        store.data_mut().begin_call(Instant::now() + Duration::from_secs(10));
        store.set_epoch_deadline(1);
        let inst = Linker::new(engine.engine()).instantiate_async(&mut store, &component).await.unwrap();
        let mut grow = async |name: &str, pages: u32| -> i32 {
            let f = inst.get_typed_func::<(u32,), (i32,)>(&mut store, name).unwrap();
            f.call_async(&mut store, (pages,)).await.unwrap().0
        };
        // 600 pages (37.5 MiB) fit once; each memory alone would fit them under a per-memory limit.
        assert_eq!(grow("grow-a", 600).await, 1);
        assert_eq!(grow("grow-b", 600).await, -1, "a second 37.5 MiB would pass the 64 MiB grant");
        assert_eq!(grow("grow-b", 300).await, 1);
        assert_eq!(grow("grow-c", 300).await, -1);
        assert_eq!(grow("grow-d", 100).await, 1);
        assert_eq!(grow("grow-c", 100).await, -1);
        let total = store.data().limiter.total();
        assert!(total <= grant as usize, "{total} bytes of linear memory under a grant of {grant}");
        assert_eq!(total, (4 + 600 + 300 + 100) * 65536);
    }

    #[test]
    fn host_resources_are_charged_against_the_same_grant() {
        let mut l = MemoryLimiter::new(64 << 20);
        // The free resources cost nothing.
        assert!(l.grow(0, 60 << 20, None, FREE_HANDLES));
        // 100 more resources are 12.5 MiB of host memory: 4 more MiB of linear memory won't fit.
        assert!(!l.grow(60 << 20, 64 << 20, None, FREE_HANDLES + 100));
        assert!(l.denied.is_some());
        assert_eq!(l.handle_capacity(60 << 20), FREE_HANDLES + 32);
    }
}
