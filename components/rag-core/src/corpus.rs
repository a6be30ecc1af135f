//! A corpus: a named set of chunks (id, text, vector, metadata, filter fields) that a tool
//! writes in batches and searches by vector and by keyword. What WIT's `corpus` interface
//! carries, as plain Rust:
//!
//! - [`Corpus`] and [`Writer`]: what a tool asks of a corpus, whoever keeps it. The host keeps
//!   it (WIT's `corpus` import, one copy per host shared by every instance), or, for a tool
//!   configured without one, the tool itself ([`MemoryCorpus`]);
//! - [`Collection`]: one generation in memory, with its kNN index ([`crate::vector`]) and its
//!   BM25 ([`crate::bm25`]): the search a tool keeping its own corpus runs. The host's local
//!   store (quarry-corpus, SQLite) scores with the same formula, tokenising, dot product and
//!   cut ([`crate::score::top_k`]), and is tested to give the same ids and scores, so that
//!   scores do not depend on where the corpus is kept.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::bm25::Bm25;
use crate::vector::VectorIndex;

/// The most floats a vector may have (OpenAI's largest embeddings have 3,072).
pub const MAX_DIMENSION: usize = 16_384;

/// The most bytes a corpus's notes ([`Info::notes`]) may hold: the host refuses more at
/// `set-notes`. Notes are one value, written whole at each commit that sets them, so they are
/// for a few facts about the corpus, not for a record per document.
pub const MAX_NOTES_BYTES: usize = 64 << 10;

/// How vectors are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Cosine similarity: vectors are normalised when stored and queries when asked.
    Cosine,
    /// The dot product of the vectors as given.
    Dot,
}

/// What a corpus's vectors are: their dimension and how they are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Floats per vector.
    pub dimension: usize,
    /// How they are compared.
    pub metric: Metric,
}

impl Shape {
    /// `v` as a corpus of this shape keeps and compares it: normalised for cosine, as given for
    /// the dot product. Every keeper (in memory, SQLite, Couchbase) stores and asks with this.
    pub fn comparable(self, v: Vec<f32>) -> Vec<f32> {
        match self.metric {
            Metric::Cosine => normalised(v),
            Metric::Dot => v,
        }
    }

    /// Query vector `v`, checked ([`check_vector`]) and made [`Shape::comparable`].
    pub fn query(self, v: &[f32]) -> Result<Vec<f32>, CorpusError> {
        check_vector(self, None, v)?;
        Ok(self.comparable(v.to_vec()))
    }
}

/// Values a search may filter on, by field name (a chunk's chapters, its document).
pub type Fields = BTreeMap<String, Vec<String>>;

/// One chunk, as a writer gives it and [`Corpus::get`] returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Unique within the corpus; an upsert of a known id replaces that chunk.
    pub id: String,
    /// The text (searched by BM25).
    pub text: String,
    /// Its embedding, of the corpus's dimension.
    pub vector: Vec<f32>,
    /// JSON the writer keeps with it, returned as it was given.
    pub metadata: String,
    /// What a search may filter it by.
    pub fields: Fields,
}

/// How a [`Clause`] compares a chunk's values with its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Match {
    /// The value is one of the clause's.
    Exact,
    /// The value starts with one of the clause's.
    Prefix,
}

/// One condition: some value of the chunk's `field` matches one of `values`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clause {
    /// The field.
    pub field: String,
    /// What it is compared with.
    pub values: Vec<String>,
    /// How.
    pub how: Match,
}

/// Which chunks a search may return: every clause must hold; no clause lets every chunk through.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter(pub Vec<Clause>);

impl Filter {
    /// Every chunk.
    pub fn all() -> Filter {
        Filter(Vec::new())
    }

    /// Chunks whose `field` is exactly `value`.
    pub fn exact(field: &str, value: &str) -> Filter {
        Filter(vec![Clause { field: field.into(), values: vec![value.into()], how: Match::Exact }])
    }

    /// This filter and one more clause.
    pub fn and(mut self, clause: Clause) -> Filter {
        self.0.push(clause);
        self
    }

    /// Whether a chunk with `fields` passes.
    pub fn matches(&self, fields: &Fields) -> bool {
        self.0.iter().all(|c| {
            fields.get(&c.field).is_some_and(|have| {
                have.iter().any(|v| {
                    c.values.iter().any(|w| match c.how {
                        Match::Exact => v == w,
                        Match::Prefix => v.starts_with(w.as_str()),
                    })
                })
            })
        })
    }

    /// Whether it lets every chunk through.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A chunk a search found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// Its id.
    pub id: String,
    /// kNN: the vectors' similarity (cosine or dot); keyword: the BM25 score. Higher is better.
    pub score: f32,
    /// Its vector's similarity to the vector a keyword search was given, when it was given one:
    /// so that a hybrid search can apply a vector threshold to keyword hits.
    pub similarity: Option<f32>,
}

/// A corpus's state: what [`Corpus::info`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// The committed generation readers see: 0 before the first commit.
    pub generation: u64,
    /// Chunks in it.
    pub chunks: u64,
    /// What its writers noted about it ([`Writer::set_notes`]): JSON, `{}` when nothing.
    pub notes: String,
}

/// Why a corpus call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CorpusError {
    /// The corpus holds vectors of another shape, or a vector has the wrong dimension.
    #[error("{0}")]
    Shape(String),
    /// The call is malformed or over a limit (the message says which).
    #[error("{0}")]
    Invalid(String),
    /// The tool may not use this corpus, or may not write it.
    #[error("{0}")]
    Denied(String),
    /// Another writer holds the corpus and did not let go in time.
    #[error("{0}")]
    Busy(String),
    /// The corpus could not be read or saved (a full disk, a quota, an unreachable server). A
    /// corpus that cannot save keeps serving its last committed generation.
    #[error("{0}")]
    Unavailable(String),
}

/// What a tool asks of a corpus: reads of the committed generation, and a writer.
pub trait Corpus {
    /// Its generation, size and notes.
    fn info(&self) -> Result<Info, CorpusError>;
    /// The `k` chunks whose vectors are nearest `vector` among those `filter` lets through,
    /// best first.
    fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>, CorpusError>;
    /// The `k` best chunks for `query` by BM25 among those `filter` lets through, best first;
    /// each with its similarity to `similar_to` when given.
    fn keyword(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<Found>, CorpusError>;
    /// The chunks of `ids`, in order (`None` for an id it does not hold).
    fn get(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError>;
    /// As [`Corpus::get`], each record's vector left empty: for a reader that needs only the
    /// texts, metadata and fields (a tool reopening its index), so that no vector is read or
    /// copied. A corpus that keeps its vectors in memory anyway may answer with `get`'s records.
    fn get_without_vectors(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        let mut records = self.get(ids)?;
        records.iter_mut().flatten().for_each(|r| r.vector = Vec::new());
        Ok(records)
    }
    /// Ids of the chunks `filter` lets through, from the `offset`th on, at most `limit`, in the
    /// order they were first added.
    fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Result<Vec<String>, CorpusError>;
    /// Takes the corpus's write lease: one writer at a time builds while others read, so that
    /// instances sharing a corpus do not build it twice or lose each other's work. Readers see
    /// the old generation until [`Writer::commit`].
    fn write(&self) -> Result<Box<dyn Writer + '_>, CorpusError>;
}

/// A batch being written under the lease; dropping it without committing discards it.
pub trait Writer {
    /// Adds these chunks, or replaces those with their ids.
    fn upsert(&mut self, records: Vec<Record>) -> Result<(), CorpusError>;
    /// Removes the chunks with these ids.
    fn remove(&mut self, ids: Vec<String>) -> Result<(), CorpusError>;
    /// Replaces the corpus's notes ([`Info::notes`]) with `notes` (a JSON object) at commit.
    fn set_notes(&mut self, notes: String) -> Result<(), CorpusError>;
    /// Makes the batch the next generation, all of it at once; returns its number. On error the
    /// corpus is as it was.
    fn commit(self: Box<Self>) -> Result<u64, CorpusError>;
}

/// A change in a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Adds the chunk, or replaces the one with its id.
    Upsert(Record),
    /// Removes the chunk with this id (nothing if there is none).
    Remove(String),
}

/// A chunk as a [`Collection`] keeps it: its vector lives in the kNN index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Its id.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Its metadata (JSON).
    pub metadata: String,
    /// Its filter fields.
    pub fields: Fields,
}

/// One generation of a corpus in memory; see the module docs.
pub struct Collection {
    number: u64,
    shape: Shape,
    notes: String,
    entries: Vec<Entry>,
    by_id: HashMap<String, usize>,
    vectors: VectorIndex,
    bm25: OnceLock<Bm25>,
    /// The entries of each field value, built at the first filtered search: a filter is then
    /// the entries its values name, not a comparison of strings with every entry's fields.
    postings: OnceLock<Postings>,
}

/// For each field, each value's entries, in order.
type Postings = HashMap<String, std::collections::BTreeMap<String, Vec<u32>>>;

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection").field("number", &self.number).field("chunks", &self.entries.len()).finish()
    }
}

/// `v` scaled to length 1, unless it is that already (to float precision): an embedder's
/// normalised vectors are kept bit for bit, so that scores do not move.
pub fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && (norm - 1.0).abs() > 1e-6 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// Checks a shape asked for.
pub fn check_shape(shape: Shape) -> Result<(), CorpusError> {
    if shape.dimension == 0 || shape.dimension > MAX_DIMENSION {
        return Err(CorpusError::Invalid(format!(
            "a corpus holds vectors of 1 to {MAX_DIMENSION} dimensions, not {}",
            shape.dimension
        )));
    }
    Ok(())
}

/// Checks a vector given for chunk `id` (`None`: a query) against `shape`: its dimension, and
/// finite floats (a NaN or an infinity would order every search arbitrarily).
pub fn check_vector(shape: Shape, id: Option<&str>, v: &[f32]) -> Result<(), CorpusError> {
    let d = shape.dimension;
    if v.len() != d {
        return Err(CorpusError::Shape(match id {
            Some(id) => {
                format!("chunk {id:?} has a {}-dimensional vector; the corpus holds {d}-dimensional ones", v.len())
            }
            None => format!("the query vector has {} dimensions; the corpus holds {d}-dimensional vectors", v.len()),
        }));
    }
    let what = id.map_or_else(|| "the query vector".to_string(), |id| format!("chunk {id:?}'s vector"));
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(CorpusError::Invalid(format!("{what} has {} at position {i}; give finite numbers", v[i])));
    }
    Ok(())
}

impl Collection {
    /// Generation 0 of an empty corpus.
    pub fn empty(shape: Shape) -> Collection {
        Collection::from_parts(0, shape, "{}".into(), Vec::new(), Vec::new())
            .expect("an empty collection has no vector of the wrong size")
    }

    /// Generation `number` of `entries` with their `vectors` (one after the other, already
    /// normalised for a cosine corpus); the kNN index is built now, BM25 on first use.
    pub fn from_parts(
        number: u64,
        shape: Shape,
        notes: String,
        entries: Vec<Entry>,
        vectors: Vec<f32>,
    ) -> Result<Collection, CorpusError> {
        let d = shape.dimension;
        if Some(vectors.len()) != entries.len().checked_mul(d) {
            return Err(CorpusError::Shape(format!(
                "{} floats of vectors for {} chunks of {d} dimensions",
                vectors.len(),
                entries.len()
            )));
        }
        let by_id = entries.iter().enumerate().map(|(i, c)| (c.id.clone(), i)).collect();
        let mut index = VectorIndex::new(d);
        for v in vectors.chunks_exact(d.max(1)) {
            index.push(v).map_err(|e| CorpusError::Shape(e.to_string()))?;
        }
        index.prepare();
        Ok(Collection {
            number,
            shape,
            notes,
            entries,
            by_id,
            vectors: index,
            bm25: OnceLock::new(),
            postings: OnceLock::new(),
        })
    }

    /// Builds the BM25 index now rather than at the first keyword search.
    pub fn prepare(&self) {
        self.bm25();
    }

    fn postings(&self) -> &Postings {
        self.postings.get_or_init(|| {
            let mut p: Postings = HashMap::new();
            for (i, e) in self.entries.iter().enumerate() {
                for (field, values) in &e.fields {
                    let by_value = p.entry(field.clone()).or_default();
                    for v in values {
                        let list = by_value.entry(v.clone()).or_default();
                        // A value listed twice in one entry counts once.
                        if list.last() != Some(&(i as u32)) {
                            list.push(i as u32);
                        }
                    }
                }
            }
            p
        })
    }

    /// Which entries `filter` lets through, as one flag per entry (the same entries as
    /// [`Filter::matches`] passes, found through the postings).
    fn allowed(&self, filter: &Filter) -> Vec<bool> {
        let postings = self.postings();
        let n = self.entries.len();
        let mut allowed = vec![true; n];
        for c in &filter.0 {
            let mut hit = vec![false; n];
            if let Some(by_value) = postings.get(&c.field) {
                for w in &c.values {
                    let lists: Box<dyn Iterator<Item = &Vec<u32>>> = match c.how {
                        Match::Exact => Box::new(by_value.get(w).into_iter()),
                        Match::Prefix => Box::new(
                            by_value.range(w.clone()..).take_while(|(v, _)| v.starts_with(w.as_str())).map(|(_, l)| l),
                        ),
                    };
                    for &i in lists.flatten() {
                        hit[i as usize] = true;
                    }
                }
            }
            allowed.iter_mut().zip(hit).for_each(|(a, h)| *a &= h);
        }
        allowed
    }

    fn bm25(&self) -> &Bm25 {
        self.bm25.get_or_init(|| Bm25::build(self.entries.iter().map(|c| c.text.as_str())))
    }

    /// Its generation number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Its vectors' shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Its writers' notes.
    pub fn notes(&self) -> &str {
        &self.notes
    }

    /// Its chunks, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Every vector, one after the other, in the chunks' order.
    pub fn vectors(&self) -> &[f32] {
        self.vectors.raw()
    }

    /// The bytes it holds: ids, texts, metadata, fields, vectors and notes.
    pub fn bytes(&self) -> u64 {
        let entries: usize = self
            .entries
            .iter()
            .map(|e| {
                e.id.len()
                    + e.text.len()
                    + e.metadata.len()
                    + e.fields.iter().map(|(k, v)| k.len() + v.iter().map(String::len).sum::<usize>()).sum::<usize>()
            })
            .sum();
        (entries + self.vectors.raw().len() * 4 + self.notes.len()) as u64
    }

    /// The generation after this one: `changes` applied in order, `notes` replacing the notes
    /// when given, the number one more. Checks every vector before anything changes.
    pub fn apply(&self, changes: Vec<Change>, notes: Option<String>) -> Result<Collection, CorpusError> {
        let d = self.shape.dimension;
        for c in &changes {
            if let Change::Upsert(r) = c {
                check_vector(self.shape, Some(&r.id), &r.vector)?;
            }
        }
        let mut entries = self.entries.clone();
        let mut vectors = self.vectors.raw().to_vec();
        let mut by_id = self.by_id.clone();
        let mut removed = vec![false; entries.len()];
        for change in changes {
            match change {
                Change::Upsert(r) => {
                    let vector = self.shape.comparable(r.vector);
                    let entry = Entry { id: r.id, text: r.text, metadata: r.metadata, fields: r.fields };
                    match by_id.get(&entry.id) {
                        Some(&i) => {
                            vectors[i * d..(i + 1) * d].copy_from_slice(&vector);
                            entries[i] = entry;
                            removed[i] = false;
                        }
                        None => {
                            by_id.insert(entry.id.clone(), entries.len());
                            entries.push(entry);
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
        let (mut kept, mut kept_vectors) = (Vec::with_capacity(entries.len()), Vec::with_capacity(vectors.len()));
        for (i, e) in entries.into_iter().enumerate() {
            if !removed[i] {
                kept.push(e);
                kept_vectors.extend_from_slice(&vectors[i * d..(i + 1) * d]);
            }
        }
        let notes = notes.unwrap_or_else(|| self.notes.clone());
        Collection::from_parts(self.number + 1, self.shape, notes, kept, kept_vectors)
    }

    /// The corpus's state.
    pub fn info(&self) -> Info {
        Info { generation: self.number, chunks: self.entries.len() as u64, notes: self.notes.clone() }
    }

    /// See [`Corpus::nearest`]. Exact with a filter or below the exact limit; HNSW above it.
    pub fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>, CorpusError> {
        let query = self.shape.query(vector)?;
        let entries = &self.entries;
        let flags = (!filter.is_empty()).then(|| self.allowed(filter));
        let allowed = |i: usize| flags.as_ref().is_none_or(|f| f[i]);
        let allowed = flags.is_some().then_some(&allowed as &dyn Fn(usize) -> bool);
        let found = self.vectors.nearest(&query, k, allowed).map_err(|e| CorpusError::Shape(e.to_string()))?;
        Ok(found.into_iter().map(|(i, score)| Found { id: entries[i].id.clone(), score, similarity: None }).collect())
    }

    /// See [`Corpus::keyword`].
    pub fn keyword(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<Found>, CorpusError> {
        self.keyword_until(query, similar_to, k, filter, &|| false)
    }

    /// [`Collection::keyword`], given up with [`CorpusError::Busy`] as soon as `stop` says so
    /// (asked before each query term): the host stops a search when its call's deadline has
    /// passed.
    pub fn keyword_until(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Found>, CorpusError> {
        let similar_to = similar_to.map(|v| self.shape.query(v)).transpose()?;
        let entries = &self.entries;
        let flags = (!filter.is_empty()).then(|| self.allowed(filter));
        let allowed = |i: usize| flags.as_ref().is_none_or(|f| f[i]);
        let allowed = flags.is_some().then_some(&allowed as &dyn Fn(usize) -> bool);
        let found = self.bm25().search_until(query, k, allowed, stop).ok_or_else(|| {
            CorpusError::Busy("the keyword search was stopped at its call's deadline; ask with fewer terms".into())
        })?;
        Ok(found
            .into_iter()
            .map(|(i, score)| Found {
                id: entries[i].id.clone(),
                score,
                similarity: similar_to.as_ref().map(|q| crate::score::dot(q, self.vectors.get(i))),
            })
            .collect())
    }

    /// See [`Corpus::get`].
    pub fn get(&self, ids: &[String]) -> Vec<Option<Record>> {
        ids.iter()
            .map(|id| {
                let &i = self.by_id.get(id)?;
                let e = &self.entries[i];
                Some(Record {
                    id: e.id.clone(),
                    text: e.text.clone(),
                    vector: self.vectors.get(i).to_vec(),
                    metadata: e.metadata.clone(),
                    fields: e.fields.clone(),
                })
            })
            .collect()
    }

    /// See [`Corpus::list`].
    pub fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| filter.matches(&e.fields))
            .skip(offset)
            .take(limit)
            .map(|e| e.id.clone())
            .collect()
    }
}

/// A corpus kept by the tool itself, in its own memory: for a tool configured without a host
/// corpus, and for tests. Same searches as the host's ([`Collection`]).
pub struct MemoryCorpus {
    current: RefCell<Arc<Collection>>,
    writing: Cell<bool>,
}

impl MemoryCorpus {
    /// An empty corpus of `shape`.
    pub fn new(shape: Shape) -> Result<MemoryCorpus, CorpusError> {
        check_shape(shape)?;
        Ok(MemoryCorpus { current: RefCell::new(Arc::new(Collection::empty(shape))), writing: Cell::new(false) })
    }

    /// The committed generation.
    pub fn snapshot(&self) -> Arc<Collection> {
        self.current.borrow().clone()
    }
}

impl Corpus for MemoryCorpus {
    fn info(&self) -> Result<Info, CorpusError> {
        Ok(self.snapshot().info())
    }

    fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>, CorpusError> {
        self.snapshot().nearest(vector, k, filter)
    }

    fn keyword(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<Found>, CorpusError> {
        self.snapshot().keyword(query, similar_to, k, filter)
    }

    fn get(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        Ok(self.snapshot().get(ids))
    }

    fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Result<Vec<String>, CorpusError> {
        Ok(self.snapshot().list(filter, offset, limit))
    }

    fn write(&self) -> Result<Box<dyn Writer + '_>, CorpusError> {
        if self.writing.replace(true) {
            return Err(CorpusError::Busy("the corpus is being written by another writer".into()));
        }
        Ok(Box::new(MemoryWriter { corpus: self, changes: Vec::new(), notes: None }))
    }
}

struct MemoryWriter<'a> {
    corpus: &'a MemoryCorpus,
    changes: Vec<Change>,
    notes: Option<String>,
}

impl Drop for MemoryWriter<'_> {
    fn drop(&mut self) {
        self.corpus.writing.set(false);
    }
}

impl Writer for MemoryWriter<'_> {
    fn upsert(&mut self, records: Vec<Record>) -> Result<(), CorpusError> {
        self.changes.extend(records.into_iter().map(Change::Upsert));
        Ok(())
    }

    fn remove(&mut self, ids: Vec<String>) -> Result<(), CorpusError> {
        self.changes.extend(ids.into_iter().map(Change::Remove));
        Ok(())
    }

    fn set_notes(&mut self, notes: String) -> Result<(), CorpusError> {
        self.notes = Some(notes);
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<u64, CorpusError> {
        let next = self.corpus.snapshot().apply(std::mem::take(&mut self.changes), self.notes.take())?;
        let number = next.number();
        *self.corpus.current.borrow_mut() = Arc::new(next);
        Ok(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, text: &str, v: [f32; 2], chapters: &[&str]) -> Record {
        let n = (v[0] * v[0] + v[1] * v[1]).sqrt();
        Record {
            id: id.into(),
            text: text.into(),
            vector: vec![v[0] / n, v[1] / n],
            metadata: "{}".into(),
            fields: BTreeMap::from([("chapters".into(), chapters.iter().map(|s| s.to_string()).collect())]),
        }
    }

    fn sample() -> MemoryCorpus {
        let c = MemoryCorpus::new(Shape { dimension: 2, metric: Metric::Cosine }).unwrap();
        let mut w = c.write().unwrap();
        w.upsert(vec![
            rec("a", "east wind", [1.0, 0.0], &["1.", "1.2."]),
            rec("b", "north wind", [0.0, 1.0], &["1.20."]),
            rec("c", "north east", [1.0, 1.0], &["2."]),
        ])
        .unwrap();
        w.set_notes(r#"{"doc":"x"}"#.into()).unwrap();
        assert_eq!(w.commit().unwrap(), 1);
        c
    }

    #[test]
    fn searches_filter_by_any_value_of_a_field() {
        let c = sample();
        let ids = |f: Vec<Found>| f.into_iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(ids(c.nearest(&[1.0, 0.1], 3, &Filter::all()).unwrap()), ["a", "c", "b"]);
        // "1.2." is a prefix of chunk a's second chapter, not of "1.20.".
        let under =
            Filter::all().and(Clause { field: "chapters".into(), values: vec!["1.2.".into()], how: Match::Prefix });
        assert_eq!(ids(c.nearest(&[0.0, 1.0], 3, &under).unwrap()), ["a"]);
        let either = Filter::all().and(Clause {
            field: "chapters".into(),
            values: vec!["2.".into(), "1.20.".into()],
            how: Match::Exact,
        });
        assert_eq!(ids(c.keyword("north", None, 5, &either).unwrap()).len(), 2);
        assert!(c.nearest(&[1.0, 0.0], 3, &Filter::exact("missing", "x")).unwrap().is_empty());
    }

    /// The postings let through exactly what comparing each entry's fields does, for every
    /// kind of clause, a missing field, several values and several clauses.
    #[test]
    fn the_postings_pass_what_the_fields_match() {
        let c = Collection::empty(Shape { dimension: 2, metric: Metric::Cosine });
        let mut entries = Vec::new();
        for (i, chapters) in [&["1.", "1.2."][..], &["1.20."], &["2."], &[], &["1.2.3.", "2.1."]].iter().enumerate() {
            let mut fields: Fields =
                BTreeMap::from([("chapters".into(), chapters.iter().map(|s| s.to_string()).collect())]);
            if i % 2 == 0 {
                fields.insert("doc".into(), vec![format!("d{}", i % 3)]);
            }
            entries.push(Entry { id: format!("e{i}"), text: String::new(), metadata: String::new(), fields });
        }
        let c = Collection { entries, ..c };
        let clause = |field: &str, values: &[&str], how| Clause {
            field: field.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
            how,
        };
        let filters = [
            Filter::all(),
            Filter::all().and(clause("chapters", &["1.2."], Match::Prefix)),
            Filter::all().and(clause("chapters", &["1.2.", "2."], Match::Exact)),
            Filter::all().and(clause("chapters", &["1."], Match::Prefix)).and(clause("doc", &["d0"], Match::Exact)),
            Filter::all().and(clause("missing", &["x"], Match::Exact)),
            Filter::all().and(clause("chapters", &[""], Match::Prefix)),
        ];
        for f in &filters {
            let want: Vec<bool> = c.entries.iter().map(|e| f.matches(&e.fields)).collect();
            assert_eq!(c.allowed(f), want, "{f:?}");
        }
    }

    #[test]
    fn keyword_hits_carry_their_vector_similarity() {
        let c = sample();
        let found = c.keyword("north", Some(&[0.0, 2.0]), 5, &Filter::all()).unwrap();
        let b = found.iter().find(|f| f.id == "b").unwrap();
        assert!((b.similarity.unwrap() - 1.0).abs() < 1e-6, "the query is normalised: {b:?}");
        assert!(c.keyword("north", None, 5, &Filter::all()).unwrap().iter().all(|f| f.similarity.is_none()));
    }

    #[test]
    fn a_batch_is_seen_whole_at_commit_and_dropped_when_not_committed() {
        let c = sample();
        let mut w = c.write().unwrap();
        assert!(matches!(c.write().map(drop), Err(CorpusError::Busy(_))), "one writer at a time");
        w.remove(vec!["a".into()]).unwrap();
        w.upsert(vec![rec("d", "west", [-1.0, 0.0], &[])]).unwrap();
        assert_eq!(c.info().unwrap().chunks, 3, "readers see the committed generation");
        drop(w);
        assert_eq!(c.info().unwrap(), Info { generation: 1, chunks: 3, notes: r#"{"doc":"x"}"#.into() });
        let mut w = c.write().unwrap();
        w.remove(vec!["a".into()]).unwrap();
        w.upsert(vec![rec("b", "south", [0.0, -1.0], &[])]).unwrap();
        assert_eq!(w.commit().unwrap(), 2);
        assert_eq!(c.list(&Filter::all(), 0, 10).unwrap(), ["b", "c"]);
        let got = c.get(&["b".into(), "a".into()]).unwrap();
        assert_eq!(got[0].as_ref().unwrap().text, "south");
        assert!(got[1].is_none());
        assert_eq!(c.info().unwrap().notes, r#"{"doc":"x"}"#, "notes stay unless set");
    }

    #[test]
    fn wrong_dimensions_are_refused_and_change_nothing() {
        let c = sample();
        let mut w = c.write().unwrap();
        w.upsert(vec![Record { vector: vec![1.0, 0.0, 0.0], ..rec("z", "z", [1.0, 0.0], &[]) }]).unwrap();
        let e = w.commit().unwrap_err();
        assert!(e.to_string().contains("3-dimensional vector; the corpus holds 2-dimensional"), "{e}");
        assert_eq!(c.info().unwrap().generation, 1);
        assert!(c.nearest(&[1.0], 1, &Filter::all()).unwrap_err().to_string().contains("has 1 dimensions"));
        assert!(MemoryCorpus::new(Shape { dimension: 0, metric: Metric::Dot }).is_err());
        // Not a number, in a chunk or a query: refused, saying where.
        let mut w = c.write().unwrap();
        w.upsert(vec![Record { vector: vec![f32::NAN, 1.0], ..rec("n", "n", [1.0, 0.0], &[]) }]).unwrap();
        let e = w.commit().unwrap_err();
        assert!(e.to_string().contains("chunk \"n\"'s vector has NaN at position 0"), "{e}");
        assert_eq!(c.info().unwrap().generation, 1);
        let e = c.nearest(&[f32::INFINITY, 0.0], 1, &Filter::all()).unwrap_err();
        assert!(e.to_string().contains("the query vector has inf at position 0"), "{e}");
    }
}
