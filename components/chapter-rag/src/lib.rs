//! Chapter-level ("directory") RAG over a manual: route a question to the right chapters of a
//! long document, then search inside them.
//!
//! - [`manual`] reads a manual: Markdown as it is, DOCX through `docx-text`;
//! - [`tree`] builds the chapter tree from the Markdown headings (CommonMark) or the DOCX's;
//! - [`units`] turns chapters into chunks, merging short chapters with a neighbour;
//! - [`env`] is what the index and the tools need from outside;
//! - [`index`] embeds the chunks (reusing the vectors of unchanged text) and keeps the index;
//! - [`search`] is hybrid search (vectors + BM25, fused by rank) and routing;
//! - [`tool`] is the six tools, their schemas, arguments and output;
//! - the component glue (wasm only) connects [`tool`] to WIT.
//!
//! All but the glue is plain Rust, tested natively.

pub mod args;
pub mod catalog;
pub mod env;
pub mod index;
pub mod manual;
pub mod model_route;
pub mod search;
pub mod tool;
pub mod tree;
pub mod units;

#[cfg(target_arch = "wasm32")]
mod component;
