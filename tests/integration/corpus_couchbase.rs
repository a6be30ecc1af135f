//! The Couchbase corpus backend (`quarry_corpus::couchbase`) on the real SDK against the fake
//! cluster: the same answers as a local corpus given the same commits; readers that see a commit
//! whole or not at all, also when it fails half-way; the next commit clearing what a failed one
//! left (and keeping what it writes again); one writer at a time, and a lease that expires when
//! its holder stops renewing it.

use std::sync::Arc;
use std::time::Duration;

use quarry::capability::couchbase::RawConnection;
use quarry::capability::couchbase::store::Store;
use quarry_corpus::couchbase::{CorpusError, CouchbaseCorpus};
use quarry_corpus::{Change, Clause, Filter, LocalCorpus, Match, Metric, Record, Shape};
use quarry_tests::fakes::couchbase::{self as fc, FakeCluster};
use quarry_tests::{COUCHBASE_SEARCH, TestEnv, chapter_rag_on_corpus, routed_passages, small_manual, within};
use serde_json::json;

const SHAPE: Shape = Shape { dimension: 4, metric: Metric::Cosine };

fn store(fake: &FakeCluster, timeout: Duration) -> Store {
    let raw: RawConnection = serde_json::from_value(json!({
        "connection_string": fake.connection_string(), "username": fc::USERNAME, "password": fc::PASSWORD
    }))
    .unwrap();
    let connection = Arc::new(quarry::capability::couchbase::connection(std::path::Path::new("/"), raw).unwrap());
    Store::new(connection, "travel", "inventory", "hotels", timeout)
}

async fn open(fake: &FakeCluster) -> CouchbaseCorpus {
    CouchbaseCorpus::open("manual", store(fake, Duration::from_secs(20)), "quarry-manual", SHAPE).await.unwrap()
}

fn chunk(id: &str, text: &str, v: [f32; 4], chapter: &str) -> Change {
    Change::Upsert(Record {
        id: id.into(),
        text: text.into(),
        vector: v.to_vec(),
        metadata: format!("{{\"chapter\":\"{chapter}\"}}"),
        fields: [("chapter".to_string(), vec![chapter.to_string()])].into(),
    })
}

fn manual() -> Vec<Change> {
    vec![
        chunk("a", "bandwidth limits by timetable", [1.0, 0.0, 0.0, 0.0], "90.10"),
        chunk("b", "bandwidth of the connection", [0.9, 0.1, 0.0, 0.0], "90.11"),
        chunk("c", "checksums and hashes", [0.0, 1.0, 0.0, 0.0], "12.1"),
        chunk("d", "transfers in parallel", [0.0, 0.0, 1.0, 0.0], "12.2"),
    ]
}

fn ids(found: &[quarry_corpus::Found]) -> Vec<&str> {
    found.iter().map(|f| f.id.as_str()).collect()
}

fn under(prefix: &str) -> Filter {
    Filter::all().and(Clause { field: "chapter".into(), values: vec![prefix.into()], how: Match::Prefix })
}

/// Committed the same chunks, a Couchbase corpus and a local one give the same generation,
/// count, notes, kNN order, filtered results, chunks and listing; its documents are in the shape
/// LangChain's store reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_couchbase_corpus_answers_as_a_local_one() {
    let fake = FakeCluster::start(fc::standard()).await;
    let remote = open(&fake).await;
    let lease = remote.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCorpus::open(dir.path(), SHAPE).unwrap();
    let notes = Some(r#"{"built":"yes"}"#.to_string());
    assert_eq!(remote.commit(&lease, manual(), notes.clone()).await.unwrap(), 1);
    assert_eq!(local.commit(manual(), notes).unwrap(), 1);
    let g = local.snapshot().unwrap();

    let info = remote.info().await.unwrap();
    assert_eq!((info.generation, info.chunks, info.notes.as_str()), (1, 4, r#"{"built":"yes"}"#));
    let q = [0.8, 0.3, 0.1, 0.0];
    let want = g.nearest(&q, 3, &Filter::all()).unwrap();
    let got = remote.nearest(&q, 3, &Filter::all()).await.unwrap();
    assert_eq!(ids(&got), ids(&want));
    for (a, b) in got.iter().zip(&want) {
        assert!((a.score - b.score).abs() < 1e-4, "{a:?} {b:?}");
    }
    for f in [Filter::exact("chapter", "90.11"), under("12."), under("90.1"), Filter::exact("chapter", "none")] {
        assert_eq!(ids(&remote.nearest(&q, 4, &f).await.unwrap()), ids(&g.nearest(&q, 4, &f).unwrap()), "{f:?}");
        assert_eq!(remote.list(&f, 0, 10).await.unwrap(), g.list(&f, 0, 10).unwrap(), "{f:?}");
    }
    let words = remote.keyword("checksums", Some(&[0.0, 1.0, 0.0, 0.0]), 3, &Filter::all()).await.unwrap();
    assert_eq!(ids(&words), ["c"]);
    assert!((words[0].similarity.unwrap() - 1.0).abs() < 1e-5, "{words:?}");
    // Keyword scores are the local BM25's, whatever the Search service's own text scoring: the
    // same order and scores, with and without a filter.
    for (query, f) in [("bandwidth limits", Filter::all()), ("bandwidth", under("90.1")), ("the hashes", Filter::all())]
    {
        let want = g.keyword(query, None, 4, &f).unwrap();
        let got = remote.keyword(query, None, 4, &f).await.unwrap();
        assert_eq!(ids(&got), ids(&want), "{query:?} {f:?}");
        for (a, b) in got.iter().zip(&want) {
            assert!((a.score - b.score).abs() < 1e-5, "{query:?}: {a:?} vs {b:?}");
        }
    }
    // Each term a Couchbase corpus has not counted is a Search request: a query of more distinct
    // terms than it counts is refused, saying so, before any is sent.
    let searches = |fake: &FakeCluster| fake.seen().iter().filter(|s| s.service == "fts").count();
    let before = searches(&fake);
    let long: Vec<String> = (0..300).map(|i| format!("word{i}")).collect();
    let e = remote.keyword(&long.join(" "), None, 4, &Filter::all()).await.unwrap_err();
    assert!(
        matches!(&e, CorpusError::Invalid(m) if m.contains("300 distinct terms") && m.contains("at most 256")),
        "{e:?}"
    );
    assert_eq!(searches(&fake), before);
    let asked: Vec<String> = ["b", "zz", "d"].map(String::from).to_vec();
    assert_eq!(remote.get(&asked).await.unwrap(), g.get(&asked).unwrap());
    assert_eq!(remote.list(&Filter::all(), 1, 2).await.unwrap(), g.list(&Filter::all(), 1, 2).unwrap());

    let docs = fake.documents("travel", "inventory", "hotels");
    let (_, b) = docs.iter().find(|(k, _)| k == "b").unwrap();
    assert_eq!(b["text"], "bandwidth of the connection");
    assert_eq!(b["metadata"], json!({"chapter": "90.11"}));
    assert_eq!(b["embedding"].as_array().unwrap().len(), 4);
    assert!(docs.iter().any(|(k, _)| k == "_quarry::manifest"));
}

/// A commit whose flip fails leaves readers on the generation before it, whole; the next commit
/// clears what it wrote and marked, keeps what it writes again unchanged, and removes what the
/// commit before it removed one generation later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_half_a_commit() {
    let fake = FakeCluster::start(fc::standard()).await;
    let corpus = open(&fake).await;
    let lease = corpus.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
    corpus.commit(&lease, manual(), None).await.unwrap();
    let q = [1.0, 0.0, 0.0, 0.0];
    let before = corpus.nearest(&q, 10, &Filter::all()).await.unwrap();

    // Generation 2 would add e, rewrite b and remove a; its flip is refused.
    let edit = vec![
        chunk("e", "a new chapter", [0.7, 0.7, 0.0, 0.0], "13.1"),
        chunk("b", "bandwidth of the connection, edited", [0.9, 0.1, 0.0, 0.0], "90.11"),
        Change::Remove("a".into()),
    ];
    let impatient =
        CouchbaseCorpus::open("manual", store(&fake, Duration::from_secs(3)), "quarry-manual", SHAPE).await.unwrap();
    fake.fail_writes_to(Some("_quarry::manifest"));
    let e = impatient.commit(&lease, edit.clone(), None).await.unwrap_err();
    assert!(matches!(e, CorpusError::Unavailable(_)), "{e:?}");
    fake.fail_writes_to(None);
    assert!(fake.documents("travel", "inventory", "hotels").iter().any(|(k, _)| k == "e"), "e was written");
    assert_eq!(corpus.info().await.unwrap().generation, 1);
    assert_eq!(corpus.nearest(&q, 10, &Filter::all()).await.unwrap(), before, "generation 1, whole");
    let old_b = corpus.get(&["b".to_string()]).await.unwrap();
    assert_eq!(old_b[0].as_ref().unwrap().text, "bandwidth of the connection");

    // The next commit writes e again (kept, not rewritten) but neither b's edit nor a's removal.
    let sets_of_e = |fake: &FakeCluster| fake.seen().iter().filter(|s| s.method == "SET" && s.path == "e").count();
    let written = sets_of_e(&fake);
    let again = vec![chunk("e", "a new chapter", [0.7, 0.7, 0.0, 0.0], "13.1")];
    assert_eq!(corpus.commit(&lease, again, None).await.unwrap(), 2);
    assert_eq!(sets_of_e(&fake), written, "e was resumed, not written again");
    let listed = corpus.list(&Filter::all(), 0, 10).await.unwrap();
    assert_eq!(listed, ["a", "b", "c", "d", "e"]);
    let b = corpus.get(&["b".to_string()]).await.unwrap();
    assert_eq!(b[0].as_ref().unwrap().text, "bandwidth of the connection", "the failed edit left no trace");
    assert!(!fake.documents("travel", "inventory", "hotels").iter().any(|(k, _)| k.contains("@@")));
    assert_eq!(corpus.info().await.unwrap().chunks, 5);

    // Now the edit for real: b moves to a new key, a is removed, and deleted a commit later.
    assert_eq!(corpus.commit(&lease, edit, None).await.unwrap(), 3);
    assert_eq!(corpus.list(&Filter::all(), 0, 10).await.unwrap(), ["b", "c", "d", "e"]);
    let b = corpus.get(&["b".to_string(), "a".to_string()]).await.unwrap();
    assert_eq!(b[0].as_ref().unwrap().text, "bandwidth of the connection, edited");
    assert!(b[1].is_none());
    assert_eq!(ids(&corpus.nearest(&q, 2, &Filter::all()).await.unwrap()), ["b", "e"]);
    let keys = |fake: &FakeCluster| fake.documents("travel", "inventory", "hotels").into_iter().map(|(k, _)| k);
    assert!(keys(&fake).any(|k| k == "a"), "kept one generation for readers still on 2");
    assert!(keys(&fake).any(|k| k == "b@@3"));
    corpus.commit(&lease, vec![], None).await.unwrap();
    assert!(!keys(&fake).any(|k| k == "a" || k == "b"), "gone a generation later");
    assert_eq!(corpus.info().await.unwrap().chunks, 4);
    // Where b lives is b's own document, not the manifest's (which every reader and commit
    // reads, and stays its size); removed, b is not found through it.
    let doc = |fake: &FakeCluster, key: &str| {
        fake.documents("travel", "inventory", "hotels").into_iter().find(|(k, _)| k == key).map(|d| d.1)
    };
    assert_eq!(doc(&fake, "_quarry::moved::b"), Some(json!({"moved": {"key": "b@@3", "previous": null, "gen": 3}})));
    assert_eq!(doc(&fake, "_quarry::manifest").unwrap().get("moved"), None);
    corpus.commit(&lease, vec![Change::Remove("b".into())], None).await.unwrap();
    assert!(corpus.get(&["b".to_string()]).await.unwrap()[0].is_none());
    assert_eq!(corpus.list(&Filter::all(), 0, 10).await.unwrap(), ["c", "d", "e"]);
}

/// A commit costs the change, not the corpus: adding one chunk reads and writes the same
/// documents, and the manifest stays its size, whether 3 or 303 chunks were rewritten (moved to
/// new keys) before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_costs_the_change_not_the_chunks_moved_before() {
    let fake = FakeCluster::start(fc::standard()).await;
    let corpus = open(&fake).await;
    let lease = corpus.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
    let many = |from: usize, to: usize, text: &str| -> Vec<Change> {
        (from..to).map(|i| chunk(&format!("c{i}"), &format!("{text} {i}"), [1.0, i as f32, 0.0, 0.0], "1")).collect()
    };
    corpus.commit(&lease, many(0, 303, "first"), None).await.unwrap();
    let manifest_bytes = || {
        let docs = fake.documents("travel", "inventory", "hotels");
        docs.into_iter().find(|(k, _)| k == "_quarry::manifest").unwrap().1.to_string().len()
    };
    // One chunk added: the KV operations it takes (the Search service's count queries too).
    let add = |n: usize| {
        let corpus = &corpus;
        let lease = &lease;
        let fake = &fake;
        async move {
            let before = fake.seen().iter().filter(|s| s.service == "kv").count();
            corpus.commit(lease, many(1000 + n, 1001 + n, "added"), None).await.unwrap();
            fake.seen().iter().filter(|s| s.service == "kv").count() - before
        }
    };
    // Each rewrite's old versions are deleted by the commit after it (readers may still be on
    // the generation before): an empty commit does that before each measure.
    corpus.commit(&lease, many(0, 3, "rewritten"), None).await.unwrap();
    corpus.commit(&lease, vec![], None).await.unwrap();
    let (ops_few, bytes_few) = (add(0).await, manifest_bytes());
    corpus.commit(&lease, many(3, 303, "rewritten"), None).await.unwrap();
    corpus.commit(&lease, vec![], None).await.unwrap();
    let (ops_many, bytes_many) = (add(1).await, manifest_bytes());
    assert_eq!(ops_few, ops_many, "KV operations of one add after 3 and after 303 moves");
    assert!(bytes_many <= bytes_few + 8, "manifest {bytes_few} then {bytes_many} bytes");
    let moved = fake
        .documents("travel", "inventory", "hotels")
        .iter()
        .filter(|(k, _)| k.starts_with("_quarry::moved::"))
        .count();
    assert_eq!(moved, 303);
}

/// A corpus an earlier Quarry wrote, its moved chunks listed in the manifest: read as it was;
/// a commit that touches such a chunk moves it to its own document and out of the manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_listing_moved_chunks_is_read_and_shrinks() {
    let fake = FakeCluster::start(fc::standard()).await;
    let corpus = open(&fake).await;
    let lease = corpus.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
    corpus.commit(&lease, manual(), None).await.unwrap();
    let edit = |t: &str| vec![chunk("b", t, [0.9, 0.1, 0.0, 0.0], "90.11")];
    assert_eq!(corpus.commit(&lease, edit("edited once"), None).await.unwrap(), 2);
    // As the version before wrote it: the map in the manifest, no document of its own.
    let s = store(&fake, Duration::from_secs(5));
    let mut m = s.get("_quarry::manifest").await.unwrap().unwrap().value;
    m["moved"] = json!({"b": "b@@2"});
    s.upsert("_quarry::manifest", &m, None).await.unwrap();
    s.remove("_quarry::moved::b", None).await.unwrap();
    async fn text(c: &CouchbaseCorpus) -> Option<String> {
        c.get(&["b".to_string()]).await.unwrap()[0].as_ref().map(|r| r.text.clone())
    }
    assert_eq!(text(&corpus).await.as_deref(), Some("edited once"));
    assert_eq!(ids(&corpus.nearest(&[0.9, 0.1, 0.0, 0.0], 1, &Filter::all()).await.unwrap()), ["b"]);
    assert_eq!(corpus.commit(&lease, edit("edited twice"), None).await.unwrap(), 3);
    assert_eq!(text(&corpus).await.as_deref(), Some("edited twice"));
    let m = s.get("_quarry::manifest").await.unwrap().unwrap().value;
    assert_eq!(m.get("moved"), None, "{m}");
    let moved = s.get("_quarry::moved::b").await.unwrap().unwrap().value;
    assert_eq!(moved, json!({"moved": {"key": "b@@3", "previous": "b@@2", "gen": 3}}));
}

/// One writer at a time: another waits and gets `busy`; a holder that stops renewing loses the
/// lease when it expires, another takes it, and the first may no longer commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_at_a_time_and_a_dead_one_lets_go() {
    let fake = FakeCluster::start(fc::standard()).await;
    let corpus = open(&fake).await;
    let ttl = Duration::from_secs(2);
    let first = corpus.lease("host-a", ttl, Duration::from_secs(1)).await.unwrap();
    let e = corpus.lease("host-b", ttl, Duration::from_millis(500)).await.err().unwrap();
    assert!(matches!(&e, CorpusError::Busy(m) if m.contains("written by host-a")), "{e:?}");
    // Renewed while held: still taken after its first time to live.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(corpus.lease("host-b", ttl, Duration::from_millis(200)).await.is_err());
    drop(first);
    let second = corpus.lease("host-b", ttl, Duration::from_secs(5)).await.expect("given back");

    // host-b stops renewing (its writes to the lease fail): host-c gets the lease after the
    // time to live, and host-b's commit is refused.
    fake.fail_writes_to(Some("_quarry::lease"));
    tokio::time::sleep(Duration::from_millis(2200)).await;
    fake.fail_writes_to(None);
    let third = corpus.lease("host-c", ttl, Duration::from_secs(5)).await.expect("the lease expired");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let e = corpus.commit(&second, manual(), None).await.unwrap_err();
    assert!(matches!(&e, CorpusError::Busy(m) if m.contains("lease expired")), "{e:?}");
    assert_eq!(corpus.commit(&third, manual(), None).await.unwrap(), 1);
}

/// The index analyses text as a local corpus does (`cjk`: words and CJK bigrams, no stop
/// words) and asks for BM25; a 7.6 cluster, which refuses `scoring_model`, gets it without. A
/// keyword search's filter decides what matches and, sent with boost 0, adds nothing to the
/// Search service's scores (which pick the candidates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_scores_text_by_bm25_where_the_cluster_can() {
    for version_8 in [false, true] {
        let fake = FakeCluster::start(fc::Spec { version_8, ..fc::standard() }).await;
        let corpus = open(&fake).await;
        let puts: Vec<serde_json::Value> =
            fake.seen().into_iter().filter(|s| s.service == "fts" && s.method == "PUT").map(|s| s.body).collect();
        let made = puts.last().expect("the corpus made its index");
        let mapping = &made["params"]["mapping"];
        assert_eq!(mapping["scoring_model"].as_str(), version_8.then_some("bm25"), "{mapping}");
        assert_eq!(puts.len(), if version_8 { 1 } else { 2 }, "7.6: refused once, then made without the key");
        let text = &mapping["types"]["inventory.hotels"]["properties"]["text"]["fields"][0];
        assert_eq!(text["analyzer"], "cjk");

        let lease = corpus.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
        corpus.commit(&lease, manual(), None).await.unwrap();
        // `bandwidth` is in a and b; filtered to chapter 90.11, only b, with its score unfiltered
        // (BM25 counts over the whole generation).
        let all = corpus.keyword("bandwidth", None, 10, &Filter::all()).await.unwrap();
        let only_b = corpus.keyword("bandwidth", None, 10, &Filter::exact("chapter", "90.11")).await.unwrap();
        assert_eq!(only_b.len(), 1, "{only_b:?}");
        let b = all.iter().find(|f| f.id == "b").expect("b has the word");
        assert!((b.score - only_b[0].score).abs() < 1e-6, "{all:?} vs {only_b:?}");
        // The request's filter clauses: boosted 0, the generation range and the chapter term.
        let asked = fake
            .seen()
            .into_iter()
            .rev()
            .find(|s| s.service == "fts" && s.body["query"]["conjuncts"][0]["match"] == "bandwidth")
            .expect("the keyword search");
        let must = &asked.body["query"]["conjuncts"][1]["must"]["conjuncts"];
        assert_eq!(must[0]["field"], "quarry.gen", "{must}");
        assert_eq!(must[0]["boost"], 0.0, "{must}");
        assert_eq!(must[1]["disjuncts"][0]["boost"], 0.0, "{must}");
    }
}

/// The Search service indexes a write some time after the data node took it: a commit flips
/// the manifest only once the index holds the whole new generation, so readers never search a
/// generation the index has only part of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_flips_once_the_index_holds_its_generation() {
    let fake = FakeCluster::start(fc::standard()).await;
    let corpus = open(&fake).await;
    let lag = Duration::from_millis(1500);
    fake.set_search_lag(lag);
    let lease = corpus.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(corpus.commit(&lease, manual(), None).await.unwrap(), 1);
    assert_eq!(corpus.list(&Filter::all(), 0, 10).await.unwrap(), ["a", "b", "c", "d"]);
    assert!(started.elapsed() >= lag - Duration::from_millis(200), "flipped after {:?}", started.elapsed());
    let q = [1.0, 0.0, 0.0, 0.0];
    assert_eq!(ids(&corpus.nearest(&q, 10, &Filter::all()).await.unwrap()), ["a", "b", "c", "d"]);

    // An edit: b rewritten, a removed; at once after the flip readers see all of it.
    let edit = vec![
        chunk("b", "bandwidth of the connection, edited", [0.9, 0.1, 0.0, 0.0], "90.11"),
        Change::Remove("a".into()),
    ];
    assert_eq!(corpus.commit(&lease, edit, None).await.unwrap(), 2);
    assert_eq!(corpus.list(&Filter::all(), 0, 10).await.unwrap(), ["b", "c", "d"]);
    let found = corpus.keyword("edited", None, 10, &Filter::all()).await.unwrap();
    assert_eq!(ids(&found), ["b"], "the new version of b is searchable");
}

/// An index the corpus finds already made, analysing the text otherwise than it would (here as
/// LangChain's store makes one: no analyzer named, so bleve's `standard`), is refused by name: its keyword
/// counts would not be the local BM25's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_analysing_text_otherwise_is_refused() {
    let fake = FakeCluster::start(fc::standard()).await;
    let params = crate::couchbase_store::langchain_index("quarry-manual").params.expect("its mapping");
    let vector = quarry::capability::couchbase::store::VectorField {
        path: "embedding".into(),
        dims: 4,
        similarity: "dot_product".into(),
    };
    assert!(store(&fake, Duration::from_secs(5)).ensure_index("quarry-manual", params, &vector).await.unwrap());
    let e = CouchbaseCorpus::open("manual", store(&fake, Duration::from_secs(5)), "quarry-manual", SHAPE)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, CorpusError::Invalid(m) if m.contains("analyses the chunks' text with \"standard\", not \"cjk\"")),
        "{e:?}"
    );
    // Its own index, made by the corpus, passes when the corpus opens again.
    let fake = FakeCluster::start(fc::standard()).await;
    open(&fake).await;
    open(&fake).await;
}

/// Opening for another shape is refused, saying what the corpus holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shape_is_kept_with_the_corpus() {
    let fake = FakeCluster::start(fc::standard()).await;
    open(&fake).await;
    let other = Shape { dimension: 4, metric: Metric::Dot };
    let e = CouchbaseCorpus::open("manual", store(&fake, Duration::from_secs(5)), "quarry-manual", other)
        .await
        .err()
        .unwrap();
    assert!(matches!(&e, CorpusError::Shape(m) if m.contains("compared by cosine, not 4-dimensional by dot")), "{e:?}");
}

/// Chapter-rag over the small manual, its corpus in the fake cluster's
/// `travel.inventory.airlines` (`None`: in `corpus/`).
fn chapter_config(fake: Option<&FakeCluster>, pool: usize) -> String {
    chapter_config_with(fake, pool, "10s")
}

/// [`chapter_config`] with `timeout` on each Couchbase call.
fn chapter_config_with(fake: Option<&FakeCluster>, pool: usize, timeout: &str) -> String {
    let corpus = match fake {
        Some(f) => f.corpus_section("airlines", &format!("timeout = \"{timeout}\"")),
        None => "[corpora.manual]\ndir = \"corpus\"\n".to_string(),
    };
    chapter_rag_on_corpus(&corpus, pool)
}

/// Chapter-rag in the real host, its corpus in Couchbase: built once, the same chapters and
/// passages as over a local corpus, and a restart (a new host) that finds the corpus built and
/// embeds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chapter_rag_on_a_couchbase_corpus_answers_as_on_a_local_one() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), small_manual()).unwrap();
    let questions = ["bandwidth limits with a timetable", "installing on windows", "syncing folders"];
    let ask = |host: Arc<quarry::Registry>, q: &'static str| async move {
        let args = json!({"question": q}).to_string();
        within(120, host.call("a.search", &args)).await.map_err(|e| e.to_string()).unwrap().text
    };
    let local = env.host(&chapter_config(None, 1)).await;
    let mut want = Vec::new();
    for q in questions {
        want.push(ask(local.clone(), q).await);
    }
    drop(local);
    let chunks;
    {
        let host = env.host(&chapter_config(Some(&fake), 2)).await;
        for (q, w) in questions.iter().zip(&want) {
            let got = ask(host.clone(), q).await;
            assert_eq!(routed_passages(&got), routed_passages(w), "{q}");
            assert!(!routed_passages(&got).1.is_empty(), "{got}");
        }
        let tree = within(120, host.call("a.list_chapter_tree", "{}")).await.unwrap();
        let report: serde_json::Value = serde_json::from_str(tree.extra.as_deref().unwrap()).unwrap();
        chunks = report["report"]["chunks"].as_u64().unwrap();
        assert_eq!(report["report"]["embedded"].as_u64(), Some(chunks), "{report}");
    }
    let stored = fake.documents("travel", "inventory", "airlines");
    assert_eq!(stored.iter().filter(|(k, _)| !k.starts_with("_quarry::")).count() as u64, chunks);
    // CrewAI's Couchbase tool (couchbase-search) searches the corpus through its index, as
    // LangChain's store would: the chunks are documents in their shape.
    env.plugin(COUCHBASE_SEARCH, "couchbase-search");
    let crewai = r#"
[tools.lc]
component = "plugins/couchbase-search.wasm"
embedder = "toy"
config = { bucket_name = "travel", scope_name = "inventory", collection_name = "airlines", index_name = "quarry-manual" }
[tools.lc.grants]
deadline = "30s"
couchbase = { connection = "local", scopes = ["travel.inventory"] }
"#;
    let host = env.host(&format!("{}{crewai}", chapter_config(Some(&fake), 1))).await;
    let rows = within(60, host.call("lc", r#"{"query": "bandwidth limits with a timetable"}"#)).await.unwrap();
    assert!(rows.text.contains("bandwidth limits") && rows.hits.len() == 3, "{}", rows.text);
    let tree = within(120, host.call("a.list_chapter_tree", "{}")).await.unwrap();
    let report: serde_json::Value = serde_json::from_str(tree.extra.as_deref().unwrap()).unwrap();
    assert_eq!((report["report"]["embedded"].as_u64(), report["report"]["reused"].as_u64()), (Some(0), Some(chunks)));
    assert_eq!(routed_passages(&ask(host.clone(), questions[0]).await), routed_passages(&want[0]));
}

/// The cluster goes away while the host serves: searches fail at once with the corpus's
/// `unavailable` error (within the timeout, saying what did not answer), and when it comes back
/// they answer again, as before, without a restart of the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_goes_away_and_comes_back() {
    let mut fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), small_manual()).unwrap();
    let host = env.host(&chapter_config_with(Some(&fake), 1, "3s")).await;
    let args = json!({"question": "bandwidth limits with a timetable"}).to_string();
    let before = within(120, host.call("a.search", &args)).await.unwrap().text;

    fake.stop();
    let started = std::time::Instant::now();
    let e = within(60, host.call("a.search", &args)).await.unwrap_err().to_string();
    assert!(e.contains("Couchbase") && e.contains("within 3s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20), "bounded: {:?}", started.elapsed());

    // The outage shows in `/metrics` (counted process-wide: at least this test's calls).
    let mut exposition = quarry::support::exposition::Exposition::default();
    quarry::metrics::write(&host, &mut exposition);
    let text = exposition.finish();
    let count = |op: &str, outcome: &str| -> f64 {
        let line = format!("quarry_couchbase_store_operations_total{{op=\"{op}\",outcome=\"{outcome}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(line.as_str())).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    };
    assert!(count("get", "unavailable") >= 1.0 && count("get", "ok") >= 1.0, "{text}");
    assert!(count("search", "ok") >= 1.0 && count("index", "ok") >= 1.0, "{text}");

    fake.restart().await;
    let started = std::time::Instant::now();
    loop {
        match within(60, host.call("a.search", &args)).await {
            Ok(out) => {
                assert_eq!(out.text, before);
                break;
            }
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(60), "not back after 60 s: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// A commit that would take the corpus past its `max_bytes` is refused, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_past_max_bytes_is_refused() {
    let fake = FakeCluster::start(fc::standard()).await;
    let corpus = open(&fake).await.with_max_bytes(200);
    let lease = corpus.lease("host-a", Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
    assert_eq!(corpus.commit(&lease, manual()[..2].to_vec(), None).await.unwrap(), 1);
    let e = corpus.commit(&lease, manual()[2..].to_vec(), None).await.unwrap_err();
    assert!(matches!(&e, CorpusError::Invalid(m) if m.contains("over its limit of 200")), "{e:?}");
    let info = corpus.info().await.unwrap();
    assert_eq!((info.generation, info.chunks), (1, 2));
    // Removing makes room again.
    let removed = corpus.commit(&lease, vec![Change::Remove("a".into())], None).await;
    assert_eq!(removed.unwrap(), 2);
    assert_eq!(corpus.commit(&lease, manual()[2..3].to_vec(), None).await.unwrap(), 3);
}

/// Against a real cluster, when `QUARRY_TEST_CORPUS_COUCHBASE_URL` and its companions are set
/// (`_USERNAME`, `_PASSWORD`, `_BUCKET`, `_SCOPE`, `_COLLECTION`: an empty collection the test
/// may write, and an index `quarry-check` it may make): the corpus's commits, reads and lease on
/// the real services, compared with a local corpus. A real Search service indexes a moment after
/// a write; the test says how long the new generation took to show whole, which is what a
/// reader may miss just after a flip there (the fake indexes at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_cluster_when_configured() {
    let var = |k: &str| std::env::var(format!("QUARRY_TEST_CORPUS_COUCHBASE_{k}")).ok().filter(|v| !v.is_empty());
    let names = ["URL", "USERNAME", "PASSWORD", "BUCKET", "SCOPE", "COLLECTION"];
    let Some(v) = names.iter().map(|k| var(k)).collect::<Option<Vec<_>>>() else {
        eprintln!(
            "skipped: set QUARRY_TEST_CORPUS_COUCHBASE_{{{}}} to run this test against a real Couchbase cluster",
            names.join(",")
        );
        return;
    };
    check_a_cluster(&v).await;
}

/// The real-cluster check above, run against the fake: so that the check itself is known to
/// work before a user runs it against their cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cluster_check_passes_on_the_fake() {
    let fake = FakeCluster::start(fc::standard()).await;
    let v = [&fake.connection_string(), fc::USERNAME, fc::PASSWORD, "travel", "inventory", "airlines"];
    check_a_cluster(&v.map(String::from)).await;
}

/// Commits, reads and a removal on the cluster at `v` (url, user, password, bucket, scope,
/// collection), compared with a local corpus.
async fn check_a_cluster(v: &[String]) {
    let raw: RawConnection =
        serde_json::from_value(json!({"connection_string": v[0], "username": v[1], "password": v[2]})).unwrap();
    let connection = Arc::new(quarry::capability::couchbase::connection(std::path::Path::new("/"), raw).unwrap());
    let store = Store::new(connection, &v[3], &v[4], &v[5], Duration::from_secs(20));
    let corpus = CouchbaseCorpus::open("check", store, "quarry-check", SHAPE).await.unwrap();
    let lease = corpus.lease("real-check", Duration::from_secs(30), Duration::from_secs(30)).await.unwrap();
    let started = std::time::Instant::now();
    let first = corpus.commit(&lease, manual(), None).await.unwrap();
    // The commit flips once the Search index holds the generation: whole at once.
    eprintln!("generation {first} committed, the index holding it whole, in {:?}", started.elapsed());
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCorpus::open(dir.path(), SHAPE).unwrap();
    local.commit(manual(), None).unwrap();
    let q = [0.8, 0.3, 0.1, 0.0];
    let want = local.snapshot().unwrap().nearest(&q, 4, &Filter::all()).unwrap();
    assert_eq!(ids(&corpus.nearest(&q, 4, &Filter::all()).await.unwrap()), ids(&want));
    // Keyword search: the local BM25's order and scores (the cluster's analyzer and counts).
    for query in ["bandwidth limits", "checksums and hashes", "parallel transfers"] {
        let want = local.snapshot().unwrap().keyword(query, None, 4, &Filter::all()).unwrap();
        let got = corpus.keyword(query, None, 4, &Filter::all()).await.unwrap();
        assert_eq!(ids(&got), ids(&want), "{query:?}");
        for (a, b) in got.iter().zip(&want) {
            assert!((a.score - b.score).abs() < 1e-4, "{query:?}: {a:?} vs {b:?}");
        }
    }
    assert_eq!(
        corpus.list(&under("90.1"), 0, 10).await.unwrap(),
        local.snapshot().unwrap().list(&under("90.1"), 0, 10).unwrap()
    );
    let asked: Vec<String> = ["b", "d"].map(String::from).to_vec();
    assert_eq!(corpus.get(&asked).await.unwrap(), local.snapshot().unwrap().get(&asked).unwrap());
    let second = corpus.commit(&lease, vec![Change::Remove("a".into())], None).await.unwrap();
    assert_eq!(second, first + 1);
    assert!(corpus.get(&["a".to_string()]).await.unwrap()[0].is_none());
}
