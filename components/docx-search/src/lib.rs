//! DOCX semantic search: CrewAI's DOCXSearchTool, rebuilt as a sandboxed component.
//!
//! - [`package`] and [`extract`] (from the shared `docx-text` crate) vet a file before anything
//!   parses it (not a zip, legacy .doc, encrypted, truncated, zip bomb) and read it with docx-rs,
//!   keeping headings, tables, lists, text boxes and notes;
//! - [`sections`] chunks it section by section with rag-core;
//! - [`tool`] is the tool: config, schemas, calls, the index;
//! - [`resources`] lists and reads the indexed documents' sections as MCP resources;
//! - the component glue (wasm only) connects [`tool`] to WIT: files through the preopens the
//!   host granted, URLs through wasi-http, vectors through the host-linked embedder.
//!
//! All but the glue is plain Rust, tested natively.

pub use docx_text::{extract, notes, package};
pub mod resources;
pub mod sections;
pub mod tool;

#[cfg(target_arch = "wasm32")]
mod component;
