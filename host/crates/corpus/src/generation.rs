//! One committed generation in memory: its chunks, the kNN index of their vectors and (built on
//! first use) the BM25 index of their texts, shared by every reader that holds it.

use std::collections::HashMap;
use std::sync::OnceLock;

use rag_core::bm25::Bm25;
use rag_core::vector::VectorIndex;

use crate::file::{Stored, StoredChunk};
use crate::{Change, CorpusError, Metric, Shape};

/// Which chunks a search may return: every condition must hold (none: all chunks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// (field, value): the chunk's field is exactly the value.
    pub equals: Vec<(String, String)>,
    /// (field, prefix): the chunk's field starts with the prefix.
    pub prefixes: Vec<(String, String)>,
}

impl Filter {
    fn matches(&self, c: &StoredChunk) -> bool {
        self.equals.iter().all(|(f, v)| c.fields.get(f) == Some(v))
            && self.prefixes.iter().all(|(f, p)| c.fields.get(f).is_some_and(|v| v.starts_with(p.as_str())))
    }

    fn is_empty(&self) -> bool {
        self.equals.is_empty() && self.prefixes.is_empty()
    }
}

/// A chunk found, with its score (cosine or dot for kNN, BM25 for keywords).
#[derive(Clone, Copy, Debug)]
pub struct Hit<'a> {
    /// The chunk.
    pub chunk: &'a StoredChunk,
    /// Its score; higher is better.
    pub score: f32,
}

/// See the module docs.
pub struct Generation {
    stored: Stored,
    by_id: HashMap<String, usize>,
    vectors: VectorIndex,
    bm25: OnceLock<Bm25>,
}

fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

impl Generation {
    /// Generation 0 of an empty corpus.
    pub fn empty(shape: Shape) -> Generation {
        Generation::build(Stored { number: 0, shape, chunks: Vec::new(), vectors: Vec::new() })
    }

    /// The in-memory generation of `stored`: its id map and its kNN index (graph built now).
    pub(crate) fn build(stored: Stored) -> Generation {
        let d = stored.shape.dimension;
        let by_id = stored.chunks.iter().enumerate().map(|(i, c)| (c.id.clone(), i)).collect();
        let mut vectors = VectorIndex::new(d);
        for v in stored.vectors.chunks_exact(d.max(1)) {
            // The file said its vectors have the corpus's dimension, and decode checked the count.
            let _ = vectors.push(v);
        }
        vectors.prepare();
        Generation { stored, by_id, vectors, bm25: OnceLock::new() }
    }

    pub(crate) fn stored(&self) -> &Stored {
        &self.stored
    }

    /// Its number: 0 for an empty corpus never committed, then one more per commit.
    pub fn number(&self) -> u64 {
        self.stored.number
    }

    /// The vectors' shape.
    pub fn shape(&self) -> Shape {
        self.stored.shape
    }

    /// How many chunks it holds.
    pub fn len(&self) -> usize {
        self.stored.chunks.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.stored.chunks.is_empty()
    }

    /// The chunks of `ids`, in their order (`None` for an id it does not hold).
    pub fn get<'a>(&'a self, ids: &[&str]) -> Vec<Option<&'a StoredChunk>> {
        ids.iter().map(|id| self.by_id.get(*id).map(|&i| &self.stored.chunks[i])).collect()
    }

    /// The `k` chunks whose vectors are nearest `query` among those `filter` lets through, best
    /// first. Exact with a filter or below rag-core's exact limit; HNSW above it.
    pub fn nearest(&self, query: &[f32], k: usize, filter: &Filter) -> Result<Vec<Hit<'_>>, CorpusError> {
        let want = self.stored.shape.dimension;
        if query.len() != want {
            return Err(CorpusError::Query { want, got: query.len() });
        }
        let query = match self.stored.shape.metric {
            Metric::Cosine => normalised(query.to_vec()),
            Metric::Dot => query.to_vec(),
        };
        let chunks = &self.stored.chunks;
        let allowed = |i: usize| filter.matches(&chunks[i]);
        let allowed = (!filter.is_empty()).then_some(&allowed as &dyn Fn(usize) -> bool);
        let found = self.vectors.nearest(&query, k, allowed).map_err(|e| CorpusError::Query { want, got: e.got })?;
        Ok(found.into_iter().map(|(i, score)| Hit { chunk: &chunks[i], score }).collect())
    }

    /// The `k` best chunks for `query` by BM25 (rag-core's, with the tools' tokenising) among
    /// those `filter` lets through, best first.
    pub fn keyword(&self, query: &str, k: usize, filter: &Filter) -> Vec<Hit<'_>> {
        let chunks = &self.stored.chunks;
        let bm25 = self.bm25.get_or_init(|| Bm25::build(chunks.iter().map(|c| c.text.as_str())));
        let allowed = |i: usize| filter.matches(&chunks[i]);
        let allowed = (!filter.is_empty()).then_some(&allowed as &dyn Fn(usize) -> bool);
        bm25.search(query, k, allowed).into_iter().map(|(i, score)| Hit { chunk: &chunks[i], score }).collect()
    }
}

/// The generation after `stored`: `changes` applied in order, the number one more. Vectors of a
/// cosine corpus are stored normalised.
pub(crate) fn apply(stored: &Stored, changes: Vec<Change>) -> Stored {
    let d = stored.shape.dimension;
    let mut chunks = stored.chunks.clone();
    let mut vectors = stored.vectors.clone();
    let mut by_id: HashMap<String, usize> = chunks.iter().enumerate().map(|(i, c)| (c.id.clone(), i)).collect();
    let mut removed = vec![false; chunks.len()];
    for change in changes {
        match change {
            Change::Upsert(c) => {
                let vector = match stored.shape.metric {
                    Metric::Cosine => normalised(c.vector),
                    Metric::Dot => c.vector,
                };
                let chunk = StoredChunk { id: c.id, text: c.text, metadata: c.metadata, fields: c.fields };
                match by_id.get(&chunk.id) {
                    Some(&i) => {
                        vectors[i * d..(i + 1) * d].copy_from_slice(&vector);
                        chunks[i] = chunk;
                        removed[i] = false;
                    }
                    None => {
                        by_id.insert(chunk.id.clone(), chunks.len());
                        chunks.push(chunk);
                        vectors.extend_from_slice(&vector);
                        removed.push(false);
                    }
                }
            }
            Change::Remove(id) => {
                if let Some(&i) = by_id.get(&id) {
                    removed[i] = true;
                }
            }
        }
    }
    let mut next = Stored { number: stored.number + 1, shape: stored.shape, chunks: Vec::new(), vectors: Vec::new() };
    for (i, c) in chunks.into_iter().enumerate() {
        if !removed[i] {
            next.chunks.push(c);
            next.vectors.extend_from_slice(&vectors[i * d..(i + 1) * d]);
        }
    }
    next
}
