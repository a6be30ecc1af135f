//! Where the exact scan stops paying: a k-nearest search (k = 100, d = 384, the tools' leg
//! depth and MiniLM's width) by scanning and by the HNSW graph at growing corpus sizes, with
//! the graph's recall of the exact top 10, and the same scan behind a corpus filter that lets
//! every chunk through (what a tool's search costs in a corpus shared with nothing else).
//! `cargo bench -p rag-core --bench knn`.

use std::collections::BTreeMap;
use std::time::Instant;

use rag_core::corpus::{Collection, Entry, Filter, Metric, Shape};
use rag_core::vector::VectorIndex;

const D: usize = 384;
const K: usize = 100;
const QUERIES: usize = 50;

/// Deterministic unit vectors in clusters, like embeddings of a manual's sections.
fn vectors(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut s = seed;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    let centres: Vec<Vec<f32>> = (0..64).map(|_| (0..D).map(|_| next()).collect()).collect();
    (0..n)
        .map(|i| {
            let c = &centres[i % centres.len()];
            let v: Vec<f32> = c.iter().map(|x| x + 0.6 * next()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn per_query_ms(f: impl Fn(&[f32]) -> Vec<usize>, queries: &[Vec<f32>]) -> (f64, Vec<Vec<usize>>) {
    let t = Instant::now();
    let out: Vec<Vec<usize>> = queries.iter().map(|q| f(q)).collect();
    (t.elapsed().as_secs_f64() * 1e3 / queries.len() as f64, out)
}

fn main() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!("k = {K}, d = {D}, {QUERIES} queries, one thread; {cpu}");
    println!(
        "{:>7} {:>10} {:>10} {:>10} {:>9} {:>10} {:>10}",
        "chunks", "exact ms", "hnsw ms", "exact/hnsw", "recall10", "build s", "filter ms"
    );
    let queries = vectors(QUERIES, 99);
    for n in [2_500usize, 5_000, 10_000, 20_000, 40_000] {
        let data = vectors(n, 7);
        let mut exact = VectorIndex::new(D).with_exact_limit(usize::MAX);
        let mut graph = VectorIndex::new(D).with_exact_limit(0);
        for v in &data {
            exact.push(v).unwrap();
            graph.push(v).unwrap();
        }
        let t = Instant::now();
        graph.prepare();
        let build = t.elapsed().as_secs_f64();
        let (e_ms, e) =
            per_query_ms(|q| exact.nearest(q, K, None).unwrap().into_iter().map(|h| h.0).collect(), &queries);
        let (h_ms, h) =
            per_query_ms(|q| graph.nearest(q, K, None).unwrap().into_iter().map(|h| h.0).collect(), &queries);
        let recall = e
            .iter()
            .zip(&h)
            .map(|(e, h)| e.iter().take(10).filter(|i| h.iter().take(10).any(|j| j == *i)).count())
            .sum::<usize>() as f64
            / (10 * QUERIES) as f64;
        // The same scan through a corpus, behind a filter every chunk passes.
        let entries: Vec<Entry> = (0..n)
            .map(|i| Entry {
                id: format!("b#{i}"),
                text: String::new(),
                metadata: "{}".into(),
                fields: BTreeMap::from([("build".to_string(), vec!["b".to_string()])]),
            })
            .collect();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let shape = Shape { dimension: D, metric: Metric::Cosine };
        let corpus = Collection::from_parts(1, shape, "{}".into(), entries, flat).unwrap();
        let filter = Filter::exact("build", "b");
        let (f_ms, _) =
            per_query_ms(|q| corpus.nearest(q, K, &filter).unwrap().into_iter().map(|_| 0).collect(), &queries);
        println!("{n:>7} {e_ms:>10.2} {h_ms:>10.2} {:>10.1} {recall:>9.2} {build:>10.1} {f_ms:>10.2}", e_ms / h_ms);
    }
}
