//! The corpus workload on two embedded engines, side by side:
//! - sqlite: rusqlite (bundled) in WAL mode, synchronous=FULL; chunks with their vectors as
//!   blobs, a contentless FTS5 table over the texts and a document tag (its own bm25; a filter
//!   is a term of the tag column), kNN by exact scan (SQLite has no ANN);
//! - lmdb: heed + hannoy (HNSW on LMDB, as Meilisearch), texts, per-document id bitmaps, and
//!   postings keyed (term, chunk) with df per term, scored with BM25 here.
//! Usage: engine-probe ENGINE DIR N PHASE: ENGINE sqlite or lmdb; PHASE build (N chunks, 100
//! documents a commit), add (ten documents, one a commit), query, addloop and check (the kill -9
//! test, sqlite), idist (instant-distance over the same N vectors). NO_POSTINGS=1 / NO_GRAPH=1
//! leave the LMDB postings or HNSW build out of an add, to split its cost.
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use roaring::RoaringBitmap;

const DIM: usize = 384;
const PER_DOC: usize = 12;
const WORDS: usize = 250;
const VOCAB: usize = 20_000;

struct Chunk {
    id: u32,
    doc: u32,
    text: String,
    vec: Vec<f32>,
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
}

/// Document `d`'s chunks: vectors around a centre of their own (as a document's embeddings
/// are), texts of Zipf-ish words and one word of the document's own.
fn doc_vecs(d: u32) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(d as u64);
    let mut centre: Vec<f32> = (0..DIM).map(|_| rng.random::<f32>() - 0.5).collect();
    normalise(&mut centre);
    (0..PER_DOC)
        .map(|_| {
            let mut v: Vec<f32> = centre.iter().map(|c| c + 0.9 * (rng.random::<f32>() - 0.5) / 4.0).collect();
            normalise(&mut v);
            v
        })
        .collect()
}

fn doc(d: u32) -> Vec<Chunk> {
    let mut rng = StdRng::seed_from_u64(d as u64 | 1 << 40);
    doc_vecs(d)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let mut text = format!("doc{d} ");
            for _ in 0..WORDS {
                let u: f64 = rng.random::<f64>();
                let w = ((VOCAB as f64).powf(u) as usize).min(VOCAB - 1);
                text.push_str(&format!("w{w} "));
            }
            Chunk { id: d * PER_DOC as u32 + i as u32, doc: d, text, vec: v }
        })
        .collect()
}

fn terms(text: &str) -> HashMap<&str, u32> {
    let mut tf = HashMap::new();
    for t in text.split_whitespace() {
        *tf.entry(t).or_insert(0) += 1;
    }
    tf
}

fn io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap();
    let get =
        |k: &str| s.lines().find(|l| l.starts_with(k)).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    (get("wchar:"), get("write_bytes:"))
}

fn rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 =
        s.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

trait Engine {
    fn add(&mut self, chunks: &[Chunk]);
    fn knn(&self, q: &[f32], k: usize, doc: Option<u32>) -> Vec<u32>;
    fn bm25(&self, q: &[&str], k: usize, doc: Option<u32>) -> Vec<u32>;
}

// ---------------- SQLite ----------------
struct Sqlite {
    db: rusqlite::Connection,
}

impl Sqlite {
    fn open(dir: &Path) -> Sqlite {
        std::fs::create_dir_all(dir).unwrap();
        let db = rusqlite::Connection::open(dir.join("corpus.sqlite")).unwrap();
        db.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS chunks(id INTEGER PRIMARY KEY, doc INTEGER NOT NULL, text TEXT NOT NULL, meta TEXT NOT NULL, vec BLOB NOT NULL);
             CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc);
             CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(text, tag, content='');",
        )
        .unwrap();
        Sqlite { db }
    }
}

fn blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn dot_blob(q: &[f32], b: &[u8]) -> f32 {
    b.chunks_exact(4).zip(q).map(|(c, x)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * x).sum()
}

fn top(mut scored: Vec<(u32, f32)>, k: usize) -> Vec<u32> {
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.into_iter().take(k).map(|s| s.0).collect()
}

impl Engine for Sqlite {
    fn add(&mut self, chunks: &[Chunk]) {
        let tx = self.db.transaction().unwrap();
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO chunks(id, doc, text, meta, vec) VALUES (?1, ?2, ?3, '{}', ?4)")
                .unwrap();
            let mut fts = tx.prepare_cached("INSERT INTO fts(rowid, text, tag) VALUES (?1, ?2, ?3)").unwrap();
            for c in chunks {
                ins.execute(rusqlite::params![c.id, c.doc, c.text, blob(&c.vec)]).unwrap();
                fts.execute(rusqlite::params![c.id, c.text, format!("d{}", c.doc)]).unwrap();
            }
        }
        tx.commit().unwrap();
    }

    fn knn(&self, q: &[f32], k: usize, doc: Option<u32>) -> Vec<u32> {
        let mut scored = Vec::new();
        let mut push = |r: &rusqlite::Row| -> rusqlite::Result<()> {
            let id: u32 = r.get(0)?;
            let b = r.get_ref(1)?.as_blob()?;
            scored.push((id, dot_blob(q, b)));
            Ok(())
        };
        match doc {
            Some(d) => {
                let mut s = self.db.prepare_cached("SELECT id, vec FROM chunks WHERE doc = ?1").unwrap();
                let mut rows = s.query([d]).unwrap();
                while let Some(r) = rows.next().unwrap() {
                    push(r).unwrap();
                }
            }
            None => {
                let mut s = self.db.prepare_cached("SELECT id, vec FROM chunks").unwrap();
                let mut rows = s.query([]).unwrap();
                while let Some(r) = rows.next().unwrap() {
                    push(r).unwrap();
                }
            }
        }
        top(scored, k)
    }

    fn bm25(&self, q: &[&str], k: usize, doc: Option<u32>) -> Vec<u32> {
        let m = q.join(" OR ");
        let ids: Vec<u32> = match doc {
            Some(d) => {
                // The filter as a term of its own column: FTS5 intersects the posting lists.
                let m = format!("tag:d{d} AND text:({m})");
                let mut s = self
                    .db
                    .prepare_cached("SELECT rowid FROM fts WHERE fts MATCH ?1 ORDER BY bm25(fts) LIMIT ?2")
                    .unwrap();
                s.query_map(rusqlite::params![m, k as i64], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
            }
            None => {
                let mut s = self
                    .db
                    .prepare_cached("SELECT rowid FROM fts WHERE fts MATCH ?1 ORDER BY bm25(fts) LIMIT ?2")
                    .unwrap();
                let m = format!("text:({m})");
                s.query_map(rusqlite::params![m, k as i64], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
            }
        };
        ids
    }
}

// ---------------- LMDB: heed + hannoy ----------------
use heed::byteorder::BE;
use heed::types::{Bytes, Str, U32};

struct Lmdb {
    env: &'static heed::Env,
    vectors: hannoy::Database<'static, hannoy::distances::Cosine>,
    texts: heed::Database<'static, U32<BE>, Str>,
    docs: heed::Database<'static, U32<BE>, Bytes>,
    postings: heed::Database<'static, Bytes, U32<BE>>,
    df: heed::Database<'static, Str, U32<BE>>,
    lens: heed::Database<'static, U32<BE>, U32<BE>>,
}

impl Lmdb {
    fn open(dir: &Path) -> Lmdb {
        std::fs::create_dir_all(dir).unwrap();
        // One environment per process (LMDB's rule): the probe's phases are processes of their own.
        let env: &'static heed::Env = Box::leak(Box::new(
            unsafe { heed::EnvOpenOptions::new().map_size(64 << 30).max_dbs(8).open(dir) }.unwrap(),
        ));
        let w = env.write_txn().unwrap();
        let (vectors, texts, docs, postings, df, lens) = env
            .create_databases_and_commit(w, |o, w| -> heed::Result<_> {
                Ok(heed::CommitOrAbort::<_, ()>::Commit((
                    o.create_database(w, Some("vectors"))?,
                    o.create_database(w, Some("texts"))?,
                    o.create_database(w, Some("docs"))?,
                    o.create_database(w, Some("postings"))?,
                    o.create_database(w, Some("df"))?,
                    o.create_database(w, Some("lens"))?,
                )))
            })
            .unwrap()
            .unwrap_commit();
        Lmdb { env, vectors, texts, docs, postings, df, lens }
    }

    fn posting_key(term: &str, id: u32) -> Vec<u8> {
        let mut k = term.as_bytes().to_vec();
        k.push(0);
        k.extend(id.to_be_bytes());
        k
    }
}

impl Engine for Lmdb {
    fn add(&mut self, chunks: &[Chunk]) {
        let mut w = self.env.write_txn().unwrap();
        let writer = hannoy::Writer::new(self.vectors, 0, DIM);
        let mut by_doc: HashMap<u32, RoaringBitmap> = HashMap::new();
        for c in chunks {
            writer.add_item(&mut w, c.id, &c.vec).unwrap();
            self.texts.put(&mut w, &c.id, &c.text).unwrap();
            by_doc.entry(c.doc).or_default().insert(c.id);
            if std::env::var_os("NO_POSTINGS").is_some() {
                continue;
            }
            let tf = terms(&c.text);
            self.lens.put(&mut w, &c.id, &(c.text.split_whitespace().count() as u32)).unwrap();
            for (t, n) in tf {
                self.postings.put(&mut w, &Self::posting_key(t, c.id), &n).unwrap();
                let df = self.df.get(&w, t).unwrap().unwrap_or(0);
                self.df.put(&mut w, t, &(df + 1)).unwrap();
            }
        }
        for (d, ids) in by_doc {
            let mut bytes = Vec::new();
            ids.serialize_into(&mut bytes).unwrap();
            self.docs.put(&mut w, &d, &bytes).unwrap();
        }
        let mut rng = StdRng::seed_from_u64(7);
        if std::env::var_os("NO_GRAPH").is_none() {
            writer.builder(&mut rng).ef_construction(100).build::<16, 32>(&mut w).unwrap();
        }
        w.commit().unwrap();
    }

    fn knn(&self, q: &[f32], k: usize, doc: Option<u32>) -> Vec<u32> {
        let r = self.env.read_txn().unwrap();
        let reader = hannoy::Reader::<hannoy::distances::Cosine>::open(&r, 0, self.vectors).unwrap();
        let filter = doc.map(|d| RoaringBitmap::deserialize_from(self.docs.get(&r, &d).unwrap().unwrap()).unwrap());
        let mut nns = reader.nns(k);
        nns.ef_search(EF.with(|e| *e.borrow()));
        if let Some(f) = &filter {
            nns.candidates(f);
        }
        nns.by_vector(&r, q).unwrap().nns.into_iter().map(|(id, _)| id).collect()
    }

    fn bm25(&self, q: &[&str], k: usize, doc: Option<u32>) -> Vec<u32> {
        let r = self.env.read_txn().unwrap();
        let n = self.lens.len(&r).unwrap() as f32;
        let avg = WORDS as f32 + 1.0;
        let (k1, b) = (1.2f32, 0.75f32);
        let mut scores: HashMap<u32, f32> = HashMap::new();
        let filter = doc.map(|d| RoaringBitmap::deserialize_from(self.docs.get(&r, &d).unwrap().unwrap()).unwrap());
        for t in q {
            let df = self.df.get(&r, t).unwrap().unwrap_or(0) as f32;
            if df == 0.0 {
                continue;
            }
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            let mut score = |id: u32, tf: u32, len: u32| {
                let tf = tf as f32;
                *scores.entry(id).or_default() += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * len as f32 / avg));
            };
            match &filter {
                Some(f) => {
                    for id in f {
                        if let Some(tf) = self.postings.get(&r, &Self::posting_key(t, id)).unwrap() {
                            score(id, tf, self.lens.get(&r, &id).unwrap().unwrap());
                        }
                    }
                }
                None => {
                    let mut prefix = t.as_bytes().to_vec();
                    prefix.push(0);
                    for e in self.postings.prefix_iter(&r, &prefix).unwrap() {
                        let (key, tf) = e.unwrap();
                        let id = u32::from_be_bytes(key[key.len() - 4..].try_into().unwrap());
                        score(id, tf, self.lens.get(&r, &id).unwrap().unwrap());
                    }
                }
            }
        }
        top(scores.into_iter().collect(), k)
    }
}

thread_local! {
    static EF: std::cell::RefCell<usize> = const { std::cell::RefCell::new(100) };
}

fn open(engine: &str, dir: &Path) -> Box<dyn Engine> {
    match engine {
        "sqlite" => Box::new(Sqlite::open(dir)),
        "lmdb" => Box::new(Lmdb::open(dir)),
        e => panic!("unknown engine {e}"),
    }
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn dir_mb(dir: &Path) -> f64 {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum::<u64>() as f64 / 1e6
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (engine, dir, n, phase) = (a[1].as_str(), Path::new(&a[2]), a[3].parse::<usize>().unwrap(), a[4].as_str());
    let docs = (n / PER_DOC) as u32;
    match phase {
        // The base, 100 documents a commit.
        "build" => {
            let _ = std::fs::remove_dir_all(dir);
            let t = Instant::now();
            let mut e = open(engine, dir);
            let mut d = 0;
            while d < docs {
                let batch: Vec<Chunk> = (d..(d + 100).min(docs)).flat_map(doc).collect();
                e.add(&batch);
                d += 100;
            }
            println!("{engine} n={n} base_build_s={:.1}", t.elapsed().as_secs_f64());
        }
        // Adds of one document each, at this size.
        "add" => {
            let mut e = open(engine, dir);
            let (mut walls, mut wchars, mut wbytes) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..10 {
                let c = doc(docs + i);
                let (w0, b0) = io();
                let t = Instant::now();
                e.add(&c);
                walls.push(t.elapsed().as_secs_f64() * 1e3);
                let (w1, b1) = io();
                wchars.push((w1 - w0) as f64 / 1e3);
                wbytes.push((b1 - b0) as f64 / 1e3);
            }
            println!(
                "{engine} n={n} add_ms_p50={:.1} add_wchar_kb_p50={:.0} add_write_bytes_kb_p50={:.0} dir_mb={:.1}",
                p50(walls),
                p50(wchars),
                p50(wbytes),
                dir_mb(dir)
            );
        }
        "query" => query(engine, dir, docs + 10),
        "idist" => idist(docs),
        // Adds documents until killed (the crash test kills it with SIGKILL at a random moment).
        "addloop" => {
            let start: u32 = rusqlite::Connection::open(dir.join("corpus.sqlite"))
                .unwrap()
                .query_row("SELECT coalesce(max(doc), 0) + 1 FROM chunks", [], |r| r.get(0))
                .unwrap();
            let mut e = open(engine, dir);
            for i in 0.. {
                e.add(&doc(start + i));
            }
        }
        // After a kill: every document whole (a multiple of 12 chunks, each document's 12), and
        // SQLite's own check.
        "check" => {
            let db = rusqlite::Connection::open(dir.join("corpus.sqlite")).unwrap();
            let ok: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
            let n: i64 = db.query_row("SELECT count(*) FROM chunks", [], |r| r.get(0)).unwrap();
            let partial: i64 = db
                .query_row(
                    "SELECT count(*) FROM (SELECT doc FROM chunks GROUP BY doc HAVING count(*) != 12)",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let fts: i64 = db
                .query_row("SELECT count(*) FROM fts WHERE fts MATCH 'text:w3 OR text:w4'", [], |r| r.get(0))
                .unwrap();
            println!("check: integrity={ok} chunks={n} partial_docs={partial} fts_rows_matching={fts}");
        }
        p => panic!("unknown phase {p}"),
    }
}

fn query(engine: &str, dir: &Path, all_docs: u32) {
    let rss0 = rss_mb();
    let t = Instant::now();
    let e = open(engine, dir);
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    // Queries: perturbed chunk vectors; ground truth by exact scan over the same vectors.
    let mut rng = StdRng::seed_from_u64(99);
    let queries: Vec<(u32, Vec<f32>)> = (0..40)
        .map(|_| {
            let d = rng.random_range(0..all_docs);
            let c = &doc(d)[rng.random_range(0..PER_DOC)];
            let mut q: Vec<f32> = c.vec.iter().map(|x| x + 0.05 * (rng.random::<f32>() - 0.5)).collect();
            normalise(&mut q);
            (d, q)
        })
        .collect();
    let (mut lat, mut flat, mut blat, mut bflat, mut recall, mut frecall) = (vec![], vec![], vec![], vec![], 0.0, 0.0);
    let mut found = Vec::new();
    for (d, q) in &queries {
        let t = Instant::now();
        let got = e.knn(q, 10, None);
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let fgot = e.knn(q, 10, Some(*d));
        flat.push(t.elapsed().as_secs_f64() * 1e3);
        found.push((got, fgot));
        let words = ["w3", "w150", "w4000"];
        let t = Instant::now();
        let hits = e.bm25(&words, 10, Some(*d));
        assert!(!hits.is_empty() && hits.iter().all(|id| id / PER_DOC as u32 == *d), "bm25 in doc {d}: {hits:?}");
        bflat.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        assert_eq!(e.bm25(&words, 10, None).len(), 10);
        blat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let rss1 = rss_mb();
    // Exact, over every chunk (and over the document's).
    let every: Vec<Vec<Vec<f32>>> = (0..all_docs).map(doc_vecs).collect();
    for ((d, q), (got, fgot)) in queries.iter().zip(found) {
        let mut exact: Vec<(u32, f32)> = Vec::new();
        for (dd, vs) in every.iter().enumerate() {
            for (i, v) in vs.iter().enumerate() {
                exact.push(((dd * PER_DOC + i) as u32, v.iter().zip(q).map(|(a, b)| a * b).sum()));
            }
        }
        let truth = top(exact.clone(), 10);
        let ftruth = top(exact.into_iter().filter(|(id, _)| *id / PER_DOC as u32 == *d).collect(), 10);
        recall += got.iter().filter(|i| truth.contains(i)).count() as f64 / 10.0;
        frecall += fgot.iter().filter(|i| ftruth.contains(i)).count() as f64 / 10.0;
    }
    let nq = queries.len() as f64;
    println!(
        "{engine} n={} open_ms={open_ms:.1} rss_delta_mb={:.1} knn_p50_ms={:.2} recall10={:.3} knn_doc_p50_ms={:.2} recall10_doc={:.3} bm25_p50_ms={:.2} bm25_doc_p50_ms={:.2}",
        all_docs as usize * PER_DOC,
        rss1 - rss0,
        p50(lat),
        recall / nq,
        p50(flat),
        frecall / nq,
        p50(blat),
        p50(bflat),
    );
}

#[derive(Clone)]
struct Unit(Vec<f32>);

impl instant_distance::Point for Unit {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - self.0.iter().zip(&other.0).map(|(a, b)| a * b).sum::<f32>()
    }
}

/// instant-distance (the design card's HNSW) over the same vectors: build time, recall@10 and
/// latency at three ef_search settings.
fn idist(docs: u32) {
    let every: Vec<Vec<f32>> = (0..docs).flat_map(doc_vecs).collect();
    let mut rng = StdRng::seed_from_u64(99);
    let queries: Vec<Vec<f32>> = (0..40)
        .map(|_| {
            let c = &every[rng.random_range(0..every.len())];
            let mut q: Vec<f32> = c.iter().map(|x| x + 0.05 * (rng.random::<f32>() - 0.5)).collect();
            normalise(&mut q);
            q
        })
        .collect();
    let truth: Vec<Vec<u32>> = queries
        .iter()
        .map(|q| {
            top(
                every.iter().enumerate().map(|(i, v)| (i as u32, v.iter().zip(q).map(|(a, b)| a * b).sum())).collect(),
                10,
            )
        })
        .collect();
    for ef in [100usize, 200, 400] {
        let rss0 = rss_mb();
        let t = Instant::now();
        let points: Vec<Unit> = every.iter().cloned().map(Unit).collect();
        let ids: Vec<u32> = (0..points.len() as u32).collect();
        let g = instant_distance::Builder::default().ef_search(ef).seed(7).build(points, ids);
        let build = t.elapsed().as_secs_f64();
        let (mut lat, mut recall) = (Vec::new(), 0.0);
        for (q, truth) in queries.iter().zip(&truth) {
            let t = Instant::now();
            let mut search = instant_distance::Search::default();
            let got: Vec<u32> = g.search(&Unit(q.clone()), &mut search).take(10).map(|m| *m.value).collect();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            recall += got.iter().filter(|i| truth.contains(i)).count() as f64 / 10.0;
        }
        println!(
            "instant-distance n={} ef_search={ef} build_s={build:.1} rss_delta_mb={:.0} knn_p50_ms={:.2} recall10={:.3}",
            every.len(),
            rss_mb() - rss0,
            p50(lat),
            recall / queries.len() as f64
        );
    }
}
