//! Chunking cost against the length of a line: the same text as one line and as ordinary
//! lines, at three sizes, CrewAI's character chunking. Linear chunking costs about 4x per 4x
//! of text in both columns. `cargo bench -p rag-core --bench long_lines`.

use std::time::Instant;

use rag_core::chunk::Chunking;

fn best_of(runs: usize, f: impl Fn() -> usize) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..runs {
        let t = Instant::now();
        n = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best * 1e3, n)
}

fn main() {
    let sentence = "word another thing here and `code` more. ";
    println!("{:>8} {:>14} {:>14} {:>10}", "size", "one line ms", "lines ms", "chunks");
    let mut previous: Option<(f64, f64)> = None;
    for kib in [256usize, 1024, 4096] {
        let n = kib * 1024 / sentence.len();
        let one_line = sentence.repeat(n);
        let lines = format!("{}\n", sentence.trim_end()).repeat(n);
        let (a, chunks) = best_of(3, || Chunking::crewai().split(&one_line, None).unwrap().len());
        let (b, _) = best_of(3, || Chunking::crewai().split(&lines, None).unwrap().len());
        let growth =
            previous.map_or(String::new(), |(pa, pb)| format!("  (x{:.1} and x{:.1} for x4 text)", a / pa, b / pb));
        println!("{:>6}Ki {a:>14.1} {b:>14.1} {chunks:>10}{growth}", kib);
        previous = Some((a, b));
    }
}
