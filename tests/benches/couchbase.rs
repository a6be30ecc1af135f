//! Couchbase vector search benchmark, against the local fake cluster (`fakes/couchbase/`), side
//! by side in one run:
//!
//! - the SDK alone: `scope.search` with a fixed vector, rows read (what a native tool costs);
//! - the component in the host, scoped index: embed the query (toy embedder), cross into the
//!   sandbox and back through the `couchbase` capability, print CrewAI's text;
//! - the same, cluster-level index (the core agent; the index's bucket is checked per call).
//!
//! Then a corpus kept in Couchbase (`backend = "couchbase"`) beside one on the host's disk, on the
//! bundled rclone manual (chunked by chapter-rag, 384-dimensional toy vectors, so that the
//! figures are the backends' and not a model's):
//!
//! - ingest: the manual's chunks committed into each, in chunks/s;
//! - search: chapter-rag's `search` over each, the same questions, p50 and p99;
//! - a fleet: 1 and 3 `quarry serve` processes on the Couchbase corpus, 8 MCP clients, calls/s,
//!   every answer checked against the single host's.
//!
//! The fake answers in microseconds, so the figures are client-side costs, not a server's.
//! Run with `make bench-couchbase` (or `cargo bench -p quarry-tests --bench couchbase`).

// The Couchbase SDK's futures are deep (see tests/integration/main.rs).
#![recursion_limit = "256"]

use std::time::{Duration, Instant};

use couchbase::authenticator::PasswordAuthenticator;
use couchbase::cluster::Cluster;
use couchbase::options::cluster_options::ClusterOptions;
use couchbase::options::search_options::SearchOptions;
use couchbase::search::request::SearchRequest;
use couchbase::search::vector::{VectorQuery, VectorSearch};
use futures::StreamExt;
use quarry_tests::fakes::couchbase::{self as fc, FakeCluster};
use quarry_tests::{COUCHBASE_SEARCH, TOY_EMBEDDER, TestEnv};

const RUNS: usize = 400;

fn p(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

async fn timed<F: Future<Output = ()>>(mut f: impl FnMut() -> F) -> Vec<Duration> {
    for _ in 0..50 {
        f().await;
    }
    let mut out = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        f().await;
        out.push(t.elapsed());
    }
    out
}

fn config(fake: &FakeCluster, index: &str, scoped: bool, scopes: &str) -> String {
    format!(
        r#"
[couchbase.local]
connection_string = "{}"
username = "{}"
password = "{}"
[embedders.toy]
component = "plugins/toy.wasm"
config = {{ dimension = 4 }}
pool = 1
[tools.hotels]
component = "plugins/couchbase-search.wasm"
embedder = "toy"
config = {{ bucket_name = "travel", scope_name = "inventory", collection_name = "hotels", index_name = "{index}", scoped_index = {scoped} }}
[tools.hotels.grants]
couchbase = {{ connection = "local", scopes = {scopes} }}
"#,
        fake.connection_string(),
        fc::USERNAME,
        fc::PASSWORD
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let fake = FakeCluster::start(fc::standard()).await;

    let cluster = Cluster::connect(
        fake.connection_string(),
        ClusterOptions::new(PasswordAuthenticator::new(fc::USERNAME, fc::PASSWORD).into()),
    )
    .await
    .expect("connect");
    cluster.buckets().get_bucket("travel", None).await.expect("bucket");
    let scope = cluster.bucket("travel").scope("inventory");
    let mut sdk = timed(|| {
        let scope = scope.clone();
        async move {
            let vq = VectorQuery::with_vector("embedding", vec![0.5, 0.5, 0.5, 0.5]).num_candidates(3);
            let req = SearchRequest::with_vector_search(VectorSearch::new(vec![vq], None));
            let opts = SearchOptions::new().limit(3).fields(vec!["*".to_string()]);
            let mut res = scope.search("hotels-vec", req, opts).await.expect("search");
            let mut rows = res.rows();
            while let Some(r) = rows.next().await {
                let _: serde_json::Value = r.expect("row").fields().expect("fields");
            }
        }
    })
    .await;

    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(COUCHBASE_SEARCH, "couchbase-search");
    let args = r#"{"query":"a quiet hotel by the sea"}"#;
    let host = env.host(&config(&fake, "hotels-vec", true, r#"["travel.inventory"]"#)).await;
    let mut scoped = timed(|| {
        let host = host.clone();
        async move {
            host.call("hotels.search", args).await.expect("search");
        }
    })
    .await;
    let env2 = TestEnv::new();
    env2.plugin(TOY_EMBEDDER, "toy");
    env2.plugin(COUCHBASE_SEARCH, "couchbase-search");
    let host2 = env2.host(&config(&fake, "travel-vec", false, r#"["travel.*"]"#)).await;
    let mut cluster_level = timed(|| {
        let host = host2.clone();
        async move {
            host.call("hotels.search", args).await.expect("search");
        }
    })
    .await;

    let base = p(&mut sdk, 0.5);
    println!("{:<52} {:>10} {:>10} {:>8}", "search, 3 rows (fake cluster, loopback)", "p50", "p99", "vs SDK");
    for (name, v) in [
        ("SDK alone, scope.search", &mut sdk),
        ("component in the host, scoped index", &mut scoped),
        ("component in the host, cluster-level index", &mut cluster_level),
    ] {
        let p50 = p(v, 0.5);
        println!("{name:<52} {:>10} {:>10} {:>7.2}x", ms(p50), ms(p(v, 0.99)), p50.as_secs_f64() / base.as_secs_f64());
    }
    println!("({RUNS} runs each after 50 warm-up calls, one client, 2 worker threads)");
    println!();
    // Boxed: the corpus's futures are deep (the SDK's), past the compiler's layout depth here.
    Box::pin(corpus_backends(&fake)).await;
}

/// chapter-rag over the rclone manual with its corpus `local` (in `corpus/`) or in the fake
/// cluster's `travel.inventory.airlines`, 384-dimensional toy vectors.
fn chapter_config(fake: &FakeCluster, couchbase: bool) -> String {
    let corpus = if couchbase {
        fake.corpus_section("airlines", "timeout = \"60s\"")
    } else {
        "[corpora.manual]\ndir = \"corpus\"\n".to_string()
    };
    format!(
        r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = {{ dimension = 384, max_tokens = 256 }}
pool = 1
{corpus}
[tools.a]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {{ manual = "/docs/MANUAL.md", corpus = "manual" }}
[tools.a.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
corpora = [{{ name = "manual", mode = "rw" }}]
memory = "2GiB"
deadline = "600s"
"#
    )
}

const QUESTIONS: [&str; 5] = [
    "How do I limit the bandwidth during office hours?",
    "Can rclone check files with checksums after a copy?",
    "How do I mount a remote as a local drive?",
    "What does --dry-run do?",
    "How do I encrypt files before uploading?",
];

/// The corpus backends side by side: ingest, search, and a fleet of 1 and 3 hosts.
async fn corpus_backends(fake: &FakeCluster) {
    use quarry_corpus::couchbase::CouchbaseCorpus;
    use quarry_corpus::{Change, Filter, LocalCorpus, Metric, Shape};

    println!("{}", quarry_tests::cpu_line());
    let env = TestEnv::with_chapter_rag();
    let manual = quarry_tests::crate_dir().join("../host/demo/rclone/MANUAL.md");
    std::fs::copy(&manual, env.path("docs/MANUAL.md")).expect("the bundled rclone manual");

    // The manual's chunks, as chapter-rag makes them, from a local build.
    let local_host = env.host(&chapter_config(fake, false)).await;
    let shape = Shape { dimension: 384, metric: Metric::Cosine };
    let built = LocalCorpus::open(&env.path("corpus"), shape).expect("the local corpus");
    let g = built.snapshot().expect("a snapshot");
    let ids = g.list(&Filter::all(), 0, usize::MAX).expect("the ids");
    let records: Vec<Change> = g.get(&ids).expect("the chunks").into_iter().flatten().map(Change::Upsert).collect();
    let n = records.len();

    // Ingest: the same chunks committed into a fresh corpus of each kind.
    let dir = tempfile::tempdir().unwrap();
    let fresh = LocalCorpus::open(dir.path(), shape).unwrap();
    let t = Instant::now();
    fresh.commit(records.clone(), None).unwrap();
    let local_s = t.elapsed().as_secs_f64();
    let raw: quarry::capability::couchbase::RawConnection = serde_json::from_value(serde_json::json!({
        "connection_string": fake.connection_string(), "username": fc::USERNAME, "password": fc::PASSWORD
    }))
    .unwrap();
    let connection =
        std::sync::Arc::new(quarry::capability::couchbase::connection(std::path::Path::new("/"), raw).unwrap());
    let store = quarry::capability::couchbase::store::Store::new(
        connection,
        "travel",
        "inventory",
        "hotels",
        Duration::from_secs(60),
    );
    let remote = Box::pin(CouchbaseCorpus::open("ingest", store, "quarry-ingest", shape)).await.unwrap();
    let lease = Box::pin(remote.lease("bench", Duration::from_secs(30), Duration::from_secs(5))).await.unwrap();
    let t = Instant::now();
    Box::pin(remote.commit(&lease, records, None)).await.unwrap();
    let remote_s = t.elapsed().as_secs_f64();
    drop(lease);
    println!(
        "{:<52} {:>10} {:>12}",
        format!("ingest: {n} chunks of the rclone manual, one commit"),
        "seconds",
        "chunks/s"
    );
    println!("{:<52} {:>10.2} {:>12.0}", "local corpus (SQLite)", local_s, n as f64 / local_s);
    println!("{:<52} {:>10.2} {:>12.0}", "Couchbase corpus (fake cluster, loopback)", remote_s, n as f64 / remote_s);
    // What a corpus costs to keep, per 1,000 chunks: the documents' JSON as the data service
    // stores it (before its own per-document overhead and compression), beside the local
    // corpus's files.
    let docs = fake.documents("travel", "inventory", "hotels");
    let chunk_bytes: usize =
        docs.iter().filter(|(k, _)| !k.starts_with("_quarry::")).map(|(_, v)| v.to_string().len()).sum();
    let local_bytes: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    let per_1000 = |bytes: f64| bytes / n as f64 * 1000.0 / 1e6;
    println!("{:<52} {:>10} {:>12}", "size per 1,000 chunks (384 dimensions)", "MB", "");
    println!("{:<52} {:>10.2}", "Couchbase documents (JSON, as written)", per_1000(chunk_bytes as f64));
    println!("{:<52} {:>10.2}", "local corpus (its generation files)", per_1000(local_bytes as f64));

    drop(local_host);
    // Search: chapter-rag's search over each backend, the same questions, each in a `quarry
    // serve` of its own (the hosts of a fleet are processes; the fake answers from this one).
    let t = Instant::now();
    let couchbase_host = env.host(&chapter_config(fake, true)).await;
    println!("(chapter-rag built its Couchbase corpus in {:.1} s)", t.elapsed().as_secs_f64());
    drop(couchbase_host);
    let mut rows = Vec::new();
    for (name, couchbase) in [("local corpus", false), ("Couchbase corpus", true)] {
        let path = env.config(&chapter_config(fake, couchbase));
        let served = quarry_tests::mcp_client::Served::start(&quarry_tests::quarry_bin(), &path);
        let mut session = quarry_tests::mcp_client::McpHttp::open(&served.url).await.expect("session");
        let mut times = Vec::new();
        for round in 0..=100 {
            for q in QUESTIONS {
                let t = Instant::now();
                let r = session.call("a.search", serde_json::json!({"question": q})).await.expect("call");
                assert_eq!(r["result"]["isError"], false, "{r}");
                if round > 0 {
                    times.push(t.elapsed());
                }
            }
        }
        rows.push((name, p(&mut times, 0.5), p(&mut times, 0.99)));
    }
    println!(
        "{:<52} {:>10} {:>10} {:>8}",
        "chapter-rag search over MCP, one client (500 calls)", "p50", "p99", "vs local"
    );
    let base = rows[0].1.as_secs_f64();
    for (name, p50, p99) in rows {
        println!("{name:<52} {:>10} {:>10} {:>7.2}x", ms(p50), ms(p99), p50.as_secs_f64() / base);
    }

    // A fleet: 1 and 3 processes on the Couchbase corpus, 8 clients in all.
    let path = env.config(&chapter_config(fake, true));
    let mut want = Vec::new();
    println!("{:<52} {:>10} {:>10} {:>8}", "fleet: 8 MCP clients, 25 searches each", "calls/s", "p99", "answers");
    for hosts in [1, 3] {
        let served: Vec<quarry_tests::mcp_client::Served> =
            (0..hosts).map(|_| quarry_tests::mcp_client::Served::start(&quarry_tests::quarry_bin(), &path)).collect();
        let urls: Vec<String> = served.iter().map(|s| s.url.clone()).collect();
        if want.is_empty() {
            for q in QUESTIONS {
                want.push(fleet_search(&urls[0], q).await);
            }
        }
        let t = Instant::now();
        let mut clients = tokio::task::JoinSet::new();
        for c in 0..8 {
            let url = urls[c % urls.len()].clone();
            let want = want.clone();
            clients.spawn(async move {
                let mut session = quarry_tests::mcp_client::McpHttp::open(&url).await.expect("session");
                let (mut times, mut same) = (Vec::new(), 0);
                for i in 0..25 {
                    let q = QUESTIONS[(c + i) % QUESTIONS.len()];
                    let t = Instant::now();
                    let r = session.call("a.search", serde_json::json!({"question": q})).await.expect("call");
                    times.push(t.elapsed());
                    let text = r["result"]["content"][0]["text"].as_str().unwrap_or_default();
                    same += usize::from(
                        quarry_tests::routed_passages(text)
                            == quarry_tests::routed_passages(&want[(c + i) % QUESTIONS.len()]),
                    );
                }
                (times, same)
            });
        }
        let (mut times, mut same) = (Vec::new(), 0);
        while let Some(r) = clients.join_next().await {
            let (t, s) = r.expect("a client");
            times.extend(t);
            same += s;
        }
        let secs = t.elapsed().as_secs_f64();
        let calls = times.len();
        println!(
            "{:<52} {:>10.1} {:>10} {:>8}",
            format!("{hosts} host(s)"),
            calls as f64 / secs,
            ms(p(&mut times, 0.99)),
            format!("{same}/{calls}")
        );
    }
    println!(
        "(on a machine of {} cores every host shares them: 3 hosts show the corpus served alike under load, not a speed-up)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
}

async fn fleet_search(url: &str, q: &str) -> String {
    let mut c = quarry_tests::mcp_client::McpHttp::open(url).await.expect("session");
    let r = c.call("a.search", serde_json::json!({"question": q})).await.expect("call");
    r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}
