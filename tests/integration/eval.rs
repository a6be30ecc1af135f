//! `quarry eval`: a configured chapter-rag tool scored on labelled questions by the binary, as a
//! user runs it on their own manual.

use quarry_tests::{TOY_SECTION, TestEnv, run_quarry as run};
use serde_json::Value;

/// Five sections, each long enough to be chunks of its own, each with words of its own.
fn manual() -> String {
    let section = |words: &str| format!("{words}. ").repeat(30);
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n## On Windows\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth\n\n{}\n",
        section("Download the archive and unpack it anywhere"),
        section("Use the distribution packages such as apt or dnf"),
        section("Run the installer from winget or chocolatey"),
        section("Sync makes the destination identical to the source"),
        section("Use bwlimit with a timetable to go slowly during working hours"),
    )
}

fn env() -> TestEnv {
    let env = TestEnv::with_chapter_rag();
    std::fs::write(env.path("docs/m.md"), manual()).unwrap();
    env.config(&format!(
        r#"{TOY_SECTION}
[tools.manual]
component = "plugins/chapters.wasm"
embedder = "toy"
config = {{ manual = "/docs/m.md", index_dir = "/index", similarity_threshold = 0.0 }}
[tools.manual.grants]
dirs = [{{ host = "docs", guest = "/docs" }}, {{ host = "index", guest = "/index", mode = "rw" }}]
"#
    ));
    env
}

/// Questions whose words are in their section only: every retriever finds them first.
const QUESTIONS: &str = r#"{"id": "bw", "question": "bwlimit timetable working hours", "answer_sections": ["Syncing > Bandwidth"]}
{"id": "apt", "question": "apt dnf distribution packages", "answer_sections": ["Installing > On Linux"]}

{"id": "both", "question": "winget chocolatey installer; destination identical to the source", "answer_sections": ["Installing > On Windows", "Syncing"]}
"#;

#[test]
fn scores_a_tool_on_labelled_questions() {
    let env = env();
    std::fs::write(env.path("q.jsonl"), QUESTIONS).unwrap();
    let (code, out, err) = run(&env, &["eval", "manual.search", "q.jsonl", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((v["tool"].as_str(), v["questions"].as_u64()), (Some("manual.search"), Some(3)));
    let row = &v["rows"][0];
    assert_eq!(row["retriever"], "as configured");
    assert_eq!(row["multi_section_questions"], 1);
    for k in ["1", "3", "5", "10"] {
        assert_eq!(row["section_recall"][k], 1.0, "{row}");
    }
    assert_eq!(row["chapter_recall"]["3"], 1.0, "{row}");
    assert_eq!(row["mrr_at_10"], 1.0, "{row}");
    assert_eq!(row["all_found_at_10"], 1.0, "{row}");
    assert!(row["latency_ms"]["p50"].as_f64().unwrap() > 0.0, "{row}");

    // Side by side, as a table: the three retrievers, each with its latency.
    let (code, out, err) = run(&env, &["eval", "manual.search", "q.jsonl", "--compare"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("manual.search: 3 questions (1 multi-section)"), "{out}");
    for name in ["global_vector", "global_hybrid", "routed"] {
        let line = out.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap_or_else(|| panic!("{out}"));
        assert_eq!(line.split('|').count(), 13, "{line}");
    }
    // Per question, with --details: where each retriever found it, the route, the fragments.
    let (code, out, err) = run(&env, &["eval", "manual.search", "q.jsonl", "--compare", "--details"]);
    assert_eq!(code, 0, "{err}");
    let bw = out.lines().position(|l| l.starts_with("bw: found at 1 (routed); global_vector at 1, global_hybrid at 1"));
    let bw = bw.unwrap_or_else(|| panic!("{out}"));
    let block: Vec<&str> = out.lines().skip(bw).take(5).collect();
    assert_eq!(block[1], "  question: bwlimit timetable working hours", "{out}");
    assert_eq!(block[2], "  gold: Syncing > Bandwidth", "{out}");
    assert!(block[3].starts_with("  routed: 2") && block[3].contains("Syncing"), "{out}");
    assert!(block[4].starts_with("  1. Syncing > Bandwidth (lines "), "{out}");
    assert!(out.contains("both: found at 1 (routed)") && out.contains("; every gold section found"), "{out}");
    let (code, out, err) = run(&env, &["eval", "manual.search", "q.jsonl", "--json", "--details"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["details"][0]["id"], "bw", "{out}");
    assert_eq!(v["details"][0]["found_at"]["as configured"], 1, "{out}");
    assert_eq!(v["details"][2]["all_found"], true, "{out}");

    // A question that nothing answers counts against every measure.
    std::fs::write(
        env.path("q.jsonl"),
        format!("{QUESTIONS}{}\n", r#"{"question": "zzzz", "answer_sections": ["Nowhere"]}"#),
    )
    .unwrap();
    let (code, out, err) = run(&env, &["eval", "manual", "q.jsonl", "--json"]);
    assert_eq!(code, 2, "the instance has six tools: {out}");
    assert!(err.contains("no tool \"manual\"") && err.contains("manual.search"), "{err}");
    let (code, out, err) = run(&env, &["eval", "manual.search", "q.jsonl", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"][0]["section_recall"]["10"], 0.75, "{out}");
    assert_eq!(v["rows"][0]["mrr_at_10"], 0.75, "{out}");
    let (code, out, err) = run(&env, &["eval", "manual.search", "q.jsonl", "--details"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("line 5: found not in the first 10\n  question: zzzz\n  gold: Nowhere\n"), "{out}");
}

/// Questions that name sections by id, with the manual's `sections.jsonl` elsewhere
/// (`--sections`), as the development manuals keep them.
#[test]
fn sections_by_id_from_another_folder() {
    let env = env();
    std::fs::create_dir_all(env.path("built")).unwrap();
    let text = manual();
    let lines: Vec<&str> = text.lines().collect();
    let at = |h: &str| lines.iter().position(|l| *l == h).unwrap() + 1;
    let (sync, bw, end) = (at("# Syncing"), at("## Bandwidth"), lines.len());
    std::fs::write(
        env.path("built/sections.jsonl"),
        format!(
            "{}\n{}\n",
            serde_json::json!({"id": "S1", "path": ["Syncing"], "line_start": sync, "subtree_line_end": end}),
            serde_json::json!({"id": "S2", "path": ["Syncing", "Bandwidth"], "line_start": bw, "subtree_line_end": end}),
        ),
    )
    .unwrap();
    std::fs::write(
        env.path("q.jsonl"),
        r#"{"id": "bw", "question": "bwlimit timetable working hours", "answer_section_ids": ["S2"]}"#,
    )
    .unwrap();
    let (code, _, err) = run(&env, &["eval", "manual.search", "q.jsonl"]);
    assert_eq!(code, 2, "without the sections, an id means nothing: {err}");
    let (code, out, err) =
        run(&env, &["eval", "manual.search", "q.jsonl", "--sections", "built/sections.jsonl", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"][0]["section_recall"]["1"], 1.0, "{out}");
}

#[test]
fn bad_question_files_and_tools_are_named() {
    let env = env();
    std::fs::write(env.path("q.jsonl"), format!("{}\n{{\"question\": \"x\"}}\n", QUESTIONS.lines().next().unwrap()))
        .unwrap();
    let (code, _, err) = run(&env, &["eval", "manual.search", "q.jsonl"]);
    assert_eq!(code, 2);
    assert!(err.contains("q.jsonl line 2: name the sections that answer it"), "{err}");
    let (code, _, err) = run(&env, &["eval", "manual.search", "missing.jsonl"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read missing.jsonl"), "{err}");
    std::fs::write(env.path("q.jsonl"), QUESTIONS).unwrap();
    let (code, _, err) = run(&env, &["eval", "manual.get_chapter", "q.jsonl"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot tell which argument takes the question"), "{err}");
}

/// A docx-search instance is scored by the heading paths of its hits; `--compare` runs the two
/// modes it offers and says it skipped routing.
#[test]
fn scores_docx_search_by_heading_path() {
    let env = env();
    env.plugin(quarry_tests::DOCX_SEARCH, "docx");
    let fixture = quarry_tests::shared_data().join("docx/docling/tests/data/docx/sources/word_tables.docx");
    std::fs::copy(&fixture, env.path("docs/tables.docx")).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    env.config(&format!(
        r#"{TOY_SECTION}
[tools.tables]
component = "plugins/docx.wasm"
embedder = "toy"
config = {{ docx = "/docs/tables.docx", similarity_threshold = 0.0 }}
[tools.tables.grants]
dirs = [{{ host = "docs", guest = "/docs" }}]
"#
    ));
    std::fs::write(
        env.path("t.jsonl"),
        r#"{"question": "Merged Cell 1.1", "answer_sections": ["Test with tables"]}
{"question": "Merged Cell 1.1", "answer_sections": ["Some other heading"]}
"#,
    )
    .unwrap();
    let (code, out, err) = run(&env, &["eval", "tables", "t.jsonl", "--compare", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("does not offer retrieval \"routed\"; skipped"), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let names: Vec<&str> = v["rows"].as_array().unwrap().iter().map(|r| r["retriever"].as_str().unwrap()).collect();
    assert_eq!(names, ["global_vector", "global_hybrid"]);
    for row in v["rows"].as_array().unwrap() {
        // One question answered under its heading, the other named a heading the file lacks.
        assert_eq!(row["section_recall"]["1"], 0.5, "{row}");
        assert_eq!(row["chapter_recall"]["1"], 0.5, "{row}");
    }
}

/// An answer section written otherwise than the manual writes it (another case) is never
/// found: the run says so, naming the question and the manual's spelling, and the good
/// questions still score.
#[test]
fn a_gold_path_the_manual_does_not_have_is_named() {
    let env = env();
    let questions = QUESTIONS.to_string()
        + r#"{"id": "typo", "question": "bwlimit timetable working hours", "answer_sections": ["syncing > bandwidth"]}"#
        + "\n";
    std::fs::write(env.path("q.jsonl"), questions).unwrap();
    let (code, _, err) = run(&env, &["eval", "manual.search", "q.jsonl"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: typo: no fragment returned lies under \"syncing > bandwidth\"")
            && err.contains("the manual writes it \"Syncing > Bandwidth\""),
        "{err}"
    );
    assert_eq!(err.matches("warning:").count(), 1, "only the typo: {err}");
}
