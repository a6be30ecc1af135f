//! Couchbase FTS vector search: CrewAI's CouchbaseFTSVectorSearchTool, rebuilt as a sandboxed
//! component over the host's `couchbase` capability (the host holds the connection and the
//! credentials and bounds every call in time; the component never sees them).
//!
//! - [`config`] validates the instance config with CrewAI's keys, defaults and messages;
//! - [`tool`] is the tool: the fail-fast checks at open (bucket, scope, collection, index, and
//!   the index's vector dimension against the embedder's), and the search;
//! - the component glue (wasm only) connects [`tool`] to WIT.
//!
//! All but the glue is plain Rust, tested natively.

pub mod config;
pub mod tool;

#[cfg(target_arch = "wasm32")]
mod component;
