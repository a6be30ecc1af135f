//! The fixture sweep: every .docx under `../shared/data/docx` (208 real files from python-docx,
//! mammoth, docx-rs, docx2python and docling) goes through vetting and extraction. None may
//! panic (a panic is a trap inside the component); each file that yields no text is reported
//! with the reason.

use std::path::{Path, PathBuf};

use docx_search::extract::extract;
use docx_search::package::DocxError;

// The crate dir as cargo gives it to the running test, not as built (`env!`): cargo reuses a
// test binary built in another checkout that shares the target dir.
fn shared_docx() -> PathBuf {
    let base = std::env::var_os("QUARRY_SHARED_DATA").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()))
            .join("../../../shared/data")
    });
    let dir = base.join("docx");
    assert!(
        dir.is_dir(),
        "{} is missing: the fixture sweep needs the shared data (set QUARRY_SHARED_DATA to its folder)",
        dir.display()
    );
    dir
}

fn docx_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("readable").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            docx_files(&p, out);
        } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("docx")) {
            out.push(p);
        }
    }
}

#[test]
fn every_fixture_extracts_or_says_why() {
    let dir = shared_docx();
    let mut files = Vec::new();
    docx_files(&dir, &mut files);
    // The generated manuals are large; the sweep is about variety. They have their own tests.
    files.retain(|f| !f.starts_with(dir.join("generated")));
    assert!(files.len() >= 200, "expected the 208 fixtures (minus generated), found {}", files.len());
    let mut panicked = Vec::new();
    let mut no_text = Vec::new();
    let mut ok = 0;
    for f in &files {
        let bytes = std::fs::read(f).expect("readable fixture");
        match std::panic::catch_unwind(|| extract(&bytes)) {
            Err(_) => panicked.push(f.clone()),
            Ok(Ok(doc)) => {
                assert!(doc.chars() > 0);
                ok += 1;
            }
            Ok(Err(e)) => no_text.push((f.strip_prefix(&dir).unwrap_or(f).display().to_string(), e)),
        }
    }
    let report: String = no_text.iter().map(|(f, e)| format!("{f}\t{e}\n")).collect();
    let _ = std::fs::write(std::env::temp_dir().join("docx-sweep.tsv"), report);
    eprintln!("fixture sweep: {} files, {ok} with text, {} without:", files.len(), no_text.len());
    for (f, e) in &no_text {
        eprintln!("  {f}: {e}");
    }
    assert!(panicked.is_empty(), "extraction panicked on: {panicked:#?}");
    // Every file without text must be one a person would agree has none, or is not a DOCX.
    for (f, e) in &no_text {
        assert!(
            matches!(
                e,
                DocxError::NoText
                    | DocxError::Strict
                    | DocxError::LegacyDoc
                    | DocxError::Encrypted
                    | DocxError::NotZip(_)
                    | DocxError::Parse(_)
            ),
            "{f}: unexpected error {e}"
        );
    }
    // The inventory (python-docx's count of paragraph text) says which fixtures hold real text:
    // each of those must give text, unless it is in a format we refuse by name.
    let inventory = std::fs::read_to_string(dir.join("inventory.jsonl")).expect("inventory.jsonl");
    for row in inventory.lines() {
        let row: serde_json::Value = serde_json::from_str(row).expect("inventory row");
        let path = row["path"].as_str().unwrap_or_default().trim_start_matches("./");
        if row["text_chars"].as_u64().unwrap_or(0) < 20 {
            continue;
        }
        if let Some((f, e)) = no_text.iter().find(|(f, _)| f == path) {
            assert!(matches!(e, DocxError::Strict), "{f} has {} characters of text but gave: {e}", row["text_chars"]);
        }
    }
    eprintln!("fixture sweep: {ok} of {} fixtures gave text", files.len());
}
