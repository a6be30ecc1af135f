//! Quarry: a wasmtime host that loads retrieval tools as sandboxed WebAssembly
//! components and serves them to agent runtimes.
//!
//! The rooms, lowest first (a module uses only those above it in this list, and its own):
//! - [`support`]: text the host does not trust ([`support::text`]), the config's value types
//!   ([`support::values`]), the limits ([`support::limits`]), rate-limited log lines
//!   ([`support::log_budget`]), the fair queue ([`support::fair`]), the Prometheus text
//!   ([`support::exposition`]); and [`args`], a call's
//!   arguments, typed where they enter and serialised once;
//! - [`capability`]: what a component may ask the host for, one folder each, and the one list
//!   of them (its app-level states, its grants and sections, its store states);
//! - [`config`]: the TOML config: instances, their component, their limits and grants; [`oci`]:
//!   the components it names in OCI registries, fetched and pinned before the registry loads;
//! - [`runtime`]: what runs guests: the engine and cache, the store's data, the guarded call,
//!   the pool of stores a tool instance or an embedder is;
//! - [`registry`]: the core: a component version and a tool instance ([`registry::instance`]),
//!   the embedder pool ([`registry::embedders`]), every instance, calls and hot swap;
//!   [`watch`] drives the swaps from the file system; [`metrics`]: what `/metrics` writes of
//!   them;
//! - [`mcp`]: the MCP server (stdio and streamable HTTP); [`cli`]: the `quarry` command;
//!   [`eval`]: `quarry eval`; [`output`]: a call's output as JSON, for the MCP server and the
//!   CLI both.
//!
//! Where a change goes: a new capability is a type implementing `capability::Capability` and
//! its line in `capability/list.rs` (see host/README.md); a tool is a component under `components/`,
//! never host code; a limit is a constant in `crates/support/src/limits.rs` (or a grant key in its
//! capability); an MCP feature is a module under `mcp/`.
//!
//! Each module has one name, its place in this list (`quarry::capability::http`,
//! `quarry::runtime::engine`, `quarry::support::text`, …); the types a user of the library starts
//! from are also at the top ([`Registry`], [`Config`], [`Args`], [`CallError`]).

#![deny(missing_docs)]

pub mod args;
pub mod bindings;
pub mod capability;
pub mod cli;
pub mod config;
pub mod eval;
pub mod mcp;
pub mod metrics;
#[cfg(feature = "oci")]
pub mod oci;
pub mod output;
pub mod registry;
pub mod runtime;
pub mod watch;

pub use args::Args;
pub use config::Config;
/// The support crate, under the one name the host's modules use for it.
pub use quarry_support as support;
pub use registry::errors::{CallError, OpenError};
pub use registry::{Registry, ReloadError, SwapReport, ToolEntry};
pub use runtime::Fault;
