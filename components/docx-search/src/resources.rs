//! The documents' sections as resources: each run of chunks under one heading path of an
//! indexed document is a section, `quarry://self/doc/{key}/section/{n}` (the host lists it as
//! `quarry://INSTANCE/doc/...`), read back as its chunks' text with their overlaps taken out.

use serde_json::Value;
use tool_guest::catalog::{Body, Contents, Resource};
use tool_guest::tool::ToolError;

use crate::tool::{DocxTool, Env};

/// The most sections listed, all documents together.
pub const MAX_SECTIONS: usize = 2000;
/// Chunks read from the corpus at a time.
const BATCH: usize = 256;
/// The longest overlap looked for between two chunks.
const MAX_OVERLAP: usize = 4096;

/// One section of a document: its heading path and its chunks' texts.
pub struct Section {
    /// The enclosing headings, outermost first.
    pub heading_path: Vec<String>,
    /// Its chunks' texts, in order.
    pub chunks: Vec<String>,
}

impl Section {
    /// Its text: the chunks joined, each overlap with the one before taken out.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.chunks {
            let skip = overlap(&out, c);
            if !out.is_empty() && skip == 0 {
                out.push_str("\n\n");
            }
            out.push_str(&c[skip..]);
        }
        out
    }
}

/// The length of the longest suffix of `a` that starts `b` (at most [`MAX_OVERLAP`] bytes, on
/// character boundaries).
fn overlap(a: &str, b: &str) -> usize {
    let max = a.len().min(b.len()).min(MAX_OVERLAP);
    (1..=max)
        .rev()
        .find(|&n| b.is_char_boundary(n) && a.is_char_boundary(a.len() - n) && a.ends_with(&b[..n]))
        .unwrap_or(0)
}

/// The URI of section `n` of the document with key `key`.
pub fn section_uri(key: &str, n: usize) -> String {
    format!("quarry://self/doc/{key}/section/{n}")
}

impl<E: Env> DocxTool<E> {
    /// The sections of the document with key `key`, `chunks` long, in order.
    fn sections_of(&self, key: &str, chunks: usize) -> Result<Vec<Section>, ToolError> {
        let corpus = self.corpus_ref()?;
        let mut sections: Vec<Section> = Vec::new();
        for start in (0..chunks).step_by(BATCH) {
            let ids: Vec<String> = (start..chunks.min(start + BATCH)).map(|n| format!("{key}#{n}")).collect();
            for record in
                corpus.get_without_vectors(&ids).map_err(tool_guest::tool::corpus_error)?.into_iter().flatten()
            {
                let meta: Value = serde_json::from_str(&record.metadata).unwrap_or_default();
                let path: Vec<String> = meta["heading_path"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                match sections.last_mut() {
                    Some(s) if s.heading_path == path => s.chunks.push(record.text),
                    _ => sections.push(Section { heading_path: path, chunks: vec![record.text] }),
                }
            }
        }
        Ok(sections)
    }

    /// Every section of every indexed document, as resources (at most [`MAX_SECTIONS`]).
    pub fn resources(&self) -> Result<Vec<Resource>, ToolError> {
        let mut out = Vec::new();
        for (source, note) in self.documents_indexed()? {
            for (n, s) in self.sections_of(&note.key, note.chunks)?.iter().enumerate() {
                if out.len() == MAX_SECTIONS {
                    return Ok(out);
                }
                let title = if s.heading_path.is_empty() {
                    "(before the first heading)".to_string()
                } else {
                    s.heading_path.join(" > ")
                };
                out.push(Resource {
                    uri: section_uri(&note.key, n),
                    name: title.clone(),
                    title: Some(title),
                    description: Some(format!("a section of {source}")),
                    mime_type: Some("text/plain".into()),
                });
            }
        }
        Ok(out)
    }

    /// The section at `uri`.
    pub fn read(&self, uri: &str) -> Result<Vec<Contents>, ToolError> {
        let not_found = || ToolError::NotFound(format!("no section at {uri}"));
        let rest = uri.strip_prefix("quarry://self/doc/").ok_or_else(not_found)?;
        let (key, n) = rest.split_once("/section/").ok_or_else(not_found)?;
        let n: usize = n.parse().map_err(|_| not_found())?;
        let (_, note) = self.documents_indexed()?.into_iter().find(|(_, d)| d.key == key).ok_or_else(not_found)?;
        let sections = self.sections_of(&note.key, note.chunks)?;
        let s = sections.get(n).ok_or_else(not_found)?;
        let mut text = s.text();
        if !s.heading_path.is_empty() {
            text = format!("{}\n\n{text}", s.heading_path.join(" > "));
        }
        Ok(vec![Contents { uri: uri.to_string(), mime_type: Some("text/plain".into()), body: Body::Text(text) }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sections_text_has_each_overlap_once() {
        let s = Section {
            heading_path: vec!["A".into()],
            chunks: vec!["one two three".into(), "two three four".into(), "five".into()],
        };
        assert_eq!(s.text(), "one two three four\n\nfive");
    }
}
