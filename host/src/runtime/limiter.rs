//! The memory grant, over all of an instance's linear memories together and the host resources
//! it holds (the store charges them: see its `StoreState`).

use wasmtime::{StoreLimits, StoreLimitsBuilder};

use crate::support::held::HostHeld;

/// What one live host resource is charged against the memory grant: the most it can hold.
pub const HOST_BYTES_PER_HANDLE: usize = 128 << 10;
/// Host resources a guest may hold before any is charged.
pub const FREE_HANDLES: usize = 256;
/// Most table elements an instance may grow to.
const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Most core instances one component may create.
const MAX_INSTANCES: usize = 64;

/// Enforces the memory grant over all of an instance's linear memories together (wasmtime's
/// own limit applies to each memory alone), with its host resources charged against the same
/// grant (see the module docs), and remembers a refused growth so a following trap can be
/// reported as out-of-memory rather than as a mystery.
pub struct MemoryLimiter {
    pub(super) limits: StoreLimits,
    pub(super) limit: usize,
    /// Bytes of linear memory across every memory of the store.
    pub(super) total: usize,
    /// The size a refused growth asked for.
    pub denied: Option<usize>,
    /// What the capabilities hold in the host for the store (a corpus writer's batch).
    pub(super) held: HostHeld,
}

impl MemoryLimiter {
    /// A limiter granting `limit` bytes in all, `held` among them.
    pub fn new(limit: usize, held: HostHeld) -> Self {
        let limits = StoreLimitsBuilder::new()
            .memory_size(limit)
            .table_elements(MAX_TABLE_ELEMENTS)
            .instances(MAX_INSTANCES)
            .build();
        MemoryLimiter { limits, limit, total: 0, denied: None, held }
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
    /// `handles` host resources and the bytes its capabilities hold. Refuses rather than traps (StoreLimits' default): a guest that
    /// handles allocation failure keeps working; one that aborts is reported as out of memory.
    pub fn grow(&mut self, current: usize, desired: usize, maximum: Option<usize>, handles: usize) -> bool {
        let grown = self.total.saturating_sub(current).saturating_add(desired);
        let charged = handles.saturating_sub(FREE_HANDLES).saturating_mul(HOST_BYTES_PER_HANDLE) + self.held.bytes();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_resources_are_charged_against_the_same_grant() {
        let held = HostHeld::default();
        let mut l = MemoryLimiter::new(64 << 20, held.clone());
        // The free resources cost nothing.
        assert!(l.grow(0, 60 << 20, None, FREE_HANDLES));
        // 100 more resources are 12.5 MiB of host memory: 4 more MiB of linear memory won't fit.
        assert!(!l.grow(60 << 20, 64 << 20, None, FREE_HANDLES + 100));
        assert!(l.denied.is_some());
        assert_eq!(l.handle_capacity(60 << 20), FREE_HANDLES + 32);
        // Bytes a capability holds (a pending corpus batch) count too.
        let mut batch = held.charge();
        batch.add(2 << 20, 60 << 20, 64 << 20).unwrap();
        assert!(!l.grow(60 << 20, 63 << 20, None, FREE_HANDLES));
        drop(batch);
        assert!(l.grow(60 << 20, 63 << 20, None, FREE_HANDLES));
    }
}
