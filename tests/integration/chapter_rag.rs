//! The chapter RAG component in the real host: the six tools over the bundled rclone manual,
//! bad manuals and bad arguments, the index (in the instance's own corpus) across a restart, an
//! edit that re-embeds only what changed, and a failed rebuild that leaves the old index serving
//! and saved.
//!
//! These use the toy embedder (fast and deterministic); retrieval quality with the real models
//! is measured by `make eval`, and `make demo` runs the real model end to end.

use std::path::PathBuf;

use quarry_tests::{TOY_SECTION, TestEnv, corpus_generation, within};
use serde_json::{Value, json};

fn rclone_manual() -> PathBuf {
    quarry_tests::crate_dir().join("../host/demo/rclone/MANUAL.md")
}

/// A test environment with `docs/` (read-only as /docs) and `index/` (read-write as /index).
fn env() -> TestEnv {
    TestEnv::with_chapter_rag()
}

fn config(tool_config: &str) -> String {
    format!(
        r#"{TOY_SECTION}
[tools.manual]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {tool_config}
[tools.manual.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index", mode = "rw" }}]
memory = "1GiB"
deadline = "120s"
"#
    )
}

async fn call(host: &quarry::Registry, tool: &str, args: Value) -> Result<quarry::bindings::ToolOutput, String> {
    within(120, host.call(&format!("manual.{tool}"), &args.to_string())).await.map_err(|e| e.to_string())
}

fn extra(out: &quarry::bindings::ToolOutput) -> Value {
    serde_json::from_str(out.extra.as_deref().unwrap_or("null")).unwrap()
}

fn small_manual(windows: &str) -> String {
    let para = |topic: &str| format!("This paragraph explains {topic} for the reader in some detail. ").repeat(16);
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n## On Windows\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth\n\nUse --bwlimit with a timetable. {}\n",
        para("installation"),
        para("linux packages"),
        para(windows),
        para("syncing folders"),
        para("bandwidth limits"),
    )
}

#[tokio::test]
async fn six_tools_over_the_rclone_manual() {
    let env = env();
    std::fs::copy(rclone_manual(), env.path("docs/MANUAL.md")).unwrap();
    let host =
        env.host(&config(r#"{ manual = "/docs/MANUAL.md", index_dir = "/index", similarity_threshold = 0.0 }"#)).await;
    let mut names: Vec<String> = host.tools().iter().map(|t| t.qualified.clone()).collect();
    names.sort();
    let want = ["get_chapter", "list_chapter_tree", "route", "search", "search_chapter_content", "validate_citations"];
    assert_eq!(names, want.map(|t| format!("manual.{t}")));
    for t in host.tools().iter() {
        let schema: Value = serde_json::from_str(&t.spec.args_schema).unwrap();
        assert_eq!(schema["type"], "object", "{}", t.qualified);
        assert!(!t.spec.args_schema.contains("\"null\""), "{}", t.qualified);
        assert!(t.spec.description.contains("/docs/MANUAL.md") || t.qualified.ends_with("validate_citations"));
        // tool-guest's export writes the crate's version into the component; the host reads it.
        assert_eq!(t.component_version.as_deref(), Some(env!("CARGO_PKG_VERSION")), "{}", t.qualified);
    }

    let tree = call(&host, "list_chapter_tree", json!({"level": 1})).await.unwrap();
    assert!(
        tree.text.lines().any(|l| l.starts_with("1 Rclone syncs your files to cloud storage")),
        "{}",
        &tree.text[..300]
    );
    let report = &extra(&tree)["report"];
    assert_eq!(report["chapters"], 2225, "{report}");
    assert!(report["chunks"].as_u64().unwrap() > 2225);
    // The health check passed: every top-level chapter has chunks.
    assert!(report["per_chapter"].as_object().unwrap().values().all(|n| n.as_u64().unwrap() > 0));

    // "rclone tree" is a top-level chapter with its options below.
    let root = tree.text.lines().find(|l| l.contains(" rclone tree (")).expect("rclone tree chapter");
    let id = root.split_whitespace().next().unwrap().to_string();
    let ch = call(&host, "get_chapter", json!({"chapter_id": id, "max_chars": 500})).await.unwrap();
    assert!(ch.text.starts_with(&format!("Chapter {id} rclone tree\nParent: (none")), "{}", ch.text);
    assert!(ch.text.contains("[cut at 500 of"), "{}", ch.text);
    let under = call(&host, "list_chapter_tree", json!({"under": id, "level": 1})).await.unwrap();
    assert!(under.text.lines().all(|l| l.starts_with(&format!("{id}."))), "{}", under.text);

    let route = call(&host, "route", json!({"question": "bwlimit bandwidth timetable"})).await.unwrap();
    let r: Value = serde_json::from_str(&route.text).unwrap();
    let n = r["chapters"].as_array().unwrap().len();
    assert!((1..=3).contains(&n), "{r}");
    assert!(r["reason"].as_str().unwrap().contains("passages"));

    let first = r["chapters"][0]["chapter_id"].as_str().unwrap().to_string();
    let inside = call(&host, "search_chapter_content", json!({"chapter_id": first, "query": "bwlimit", "top_k": 3}))
        .await
        .unwrap();
    assert!(!inside.hits.is_empty() && inside.hits.len() <= 3);
    for h in &inside.hits {
        let m: Value = serde_json::from_str(&h.metadata).unwrap();
        let cid = h.location.as_ref().and_then(|l| l.chapter.as_deref()).unwrap();
        assert!(
            cid == first
                || cid.starts_with(&format!("{first}."))
                || m["chapter_ids"].as_array().unwrap().iter().any(|x| x.as_str().unwrap().starts_with(&first)),
            "{cid} {m}"
        );
        assert!(h.score.is_some() && h.source.as_deref().unwrap().starts_with("/docs/MANUAL.md > "));
    }

    let s = call(&host, "search", json!({"question": "bwlimit bandwidth timetable"})).await.unwrap();
    assert!(s.text.starts_with("Routed to: "), "{}", s.text);
    assert!((1..=10).contains(&s.hits.len()), "{}", s.hits.len());
    assert!(s.text.contains("[1] "));
    // Fragments are spread over sections: each section's best fragment comes before any
    // section's second one. The same question inside the top chapter, unspread
    // (search_chapter_content), gives a second fragment of a section before a new section.
    let sections = |hits: &[quarry::bindings::Hit]| -> Vec<String> {
        hits.iter().map(|h| h.location.as_ref().and_then(|l| l.chapter.clone()).unwrap()).collect()
    };
    let spread_ok = |ids: &[String]| {
        let first_repeat = (0..ids.len()).find(|&i| ids[..i].contains(&ids[i])).unwrap_or(ids.len());
        ids[first_repeat..].iter().all(|id| ids[..first_repeat].contains(id))
    };
    let got = sections(&s.hits);
    assert!(spread_ok(&got), "{got:?}");
    let top = s.text.lines().next().unwrap().trim_start_matches("Routed to: ").split(' ').next().unwrap().to_string();
    let plain = call(
        &host,
        "search_chapter_content",
        json!({"chapter_id": top, "query": "bwlimit bandwidth timetable", "top_k": 10}),
    )
    .await
    .unwrap();
    assert!(!spread_ok(&sections(&plain.hits)), "{:?}", sections(&plain.hits));

    // A section of a candidate is inside it.
    let v = call(&host, "validate_citations", json!({"cited": [format!("{id}.1")], "candidates": [id.clone()]}))
        .await
        .unwrap();
    assert_eq!(extra(&v)["valid"], true, "{}", v.text);
    assert_eq!(extra(&v)["cited"][0]["reason"], format!("inside candidate {id}"));
    let v = call(&host, "validate_citations", json!({"cited": ["1"], "candidates": ["2"]})).await.unwrap();
    assert_eq!(extra(&v)["valid"], false);
}

#[tokio::test]
async fn bad_ids_and_questions_get_clear_errors() {
    let env = env();
    std::fs::write(env.path("docs/m.md"), small_manual("windows installers")).unwrap();
    let host = env.host(&config(r#"{ manual = "/docs/m.md" }"#)).await;
    let e = call(&host, "get_chapter", json!({"chapter_id": "2.7"})).await.unwrap_err();
    assert!(e.contains("no chapter \"2.7\"") && e.contains("nearest ids are 2.1"), "{e}");
    let e = call(&host, "search", json!({"question": "   "})).await.unwrap_err();
    assert!(e.contains("the question is empty"), "{e}");
    let e = call(&host, "route", json!({})).await.unwrap_err();
    assert!(e.contains("missing field `question`"), "{e}");
    let e = call(&host, "search_chapter_content", json!({"chapter_id": "9", "query": "x"})).await.unwrap_err();
    assert!(e.contains("no chapter \"9\""), "{e}");
    // Still serving.
    assert!(call(&host, "list_chapter_tree", json!({})).await.is_ok());
}

#[tokio::test]
async fn bad_manuals_fail_at_load_with_no_index_written() {
    let env = env();
    std::fs::write(env.path("docs/empty.md"), "\n \n").unwrap();
    std::fs::write(env.path("docs/headings.md"), "# Heading\n\nx\n\n".repeat(10_000)).unwrap();
    {
        // 50 MB of Markdown.
        let line = "Some perfectly ordinary Markdown text in a very large file.\n";
        let f = std::fs::File::create(env.path("docs/huge.md")).unwrap();
        let mut w = std::io::BufWriter::new(f);
        use std::io::Write;
        for _ in 0..(50_000_000 / line.len()) {
            w.write_all(line.as_bytes()).unwrap();
        }
    }
    std::fs::write(env.path("docs/manual.pdf"), "%PDF-1.4").unwrap();
    for (manual, want) in [
        ("/docs/empty.md", "the document is empty"),
        ("/docs/huge.md", "over the 20971520-byte limit (config max_bytes)"),
        ("/docs/headings.md", "has 10000 headings, more than the limit of 5000"),
        ("/docs/manual.pdf", "convert it to Markdown"),
        ("/docs/missing.md", "File does not exist: /docs/missing.md"),
    ] {
        let cfg =
            quarry::Config::load(&env.config(&config(&format!(r#"{{ manual = "{manual}", index_dir = "/index" }}"#))))
                .unwrap();
        let host = quarry::Registry::new(cfg).unwrap();
        let failures = within(60, host.load_all()).await;
        let msg = failures.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>().join("; ");
        assert!(msg.contains(want), "{manual}: {msg}");
        assert!(std::fs::read_dir(env.path("index")).unwrap().next().is_none(), "{manual}: an index was written");
    }
}

/// Writes `text` to `path` as an edit the tool must notice: the mtime set a second past the
/// one it had (a file system's clock can be coarser than the time between two writes).
fn edit(path: &std::path::Path, text: &[u8]) {
    let before = filetime::FileTime::from_last_modification_time(&std::fs::metadata(path).unwrap());
    std::fs::write(path, text).unwrap();
    let after = filetime::FileTime::from_unix_time(before.unix_seconds() + 1, before.nanoseconds());
    filetime::set_file_mtime(path, after).unwrap();
}

#[tokio::test]
async fn restart_edit_and_failed_rebuild() {
    let env = env();
    std::fs::write(env.path("docs/m.md"), small_manual("windows installers")).unwrap();
    let cfg = config(r#"{ manual = "/docs/m.md", index_dir = "/index" }"#);
    let report = |out: &quarry::bindings::ToolOutput| extra(out)["report"].clone();
    let chunks;
    {
        let host = env.host(&cfg).await;
        let r = report(&call(&host, "list_chapter_tree", json!({})).await.unwrap());
        chunks = r["chunks"].as_u64().unwrap();
        assert_eq!(r["embedded"], chunks);
    }
    // A restart reopens the index: nothing embedded.
    let host = env.host(&cfg).await;
    let r = report(&call(&host, "list_chapter_tree", json!({})).await.unwrap());
    assert_eq!((r["embedded"].as_u64(), r["reused"].as_u64()), (Some(0), Some(chunks)), "{r}");

    // The index is kept in the instance's own corpus, by the host; the tool writes nothing
    // to index_dir.
    let kept = env.own_corpus("manual").join("64-cosine");
    assert_eq!(corpus_generation(&kept), Some(1));
    assert!(std::fs::read_dir(env.path("index")).unwrap().next().is_none(), "the tool wrote to index_dir");

    // Edit one chapter: only its chunks are embedded again, in one more commit.
    edit(&env.path("docs/m.md"), small_manual("windows msi packages").as_bytes());
    let r = report(&call(&host, "list_chapter_tree", json!({})).await.unwrap());
    let embedded = r["embedded"].as_u64().unwrap();
    assert!(embedded >= 1 && embedded < chunks / 2, "re-embedded {embedded} of {chunks}: {r}");
    assert_eq!(corpus_generation(&kept), Some(2));

    // An edit that cannot be indexed: the old index keeps serving, and the corpus keeps it.
    edit(&env.path("docs/m.md"), b"");
    let out = call(&host, "search", json!({"question": "bandwidth limits"})).await.unwrap();
    assert!(out.text.contains("Syncing"), "{}", out.text);
    assert!(extra(&out)["stale_index"].as_str().unwrap().contains("could not be indexed"), "{}", out.extra.unwrap());
    assert_eq!(corpus_generation(&kept), Some(2));
}

#[tokio::test]
async fn a_docx_manual_gets_its_tree_from_heading_styles() {
    let env = env();
    let docx = quarry_tests::shared_data().join("docx/generated/trpl_zh_cn.pandoc.docx");
    std::fs::copy(&docx, env.path("docs/book.docx")).unwrap_or_else(|e| panic!("{}: {e}", docx.display()));
    let host = env.host(&config(r#"{ manual = "/docs/book.docx", similarity_threshold = 0.0 }"#)).await;
    let tree = call(&host, "list_chapter_tree", json!({"level": 1})).await.unwrap();
    assert!(tree.text.lines().any(|l| l.contains(" 入门指南 (")), "{}", &tree.text[..400.min(tree.text.len())]);
    let s = call(&host, "search", json!({"question": "cargo build 构建项目"})).await.unwrap();
    assert!(!s.hits.is_empty(), "{}", s.text);
}

/// A DOCX whose body is `text` in one paragraph: a small fixture's parts, its document replaced.
fn one_paragraph_docx(text: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let fixture = quarry_tests::shared_data().join("docx/mammoth-npm-1.13.0/simple-list.docx");
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&fixture).unwrap()).unwrap();
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = zip::ZipWriter::new(&mut out);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for i in 0..archive.len() {
        let mut part = archive.by_index(i).unwrap();
        let name = part.name().to_string();
        let mut data = Vec::new();
        part.read_to_end(&mut data).unwrap();
        if name == "word/document.xml" {
            data = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:body></w:document>"
            )
            .into_bytes();
        }
        w.start_file(name, opts).unwrap();
        w.write_all(&data).unwrap();
    }
    w.finish().unwrap();
    out.into_inner()
}

/// Manuals shaped to cost their size squared where a step is superlinear open and index within
/// deadlines a linear pass meets with room to spare: one 4 MiB line, 4 MiB of backtick runs of
/// growing length (cmark's pathological case) and a DOCX whose one paragraph is 4 MiB. On
/// c8d5fbc chunking the line took 25 s natively and the DOCX's block tree 10 s; now each is
/// about a second (`cargo bench -p chapter-rag --bench documents`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_manuals_open_in_linear_time() {
    let env = env();
    let size = 4 << 20;
    let sentence = "word another thing here and more. ";
    std::fs::write(env.path("docs/line.md"), format!("# Title\n\n{}\n", sentence.repeat(size / sentence.len())))
        .unwrap();
    let mut ticks = String::from("# Title\n\n");
    for i in 1.. {
        if ticks.len() > size {
            break;
        }
        ticks.push('e');
        ticks.push_str(&"`".repeat(i));
    }
    std::fs::write(env.path("docs/ticks.md"), ticks).unwrap();
    std::fs::write(env.path("docs/one.docx"), one_paragraph_docx(&sentence.repeat(size / sentence.len()))).unwrap();
    let mut body = TOY_SECTION.to_string();
    for (name, file) in [("line", "line.md"), ("ticks", "ticks.md"), ("docx", "one.docx")] {
        body.push_str(&format!(
            "[tools.{name}]\ncomponent = \"plugins/chapters.wasm\"\nembedder = \"toy\"\n\
             config = {{ manual = \"/docs/{file}\", similarity_threshold = 0.0 }}\n\
             [tools.{name}.grants]\ndirs = [{{ host = \"docs\", guest = \"/docs\" }}]\nmemory = \"1GiB\"\n\
             deadline = \"20s\"\nprepare_deadline = \"40s\"\n"
        ));
    }
    let start = std::time::Instant::now();
    let host = within(180, env.host(&body)).await;
    eprintln!("three 4 MiB manuals opened and indexed in {:?}", start.elapsed());
    for name in ["line", "ticks", "docx"] {
        let out = within(60, host.call(&format!("{name}.search"), r#"{"question":"another thing"}"#)).await.unwrap();
        assert!(!out.hits.is_empty(), "{name}: {}", out.text);
    }
}
