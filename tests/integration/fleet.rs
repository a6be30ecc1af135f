//! A fleet of stateless hosts: separate `quarry serve --http` processes with one config, their
//! corpus in one (fake) Couchbase cluster. One builds while the others wait for its lease and
//! then reuse what it built; all answer as a host with a local corpus does; a builder killed
//! (SIGKILL) part-way leaves nothing half-served, and another host finishes the corpus once the
//! dead one's lease expires, resuming from the chunks it had written.

use std::time::{Duration, Instant};

use quarry_tests::fakes::couchbase::{self as fc, FakeCluster};
use quarry_tests::mcp_client::{McpHttp, Served};
use quarry_tests::{TestEnv, chapter_rag_on_corpus, quarry_bin, routed_passages, small_manual, within};
use serde_json::{Value, json};

const QUESTION: &str = "bandwidth limits with a timetable";

/// Chapter-rag on the small manual, its corpus in the fake cluster's
/// `travel.inventory.airlines` (`None`: in `corpus/`), a lease that expires 2 s after its holder
/// stops renewing it, and `timeout` on each Couchbase call.
fn config(fake: Option<&FakeCluster>, timeout: &str) -> String {
    let corpus = match fake {
        Some(f) => f.corpus_section("airlines", &format!("lease_ttl = \"2s\"\ntimeout = \"{timeout}\"")),
        None => "[corpora.manual]\ndir = \"corpus\"\n".to_string(),
    };
    chapter_rag_on_corpus(&corpus, 1)
}

/// The answer to `tool` with `args` from the server at `url`.
async fn call(url: &str, tool: &str, args: Value) -> Value {
    let mut c = within(60, McpHttp::open(url)).await.unwrap();
    let r = within(180, c.call(tool, args)).await.unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");
    r["result"].clone()
}

async fn search(url: &str) -> String {
    call(url, "a.search", json!({"question": QUESTION})).await["content"][0]["text"].as_str().unwrap().to_string()
}

/// What the instance's preparation did: chunks, and how many it embedded or reused.
async fn built(url: &str) -> Value {
    let r = call(url, "a.list_chapter_tree", json!({})).await;
    r["structuredContent"]["extra"]["report"].clone()
}

/// The local answer, from a host of its own.
async fn local_answer(env: &TestEnv) -> String {
    let host = env.host(&config(None, "10s")).await;
    let args = json!({"question": QUESTION}).to_string();
    within(120, host.call("a.search", &args)).await.unwrap().text
}

fn keys(fake: &FakeCluster) -> Vec<String> {
    fake.documents("travel", "inventory", "airlines").into_iter().map(|(k, _)| k).collect()
}

/// Three hosts at once on one corpus: each answers as a local host does; the corpus was built
/// by one of them (the others embedded nothing), in one generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_build_once_and_answer_alike() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), small_manual()).unwrap();
    let want = local_answer(&env).await;
    let path = env.config(&config(Some(&fake), "10s"));
    let hosts: Vec<Served> = (0..3).map(|_| Served::start(&quarry_bin(), &path)).collect();
    let (a, b, c) = tokio::join!(search(&hosts[0].url), search(&hosts[1].url), search(&hosts[2].url));
    for got in [&a, &b, &c] {
        assert_eq!(routed_passages(got), routed_passages(&want), "{got}");
    }
    let mut embedded = Vec::new();
    let mut chunks = 0;
    for h in &hosts {
        let r = built(&h.url).await;
        chunks = r["chunks"].as_u64().unwrap_or(0);
        embedded.push(r["embedded"].as_u64().unwrap_or(u64::MAX));
    }
    assert!(chunks > 0);
    embedded.sort_unstable();
    assert_eq!(embedded, [0, 0, chunks], "one host built, the others reused its build");
    let manifest =
        fake.documents("travel", "inventory", "airlines").into_iter().find(|(k, _)| k == "_quarry::manifest");
    assert_eq!(manifest.unwrap().1["generation"], 1, "built in one commit");
}

/// A builder killed while stuck at a point of its commit (the cluster refusing that write for
/// now): readers never see part of it, and a host started after it finishes the corpus once the
/// dead host's lease expires, answering as a local host does. Killed after writing its chunks,
/// the next host writes none of them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_builder_is_taken_over_after_its_lease() {
    for (point, resumes) in [("_quarry::attempt", false), ("_quarry::manifest", true)] {
        let fake = FakeCluster::start(fc::standard()).await;
        let env = TestEnv::with_chapter_rag();
        std::fs::write(env.path("docs/m.md"), small_manual()).unwrap();
        let want = local_answer(&env).await;
        let path = env.config(&config(Some(&fake), "60s"));
        fake.fail_writes_to(Some(point));
        let mut builder = Served::start(&quarry_bin(), &path);
        let started = Instant::now();
        while !fake.seen().iter().any(|s| s.path == point && s.body["status"] == 0x86) {
            assert!(started.elapsed() < Duration::from_secs(120), "{point}: the builder never got there");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        builder.kill();
        fake.fail_writes_to(None);
        let manifest = |fake: &FakeCluster| {
            fake.documents("travel", "inventory", "airlines").into_iter().find(|(k, _)| k == "_quarry::manifest")
        };
        assert_eq!(manifest(&fake).unwrap().1["generation"], 0, "{point}: nothing was flipped");
        let chunk_keys = |fake: &FakeCluster| keys(fake).into_iter().filter(|k| !k.starts_with("_quarry::")).count();
        let written = chunk_keys(&fake);
        assert_eq!(written > 0, resumes, "{point}: chunks written before the kill: {written}");
        let sets_before = fake.seen().iter().filter(|s| s.method == "SET" && !s.path.starts_with("_quarry::")).count();

        let next = Served::start(&quarry_bin(), &path);
        let got = search(&next.url).await;
        assert_eq!(routed_passages(&got), routed_passages(&want), "{point}: {got}");
        assert_eq!(manifest(&fake).unwrap().1["generation"], 1, "{point}");
        let report = built(&next.url).await;
        let chunks = report["chunks"].as_u64().unwrap();
        assert_eq!(chunk_keys(&fake) as u64, chunks, "{point}: complete, and nothing more");
        assert!(!keys(&fake).iter().any(|k| k == "_quarry::attempt"), "{point}: the commit finished");
        let sets_after = fake.seen().iter().filter(|s| s.method == "SET" && !s.path.starts_with("_quarry::")).count();
        if resumes {
            assert_eq!(sets_after, sets_before, "{point}: the chunks already written were kept, not written again");
        }
    }
}

/// A host waiting for another's build says what the builder is doing, its progress shared
/// through the write lease: in `/readyz` while it waits, and then it answers as a local host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_host_shows_the_builders_progress() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), small_manual()).unwrap();
    let want = local_answer(&env).await;
    let path = env.config(&config(Some(&fake), "60s"));
    // The builder embeds, then is held at its commit (the cluster refusing that write for now),
    // renewing its lease.
    fake.fail_writes_to(Some("_quarry::attempt"));
    let _builder = Served::start(&quarry_bin(), &path);
    let lease = |fake: &FakeCluster| {
        fake.documents("travel", "inventory", "airlines").into_iter().find(|(k, _)| k == "_quarry::lease").map(|d| d.1)
    };
    let started = Instant::now();
    let shared = loop {
        if let Some(l) = lease(&fake).filter(|l| l["progress"]["total"].as_u64().unwrap_or(0) > 0) {
            break l;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no progress in the lease: {:?}", lease(&fake));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let task = shared["progress"]["task"].as_str().unwrap().to_string();
    let holder = shared["holder"].as_str().unwrap().to_string();

    let waiting = Served::start(&quarry_bin(), &path);
    let readyz = waiting.url.replace("/mcp", "/readyz");
    let started = Instant::now();
    loop {
        let r = quarry_tests::local_prometheus::fetch("GET", &readyz, None).await.unwrap();
        if r.status == 503 && r.body.contains(&format!("waiting for {holder}, {task}")) {
            assert!(r.body.contains(" of "), "how far along: {}", r.body);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{} {}", r.status, r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fake.fail_writes_to(None);
    assert_eq!(routed_passages(&search(&waiting.url).await), routed_passages(&want));
}

/// The manual is edited under a fleet: the first host asked rebuilds, embedding only the chunks
/// that changed, and commits the new generation; the others take it up at their next call
/// without embedding anything, and every host answers as a local host over the edited manual
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_manual_is_rebuilt_once_and_served_by_all() {
    let fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::with_chapter_rag();
    let manual_path = env.path("docs/m.md");
    std::fs::write(&manual_path, small_manual()).unwrap();
    let path = env.config(&config(Some(&fake), "10s"));
    let hosts: Vec<Served> = (0..3).map(|_| Served::start(&quarry_bin(), &path)).collect();
    for h in &hosts {
        search(&h.url).await;
    }
    let chunks_before = built(&hosts[0].url).await["chunks"].as_u64().unwrap();

    // One chapter changes; its mtime moves on, as an editor's save does.
    let edited =
        small_manual().replace("Use --bwlimit with a timetable.", "Use --bwlimit with a timetable, or --bwlimit-file.");
    std::fs::write(&manual_path, &edited).unwrap();
    let mtime = filetime::FileTime::from_last_modification_time(&std::fs::metadata(&manual_path).unwrap());
    filetime::set_file_mtime(&manual_path, filetime::FileTime::from_unix_time(mtime.unix_seconds() + 2, 0)).unwrap();
    let want = local_answer(&env).await;
    assert!(want.contains("--bwlimit-file"), "{want}");

    let first = search(&hosts[0].url).await;
    assert_eq!(routed_passages(&first), routed_passages(&want), "{first}");
    let rebuilt = built(&hosts[0].url).await;
    let embedded = rebuilt["embedded"].as_u64().unwrap();
    assert!(embedded > 0 && embedded < chunks_before, "only the changed chunks: {rebuilt}");
    for h in &hosts[1..] {
        let got = search(&h.url).await;
        assert_eq!(routed_passages(&got), routed_passages(&want), "{got}");
        assert_eq!(built(&h.url).await["embedded"].as_u64(), Some(0), "took up the new build");
    }
    let manifest =
        fake.documents("travel", "inventory", "airlines").into_iter().find(|(k, _)| k == "_quarry::manifest");
    assert_eq!(manifest.unwrap().1["generation"], 2, "one rebuild, one commit");
}

/// A load balancer's view of a host whose corpus is in Couchbase: ready once prepared; not ready
/// while the cluster does not answer (saying which corpus); ready again when it is back, with no
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_cluster() {
    let mut fake = FakeCluster::start(fc::standard()).await;
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), small_manual()).unwrap();
    let host = Served::start(&quarry_bin(), &env.config(&config(Some(&fake), "2s")));
    let readyz = host.url.replace("/mcp", "/readyz");
    let status = |url: String| async move {
        let a = quarry_tests::local_prometheus::fetch("GET", &url, None).await.unwrap();
        (a.status, a.body)
    };
    let wait_for = |want: u16, what: &'static str| {
        let url = readyz.clone();
        async move {
            let started = Instant::now();
            loop {
                let (got, body) = status(url.clone()).await;
                if got == want {
                    return body;
                }
                assert!(started.elapsed() < Duration::from_secs(60), "{what}: still {got} {body}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait_for(200, "prepared").await;
    fake.stop();
    let body = wait_for(503, "cluster gone").await;
    assert!(body.contains("corpora.manual") && body.contains("Couchbase"), "{body}");
    fake.restart().await;
    wait_for(200, "cluster back").await;
    assert_eq!(routed_passages(&search(&host.url).await), routed_passages(&local_answer(&env).await));
}
