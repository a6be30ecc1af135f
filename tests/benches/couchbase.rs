//! Couchbase vector search benchmark, against the local fake cluster (`fakes/couchbase/`), side
//! by side in one run:
//!
//! - the SDK alone: `scope.search` with a fixed vector, rows read (what a native tool costs);
//! - the component in the host, scoped index: embed the query (toy embedder), cross into the
//!   sandbox and back through the `couchbase` capability, print CrewAI's text;
//! - the same, cluster-level index (the core agent; the index's bucket is checked per call).
//!
//! The fake answers in microseconds, so the figures are client-side costs, not a server's.
//! Run with `make bench-couchbase` (or `cargo bench -p quarry-tests --bench couchbase`).

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
}
