//! What runs guest code, knowing no capability: the wasmtime engine and its precompiled cache,
//! the store's data (WASI, the resource table, the memory limiter, captured stderr, and the
//! capabilities' states as one bundle), and the guarded call every guest call goes through.
//!
//! - [`engine`], [`cache`]: the engine (epochs, pooling allocator) and the `.cwasm` cache;
//! - [`compile`]: compiling in a worker process under a memory and a time limit;
//! - [`confine`]: what the compile worker gives up before it reads a component;
//! - [`settings`]: the engine's configuration, shared by the engine and the compile worker;
//! - [`store`]: [`store::StoreState`], built from an instance's grants;
//! - [`limiter`]: the memory grant over every memory and the host resources held;
//! - [`guest_log`]: the guest's stderr, captured;
//! - [`guarded`]: a store for a call, the call under its deadline, its [`guarded::Fault`];
//! - [`pool`]: [`pool::StorePool`], the members of a tool instance or an embedder, handed out
//!   fairly, recycled after a fault.

pub mod cache;
pub mod compile;
pub mod confine;
pub mod engine;
pub mod guarded;
pub mod guest_log;
pub mod limiter;
pub mod pool;
pub mod settings;
pub mod store;

pub use guarded::Fault;
