//! Golden tests on real fixtures: table rows, heading paths, notes and text boxes come out.

use std::path::PathBuf;

use docx_search::extract::{Extracted, Kind, extract};

// The crate dir as cargo gives it to the running test, not as built (`env!`): cargo reuses a
// test binary built in another checkout that shares the target dir.
fn fixture(rel: &str) -> Extracted {
    let base = std::env::var_os("QUARRY_SHARED_DATA").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()))
            .join("../../../shared/data")
    });
    let path = base.join("docx").join(rel);
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (set QUARRY_SHARED_DATA to the shared data folder)", path.display()));
    extract(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn has(doc: &Extracted, kind: Kind, path: &[&str], text: &str) -> bool {
    doc.blocks.iter().any(|b| b.kind == kind && b.heading_path == path && b.text.contains(text))
}

#[test]
fn tables_become_rows_under_their_heading() {
    let doc = fixture("docling/tests/data/docx/sources/word_tables.docx");
    assert_eq!(doc.tables, 7);
    assert!(has(
        &doc,
        Kind::Table,
        &["Test with tables"],
        "Header 0.0 | Header 0.1 | Header 0.2\nCell 1.0 | Cell 1.1 | Cell 1.2"
    ));
    assert!(has(&doc, Kind::Table, &["Test with tables"], "Cell 1.0 | Merged Cell 1.1 1.2"));
}

#[test]
fn heading_paths_nest_and_notes_are_kept() {
    let doc = fixture("docx2python/tests/resources/example.docx");
    assert!(has(&doc, Kind::Heading, &["Heading 1", "Heading 2"], "Heading 2"));
    assert!(has(&doc, Kind::Note, &["Footnotes"], "[1] First footnote"));
    assert!(has(&doc, Kind::Note, &["Endnotes"], "[2] Second endnote"));
    // Body text before the first heading has an empty path.
    assert!(has(&doc, Kind::Paragraph, &[], "Text outside table"));
}

#[test]
fn text_boxes_are_read() {
    let doc = fixture("docling/tests/data/docx/sources/textbox.docx");
    assert!(doc.text_boxes >= 10, "{} text boxes", doc.text_boxes);
    assert!(has(&doc, Kind::TextBox, &[], "Suggested Reportable Symptoms"));
    let doc = fixture("mammoth-npm-1.13.0/text-box.docx");
    assert!(has(&doc, Kind::TextBox, &[], "Datum plane"));
}

#[test]
fn chinese_headings_and_tables() {
    let doc = fixture("docx2python/tests/resources/libreoffice_conversion.docx");
    assert!(doc.headings >= 10, "{} headings", doc.headings);
    assert!(doc.blocks.iter().any(|b| b.heading_path.iter().any(|h| h.contains("竞争性谈判采购公告"))));
    assert!(doc.blocks.iter().any(|b| b.kind == Kind::Table && b.text.contains(" | ")));
}
