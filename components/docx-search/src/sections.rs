//! From blocks to chunks: blocks under the same heading path form a section, and each section
//! is chunked on its own, so no chunk straddles two headings and every chunk knows its path.
//!
//! What is embedded is the chunk with its heading path on a first line (`A > B > C`): a chunk of
//! "Standard options" means little without the backend above it. In token mode the chunk budget
//! leaves room for that line, so nothing is cut at embedding time.

use rag_core::chunk::{ChunkError, Chunking, TokenCount};

use crate::extract::{Extracted, Kind};

/// The heading-path line keeps at most this many innermost titles.
const PATH_TITLES: usize = 3;

/// One chunk of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocChunk {
    /// The enclosing headings, outermost first.
    pub heading_path: Vec<String>,
    /// The chunk's text, as returned to the caller.
    pub text: String,
}

impl DocChunk {
    /// The text given to the embedder: heading path line, then the chunk.
    pub fn embedding_text(&self) -> String {
        match path_line(&self.heading_path) {
            Some(line) => format!("{line}\n{}", self.text),
            None => self.text.clone(),
        }
    }
}

fn path_line(path: &[String]) -> Option<String> {
    (!path.is_empty()).then(|| path[path.len().saturating_sub(PATH_TITLES)..].join(" > "))
}

/// Chunks a document's text section by section.
pub fn chunk(
    doc: &Extracted,
    chunking: &Chunking,
    tokens: Option<TokenCount<'_>>,
) -> Result<Vec<DocChunk>, ChunkError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < doc.blocks.len() {
        let path = &doc.blocks[i].heading_path;
        let mut text = String::new();
        let mut prev = None;
        while i < doc.blocks.len() && &doc.blocks[i].heading_path == path {
            let b = &doc.blocks[i];
            if !text.is_empty() {
                // A list stays one paragraph; other blocks are paragraphs of their own.
                let list = prev == Some(Kind::ListItem) && b.kind == Kind::ListItem;
                text.push_str(if list { "\n" } else { "\n\n" });
            }
            text.push_str(&b.text);
            prev = Some(b.kind);
            i += 1;
        }
        let section_chunking = match (chunking, path_line(path), tokens) {
            (Chunking::Tokens { max_tokens, overlap }, Some(line), Some(count)) => {
                // The path line and its newline come out of this section's budget, but at most
                // half of it, so a freak path cannot shrink chunks to nothing (the line holds at
                // most three titles, so in practice it always fits).
                let reserve = (count(&line) + 1).min(max_tokens / 2);
                let max_tokens = max_tokens - reserve;
                Chunking::Tokens { max_tokens, overlap: (*overlap).min(max_tokens / 4) }
            }
            _ => chunking.clone(),
        };
        for c in section_chunking.split(&text, tokens)? {
            out.push(DocChunk { heading_path: path.clone(), text: c.text });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::Block;

    fn block(path: &[&str], text: &str) -> Block {
        Block { heading_path: path.iter().map(|s| s.to_string()).collect(), kind: Kind::Paragraph, text: text.into() }
    }

    #[test]
    fn sections_do_not_mix_and_carry_their_path() {
        let doc = Extracted {
            blocks: vec![block(&["A"], "alpha one"), block(&["A"], "alpha two"), block(&["A", "B"], "beta")],
            ..Extracted::default()
        };
        let chunks = chunk(&doc, &Chunking::crewai(), None).expect("chunks");
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].text, "alpha one\n\nalpha two");
        assert_eq!(chunks[1].heading_path, vec!["A", "B"]);
        assert_eq!(chunks[1].embedding_text(), "A > B\nbeta");
    }

    #[test]
    fn token_budget_leaves_room_for_the_path() {
        let words = |s: &str| s.split_whitespace().count();
        let long = (0..200).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        let doc = Extracted { blocks: vec![block(&["One two three", "Four"], &long)], ..Extracted::default() };
        let chunks = chunk(&doc, &Chunking::Tokens { max_tokens: 40, overlap: 4 }, Some(&words)).expect("chunks");
        assert!(chunks.len() > 5);
        for c in &chunks {
            assert!(words(&c.embedding_text()) <= 40, "{}", c.embedding_text());
        }
    }
}
