//! Chunks of a manual, chapter by chapter.
//!
//! A chapter's own text (its heading to the next heading) is one unit; a unit shorter than
//! `min_chapter_chars` is merged with the chapters after it (the last one with the one before),
//! so that a heading-only or one-line chapter does not become a chunk too small to mean
//! anything. Each chunk keeps every chapter it overlaps. Units are split by characters (800/150
//! by default) with `text-splitter`, which cuts at paragraphs, then lines, then sentences (CJK
//! full stops included), then words.

use std::ops::Range;

use rag_core::chunk::Chunking;

use crate::tree::Tree;

/// How chapters become chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Maximum characters per chunk.
    pub size: usize,
    /// Characters shared with the previous chunk of the same unit.
    pub overlap: usize,
    /// Chapters with fewer characters of their own are merged with a neighbour.
    pub min_chapter_chars: usize,
}

impl Default for Params {
    fn default() -> Params {
        Params { size: 800, overlap: 150, min_chapter_chars: 800 }
    }
}

impl Params {
    /// A stable text naming these parameters, part of the index key.
    pub fn key(&self) -> String {
        format!("chapters:{}/{}/{}", self.size, self.overlap, self.min_chapter_chars)
    }

    /// The chunking for units.
    pub fn chunking(&self) -> Chunking {
        Chunking::Characters { size: self.size, overlap: self.overlap }
    }
}

/// One chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The text (trimmed).
    pub text: String,
    /// Its bytes in the document.
    pub range: Range<usize>,
    /// The chapter (position in the tree) holding most of it.
    pub chapter: usize,
    /// Every chapter it overlaps, in document order.
    pub chapters: Vec<usize>,
}

/// Groups of consecutive chapters (positions in document order), each at least
/// `min_chars` characters long where the document allows.
pub fn units(text: &str, tree: &Tree, min_chars: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Vec<usize>, usize)> = Vec::new();
    let mut open: Option<(Vec<usize>, usize)> = None;
    for (i, n) in tree.nodes.iter().enumerate() {
        let chars = text[n.own.clone()].trim().chars().count();
        let (mut nodes, mut total) = open.take().unwrap_or_default();
        nodes.push(i);
        total += chars;
        if total >= min_chars {
            groups.push((nodes, total));
        } else {
            open = Some((nodes, total));
        }
    }
    if let Some((nodes, total)) = open {
        match groups.last_mut() {
            Some(last) => {
                last.0.extend(nodes);
                last.1 += total;
            }
            None => groups.push((nodes, total)),
        }
    }
    groups.into_iter().map(|(nodes, _)| nodes).collect()
}

/// The chunks of `text`, unit by unit.
pub fn pieces(text: &str, tree: &Tree, params: &Params) -> Result<Vec<Piece>, rag_core::chunk::ChunkError> {
    let mut out = Vec::new();
    for unit in units(text, tree, params.min_chapter_chars) {
        let (Some(&first), Some(&last)) = (unit.first(), unit.last()) else { continue };
        let (start, end) = (tree.nodes[first].own.start, tree.nodes[last].own.end);
        out.extend(split(text, start..end, tree, &unit, &params.chunking())?);
    }
    Ok(out)
}

fn chunking_size(chunking: &Chunking) -> usize {
    match *chunking {
        Chunking::Characters { size, .. } => size,
        Chunking::Tokens { max_tokens, .. } => max_tokens,
    }
}

/// Splits the bytes `range` of `text`, which the chapters `among` cover, with `chunking`.
pub fn split(
    text: &str,
    range: Range<usize>,
    tree: &Tree,
    among: &[usize],
    chunking: &Chunking,
) -> Result<Vec<Piece>, rag_core::chunk::ChunkError> {
    let chunks = chunking.split(&text[range.clone()], None)?;
    // The splitter cuts at the largest boundary first, so a heading followed by a paragraph too
    // long for one chunk becomes a chunk of its own; such a scrap joins the chunk after it.
    let scrap = (chunking_size(chunking) / 8).min(100);
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let mut pending: Option<usize> = None;
    for c in &chunks {
        let r = range.start + c.offset..range.start + c.offset + c.text.len();
        let start = pending.take().unwrap_or(r.start);
        if c.text.chars().count() < scrap {
            pending = Some(start);
        } else {
            ranges.push(start..r.end);
        }
    }
    if let Some(start) = pending {
        match ranges.last_mut() {
            Some(last) => last.end = range.start + chunks.last().map_or(0, |c| c.offset + c.text.len()),
            None => ranges.push(start..range.start + chunks.last().map_or(0, |c| c.offset + c.text.len())),
        }
    }
    Ok(ranges
        .into_iter()
        .map(|r| {
            let overlaps: Vec<(usize, usize)> = among
                .iter()
                .map(|&i| {
                    let own = &tree.nodes[i].own;
                    (i, r.end.min(own.end).saturating_sub(r.start.max(own.start)))
                })
                .filter(|&(_, n)| n > 0)
                .collect();
            let chapter = overlaps.iter().max_by_key(|&&(i, n)| (n, std::cmp::Reverse(i))).map_or(among[0], |o| o.0);
            Piece {
                text: text[r.clone()].to_string(),
                range: r,
                chapter,
                chapters: overlaps.into_iter().map(|o| o.0).collect(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::parse;

    #[test]
    fn short_chapters_merge_and_keep_both_ids() {
        let long = "Words about the topic at hand. ".repeat(40);
        let text = format!("# A\n\n{long}\n\n# B\n\ntiny\n\n## B1\n\n{long}\n\n# C\n\nend\n");
        let tree = parse(&text, 100).unwrap();
        let groups = units(&text, &tree, 800);
        // A is long; B is tiny and merges with B1; C is tiny and last, so it joins B+B1.
        assert_eq!(groups, vec![vec![0], vec![1, 2, 3]]);
        let pieces = pieces(&text, &tree, &Params::default()).unwrap();
        let first_b = pieces.iter().find(|p| p.chapters.contains(&1)).unwrap();
        assert_eq!(first_b.chapters[..2], [1, 2]);
        assert!(pieces.iter().any(|p| p.chapters.contains(&3)));
        for p in &pieces {
            assert_eq!(&text[p.range.clone()], p.text);
            assert!(p.text.chars().count() <= 800);
        }
    }

    #[test]
    fn chinese_splits_at_full_stops() {
        let sentence = "所有权是 Rust 最为与众不同的特性，它让 Rust 无需垃圾回收即可保障内存安全。";
        let text = format!("# 所有权\n\n{}\n", sentence.repeat(40));
        let tree = parse(&text, 100).unwrap();
        let pieces = pieces(&text, &tree, &Params::default()).unwrap();
        assert!(pieces.len() >= 2);
        for p in &pieces[..pieces.len() - 1] {
            assert!(p.text.ends_with('。'), "{}", p.text);
        }
    }
}
