//! The data of one instance's `Store`: the WASI context built from the instance's grants, the
//! resource table, the memory limiter, the captured stderr, and every capability's state
//! ([`crate::capability::CapabilityStates`], which this module knows only as a bundle).
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
//!   capped at [`crate::capability::http::FIELD_SIZE_LIMIT`], an outgoing body buffers one chunk of at most
//!   [`crate::capability::http::BODY_CHUNK`], a response head is read into at most
//!   [`crate::capability::http::RESPONSE_HEAD_MAX`]). The first [`FREE_HANDLES`] are not charged, so a
//!   guest at its memory limit can still open a file or write to stderr. Past the budget, the
//!   next resource is refused: the host call traps, the call fails as
//!   [`crate::Fault::ResourceLimit`] and the instance is recycled;
//! - what its capabilities hold for it in the host ([`HostHeld`]: a corpus writer's pending
//!   batch), one count for every capability and handle: a charge that would pass the grant is
//!   refused with an error the guest can handle, and so is linear memory that would.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::guest_log::GuestLog;
use super::limiter::MemoryLimiter;
pub use super::limiter::{FREE_HANDLES, HOST_BYTES_PER_HANDLE};
use crate::capability::SandboxError;
use crate::capability::embedder::EmbedderBackend;
use crate::capability::{AppStates, CallCx, CapabilityStates, CapabilityStore, StoreContext, StoreView};
use crate::config::InstanceConfig;
use crate::support::held::HostHeld;

/// The data of one instance's `Store`.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    pub(crate) stderr: GuestLog,
    /// Every capability's state.
    pub(crate) caps: CapabilityStates,
    /// The instance's name, for tagging what it reports.
    pub(crate) instance: String,
    /// When the running call's deadline passes; the epoch callback interrupts the guest then.
    pub(crate) call_deadline: Instant,
    /// The guest's stderr lines of the last call, as logged: a caller may hear them too.
    pub(crate) logged: Vec<String>,
    /// Whether the guest yields its thread at each epoch tick (see
    /// [`crate::runtime::engine::QuarryEngine::without_yielding`]).
    pub(crate) yields: bool,
}

impl StoreState {
    /// A sandbox holding exactly what `cfg` grants; its `embedder` import served by `embedder`.
    /// Its capabilities' app-level state is `app`'s.
    pub fn new(
        cfg: &InstanceConfig,
        embedder: Option<Arc<dyn EmbedderBackend>>,
        app: &AppStates,
    ) -> Result<Self, SandboxError> {
        let stderr = GuestLog::default();
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        let held = HostHeld::default();
        let mut cx = StoreContext {
            instance: &cfg.name,
            max_output: cfg.grants.max_output,
            embedder,
            app,
            wasi: &mut b,
            held: &held,
        };
        let caps = CapabilityStates::new(&cfg.grants.caps, &mut cx)?;
        let limiter = MemoryLimiter::new(cfg.grants.memory as usize, held);
        let mut table = ResourceTable::new();
        table.set_max_capacity(limiter.handle_capacity(0));
        Ok(StoreState {
            wasi: b.build(),
            table,
            limiter,
            stderr,
            caps,
            instance: cfg.name.clone(),
            call_deadline: Instant::now(),
            logged: Vec::new(),
            yields: true,
        })
    }

    /// The limiter, for `Store::limiter`: it sees the linear memories and the resource table.
    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        self
    }

    /// Prepares for a guest call that must end by `deadline`: a refused growth from an earlier
    /// call must not make this call's trap read as out of memory.
    pub(crate) fn begin_call(&mut self, deadline: Instant, cx: &CallCx<'_>) {
        self.call_deadline = deadline;
        self.limiter.denied = None;
        self.caps.begin_call(cx);
    }

    /// After a guest call: what the capabilities started for it ends with it.
    pub(crate) async fn end_call(&mut self) {
        self.caps.end_call().await;
    }

    /// The guest's stderr lines of the last call (at most 16 of at most 1 KiB).
    pub(crate) fn take_logged(&mut self) -> Vec<String> {
        std::mem::take(&mut self.logged)
    }

    /// What the capabilities refused since the last call.
    pub(crate) fn take_refusals(&self) -> Vec<String> {
        self.caps.take_refusals()
    }

    /// The size a refused memory growth asked for, if one was refused during this call.
    pub(crate) fn denied_growth(&self) -> Option<usize> {
        self.limiter.denied
    }

    /// The memory grant, in bytes.
    pub(crate) fn memory_limit(&self) -> usize {
        self.limiter.limit
    }

    /// Linear memory in use, all memories together.
    pub fn memory_used(&self) -> usize {
        self.limiter.total
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

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl CapabilityStore for StoreState {
    fn parts(&mut self) -> StoreView<'_> {
        StoreView {
            states: &mut self.caps,
            table: &mut self.table,
            wasi: &mut self.wasi,
            instance: &self.instance,
            deadline: self.call_deadline,
            memory: self.limiter.limit(),
            linear: self.limiter.total,
        }
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use wasmtime::component::{Component, Linker};

    use crate::config::{Grants, InstanceConfig};
    use crate::runtime::engine::QuarryEngine;

    fn instance(memory: u64) -> InstanceConfig {
        InstanceConfig {
            oci: None,
            signed_by: None,
            name: "t".into(),
            component: "t.wasm".into(),
            config_json: "{}".into(),
            embedder: None,
            pool: 1,
            bare_names: false,
            resource_schemes: Vec::new(),
            grants: Grants {
                memory,
                deadline: Duration::from_secs(10),
                prepare_deadline: Duration::from_secs(10),
                max_output: 1 << 20,
                // Nothing granted: the grants of an empty grants table.
                caps: crate::capability::Grants::parse(
                    Default::default(),
                    &Default::default(),
                    &crate::capability::GrantContext {
                        instance: "t",
                        base: std::path::Path::new("."),
                        deadline: Duration::from_secs(10),
                        private_dir: None,
                    },
                )
                .unwrap(),
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
        let mut store = crate::runtime::guarded::new_store(&engine, &instance(grant), None).unwrap();
        store.data_mut().begin_call(Instant::now() + Duration::from_secs(10), &crate::capability::CallCx::default());
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
        let total = store.data().memory_used();
        assert!(total <= grant as usize, "{total} bytes of linear memory under a grant of {grant}");
        assert_eq!(total, (4 + 600 + 300 + 100) * 65536);
    }
}
