//! Prints what the extractor gets from a DOCX: each block with its kind and heading path.
//!
//! `cargo run -p docx-search --example extract -- file.docx`

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: extract FILE.docx");
        std::process::exit(2);
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    match docx_search::extract::extract(&bytes) {
        Ok(doc) => {
            for b in &doc.blocks {
                println!("[{:?}] {} :: {}", b.kind, b.heading_path.join(" > "), b.text.replace('\n', " / "));
            }
            eprintln!(
                "{} blocks, {} chars, {} headings, {} tables, {} text boxes, {} notes",
                doc.blocks.len(),
                doc.chars(),
                doc.headings,
                doc.tables,
                doc.text_boxes,
                doc.notes
            );
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    }
}
