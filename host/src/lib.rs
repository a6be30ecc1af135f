//! Quarry: a wasmtime host that loads retrieval tools as sandboxed WebAssembly
//! components and serves them to agent runtimes.
//!
//! - [`config`]: the TOML config — instances, their component, their limits ([`limits`]) and
//!   their grants, in the value types of [`values`];
//! - [`capability`]: what a component may ask the host for, one folder each ([`capability::files`],
//!   [`capability::http`], [`capability::embedder`], [`capability::progress`],
//!   [`capability::bedrock`], [`capability::couchbase`], [`capability::nn`]), and the one list of them;
//! - [`runtime`]: what runs guests — the engine and cache, the store's data, the guarded call;
//! - [`instance`]: one component version and one running tool instance; [`embedders`]: embedder
//!   components as a pool, the embedder capability's backend; [`fair`]: the fair queue that
//!   shares a pool between tools;
//! - [`registry`]: every instance, calls, and hot swap; [`watch`] drives it from the file system;
//! - [`mcp`]: the MCP server (stdio and streamable HTTP); [`cli`]: the `quarry` command;
//!   [`output`]: a call's output as JSON, for both;
//! - [`args`]: a call's arguments, typed where they enter and serialised once;
//! - [`text`]: bounding and escaping text the host does not trust; [`log_budget`]: rate-limited
//!   log lines for what a guest or client can repeat.
//!
//! The capability modules are also reachable at the top (`quarry::http`, `quarry::bedrock`, …),
//! as are the engine and the cache (`quarry::engine`, `quarry::cache`).

#![deny(missing_docs)]

pub mod args;
pub mod bindings;
pub mod capability;
pub mod cli;
pub mod config;
pub mod embedders;
pub mod eval;
pub mod fair;
pub mod instance;
pub mod limits;
pub mod log_budget;
pub mod mcp;
pub mod output;
pub mod registry;
pub mod runtime;
pub mod text;
pub mod values;
pub mod watch;

pub use args::Args;
pub use capability::{bedrock, couchbase, embedder, files, http, nn, progress};
pub use config::Config;
pub use instance::{CallError, OpenError};
pub use registry::{Registry, ReloadError, SwapReport, ToolEntry};
pub use runtime::{Fault, cache, engine};
