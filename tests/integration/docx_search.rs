//! The DOCX search component in the real host: both modes, CrewAI's output and schemas, structured
//! hits, every kind of bad input, and the index on disk across a host restart.
//!
//! These use the toy embedder (fast and deterministic); `docx_rclone.rs` uses the real model.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use quarry_tests::{DOCX_SEARCH, TOY_EMBEDDER, TestEnv, corpus_generation, shared_data, within};
use serde_json::{Value, json};

const GOOD: &str = "docling/tests/data/docx/sources/word_tables.docx";
const NOTES: &str = "docx2python/tests/resources/example.docx";
const BLANK: &str = "python-docx-1.2.0/features/steps/test_files/doc-word-default-blank.docx";

fn fixture(rel: &str) -> Vec<u8> {
    let p = shared_data().join("docx").join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e} (set QUARRY_SHARED_DATA)", p.display()))
}

/// A test environment with `docs/` (granted read-only as /docs) and `index/` (read-write).
fn env() -> TestEnv {
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(DOCX_SEARCH, "docx");
    for d in ["docs", "index", "outside"] {
        std::fs::create_dir_all(env.path(d)).unwrap();
    }
    std::fs::write(env.path("docs/tables.docx"), fixture(GOOD)).unwrap();
    std::fs::write(env.path("docs/notes.docx"), fixture(NOTES)).unwrap();
    std::fs::write(env.path("outside/secret.docx"), fixture(GOOD)).unwrap();
    env
}

fn config(tool_config: &str) -> String {
    format!(
        r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = {{ dimension = 64, max_tokens = 64 }}
pool = 1

[tools.docx]
component = "plugins/docx.wasm"
embedder = "toy"
config = {tool_config}
[tools.docx.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index", mode = "rw" }}]
memory = "1GiB"
deadline = "60s"
"#
    )
}

async fn call(host: &quarry::Registry, args: Value) -> Result<quarry::bindings::ToolOutput, String> {
    within(120, host.call("docx.search_docx", &args.to_string())).await.map_err(|e| e.to_string())
}

fn extra(out: &quarry::bindings::ToolOutput) -> Value {
    serde_json::from_str(out.extra.as_deref().unwrap_or("null")).unwrap()
}

#[tokio::test]
async fn general_mode_schema_search_output_and_hits() {
    let env = env();
    // CrewAI's ranking (vectors alone, best score first), the mode CrewAI parity is checked in.
    let host = env.host(&config(r#"{ retrieval = "vector" }"#)).await;
    let tools = host.tools();
    assert_eq!(tools.len(), 1);
    let spec = &tools[0].spec;
    assert_eq!(spec.description, "A tool that can be used to semantic search a query from a DOCX's content.");
    let schema: Value = serde_json::from_str(&spec.args_schema).unwrap();
    assert_eq!(schema["required"], json!(["docx", "search_query"]));
    assert_eq!(schema["properties"]["docx"]["description"], "File path or URL of a DOCX file to be searched");

    let out = call(
        &host,
        json!({"docx": "/docs/tables.docx", "search_query": "Merged Cell 1.1", "similarity_threshold": 0.0}),
    )
    .await
    .unwrap();
    assert!(out.text.starts_with("Relevant Content:\n"), "{}", out.text);
    assert!(!out.hits.is_empty() && out.hits.len() <= 5);
    let hit = &out.hits[0];
    assert!(out.text.contains(&hit.content));
    assert_eq!(hit.source.as_deref(), Some("/docs/tables.docx"));
    let score = hit.score.unwrap();
    assert!((0.0..=1.0).contains(&score), "{score}");
    let meta: Value = serde_json::from_str(&hit.metadata).unwrap();
    assert_eq!(hit.location.as_ref().map(|l| l.path.clone()), Some(vec!["Test with tables".to_string()]));
    assert_eq!(meta["heading"], "Test with tables");
    assert!(meta["chunk_index"].is_u64());
    // Tables are searchable text.
    assert!(out.hits.iter().any(|h| h.content.contains("Cell 1.0 | Merged Cell 1.1 1.2")), "{:#?}", out.hits);
    // Scores are best first.
    let scores: Vec<f32> = out.hits.iter().map(|h| h.score.unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert_eq!(extra(&out)["retrieval"], "vector");

    // Per-call limit and threshold.
    let out = call(
        &host,
        json!({"docx": "/docs/tables.docx", "search_query": "table", "limit": 1, "similarity_threshold": 0.0}),
    )
    .await
    .unwrap();
    assert_eq!(out.hits.len(), 1);
    let out =
        call(&host, json!({"docx": "/docs/tables.docx", "search_query": "zzzz qqqq", "similarity_threshold": 1.0}))
            .await
            .unwrap();
    assert_eq!(out.text, "No relevant content found.");
    assert!(out.hits.is_empty());

    // A docx given in a call limits the search to it; notes are indexed.
    let out =
        call(&host, json!({"docx": "/docs/notes.docx", "search_query": "First footnote", "similarity_threshold": 0.0}))
            .await
            .unwrap();
    assert!(out.hits.iter().all(|h| h.source.as_deref() == Some("/docs/notes.docx")));
    assert!(out.hits.iter().any(|h| h.content.contains("First footnote")), "{:#?}", out.hits);
    assert_eq!(extra(&out)["documents"], 2);

    // Argument errors.
    for (args, want) in [
        (json!({"search_query": "x"}), "`docx` is required"),
        (json!({"docx": "/docs/tables.docx", "search_query": "  "}), "`search_query` is required"),
        (json!({"docx": "/docs/tables.docx", "search_query": "x", "limit": 0}), "`limit` must be between 1 and 100"),
        (json!({"docx": "/docs/tables.docx", "search_query": "x", "similarity_threshold": 2}), "between 0 and 1"),
        (json!({"docx": "/docs/tables.docx", "query": "x"}), "unknown argument `query`"),
    ] {
        let err = call(&host, args.clone()).await.unwrap_err();
        assert!(err.contains("invalid-args") && err.contains(want), "{args}: {err}");
    }
}

#[tokio::test]
async fn fixed_mode_rewrites_the_description_and_does_not_require_docx() {
    let env = env();
    let host = env.host(&config(r#"{ docx = "/docs/tables.docx" }"#)).await;
    let spec = &host.tools()[0].spec;
    assert_eq!(
        spec.description,
        "A tool that can be used to semantic search a query the /docs/tables.docx DOCX's content."
    );
    let schema: Value = serde_json::from_str(&spec.args_schema).unwrap();
    // CrewAI bug #7356: its fixed-mode schema still requires `docx`. Ours does not.
    assert_eq!(schema["required"], json!(["search_query"]));
    let out = call(&host, json!({"search_query": "Header 0.1", "similarity_threshold": 0.0})).await.unwrap();
    assert!(out.text.starts_with("Relevant Content:\n"));
    assert!(out.hits.iter().all(|h| h.source.as_deref() == Some("/docs/tables.docx")));
}

/// The bad files, each written into docs/ under a telling name.
fn write_bad_files(env: &TestEnv) {
    let docs = env.path("docs");
    std::fs::write(docs.join("zero.docx"), b"").unwrap();
    std::fs::write(docs.join("text.docx"), b"just some text, not a zip").unwrap();
    std::fs::write(docs.join("empty.docx"), fixture(BLANK)).unwrap();
    let good = fixture(GOOD);
    std::fs::write(docs.join("truncated.docx"), &good[..good.len() * 2 / 3]).unwrap();
    std::fs::write(
        docs.join("nodocument.docx"),
        zip_of(&[("[Content_Types].xml", b"<Types/>"), ("readme.txt", b"hi")]),
    )
    .unwrap();
    std::fs::write(docs.join("legacy.doc"), compound(&["WordDocument", "1Table"])).unwrap();
    std::fs::write(docs.join("encrypted.docx"), compound(&["EncryptionInfo", "EncryptedPackage"])).unwrap();
    write_bomb(&docs.join("bomb.docx"));
    // Tables nested 200,000 deep: a few MB of XML that would overflow docx-rs's stack.
    let mut deep = String::from("<w:document><w:body>");
    deep.push_str(&"<w:tbl><w:tr><w:tc>".repeat(200_000));
    deep.push_str(&"</w:tc></w:tr></w:tbl>".repeat(200_000));
    deep.push_str("</w:body></w:document>");
    std::fs::write(
        docs.join("deep.docx"),
        zip_of(&[
            ("[Content_Types].xml", b"<Types/>"),
            ("_rels/.rels", b"<Relationships/>"),
            ("word/document.xml", deep.as_bytes()),
        ]),
    )
    .unwrap();
}

fn zip_of(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = zip::ZipWriter::new(&mut out);
    for (name, data) in parts {
        w.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap();
    out.into_inner()
}

/// An OLE compound file with the named streams: the container of Word 97 documents and of
/// encrypted Office 2007+ documents.
fn compound(streams: &[&str]) -> Vec<u8> {
    let mut cf = cfb::CompoundFile::create(std::io::Cursor::new(Vec::new())).unwrap();
    for s in streams {
        let mut st = cf.create_stream(format!("/{s}")).unwrap();
        st.write_all(&[0u8; 4096]).unwrap();
    }
    cf.flush().unwrap();
    cf.into_inner().into_inner()
}

/// A DOCX-looking zip whose document.xml inflates to 2 GiB (of zeros): a few MB on disk.
fn write_bomb(path: &Path) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(9))
        .large_file(true);
    w.start_file("[Content_Types].xml", zip::write::SimpleFileOptions::default()).unwrap();
    w.write_all(b"<Types/>").unwrap();
    w.start_file("word/document.xml", opts).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..2048 {
        w.write_all(&zeros).unwrap();
    }
    w.finish().unwrap();
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_the_index_keeps_what_it_had() {
    let env = env();
    write_bad_files(&env);
    let bomb_size = std::fs::metadata(env.path("docs/bomb.docx")).unwrap().len();
    assert!(bomb_size < 16 << 20, "the bomb is {bomb_size} bytes");
    let host = env.host(&config(r#"{ index_dir = "/index" }"#)).await;
    let good = json!({"docx": "/docs/tables.docx", "search_query": "Merged Cell", "similarity_threshold": 0.0});
    let before = call(&host, good.clone()).await.unwrap();
    let chunks_before = extra(&before)["chunks"].clone();
    // The index: the instance's own corpus (the config gives index_dir and no corpus).
    let kept = env.own_corpus("docx").join("64-cosine");
    let saved = corpus_generation(&kept);
    assert!(saved.is_some_and(|g| g > 0), "index saved: {saved:?}");

    let cases: &[(&str, &str, &[&str])] = &[
        ("/docs/zero.docx", "invalid-args", &["/docs/zero.docx", "empty (0 bytes)"]),
        ("/docs/text.docx", "invalid-args", &["/docs/text.docx", "not a zip archive"]),
        ("/docs/empty.docx", "invalid-args", &["/docs/empty.docx", "contains no text"]),
        ("/docs/truncated.docx", "invalid-args", &["/docs/truncated.docx", "truncated"]),
        ("/docs/nodocument.docx", "invalid-args", &["/docs/nodocument.docx", "no _rels/.rels", "readme.txt"]),
        ("/docs/legacy.doc", "invalid-args", &["/docs/legacy.doc", "legacy Word 97-2003 .doc", "save it as .docx"]),
        ("/docs/encrypted.docx", "invalid-args", &["/docs/encrypted.docx", "encrypted (password-protected)"]),
        ("/docs/bomb.docx", "invalid-args", &["/docs/bomb.docx", "zip bomb", "word/document.xml"]),
        ("/docs/deep.docx", "invalid-args", &["/docs/deep.docx", "word/document.xml", "more than 256 deep"]),
        ("/docs/missing.docx", "not-found", &["File does not exist: /docs/missing.docx"]),
        ("/outside/secret.docx", "denied", &["Blocked unsafe path", "/outside/secret.docx", "/docs"]),
        ("/docs/../outside/secret.docx", "denied", &["Blocked unsafe path", "/docs/../outside/secret.docx"]),
        ("file:///docs/tables.docx", "denied", &["Blocked unsafe URL scheme", "file"]),
        ("http://127.0.0.1:9/report.docx", "denied", &["Blocked unsafe URL", "http://127.0.0.1:9/report.docx"]),
        ("http://169.254.169.254/latest/meta-data/x.docx", "denied", &["Blocked unsafe URL"]),
        ("", "invalid-args", &["Source must be a valid file path or URL, got: \"\""]),
    ];
    for (docx, kind, wants) in cases {
        let started = std::time::Instant::now();
        let err = call(&host, json!({"docx": docx, "search_query": "anything"})).await.unwrap_err();
        assert!(err.contains(&format!("{kind}:")), "{docx}: {err}");
        for w in *wants {
            assert!(err.contains(w), "{docx}: {err:?} lacks {w:?}");
        }
        assert!(started.elapsed().as_secs() < 30, "{docx} took {:?}", started.elapsed());
    }
    // Nothing was lost: same chunks, same answers, nothing committed.
    let after = call(&host, good).await.unwrap();
    assert_eq!(extra(&after)["chunks"], chunks_before);
    assert_eq!(after.text, before.text);
    assert_eq!(corpus_generation(&kept), saved);
}

/// A folder of documents added one call at a time, more than the corpus notes' 64 KiB could
/// list (cbf06d5 kept a line per document there, and its 459th add failed): every one indexed
/// and counted, one added again found unchanged, and the notes stay a count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_of_documents_is_not_capped_by_the_notes() {
    const DOCUMENTS: usize = 520;
    let env = env();
    let folder = env.path("docs/a-folder-of-documents-added-one-at-a-time");
    std::fs::create_dir_all(&folder).unwrap();
    let bytes = fixture(GOOD);
    for i in 0..DOCUMENTS {
        std::fs::write(folder.join(format!("document-{i:04}.docx")), &bytes).unwrap();
    }
    let host = env.host(&config(r#"{ corpus = "self" }"#)).await;
    let path = |i: usize| format!("/docs/a-folder-of-documents-added-one-at-a-time/document-{i:04}.docx");
    let mut last = Value::Null;
    for i in 0..DOCUMENTS {
        let out = call(&host, json!({"docx": path(i), "search_query": "Merged Cell", "similarity_threshold": 0.0}))
            .await
            .unwrap_or_else(|e| panic!("document {i}: {e}"));
        last = extra(&out);
        assert_eq!(last["added"]["unchanged"], false, "document {i}");
    }
    assert_eq!(last["documents"], DOCUMENTS, "{last}");
    let again = call(&host, json!({"docx": path(7), "search_query": "Merged Cell"})).await.unwrap();
    assert_eq!(extra(&again)["added"]["unchanged"], true);
    assert_eq!(extra(&again)["documents"], DOCUMENTS);
    let kept = env.own_corpus("docx").join("64-cosine");
    let shape = quarry_corpus::Shape { dimension: 64, metric: quarry_corpus::Metric::Cosine };
    let notes = quarry_corpus::LocalCorpus::open(&kept, shape).unwrap().snapshot().unwrap().info().unwrap().notes;
    assert_eq!(notes, format!(r#"{{"docx-search-documents":{DOCUMENTS}}}"#));
}

/// A corpus an earlier version wrote (its documents listed in the notes, no bookkeeping on the
/// first chunks) keeps working: its documents are counted and found unchanged, a new one is
/// added beside them, and one indexed again leaves the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_an_earlier_version_listed_in_the_notes_keep_working() {
    use quarry_corpus::{Change, Filter, LocalCorpus, Metric, Shape};
    let env = env();
    let cfg = config(r#"{ corpus = "self" }"#);
    let host = env.host(&cfg).await;
    for d in ["/docs/tables.docx", "/docs/notes.docx"] {
        call(&host, json!({"docx": d, "search_query": "cell"})).await.unwrap();
    }
    drop(host);
    // As the earlier version left it: the listing in the notes, plain first chunks.
    let kept = env.own_corpus("docx").join("64-cosine");
    let shape = Shape { dimension: 64, metric: Metric::Cosine };
    {
        let corpus = LocalCorpus::open(&kept, shape).unwrap();
        let g = corpus.snapshot().unwrap();
        let heads = g.get(&g.list(&Filter::exact("head", "1"), 0, 10).unwrap()).unwrap();
        assert_eq!(heads.len(), 2);
        let mut listing = serde_json::Map::new();
        let mut plain = Vec::new();
        for mut r in heads.into_iter().flatten() {
            let one = |f: &str| r.fields[f][0].clone();
            let note =
                json!({"key": one("doc"), "sha256": one("sha256"), "chunks": one("chunks").parse::<u64>().unwrap()});
            listing.insert(one("source"), note);
            for f in ["head", "sha256", "chunks"] {
                r.fields.remove(f);
            }
            plain.push(Change::Upsert(r));
        }
        drop(g);
        corpus.commit(plain, Some(json!({"docx-search": listing}).to_string())).unwrap();
    }
    let host = env.host(&cfg).await;
    let out = call(&host, json!({"docx": "/docs/tables.docx", "search_query": "cell"})).await.unwrap();
    assert_eq!((extra(&out)["added"]["unchanged"].clone(), extra(&out)["documents"].clone()), (json!(true), json!(2)));
    std::fs::write(env.path("docs/third.docx"), fixture(GOOD)).unwrap();
    let out = call(&host, json!({"docx": "/docs/third.docx", "search_query": "cell"})).await.unwrap();
    assert_eq!(extra(&out)["documents"], 3);
    // tables.docx with other content: indexed again, out of the listing, still one document.
    std::fs::write(env.path("docs/tables.docx"), fixture(NOTES)).unwrap();
    let out = call(&host, json!({"docx": "/docs/tables.docx", "search_query": "footnote"})).await.unwrap();
    assert_eq!((extra(&out)["added"]["unchanged"].clone(), extra(&out)["documents"].clone()), (json!(false), json!(3)));
    drop(host);
    let notes: Value =
        serde_json::from_str(&LocalCorpus::open(&kept, shape).unwrap().snapshot().unwrap().info().unwrap().notes)
            .unwrap();
    assert_eq!(notes["docx-search-documents"], 3, "{notes}");
    let listed: Vec<&String> = notes["docx-search"].as_object().unwrap().keys().collect();
    assert_eq!(listed, ["/docs/notes.docx"], "{notes}");
}

async fn restart(env: &TestEnv, cfg: &str) -> Arc<quarry::Registry> {
    env.host(cfg).await
}

#[tokio::test]
async fn the_index_survives_a_restart_and_unchanged_documents_cost_nothing() {
    let env = env();
    let cfg = config(r#"{ docx = "/docs/tables.docx", index_dir = "/index" }"#);
    let host = restart(&env, &cfg).await;
    let first = call(&host, json!({"search_query": "Merged Cell", "similarity_threshold": 0.0})).await.unwrap();
    let kept = env.own_corpus("docx").join("64-cosine");
    let saved = corpus_generation(&kept);
    assert!(saved.is_some_and(|g| g > 0), "index saved at open: {saved:?}");
    drop(host);

    let host = restart(&env, &cfg).await;
    // Nothing was committed again: the document was recognised by its content hash.
    assert_eq!(corpus_generation(&kept), saved);
    let again =
        call(&host, json!({"docx": "/docs/tables.docx", "search_query": "Merged Cell", "similarity_threshold": 0.0}))
            .await
            .unwrap();
    assert_eq!(extra(&again)["added"]["unchanged"], true);
    assert_eq!(again.text, first.text);

    // A changed document is re-indexed; a database written over is moved aside, not fatal.
    std::fs::write(env.path("docs/tables.docx"), fixture(NOTES)).unwrap();
    let changed =
        call(&host, json!({"docx": "/docs/tables.docx", "search_query": "footnote", "similarity_threshold": 0.0}))
            .await
            .unwrap();
    assert_eq!(extra(&changed)["added"]["unchanged"], false);
    assert!(changed.text.contains("First footnote"), "{}", changed.text);
    drop(host);
    std::fs::write(kept.join("corpus.sqlite"), vec![b'x'; 8192]).unwrap();
    let host = restart(&env, &cfg).await;
    let out = call(&host, json!({"search_query": "footnote", "similarity_threshold": 0.0})).await.unwrap();
    assert!(out.text.contains("First footnote"));
    assert!(corpus_generation(&kept).is_some_and(|g| g > 0), "indexed again and committed in a new database");
    let aside = std::fs::read_dir(&kept)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("corpus.sqlite.damaged-"))
        .count();
    assert!(aside >= 1, "the damaged database is kept aside");
    let extra_of = |out: &quarry::bindings::ToolOutput| extra(out)["opened"]["unchanged"].clone();
    assert_eq!(extra_of(&out), false);
    drop(host);

    // Another model: the saved vectors cannot be compared with its own, so the document is
    // embedded again, and the next restart with that model finds it unchanged.
    let other = cfg.replace("max_tokens = 64 }", "max_tokens = 64, model_id = \"toy-other\" }");
    assert_ne!(other, cfg);
    for unchanged in [false, true] {
        let host = restart(&env, &other).await;
        let out = call(&host, json!({"search_query": "footnote", "similarity_threshold": 0.0})).await.unwrap();
        assert_eq!(extra_of(&out), unchanged);
        assert_eq!(extra(&out)["model"], "toy-other");
    }
}

/// By default search is hybrid (vectors and keywords fused by rank), and a threshold still
/// drops weak vectors. The eval-only `retrieval` argument picks a mode per call; docx-search
/// does not route.
#[tokio::test]
async fn search_is_hybrid_by_default_and_vector_on_request() {
    let env = env();
    let host = env.host(&config("{}")).await;
    let args = |extra: Value| {
        let mut a =
            json!({"docx": "/docs/tables.docx", "search_query": "Merged Cell 1.1", "similarity_threshold": 0.0});
        a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        a
    };
    let out = call(&host, args(json!({}))).await.unwrap();
    assert_eq!(extra(&out)["retrieval"], "hybrid");
    assert!(out.hits.iter().any(|h| h.content.contains("Merged Cell 1.1")), "{:#?}", out.hits);
    let vector = call(&host, args(json!({"retrieval": "global_vector"}))).await.unwrap();
    assert_eq!(extra(&vector)["retrieval"], "vector");
    let hybrid = call(&host, args(json!({"retrieval": "global_hybrid"}))).await.unwrap();
    assert_eq!(hybrid.hits.len(), out.hits.len());
    let err = call(&host, args(json!({"retrieval": "routed"}))).await.unwrap_err();
    assert!(err.contains("docx-search does not route"), "{err}");
    // The threshold applies to the vector score in both modes.
    let strict = call(&host, args(json!({"similarity_threshold": 0.99}))).await.unwrap();
    assert!(strict.hits.iter().all(|h| h.score.unwrap() >= 0.99), "{:#?}", strict.hits);
}

/// An embedder whose `token-spans` answer falls outside its texts is stopped by the host: the
/// ingest fails with a message naming the embedder, nothing is indexed from it, and a tool on a
/// sound embedder in the same host ingests the same document.
#[tokio::test]
async fn a_faulty_tokenizer_is_stopped_by_the_host() {
    let env = env();
    let faulty = r#"
[embedders.faulty]
component = "plugins/toy.wasm"
config = { dimension = 64, max_tokens = 64, bad_spans = true }
pool = 1

[tools.docx_faulty]
component = "plugins/docx.wasm"
embedder = "faulty"
config = {}
[tools.docx_faulty.grants]
dirs = [{ host = "docs", guest = "/docs" }]
"#;
    let host = env.host(&format!("{}{faulty}", config("{}"))).await;
    let args = json!({"docx": "/docs/tables.docx", "search_query": "Merged Cell 1.1", "similarity_threshold": 0.0});
    let err = within(120, host.call("docx_faulty.search_docx", &args.to_string())).await.unwrap_err().to_string();
    assert!(err.contains("embedder \"faulty\" answered token spans that fall outside text 0"), "{err}");
    assert!(err.contains("its tokenizer is faulty"), "{err}");
    let out = call(&host, args.clone()).await.unwrap();
    assert!(out.hits.iter().any(|h| h.content.contains("Merged Cell 1.1")), "{:#?}", out.hits);

    // Spans that all sit at the start, far more of them than the text has bytes: refused too.
    let config_text = std::fs::read_to_string(env.path("quarry.toml")).unwrap();
    std::fs::write(env.path("quarry.toml"), config_text.replace("bad_spans = true", "empty_spans = 5000")).unwrap();
    let host = quarry::Registry::new(quarry::Config::load(&env.path("quarry.toml")).unwrap()).unwrap();
    assert!(host.load_all().await.is_empty());
    let err = within(120, host.call("docx_faulty.search_docx", &args.to_string())).await.unwrap_err().to_string();
    assert!(err.contains("answered token spans that number 5000 for text 0"), "{err}");
    call(&host, args).await.unwrap();
}

#[tokio::test]
async fn bad_config_is_refused_at_load() {
    let env = env();
    for (tool_config, want) in [
        (r#"{ docx = "/docs/text.docx" }"#, "File does not exist"),
        (r#"{ similarity_threshold = 1.5 }"#, "similarity_threshold must be between 0 and 1"),
        (r#"{ index_dir = "/elsewhere" }"#, "not a granted directory"),
        (r#"{ chunking = "fancy" }"#, "unknown preset"),
        (r#"{ chunking = { mode = "tokens", max_tokens = 500, overlap = 10 } }"#, "does not fit the model's window"),
        (r#"{ colour = "red" }"#, "unknown field `colour`"),
        (r#"{ retrieval = "routed" }"#, "retrieval: unknown mode \"routed\"; use \"hybrid\""),
    ] {
        let cfg = quarry::Config::load(&env.config(&config(tool_config))).unwrap();
        let host = quarry::Registry::new(cfg).unwrap();
        let failures = host.load_all().await;
        let msg = failures.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>().join("; ");
        assert!(msg.contains(want), "{tool_config}: {msg}");
    }
}

#[tokio::test]
async fn ingest_reports_progress_to_the_host() {
    let env = env();
    std::fs::write(env.path("docs/progress-report.docx"), fixture(NOTES)).unwrap();
    let host = env.host(&config("{}")).await;
    let mut rx = host.apps().progress.subscribe();
    call(&host, json!({"docx": "/docs/progress-report.docx", "search_query": "footnote"})).await.unwrap();
    let mut seen = Vec::new();
    while let Ok(p) = rx.try_recv() {
        if p.task == "embedding /docs/progress-report.docx" {
            assert_eq!((p.instance.as_str(), p.unit.as_str()), ("docx", "chunks"));
            seen.push((p.done, p.total));
        }
    }
    assert!(seen.len() >= 2, "{seen:?}");
    assert_eq!(seen.first().map(|s| s.0), Some(0));
    let (done, total) = *seen.last().unwrap();
    assert!(total > 0 && done == total, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
}

/// A loopback HTTP server: `/tables.docx` serves a fixture, `/big.docx` streams 50 MB,
/// `/slow.docx` sends headers then stalls, anything else is a 404.
async fn docx_server() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tables = fixture(GOOD);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tables = tables.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let header =
                    |len: usize| format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n");
                match path.as_str() {
                    "/tables.docx" => {
                        let _ = s.write_all(header(tables.len()).as_bytes()).await;
                        let _ = s.write_all(&tables).await;
                    }
                    "/big.docx" => {
                        let _ = s.write_all(header(50 << 20).as_bytes()).await;
                        let chunk = vec![b'P'; 1 << 16];
                        for _ in 0..800 {
                            if s.write_all(&chunk).await.is_err() {
                                break;
                            }
                        }
                    }
                    "/slow.docx" => {
                        let _ = s.write_all(header(1000).as_bytes()).await;
                        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                    }
                    _ => {
                        let _ = s
                            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                            .await;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn documents_download_over_wasi_http_with_a_size_cap_and_a_timeout() {
    let port = docx_server().await;
    let env = env();
    let cfg = config("{ max_bytes = 1048576, download_timeout_secs = 2 }").replace(
        "memory = \"1GiB\"",
        &format!("memory = \"1GiB\"\nhttp = [\"http://127.0.0.1:{port}\"]\nprivate_networks = [\"127.0.0.1/32\"]"),
    );
    let host = env.host(&cfg).await;
    let url = |p: &str| format!("http://127.0.0.1:{port}/{p}");
    let out =
        call(&host, json!({"docx": url("tables.docx"), "search_query": "Merged Cell", "similarity_threshold": 0.0}))
            .await
            .unwrap();
    assert!(out.text.starts_with("Relevant Content:\n"));
    assert_eq!(out.hits[0].source.as_deref(), Some(url("tables.docx").as_str()));

    let err = call(&host, json!({"docx": url("big.docx"), "search_query": "x"})).await.unwrap_err();
    assert!(err.contains("larger than the 1048576-byte limit") && err.contains("big.docx"), "{err}");
    let started = std::time::Instant::now();
    let err = call(&host, json!({"docx": url("slow.docx"), "search_query": "x"})).await.unwrap_err();
    assert!(err.contains("slow.docx") && (err.contains("timed out") || err.contains("longer than")), "{err}");
    assert!(started.elapsed().as_secs() < 15, "timeout after {:?}", started.elapsed());
    let err = call(&host, json!({"docx": url("missing.docx"), "search_query": "x"})).await.unwrap_err();
    assert!(err.contains("HTTP status 404") && err.contains("missing.docx"), "{err}");
    // A host not on the allowlist is refused by the host's policy.
    let err = call(&host, json!({"docx": "http://example.com/x.docx", "search_query": "x"})).await.unwrap_err();
    assert!(err.contains("denied:") && err.contains("Blocked unsafe URL"), "{err}");
}

/// The indexed documents' sections are resources, listed under the instance and read back with
/// their chunks' overlaps taken out; another URI is no resource of it.
#[tokio::test]
async fn the_sections_of_indexed_documents_are_resources() {
    let env = env();
    let host = env.host(&config(r#"{ docx = "/docs/tables.docx" }"#)).await;
    let caller = quarry::registry::instance::Caller::default();
    let listed = within(60, host.resources(caller)).await.unwrap();
    assert!(!listed.is_empty(), "no sections listed");
    for r in &listed {
        assert!(r.uri.starts_with("quarry://docx/doc/") && r.uri.contains("/section/"), "{}", r.uri);
        assert_eq!(r.description.as_deref(), Some("a section of /docs/tables.docx"));
    }
    // Every chunk of the document lies in one section, so the sections hold its text.
    let first = &listed[0];
    let read = within(60, host.read(&first.uri, caller, std::future::pending())).await.unwrap();
    assert_eq!(read[0].uri, first.uri);
    let quarry::bindings::quarry::retrieval::types::Body::Text(text) = &read[0].body else { panic!("not text") };
    assert!(!text.is_empty());
    let found = call(&host, json!({"search_query": "Header 0.1", "similarity_threshold": 0.0})).await.unwrap();
    let mut all = String::new();
    for r in &listed {
        if let quarry::bindings::quarry::retrieval::types::Body::Text(t) =
            &within(60, host.read(&r.uri, caller, std::future::pending())).await.unwrap()[0].body
        {
            all.push_str(t);
        }
    }
    for h in &found.hits {
        assert!(all.contains(h.content.trim()), "a hit's text is in no section: {:?}", h.content);
    }
    let gone = host.read("quarry://docx/doc/nope/section/0", caller, std::future::pending()).await;
    assert!(matches!(gone, Err(quarry::registry::ReadError::NotFound(_))), "{gone:?}");
}
