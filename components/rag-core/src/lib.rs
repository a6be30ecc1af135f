//! What the RAG components share. Plain Rust: built into each component for wasm32-wasip2 and
//! tested natively.
//!
//! - [`chunk`]: splitting text with `text-splitter`, by characters (CrewAI's 2500/250) or by
//!   the embedder's own tokens, so that no chunk is cut when it is embedded;
//! - [`score`]: the one normalised score that thresholds apply to;
//! - [`vector`]: nearest neighbours, exact below [`vector::EXACT_LIMIT`] vectors, HNSW
//!   (`instant-distance`) above;
//! - [`bm25`]: a keyword leg, and [`fuse`]: reciprocal rank fusion of the legs;
//! - [`pyjson`]: JSON as Python's `json.dumps(indent=2)` writes it, keys in their order;
//! - [`corpus`]: a corpus of chunks a tool writes in batches and searches (kept by the host
//!   through WIT's `corpus`, or by the tool itself), and the generation both keepers search;
//! - [`store`]: the index of documents and chunks, keyed by content hash + model id + chunking
//!   parameters, in a versioned file written atomically.

#![deny(missing_docs)]

pub mod bm25;
pub mod chunk;
pub mod corpus;
pub mod fuse;
pub mod hybrid;
pub mod pyjson;
pub mod score;
pub mod store;
pub mod vector;
