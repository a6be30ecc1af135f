//! usearch (HNSW, C++ through cxx) over the probe's vectors: build with 2 threads, save, view
//! (mmap), search. Usage: ann N [connectivity expansion_add expansion_search]; REUSE=1 searches
//! the index the last run saved, at another expansion_search.
use std::time::Instant;
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};
const DIM: usize = 384;
struct Rng(u64);
impl Rng { fn next(&mut self) -> f32 { self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); ((self.0 >> 11) as f64 / (1u64 << 53) as f64) as f32 } }
fn norm(v: &mut [f32]) { let n = v.iter().map(|x| x*x).sum::<f32>().sqrt(); v.iter_mut().for_each(|x| *x /= n); }
fn doc(d: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng(d as u64 * 7919 + 1);
    let mut c: Vec<f32> = (0..DIM).map(|_| rng.next() - 0.5).collect(); norm(&mut c);
    (0..12).map(|_| { let mut v: Vec<f32> = c.iter().map(|x| x + 0.225 * (rng.next() - 0.5)).collect(); norm(&mut v); v }).collect()
}
fn dot(a: &[f32], b: &[f32]) -> f32 { a.iter().zip(b).map(|(x,y)| x*y).sum() }
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let conn: usize = std::env::args().nth(2).map_or(16, |s| s.parse().unwrap());
    let efc: usize = std::env::args().nth(3).map_or(128, |s| s.parse().unwrap());
    let efs: usize = std::env::args().nth(4).map_or(64, |s| s.parse().unwrap());
    let q8 = std::env::var("Q8").is_ok();
    let vs: Vec<Vec<f32>> = (0..n/12).flat_map(doc).collect();
    let opts = IndexOptions { dimensions: DIM, metric: MetricKind::IP, quantization: if q8 { ScalarKind::I8 } else { ScalarKind::F32 }, connectivity: conn, expansion_add: efc, expansion_search: efs, multi: false };
    if std::env::var("REUSE").is_err() {
    let index = Index::new(&opts).unwrap();
    index.reserve(vs.len()).unwrap();
    let t = Instant::now();
    std::thread::scope(|s| { for th in 0..2 { let (index, vs) = (&index, &vs); s.spawn(move || { for i in (th..vs.len()).step_by(2) { index.add(i as u64, &vs[i]).unwrap(); } }); } });
    println!("build {n}: {:.1} s", t.elapsed().as_secs_f64());
    index.save("/tmp/q/ann.usearch").unwrap();
    drop(index);
    }
    let t = Instant::now();
    let view = Index::new(&opts).unwrap();
    view.view("/tmp/q/ann.usearch").unwrap();
    view.change_expansion_search(efs);
    println!("view: {:.2} ms, size {} MB", t.elapsed().as_secs_f64()*1e3, std::fs::metadata("/tmp/q/ann.usearch").unwrap().len()/1_000_000);
    let mut times = vec![]; let mut hits = 0;
    for i in 0..40 {
        let mut q = vs[(i * 7919) % vs.len()].clone(); let mut r = Rng(i as u64 + 99); q.iter_mut().for_each(|x| *x += 0.05 * (r.next() - 0.5));
        let t = Instant::now();
        let m = view.search(&q, 10).unwrap();
        times.push(t.elapsed().as_secs_f64()*1e3);
        let mut exact: Vec<(usize, f32)> = vs.iter().enumerate().map(|(j, v)| (j, dot(&q, v))).collect();
        exact.select_nth_unstable_by(10, |a, b| b.1.total_cmp(&a.1)); 
        let truth: Vec<u64> = exact[..10].iter().map(|e| e.0 as u64).collect();
        hits += m.keys.iter().filter(|k| truth.contains(k)).count();
    }
    times.sort_by(f64::total_cmp);
    println!("search p50 {:.2} ms, recall@10 {:.3}", times[20], hits as f64 / 400.0);
}
