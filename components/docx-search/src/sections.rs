//! From blocks to chunks: blocks under the same heading path form a section, and each section
//! is chunked on its own, so no chunk straddles two headings and every chunk knows its path.
//!
//! What is embedded is the chunk with its heading path on a first line (`A > B > C`): a chunk of
//! "Standard options" means little without the backend above it. In token mode the chunk budget
//! leaves room for that line, so nothing is cut at embedding time.

use rag_core::chunk::{ChunkError, Chunking, SpanCounter, TokenSpan};

use crate::extract::{Extracted, Kind};

/// The heading-path line keeps at most this many innermost titles.
const PATH_TITLES: usize = 3;

/// The blocks under one heading path, joined: the unit that is chunked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The enclosing headings, outermost first.
    pub heading_path: Vec<String>,
    /// The blocks' text: a list stays one paragraph, other blocks are paragraphs of their own.
    pub text: String,
}

impl Section {
    /// The line put before each of the section's chunks when it is embedded (`A > B > C`).
    pub fn path_line(&self) -> Option<String> {
        path_line(&self.heading_path)
    }
}

/// A section's tokens, from the embedder, for chunking by tokens.
pub struct SectionTokens {
    /// Spans of the section text's tokens.
    pub text: Vec<TokenSpan>,
    /// Tokens the path line takes, with the newline after it.
    pub path_line: usize,
}

/// One chunk of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocChunk {
    /// The enclosing headings, outermost first.
    pub heading_path: Vec<String>,
    /// The chunk's text, as returned to the caller.
    pub text: String,
    /// Tokens of the embedded text (path line included), when chunked by tokens.
    pub tokens: Option<usize>,
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

/// A document's sections, in order: runs of blocks under the same heading path.
pub fn sections(doc: &Extracted) -> Vec<Section> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < doc.blocks.len() {
        let path = &doc.blocks[i].heading_path;
        let mut text = String::new();
        let mut prev = None;
        while i < doc.blocks.len() && &doc.blocks[i].heading_path == path {
            let b = &doc.blocks[i];
            if !text.is_empty() {
                let list = prev == Some(Kind::ListItem) && b.kind == Kind::ListItem;
                text.push_str(if list { "\n" } else { "\n\n" });
            }
            text.push_str(&b.text);
            prev = Some(b.kind);
            i += 1;
        }
        out.push(Section { heading_path: path.clone(), text });
    }
    out
}

/// Chunks each section on its own. In token mode `tokens` holds each section's tokens (one
/// entry per section, tokenised once); without it, token mode is an error.
pub fn chunk(
    sections: &[Section],
    chunking: &Chunking,
    tokens: Option<&[SectionTokens]>,
) -> Result<Vec<DocChunk>, ChunkError> {
    let mut out = Vec::new();
    for (i, section) in sections.iter().enumerate() {
        let counted = match (chunking, tokens) {
            (Chunking::Tokens { .. }, Some(t)) => {
                Some(t.get(i).ok_or_else(|| ChunkError::Config(format!("no tokens for section {i}")))?)
            }
            _ => None,
        };
        let (section_chunking, counter) = match (chunking, counted) {
            (Chunking::Tokens { max_tokens, overlap }, Some(t)) => {
                // The path line comes out of this section's budget, but at most half of it, so
                // a freak path cannot shrink chunks to nothing (the line holds at most three
                // titles, so in practice it always fits).
                let reserve = t.path_line.min(max_tokens / 2);
                let max_tokens = max_tokens - reserve;
                let chunking = Chunking::Tokens { max_tokens, overlap: (*overlap).min(max_tokens / 4) };
                (chunking, Some((SpanCounter::new(&section.text, &t.text), t.path_line)))
            }
            _ => (chunking.clone(), None),
        };
        let count = counter.as_ref().map(|(c, _)| move |s: &str| c.count(s));
        let sizer = count.as_ref().map(|f| f as &dyn Fn(&str) -> usize);
        for c in section_chunking.split(&section.text, sizer)? {
            let tokens = counter
                .as_ref()
                .map(|(counter, line)| counter.count(&section.text[c.offset..c.offset + c.text.len()]) + line);
            out.push(DocChunk { heading_path: section.heading_path.clone(), text: c.text, tokens });
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
        let chunks = chunk(&sections(&doc), &Chunking::crewai(), None).expect("chunks");
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
        let sections = sections(&doc);
        let spans = |t: &str| {
            let at = |w: &str| (w.as_ptr() as usize - t.as_ptr() as usize) as u32;
            t.split_whitespace().map(|w| (at(w), at(w) + w.len() as u32)).collect::<Vec<_>>()
        };
        let tokens: Vec<SectionTokens> = sections
            .iter()
            .map(|s| SectionTokens { text: spans(&s.text), path_line: words(&s.path_line().unwrap_or_default()) })
            .collect();
        let chunks = chunk(&sections, &Chunking::Tokens { max_tokens: 40, overlap: 4 }, Some(&tokens)).expect("chunks");
        assert!(chunks.len() > 5);
        for c in &chunks {
            assert!(words(&c.embedding_text()) <= 40, "{}", c.embedding_text());
            assert_eq!(c.tokens, Some(words(&c.embedding_text())), "{}", c.embedding_text());
        }
        let e = chunk(&sections, &Chunking::Tokens { max_tokens: 40, overlap: 4 }, Some(&[])).unwrap_err();
        assert!(e.to_string().contains("no tokens for section 0"), "{e}");
    }
}
