//! Integration tests: fixture components in the real wasmtime host, and the
//! `quarry` binary driven as a user would.

// The Couchbase SDK's futures are deep; a test that awaits one through the corpus goes past
// the compiler's default layout depth when the workspace's features are unified.
#![recursion_limit = "256"]

mod bedrock;
mod cache;
mod chapter_rag;
mod cli;
mod config_errors;
mod conformance;
mod corpus;
mod corpus_couchbase;
mod couchbase;
mod couchbase_store;
mod crew;
mod docx_search;
mod embedder;
mod embedder_onnx;
mod eval;
mod fleet;
mod hardening;
mod hot_swap;
mod mcp;
mod mcp_bad_input;
mod nn;
mod oci;
mod onnxruntime;
mod operations;
mod sandbox;
mod serving;
