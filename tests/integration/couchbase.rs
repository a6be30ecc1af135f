//! The Couchbase vector search component in the real host, through the host's `couchbase`
//! capability (the official SDK and its core agent), against the local fake cluster
//! (`fakes/couchbase/`): KV bootstrap with a SCRAM-SHA512 exchange that checks the password,
//! the management and Search HTTP services, every request recorded.
//!
//! The toy embedder (4 dimensions here, like the fake's indexes) embeds the queries; the fake
//! ranks its documents by dot product with the vector it receives, so each test computes the
//! expected rows from the recorded request.

use std::time::{Duration, Instant};

use quarry_tests::fakes::couchbase::{self as fc, FakeCluster, QueryBehaviour, Seen};
use quarry_tests::{COUCHBASE_SEARCH, TOY_EMBEDDER, TestEnv, within};
use serde_json::{Value, json};

/// The instance's tool config: CrewAI's keys, pointing at the standard fixture's
/// `travel.inventory.hotels` and its scoped index, with `extra` keys appended.
fn tool_config(extra: &str) -> String {
    format!(
        r#"{{ bucket_name = "travel", scope_name = "inventory", collection_name = "hotels", index_name = "hotels-vec"{extra} }}"#
    )
}

/// A config with connection `local` to the fake, the toy embedder of `dims` dimensions and one
/// instance `hotels`, granted `scopes` with `timeout`.
fn config(fake: &FakeCluster, password: &str, dims: u32, tool: &str, scopes: &str, timeout: &str) -> String {
    config_for(&fake.connection_string(), fc::USERNAME, password, dims, tool, scopes, timeout)
}

/// [`config`] for any cluster.
fn config_for(url: &str, user: &str, password: &str, dims: u32, tool: &str, scopes: &str, timeout: &str) -> String {
    format!(
        r#"
[couchbase.local]
connection_string = "{url}"
username = "{user}"
password = "{password}"

[embedders.toy]
component = "plugins/toy.wasm"
config = {{ dimension = {dims} }}
pool = 1

[tools.hotels]
component = "plugins/couchbase-search.wasm"
embedder = "toy"
config = {tool}
[tools.hotels.grants]
deadline = "30s"
couchbase = {{ connection = "local", scopes = {scopes}, timeout = "{timeout}" }}
"#
    )
}

fn env() -> TestEnv {
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(COUCHBASE_SEARCH, "couchbase-search");
    env
}

/// A loaded host (a newtype, so that `unwrap_err` can print it).
struct Loaded(std::sync::Arc<quarry::Registry>);

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a host whose instances all opened")
    }
}

impl std::ops::Deref for Loaded {
    type Target = quarry::Registry;
    fn deref(&self) -> &quarry::Registry {
        &self.0
    }
}

/// Loads `body`; the instance's open error as `kind: message`, or the host.
async fn load(env: &TestEnv, body: &str) -> Result<Loaded, String> {
    let cfg = quarry::Config::load(&env.config(body)).expect("valid config");
    let host = quarry::Registry::new(cfg).expect("host");
    let failures = within(60, host.load_all()).await;
    match failures.into_iter().next() {
        None => Ok(Loaded(host)),
        Some((_, e)) => Err(e.to_string()),
    }
}

async fn search(host: &quarry::Registry, args: Value) -> Result<quarry::bindings::ToolOutput, String> {
    within(60, host.call("hotels.search", &args.to_string())).await.map_err(|e| e.to_string())
}

/// The Search queries the fake received.
fn queries(fake: &FakeCluster) -> Vec<Seen> {
    fake.seen().into_iter().filter(|s| s.service == "fts" && s.path.ends_with("/query")).collect()
}

/// The fixture's documents that pass `keep`, ranked as the fake ranks them for `vector`
/// (dot product, then id), at most `n`: their fields.
fn expected(vector: &[f32], n: usize, keep: impl Fn(&fc::Doc) -> bool) -> Vec<Value> {
    let spec = fc::standard();
    let idx = spec.indexes.iter().find(|i| i.name == "hotels-vec").unwrap();
    let mut docs: Vec<(f32, &fc::Doc)> = idx
        .docs
        .iter()
        .filter(|d| keep(d))
        .map(|d| (d.vector.iter().zip(vector).map(|(a, b)| a * b).sum(), d))
        .collect();
    docs.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
    docs.into_iter().take(n).map(|(_, d)| Value::Object(d.fields.clone())).collect()
}

fn knn_vector(body: &Value) -> Vec<f32> {
    body["knn"][0]["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_search_bootstraps_with_scram_and_sends_crewais_query() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = env();
    let host =
        load(&env, &config(&fake, fc::PASSWORD, 4, &tool_config(""), r#"["travel.inventory"]"#, "5s")).await.unwrap();
    let out = search(&host, json!({"query": "a quiet hotel by the sea"})).await.unwrap();

    // The KV bootstrap the SDK runs, and a password the server really checked.
    let kv: Vec<(String, u64)> = fake
        .seen()
        .iter()
        .filter(|s| s.service == "kv")
        .map(|s| (s.method.clone(), s.body["status"].as_u64().unwrap_or(99)))
        .collect();
    for op in ["HELLO", "GET_ERROR_MAP", "SASL_LIST_MECHS", "SASL_AUTH", "SASL_STEP", "GET_CLUSTER_CONFIG"] {
        assert!(kv.iter().any(|(m, _)| m == op), "no {op} in {kv:?}");
    }
    assert!(kv.iter().any(|(m, st)| m == "SASL_STEP" && *st == 0), "SCRAM succeeded: {kv:?}");
    let http: Vec<String> =
        fake.seen().iter().filter(|s| s.service != "kv").map(|s| format!("{} {}", s.method, s.path)).collect();
    for want in [
        "GET /pools/default/buckets/travel",
        "GET /pools/default/buckets/travel/scopes",
        "GET /api/bucket/travel/scope/inventory/index/",
        "POST /api/bucket/travel/scope/inventory/index/hotels-vec/query",
    ] {
        assert!(http.iter().any(|h| h == want), "no {want} in {http:?}");
    }
    assert!(fake.seen().iter().filter(|s| s.service != "kv").all(|s| s.authenticated));
    // The bucket is looked up once (the SDK hangs on a missing one), not before every request.
    assert_eq!(http.iter().filter(|h| *h == "GET /pools/default/buckets/travel").count(), 1, "{http:?}");

    // CrewAI's query: k = size = limit (3), every stored field, no filter.
    let q = queries(&fake);
    assert_eq!(q.len(), 1);
    let v = knn_vector(&q[0].body);
    assert_eq!(v.len(), 4);
    assert_eq!(
        q[0].body,
        json!({"fields": ["*"], "query": {"match_none": null}, "showrequest": false, "size": 3,
               "knn": [{"field": "embedding", "k": 3, "vector": q[0].body["knn"][0]["vector"]}]})
    );

    // CrewAI's text: the rows' fields, best first, as json.dumps(indent=2).
    let text: Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(text, Value::Array(expected(&v, 3, |_| true)));
    assert!(out.text.starts_with("[\n  {\n    \""), "{}", out.text);
    assert_eq!(out.hits.len(), 3);
    let first: Value = serde_json::from_str(&out.hits[0].metadata).unwrap();
    assert_eq!(first["fields"], text[0]);
    assert!(out.hits[0].source.as_deref().unwrap().starts_with("travel.inventory.hotels/hotel_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefilter_is_sent_as_the_knn_filter_and_applied() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = env();
    let host =
        load(&env, &config(&fake, fc::PASSWORD, 4, &tool_config(", limit = 5"), r#"["travel.inventory"]"#, "5s"))
            .await
            .unwrap();
    let out =
        search(&host, json!({"query": "somewhere to stay", "prefilter": "+city:london stars:>=3"})).await.unwrap();
    let q = queries(&fake);
    assert_eq!(q[0].body["knn"][0]["filter"], json!({"query": "+city:london stars:>=3"}));
    assert_eq!((q[0].body["size"].as_u64(), q[0].body["knn"][0]["k"].as_u64()), (Some(5), Some(5)));
    let text: Value = serde_json::from_str(&out.text).unwrap();
    let want = expected(&knn_vector(&q[0].body), 5, |d| d.fields["city"] == "London");
    assert!(!want.is_empty());
    assert_eq!(text, Value::Array(want));

    // A prefilter the server cannot parse is the server's error, in CrewAI's words.
    let e = search(&host, json!({"query": "x", "prefilter": "city:\"unterminated"})).await.unwrap_err();
    assert!(e.contains("Search failed with error: ") && e.contains("unterminated"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_level_index_goes_through_the_core_agent() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = env();
    let cfg = tool_config(", scoped_index = false").replace("hotels-vec", "travel-vec");
    let host = load(&env, &config(&fake, fc::PASSWORD, 4, &cfg, r#"["travel.*"]"#, "5s")).await.unwrap();
    let out = search(&host, json!({"query": "city break", "prefilter": "-city:paris"})).await.unwrap();
    let http: Vec<String> =
        fake.seen().iter().filter(|s| s.service == "fts").map(|s| format!("{} {}", s.method, s.path)).collect();
    // Listed once, at open: the search reuses what the listing said about the index's bucket.
    assert_eq!(http.iter().filter(|h| *h == "GET /api/index/").count(), 1, "{http:?}");
    assert!(!http.iter().any(|h| h.contains("/scope/")), "no scoped request: {http:?}");
    let q = queries(&fake);
    assert_eq!(q.last().unwrap().path, "/api/index/travel-vec/query");
    let body = &q.last().unwrap().body;
    assert_eq!((body["size"].as_u64(), body["knn"][0]["k"].as_u64()), (Some(3), Some(3)));
    assert_eq!(body["fields"], json!(["*"]));
    assert_eq!(body["knn"][0]["filter"], json!({"query": "-city:paris"}));
    let text: Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(text, Value::Array(expected(&knn_vector(body), 3, |d| d.fields["city"] != "Paris")));

    // Without a whole bucket granted, cluster-level indexes are refused, and nothing is listed.
    let fake2 = FakeCluster::start(fc::standard()).await;
    let e = load(&env, &config(&fake2, fc::PASSWORD, 4, &cfg, r#"["travel.inventory"]"#, "5s")).await.unwrap_err();
    assert!(e.contains("denied") && e.contains("\"BUCKET.*\""), "{e}");
    assert!(!fake2.seen().iter().any(|s| s.path == "/api/index/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_bucket_scope_collection_and_index_have_crewais_messages() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = env();
    let cases = [
        (
            tool_config("").replace("\"travel\"", "\"nope\""),
            r#"["nope.inventory"]"#,
            "Bucket nope does not exist.  Please create the bucket before searching.",
        ),
        (
            tool_config("").replace("\"inventory\"", "\"tenants\""),
            r#"["travel.*"]"#,
            "Scope tenants not found in Couchbase bucket travel",
        ),
        (
            tool_config("").replace("\"hotels\"", "\"cars\""),
            r#"["travel.inventory"]"#,
            "Collection cars not found in scope inventory in Couchbase bucket travel",
        ),
        (
            tool_config("").replace("hotels-vec", "missing-vec"),
            r#"["travel.inventory"]"#,
            "Index missing-vec does not exist.  Please create the index before searching.",
        ),
        (
            // The scoped index is not a cluster-level one.
            tool_config(", scoped_index = false"),
            r#"["travel.*"]"#,
            "Index hotels-vec does not exist.  Please create the index before searching.",
        ),
    ];
    for (tool, scopes, want) in cases {
        let e = load(&env, &config(&fake, fc::PASSWORD, 4, &tool, scopes, "5s")).await.unwrap_err();
        assert!(e.contains(&format!("not-found: {want}")), "{want}\n got: {e}");
    }
    assert!(queries(&fake).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_within_the_timeout_scoped_and_cluster_level() {
    let env = env();
    for (tool, scopes) in [
        (tool_config(""), r#"["travel.inventory"]"#),
        (tool_config(", scoped_index = false").replace("hotels-vec", "travel-vec"), r#"["travel.*"]"#),
    ] {
        let fake = FakeCluster::start(fc::standard()).await;
        let start = Instant::now();
        let e = load(&env, &config(&fake, "not-the-password", 4, &tool, scopes, "2s")).await.unwrap_err();
        let took = start.elapsed();
        assert!(
            e.contains("Error connecting to couchbase. Please check the connection and credentials: no answer")
                && e.contains("within 2s while connecting: check that the cluster is up and that user \"quarry\""),
            "{e}"
        );
        assert!(took < Duration::from_secs(8), "gave up after {took:?}");
        // The server refused the proof (status 0x20), and no HTTP service was reached.
        assert!(fake.seen().iter().any(|s| s.method == "SASL_STEP" && s.body["status"] == 0x20), "{:?}", fake.seen());
        assert!(!fake.seen().iter().any(|s| s.service != "kv"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_failures_read_as_crewais_scoped_and_cluster_level() {
    for (tool, scopes) in [
        (tool_config(""), r#"["travel.inventory"]"#),
        (tool_config(", scoped_index = false").replace("hotels-vec", "travel-vec"), r#"["travel.*"]"#),
    ] {
        let fake = FakeCluster::start(fc::standard()).await;
        let env = env();
        let host = load(&env, &config(&fake, fc::PASSWORD, 4, &tool, scopes, "2s")).await.unwrap();
        assert!(search(&host, json!({"query": "x"})).await.is_ok());

        fake.set_query_behaviour(QueryBehaviour::Status500);
        let e = search(&host, json!({"query": "x"})).await.unwrap_err();
        assert!(e.contains("upstream: Search failed with error: ") && e.contains("500"), "{e}");

        fake.set_query_behaviour(QueryBehaviour::DropMidResponse);
        let e = search(&host, json!({"query": "x"})).await.unwrap_err();
        assert!(e.contains("upstream: Search failed with error: "), "{e}");

        fake.set_query_behaviour(QueryBehaviour::Slow(Duration::from_secs(30)));
        let start = Instant::now();
        let e = search(&host, json!({"query": "x"})).await.unwrap_err();
        assert!(
            e.contains("Search failed with error: no answer from Couchbase") && e.contains("within 2s while searching"),
            "{e}"
        );
        assert!(start.elapsed() < Duration::from_secs(6), "{:?}", start.elapsed());

        // The instance still serves once the cluster recovers.
        fake.set_query_behaviour(QueryBehaviour::Normal);
        assert!(search(&host, json!({"query": "x"})).await.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dimension_mismatch_is_refused_at_open() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = env();
    let e = load(&env, &config(&fake, fc::PASSWORD, 8, &tool_config(""), r#"["travel.inventory"]"#, "5s"))
        .await
        .unwrap_err();
    assert!(
        e.contains("Index hotels-vec field `embedding` holds 4-dimensional vectors")
            && e.contains("makes 8-dimensional ones"),
        "{e}"
    );
    let e = load(
        &env,
        &config(&fake, fc::PASSWORD, 4, &tool_config(", embedding_key = \"vec\""), r#"["travel.inventory"]"#, "5s"),
    )
    .await
    .unwrap_err();
    assert!(e.contains("no vector field `vec`") && e.contains("embedding (4 dims)"), "{e}");
    assert!(queries(&fake).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_limits_buckets_and_scopes() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = env();
    let e = load(&env, &config(&fake, fc::PASSWORD, 4, &tool_config(""), r#"["other.inventory"]"#, "5s"))
        .await
        .unwrap_err();
    assert!(e.contains("denied: bucket \"travel\" is not in this instance's grants.couchbase.scopes"), "{e}");
    let e =
        load(&env, &config(&fake, fc::PASSWORD, 4, &tool_config(""), r#"["travel.tenants"]"#, "5s")).await.unwrap_err();
    assert!(e.contains("denied: scope travel.inventory is not in this instance's grants"), "{e}");
    // No grant at all: the capability answers `denied`, naming what to add.
    let ungranted: String = config(&fake, fc::PASSWORD, 4, &tool_config(""), r#"["travel.inventory"]"#, "5s")
        .lines()
        .filter(|l| !l.starts_with("couchbase = {"))
        .map(|l| format!("{l}\n"))
        .collect();
    let e = load(&env, &ungranted).await.unwrap_err();
    assert!(e.contains("denied: this instance has no Couchbase grant; add [tools.NAME.grants.couchbase]"), "{e}");
    assert!(!fake.seen().iter().any(|s| s.service == "fts"), "nothing searched or listed");
}

/// Against a real cluster, when `QUARRY_TEST_COUCHBASE_URL` and its companions are set:
/// `_USERNAME`, `_PASSWORD`, `_BUCKET`, `_SCOPE`, `_COLLECTION`, `_INDEX` (a vector index with
/// an `embedding` field), and optionally `_DIMS`, that field's dimension (default 4): the toy
/// embedder makes vectors of it, so this checks the wire and the checks, not relevance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cluster_when_configured() {
    let var = |k: &str| std::env::var(format!("QUARRY_TEST_COUCHBASE_{k}")).ok().filter(|v| !v.is_empty());
    let names = ["URL", "USERNAME", "PASSWORD", "BUCKET", "SCOPE", "COLLECTION", "INDEX"];
    let Some(vals) = names.iter().map(|k| var(k)).collect::<Option<Vec<_>>>() else {
        eprintln!(
            "skipped: set QUARRY_TEST_COUCHBASE_{{{}}} to run this test against a real Couchbase cluster",
            names.join(",")
        );
        return;
    };
    let dims: u32 = var("DIMS").map_or(4, |d| d.parse().expect("QUARRY_TEST_COUCHBASE_DIMS is a number"));
    let env = env();
    let tool = format!(
        r#"{{ bucket_name = "{}", scope_name = "{}", collection_name = "{}", index_name = "{}" }}"#,
        vals[3], vals[4], vals[5], vals[6]
    );
    let scopes = format!(r#"["{}.{}"]"#, vals[3], vals[4]);
    let body = config_for(&vals[0], &vals[1], &vals[2], dims, &tool, &scopes, "20s");
    let host = load(&env, &body).await.unwrap();
    let out = search(&host, json!({"query": "anything"})).await.unwrap();
    let rows: Value = serde_json::from_str(&out.text).unwrap();
    assert!(rows.is_array(), "{}", out.text);
}

/// A config for the hostile component with a Couchbase grant of `scopes` on the fake, and
/// `extra` grants.
fn hostile_config(fake: &FakeCluster, scopes: &str, extra: &str) -> String {
    format!(
        r#"
[couchbase.local]
connection_string = "{}"
username = "{}"
password = "{}"

[tools.h]
component = "plugins/hostile.wasm"
[tools.h.grants]
deadline = "30s"
couchbase = {{ connection = "local", scopes = {scopes}, timeout = "5s" }}
{extra}
"#,
        fake.connection_string(),
        fc::USERNAME,
        fc::PASSWORD
    )
}

async fn hostile_call(host: &quarry::Registry, tool: &str, args: Value) -> Result<String, (String, String)> {
    match within(60, host.call(tool, &args.to_string())).await {
        Ok(out) => Ok(out.text),
        Err(quarry::CallError::Tool { error, .. }) => {
            let (kind, msg) = error.parts();
            Err((kind.to_string(), msg.to_string()))
        }
        Err(e) => panic!("{tool}: {e}"),
    }
}

/// Names a guest chooses reach the Search service's request paths: none can steer a request
/// outside the granted scope, whatever the URL parser would make of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_cannot_steer_a_request_outside_the_grant() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::new();
    env.plugin(quarry_tests::HOSTILE, "hostile");
    let host = load(&env, &hostile_config(&fake, r#"["travel.inventory"]"#, "")).await.unwrap();
    let steering = [
        "../../../../../index/travel-vec",
        "hotels-vec/../../../../../index/travel-vec",
        "%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/index/travel-vec",
        "..%2f..%2f..%2f..%2f..%2findex%2ftravel-vec",
        "../../../../travel/scope/_default/index/x",
        "hotels-vec?x=1",
        "hotels-vec#fragment",
        "..",
        "",
    ];
    for index in steering {
        let e = hostile_call(&host, "h.cb_search", json!({"bucket": "travel", "scope": "inventory", "index": index}))
            .await
            .unwrap_err();
        assert!(e.0 == "invalid-args" && e.1.contains("invalid-request: index name"), "{index:?}: {e:?}");
        // Cluster-level, the same names are refused too.
        let e = hostile_call(&host, "h.cb_search", json!({"index": index})).await.unwrap_err();
        assert!(e.0 == "invalid-args" || e.0 == "denied", "{index:?}: {e:?}");
    }
    for (bucket, scope) in [("travel", "../../../other/scope/x"), ("../travel", "inventory"), ("travel", "in%76entory")]
    {
        let e = hostile_call(&host, "h.cb_search", json!({"bucket": bucket, "scope": scope, "index": "hotels-vec"}))
            .await
            .unwrap_err();
        assert!(e.0 == "invalid-args" && e.1.contains("invalid-request"), "{bucket}.{scope}: {e:?}");
    }
    // More rows than the Search service's window is refused before anything is sent.
    let e = hostile_call(
        &host,
        "h.cb_search",
        json!({"bucket": "travel", "scope": "inventory", "index": "hotels-vec", "limit": 20000}),
    )
    .await
    .unwrap_err();
    assert!(e.1.contains("at most 10000"), "{e:?}");

    // With the whole bucket granted, the scope is free: it still cannot be a path.
    let env2 = TestEnv::new();
    env2.plugin(quarry_tests::HOSTILE, "hostile");
    let whole = load(&env2, &hostile_config(&fake, r#"["travel.*"]"#, "")).await.unwrap();
    for scope in ["../../../../index", "inventory/../../../../index/travel-vec", "inventory?x"] {
        let e = hostile_call(&whole, "h.cb_indexes", json!({"bucket": "travel", "scope": scope})).await.unwrap_err();
        assert!(e.0 == "invalid-args" && e.1.contains("invalid-request: scope name"), "{scope:?}: {e:?}");
    }

    // Every Search request any of this made stayed inside the granted scope: it is the raw
    // path the fake received (before it decodes anything), the one search that follows.
    assert_eq!(
        hostile_call(&host, "h.cb_search", json!({"bucket": "travel", "scope": "inventory", "index": "hotels-vec"}))
            .await,
        Ok("3 rows".into())
    );
    let fts: Vec<String> = fake.seen().into_iter().filter(|s| s.service == "fts").map(|s| s.path).collect();
    assert!(!fts.is_empty());
    for path in &fts {
        assert!(
            path.starts_with("/api/bucket/travel/scope/inventory/index/hotels-vec"),
            "a request left the grant: {path} (all: {fts:?})"
        );
    }
}

/// A scoped `docs.s1.idx` on a bucket granted whole does not authorise a cluster-level index
/// also called `idx` on a bucket the grant does not name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_level_indexes_are_granted_by_their_full_name() {
    let mut spec = fc::standard();
    let docs = spec.indexes[0].docs.clone();
    spec.buckets.push(fc::BucketSpec {
        name: "docs".into(),
        scopes: vec![("s1".into(), vec!["c1".into()]), ("_default".into(), vec!["_default".into()])],
    });
    spec.buckets
        .push(fc::BucketSpec { name: "secret".into(), scopes: vec![("_default".into(), vec!["_default".into()])] });
    let index = |bucket: &str, scope: Option<&str>| fc::IndexSpec {
        name: "idx".into(),
        bucket: bucket.into(),
        scope: scope.map(str::to_string),
        collection: scope.map(|_| "c1".to_string()),
        field: "embedding".into(),
        dims: 4,
        docs: docs.clone(),
    };
    spec.indexes.push(index("docs", Some("s1")));
    spec.indexes.push(index("secret", None));
    spec.cluster_lists_scoped = true;
    let fake = FakeCluster::start(spec).await;
    let env = TestEnv::new();
    env.plugin(quarry_tests::HOSTILE, "hostile");
    let host = load(&env, &hostile_config(&fake, r#"["docs.*"]"#, "")).await.unwrap();
    let e = hostile_call(&host, "h.cb_search", json!({"index": "idx"})).await.unwrap_err();
    assert_eq!(e.0, "not-found", "{e:?}");
    assert!(e.1.contains("no cluster-level search index \"idx\" on a bucket granted whole"), "{e:?}");
    let queried: Vec<String> =
        fake.seen().into_iter().filter(|s| s.service == "fts" && s.path.ends_with("/query")).map(|s| s.path).collect();
    assert!(queried.is_empty(), "{queried:?}");
    // The scoped index, named as the cluster lists it, is what the grant allows.
    assert_eq!(hostile_call(&host, "h.cb_search", json!({"index": "docs.s1.idx"})).await, Ok("3 rows".into()));
    let queried: Vec<String> =
        fake.seen().into_iter().filter(|s| s.service == "fts" && s.path.ends_with("/query")).map(|s| s.path).collect();
    assert_eq!(queried, ["/api/index/docs.s1.idx/query"]);
}

/// Rows are collected in the host before the guest sees them: they stop at `max_output`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_stop_at_the_output_grant() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::new();
    env.plugin(quarry_tests::HOSTILE, "hostile");
    let host = load(&env, &hostile_config(&fake, r#"["travel.inventory"]"#, "max_output = \"300\"")).await.unwrap();
    let e = hostile_call(
        &host,
        "h.cb_search",
        json!({"bucket": "travel", "scope": "inventory", "index": "hotels-vec", "limit": 5}),
    )
    .await
    .unwrap_err();
    assert!(e.1.contains("more than grants.max_output (300 bytes) of rows"), "{e:?}");
    assert_eq!(
        hostile_call(
            &host,
            "h.cb_search",
            json!({"bucket": "travel", "scope": "inventory", "index": "hotels-vec", "limit": 1})
        )
        .await,
        Ok("1 rows".into())
    );
}
