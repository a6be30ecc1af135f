//! The fake cluster as a store: its documents (KV) and the Search indexes created over them,
//! driven by the official SDK (couchbase 1.1) the way the host's Couchbase corpus will. Each
//! behaviour here is what the SDK sends and what it makes of the answer (its typed error kinds),
//! so that a difference from a real cluster shows as a failing test here, not as a silent pass
//! elsewhere.

use std::sync::Arc;
use std::time::Duration;

use couchbase::authenticator::PasswordAuthenticator;
use couchbase::cluster::Cluster;
use couchbase::collection::Collection;
use couchbase::management::search::index::SearchIndex;
use couchbase::options::cluster_options::ClusterOptions;
use couchbase::options::kv_options::{RemoveOptions, ReplaceOptions, UpsertOptions};
use couchbase::options::search_options::SearchOptions;
use couchbase::search::queries::{ConjunctionQuery, MatchQuery, NumericRangeQuery, Query, TermQuery};
use couchbase::search::request::SearchRequest;
use couchbase::search::vector::{VectorQuery, VectorSearch};
use futures::StreamExt;
use quarry::capability::couchbase::RawConnection;
use quarry::capability::couchbase::store::{Store, StoreError, VectorField};
use quarry_tests::fakes::couchbase::{self as fc, FakeCluster};
use serde_json::{Value, json};

/// A bounded SDK call: the SDK retries some failures until its own timeout (75 s for KV).
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f).await.expect("the SDK call answered within 20 s")
}

async fn connect(fake: &FakeCluster) -> Cluster {
    let auth = PasswordAuthenticator::new(fc::USERNAME, fc::PASSWORD);
    let cluster =
        bounded(Cluster::connect(fake.connection_string(), ClusterOptions::new(auth.into()))).await.expect("connect");
    bounded(cluster.buckets().get_bucket("travel", None)).await.expect("the bucket exists");
    cluster
}

fn hotels(cluster: &Cluster) -> Collection {
    cluster.bucket("travel").scope("inventory").collection("hotels")
}

fn kind(e: &couchbase::error::Error) -> String {
    format!("{:?}", e.kind())
}

/// Upsert, get, replace and remove with CAS, in a named collection: the CAS each answer carries
/// guards the next write, and a stale one is refused as the SDK's `CasMismatch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_round_trip_with_cas_in_a_named_collection() {
    let fake = FakeCluster::start(fc::standard()).await;
    let cluster = connect(&fake).await;
    let c = hotels(&cluster);
    let doc = json!({"text": "Grand Hotel", "embedding": [1.0, 0.0], "metadata": {"city": "Paris"}});
    let first = bounded(c.upsert("hotel_9", &doc, None)).await.expect("upsert").cas();
    let got = bounded(c.get("hotel_9", None)).await.expect("get");
    assert_eq!(got.cas(), first);
    assert_eq!(got.content_as::<Value>().unwrap(), doc);
    // The key went to the collection it names, by the id GET_COLLECTION_ID gave the SDK.
    assert_eq!(fake.documents("travel", "inventory", "hotels"), vec![("hotel_9".to_string(), doc.clone())]);
    assert!(fake.documents("travel", "_default", "_default").is_empty());
    assert!(fake.seen().iter().any(|s| s.method == "GET_COLLECTION_ID" && s.body["status"] == 0));

    let second = bounded(c.replace("hotel_9", &json!({"v": 2}), ReplaceOptions::new().cas(first)))
        .await
        .expect("replace with the current CAS")
        .cas();
    assert!(second > first, "a mutation's CAS grows: {first} then {second}");
    let stale = bounded(c.replace("hotel_9", &json!({"v": 3}), ReplaceOptions::new().cas(first))).await.unwrap_err();
    assert_eq!(kind(&stale), "CasMismatch", "{stale}");
    let stale = bounded(c.remove("hotel_9", RemoveOptions::new().cas(first))).await.unwrap_err();
    assert_eq!(kind(&stale), "CasMismatch", "{stale}");
    assert_eq!(bounded(c.get("hotel_9", None)).await.unwrap().content_as::<Value>().unwrap(), json!({"v": 2}));
    bounded(c.remove("hotel_9", RemoveOptions::new().cas(second))).await.expect("remove with the current CAS");

    let gone = bounded(c.get("hotel_9", None)).await.unwrap_err();
    assert_eq!(kind(&gone), "DocumentNotFound", "{gone}");
    let gone = bounded(c.remove("hotel_9", None)).await.unwrap_err();
    assert_eq!(kind(&gone), "DocumentNotFound", "{gone}");
    let gone = bounded(c.replace("hotel_9", &json!({}), None)).await.unwrap_err();
    assert_eq!(kind(&gone), "DocumentNotFound", "{gone}");
}

/// Insert takes a key only once (a build lease is taken this way); an expiry makes a document
/// disappear on its own (a lease whose holder died); touch renews it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_is_once_and_an_expiry_ends_a_document() {
    let fake = FakeCluster::start(fc::standard()).await;
    let cluster = connect(&fake).await;
    let c = hotels(&cluster);
    let lease = json!({"holder": "host-a"});
    bounded(c.insert(
        "lease",
        &lease,
        couchbase::options::kv_options::InsertOptions::new().expiry(Duration::from_secs(1)),
    ))
    .await
    .expect("the first insert takes the key");
    let taken = bounded(c.insert("lease", &json!({"holder": "host-b"}), None)).await.unwrap_err();
    assert_eq!(kind(&taken), "DocumentExists", "{taken}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = bounded(c.get("lease", None)).await.unwrap_err();
    assert_eq!(kind(&expired), "DocumentNotFound", "an expired document is gone: {expired}");
    bounded(c.insert("lease", &json!({"holder": "host-b"}), None)).await.expect("free again after its expiry");

    bounded(c.upsert("renewed", &json!({}), UpsertOptions::new().expiry(Duration::from_secs(1)))).await.unwrap();
    bounded(c.touch("renewed", Duration::from_secs(60), None)).await.expect("touch");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    bounded(c.get("renewed", None)).await.expect("touched: it outlives its first expiry");
}

/// A collection the bucket does not have: the SDK asks for its id, gets the server's "unknown
/// collection" (0x88), and asks again, as it would while a new collection spreads over a
/// cluster, until its own timeout: a caller must bound the call, and look the collection up
/// first (the management API's scope listing) to say what is wrong. Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_collection_is_asked_for_again_and_nothing_is_written() {
    let fake = FakeCluster::start(fc::standard()).await;
    let cluster = connect(&fake).await;
    let c = cluster.bucket("travel").scope("inventory").collection("nope");
    let r = tokio::time::timeout(Duration::from_secs(3), c.upsert("k", &json!({}), None)).await;
    assert!(r.is_err(), "the SDK retries an unknown collection: {r:?}");
    let asked: Vec<_> = fake.seen().into_iter().filter(|s| s.method == "GET_COLLECTION_ID").collect();
    assert!(asked.len() >= 2, "asked again: {asked:?}");
    assert!(asked.iter().all(|s| s.body["status"] == 0x88 && s.body["value"] == "inventory.nope"), "{asked:?}");
    assert!(!fake.seen().iter().any(|s| s.method == "SET"), "nothing was sent to write");
    let e = tokio::time::timeout(
        Duration::from_secs(3),
        cluster.bucket("travel").scope("nowhere").collection("c").get("k", None),
    )
    .await;
    assert!(e.is_err());
    assert!(fake.seen().iter().any(|s| s.method == "GET_COLLECTION_ID" && s.body["status"] == 0x8c), "unknown scope");
}

/// A scoped vector index as LangChain's Couchbase store defines one: `text`, a 4-dimensional
/// `embedding` and `metadata`, in collection `inventory.hotels`.
pub(crate) fn langchain_index(name: &str) -> SearchIndex {
    let mapping = json!({
        "default_mapping": {"enabled": false, "dynamic": true},
        "default_type": "_default",
        "type_field": "_type",
        "types": {"inventory.hotels": {"enabled": true, "dynamic": true, "properties": {
            "embedding": {"enabled": true, "dynamic": false, "fields": [
                {"name": "embedding", "type": "vector", "dims": 4, "similarity": "dot_product", "index": true}
            ]},
            "text": {"enabled": true, "dynamic": false, "fields": [
                {"name": "text", "type": "text", "index": true, "store": true}
            ]},
            "metadata": {"enabled": true, "dynamic": true}
        }}}
    });
    let params: std::collections::HashMap<String, Value> = [
        ("doc_config".to_string(), json!({"mode": "scope.collection.type_field", "type_field": "type"})),
        ("mapping".to_string(), mapping),
    ]
    .into();
    SearchIndex::new(name, "fulltext-index").source_name("travel".to_string()).params(params)
}

async fn ids_of(res: &mut couchbase::results::search_results::SearchResult) -> Vec<String> {
    let mut ids = Vec::new();
    let mut rows = res.rows();
    while let Some(row) = rows.next().await {
        ids.push(row.expect("a row").id);
    }
    ids
}

/// An index created through the SDK's index manager is listed, replaced only by its uuid, and
/// searched over the documents written after it: kNN with a prefilter on metadata (a term and a
/// numeric range), and a text match; dropped, it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_made_through_the_sdk_searches_the_documents() {
    let fake = FakeCluster::start(fc::standard()).await;
    let cluster = connect(&fake).await;
    let scope = cluster.bucket("travel").scope("inventory");
    let manager = scope.search_indexes();
    bounded(manager.upsert_index(langchain_index("corpus-vec"), None)).await.expect("create");
    let def = bounded(manager.get_index("corpus-vec", None)).await.expect("get");
    let uuid = def.uuid.clone().expect("the server gave it a uuid");
    let listed = bounded(manager.get_all_indexes(None)).await.expect("list");
    assert!(
        listed.iter().any(|i| i.name.ends_with("corpus-vec")),
        "{:?}",
        listed.iter().map(|i| &i.name).collect::<Vec<_>>()
    );
    // Creating it again without its uuid is refused. The SDK 1.1.0 reports the core's
    // IndexExists as `IndexNotFound` (couchbase/src/error.rs maps one to the other): only the
    // server's text tells them apart, so the corpus looks an index up before it creates one.
    let again = bounded(manager.upsert_index(langchain_index("corpus-vec"), None)).await.unwrap_err();
    assert_eq!(kind(&again), "IndexNotFound", "{again}");
    assert!(again.to_string().contains("an index with the same name already exists"), "{again}");
    bounded(manager.upsert_index(langchain_index("corpus-vec").uuid(uuid.clone()), None))
        .await
        .expect("replace by uuid");
    assert_ne!(bounded(manager.get_index("corpus-vec", None)).await.unwrap().uuid, Some(uuid));

    let c = hotels(&cluster);
    let doc = |text: &str, v: [f32; 4], chapter: &str, generation: u32| json!({"text": text, "embedding": v, "metadata": {"chapter": chapter, "generation": generation}});
    for (id, d) in [
        ("a", doc("bandwidth limits by timetable", [1.0, 0.0, 0.0, 0.0], "90.10", 1)),
        ("b", doc("bandwidth of the connection", [0.9, 0.1, 0.0, 0.0], "90.11", 1)),
        ("c", doc("checksums and hashes", [0.0, 1.0, 0.0, 0.0], "12.1", 2)),
    ] {
        bounded(c.upsert(id, &d, None)).await.unwrap();
    }
    let knn = |filter: Option<Query>| {
        let mut vq = VectorQuery::with_vector("embedding", vec![1.0, 0.0, 0.0, 0.0]).num_candidates(3);
        if let Some(f) = filter {
            vq = vq.prefilter(f);
        }
        SearchRequest::with_vector_search(VectorSearch::new(vec![vq], None))
    };
    let mut all = bounded(scope.search("corpus-vec", knn(None), SearchOptions::new().limit(3))).await.unwrap();
    assert_eq!(ids_of(&mut all).await, ["a", "b", "c"]);
    let generation_1 = NumericRangeQuery::new().field("metadata.generation").max(1.0).inclusive_max(1.0, true);
    let filter = ConjunctionQuery::new(vec![
        Query::Term(TermQuery::new("90.11").field("metadata.chapter")),
        Query::NumericRange(generation_1),
    ]);
    let mut some =
        bounded(scope.search("corpus-vec", knn(Some(Query::Conjunction(filter))), SearchOptions::new().limit(3)))
            .await
            .unwrap();
    assert_eq!(ids_of(&mut some).await, ["b"]);
    let text = SearchRequest::with_search_query(Query::Match(MatchQuery::new("checksums").field("text")));
    let mut words = bounded(scope.search("corpus-vec", text, SearchOptions::new().limit(3))).await.unwrap();
    assert_eq!(ids_of(&mut words).await, ["c"]);
    assert_eq!(bounded(manager.get_indexed_documents_count("corpus-vec", None)).await.unwrap(), 3);

    bounded(manager.drop_index("corpus-vec", None)).await.expect("drop");
    let gone = bounded(manager.get_index("corpus-vec", None)).await.unwrap_err();
    assert_eq!(kind(&gone), "IndexNotFound", "{gone}");
}

/// The rows of a search, id and score.
async fn scored(res: &mut couchbase::results::search_results::SearchResult) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut rows = res.rows();
    while let Some(row) = rows.next().await {
        let row = row.expect("a row");
        out.push((row.id, row.score));
    }
    out
}

/// Text queries are scored with bleve's formulas, worked here by hand: tf-idf on 7.6 (and on
/// 8.0 by default), BM25 where the mapping's `scoring_model` asks for it on 8.0, which a 7.6
/// cluster refuses as an invalid mapping key; a leaf with boost 0 matches without scoring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_queries_score_as_bleve_does() {
    let docs = [
        ("a", "bandwidth limits bandwidth timetable"),
        ("b", "the bandwidth of the connection in use"),
        ("c", "checksums and hashes"),
        ("d", "limits"),
    ];
    let query = || {
        let text = Query::Match(MatchQuery::new("bandwidth limits").field("text"));
        // The corpus's prefilter shape: a numeric range that must hold but, boosted 0, adds nothing.
        let generation = Query::NumericRange(NumericRangeQuery::new().field("metadata.generation").max(9.0).boost(0.0));
        SearchRequest::with_search_query(Query::Conjunction(ConjunctionQuery::new(vec![text, generation])))
    };
    let with_model = |model: Option<&str>| {
        let mut index = langchain_index("words");
        if let Some(m) = model {
            index.params.as_mut().unwrap().get_mut("mapping").unwrap()["scoring_model"] = json!(m);
        }
        index
    };
    let fill = |cluster: couchbase::cluster::Cluster| async move {
        let c = hotels(&cluster);
        for (i, (id, text)) in docs.iter().enumerate() {
            let d = json!({"text": text, "embedding": [1.0, 0.0, 0.0, 0.0], "metadata": {"generation": i}});
            bounded(c.upsert(*id, &d, None)).await.unwrap();
        }
        cluster
    };
    // Four documents; `bandwidth` in a (twice, of 4 terms) and b (once, of 7: the standard
    // analyzer drops `the`, `of`, `in`, so 3 terms); `limits` in a and d (once, 1 term).
    let n = 4.0_f64;
    let expect = |scores: &[(String, f64)], want: &[(&str, f64)]| {
        let got: Vec<(&str, f64)> = scores.iter().map(|(id, s)| (id.as_str(), *s)).collect();
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for ((id, s), (wid, ws)) in got.iter().zip(want) {
            assert_eq!(id, wid, "{got:?} vs {want:?}");
            assert!((s - ws).abs() < 1e-9, "{id}: {s} vs {ws} ({got:?})");
        }
    };

    // tf-idf: idf = 1 + ln(N / (n + 1)), both terms in 2 documents; queryNorm = 1/sqrt(2 idf^2);
    // a term scores sqrt(tf) / sqrt(len) * idf * idf * queryNorm; coord = matched / 2.
    let fake = FakeCluster::start(fc::standard()).await;
    let cluster = connect(&fake).await;
    let manager = cluster.bucket("travel").scope("inventory").search_indexes();
    let refused = bounded(manager.upsert_index(with_model(Some("bm25")), None)).await.unwrap_err();
    assert!(refused.to_string().contains("invalid keys: [scoring_model]"), "{refused}");
    bounded(manager.upsert_index(with_model(None), None)).await.expect("create");
    let cluster = fill(cluster).await;
    let scope = cluster.bucket("travel").scope("inventory");
    let idf = 1.0 + (n / 3.0).ln();
    let qn = 1.0 / (2.0 * idf * idf).sqrt();
    let term = |tf: f64, len: f64| tf.sqrt() / len.sqrt() * idf * idf * qn;
    let mut res = bounded(scope.search("words", query(), SearchOptions::new().limit(10))).await.unwrap();
    expect(
        &scored(&mut res).await,
        &[("a", term(2.0, 4.0) + term(1.0, 4.0)), ("d", term(1.0, 1.0) / 2.0), ("b", term(1.0, 3.0) / 2.0)],
    );

    // BM25 (Couchbase 8.0): idf = ln(1 + (N - n + 0.5) / (n + 0.5)); bleve's average length is
    // ceil(distinct terms / N) = ceil(7 / 4) = 2; still sqrt(tf), still times idf * queryNorm.
    let fake = FakeCluster::start(fc::Spec { version_8: true, ..fc::standard() }).await;
    let cluster = connect(&fake).await;
    let manager = cluster.bucket("travel").scope("inventory").search_indexes();
    bounded(manager.upsert_index(with_model(Some("bm25")), None)).await.expect("8.0 takes scoring_model");
    let cluster = fill(cluster).await;
    let scope = cluster.bucket("travel").scope("inventory");
    let idf = (1.0 + (n - 2.0 + 0.5) / (2.0 + 0.5)).ln();
    let qn = 1.0 / (2.0 * idf * idf).sqrt();
    let (k1, b, avg) = (1.2, 0.75, 2.0);
    let term = |tf: f64, len: f64| {
        let tf = tf.sqrt();
        idf * tf * k1 / (tf + k1 * (1.0 - b + b * len / avg)) * idf * qn
    };
    let mut res = bounded(scope.search("words", query(), SearchOptions::new().limit(10))).await.unwrap();
    expect(
        &scored(&mut res).await,
        &[("a", term(2.0, 4.0) + term(1.0, 4.0)), ("d", term(1.0, 1.0) / 2.0), ("b", term(1.0, 3.0) / 2.0)],
    );
}

/// [`store`] of `travel.inventory.COLLECTION`, each call bounded by `timeout`.
fn store_with_timeout(fake: &FakeCluster, collection: &str, timeout: Duration) -> Store {
    let raw: RawConnection = serde_json::from_value(json!({
        "connection_string": fake.connection_string(), "username": fc::USERNAME, "password": fc::PASSWORD
    }))
    .unwrap();
    let connection = Arc::new(quarry::capability::couchbase::connection(std::path::Path::new("/"), raw).unwrap());
    Store::new(connection, "travel", "inventory", collection, timeout)
}

/// The host's own handle on a collection (the Couchbase corpus's), on the real SDK.
fn store(fake: &FakeCluster, bucket: &str, scope: &str, collection: &str) -> Store {
    let raw: RawConnection = serde_json::from_value(json!({
        "connection_string": fake.connection_string(), "username": fc::USERNAME, "password": fc::PASSWORD
    }))
    .unwrap();
    let connection = Arc::new(quarry::capability::couchbase::connection(std::path::Path::new("/"), raw).unwrap());
    Store::new(connection, bucket, scope, collection, Duration::from_secs(5))
}

/// A missing bucket, scope or collection is named at once (a document call on one would retry
/// until its timeout); a cluster that is not there is `unavailable` within the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_names_what_is_missing() {
    let fake = FakeCluster::start(fc::standard()).await;
    store(&fake, "travel", "inventory", "hotels").check().await.expect("all there");
    for ((b, s, c), want) in [
        (("nope", "inventory", "hotels"), "bucket \"nope\" does not exist"),
        (("travel", "nope", "hotels"), "bucket \"travel\" has no scope \"nope\""),
        (("travel", "inventory", "nope"), "scope travel.inventory has no collection \"nope\""),
    ] {
        let e = store(&fake, b, s, c).check().await.unwrap_err();
        assert!(matches!(&e, StoreError::NotFound(m) if m.contains(want)), "{e:?}");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let raw: RawConnection = serde_json::from_value(json!({
        "connection_string": format!("couchbase://127.0.0.1:{port}"), "username": "u", "password": "p"
    }))
    .unwrap();
    let connection = Arc::new(quarry::capability::couchbase::connection(std::path::Path::new("/"), raw).unwrap());
    let nowhere = Store::new(connection, "travel", "inventory", "hotels", Duration::from_secs(1));
    let started = std::time::Instant::now();
    let e = nowhere.get("k").await.unwrap_err();
    assert!(matches!(&e, StoreError::Unavailable(m) if m.contains("within 1s while connecting")), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Batches are written and read back in order; a write the cluster refuses for now is tried
/// again (by the SDK, until the timeout); removing what is not there is no error; CAS guards a
/// replace and a remove.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_writes_in_batches_and_retries_what_can_wait() {
    let fake = FakeCluster::start(fc::standard()).await;
    let s = store(&fake, "travel", "inventory", "hotels");
    let docs: Vec<(String, Value)> =
        (0..100).map(|i| (format!("chunk-{i:03}"), json!({"text": format!("t{i}")}))).collect();
    fake.fail_writes(3);
    s.upsert_many(&docs).await.expect("temporary failures are tried again");
    assert_eq!(fake.documents("travel", "inventory", "hotels").len(), 100);
    let keys: Vec<String> = ["chunk-007", "missing", "chunk-099"].map(String::from).to_vec();
    let got = s.get_many(&keys).await.unwrap();
    assert_eq!(got[0].as_ref().unwrap().value, json!({"text": "t7"}));
    assert!(got[1].is_none());
    assert_eq!(got[2].as_ref().unwrap().value, json!({"text": "t99"}));

    // Refused for good: the SDK tries again until the timeout, and the store then says so.
    fake.fail_writes(usize::MAX);
    let impatient = store_with_timeout(&fake, "hotels", Duration::from_secs(1));
    let e = impatient.upsert_many(&docs[..1]).await.unwrap_err();
    assert!(matches!(&e, StoreError::Unavailable(m) if m.contains("within 1s while writing")), "{e:?}");
    assert!(fake.seen().iter().filter(|x| x.method == "SET" && x.body["status"] == 0x86).count() > 3);
    fake.fail_writes(0);

    let removed: Vec<String> = (0..50).map(|i| format!("chunk-{i:03}")).chain(["never-there".to_string()]).collect();
    s.remove_many(&removed).await.unwrap();
    assert_eq!(fake.documents("travel", "inventory", "hotels").len(), 50);

    let cas = s.insert("lease", &json!({"holder": "a"}), Some(Duration::from_secs(30))).await.unwrap();
    assert!(matches!(s.insert("lease", &json!({"holder": "b"}), None).await, Err(StoreError::Exists(_))));
    let renewed = s.replace("lease", &json!({"holder": "a"}), cas, Some(Duration::from_secs(30))).await.unwrap();
    assert!(matches!(s.replace("lease", &json!({}), cas, None).await, Err(StoreError::CasMismatch(_))));
    assert!(matches!(s.remove("lease", Some(cas)).await, Err(StoreError::CasMismatch(_))));
    s.remove("lease", Some(renewed)).await.unwrap();
    assert!(matches!(s.remove("lease", None).await, Err(StoreError::NotFound(_))));
    assert_eq!(s.get("lease").await.unwrap(), None);
}

/// The index is made once, found the next time, and refused when it maps another dimension;
/// a search through it finds the written documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_makes_its_index_once_and_checks_it() {
    let fake = FakeCluster::start(fc::standard()).await;
    let s = store(&fake, "travel", "inventory", "hotels");
    let params = |dims: u32| -> std::collections::HashMap<String, Value> {
        let mut p = langchain_index("x").params.unwrap();
        p.get_mut("mapping").unwrap()["types"]["inventory.hotels"]["properties"]["embedding"]["fields"][0]["dims"] =
            json!(dims);
        p
    };
    let vector = |dims: u32| VectorField { path: "embedding".into(), dims, similarity: "dot_product".into() };
    assert!(s.ensure_index("corpus-vec", params(4), &vector(4)).await.unwrap(), "created");
    assert!(!s.ensure_index("corpus-vec", params(4), &vector(4)).await.unwrap(), "found");
    let e = s.ensure_index("corpus-vec", params(8), &vector(8)).await.unwrap_err();
    assert!(matches!(&e, StoreError::Invalid(m) if m.contains("as 4 dimensions by dot_product, not 8")), "{e:?}");
    s.upsert_many(&[
        ("a".to_string(), json!({"text": "alpha", "embedding": [1.0, 0.0, 0.0, 0.0]})),
        ("b".to_string(), json!({"text": "beta", "embedding": [0.0, 1.0, 0.0, 0.0]})),
    ])
    .await
    .unwrap();
    let vq = VectorQuery::with_vector("embedding", vec![0.0, 1.0, 0.0, 0.0]).num_candidates(2);
    let request = SearchRequest::with_vector_search(VectorSearch::new(vec![vq], None));
    let hits = s.search("corpus-vec", request, SearchOptions::new().limit(2)).await;
    let ids: Vec<String> = hits.unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["b", "a"]);
}
