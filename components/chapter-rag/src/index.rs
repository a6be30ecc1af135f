//! Building the index of a manual: tree, chunks capped to the embedder's window, vectors (only
//! for text an earlier build did not have), and a health check that every chapter has chunks.
//! The chunks, their vectors and their keywords go into a corpus ([`rag_core::corpus`]): the
//! host's, shared by every instance that opens it, or the tool's own.
//!
//! A chunk's vectors are keyed by the sha256 of the text embedded for it (its heading path line
//! and its text), so after an edit only the chunks whose text changed are embedded again, even
//! when chapter ids shift.
//!
//! In the corpus, a build is known by its key ([`build_key`]: the manual's bytes, the chunking,
//! the model). Its chunks are `KEY#POSITION`, with the fields `source` (the manual), `build`
//! (the key) and `within` (the ids of every chapter the chunk lies in, and of their ancestors),
//! which searches filter by. A build replaces the chunks of earlier builds of its manual in one
//! commit.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use rag_core::chunk::{Chunking, RESERVED_TOKENS};
use rag_core::corpus::{Corpus, CorpusError, Fields, Filter, Record, Writer};
use rag_core::store::{Index, content_hash};
use serde::Serialize;
use serde_json::json;
use tool_guest::tool::{ToolError, corpus_error};

use crate::env::Env;
use crate::manual::Manual;
use crate::tree::{self, Tree};
use crate::units::{self, Params, Piece};

/// Texts per embedder call.
const EMBED_BATCH: usize = 32;
/// Chunks per corpus call (an upsert, a get): each call stays well under the host's limits.
const CORPUS_BATCH: usize = 256;
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

/// A manual, its tree, its chunks, and the corpus that holds their vectors and keywords.
pub struct Built {
    /// The manual's source (a path).
    pub source: String,
    /// The manual's text.
    pub text: String,
    /// sha256 of the text.
    pub sha256: String,
    /// The chapter tree.
    pub tree: Tree,
    /// Chunks, by position (the `POSITION` of their ids).
    pub chunks: Vec<Chunk>,
    /// The build's key: its chunks' `build` field.
    pub key: String,
    /// The corpus holding them.
    pub corpus: Rc<dyn Corpus>,
    /// What the build did.
    pub report: Report,
}

impl Built {
    /// The filter of this build's chunks.
    pub fn filter(&self) -> Filter {
        Filter::exact("build", &self.key)
    }

    /// The position of the chunk with corpus id `id`.
    pub fn position(&self, id: &str) -> Result<usize, ToolError> {
        id.strip_prefix(self.key.as_str())
            .and_then(|rest| rest.strip_prefix('#'))
            .and_then(|p| p.parse::<usize>().ok())
            .filter(|&p| p < self.chunks.len())
            .ok_or_else(|| ToolError::Internal(format!("the corpus returned chunk {id:?}, not one of this build's")))
    }
}

/// The key of the build of `text` with `params` and `model`: the `build` field of its chunks.
pub fn build_key(text: &str, params: &Params, model: &str) -> String {
    let mut k = content_hash(format!("{}\n{}\n{model}", content_hash(text.as_bytes()), params.key()).as_bytes());
    k.truncate(24);
    k
}

/// Vectors and token counts an earlier build has, by the sha256 of the text embedded
/// (`esha`): a build embeds and counts only what they lack. Only vectors of the same model
/// (each chunk's `model`) count: another model's, even of the same dimension, are not this
/// one's.
#[derive(Default)]
pub struct Reuse {
    known: HashMap<String, (Vec<f32>, u32)>,
}

fn known_of(meta: &serde_json::Value) -> Option<(String, u32)> {
    Some((meta.get("esha")?.as_str()?.to_string(), meta.get("tokens")?.as_u64()? as u32))
}

impl Reuse {
    /// What an index file (the tool's own index of earlier versions) has.
    pub fn from_index(index: &Index) -> Reuse {
        let mut known = HashMap::new();
        for (i, c) in index.chunks().iter().enumerate() {
            if let Some((k, n)) = known_of(&c.meta) {
                known.insert(k, (index.vector(i).to_vec(), n));
            }
        }
        Reuse { known }
    }

    /// What the corpus has for earlier builds of `source`.
    pub fn from_corpus(corpus: &dyn Corpus, source: &str, model: &str) -> Result<Reuse, ToolError> {
        let mut known = HashMap::new();
        for batch in all_ids(corpus, &Filter::exact("source", source))?.chunks(CORPUS_BATCH) {
            for r in corpus.get(batch).map_err(corpus_error)?.into_iter().flatten() {
                let meta: serde_json::Value = serde_json::from_str(&r.metadata).unwrap_or_default();
                // Chunks written before they named their model are embedded again, once.
                if meta.get("model").and_then(|m| m.as_str()) != Some(model) {
                    continue;
                }
                if let Some((k, n)) = known_of(&meta) {
                    known.insert(k, (r.vector, n));
                }
            }
        }
        Ok(Reuse { known })
    }

    /// How many vectors it has.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

/// Every id `filter` lets through, in order.
fn all_ids(corpus: &dyn Corpus, filter: &Filter) -> Result<Vec<String>, ToolError> {
    let mut ids = Vec::new();
    loop {
        let page = corpus.list(filter, ids.len(), 4096).map_err(corpus_error)?;
        let done = page.len() < 4096;
        ids.extend(page);
        if done {
            return Ok(ids);
        }
    }
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

/// Builds the index of `manual` for `corpus`: the tool's view of it, and the chunks to store
/// ([`store`]). Vectors and token counts that `reuse` has are not asked for again.
pub fn build(
    env: &dyn Env,
    source: &str,
    manual: Manual,
    params: &Params,
    max_headings: usize,
    reuse: &Reuse,
    corpus: Rc<dyn Corpus>,
) -> Result<(Built, Vec<Record>), ToolError> {
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
    let mut known_tokens: HashMap<String, u32> = reuse.known.iter().map(|(k, (_, n))| (k.clone(), *n)).collect();
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
    let mut vectors: Vec<Option<Vec<f32>>> = keys.iter().map(|k| reuse.known.get(k).map(|(v, _)| v.clone())).collect();
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
    let key = build_key(&text, params, &model.id);
    let line_index = tree::Lines::new(&text);
    let mut next = vec![0usize; tree.nodes.len()];
    let mut chunks = Vec::with_capacity(pieces.len());
    let mut records = Vec::with_capacity(pieces.len());
    let vectors: Vec<Vec<f32>> = vectors
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| ToolError::Internal("a chunk was left without a vector".into()))?;
    for (k, (p, vector)) in pieces.into_iter().zip(vectors).enumerate() {
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
            "model": model.id,
        });
        *report.per_chapter.entry(tree.nodes[tree.top(p.chapter)].id.clone()).or_insert(0) += 1;
        records.push(Record {
            id: format!("{key}#{k}"),
            // What BM25 reads: the heading path, then the text.
            text: texts[k].clone(),
            vector,
            metadata: meta.to_string(),
            fields: fields(&tree, source, &key, &p.chapters),
        });
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
    let sha256 = content_hash(text.as_bytes());
    Ok((Built { source: source.to_string(), text, sha256, tree, chunks, key, corpus, report }, records))
}

/// Stores `built`'s `records` in its corpus under the write lease `writer` and commits: in one
/// commit its chunks arrive and those of earlier builds of the manual leave.
pub fn store(built: &Built, records: &[Record], mut writer: Box<dyn Writer + '_>) -> Result<u64, CorpusError> {
    let fresh: std::collections::HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let mut stale = Vec::new();
    let source = Filter::exact("source", &built.source);
    loop {
        let page = built.corpus.list(&source, stale.len(), 4096)?;
        let done = page.len() < 4096;
        stale.extend(page);
        if done {
            break;
        }
    }
    stale.retain(|id: &String| !fresh.contains(id.as_str()));
    for ids in stale.chunks(CORPUS_BATCH) {
        writer.remove(ids.to_vec())?;
    }
    for batch in records.chunks(CORPUS_BATCH) {
        writer.upsert(batch.to_vec())?;
    }
    writer.commit()
}

/// A chunk's filter fields: its manual, its build, and every chapter it lies in with their
/// ancestors (so that "inside chapter 3" is one exact match).
fn fields(tree: &Tree, source: &str, key: &str, chapters: &[usize]) -> Fields {
    let mut within = std::collections::BTreeSet::new();
    for &c in chapters {
        let mut at = Some(c);
        while let Some(n) = at {
            within.insert(tree.nodes[n].id.clone());
            at = tree.nodes[n].parent;
        }
    }
    Fields::from([
        ("source".to_string(), vec![source.to_string()]),
        ("build".to_string(), vec![key.to_string()]),
        ("within".to_string(), within.into_iter().collect()),
    ])
}

/// The manual as `corpus` holds it, when it holds the build of this very text with these
/// parameters and this model; `None` when it must be built.
pub fn reopen(
    source: &str,
    manual: Manual,
    params: &Params,
    max_headings: usize,
    model: &str,
    corpus: Rc<dyn Corpus>,
) -> Result<Option<Built>, ToolError> {
    let key = build_key(&manual.text, params, model);
    let ids = all_ids(&*corpus, &Filter::exact("build", &key))?;
    if ids.is_empty() {
        return Ok(None);
    }
    let Ok(tree) = manual.tree(max_headings) else { return Ok(None) };
    let text = manual.text;
    let node_of: HashMap<&str, usize> = tree.nodes.iter().enumerate().map(|(i, n)| (n.id.as_str(), i)).collect();
    let mut slots: Vec<Option<Chunk>> = vec![None; ids.len()];
    let mut report = Report { chapters: tree.nodes.len(), warning: tree.warning.clone(), ..Report::default() };
    for batch in ids.chunks(CORPUS_BATCH) {
        for r in corpus.get_without_vectors(batch).map_err(corpus_error)?.into_iter().flatten() {
            let position = r.id.rsplit_once('#').and_then(|(_, p)| p.parse::<usize>().ok());
            let Some(slot) = position.and_then(|p| slots.get_mut(p)) else { return Ok(None) };
            let Some(chunk) = chunk_of(&r, &text, &node_of) else { return Ok(None) };
            *report.per_chapter.entry(tree.nodes[tree.top(chunk.chapter)].id.clone()).or_insert(0) += 1;
            *slot = Some(chunk);
        }
    }
    // Every position once: a build is committed whole, so a gap means another writer's change.
    let Some(chunks) = slots.into_iter().collect::<Option<Vec<Chunk>>>() else { return Ok(None) };
    report.chunks = chunks.len();
    report.reused = chunks.len();
    let sha256 = content_hash(text.as_bytes());
    Ok(Some(Built { source: source.to_string(), text, sha256, tree, chunks, key, corpus, report }))
}

/// A stored chunk as the tool sees it, checked against the manual's text.
fn chunk_of(r: &Record, text: &str, node_of: &HashMap<&str, usize>) -> Option<Chunk> {
    let m: serde_json::Value = serde_json::from_str(&r.metadata).ok()?;
    let range = m.get("range")?.as_array()?;
    let range = range.first()?.as_u64()? as usize..range.get(1)?.as_u64()? as usize;
    let own = text.get(range.clone())?;
    if !r.text.ends_with(own) {
        return None;
    }
    let lines = m.get("lines")?.as_array()?;
    let chapter = *node_of.get(m.get("chapter_id")?.as_str()?)?;
    let chapters = m
        .get("chapter_ids")?
        .as_array()?
        .iter()
        .map(|v| node_of.get(v.as_str()?).copied())
        .collect::<Option<Vec<_>>>()?;
    Some(Chunk {
        text: own.to_string(),
        range,
        lines: (lines.first()?.as_u64()? as usize, lines.get(1)?.as_u64()? as usize),
        chapter,
        chapters,
        chunk_index: m.get("chunk_index")?.as_u64()? as usize,
    })
}
