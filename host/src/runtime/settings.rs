//! The engine's settings, in one place: the engine uses them, and so does the compile worker
//! (`runtime::compile`), which must make code the engine loads.

use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::support::limits::MAX_MEMORY;

/// Memories the pool can hold at once (live instances plus recycling headroom).
pub const POOL_MEMORIES: u32 = 256;

/// The engine's configuration: epochs, the component model, the pooling allocator.
pub(crate) fn config() -> Config {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_MEMORIES)
        .total_core_instances(POOL_MEMORIES * 8)
        .total_memories(POOL_MEMORIES)
        .total_tables(POOL_MEMORIES * 2)
        .total_stacks(POOL_MEMORIES)
        .max_memories_per_component(4)
        .max_tables_per_component(8)
        .max_core_instances_per_component(32)
        .max_memory_size(MAX_MEMORY as usize)
        .table_elements(100_000);
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    cfg
}
