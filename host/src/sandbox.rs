//! Per-instance sandbox state: the WASI context built from an instance's grants,
//! its HTTP hooks, its memory limiter and its captured stderr.
//!
//! Denied by default: every environment variable, every argument, stdin, stdout,
//! every directory not granted, every socket and name lookup (`wasi:sockets`),
//! every outgoing HTTP request not allowlisted. Stderr is captured (capped) and
//! written to the log after each call.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

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
    pub(crate) limiter: MemoryLimiter,
    pub(crate) stderr: GuestLog,
    pub(crate) embedder: Option<Arc<dyn EmbedderBackend>>,
    /// The instance's Bedrock grant and client, when it has one.
    pub(crate) bedrock: Option<Arc<crate::bedrock::BedrockLink>>,
    /// The instance's Couchbase grant and connection, when it has one.
    pub(crate) couchbase: Option<Arc<crate::couchbase::CouchbaseLink>>,
    /// The instance's name, for tagging what it reports.
    pub(crate) instance: String,
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
        for d in &cfg.grants.dirs {
            let perms = if d.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            b.preopened_dir(&d.host, &d.guest, perms).map_err(|e| SandboxError {
                host: d.host.display().to_string(),
                guest: d.guest.clone(),
                message: format!("{e:#}"),
            })?;
        }
        Ok(StoreState {
            wasi: b.build(),
            http: WasiHttpCtx::new(),
            hooks: PolicyHooks::new(Arc::new(cfg.grants.http.clone())),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(cfg.grants.memory as usize),
            stderr,
            embedder,
            bedrock: cfg.grants.bedrock.clone().map(crate::bedrock::BedrockLink::new),
            couchbase: cfg.grants.couchbase.clone().map(crate::couchbase::CouchbaseLink::new),
            instance: cfg.name.clone(),
        })
    }

    /// The limiter, for `Store::limiter`.
    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limiter
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

/// Enforces the memory grant with wasmtime's [`StoreLimits`], and remembers a
/// refused growth so a following trap can be reported as out-of-memory rather
/// than as a mystery.
pub struct MemoryLimiter {
    limits: StoreLimits,
    limit: usize,
    /// The size a refused growth asked for.
    pub denied: Option<usize>,
}

impl MemoryLimiter {
    /// A limiter granting `limit` bytes of linear memory per memory.
    pub fn new(limit: usize) -> Self {
        // Refuse rather than trap (StoreLimits' default): a guest that handles
        // allocation failure keeps working; one that aborts is reported as out of memory.
        let limits = StoreLimitsBuilder::new()
            .memory_size(limit)
            .table_elements(MAX_TABLE_ELEMENTS)
            .instances(MAX_INSTANCES)
            .build();
        MemoryLimiter { limits, limit, denied: None }
    }

    /// The grant, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.denied = Some(desired);
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
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
