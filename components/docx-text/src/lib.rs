//! Text out of DOCX files, shared by the components that read them (docx-search, chapter-rag).
//!
//! - [`package`] vets a file before anything parses it (not a zip, legacy .doc, encrypted,
//!   Strict OOXML, truncated, zip bomb);
//! - [`extract`] reads it with docx-rs, keeping headings (as a path on every block), tables,
//!   lists, text boxes and notes;
//! - [`notes`] reads footnotes and endnotes, which docx-rs skips.

pub mod extract;
pub mod notes;
pub mod package;
