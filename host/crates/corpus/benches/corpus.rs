//! `make bench-corpus`: the local corpus at sizes, on its own workload, printed as a table.
//!
//! A corpus of N chunks (384 dimensions) in documents of 12: each document's vectors lie
//! around a centre of its own (as one document's embeddings do; [`Vectors`] says how, and
//! `QUARRY_BENCH_CORPUS_VECTORS=flat` makes them adversarial for a graph), its texts are 250
//! Zipf-ish words of a 20,000-word vocabulary. Per size: the base load (100 documents a commit), an open,
//! ten documents added one commit each (wall time and the bytes the commit handed to `write`,
//! beside the document's own bytes), kNN unfiltered and filtered to one document, BM25
//! unfiltered and filtered to one document, and the process's RSS. kNN unfiltered twice: an
//! exact scan, and the nearest-neighbour graph (built from nothing, timed, then the ten added
//! documents scanned after it) with its recall@10 against the scan. Beside it, up to
//! `QUARRY_BENCH_CORPUS_OLD` chunks (default 50,000: past it every commit of that format built an
//! HNSW graph of the whole corpus), the commit of the format before (cbf06d5) as it did it: the
//! generation applied in memory (rag-core's `Collection`), its BM25 built, the whole file
//! encoded, hashed, written and synced.
//!
//! Sizes: `QUARRY_BENCH_CORPUS_SIZES` (default `10000,100000`), e.g. `10000,100000,1000000`.

use std::path::Path;
use std::time::Instant;

use quarry_corpus::{Change, Filter, LocalCorpus, Metric, Record, Shape};
use rag_core::corpus::Collection;

const DIM: usize = 384;
const PER_DOC: usize = 12;
const WORDS: usize = 250;
const VOCAB: f64 = 20_000.0;
const SHAPE: Shape = Shape { dimension: DIM, metric: Metric::Cosine };

/// A small deterministic generator (no dependency for the bench's data).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
}

impl Rng {
    /// A standard normal draw (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.next().max(1e-12), self.next());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// How the vectors are made (`QUARRY_BENCH_CORPUS_VECTORS`).
#[derive(Clone, Copy, PartialEq)]
enum Vectors {
    /// `latent` (the default): as sentence embeddings are, of low intrinsic dimension. Each
    /// document a point of a 32-dimensional space, its chunks around it, mapped into 384
    /// dimensions by one fixed random projection, with a little noise of full rank: chunks of
    /// other documents lie at every distance, as they do in a real corpus.
    Latent,
    /// `flat`: each document's chunks around a random centre of 384 dimensions, the noise as
    /// large as the centre: every chunk is nearly orthogonal to all but its document's 11
    /// others, so a graph has nothing to follow towards them (adversarial for any ANN).
    Flat,
}

const LATENT: usize = 32;

fn vectors() -> Vectors {
    match std::env::var("QUARRY_BENCH_CORPUS_VECTORS").as_deref() {
        Ok("flat") => Vectors::Flat,
        _ => Vectors::Latent,
    }
}

/// The latent space's projection into [`DIM`] dimensions (fixed).
fn projection() -> &'static [f32] {
    static P: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let mut rng = Rng(42);
        (0..DIM * LATENT).map(|_| rng.normal() / (LATENT as f32).sqrt()).collect()
    })
}

/// One document's chunks' vectors.
fn doc_vectors(rng: &mut Rng) -> Vec<Vec<f32>> {
    match vectors() {
        Vectors::Flat => {
            let mut centre: Vec<f32> = (0..DIM).map(|_| rng.next() as f32 - 0.5).collect();
            normalise(&mut centre);
            (0..PER_DOC)
                .map(|_| {
                    let mut v: Vec<f32> = centre.iter().map(|c| c + 0.225 * (rng.next() as f32 - 0.5)).collect();
                    normalise(&mut v);
                    v
                })
                .collect()
        }
        Vectors::Latent => {
            let p = projection();
            let centre: Vec<f32> = (0..LATENT).map(|_| rng.normal()).collect();
            (0..PER_DOC)
                .map(|_| {
                    let z: Vec<f32> = centre.iter().map(|c| c + 0.5 * rng.normal()).collect();
                    let mut v: Vec<f32> = (0..DIM)
                        .map(|i| p[i * LATENT..(i + 1) * LATENT].iter().zip(&z).map(|(a, b)| a * b).sum::<f32>())
                        .map(|x| x + 0.1 * rng.normal())
                        .collect();
                    normalise(&mut v);
                    v
                })
                .collect()
        }
    }
}

/// Document `d`'s chunks.
fn doc(d: usize) -> Vec<Record> {
    let mut rng = Rng(d as u64 * 7919 + 1);
    let vs = doc_vectors(&mut rng);
    vs.into_iter()
        .enumerate()
        .map(|(i, vector)| {
            let mut text = format!("doc{d} ");
            for _ in 0..WORDS {
                let w = (VOCAB.powf(rng.next()) as usize).min(VOCAB as usize - 1);
                text.push_str(&format!("w{w} "));
            }
            Record {
                id: format!("d{d}-{i}"),
                text,
                vector,
                metadata: format!("{{\"document\":\"d{d}\",\"chunk\":{i}}}"),
                fields: [("document".to_string(), vec![format!("d{d}")])].into(),
            }
        })
        .collect()
}

fn doc_bytes(rs: &[Record]) -> u64 {
    rs.iter().map(|r| (r.id.len() + r.text.len() + r.metadata.len() + r.vector.len() * 4) as u64).sum()
}

/// Bytes this thread has handed to `write` and sent to storage (`/proc/thread-self/io`).
fn written() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/io").unwrap_or_default();
    let get = |k: &str| s.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    (get("wchar:"), get("write_bytes:"))
}

fn rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn dir_mb(dir: &Path) -> f64 {
    std::fs::read_dir(dir)
        .map_or(0, |d| d.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum::<u64>())
        as f64
        / 1e6
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn row(what: &str, value: String) {
    println!("  {what:<58} {value}");
}

/// The SQLite store at `n` chunks.
fn sqlite(n: usize, dir: &Path) {
    let docs = n / PER_DOC;
    // The graph is built below, timed, rather than by the background thread during the load.
    let corpus = LocalCorpus::open(dir, SHAPE).expect("open").with_graph_after(None);
    let t = Instant::now();
    for first in (0..docs).step_by(100) {
        let batch = (first..(first + 100).min(docs)).flat_map(doc).map(Change::Upsert).collect();
        corpus.commit(batch, None).expect("commit");
    }
    row("base load, 100 documents a commit (s)", format!("{:.1}", t.elapsed().as_secs_f64()));
    drop(corpus);
    let t = Instant::now();
    let corpus = LocalCorpus::open(dir, SHAPE).expect("reopen").with_graph_after(None);
    let g = corpus.snapshot().expect("snapshot");
    row("open and first snapshot (ms)", format!("{:.1}", ms(t)));
    assert_eq!(g.len() as usize, docs * PER_DOC);
    drop(g);
    let t = Instant::now();
    let built = corpus.build_graph().expect("graph").expect("a graph built");
    row(
        "nearest-neighbour graph built from nothing (s, every core)",
        format!("{:.1}, {} chunks", t.elapsed().as_secs_f64(), built.chunks),
    );
    drop(corpus);
    let t = Instant::now();
    let corpus = LocalCorpus::open(dir, SHAPE).expect("reopen").with_graph_after(None);
    let g = corpus.snapshot().expect("snapshot");
    assert!(g.graph_upto().is_some());
    row("open with the graph (mapped) and first snapshot (ms)", format!("{:.1}", ms(t)));
    drop(g);
    let (mut wall, mut wchar, mut wbytes) = (Vec::new(), Vec::new(), Vec::new());
    let mut own = 0;
    for d in docs..docs + 10 {
        let rs = doc(d);
        own = doc_bytes(&rs);
        let (c0, b0) = written();
        let t = Instant::now();
        corpus.commit(rs.into_iter().map(Change::Upsert).collect(), None).expect("add");
        wall.push(ms(t));
        let (c1, b1) = written();
        wchar.push((c1 - c0) as f64);
        wbytes.push((b1 - b0) as f64);
    }
    let wc = p50(wchar);
    row("add one document of 12 chunks, p50 of 10 (ms)", format!("{:.1}", p50(wall)));
    row(
        "  bytes written by the add, p50 (write / to storage)",
        format!(
            "{:.0} KB / {:.0} KB, {:.1}x the document's {} KB",
            wc / 1e3,
            p50(wbytes) / 1e3,
            wc / own as f64,
            own / 1000
        ),
    );
    row("directory (MB)", format!("{:.0}", dir_mb(dir)));
    let g = corpus.snapshot().expect("snapshot");
    // 100 queries: recall@10 over 1,000 answers (20 left it to ±2%).
    let queries: Vec<(usize, Vec<f32>)> = (0..100)
        .map(|i| {
            let d = (i * 7_919) % docs;
            let mut v = doc(d)[i % PER_DOC].vector.clone();
            let mut rng = Rng(i as u64 + 99);
            v.iter_mut().for_each(|x| *x += 0.05 * (rng.next() as f32 - 0.5));
            (d, v)
        })
        .collect();
    let time = |f: &dyn Fn(usize, &[f32])| {
        p50(queries
            .iter()
            .map(|(d, q)| {
                let t = Instant::now();
                f(*d, q);
                ms(t)
            })
            .collect())
    };
    let all = Filter::all();
    let exact = corpus.exact_snapshot().expect("snapshot");
    row(
        "kNN k=10 unfiltered, exact scan, p50 (ms)",
        format!("{:.2}", time(&|_, q| assert_eq!(exact.nearest(q, 10, &all).unwrap().len(), 10))),
    );
    let found: usize = queries
        .iter()
        .map(|(_, q)| {
            let truth = exact.nearest(q, 10, &all).unwrap();
            g.nearest(q, 10, &all).unwrap().iter().filter(|h| truth.iter().any(|t| t.id == h.id)).count()
        })
        .sum();
    row(
        "kNN k=10 unfiltered, graph + the 120 chunks after it, p50 (ms)",
        format!(
            "{:.2}, recall@10 {:.3}",
            time(&|_, q| assert_eq!(g.nearest(q, 10, &all).unwrap().len(), 10)),
            found as f64 / (10 * queries.len()) as f64
        ),
    );
    let one = |d: usize| Filter::exact("document", &format!("d{d}"));
    row(
        "kNN k=10 filtered to one document, p50 (ms)",
        format!("{:.2}", time(&|d, q| assert_eq!(g.nearest(q, 10, &one(d)).unwrap().len(), 10))),
    );
    let words = "w3 w150 w4000";
    row(
        "BM25 k=10 \"w3 w150 w4000\" unfiltered, p50 (ms)",
        format!("{:.2}", time(&|_, _| assert!(!g.keyword(words, None, 10, &all).unwrap().is_empty()))),
    );
    row(
        "BM25 k=10 filtered to one document, p50 (ms)",
        format!("{:.2}", time(&|d, _| drop(g.keyword(words, None, 10, &one(d)).unwrap()))),
    );
    row("process RSS after the searches (MB)", format!("{:.0}", rss_mb()));
}

/// The format before (cbf06d5): a commit made the next generation in memory and wrote it whole.
fn old_format(n: usize, dir: &Path) {
    let docs = n / PER_DOC;
    let entries_and_vectors = (0..docs).flat_map(doc);
    let mut g = Collection::empty(SHAPE);
    let batch: Vec<Change> = entries_and_vectors.map(Change::Upsert).collect();
    g = g.apply(batch, None).expect("apply");
    let (mut wall, mut wchar) = (Vec::new(), Vec::new());
    for d in docs..docs + 5 {
        let (c0, _) = written();
        let t = Instant::now();
        let next = g.apply(doc(d).into_iter().map(Change::Upsert).collect(), None).expect("apply");
        next.prepare();
        write_whole(dir, &next);
        wall.push(ms(t));
        wchar.push((written().0 - c0) as f64);
        g = next;
    }
    row("add one document of 12 chunks, p50 of 5 (ms)", format!("{:.1}", p50(wall)));
    row("  bytes written by the add, p50", format!("{:.0} KB", p50(wchar) / 1e3));
}

/// The earlier format's file, as its writer made it: JSON header, vectors, SHA-256, synced.
fn write_whole(dir: &Path, g: &Collection) {
    use sha2::Digest;
    use std::io::Write;
    #[derive(serde::Serialize)]
    struct Header<'a> {
        number: u64,
        shape: Shape,
        notes: &'a str,
        chunks: &'a [rag_core::corpus::Entry],
    }
    let header =
        serde_json::to_vec(&Header { number: g.number(), shape: g.shape(), notes: g.notes(), chunks: g.entries() })
            .expect("serialises");
    let mut bytes = Vec::with_capacity(header.len() + g.vectors().len() * 4 + 64);
    bytes.extend_from_slice(b"QCORPUS\0");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&header);
    for x in g.vectors() {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let sum = sha2::Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    let path = dir.join(format!("gen-{:020}.qcorpus", g.number()));
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(&bytes).expect("write");
    f.sync_all().expect("sync");
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken from the command line.
    let sizes: Vec<usize> = std::env::var("QUARRY_BENCH_CORPUS_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let old_max: usize = std::env::var("QUARRY_BENCH_CORPUS_OLD").ok().and_then(|s| s.parse().ok()).unwrap_or(50_000);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    println!(
        "local corpus bench: {cpu}, {} cores, {} vectors",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if vectors() == Vectors::Flat { "flat" } else { "latent" }
    );
    for n in sizes {
        let dir = tempfile::tempdir().expect("a temporary directory");
        println!("\n{n} chunks, SQLite store:");
        sqlite(n, dir.path());
        if n <= old_max {
            let dir = tempfile::tempdir().expect("a temporary directory");
            println!("{n} chunks, the format before (cbf06d5's commit, re-enacted):");
            old_format(n, dir.path());
        } else {
            println!(
                "{n} chunks, the format before: not run (over {old_max}: each commit built an HNSW graph of the whole corpus)"
            );
        }
    }
}
