//! Reading a manual: Markdown (or plain text) as it is, DOCX through `docx-text` (the reader
//! docx-search uses), turned into text with its headings from heading styles and outline levels.
//! Lines and byte ranges of a DOCX manual refer to that text.

use docx_text::extract::{Extracted, Kind};
use tool_guest::tool::ToolError;

use crate::tree::{self, Heading, Tree, TreeError};

/// A manual's text and, for formats other than Markdown, its headings.
#[derive(Clone, Debug)]
pub struct Manual {
    /// The text chunks come from.
    pub text: String,
    /// Headings found by the format's reader; `None` for Markdown (parsed from the text).
    pub headings: Option<Vec<Heading>>,
}

impl Manual {
    /// A Markdown manual.
    pub fn markdown(text: String) -> Manual {
        Manual { text, headings: None }
    }

    /// The chapter tree.
    pub fn tree(&self, max_headings: usize) -> Result<Tree, TreeError> {
        match &self.headings {
            None => tree::parse(&self.text, max_headings),
            Some(h) => tree::from_headings(&self.text, h.clone(), max_headings),
        }
    }

    /// Reads `bytes` of the file `path` by its extension.
    pub fn from_bytes(path: &str, bytes: Vec<u8>) -> Result<Manual, ToolError> {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".docx") {
            let extracted =
                docx_text::extract::extract(&bytes).map_err(|e| ToolError::InvalidArgs(format!("{path}: {e}")))?;
            return Ok(from_docx(&extracted));
        }
        if !(lower.ends_with(".md") || lower.ends_with(".markdown") || lower.ends_with(".txt")) {
            return Err(ToolError::InvalidArgs(format!(
                "{path}: not a manual this tool reads (.md, .markdown, .txt, .docx); convert it to Markdown first (pandoc does)"
            )));
        }
        String::from_utf8(bytes).map(Manual::markdown).map_err(|e| {
            ToolError::InvalidArgs(format!(
                "{path}: not UTF-8 text (invalid byte at {}); convert it to UTF-8",
                e.utf8_error().valid_up_to()
            ))
        })
    }
}

/// The text of a DOCX, one block per paragraph, with a heading wherever a block is a heading.
/// A heading's level is its depth under the headings above it, so jumps (1 → 3) nest as in
/// Markdown.
pub fn from_docx(doc: &Extracted) -> Manual {
    let mut text = String::new();
    let mut headings = Vec::new();
    for b in &doc.blocks {
        let body = b.text.trim_end();
        if body.trim().is_empty() {
            continue;
        }
        if b.kind == Kind::Heading {
            headings.push(Heading {
                level: b.heading_path.len().clamp(1, 255) as u8,
                title: body.split_whitespace().collect::<Vec<_>>().join(" "),
                start: text.len(),
            });
        }
        text.push_str(body);
        text.push_str(if b.kind == Kind::ListItem { "\n" } else { "\n\n" });
    }
    Manual { text, headings: Some(headings) }
}
