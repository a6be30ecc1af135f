//! Corpora as a host capability (`quarry:retrieval/corpus`), with chapter-rag on them in the
//! real host: instances and pool members that share a corpus build it once and answer alike, a
//! restart reopens it, an old index file moves into it, the grant is enforced, and a corpus that
//! cannot save (a full disk: a small tmpfs) keeps serving what it had.

use quarry_tests::{Need, TOY_SECTION, TestEnv, corpus_generation as generation, quarry_bin, skip_unless, within};
use serde_json::{Value, json};

/// Two chapter-rag instances over one manual and one corpus (`[corpora.manual]` in `corpus/`),
/// the first a pool of `pool`, with `grant` as the second's corpus grant.
fn config(pool: usize, grant: &str, extra_tool: &str) -> String {
    format!(
        r#"{TOY_SECTION}
[corpora.manual]
dir = "corpus"

[tools.a]
component = "plugins/chapters.wasm"
embedder = "toy"
pool = {pool}
config = {{ manual = "/docs/m.md", corpus = "manual", index_dir = "/index" }}
[tools.a.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index", mode = "rw" }}]
corpora = [{{ name = "manual", mode = "rw" }}]
memory = "1GiB"
deadline = "120s"

[tools.b]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {{ manual = "/docs/m.md", corpus = "manual" }}
[tools.b.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
{grant}
memory = "1GiB"
deadline = "120s"
{extra_tool}"#
    )
}

fn manual(topic: &str) -> String {
    let para = |t: &str| format!("This paragraph explains {t} for the reader in some detail. ").repeat(16);
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n## On Windows\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth\n\nUse --bwlimit with a timetable. {}\n",
        para("installation"),
        para("linux packages"),
        para(topic),
        para("syncing folders"),
        para("bandwidth limits"),
    )
}

async fn call(host: &quarry::Registry, tool: &str, args: Value) -> Result<quarry::bindings::ToolOutput, String> {
    within(120, host.call(tool, &args.to_string())).await.map_err(|e| e.to_string())
}

fn report(out: &quarry::bindings::ToolOutput) -> Value {
    serde_json::from_str::<Value>(out.extra.as_deref().unwrap_or("null")).unwrap()["report"].clone()
}

/// Three readers (a pool of two and another instance) and one corpus: built once (generation 1),
/// the same answers from each, and a restart that reopens it without embedding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_and_pool_members_share_one_corpus() {
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    let cfg = config(2, r#"corpora = [{ name = "manual", mode = "rw" }]"#, "");
    let q = json!({"question": "bandwidth limits with a timetable"});
    let chunks;
    let answer;
    {
        let host = env.host(&cfg).await;
        let (ra, rb) =
            (call(&host, "a.search", q.clone()).await.unwrap(), call(&host, "b.search", q.clone()).await.unwrap());
        assert_eq!(ra.text, rb.text);
        assert!(ra.text.contains("Bandwidth"), "{}", ra.text);
        // Two calls at once reach both pool members; each answers the same.
        let (x, y) = tokio::join!(call(&host, "a.search", q.clone()), call(&host, "a.search", q.clone()));
        assert_eq!(x.unwrap().text, ra.text);
        assert_eq!(y.unwrap().text, ra.text);
        let ta = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap());
        let tb = report(&call(&host, "b.list_chapter_tree", json!({})).await.unwrap());
        chunks = ta["chunks"].as_u64().unwrap();
        assert_eq!(tb["chunks"].as_u64(), Some(chunks));
        // One build for three instances: whoever built it embedded every chunk, the others none.
        let embedded = ta["embedded"].as_u64().unwrap() + tb["embedded"].as_u64().unwrap();
        assert!(embedded == 0 || embedded == chunks, "embedded {embedded} of {chunks}: {ta} {tb}");
        assert_eq!(generation(&env.path("corpus")), Some(1), "built once, in one commit");
        answer = ra.text;
    }
    let host = env.host(&cfg).await;
    let r = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap());
    assert_eq!((r["embedded"].as_u64(), r["reused"].as_u64()), (Some(0), Some(chunks)), "{r}");
    assert_eq!(call(&host, "b.search", q).await.unwrap().text, answer);
    assert_eq!(generation(&env.path("corpus")), Some(1), "a restart writes nothing");
    // The corpus is the index: no index file is written beside it.
    assert!(!env.path("index/chapter-rag.qix").exists());
}

/// A corpus built with one model and opened with another of the same dimension: every chunk is
/// embedded again (another model's vectors are not this one's), and reopening with the new model
/// embeds nothing.
#[tokio::test]
async fn another_model_embeds_the_corpus_again() {
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    let with_model = |id: &str| {
        config(1, r#"corpora = [{ name = "manual", mode = "rw" }]"#, "").replace(
            "config = { dimension = 64, max_tokens = 256 }",
            &format!("config = {{ dimension = 64, max_tokens = 256, model_id = \"{id}\" }}"),
        )
    };
    assert_ne!(with_model("toy-a"), with_model("toy-b"), "the toy embedder's section changed");
    // Both tools share the corpus: whichever builds it embeds, the other reopens the build.
    let embedded = |model: &'static str| {
        let env = &env;
        async move {
            let host = env.host(&with_model(model)).await;
            let a = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap());
            let b = report(&call(&host, "b.list_chapter_tree", json!({})).await.unwrap());
            (a["embedded"].as_u64().unwrap() + b["embedded"].as_u64().unwrap(), a["chunks"].as_u64().unwrap())
        }
    };
    let (first, chunks) = embedded("toy-a").await;
    assert_eq!(first, chunks);
    assert_eq!(embedded("toy-b").await, (chunks, chunks), "another model's vectors were reused");
    assert_eq!(embedded("toy-b").await, (0, chunks), "the same model reopens its build");
}

/// An index file an earlier version kept in `index_dir` (`old-index/`: written by chapter-rag
/// and docx-search at ad349e9, the last version to write them, in the file format of cbf06d5
/// and before, with the toy embedder, over this file's manual and word_tables.docx).
fn old_index(file: &str) -> Vec<u8> {
    std::fs::read(quarry_tests::crate_dir().join("integration/old-index").join(file)).unwrap()
}

/// Chapter-rag over `docs/m.md` and docx-search, as instances `a` and `d` with `index_dir` and
/// no corpus: each keeps its index in its own corpus.
fn own_corpus_config(pool: usize) -> String {
    format!(
        r#"{TOY_SECTION}
[tools.a]
component = "plugins/chapters.wasm"
embedder = "toy"
pool = {pool}
config = {{ manual = "/docs/m.md", index_dir = "/index", similarity_threshold = 0.0 }}
[tools.a.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index" }}]
memory = "1GiB"
deadline = "120s"

[tools.d]
component = "plugins/docx.wasm"
embedder = "toy"
config = {{ index_dir = "/index" }}
[tools.d.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index" }}]
deadline = "120s"
"#
    )
}

/// The index files of an earlier version move into the corpus, a named one or the instance's
/// own: nothing is embedded again, the files are left as they were (read-only grants suffice),
/// and a restart finds everything in the corpus.
#[tokio::test]
async fn old_index_files_move_into_the_corpus() {
    let env = TestEnv::with_chapter_rag();
    env.plugin(quarry_tests::DOCX_SEARCH, "docx");
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    let word = quarry_tests::shared_data().join("docx/docling/tests/data/docx/sources/word_tables.docx");
    std::fs::copy(&word, env.path("docs/t.docx")).expect("the shared DOCX fixtures (set QUARRY_SHARED_DATA)");
    for f in ["chapter-rag.qix", "docx-search.qix"] {
        std::fs::write(env.path("index").join(f), old_index(f)).unwrap();
    }
    let t = json!({"docx": "/docs/t.docx", "search_query": "cell"});
    for restart in [false, true] {
        let host = env.host(&own_corpus_config(1)).await;
        let r = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap());
        assert_eq!(r["embedded"].as_u64(), Some(0), "restart {restart}: {r}");
        let added = call(&host, "d.search_docx", t.clone()).await.unwrap();
        let added = serde_json::from_str::<Value>(added.extra.as_deref().unwrap()).unwrap()["added"].clone();
        assert_eq!(added["unchanged"], true, "the document came with the file: {added}");
        assert_eq!(generation(&env.own_corpus("a").join("64-cosine")), Some(1));
        assert_eq!(generation(&env.own_corpus("d").join("64-cosine")), Some(1));
    }
    for f in ["chapter-rag.qix", "docx-search.qix"] {
        assert_eq!(std::fs::read(env.path("index").join(f)).unwrap(), old_index(f), "{f} was rewritten");
    }
    // Into a corpus of the host's, named in the config.
    let host = env.host(&config(1, r#"corpora = [{ name = "manual", mode = "rw" }]"#, "")).await;
    let r = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap());
    assert_eq!(r["embedded"].as_u64(), Some(0), "{r}");
    assert_eq!(generation(&env.path("corpus")), Some(1));
}

/// Pool members that keep their index in the instance's own corpus answer alike after an edit
/// (cbf06d5: each kept its own copy, and one of them answered `[]`), and a restart reopens it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_members_on_their_own_corpus_follow_an_edit() {
    let env = TestEnv::with_chapter_rag();
    env.plugin(quarry_tests::DOCX_SEARCH, "docx");
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    let host = env.host(&own_corpus_config(2)).await;
    let q = json!({"question": "windows msi packages and the registry"});
    let both = || async {
        let (x, y) = tokio::join!(call(&host, "a.search", q.clone()), call(&host, "a.search", q.clone()));
        (x.unwrap(), y.unwrap())
    };
    let (x, y) = both().await;
    assert_eq!(x.text, y.text);
    let path = env.path("docs/m.md");
    let before = filetime::FileTime::from_last_modification_time(&std::fs::metadata(&path).unwrap());
    std::fs::write(&path, manual("windows msi packages and the registry")).unwrap();
    filetime::set_file_mtime(&path, filetime::FileTime::from_unix_time(before.unix_seconds() + 1, 0)).unwrap();
    for _ in 0..3 {
        let (x, y) = both().await;
        for out in [&x, &y] {
            assert!(!out.hits.is_empty() && out.text.contains("msi packages"), "{}", out.text);
        }
        assert_eq!(x.text, y.text);
    }
    assert_eq!(generation(&env.own_corpus("a").join("64-cosine")), Some(2), "the edit built once");
}

/// The grant decides: a corpus not granted is refused at prepare with what to add, and a
/// read-only grant may search a built corpus but not build one.
#[tokio::test]
async fn the_grant_decides_who_opens_and_who_writes() {
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    // b has no grant.
    let host = env.opened_host(&config(1, "", "")).await;
    let failed = host.prepared().await;
    let (_, why) = failed.iter().find(|(n, _)| n == "b").expect("b fails to prepare");
    assert!(why.contains("not in this instance's grants.corpora") && why.contains("mode = \"rw\""), "{why}");
    drop(host);
    // b read-only, alone over an empty corpus: it cannot build.
    let alone = format!(
        r#"{TOY_SECTION}
[corpora.fresh]
dir = "fresh"
[tools.b]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {{ manual = "/docs/m.md", corpus = "fresh" }}
[tools.b.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
corpora = [{{ name = "fresh" }}]
deadline = "60s"
"#
    );
    let host = env.opened_host(&alone).await;
    let failed = host.prepared().await;
    let (_, why) = failed.iter().find(|(n, _)| n == "b").expect("b cannot build");
    assert!(why.contains("corpus fresh is granted read-only; grant it with mode = \"rw\""), "{why}");
    assert!(matches!(generation(&env.path("fresh")), None | Some(0)), "nothing committed");
}

/// A full disk (a 1 MiB tmpfs as the corpus's directory, in a mount namespace of the test's own):
/// a host restarted on it serves the committed generation; an edit that cannot be saved is
/// served from the instance's memory with a log line that says why, and the corpus on disk
/// keeps its last generation, whole.
#[test]
fn a_full_disk_serves_what_the_corpus_has() {
    full_disk(false);
}

/// The same for an instance whose config names no corpus (cbf06d5: an index file in
/// `index_dir`, and a restart on a full disk refused to serve).
#[test]
fn a_full_disk_serves_what_the_instances_own_corpus_has() {
    full_disk(true);
}

/// See [`a_full_disk_serves_what_the_corpus_has`]: the corpus named `manual`, or (`own`) the
/// instance's own.
fn full_disk(own: bool) {
    if skip_unless(Need::Mount) {
        return;
    }
    let env = TestEnv::with_chapter_rag();
    env.plugin(quarry_tests::DOCX_SEARCH, "docx");
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    let (tool, name, disk) = if own {
        env.config(&own_corpus_config(1));
        ("a.search", "self", env.own_corpus("a"))
    } else {
        env.config(&config(1, r#"corpora = [{ name = "manual", mode = "rw" }]"#, ""));
        ("b.search", "manual", env.path("corpus"))
    };
    std::fs::create_dir_all(&disk).unwrap();
    // The generations: in the directory itself, or in the own corpus's per-shape one.
    let files = if own { disk.join("64-cosine") } else { disk.clone() };
    let edited = env.path("edited.md");
    std::fs::write(&edited, manual("windows msi packages and the registry")).unwrap();
    let q = r#"{"question": "windows msi packages"}"#;
    // Each stage's output between markers; the tmpfs lives as long as this one shell.
    let script = format!(
        r#"set -u
mount -t tmpfs -o size=1m tmpfs {disk:?}
Q={quarry:?}
echo "== build"; $Q -c quarry.toml call {tool} '{q}' 2>&1; echo "rc=$?"
dd if=/dev/zero of={disk:?}/filler bs=4k 2>/dev/null; echo "== full: $(df --output=avail {disk:?} | tail -1)"
echo "== restart"; $Q -c quarry.toml call {tool} '{q}' 2>&1; echo "rc=$?"
cp {edited:?} docs/m.md
echo "== edit"; $Q -c quarry.toml call {tool} '{q}' 2>&1; echo "rc=$?"
echo "== files"; ls {files:?}
"#,
        quarry = quarry_bin(),
        edited = edited,
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "bash", "-c", &script])
        .current_dir(env.dir.path())
        .env_remove("QUARRY_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let stage = |name: &str| -> String {
        let from = text.find(&format!("== {name}")).unwrap_or_else(|| panic!("no stage {name}: {text}"));
        let rest = &text[from + 3..];
        rest[..rest.find("\n== ").unwrap_or(rest.len())].to_string()
    };
    let build = stage("build");
    assert!(build.contains("rc=0"), "{build}");
    assert!(stage("full").contains("full:      0") || stage("full").trim_end().ends_with(" 0"), "{}", stage("full"));
    let restart = stage("restart");
    assert!(restart.contains("rc=0") && restart.contains("On Windows"), "restart on a full disk: {restart}");
    let edit = stage("edit");
    assert!(edit.contains("rc=0"), "{edit}");
    assert!(edit.contains("msi packages and the registry"), "the edit is served: {edit}");
    assert!(
        edit.contains(&format!("could not be saved to corpus {name}")) && edit.contains("No space left on device"),
        "the log says why it is not saved: {edit}"
    );
    assert!(edit.contains("keeps serving generation 1 read-only"), "{edit}");
    let files = stage("files");
    assert!(files.contains("corpus.sqlite"), "{files}");
    assert!(!files.contains("damaged"), "a failed write damages nothing: {files}");
}

/// Two processes that each add six DOCX files to one docx-search corpus, at the same time, keep
/// all twelve (with an index file each used to keep the last writer's six): the lease orders
/// their commits, and each builds on the other's.
#[test]
fn two_processes_adding_documents_keep_each_others() {
    two_writers(false);
}

/// The same for an instance whose config names no corpus, only `index_dir` (cbf06d5: an index
/// file each, and seven of twelve kept).
#[test]
fn two_processes_adding_documents_to_the_instances_own_corpus_keep_each_others() {
    two_writers(true);
}

/// See [`two_processes_adding_documents_keep_each_others`]: into corpus `docs`, or (`own`) the
/// instance's own.
fn two_writers(own: bool) {
    let env = TestEnv::new();
    env.plugin(quarry_tests::TOY_EMBEDDER, "toy");
    env.plugin(quarry_tests::DOCX_SEARCH, "docx");
    std::fs::create_dir_all(env.path("docs")).unwrap();
    let docx = std::fs::read(quarry_tests::shared_data().join("docx/docling/tests/data/docx/sources/word_tables.docx"))
        .expect("the shared DOCX fixtures (set QUARRY_SHARED_DATA)");
    for w in ["a", "b"] {
        for i in 1..=6 {
            std::fs::write(env.path(&format!("docs/{w}{i}.docx")), &docx).unwrap();
        }
    }
    std::fs::create_dir_all(env.path("index")).unwrap();
    let kept = if own { r#"{ index_dir = "/index" }"# } else { r#"{ corpus = "docs" }"# };
    let grant = if own { "" } else { r#"corpora = [{ name = "docs", mode = "rw" }]"# };
    env.config(&format!(
        r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = {{ dimension = 64, max_tokens = 64 }}
pool = 1

[corpora.docs]
dir = "corpus"

[tools.docx]
component = "plugins/docx.wasm"
embedder = "toy"
config = {kept}
[tools.docx.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index", mode = "rw" }}]
{grant}
deadline = "60s"
"#,
    ));
    let dir = if own { env.own_corpus("docx").join("64-cosine") } else { env.path("corpus") };
    let writer = |w: &str| {
        let script = format!(
            r#"for i in 1 2 3 4 5 6; do {q:?} -c quarry.toml call docx.search_docx "{{\"docx\": \"/docs/{w}$i.docx\", \"search_query\": \"cell\"}}" >/dev/null || exit 1; done"#,
            q = quarry_bin()
        );
        std::process::Command::new("bash").args(["-c", &script]).current_dir(env.dir.path()).spawn().unwrap()
    };
    let (mut a, mut b) = (writer("a"), writer("b"));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let out = std::process::Command::new(quarry_bin())
        .args([
            "-c",
            "quarry.toml",
            "call",
            "--json",
            "docx.search_docx",
            r#"{"docx": "/docs/a1.docx", "search_query": "cell"}"#,
        ])
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout: String = String::from_utf8_lossy(&out.stdout).split_whitespace().collect();
    assert!(stdout.contains("\"documents\":12"), "twelve documents, not one process's six: {stdout}");
    assert_eq!(generation(&dir), Some(12), "one commit per document");
}

/// A hot swap of the component (the same code with one more custom section: new bytes, a new
/// version to the host) reopens the corpus its instances share: nothing is embedded, nothing
/// committed, the answers stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_does_not_rebuild_the_corpus() {
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), manual("windows installers")).unwrap();
    let host = env.host(&config(1, r#"corpora = [{ name = "manual", mode = "rw" }]"#, "")).await;
    let q = json!({"question": "bandwidth limits with a timetable"});
    let before = call(&host, "a.search", q.clone()).await.unwrap();
    let chunks = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap())["chunks"].as_u64().unwrap();
    assert_eq!(generation(&env.path("corpus")), Some(1));

    let plugin = env.path("plugins/chapters.wasm");
    let mut bytes = std::fs::read(&plugin).unwrap();
    let (name, payload) = (b"quarry-test", b"2");
    bytes.extend([0u8, (1 + name.len() + payload.len()) as u8, name.len() as u8]);
    bytes.extend(name);
    bytes.extend(payload);
    env.replace(&plugin, &bytes);
    let swapped = within(120, host.reload(&plugin.canonicalize().unwrap())).await.expect("the swap");
    assert!(
        swapped.instances.contains(&"a".to_string()) && swapped.instances.contains(&"b".to_string()),
        "{swapped:?}"
    );
    let r = report(&call(&host, "a.list_chapter_tree", json!({})).await.unwrap());
    assert_eq!((r["embedded"].as_u64(), r["reused"].as_u64()), (Some(0), Some(chunks)), "{r}");
    assert_eq!(call(&host, "a.search", q).await.unwrap().text, before.text);
    assert_eq!(generation(&env.path("corpus")), Some(1), "the swap committed nothing");
}
