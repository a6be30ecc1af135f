//! Building the index of a manual: tree, chunks capped to the embedder's window, vectors (only
//! for text the previous index did not have), BM25, and a health check that every chapter has
//! chunks.
//!
//! A chunk's vectors are keyed by the sha256 of the text embedded for it (its heading path line
//! and its text), so after an edit only the chunks whose text changed are embedded again, even
//! when chapter ids shift.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::time::Instant;

use rag_core::bm25::Bm25;
use rag_core::chunk::{Chunking, RESERVED_TOKENS};
use rag_core::store::{Index, content_hash};
use serde::Serialize;
use serde_json::json;
use tool_guest::tool::ToolError;

use crate::env::Env;
use crate::manual::Manual;
use crate::tree::{self, Tree};
use crate::units::{self, Params, Piece};

/// Texts per embedder call.
const EMBED_BATCH: usize = 32;
/// Rounds of re-splitting chunks that overflow the embedder's window.
const CAP_ROUNDS: usize = 4;

/// One chunk as the tools see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    /// The text.
    pub text: String,
    /// Its bytes in the manual.
    pub range: Range<usize>,
    /// Its 1-based lines in the manual, inclusive.
    pub lines: (usize, usize),
    /// The chapter holding most of it (position in the tree).
    pub chapter: usize,
    /// Every chapter it overlaps.
    pub chapters: Vec<usize>,
    /// Position among its chapter's chunks.
    pub chunk_index: usize,
}

/// What a build did, for the tool's `extra` and the benchmark.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Chapters in the tree.
    pub chapters: usize,
    /// Chunks in the index.
    pub chunks: usize,
    /// Chunks embedded by this build.
    pub embedded: usize,
    /// Chunks whose vectors came from the previous index.
    pub reused: usize,
    /// Tokens embedded by this build.
    pub tokens_embedded: u64,
    /// Chunks still longer than the window after re-splitting (the embedder truncates them).
    pub over_window: usize,
    /// Chunks per top-level chapter, by id.
    pub per_chapter: BTreeMap<String, usize>,
    /// Milliseconds per phase.
    pub parse_ms: u64,
    /// Chunking and sizing.
    pub chunk_ms: u64,
    /// Embedding.
    pub embed_ms: u64,
    /// Why the tree is not made of headings, when it is not.
    pub warning: Option<String>,
}

/// A manual, its tree, its chunks and their index.
pub struct Built {
    /// The manual's source (a path).
    pub source: String,
    /// The manual's text.
    pub text: String,
    /// sha256 of the text.
    pub sha256: String,
    /// The chapter tree.
    pub tree: Tree,
    /// Chunks, in the index's order.
    pub chunks: Vec<Chunk>,
    /// Vectors and stored chunks.
    pub index: Index,
    /// Keywords of each chunk's path and text.
    pub bm25: Bm25,
    /// What the build did.
    pub report: Report,
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

fn path_line(tree: &Tree, chapter: usize) -> String {
    tree.path(chapter).join(" > ")
}

/// The text embedded for a chunk: its heading path, then its text.
fn embed_text(tree: &Tree, p: &Piece) -> String {
    format!("{}\n{}", path_line(tree, p.chapter), p.text)
}

/// Builds the index of `text`. Vectors for chunk texts that `previous` holds are reused.
pub fn build(
    env: &dyn Env,
    source: &str,
    manual: Manual,
    params: &Params,
    max_headings: usize,
    previous: Option<&Index>,
) -> Result<Built, ToolError> {
    let t = Instant::now();
    let tree = manual.tree(max_headings).map_err(|e| ToolError::InvalidArgs(format!("{source}: {e}")))?;
    let text = manual.text;
    let mut report = Report { chapters: tree.nodes.len(), warning: tree.warning.clone(), ..Report::default() };
    report.parse_ms = ms(t);

    let t = Instant::now();
    let chunk_err = |e: rag_core::chunk::ChunkError| ToolError::InvalidConfig(e.to_string());
    let mut pieces = units::pieces(&text, &tree, params).map_err(chunk_err)?;
    let model = env.model();
    let window = model.max_tokens.saturating_sub(RESERVED_TOKENS).max(16);
    // Token counts the previous index already has, and those of earlier rounds (by embedded
    // text), are not asked again: after a small edit, counting is most of the rebuild, and each
    // round re-splits only the few chunks that overflow.
    let mut known_tokens: HashMap<String, u32> = HashMap::new();
    if let Some(prev) = previous {
        for c in prev.chunks() {
            if let (Some(k), Some(n)) =
                (c.meta.get("esha").and_then(|v| v.as_str()), c.meta.get("tokens").and_then(|v| v.as_u64()))
            {
                known_tokens.insert(k.to_string(), n as u32);
            }
        }
    }
    let mut counts = Vec::new();
    for round in 0..=CAP_ROUNDS {
        let texts: Vec<String> = pieces.iter().map(|p| embed_text(&tree, p)).collect();
        let keys: Vec<String> = texts.iter().map(|t| content_hash(t.as_bytes())).collect();
        let ask: Vec<usize> = (0..texts.len()).filter(|&i| !known_tokens.contains_key(&keys[i])).collect();
        let asked = if ask.is_empty() {
            Vec::new()
        } else {
            env.count_tokens(&ask.iter().map(|&i| texts[i].clone()).collect::<Vec<_>>())?
        };
        if asked.len() != ask.len() {
            return Err(ToolError::Upstream(format!("the embedder counted {} texts of {}", asked.len(), ask.len())));
        }
        for (&i, n) in ask.iter().zip(asked) {
            known_tokens.insert(keys[i].clone(), n);
        }
        counts = keys.iter().map(|k| known_tokens.get(k).copied().unwrap_or(0)).collect();
        let over: Vec<usize> = (0..pieces.len()).filter(|&i| counts[i] as usize > window).collect();
        if over.is_empty() || round == CAP_ROUNDS {
            report.over_window = over.len();
            break;
        }
        // Re-split each overflowing chunk by characters, scaled to fit (with a margin).
        for &i in over.iter().rev() {
            let p = &pieces[i];
            let chars = p.text.chars().count();
            let size = (chars * window * 9 / (counts[i] as usize * 10)).max(16);
            let chunking = Chunking::Characters { size, overlap: (params.overlap.min(size / 5)) };
            let parts = units::split(&text, p.range.clone(), &tree, &p.chapters, &chunking).map_err(chunk_err)?;
            pieces.splice(i..=i, parts);
        }
    }
    // Health check: a chapter without chunks would be invisible to search.
    let mut covered = vec![0usize; tree.nodes.len()];
    for p in &pieces {
        for &c in &p.chapters {
            covered[c] += 1;
        }
    }
    if let Some(i) = covered.iter().position(|&n| n == 0) {
        let n = &tree.nodes[i];
        return Err(ToolError::Internal(format!(
            "health check failed: chapter {} \"{}\" (lines {}-{}) has no chunks; the index was not built",
            n.id, n.title, n.lines.0, n.lines.1
        )));
    }
    report.chunk_ms = ms(t);

    // Vectors: reuse what the previous index has for the same embedded text.
    let t = Instant::now();
    let texts: Vec<String> = pieces.iter().map(|p| embed_text(&tree, p)).collect();
    let keys: Vec<String> = texts.iter().map(|s| content_hash(s.as_bytes())).collect();
    let mut known: HashMap<&str, usize> = HashMap::new();
    if let Some(prev) = previous {
        for (i, c) in prev.chunks().iter().enumerate() {
            if let Some(k) = c.meta.get("esha").and_then(|v| v.as_str()) {
                known.insert(k, i);
            }
        }
    }
    let mut vectors: Vec<Option<Vec<f32>>> =
        keys.iter().map(|k| previous.zip(known.get(k.as_str())).map(|(prev, &i)| prev.vector(i).to_vec())).collect();
    let todo: Vec<usize> = (0..pieces.len()).filter(|&i| vectors[i].is_none()).collect();
    let task = format!("embedding {source}");
    env.progress(&task, 0, todo.len() as u64, "chunks");
    for (b, batch) in todo.chunks(EMBED_BATCH).enumerate() {
        let input: Vec<String> = batch.iter().map(|&i| texts[i].clone()).collect();
        let out = env.embed(&input, false)?;
        if out.len() != batch.len() {
            return Err(ToolError::Upstream(format!(
                "the embedder returned {} vectors for {} texts",
                out.len(),
                batch.len()
            )));
        }
        for (&i, v) in batch.iter().zip(out) {
            vectors[i] = Some(v);
            report.tokens_embedded += counts[i] as u64;
        }
        env.progress(&task, ((b + 1) * EMBED_BATCH).min(todo.len()) as u64, todo.len() as u64, "chunks");
    }
    report.embedded = todo.len();
    report.reused = pieces.len() - todo.len();
    report.embed_ms = ms(t);

    // Chunks in document order, numbered within their chapter.
    let line_index = tree::Lines::new(&text);
    let mut next = vec![0usize; tree.nodes.len()];
    let mut chunks = Vec::with_capacity(pieces.len());
    let mut stored = Vec::with_capacity(pieces.len());
    for (k, p) in pieces.into_iter().enumerate() {
        let chunk_index = next[p.chapter];
        next[p.chapter] += 1;
        let node = &tree.nodes[p.chapter];
        let lines = (line_index.line(p.range.start), line_index.line(p.range.end.saturating_sub(1).max(p.range.start)));
        let meta = json!({
            "chapter_id": node.id,
            "chapter_ids": p.chapters.iter().map(|&c| tree.nodes[c].id.clone()).collect::<Vec<_>>(),
            "title": node.title,
            "parent_id": node.parent.map(|q| tree.nodes[q].id.clone()),
            "path": tree.path(p.chapter),
            "chunk_index": chunk_index,
            "range": [p.range.start, p.range.end],
            "lines": [lines.0, lines.1],
            "tokens": counts.get(k).copied().unwrap_or(0),
            "esha": keys[k],
        });
        *report.per_chapter.entry(tree.nodes[tree.top(p.chapter)].id.clone()).or_insert(0) += 1;
        stored.push((p.text.clone(), meta));
        chunks.push(Chunk {
            text: p.text,
            range: p.range,
            lines,
            chapter: p.chapter,
            chapters: p.chapters,
            chunk_index,
        });
    }
    report.chunks = chunks.len();
    let vectors: Vec<Vec<f32>> = vectors
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| ToolError::Internal("a chunk was left without a vector".into()))?;
    let sha256 = content_hash(text.as_bytes());
    let mut index = Index::new(&model.id, model.dimension);
    index
        .put(source, &sha256, &params.key(), stored, &vectors)
        .map_err(|e| ToolError::Upstream(format!("the embedder's vectors do not fit the index: {e}")))?;
    let bm25 = keywords(&tree, &chunks);
    Ok(Built { source: source.to_string(), text, sha256, tree, chunks, index, bm25, report })
}

fn keywords(tree: &Tree, chunks: &[Chunk]) -> Bm25 {
    let texts: Vec<String> = chunks.iter().map(|c| format!("{}\n{}", path_line(tree, c.chapter), c.text)).collect();
    Bm25::build(texts.iter().map(String::as_str))
}

/// The manual as `index` holds it, when `index` was built from this very text with these
/// parameters; `None` when it must be rebuilt.
pub fn reopen(source: &str, manual: Manual, params: &Params, max_headings: usize, index: Index) -> Option<Built> {
    let sha256 = content_hash(manual.text.as_bytes());
    if !index.is_current(source, &sha256, &params.key()) || index.documents().len() != 1 {
        return None;
    }
    let tree = manual.tree(max_headings).ok()?;
    let text = manual.text;
    let ids: HashMap<&str, usize> = tree.nodes.iter().enumerate().map(|(i, n)| (n.id.as_str(), i)).collect();
    let mut chunks = Vec::with_capacity(index.chunks().len());
    let mut report = Report { chapters: tree.nodes.len(), warning: tree.warning.clone(), ..Report::default() };
    for c in index.chunks() {
        let m = &c.meta;
        let range = m.get("range")?.as_array()?;
        let range = range.first()?.as_u64()? as usize..range.get(1)?.as_u64()? as usize;
        if text.get(range.clone())? != c.text {
            return None;
        }
        let lines = m.get("lines")?.as_array()?;
        let chapter = *ids.get(m.get("chapter_id")?.as_str()?)?;
        let chapters = m
            .get("chapter_ids")?
            .as_array()?
            .iter()
            .map(|v| ids.get(v.as_str()?).copied())
            .collect::<Option<Vec<_>>>()?;
        *report.per_chapter.entry(tree.nodes[tree.top(chapter)].id.clone()).or_insert(0) += 1;
        chunks.push(Chunk {
            text: c.text.clone(),
            range,
            lines: (lines.first()?.as_u64()? as usize, lines.get(1)?.as_u64()? as usize),
            chapter,
            chapters,
            chunk_index: m.get("chunk_index")?.as_u64()? as usize,
        });
    }
    report.chunks = chunks.len();
    report.reused = chunks.len();
    let bm25 = keywords(&tree, &chunks);
    Some(Built { source: source.to_string(), text, sha256, tree, chunks, index, bm25, report })
}
