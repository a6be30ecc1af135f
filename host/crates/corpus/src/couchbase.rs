//! The Couchbase corpus backend: the same corpus (chunks, vectors, filter fields, generations,
//! one writer at a time) kept in one Couchbase collection, so that every host of a fleet serves
//! it and none keeps it.
//!
//! **Documents.** A chunk is a document keyed by its id, in the shape LangChain's and
//! LlamaIndex's Couchbase vector stores write (`text`, `embedding`, `metadata`), so those stores
//! and the couchbase-search tool can search a corpus Quarry wrote. Quarry's own part sits under
//! `quarry`: the chunk id, the generation that wrote it (`gen`), the generation that removed it
//! (`until`, once removed), the filter fields and the metadata as given. Three documents beside
//! the chunks run the corpus: `_quarry::manifest` (generation, shape, chunk count, notes),
//! `_quarry::lease` (the writer, with an expiry it renews) and `_quarry::attempt` (what a commit
//! in progress has touched); and one `_quarry::moved::ID` beside each chunk whose key is not its
//! id, so that the manifest, which every reader and commit reads, stays the same size whatever
//! the corpus holds.
//!
//! **Generations, never a mix.** Readers read the manifest's generation `G` and search for
//! chunks with `gen <= G` and no `until <= G`. A commit of `G + 1` writes its new chunks with
//! `gen = G + 1` and marks the chunks it removes with `until = G + 1` (invisible to readers of
//! `G` either way), then flips the manifest to `G + 1` with its CAS: readers see all of the
//! commit or none of it. A chunk rewritten with other content goes to a new key (`id@@G+1`,
//! recorded in its `_quarry::moved::ID` with the key before and the generation that moved it, so
//! that readers of `G` still find the old one) so that both versions exist until the flip.
//! Removed chunks are
//! deleted one commit later, when no reader can still be on the generation that had them.
//!
//! **A writer that dies.** The lease expires and another host takes it. Before the commit
//! writes a chunk, `_quarry::attempt` lists it; the next commit reads that list, keeps what it
//! writes again unchanged (resuming from the chunks already written), deletes the rest and
//! clears the dead commit's marks, before its own flip.
//!
//! **Reads.** kNN and keyword searches go to the collection's Search index (made if missing,
//! checked against the dimension and similarity), with the filter and the generation as a
//! prefilter; `get` reads documents by key. Each call reads the manifest first: a host caches
//! nothing of the corpus.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use couchbase::options::search_options::SearchOptions;
use couchbase::search::queries::{
    BooleanQuery, ConjunctionQuery, DisjunctionQuery, MatchAllQuery, MatchQuery, NumericRangeQuery, PrefixQuery, Query,
    TermQuery,
};
use couchbase::search::request::SearchRequest;
use couchbase::search::vector::{VectorQuery, VectorSearch};
use quarry_couchbase::store::{Store, StoreError, VectorField};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::progress::{LeaseProgress, ProgressLink};
/// Why a call failed: the errors of the `corpus` interface (shape, invalid, busy, unavailable).
pub use rag_core::corpus::CorpusError;
use rag_core::corpus::{Change, Filter, Found, Info, Match, Metric, Record, Shape};

const MANIFEST: &str = "_quarry::manifest";
const LEASE: &str = "_quarry::lease";
const ATTEMPT: &str = "_quarry::attempt";
/// The prefix of the document that says where a chunk whose key is not its id is kept.
const MOVED: &str = "_quarry::moved::";
/// The longest chunk id kept as a key (Couchbase keys have at most 250 bytes; a rewritten chunk's
/// key has a suffix).
pub const MAX_ID_BYTES: usize = 200;
/// The Search service's result window: a search or a listing reaches at most this far.
pub const MAX_WINDOW: usize = 10_000;

/// The manifest: what a reader needs before it searches.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    generation: u64,
    dimension: usize,
    metric: Metric,
    chunks: u64,
    /// What the chunks hold (ids, texts, metadata, fields, 4 bytes a dimension), as a local
    /// corpus counts it against its `max_bytes`.
    #[serde(default)]
    bytes: u64,
    /// The terms of every chunk's text (BM25's lengths, as [`rag_core::bm25::terms`] counts
    /// them), for the mean length a keyword search normalises by.
    #[serde(default)]
    terms: u64,
    notes: String,
    /// Chunks whose key is not their id, as Quarry before `_quarry::moved::ID` kept them: id ->
    /// key. Read still; a commit moves the ids it touches to their own documents.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    moved: BTreeMap<String, String>,
    /// Keys removed by the last commit, deleted by the next.
    #[serde(default)]
    retired: Vec<String>,
}

/// What a commit in progress has touched.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Attempt {
    generation: u64,
    written: BTreeSet<String>,
    marked: BTreeSet<String>,
}

/// A corpus in a Couchbase collection.
pub struct CouchbaseCorpus {
    name: String,
    store: Store,
    index: String,
    shape: Shape,
    max_bytes: u64,
    /// Document frequencies of query terms in one generation (a bounded cache).
    doc_freqs: parking_lot::Mutex<(u64, HashMap<String, u64>)>,
}

/// Candidates a keyword search reads per chunk it returns (at least [`MIN_CANDIDATES`]): the
/// Search service's scoring picks them, BM25 ranks them.
const CANDIDATES_PER_HIT: usize = 4;
/// The fewest candidates a keyword search reads.
const MIN_CANDIDATES: usize = 100;
/// The most document frequencies a corpus keeps before it starts its cache again.
const MAX_CACHED_TERMS: usize = 100_000;
/// The most distinct terms a keyword query may have (each not yet counted is a Search request).
const MAX_QUERY_TERMS: usize = 256;
/// Term counts asked of the Search service at once.
const COUNTS_AT_ONCE: usize = 16;

/// What a chunk holds, as [`Manifest::bytes`] counts it.
fn record_bytes(r: &Record) -> u64 {
    let fields: usize = r.fields.iter().map(|(k, v)| k.len() + v.iter().map(String::len).sum::<usize>()).sum();
    (r.id.len() + r.text.len() + r.metadata.len() + fields + r.vector.len() * 4) as u64
}

fn unavailable(name: &str, e: StoreError) -> CorpusError {
    match e {
        StoreError::Invalid(m) => CorpusError::Invalid(format!("corpus {name}: {m}")),
        e => CorpusError::Unavailable(format!("corpus {name}: {e}")),
    }
}

fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Cosine => "cosine",
        Metric::Dot => "dot",
    }
}

/// The terms of a chunk's text, as BM25 counts them.
fn text_terms(text: &str) -> usize {
    rag_core::bm25::terms(text).len()
}

/// A chunk's content, hashed: a commit that writes the same chunk again leaves it be.
fn content_hash(r: &Record) -> String {
    let mut h = Sha256::new();
    h.update(r.text.as_bytes());
    h.update([0]);
    for x in &r.vector {
        h.update(x.to_le_bytes());
    }
    h.update(r.metadata.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(&r.fields).unwrap_or_default());
    hex(&h.finalize())
}

/// The key chunk `id` is kept under as of generation `g`: from its `_quarry::moved::ID`
/// (`{"moved": {"key", "previous", "gen"}}`: `key` from generation `gen` on, `previous` before;
/// `null` for the id itself), else the manifest's map of an earlier Quarry, else the id.
fn moved_key(m: &Manifest, id: &str, moved: Option<&Value>, g: u64) -> String {
    if let Some(d) = moved.and_then(|d| d.get("moved")) {
        let since = d["gen"].as_u64().unwrap_or(0);
        let key = if since <= g { &d["key"] } else { &d["previous"] };
        return key.as_str().map_or_else(|| id.to_string(), str::to_string);
    }
    m.moved.get(id).cloned().unwrap_or_else(|| id.to_string())
}

/// A `_quarry::moved::ID`: the chunk's key from generation `g` on, `previous` before it.
fn moved_doc(id: &str, key: &str, previous: &str, g: u64) -> Value {
    let or_null = |k: &str| if k == id { Value::Null } else { json!(k) };
    json!({"moved": {"key": or_null(key), "previous": or_null(previous), "gen": g}})
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A chunk as the document the stores of LangChain and LlamaIndex read.
fn document(r: &Record, generation: u64, hash: &str) -> Value {
    let metadata = match serde_json::from_str::<Value>(&r.metadata) {
        Ok(Value::Object(o)) => Value::Object(o),
        _ => json!({}),
    };
    json!({
        "text": r.text,
        "embedding": r.vector,
        "metadata": metadata,
        "quarry": {"id": r.id, "gen": generation, "fields": r.fields, "metadata": r.metadata, "hash": hash},
    })
}

/// A chunk document's record, and the generations it lives in.
fn record(doc: &Value) -> Option<(Record, u64, Option<u64>)> {
    let q = doc.get("quarry")?;
    let vector =
        doc.get("embedding")?.as_array()?.iter().map(|x| x.as_f64().map(|f| f as f32)).collect::<Option<_>>()?;
    let r = Record {
        id: q.get("id")?.as_str()?.to_string(),
        text: doc.get("text")?.as_str()?.to_string(),
        vector,
        metadata: q.get("metadata")?.as_str()?.to_string(),
        fields: serde_json::from_value(q.get("fields")?.clone()).ok()?,
    };
    Some((r, q.get("gen")?.as_u64()?, q.get("until").and_then(Value::as_u64)))
}

fn visible(doc: &Value, generation: u64) -> bool {
    let q = &doc["quarry"];
    q["gen"].as_u64().is_some_and(|g| g <= generation) && q["until"].as_u64().is_none_or(|u| u > generation)
}

/// What the search sees of generation `g`, and `filter`: the chunks written by then and not yet
/// removed, whose fields pass every clause.
fn prefilter(filter: &Filter, g: u64) -> Query {
    prefilter_boosted(filter, g, None)
}

/// [`prefilter`] with `boost` on each clause that can score: a keyword search sends it with
/// boost 0, so that the filter decides which chunks match but adds nothing to their scores
/// (bleve sums a conjunction's scores, and a generation range or a field's value would
/// otherwise rank chunks by how rare their generation or chapter is).
fn prefilter_boosted(filter: &Filter, g: u64, boost: Option<f32>) -> Query {
    let boosted = |q: Query| match (q, boost) {
        (Query::NumericRange(r), Some(b)) => Query::NumericRange(r.boost(b)),
        (Query::Term(t), Some(b)) => Query::Term(t.boost(b)),
        (Query::Prefix(p), Some(b)) => Query::Prefix(p.boost(b)),
        (q, _) => q,
    };
    let mut must = vec![boosted(Query::NumericRange(
        NumericRangeQuery::new().field("quarry.gen").max(g as f32).inclusive_max(g as f32, true),
    ))];
    for clause in &filter.0 {
        let field = format!("quarry.fields.{}", clause.field);
        let any: Vec<Query> = clause
            .values
            .iter()
            .map(|v| match clause.how {
                Match::Exact => Query::Term(TermQuery::new(v.as_str()).field(field.as_str())),
                Match::Prefix => Query::Prefix(PrefixQuery::new(v.as_str()).field(field.as_str())),
            })
            .map(boosted)
            .collect();
        must.push(Query::Disjunction(DisjunctionQuery::new(any)));
    }
    let removed =
        Query::NumericRange(NumericRangeQuery::new().field("quarry.until").max(g as f32).inclusive_max(g as f32, true));
    Query::Boolean(BooleanQuery::new().must(ConjunctionQuery::new(must)).must_not(DisjunctionQuery::new(vec![removed])))
}

/// The analyzer index definition `def` gives the chunks' `text`: the field's own, else the
/// nearest `default_analyzer` above it, else the mapping's (bleve's own default is `standard`).
fn text_analyzer(def: &Value) -> String {
    let Some(mapping) = def.pointer("/params/mapping") else { return "standard".into() };
    let top = mapping.get("default_analyzer").and_then(Value::as_str).unwrap_or("standard");
    for ty in mapping.get("types").and_then(Value::as_object).into_iter().flatten().map(|(_, t)| t) {
        let text = ty.pointer("/properties/text");
        let own = text
            .and_then(|t| t.get("fields"))
            .and_then(Value::as_array)
            .and_then(|fs| fs.iter().find_map(|f| f.get("analyzer").and_then(Value::as_str)))
            .filter(|a| !a.is_empty());
        let inherited = text.and_then(|t| t.get("default_analyzer")).or_else(|| ty.get("default_analyzer"));
        if let Some(a) = own.or_else(|| inherited.and_then(Value::as_str)) {
            return a.to_string();
        }
    }
    top.to_string()
}

/// Refuses an existing index that analyses the text otherwise than the corpus makes it (`cjk`):
/// its term counts would not be the local BM25's, and keyword ranking would differ.
fn check_text_analyzer(name: &str, index: &str, def: &Value) -> Result<(), CorpusError> {
    match text_analyzer(def).as_str() {
        "cjk" => Ok(()),
        other => Err(CorpusError::Invalid(format!(
            "corpus {name}: search index {index:?} analyses the chunks' text with {other:?}, not \"cjk\" (what a local corpus's BM25 counts): drop the index (the corpus makes it again), or give the corpus another index name"
        ))),
    }
}

/// The index's parameters: the LangChain fields (`text` and `metadata` stored, as LangChain's
/// store and CrewAI's tool read them from a hit), and Quarry's (numbers for the generations,
/// untokenised strings for the filter fields, so that a term is a whole value and a prefix a
/// prefix of one). The text is analysed and scored as a local corpus does it, so that keyword
/// ranking does not depend on where the corpus is kept: the `cjk` analyzer makes the local
/// BM25's terms (Unicode words lower-cased, no stop words, runs of CJK characters as bigrams),
/// and `scoring_model` asks Couchbase 8.0 for BM25 (a 7.6 cluster, which refuses the key, gets
/// the index without it and scores by tf-idf: [`Store::ensure_index`]).
fn index_params(scope: &str, collection: &str, shape: Shape) -> HashMap<String, Value> {
    let mapping = json!({
        "default_analyzer": "standard",
        "default_mapping": {"enabled": false, "dynamic": true},
        "default_type": "_default",
        "scoring_model": "bm25",
        "store_dynamic": true,
        "type_field": "_type",
        "types": {format!("{scope}.{collection}"): {"enabled": true, "dynamic": false, "properties": {
            "embedding": {"enabled": true, "dynamic": false, "fields": [
                {"name": "embedding", "type": "vector", "dims": shape.dimension, "similarity": "dot_product",
                 "vector_index_optimized_for": "recall", "index": true}
            ]},
            "text": {"enabled": true, "dynamic": false, "fields": [
                {"name": "text", "type": "text", "analyzer": "cjk", "index": true, "store": true}
            ]},
            "metadata": {"enabled": true, "dynamic": true},
            "quarry": {"enabled": true, "dynamic": false, "properties": {
                "gen": {"enabled": true, "dynamic": false, "fields": [{"name": "gen", "type": "number", "index": true}]},
                "until": {"enabled": true, "dynamic": false, "fields": [{"name": "until", "type": "number", "index": true}]},
                "fields": {"enabled": true, "dynamic": true, "default_analyzer": "keyword"}
            }}
        }}}
    });
    [
        ("doc_config".to_string(), json!({"mode": "scope.collection.type_field", "type_field": "type"})),
        ("mapping".to_string(), mapping),
    ]
    .into()
}

impl CouchbaseCorpus {
    /// Opens corpus `name` in `store`'s collection for vectors of `shape`, searched through
    /// index `index`: checks the collection is there, makes the manifest when there is none
    /// (checks its shape when there is), and makes or checks the index.
    pub async fn open(name: &str, store: Store, index: &str, shape: Shape) -> Result<Self, CorpusError> {
        rag_core::corpus::check_shape(shape)?;
        let fail = |e| unavailable(name, e);
        store.check().await.map_err(fail)?;
        let fresh = Manifest {
            generation: 0,
            dimension: shape.dimension,
            metric: shape.metric,
            chunks: 0,
            bytes: 0,
            terms: 0,
            notes: "{}".into(),
            moved: BTreeMap::new(),
            retired: Vec::new(),
        };
        let stored = match store.insert(MANIFEST, &serde_json::to_value(&fresh).expect("plain data"), None).await {
            Ok(_) => fresh,
            Err(StoreError::Exists(_)) => {
                let doc = store.get(MANIFEST).await.map_err(fail)?.ok_or_else(|| {
                    CorpusError::Unavailable(format!("corpus {name}: its manifest vanished while it was opened"))
                })?;
                serde_json::from_value(doc.value).map_err(|e| {
                    CorpusError::Unavailable(format!("corpus {name}: its manifest is not Quarry's ({e})"))
                })?
            }
            Err(e) => return Err(fail(e)),
        };
        if stored.dimension != shape.dimension || stored.metric != shape.metric {
            return Err(CorpusError::Shape(format!(
                "corpus {name} ({}) holds {}-dimensional vectors compared by {}, not {}-dimensional by {}; use another corpus, or empty this one to rebuild it",
                store.path(),
                stored.dimension,
                metric_name(stored.metric),
                shape.dimension,
                metric_name(shape.metric)
            )));
        }
        let path = store.path();
        let mut parts = path.split('.').skip(1);
        let (scope, collection) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        let vector =
            VectorField { path: "embedding".into(), dims: shape.dimension as u32, similarity: "dot_product".into() };
        let created = store.ensure_index(index, index_params(scope, collection, shape), &vector).await.map_err(fail)?;
        if !created && let Some(def) = store.index_definition(index).await.map_err(fail)? {
            check_text_analyzer(name, index, &def)?;
        }
        Ok(CouchbaseCorpus {
            name: name.to_string(),
            store,
            index: index.to_string(),
            shape,
            max_bytes: u64::MAX,
            doc_freqs: Default::default(),
        })
    }

    /// Refuses commits that would make the corpus hold more than `bytes`.
    pub fn with_max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Its vectors' shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    async fn manifest(&self) -> Result<(Manifest, u64), CorpusError> {
        let doc = self.store.get(MANIFEST).await.map_err(|e| unavailable(&self.name, e))?.ok_or_else(|| {
            CorpusError::Unavailable(format!(
                "corpus {}: its manifest is gone from {}; reopen the corpus to start it again",
                self.name,
                self.store.path()
            ))
        })?;
        let m = serde_json::from_value(doc.value).map_err(|e| {
            CorpusError::Unavailable(format!("corpus {}: its manifest is not Quarry's ({e})", self.name))
        })?;
        Ok((m, doc.cas))
    }

    /// The committed generation, its size and notes.
    pub async fn info(&self) -> Result<Info, CorpusError> {
        let (m, _) = self.manifest().await?;
        Ok(Info { generation: m.generation, chunks: m.chunks, notes: m.notes })
    }

    fn query_vector(&self, v: &[f32]) -> Result<Vec<f32>, CorpusError> {
        self.shape.query(v)
    }

    /// Chunk ids of document keys (a moved chunk's key is its id, `@@` and a generation; ids
    /// hold no `@@`).
    fn ids_of(hits: Vec<(String, f64)>) -> Vec<(String, f64)> {
        hits.into_iter()
            .map(|(key, s)| (key.split_once("@@").map_or(key.as_str(), |(id, _)| id).to_string(), s))
            .collect()
    }

    /// The keys chunks `ids` are kept under as of generation `g`, and each one's
    /// `_quarry::moved::ID` as read (see [`moved_key`]).
    async fn keys_at(
        &self,
        m: &Manifest,
        ids: &[String],
        g: u64,
    ) -> Result<(Vec<String>, Vec<Option<Value>>), CorpusError> {
        let docs = self
            .store
            .get_many(&ids.iter().map(|id| format!("{MOVED}{id}")).collect::<Vec<_>>())
            .await
            .map_err(|e| unavailable(&self.name, e))?;
        let moved: Vec<Option<Value>> = docs.into_iter().map(|d| d.map(|d| d.value)).collect();
        let keys = ids.iter().zip(&moved).map(|(id, d)| moved_key(m, id, d.as_ref(), g)).collect();
        Ok((keys, moved))
    }

    /// The `k` chunks nearest `vector` among those `filter` lets through, best first.
    pub async fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>, CorpusError> {
        let v = self.query_vector(vector)?;
        let k = k.min(MAX_WINDOW);
        let (m, _) = self.manifest().await?;
        let vq = VectorQuery::with_vector("embedding", v)
            .num_candidates(k as u32)
            .prefilter(prefilter(filter, m.generation));
        let request = SearchRequest::with_vector_search(VectorSearch::new(vec![vq], None));
        let hits = self
            .store
            .search(&self.index, request, SearchOptions::new().limit(k as u32))
            .await
            .map_err(|e| unavailable(&self.name, e))?;
        Ok(Self::ids_of(hits).into_iter().map(|(id, s)| Found { id, score: s as f32, similarity: None }).collect())
    }

    /// The `k` best chunks for `query` by BM25 among those `filter` lets through, each with its
    /// similarity to `similar_to` when given (its vector read). The Search service's text query
    /// picks the candidates (its own scoring, tf-idf or bleve's BM25, ranks them differently
    /// from a local corpus's); they are ranked by the one BM25 formula of every corpus
    /// ([`rag_core::bm25::term_score`]) over this generation's statistics: its chunks and terms
    /// from the manifest, each query term's document frequency from the Search service.
    pub async fn keyword(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<Found>, CorpusError> {
        let similar_to = similar_to.map(|v| self.query_vector(v)).transpose()?;
        let mut wanted = rag_core::bm25::terms(query);
        wanted.sort();
        wanted.dedup();
        if wanted.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        // Each term not yet counted in this generation is a request to the Search service.
        if wanted.len() > MAX_QUERY_TERMS {
            return Err(CorpusError::Invalid(format!(
                "corpus {}: a keyword query of {} distinct terms; a corpus in Couchbase counts at most {MAX_QUERY_TERMS} (a Search request each): shorten the query",
                self.name,
                wanted.len()
            )));
        }
        let (m, _) = self.manifest().await?;
        let text = Query::Match(MatchQuery::new(query).field("text"));
        let request = SearchRequest::with_search_query(Query::Conjunction(ConjunctionQuery::new(vec![
            text,
            prefilter_boosted(filter, m.generation, Some(0.0)),
        ])));
        let candidates = k.saturating_mul(CANDIDATES_PER_HIT).clamp(MIN_CANDIDATES, MAX_WINDOW);
        let opts = SearchOptions::new().limit(candidates as u32).fields(vec!["text".to_string()]);
        let found = self.store.search_hits(&self.index, request, opts).await.map_err(|e| unavailable(&self.name, e))?;
        let df = self.doc_freqs(&m, &wanted).await?;
        let (n, avg) = (m.chunks as f32, rag_core::bm25::mean_length(m.terms, m.chunks));
        let score = |text: &str| -> f32 {
            let have = rag_core::bm25::terms(text);
            let len = have.len() as f32;
            wanted
                .iter()
                .zip(&df)
                .filter_map(|(t, &d)| {
                    let f = have.iter().filter(|h| *h == t).count();
                    (f > 0).then(|| rag_core::bm25::term_score(f as f32, len, d as f32, n.max(d as f32), avg))
                })
                .sum()
        };
        let mut scored: Vec<(String, f64)> = found
            .hits
            .into_iter()
            .filter_map(|h| {
                let text = h.fields.as_ref().and_then(|f| f.get("text")).and_then(Value::as_str)?;
                let s = score(text);
                (s > 0.0).then_some((h.key, f64::from(s)))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        scored.truncate(k);
        let hits = Self::ids_of(scored);
        let similarity = match &similar_to {
            None => vec![None; hits.len()],
            Some(q) => {
                let ids: Vec<String> = hits.iter().map(|(id, _)| id.clone()).collect();
                self.read(&m, &ids)
                    .await?
                    .into_iter()
                    .map(|r| r.map(|r| r.vector.iter().zip(q).map(|(a, b)| a * b).sum::<f32>()))
                    .collect()
            }
        };
        Ok(hits
            .into_iter()
            .zip(similarity)
            .map(|((id, s), similarity)| Found { id, score: s as f32, similarity })
            .collect())
    }

    /// How many chunks of generation `m` hold each of `terms` (the Search service's count of a
    /// term query's matches), cached per generation.
    async fn doc_freqs(&self, m: &Manifest, terms: &[String]) -> Result<Vec<u64>, CorpusError> {
        let missing: Vec<&String> = {
            let mut cache = self.doc_freqs.lock();
            if cache.0 != m.generation || cache.1.len() > MAX_CACHED_TERMS {
                *cache = (m.generation, HashMap::new());
            }
            terms.iter().filter(|t| !cache.1.contains_key(*t)).collect()
        };
        let mut counted = HashMap::with_capacity(missing.len());
        // A few at a time, as the store writes its batches.
        for batch in missing.chunks(COUNTS_AT_ONCE) {
            let mut counts = Vec::with_capacity(batch.len());
            for t in batch {
                let request = SearchRequest::with_search_query(Query::Conjunction(ConjunctionQuery::new(vec![
                    Query::Term(TermQuery::new(t.as_str()).field("text")),
                    prefilter_boosted(&Filter::all(), m.generation, Some(0.0)),
                ])));
                counts.push(self.store.search_hits(&self.index, request, SearchOptions::new().limit(1)));
            }
            for (t, c) in batch.iter().zip(futures::future::join_all(counts).await) {
                counted.insert((*t).clone(), c.map_err(|e| unavailable(&self.name, e))?.total);
            }
        }
        let mut cache = self.doc_freqs.lock();
        let freqs = terms.iter().map(|t| counted.get(t).or_else(|| cache.1.get(t)).copied().unwrap_or(0)).collect();
        if cache.0 == m.generation {
            cache.1.extend(counted);
        }
        Ok(freqs)
    }

    /// The chunks of `ids` in the committed generation, in order.
    pub async fn get(&self, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        let (m, _) = self.manifest().await?;
        self.read(&m, ids).await
    }

    async fn read(&self, m: &Manifest, ids: &[String]) -> Result<Vec<Option<Record>>, CorpusError> {
        let (keys, _) = self.keys_at(m, ids, m.generation).await?;
        let docs = self.store.get_many(&keys).await.map_err(|e| unavailable(&self.name, e))?;
        Ok(docs
            .into_iter()
            .map(|d| d.filter(|d| visible(&d.value, m.generation)).and_then(|d| record(&d.value)).map(|(r, ..)| r))
            .collect())
    }

    /// Ids of chunks `filter` lets through, in key order, from `offset`, at most `limit`.
    pub async fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Result<Vec<String>, CorpusError> {
        if offset >= MAX_WINDOW {
            return Err(CorpusError::Invalid(format!(
                "corpus {}: the Search service lists at most {MAX_WINDOW} chunks of one query; narrow the filter",
                self.name
            )));
        }
        let (m, _) = self.manifest().await?;
        let limit = limit.min(MAX_WINDOW - offset);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let all = Query::Conjunction(ConjunctionQuery::new(vec![
            Query::MatchAll(MatchAllQuery::new()),
            prefilter(filter, m.generation),
        ]));
        let opts = SearchOptions::new()
            .limit(limit as u32)
            .skip(offset as u32)
            .sort(vec![couchbase::search::sort::Sort::Id(couchbase::search::sort::SortId::new())]);
        let hits = self
            .store
            .search(&self.index, SearchRequest::with_search_query(all), opts)
            .await
            .map_err(|e| unavailable(&self.name, e))?;
        Ok(Self::ids_of(hits).into_iter().map(|(id, _)| id).collect())
    }

    /// Takes the write lease for `holder`, waiting at most `wait` while another holds it. The
    /// lease lasts `ttl` and renews itself while held; a holder that dies loses it after `ttl`.
    pub async fn lease(&self, holder: &str, ttl: Duration, wait: Duration) -> Result<Lease, CorpusError> {
        self.lease_sharing(holder, ttl, wait, None).await
    }

    /// [`CouchbaseCorpus::lease`], sharing progress through the lease document: while it waits,
    /// the holder's latest report (what it is building, how far along) goes to `progress` as
    /// this host's own, about once a second; once it holds the lease, `progress`'s latest report
    /// goes into the document at each renewal, for the hosts that wait.
    pub async fn lease_sharing(
        &self,
        holder: &str,
        ttl: Duration,
        wait: Duration,
        progress: Option<Arc<dyn ProgressLink>>,
    ) -> Result<Lease, CorpusError> {
        let started = tokio::time::Instant::now();
        let body = json!({"holder": holder, "ttl_s": ttl.as_secs()});
        let mut looked = None::<tokio::time::Instant>;
        loop {
            match self.store.insert(LEASE, &body, Some(ttl)).await {
                Ok(cas) => return Ok(Lease::start(self.store.clone(), body, ttl, cas, progress)),
                Err(StoreError::Exists(_)) if started.elapsed() < wait => {
                    if let Some(p) = &progress
                        && looked.is_none_or(|at| at.elapsed() >= WAITING_REPORTS)
                    {
                        looked = Some(tokio::time::Instant::now());
                        if let Ok(Some(d)) = self.store.get(LEASE).await {
                            relay(p.as_ref(), &d.value);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(StoreError::Exists(_)) => {
                    let by = self
                        .store
                        .get(LEASE)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|d| d.value["holder"].as_str().map(String::from));
                    return Err(CorpusError::Busy(format!(
                        "corpus {} is being written by {}; it did not let go within {} s",
                        self.name,
                        by.unwrap_or_else(|| "another host".into()),
                        wait.as_secs()
                    )));
                }
                Err(e) => return Err(unavailable(&self.name, e)),
            }
        }
    }
}

/// How long a commit waits for the Search index to hold its generation before it gives up
/// (nothing flipped; the next commit keeps what this one wrote).
const INDEX_WAIT: Duration = Duration::from_secs(120);

/// How a relayed report begins.
const RELAYED: &str = "waiting for ";
/// How often a host waiting for the lease reads the holder's progress.
const WAITING_REPORTS: Duration = Duration::from_secs(1);
/// How often the holder writes its progress into the lease (and renews it), at most.
const HOLDER_REPORTS: Duration = Duration::from_secs(2);

/// The holder's progress in lease document `lease`, reported to `to` as a waiting host's own.
fn relay(to: &dyn ProgressLink, lease: &Value) {
    let holder = lease["holder"].as_str().unwrap_or("another host");
    match serde_json::from_value::<LeaseProgress>(lease["progress"].clone()) {
        Ok(p) => to.report(&LeaseProgress { task: format!("{RELAYED}{holder}, {}", p.task), ..p }),
        Err(_) => to.report(&LeaseProgress {
            task: format!("{RELAYED}{holder}, which holds the write lease"),
            done: 0,
            total: 0,
            unit: String::new(),
        }),
    }
}

/// The write lease, renewed every third of its time to live while held, given back when
/// dropped.
pub struct Lease {
    lost: Arc<AtomicBool>,
    cas: Arc<AtomicU64>,
    renew: tokio::task::JoinHandle<()>,
    store: Store,
}

impl Lease {
    fn start(store: Store, mut body: Value, ttl: Duration, cas: u64, progress: Option<Arc<dyn ProgressLink>>) -> Lease {
        let lost = Arc::new(AtomicBool::new(false));
        let cas = Arc::new(AtomicU64::new(cas));
        let (l, c, s) = (lost.clone(), cas.clone(), store.clone());
        // With progress to share, renewed as often as it is worth reading.
        let every = if progress.is_some() { (ttl / 3).min(HOLDER_REPORTS) } else { ttl / 3 };
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // Its own work only: not what it relayed from a holder before it.
                if let Some(latest) =
                    progress.as_ref().and_then(|p| p.latest()).filter(|p| !p.task.starts_with(RELAYED))
                {
                    body["progress"] = serde_json::to_value(latest).unwrap_or(Value::Null);
                }
                match s.replace(LEASE, &body, c.load(Ordering::Acquire), Some(ttl)).await {
                    Ok(next) => c.store(next, Ordering::Release),
                    // Taken over or gone: the holder must not commit.
                    Err(StoreError::CasMismatch(_)) | Err(StoreError::NotFound(_)) => {
                        l.store(true, Ordering::Release);
                        return;
                    }
                    // The cluster did not answer: try again, the lease may still be ours.
                    Err(e) => tracing::warn!(target: "quarry::corpus", "renewing the write lease: {e}"),
                }
            }
        });
        Lease { lost, cas, renew, store }
    }

    fn check(&self, name: &str) -> Result<(), CorpusError> {
        if self.lost.load(Ordering::Acquire) {
            return Err(CorpusError::Busy(format!(
                "corpus {name}: this writer's lease expired (the host was too slow or cut off) and another may hold it; write again"
            )));
        }
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renew.abort();
        if self.lost.load(Ordering::Acquire) {
            return;
        }
        let (store, cas) = (self.store.clone(), self.cas.load(Ordering::Acquire));
        // Given back in the background: the lease expires anyway if this does not get through.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.remove(LEASE, Some(cas)).await;
            });
        }
    }
}

impl CouchbaseCorpus {
    /// Applies `changes` (and `notes`, when given) as the next generation under `lease`, and
    /// returns its number. See the module docs for the steps; on an error nothing is flipped:
    /// readers keep the generation they had, and the next commit clears what this one wrote.
    pub async fn commit(&self, lease: &Lease, changes: Vec<Change>, notes: Option<String>) -> Result<u64, CorpusError> {
        let fail = |e| unavailable(&self.name, e);
        lease.check(&self.name)?;
        let (mut m, cas) = self.manifest().await?;
        let next = m.generation + 1;
        // What a commit that died left behind (or this one's own, on a retry).
        let dead: Attempt = match self.store.get(ATTEMPT).await.map_err(fail)? {
            Some(d) => serde_json::from_value(d.value).unwrap_or_default(),
            None => Attempt::default(),
        };
        let dead = if dead.generation == next { dead } else { Attempt { generation: next, ..Attempt::default() } };

        // The last write of each id wins, as in a local commit.
        let mut upserts: BTreeMap<String, Record> = BTreeMap::new();
        let mut removals: BTreeSet<String> = BTreeSet::new();
        for c in changes {
            match c {
                Change::Upsert(r) => {
                    if r.id.len() > MAX_ID_BYTES || r.id.starts_with("_quarry::") || r.id.contains("@@") {
                        return Err(CorpusError::Invalid(format!(
                            "chunk id {:?}: a Couchbase corpus keeps ids of at most {MAX_ID_BYTES} bytes, without `@@` and not starting with `_quarry::`",
                            quarry_support::text::quoted_prefix(&r.id, 64)
                        )));
                    }
                    rag_core::corpus::check_vector(self.shape, Some(&r.id), &r.vector)?;
                    removals.remove(&r.id);
                    upserts.insert(r.id.clone(), r);
                }
                Change::Remove(id) => {
                    upserts.remove(&id);
                    removals.insert(id);
                }
            }
        }
        let ids: Vec<String> = upserts.keys().chain(removals.iter()).cloned().collect();
        let (keys, moved) = self.keys_at(&m, &ids, m.generation).await?;
        let current = self.store.get_many(&keys).await.map_err(fail)?;
        // Where each touched chunk is kept from `next` on: written as `_quarry::moved::ID` where
        // that is not the id, or was not before.
        let mut moves: Vec<(String, Value)> = Vec::new();
        let mut move_to = |attempt: &mut Attempt, m: &mut Manifest, i: usize, to: &str| {
            let id = &ids[i];
            if to != id || moved[i].is_some() || m.moved.contains_key(id) {
                let k = format!("{MOVED}{id}");
                attempt.written.insert(k.clone());
                moves.push((k, moved_doc(id, to, &keys[i], next)));
            }
            m.moved.remove(id);
        };

        let mut attempt = Attempt { generation: next, ..Attempt::default() };
        let mut writes: Vec<(String, Value)> = Vec::new();
        let mut marks: Vec<(String, Value)> = Vec::new();
        let mut chunks = m.chunks as i64;
        let mut bytes = m.bytes as i64;
        let held = |d: &quarry_couchbase::store::Doc| record(&d.value).map_or(0, |(r, ..)| record_bytes(&r) as i64);
        let mut terms = m.terms as i64;
        let held_terms =
            |d: &quarry_couchbase::store::Doc| record(&d.value).map_or(0, |(r, ..)| text_terms(&r.text) as i64);
        for (i, ((id, key), doc)) in ids.iter().zip(&keys).zip(current).enumerate() {
            let live = doc.as_ref().filter(|d| visible(&d.value, m.generation));
            if let Some(r) = upserts.get(id) {
                let r = Record { vector: self.shape.comparable(r.vector.clone()), ..r.clone() };
                let hash = content_hash(&r);
                match live {
                    Some(d) if d.value["quarry"]["hash"] == hash => {} // unchanged
                    Some(d) => {
                        bytes += record_bytes(&r) as i64 - held(d);
                        terms += text_terms(&r.text) as i64 - held_terms(d);
                        // Other content: a new key, the old version removed at the flip.
                        let moved = format!("{id}@@{next}");
                        let mut old = d.value.clone();
                        old["quarry"]["until"] = json!(next);
                        marks.push((key.clone(), old));
                        attempt.marked.insert(key.clone());
                        move_to(&mut attempt, &mut m, i, &moved);
                        attempt.written.insert(moved.clone());
                        writes.push((moved, document(&r, next, &hash)));
                    }
                    None => {
                        chunks += 1;
                        bytes += record_bytes(&r) as i64;
                        terms += text_terms(&r.text) as i64;
                        let pending = doc.as_ref().is_some_and(|d| d.value["quarry"]["gen"] == next);
                        // A removed version still there (readers one generation behind may
                        // read it until the next commit deletes it) keeps its key.
                        let key = if doc.is_none() || pending { key.clone() } else { format!("{id}@@{next}") };
                        if key != keys[i] {
                            move_to(&mut attempt, &mut m, i, &key);
                        }
                        attempt.written.insert(key.clone());
                        // A dead commit's copy of the same chunk is kept: it resumes from there.
                        let resumed = pending
                            && dead.written.contains(&key)
                            && doc.as_ref().is_some_and(|d| d.value["quarry"]["hash"] == hash);
                        if !resumed {
                            writes.push((key, document(&r, next, &hash)));
                        }
                    }
                }
            } else if let Some(d) = live {
                chunks -= 1;
                bytes -= held(d);
                terms -= held_terms(d);
                // Readers of the new generation find it marked removed where it was: its
                // `_quarry::moved::ID` stays as it is. (An earlier Quarry's map entry can go:
                // read at its id, a removed chunk is not there either.)
                m.moved.remove(id);
                let mut old = d.value.clone();
                old["quarry"]["until"] = json!(next);
                marks.push((key.clone(), old));
                attempt.marked.insert(key.clone());
            }
        }
        let bytes = bytes.max(0) as u64 + notes.as_ref().map_or(m.notes.len(), String::len) as u64;
        if bytes > self.max_bytes {
            return Err(CorpusError::Invalid(format!(
                "corpus {} would hold {bytes} bytes after this commit, over its limit of {}; raise max_bytes in its [corpora.NAME] section, or remove chunks",
                self.name, self.max_bytes
            )));
        }
        // First what will be touched, then the touching: a commit that dies here is cleared by
        // the next.
        let mut wal = attempt.clone();
        wal.written.extend(dead.written.iter().cloned());
        wal.marked.extend(dead.marked.iter().cloned());
        self.store.upsert(ATTEMPT, &serde_json::to_value(&wal).expect("plain data"), None).await.map_err(fail)?;
        lease.check(&self.name)?;
        self.store.upsert_many(&writes).await.map_err(fail)?;
        self.store.upsert_many(&moves).await.map_err(fail)?;
        self.store.upsert_many(&marks).await.map_err(fail)?;
        // What the dead commit touched and this one did not: deleted, or unmarked.
        let leftovers: Vec<String> = dead.written.difference(&attempt.written).cloned().collect();
        self.clear_written(&leftovers, next).await?;
        let unmark: Vec<String> = dead.marked.difference(&attempt.marked).cloned().collect();
        self.clear_marks(&unmark, next).await?;
        // The Search service indexes a write some time after the data node took it: the flip
        // waits until the index holds the whole generation, or readers of it would miss some.
        let chunks_written = attempt.written.iter().filter(|k| !k.starts_with(MOVED)).count() as u64;
        self.await_indexed(lease, next, chunks_written, attempt.marked.len() as u64).await?;

        // The flip: readers see all of it from here.
        lease.check(&self.name)?;
        let deleting = std::mem::replace(&mut m.retired, attempt.marked.iter().cloned().collect());
        m.generation = next;
        m.chunks = chunks.max(0) as u64;
        m.terms = terms.max(0) as u64;
        m.bytes = bytes - notes.as_ref().map_or(m.notes.len(), String::len) as u64;
        if let Some(n) = notes {
            m.notes = n;
        }
        match self.store.replace(MANIFEST, &serde_json::to_value(&m).expect("plain data"), cas, None).await {
            Ok(_) => {}
            Err(StoreError::CasMismatch(_)) => {
                return Err(CorpusError::Busy(format!(
                    "corpus {}: another writer committed while this one held the lease (it expired); write again",
                    self.name
                )));
            }
            Err(e) => return Err(fail(e)),
        }
        // The chunks the commit before removed: no reader is on a generation that has them now.
        self.store.remove_many(&deleting).await.map_err(fail)?;
        match self.store.remove(ATTEMPT, None).await {
            Ok(()) | Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(fail(e)),
        }
        Ok(next)
    }

    /// Waits until the Search index holds generation `g` whole: `written` chunks of it, and
    /// `marked` chunks it removes marked so; fails as unavailable after [`INDEX_WAIT`].
    async fn await_indexed(&self, lease: &Lease, g: u64, written: u64, marked: u64) -> Result<(), CorpusError> {
        let started = tokio::time::Instant::now();
        let count = |field: &str| {
            let at_g = NumericRangeQuery::new()
                .field(field)
                .min(g as f32)
                .inclusive_min(g as f32, true)
                .max(g as f32)
                .inclusive_max(g as f32, true);
            let request = SearchRequest::with_search_query(Query::NumericRange(at_g));
            self.store.search_hits(&self.index, request, SearchOptions::new().limit(1))
        };
        loop {
            lease.check(&self.name)?;
            let fail = |e| unavailable(&self.name, e);
            let (new, gone) =
                (count("quarry.gen").await.map_err(fail)?.total, count("quarry.until").await.map_err(fail)?.total);
            if new >= written && gone >= marked {
                return Ok(());
            }
            if started.elapsed() >= INDEX_WAIT {
                return Err(CorpusError::Unavailable(format!(
                    "corpus {}: after {} s the Search index {:?} holds {new} of the {written} chunks of generation {g} and {gone} of its {marked} removals; nothing was flipped: write again (what was written is kept)",
                    self.name,
                    INDEX_WAIT.as_secs(),
                    self.index
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes what a dead commit of generation `next` wrote and this one does not keep; puts
    /// back the `_quarry::moved::ID` it wrote (the key before it).
    async fn clear_written(&self, keys: &[String], next: u64) -> Result<(), CorpusError> {
        let fail = |e| unavailable(&self.name, e);
        let docs = self.store.get_many(keys).await.map_err(fail)?;
        let (mut stale, mut back) = (Vec::new(), Vec::new());
        for (k, d) in keys.iter().zip(docs) {
            let Some(d) = d else { continue };
            if let Some(id) = k.strip_prefix(MOVED) {
                let m = &d.value["moved"];
                if m["gen"] == next {
                    match m["previous"].as_str() {
                        Some(p) => back.push((k.clone(), moved_doc(id, p, p, 0))),
                        None => stale.push(k.clone()),
                    }
                }
            } else if d.value["quarry"]["gen"] == next {
                stale.push(k.clone());
            }
        }
        self.store.upsert_many(&back).await.map_err(fail)?;
        self.store.remove_many(&stale).await.map_err(fail)
    }

    /// Takes a dead commit's removal marks (`until = next`) off the chunks this one keeps.
    async fn clear_marks(&self, keys: &[String], next: u64) -> Result<(), CorpusError> {
        let docs = self.store.get_many(keys).await.map_err(|e| unavailable(&self.name, e))?;
        let unmarked: Vec<(String, Value)> = keys
            .iter()
            .zip(docs)
            .filter_map(|(k, d)| {
                let mut d = d?.value;
                (d["quarry"]["until"] == next).then(|| {
                    if let Some(q) = d["quarry"].as_object_mut() {
                        q.remove("until");
                    }
                    (k.clone(), d)
                })
            })
            .collect();
        self.store.upsert_many(&unmarked).await.map_err(|e| unavailable(&self.name, e))
    }
}
