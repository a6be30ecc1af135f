//! Quarry: a wasmtime host that loads retrieval tools as sandboxed WebAssembly
//! components and serves them to agent runtimes.
//!
//! - [`config`]: the TOML config — instances, their component and their grants;
//! - [`engine`], [`cache`]: the wasmtime engine (epochs, pooling allocator) and
//!   the precompiled-component cache;
//! - [`sandbox`]: per-instance WASI state built from the grants; [`files`]: directory-grant
//!   quotas and the refusal of FIFOs and devices;
//! - capabilities: [`http`] (outgoing HTTP allowlist), [`embedder`], [`progress`], [`bedrock`],
//!   [`couchbase`];
//! - [`instance`]: one component version and one running instance; [`fair`]: the fair
//!   queue that shares a pool between tools;
//! - [`registry`]: every instance, calls, and hot swap; [`watch`] drives it from the file system;
//! - [`mcp`]: the MCP server (stdio and streamable HTTP);
//! - [`cli`]: the `quarry` command;
//! - [`text`]: bounding and escaping text the host does not trust; [`log_budget`]: rate-limited
//!   log lines for what a guest or client can repeat.

#![deny(missing_docs)]

pub mod bedrock;
pub mod bindings;
pub mod cache;
pub mod cli;
pub mod config;
pub mod couchbase;
pub mod embedder;
pub mod engine;
pub mod fair;
pub mod files;
pub mod http;
pub mod instance;
pub mod log_budget;
pub mod mcp;
pub mod progress;
pub mod registry;
pub mod sandbox;
pub mod text;
pub mod watch;

pub use config::Config;
pub use instance::{CallError, Fault, OpenError};
pub use registry::{Host, ReloadError, SwapReport, ToolEntry};
