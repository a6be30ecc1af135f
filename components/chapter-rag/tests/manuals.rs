//! The chapter trees of the two development manuals against the section lists in
//! ../shared/data (made with another CommonMark parser): same headings, titles, levels and
//! line ranges.

use std::path::PathBuf;

use chapter_rag::tree::parse;
use chapter_rag::units::{Params, pieces};

// The crate dir as cargo gives it to the running test, not as built (`env!`): cargo reuses a
// test binary built in another checkout that shares the target dir.
fn data() -> PathBuf {
    std::env::var_os("QUARRY_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()))
                .join("../../../shared/data")
        })
        .join("manuals")
}

fn check(manual: &str, file: &str, headings: usize) {
    let text = std::fs::read_to_string(data().join(manual).join(file)).expect("shared data (QUARRY_SHARED_DATA)");
    let sections: Vec<serde_json::Value> = std::fs::read_to_string(data().join(manual).join("sections.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tree = parse(&text, 10_000).unwrap();
    let lines = text.lines().count() as u64;
    let nodes: Vec<_> = tree.nodes.iter().enumerate().filter(|(_, n)| n.id != "0").collect();
    assert_eq!(nodes.len(), headings);
    assert_eq!(sections.len(), headings);
    for ((i, n), s) in nodes.iter().zip(&sections) {
        // Titles compare with runs of white space as one space (the tree normalises them).
        let want = s["title_clean"].as_str().unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(n.title, want, "{}", s["id"]);
        assert_eq!(n.level as u64, s["level"].as_u64().unwrap(), "{}", s["id"]);
        assert_eq!(n.lines.0 as u64, s["line_start"].as_u64().unwrap(), "{} {}", s["id"], n.title);
        // The list counts the empty line after the final newline as a line of its own.
        let want = s["subtree_line_end"].as_u64().unwrap().min(lines);
        assert_eq!(n.subtree_last_line as u64, want, "{} {}", s["id"], n.title);
        let path: Vec<String> = serde_json::from_value(s["path"].clone()).unwrap();
        let titles: Vec<String> = tree.path(*i);
        assert_eq!(titles.len(), path.len(), "{}", s["id"]);
    }
    // Every chapter is covered by some chunk, and chunks are the document's own bytes.
    let pieces = pieces(&text, &tree, &Params::default()).unwrap();
    let mut covered = vec![false; tree.nodes.len()];
    for p in &pieces {
        assert_eq!(text[p.range.clone()], p.text);
        for &c in &p.chapters {
            covered[c] = true;
        }
    }
    let missing: Vec<_> = covered.iter().enumerate().filter(|(_, c)| !**c).map(|(i, _)| &tree.nodes[i].id).collect();
    assert!(missing.is_empty(), "chapters without chunks: {missing:?}");
    eprintln!("{manual}: {} chapters, {} chunks", tree.nodes.len(), pieces.len());
}

#[test]
fn rclone_tree_matches_the_section_list() {
    check("rclone", "MANUAL.md", 2224);
}

#[test]
fn trpl_tree_matches_the_section_list() {
    check("trpl-zh-cn", "manual.md", 545);
}

fn docx_tree(name: &str) -> chapter_rag::tree::Tree {
    let path = data().parent().unwrap().join("docx/generated").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let manual = chapter_rag::manual::Manual::from_bytes(name, bytes).unwrap();
    manual.tree(10_000).unwrap()
}

#[test]
fn docx_manual_tree_follows_its_heading_styles() {
    let md = std::fs::read_to_string(data().join("rclone/MANUAL.md")).unwrap();
    let md = parse(&md, 10_000).unwrap();
    let docx = docx_tree("rclone_manual.pandoc.docx");
    let tops = |t: &chapter_rag::tree::Tree| {
        t.roots.iter().map(|&r| t.nodes[r].title.clone()).filter(|t| t != "Preamble").collect::<Vec<_>>()
    };
    // The DOCX was made from the Markdown by pandoc: the same chapters at the top.
    assert_eq!(tops(&docx), tops(&md));
    let headings = |t: &chapter_rag::tree::Tree| t.nodes.iter().filter(|n| n.id != "0").count();
    assert_eq!(headings(&docx), headings(&md));
    assert!(docx.warning.is_none());
}

#[test]
fn docx_without_heading_styles_gets_blocks_and_a_warning() {
    let t = docx_tree("rclone_manual.lo-resave-flattened.docx");
    assert!(t.warning.as_deref().unwrap().contains("no headings"), "{:?}", t.warning);
    assert!(t.nodes.len() > 100);
}
