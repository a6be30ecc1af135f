//! What opening a hostile manual costs against its size, before any embedding: reading it
//! (DOCX extraction), the chapter tree (CommonMark) and the chunks. Each shape at three sizes,
//! each 4x the one before: a linear step grows about 4x. `cargo bench -p chapter-rag --bench
//! documents`.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use chapter_rag::manual::Manual;
use chapter_rag::units::{Params, pieces};

/// Read, tree and chunks of `path` with `bytes`: (ms, chunks).
fn open(path: &str, bytes: &[u8]) -> (f64, usize) {
    let t = Instant::now();
    let manual = Manual::from_bytes(path, bytes.to_vec()).expect("reads");
    let tree = manual.tree(100_000).expect("tree");
    let n = pieces(&manual.text, &tree, &Params::default()).expect("chunks").len();
    (t.elapsed().as_secs_f64() * 1e3, n)
}

/// A DOCX whose body is `text` in one paragraph: the parts of a small fixture in
/// ../shared/data, its document replaced.
fn docx(text: &str) -> Vec<u8> {
    let fixture = std::env::var_os("QUARRY_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()))
                .join("../../../shared/data")
        })
        .join("docx/mammoth-npm-1.13.0/simple-list.docx");
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&fixture).expect("fixture")).expect("zip");
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:body></w:document>"
    );
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = zip::ZipWriter::new(&mut out);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for i in 0..archive.len() {
        let mut part = archive.by_index(i).expect("part");
        let name = part.name().to_string();
        let mut data = Vec::new();
        part.read_to_end(&mut data).expect("part");
        if name == "word/document.xml" {
            data = document.clone().into_bytes();
        }
        w.start_file(name, opts).expect("zip");
        w.write_all(&data).expect("zip");
    }
    w.finish().expect("zip");
    out.into_inner()
}

fn main() {
    type Shape = (&'static str, &'static str, fn(usize) -> String);
    let shapes: [Shape; 4] = [
        ("one long line", "m.md", |n| format!("# Title\n\n{}\n", "word another thing here and more. ".repeat(n / 34))),
        ("backtick runs", "m.md", |n| {
            // Runs of one, two, three... backticks, none closed by a run of its length
            // (cmark's pathological case): 4 MiB is 2,900 runs.
            let mut s = String::from("# Title\n\n");
            let mut i = 1;
            while s.len() < n {
                s.push('e');
                s.push_str(&"`".repeat(i));
                i += 1;
            }
            s
        }),
        ("ordinary lines", "m.md", |n| format!("# Title\n\n{}", "word another thing here and more.\n".repeat(n / 34))),
        ("DOCX paragraph", "m.docx", |n| "word another thing here and more. ".repeat(n / 34)),
    ];
    println!("{:<16} {:>8} {:>10} {:>8}", "shape", "size", "ms", "chunks");
    for (name, path, make) in shapes {
        let mut previous: Option<f64> = None;
        for kib in [256usize, 1024, 4096] {
            let text = make(kib << 10);
            let bytes = if path.ends_with(".docx") { docx(&text) } else { text.into_bytes() };
            let (ms, n) = open(path, &bytes);
            let growth = previous.map_or(String::new(), |p| format!("  x{:.1}", ms / p));
            println!("{name:<16} {kib:>6}Ki {ms:>10.1} {n:>8}{growth}");
            previous = Some(ms);
        }
    }
}
