//! Pulling a component by digest from a real OCI registry on loopback (Debian's docker-registry,
//! as the tests start it): chapter-rag (5.6 MB) into a fresh cache (download and every check:
//! manifest digest, media types, size bound, layer digest as it arrives, the cache write) beside
//! the same pull served from the cache, and `quarry_oci::push`, side by side in one run.
//! Run with `make bench-oci` (or `cargo bench -p quarry-tests --bench oci`).

use std::time::Instant;

use quarry::eval::score::percentile;
use quarry_oci::{OciRef, Puller};
use quarry_tests::CHAPTER_RAG;
use quarry_tests::oci_registry::LocalRegistry;

const RUNS: usize = 20;

#[tokio::main]
async fn main() {
    let registry = LocalRegistry::start();
    let bytes = std::fs::metadata(CHAPTER_RAG).unwrap().len();
    let tag = OciRef::parse(&format!("oci://{}/bench/chapters:v1", registry.addr)).unwrap();
    let (mut push, mut cold, mut cached) = (Vec::new(), Vec::new(), Vec::new());
    let mut digest = String::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        digest = quarry_oci::push(std::path::Path::new(CHAPTER_RAG), &tag).await.expect("push");
        push.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let pinned = OciRef::parse(&format!("oci://{}/bench/chapters@{digest}", registry.addr)).unwrap();
    for _ in 0..RUNS {
        let cache = tempfile::tempdir().unwrap();
        let puller = Puller::new(cache.path(), 64 << 20);
        let t = Instant::now();
        let pulled = puller.pull(&pinned, &digest).await.expect("pull");
        cold.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(pulled.fetched);
        let t = Instant::now();
        let again = puller.pull(&pinned, &digest).await.expect("cached pull");
        cached.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(!again.fetched);
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!(
        "OCI pull by digest, chapter-rag {:.1} MB, {RUNS} runs each, loopback docker-registry 2.8, {cpu}",
        bytes as f64 / 1e6
    );
    for (what, ms) in [("push (tag)", &push), ("pull, cold cache", &cold), ("pull, cached", &cached)] {
        println!("  {what:<18} p50 {:>8.2} ms   p99 {:>8.2} ms", percentile(ms, 0.5), percentile(ms, 0.99));
    }
    let (c, h) = (percentile(&cold, 0.5), percentile(&cached, 0.5));
    println!("  cold / cached: {:.0}x; cold throughput {:.0} MB/s", c / h, bytes as f64 / 1e6 / (c / 1e3));
}
