//! Reads: a [`Snapshot`] is a connection in a read transaction, so every search it answers
//! sees one committed generation, whatever is committed meanwhile (WAL keeps it).
//!
//! - kNN scores exactly: the vectors of the chunks a filter lets through, fetched by their
//!   number. When the filter lets most through or there is none, the candidates come from the
//!   nearest-neighbour graph ([`crate::ann`]) where one is built, and the chunks committed after
//!   it (or all, without one) are scanned in order; the scan stops at its call's deadline.
//! - BM25 is rag-core's formula over counts from the store: each query term's postings and
//!   document frequency from FTS5 (`postings_at`, `postings_row`), each chunk's length from
//!   FTS5's token counts (`postings_docsize`), the corpus's from `meta`. A filter that leaves
//!   few chunks is scored from those chunks' own terms, so its cost is theirs, not the
//!   corpus's.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};

use rag_core::bm25::{mean_length, term_score, terms};
use rag_core::corpus::{Filter, Found, Info, Match, Record, Shape};

use crate::ann::Ann;
use crate::error::CorpusError;
use crate::store::{self, Totals, read_vector};

/// What a corpus's readers share: connections kept for the next snapshot, and the document
/// frequencies of one generation's terms.
pub type Pool = Arc<Readers>;

/// See [`Pool`].
#[derive(Default)]
pub struct Readers {
    conns: Mutex<Vec<Connection>>,
    /// `(epoch, generation)` and its terms' document frequencies. FTS5 counts a term's chunks
    /// by reading its whole doclist (20 ms for a word in most of a million chunks); a generation
    /// never changes, so each count is read once per generation.
    frequencies: Mutex<((u64, u64), HashMap<String, u64>)>,
}
/// The most document frequencies kept before the cache starts again.
const MAX_FREQUENCIES: usize = 100_000;
/// Connections a pool keeps; more are opened when more readers come at once, and closed after.
const KEEP: usize = 8;
/// A filter that leaves at most this many chunks is scored from their own texts.
const FEW: usize = 2_000;
/// A kNN scan asks whether to stop after this many vectors (a few milliseconds of them).
const STOP_EVERY: usize = 4_096;

/// One committed generation, readable until dropped; see the module docs.
pub struct Snapshot {
    conn: Option<Connection>,
    pool: Pool,
    dir: std::path::PathBuf,
    shape: Shape,
    totals: Totals,
    graph: Option<Arc<Ann>>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take()
            && c.execute_batch("ROLLBACK").is_ok()
        {
            let mut pool = self.pool.conns.lock();
            if pool.len() < KEEP {
                pool.push(c);
            }
        }
    }
}

type Result<T> = std::result::Result<T, CorpusError>;

impl Snapshot {
    /// The generation committed now, from a connection of `pool` (or a new one).
    pub fn take(dir: &std::path::Path, pool: &Pool, shape: Shape) -> Result<Snapshot> {
        let err = |e| store::error(dir, e);
        let conn = match pool.conns.lock().pop() {
            Some(c) => c,
            None => store::connect(&store::path(dir)).map_err(err)?,
        };
        conn.execute_batch("BEGIN").map_err(err)?;
        // The first read fixes what the transaction sees.
        let totals = store::totals(&conn).map_err(err)?;
        Ok(Snapshot { conn: Some(conn), pool: pool.clone(), dir: dir.to_path_buf(), shape, totals, graph: None })
    }

    /// Searches it with `graph` (built from this database, [`Ann::epoch`]) where it serves.
    pub(crate) fn with_graph(mut self, graph: Option<Arc<Ann>>) -> Snapshot {
        self.graph = graph.filter(|g| g.epoch == self.totals.epoch);
        self
    }

    /// The greatest chunk number the nearest-neighbour graph it searches with was built from
    /// (chunks after it are scanned); `None` without a graph.
    pub fn graph_upto(&self) -> Option<i64> {
        self.graph.as_ref().map(|g| g.upto)
    }

    /// Its database's epoch ([`Totals::epoch`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.totals.epoch
    }

    fn c(&self) -> &Connection {
        self.conn.as_ref().expect("held until drop")
    }

    fn err(&self, e: rusqlite::Error) -> CorpusError {
        store::error(&self.dir, e)
    }

    /// Its generation number.
    pub fn number(&self) -> u64 {
        self.totals.generation
    }

    /// Chunks in it.
    pub fn len(&self) -> u64 {
        self.totals.chunks
    }

    /// Whether it holds no chunk.
    pub fn is_empty(&self) -> bool {
        self.totals.chunks == 0
    }

    /// The corpus's state.
    pub fn info(&self) -> Result<Info> {
        let notes = store::notes(self.c()).map_err(|e| self.err(e))?;
        Ok(Info { generation: self.totals.generation, chunks: self.totals.chunks, notes })
    }

    /// The numbers of the chunks `filter` lets through, ascending; `None` for every chunk.
    fn allowed(&self, filter: &Filter) -> Result<Option<Vec<i64>>> {
        if filter.is_empty() {
            return Ok(None);
        }
        let mut out: Option<Vec<i64>> = None;
        let c = self.c();
        for clause in &filter.0 {
            let mut hit = Vec::new();
            for v in &clause.values {
                let rows = match clause.how {
                    Match::Exact => {
                        let mut s = c
                            .prepare_cached("SELECT n FROM fields WHERE field = ?1 AND value = ?2")
                            .map_err(|e| self.err(e))?;
                        s.query_map(params![clause.field, v], |r| r.get::<_, i64>(0))
                            .and_then(|r| r.collect::<rusqlite::Result<Vec<i64>>>())
                    }
                    Match::Prefix => {
                        // Every value that starts with `v` sorts at or after it and before `v`
                        // followed by the greatest character.
                        let mut s = c
                            .prepare_cached(
                                "SELECT n FROM fields WHERE field = ?1 AND value >= ?2 AND value < ?2 || char(1114111)",
                            )
                            .map_err(|e| self.err(e))?;
                        s.query_map(params![clause.field, v], |r| r.get::<_, i64>(0))
                            .and_then(|r| r.collect::<rusqlite::Result<Vec<i64>>>())
                    }
                };
                hit.extend(rows.map_err(|e| self.err(e))?);
            }
            hit.sort_unstable();
            hit.dedup();
            out = Some(match out {
                None => hit,
                Some(prev) => prev.into_iter().filter(|n| hit.binary_search(n).is_ok()).collect(),
            });
        }
        Ok(out)
    }

    fn vector(&self, n: i64) -> Result<Option<Vec<f32>>> {
        let c = self.c();
        let mut s = c.prepare_cached("SELECT v FROM vectors WHERE n = ?1").map_err(|e| self.err(e))?;
        let blob: Option<Vec<u8>> = s.query_row([n], |r| r.get(0)).optional().map_err(|e| self.err(e))?;
        Ok(blob.map(|b| {
            let mut v = Vec::new();
            read_vector(&b, &mut v);
            v
        }))
    }

    fn ids(&self, ns: &[i64]) -> Result<Vec<String>> {
        let c = self.c();
        let mut s = c.prepare_cached("SELECT id FROM chunks WHERE n = ?1").map_err(|e| self.err(e))?;
        ns.iter().map(|&n| s.query_row([n], |r| r.get(0)).map_err(|e| self.err(e))).collect()
    }

    /// [`Snapshot::nearest_until`] with no deadline.
    pub fn nearest(&self, vector: &[f32], k: usize, filter: &Filter) -> Result<Vec<Found>> {
        self.nearest_until(vector, k, filter, &|| false)
    }

    /// The `k` chunks whose vectors are nearest `vector` among those `filter` lets through,
    /// best first, ties in the order the chunks were added; given up with
    /// [`CorpusError::Stopped`] as soon as `stop` says so (asked every [`STOP_EVERY`] vectors).
    pub fn nearest_until(
        &self,
        vector: &[f32],
        k: usize,
        filter: &Filter,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Found>> {
        let query = self.shape.query(vector)?;
        let allowed = self.allowed(filter)?;
        let mut scored: Vec<(i64, f32)> = Vec::new();
        let mut v = Vec::with_capacity(self.shape.dimension);
        let c = self.c();
        match &allowed {
            // Few: fetched one by one.
            Some(ns) if ns.len().saturating_mul(4) < self.totals.chunks as usize => {
                self.score_each(&query, ns, stop, &mut scored)?;
            }
            // Most or all: the graph's candidates up to its `upto` (scored from their stored
            // vectors), then a scan in order of the chunks after it; without a graph, a scan
            // of all.
            _ => {
                let mut after = 0;
                if let Some(g) = &self.graph {
                    match g.candidates(&query, k.saturating_mul(4).max(40), allowed.as_deref()) {
                        Ok(ns) => {
                            // A candidate since removed is no longer stored: not scored.
                            self.score_each(&query, &ns, stop, &mut scored)?;
                            after = g.upto;
                        }
                        Err(e) => tracing::warn!(target: "quarry::corpus", "the graph failed ({e}); scanning exactly"),
                    }
                }
                // After the graph, and the chunks up to it whose vectors changed since it was
                // built (the graph holds their old vectors). CROSS JOIN: the few marks drive the
                // join, not a walk of every vector.
                let mut s = c
                    .prepare_cached(
                        "SELECT n, v FROM vectors WHERE n > ?1 UNION ALL \
                         SELECT r.n, v.v FROM restated AS r CROSS JOIN vectors AS v ON v.n = r.n WHERE r.n <= ?1",
                    )
                    .map_err(|e| self.err(e))?;
                let mut rows = s.query([after]).map_err(|e| self.err(e))?;
                let mut seen = 0usize;
                while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                    seen += 1;
                    if seen.is_multiple_of(STOP_EVERY) && stop() {
                        return Err(CorpusError::Stopped);
                    }
                    let n: i64 = r.get(0).map_err(|e| self.err(e))?;
                    if allowed.as_ref().is_some_and(|a| a.binary_search(&n).is_err()) {
                        continue;
                    }
                    read_vector(r.get_ref(1).and_then(|b| Ok(b.as_blob()?)).map_err(|e| self.err(e))?, &mut v);
                    scored.push((n, rag_core::score::dot(&query, &v)));
                }
            }
        }
        if self.graph.is_some() {
            // A changed chunk may be both the graph's candidate and scanned: one score.
            scored.sort_unstable_by_key(|s| s.0);
            scored.dedup_by_key(|s| s.0);
        }
        let best = rag_core::score::top_k(scored, k);
        let ids = self.ids(&best.iter().map(|b| b.0).collect::<Vec<_>>())?;
        Ok(ids.into_iter().zip(best).map(|(id, (_, score))| Found { id, score, similarity: None }).collect())
    }

    /// Scores the stored vectors of chunks `ns` against `query` into `scored` (a number no
    /// longer stored is passed over), fetched one by one; stops when `stop` says so.
    fn score_each(
        &self,
        query: &[f32],
        ns: &[i64],
        stop: &dyn Fn() -> bool,
        scored: &mut Vec<(i64, f32)>,
    ) -> Result<()> {
        let mut s = self.c().prepare_cached("SELECT v FROM vectors WHERE n = ?1").map_err(|e| self.err(e))?;
        let mut v = Vec::with_capacity(self.shape.dimension);
        for (i, &n) in ns.iter().enumerate() {
            if i.is_multiple_of(STOP_EVERY) && stop() {
                return Err(CorpusError::Stopped);
            }
            let found = s
                .query_row([n], |r| {
                    read_vector(r.get_ref(0)?.as_blob()?, &mut v);
                    Ok(())
                })
                .optional()
                .map_err(|e| self.err(e))?;
            if found.is_some() {
                scored.push((n, rag_core::score::dot(query, &v)));
            }
        }
        Ok(())
    }

    /// The chunks holding `term` (as stored) and how often each does, ascending.
    fn postings(&self, term: &str) -> Result<Vec<(i64, u32)>> {
        let c = self.c();
        let mut s = c.prepare_cached("SELECT doc FROM postings_at WHERE term = ?1").map_err(|e| self.err(e))?;
        let mut rows = s.query([term]).map_err(|e| self.err(e))?;
        let mut out: Vec<(i64, u32)> = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let n: i64 = r.get(0).map_err(|e| self.err(e))?;
            match out.last_mut() {
                Some((m, f)) if *m == n => *f += 1,
                _ => out.push((n, 1)),
            }
        }
        out.sort_unstable_by_key(|p| p.0);
        Ok(out)
    }

    /// How many chunks hold `term` (as stored): counted once per generation ([`Readers`]).
    fn document_frequency(&self, term: &str) -> Result<u64> {
        let at = (self.totals.epoch, self.totals.generation);
        {
            let cache = self.pool.frequencies.lock();
            if cache.0 == at
                && let Some(&df) = cache.1.get(term)
            {
                return Ok(df);
            }
        }
        let df = self.count_holding(term)?;
        let mut cache = self.pool.frequencies.lock();
        if cache.0 != at || cache.1.len() >= MAX_FREQUENCIES {
            // A snapshot of an older generation does not take the cache from a newer one.
            if cache.0 > at && cache.0.0 == at.0 {
                return Ok(df);
            }
            *cache = (at, HashMap::new());
        }
        cache.1.insert(term.to_string(), df);
        Ok(df)
    }

    fn count_holding(&self, term: &str) -> Result<u64> {
        let c = self.c();
        let mut s = c.prepare_cached("SELECT doc FROM postings_row WHERE term = ?1").map_err(|e| self.err(e))?;
        let df: Option<i64> = s.query_row([term], |r| r.get(0)).optional().map_err(|e| self.err(e))?;
        Ok(df.unwrap_or(0).max(0) as u64)
    }

    /// [`Snapshot::keyword_until`] with no deadline.
    pub fn keyword(&self, query: &str, similar_to: Option<&[f32]>, k: usize, filter: &Filter) -> Result<Vec<Found>> {
        self.keyword_until(query, similar_to, k, filter, &|| false)
    }

    /// The `k` best chunks for `query` by BM25 among those `filter` lets through, each with its
    /// similarity to `similar_to` when given; given up with [`CorpusError::Stopped`] as soon
    /// as `stop` says so (asked before each query term).
    pub fn keyword_until(
        &self,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Found>> {
        let similar_to = similar_to.map(|v| self.shape.query(v)).transpose()?;
        if self.totals.chunks == 0 {
            return Ok(Vec::new());
        }
        let n = self.totals.chunks as f32;
        let avg = mean_length(self.totals.terms, self.totals.chunks);
        let mut q = terms(query);
        q.sort();
        q.dedup();
        let allowed = self.allowed(filter)?;
        let mut scores: HashMap<i64, f32> = HashMap::new();
        match &allowed {
            Some(ns) if ns.len() <= FEW => {
                // Each allowed chunk's own terms: its length and term counts.
                let c = self.c();
                let mut s = c.prepare_cached("SELECT text FROM chunks WHERE n = ?1").map_err(|e| self.err(e))?;
                let mut counted: Vec<(i64, usize, HashMap<String, u32>)> = Vec::with_capacity(ns.len());
                for &m in ns {
                    let text: Option<String> = s.query_row([m], |r| r.get(0)).optional().map_err(|e| self.err(e))?;
                    let Some(text) = text else { continue };
                    let ts = terms(&text);
                    let mut tf: HashMap<String, u32> = HashMap::new();
                    for t in &ts {
                        if q.binary_search(t).is_ok() {
                            *tf.entry(t.clone()).or_insert(0) += 1;
                        }
                    }
                    counted.push((m, ts.len(), tf));
                }
                for t in &q {
                    if stop() {
                        return Err(CorpusError::Stopped);
                    }
                    if !counted.iter().any(|(_, _, tf)| tf.contains_key(t)) {
                        continue;
                    }
                    let df = self.document_frequency(&store::token(t))? as f32;
                    for (m, len, tf) in &counted {
                        if let Some(&f) = tf.get(t) {
                            *scores.entry(*m).or_insert(0.0) += term_score(f as f32, *len as f32, df, n, avg);
                        }
                    }
                }
            }
            _ => {
                let mut lengths: HashMap<i64, f32> = HashMap::new();
                let c = self.c();
                // FTS5's own table of token counts: rows of a few bytes, so a posting's length
                // is a read from a page of hundreds, where `chunks` would read its text's.
                let mut s =
                    c.prepare_cached("SELECT sz FROM postings_docsize WHERE id = ?1").map_err(|e| self.err(e))?;
                for t in &q {
                    if stop() {
                        return Err(CorpusError::Stopped);
                    }
                    let postings = self.postings(&store::token(t))?;
                    let df = postings.len() as f32;
                    for (m, f) in postings {
                        if allowed.as_ref().is_some_and(|a| a.binary_search(&m).is_err()) {
                            continue;
                        }
                        let len = match lengths.get(&m) {
                            Some(&l) => l,
                            None => {
                                let sz: Vec<u8> = s.query_row([m], |r| r.get(0)).map_err(|e| self.err(e))?;
                                let l = varint(&sz) as f32;
                                lengths.insert(m, l);
                                l
                            }
                        };
                        *scores.entry(m).or_insert(0.0) += term_score(f as f32, len, df, n, avg);
                    }
                }
            }
        }
        let best = rag_core::score::top_k(scores.into_iter().filter(|&(_, s)| s > 0.0).collect(), k);
        let ids = self.ids(&best.iter().map(|b| b.0).collect::<Vec<_>>())?;
        let mut out = Vec::with_capacity(best.len());
        for (id, (m, score)) in ids.into_iter().zip(best) {
            let similarity = match &similar_to {
                Some(q) => self.vector(m)?.map(|v| rag_core::score::dot(q, &v)),
                None => None,
            };
            out.push(Found { id, score, similarity });
        }
        Ok(out)
    }

    /// The chunks of `ids`, in order (`None` for an id it does not hold).
    pub fn get(&self, ids: &[String]) -> Result<Vec<Option<Record>>> {
        self.records(ids, true)
    }

    /// As [`Snapshot::get`], each vector left empty and unread.
    pub fn get_without_vectors(&self, ids: &[String]) -> Result<Vec<Option<Record>>> {
        self.records(ids, false)
    }

    fn records(&self, ids: &[String], vectors: bool) -> Result<Vec<Option<Record>>> {
        let c = self.c();
        let mut s =
            c.prepare_cached("SELECT n, text, metadata, fields FROM chunks WHERE id = ?1").map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let row = s
                .query_row([id], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get::<_, String>(3)?))
                })
                .optional()
                .map_err(|e| self.err(e))?;
            out.push(match row {
                None => None,
                Some((n, text, metadata, fields)) => Some(Record {
                    id: id.clone(),
                    text,
                    metadata,
                    fields: serde_json::from_str(&fields).unwrap_or_default(),
                    vector: if vectors { self.vector(n)?.unwrap_or_default() } else { Vec::new() },
                }),
            });
        }
        Ok(out)
    }

    /// Ids of the chunks `filter` lets through, from the `offset`th on, at most `limit`, in the
    /// order they were first added.
    pub fn list(&self, filter: &Filter, offset: usize, limit: usize) -> Result<Vec<String>> {
        match self.allowed(filter)? {
            Some(ns) => {
                let page: Vec<i64> = ns.into_iter().skip(offset).take(limit).collect();
                self.ids(&page)
            }
            None => {
                let c = self.c();
                let mut s =
                    c.prepare_cached("SELECT id FROM chunks ORDER BY n LIMIT ?1 OFFSET ?2").map_err(|e| self.err(e))?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let offset = i64::try_from(offset).unwrap_or(i64::MAX);
                s.query_map(params![limit, offset], |r| r.get(0)).and_then(|r| r.collect()).map_err(|e| self.err(e))
            }
        }
    }
}

/// The first of SQLite's varints in `bytes` (FTS5 keeps a row's token count per column so):
/// big-endian groups of 7 bits, the high bit saying another follows, the ninth byte whole.
fn varint(bytes: &[u8]) -> u64 {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        if i == 8 {
            return (v << 8) | u64::from(b);
        }
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn varints_read_as_sqlite_writes_them() {
        assert_eq!(super::varint(&[0x05]), 5);
        assert_eq!(super::varint(&[0x81, 0x00]), 128);
        assert_eq!(super::varint(&[0x81, 0x80, 0x01]), 16_385);
        assert_eq!(super::varint(&[]), 0);
    }
}
