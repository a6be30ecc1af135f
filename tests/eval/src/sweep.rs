//! Judging a lever on every manual at once: each lever's values scored per manual and as the
//! macro-average, the questions each value loses or wins per manual and column, and each
//! constant chosen leave-one-manual-out (tuned on the other manuals, scored on the one left out).

use anyhow::Result;
use chapter_rag::search::Params;
use quarry::eval::score::Tally;

use crate::bench::Bench;

/// A lever: a name, the values tried, and how a value is set.
pub struct Lever {
    /// What it is.
    pub name: &'static str,
    /// Values tried (the default among them).
    pub values: Vec<f32>,
    /// Sets a value on the params.
    pub set: fn(&mut Params, f32),
}

/// Sets `name` to `value` on `p` (`--set NAME=VALUE`).
pub fn set(p: &mut Params, name: &str, value: f32) -> Result<()> {
    let lever = levers().into_iter().find(|l| l.name == name);
    let lever = lever.ok_or_else(|| {
        anyhow::anyhow!("no lever {name:?}; the levers: {:?}", levers().iter().map(|l| l.name).collect::<Vec<_>>())
    })?;
    (lever.set)(p, value);
    Ok(())
}

/// Every lever `--sweep` tries, each alone from the defaults.
pub fn levers() -> Vec<Lever> {
    vec![
        Lever { name: "vector_weight", values: vec![1.0, 1.5, 2.0, 3.0, 4.0, 1000.0], set: |p, v| p.vector_weight = v },
        Lever { name: "vote_k", values: vec![0.0, 1.0, 3.0, 10.0, 30.0], set: |p, v| p.vote_k = v },
        Lever { name: "decay", values: vec![0.0, 0.1, 0.25, 0.5, 1.0], set: |p, v| p.decay = v },
        Lever { name: "voters", values: vec![10.0, 20.0, 40.0, 80.0], set: |p, v| p.voters = v as usize },
        Lever { name: "narrow_share", values: vec![0.5, 0.7, 0.9, 1.01], set: |p, v| p.narrow_share = v },
        Lever { name: "candidate_floor", values: vec![0.05, 0.1, 0.3, 0.5], set: |p, v| p.candidate_floor = v },
        Lever { name: "size_power", values: vec![0.0, 0.25, 0.5, 0.75, 1.0], set: |p, v| p.size_power = v },
        Lever { name: "keep_top", values: vec![0.0, 1.0, 2.0, 3.0, 5.0], set: |p, v| p.keep_top = v as usize },
        Lever { name: "widen_below", values: vec![0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01], set: |p, v| p.widen_below = v },
    ]
}

/// The columns of a row, as shares: sec@1/3/5/10, chap@1/3, all-found@10 (when the manual has
/// multi-section questions), MRR@10.
pub fn columns(t: &Tally) -> Vec<f64> {
    let n = t.questions.max(1) as f64;
    let mut c: Vec<f64> = t.section.iter().chain(&t.chapter).map(|&x| x as f64 / n).collect();
    if let Some(a) = t.all_found_share() {
        c.push(a);
    }
    c.push(t.mrr());
    c
}

/// One number per manual to rank values by: the mean of its columns.
pub fn objective(t: &Tally) -> f64 {
    let c = columns(t);
    c.iter().sum::<f64>() / c.len() as f64
}

/// The column counts of a tally (questions right), in [`columns`] order without MRR.
fn counts(t: &Tally) -> Vec<i64> {
    let mut c: Vec<i64> = t.section.iter().chain(&t.chapter).map(|&x| x as i64).collect();
    if t.multi > 0 {
        c.push(t.all_found as i64);
    }
    c
}

/// The worst net change in questions right over the columns, `t` against `base`: −2 means some
/// column lost two questions more than it won.
pub fn worst_change(base: &Tally, t: &Tally) -> i64 {
    counts(t).iter().zip(counts(base)).map(|(a, b)| a - b).min().unwrap_or(0)
}

/// How many (manual, column) cells the routed row is below global vector or global hybrid.
pub fn cells_below(t: &[Tally; 3]) -> usize {
    let (a, b, c) = (columns(&t[0]), columns(&t[1]), columns(&t[2]));
    c.iter().zip(a.iter().zip(&b)).filter(|(c, (a, b))| **c + 1e-9 < a.max(**b)).count()
}

/// The macro-average of each column over manuals (all-found over those with multi-section
/// questions).
fn macro_columns(tallies: &[Tally]) -> Vec<f64> {
    let cols: Vec<Vec<f64>> = tallies.iter().map(columns).collect();
    let width = cols.iter().map(Vec::len).max().unwrap_or(0);
    (0..width)
        .map(|i| {
            let v: Vec<f64> = cols.iter().filter(|c| c.len() == width).map(|c| c[i]).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        })
        .collect()
}

/// Runs every lever on every manual and prints, per lever, the routed row's objective per
/// manual and its macro-average per value, its macro columns, how many (manual, column) cells
/// fall below a global retriever, the worst column change per manual against the default,
/// whether the value passes the rule (macro up, no manual loses more than one question on a
/// column), the routed search's p50/p99 (without the embedding), and the leave-one-manual-out
/// choice.
pub fn sweep(benches: &mut [Bench], base_params: &Params, only: &[String]) -> Result<()> {
    let mut base = Vec::new();
    for b in benches.iter_mut() {
        base.push(b.run(base_params)?.tallies[2].clone());
    }
    let base_macro = base.iter().map(objective).sum::<f64>() / base.len() as f64;
    let names: Vec<String> = benches.iter().map(|b| b.spec.name.clone()).collect();
    println!("defaults: {base_params:?}");
    for lever in levers().into_iter().filter(|l| only.is_empty() || only.iter().any(|o| o == l.name)) {
        println!("\n### {}\n", lever.name);
        println!(
            "| value | {} | macro | sec@1 sec@3 sec@5 sec@10 chap@1 chap@3 all@10 MRR | cells below a/b | worst change per manual | rule | p50/p99 ms |",
            names.join(" | ")
        );
        println!("|---|{}---|---|---|---|---|---|", "---|".repeat(names.len()));
        // scores[value][manual]
        let mut scores: Vec<Vec<f64>> = Vec::new();
        for &v in &lever.values {
            let mut p = base_params.clone();
            (lever.set)(&mut p, v);
            let (mut row, mut changes, mut ms, mut routed, mut below) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0);
            for (b, base_t) in benches.iter_mut().zip(&base) {
                let out = b.run(&p)?;
                row.push(objective(&out.tallies[2]));
                changes.push(worst_change(base_t, &out.tallies[2]));
                below += cells_below(&out.tallies);
                routed.push(out.tallies[2].clone());
                ms.extend(out.search_ms);
            }
            let macro_avg = row.iter().sum::<f64>() / row.len() as f64;
            let rule = if p == *base_params {
                "default"
            } else if macro_avg > base_macro + 1e-9 && changes.iter().all(|&c| c >= -1) {
                "keep"
            } else {
                "no"
            };
            println!(
                "| {v} | {} | {macro_avg:.4} | {} | {below} | {} | {rule} | {:.1}/{:.1} |",
                row.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(" | "),
                macro_columns(&routed).iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" "),
                changes.iter().map(|c| format!("{c:+}")).collect::<Vec<_>>().join(" "),
                quarry::eval::score::percentile(&ms, 0.5),
                quarry::eval::score::percentile(&ms, 0.99),
            );
            scores.push(row);
        }
        // Leave one manual out: the value best on the others' macro-average, scored on it.
        let mut left_out = Vec::new();
        for (m, name) in names.iter().enumerate() {
            let others = |row: &Vec<f64>| row.iter().enumerate().filter(|(i, _)| *i != m).map(|(_, x)| x).sum::<f64>();
            let best =
                (0..lever.values.len()).max_by(|&a, &b| others(&scores[a]).total_cmp(&others(&scores[b]))).unwrap_or(0);
            left_out.push(format!("{name}: {} → {:.3}", lever.values[best], scores[best][m]));
        }
        println!(
            "\nleave-one-manual-out (value chosen on the others → score on the one left out): {}",
            left_out.join("; ")
        );
    }
    Ok(())
}
