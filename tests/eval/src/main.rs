//! `chapter-eval [--details] [--sweep] SPEC...`: the chapter RAG's retrieval quality on several
//! manuals with labelled questions (format in ../shared/data/README.md), one table per manual and
//! the macro-average over manuals: section recall@1/3/5/10, chapter recall@1/3, all-found@10 for
//! questions that need two sections, and MRR@10, for (a) global vector search, (b) global hybrid
//! search and (c) routed hybrid search (the `search` tool), scored by `quarry::eval` (the scorer
//! of `quarry eval`); how often the route's top chapter holds the answer, per confidence bucket;
//! the latency of `search` (native, p50/p99). Each SPEC is `NAME=MANUAL,QUESTIONS,MODEL_DIR[,SECTIONS]`;
//! `chapter-eval MANUAL QUESTIONS MODEL_DIR` scores one manual.
//!
//! `--details` prints, per question, the gold sections, the route and the first fragments, and
//! at which rank each retriever found it. `--sweep[=LEVER,...]` judges the route's levers on all
//! the manuals at once ([`sweep`]); `--set LEVER=VALUE,...` starts from other params.
//!
//! It runs chapter-rag's own code natively, with the embedder component's model code over the
//! host's own inference ([`native`]), so scores equal the component's; indexes are cached in
//! ~/.cache/quarry/eval/<model>/<name>/ and rebuilt only when the manual or the model changes.
//! `make eval` runs it on every development manual (tests/eval/run.sh).
//!
//! `--couchbase` (built with the `couchbase` feature) scores every manual twice, its corpus
//! local and kept in Couchbase ([`couchbase`]), and fails unless each column of each manual
//! differs by at most one question (`make eval-couchbase`, on the project's fake cluster).

mod bench;
mod calibrate;
#[cfg(feature = "couchbase")]
mod couchbase;
mod native;
mod sweep;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, bail};
use bench::{Bench, Outcome, RETRIEVERS, Spec};
use chapter_rag::search::Params;
use quarry::eval::score::{Row, Tally, percentile};

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut flag = |name: &str| args.iter().position(|a| a == name).map(|i| args.remove(i)).is_some();
    let details = flag("--details");
    let calibrate = flag("--calibrate");
    let couchbase = flag("--couchbase");
    // --sweep or --sweep=LEVER,LEVER: judge the levers; --set NAME=VALUE,...: params to start from.
    let mut valued = |name: &str| {
        let prefix = format!("{name}=");
        args.iter().position(|a| a == name || a.starts_with(&prefix)).map(|i| {
            let a = args.remove(i);
            match a.strip_prefix(&prefix) {
                Some(v) => v.to_string(),
                // `--set NAME=VALUE`: the value is the next argument; a bare `--sweep` has none.
                None if name == "--set" && i < args.len() => args.remove(i),
                None => String::new(),
            }
        })
    };
    let sweep = valued("--sweep");
    let sets = valued("--set");
    let specs: Vec<Spec> = if args.len() >= 3 && !args[0].contains('=') {
        // The one-manual form: MANUAL QUESTIONS MODEL_DIR.
        let manual = PathBuf::from(&args[0]);
        let name = manual.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        vec![Spec { name, manual, questions: args[1].clone().into(), model: args[2].clone().into(), sections: None }]
    } else {
        args.iter().map(|a| Spec::parse(a)).collect::<Result<_>>()?
    };
    if specs.is_empty() {
        bail!("usage: chapter-eval [--details] [--sweep] NAME=MANUAL,QUESTIONS,MODEL_DIR[,SECTIONS]...");
    }
    let cluster = if couchbase { Some(open_cluster()?) } else { None };
    // One model instance per model directory, shared by its manuals.
    let mut models: HashMap<PathBuf, Arc<native::Native>> = HashMap::new();
    let mut benches = Vec::new();
    let mut kept = Vec::new();
    for spec in &specs {
        let env = match models.get(&spec.model) {
            Some(e) => e.clone(),
            None => {
                #[allow(unused_mut, reason = "set only with the couchbase feature")]
                let mut native = native::Native::open(&spec.model)?;
                #[cfg(feature = "couchbase")]
                {
                    native.cluster = cluster.clone();
                }
                let e = Arc::new(native);
                models.insert(spec.model.clone(), e.clone());
                e
            }
        };
        let b = Bench::open(spec, &env, None)?;
        println!("{}", b.summary);
        benches.push(b);
        if cluster.is_some() {
            // The same manual, its corpus in the cluster (its vectors from the index just opened).
            let b = Bench::open(spec, &env, Some(&spec.name))?;
            println!("{}", b.summary);
            kept.push(b);
        }
    }
    let mut params = Params::default();
    for pair in sets.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        let (name, value) = pair.split_once('=').ok_or_else(|| anyhow::anyhow!("--set {pair:?}: write NAME=VALUE"))?;
        sweep::set(&mut params, name, value.parse()?)?;
    }
    if couchbase && (calibrate || sweep.is_some()) {
        bail!("--couchbase compares the backends under one set of params: leave out --calibrate and --sweep");
    }
    if calibrate {
        return calibrate::calibrate(&mut benches, &params);
    }
    if let Some(only) = sweep {
        let only: Vec<String> = only.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
        return sweep::sweep(&mut benches, &params, &only);
    }
    let mut outcomes = Vec::new();
    for b in benches.iter_mut() {
        let out = b.run(&params)?;
        report(b, &out, details);
        outcomes.push(out);
    }
    if benches.len() > 1 {
        macro_tables(&benches, &outcomes);
    }
    if !kept.is_empty() {
        let mut kept_outcomes = Vec::new();
        for b in kept.iter_mut() {
            let out = b.run(&params)?;
            println!("\n# {} with its corpus in Couchbase", b.spec.name);
            report(b, &out, details);
            kept_outcomes.push(out);
        }
        let apart = compare(&benches, &outcomes, &kept_outcomes);
        if !apart.is_empty() {
            bail!("the Couchbase backend is more than one question from the local one in {}", apart.join(", "));
        }
        println!("\nThe Couchbase backend is within one question of the local one in every manual and column.");
    }
    Ok(())
}

#[cfg(feature = "couchbase")]
fn open_cluster() -> Result<Arc<couchbase::Cluster>> {
    Ok(Arc::new(couchbase::Cluster::from_env()?))
}

/// Without the `couchbase` feature there is no cluster to keep corpora in.
#[cfg(not(feature = "couchbase"))]
fn open_cluster() -> Result<()> {
    bail!(
        "--couchbase: this chapter-eval was built without the couchbase feature (make eval-couchbase builds one with it)"
    )
}

/// The Couchbase backend beside the local one: per manual, retriever and column, how many
/// questions more (+) or fewer (-) the Couchbase corpus got right (MRR: its sum of reciprocal
/// ranks, so that one question moves it by at most 1). Returns the cells beyond one question.
fn compare(benches: &[Bench], local: &[Outcome], kept: &[Outcome]) -> Vec<String> {
    println!("\n## Couchbase beside local: questions apart (Couchbase minus local; ** beyond one)\n");
    println!("| manual | retriever | sec@1 | sec@3 | sec@5 | sec@10 | chap@1 | chap@3 | all-found@10 | MRR@10 (sum) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let names = ["sec@1", "sec@3", "sec@5", "sec@10", "chap@1", "chap@3", "all-found@10", "MRR@10"];
    let mut apart = Vec::new();
    for ((b, l), k) in benches.iter().zip(local).zip(kept) {
        for (r, retriever) in RETRIEVERS.iter().enumerate() {
            let counts = |t: &Tally| -> Vec<f64> {
                let mut c: Vec<f64> = t.section.iter().chain(&t.chapter).map(|&x| x as f64).collect();
                c.push(t.all_found as f64);
                c.push(t.reciprocal_ranks);
                c
            };
            let cells: Vec<String> = counts(&k.tallies[r])
                .iter()
                .zip(counts(&l.tallies[r]))
                .zip(names)
                .map(|((cb, lo), column)| {
                    let d = cb - lo;
                    let far = d.abs() > 1.0 + 1e-9;
                    if far {
                        apart.push(format!("{} {retriever} {column} ({d:+.2})", b.spec.name));
                    }
                    let shown = if column == "MRR@10" { format!("{d:+.2}") } else { format!("{d:+.0}") };
                    if far { format!("**{shown}**") } else { shown }
                })
                .collect();
            println!("| {} | {retriever} | {} |", b.spec.name, cells.join(" | "));
        }
    }
    apart
}

/// One manual's table, its confidence buckets and latency, and with `details` every question.
fn report(b: &Bench, out: &Outcome, details: bool) {
    let multi = b.questions.iter().filter(|q| q.multi).count();
    println!("\n## {} ({} questions, {multi} multi-section)\n", b.spec.name, b.questions.len());
    // Search latency natively: the question's embedding plus the routed search.
    let total: Vec<f64> = b.embed_ms.iter().zip(&out.search_ms).map(|(e, s)| e + s).collect();
    let rows: Vec<Row> = RETRIEVERS
        .iter()
        .zip(out.tallies.iter())
        .enumerate()
        .map(|(i, (name, tally))| Row {
            name: name.to_string(),
            tally: tally.clone(),
            latency: (i == 2).then(|| (percentile(&total, 0.5), percentile(&total, 0.99))),
        })
        .collect();
    print!("{}", quarry::eval::score::table(&rows));
    println!("\n{}", buckets(std::slice::from_ref(out)));
    println!(
        "search p50 {:.1} ms p99 {:.1} ms natively, of which the question's embedding p50 {:.1} ms, the rest p50 {:.1} ms p99 {:.1} ms",
        percentile(&total, 0.5),
        percentile(&total, 0.99),
        percentile(&b.embed_ms, 0.5),
        percentile(&out.search_ms, 0.5),
        percentile(&out.search_ms, 0.99)
    );
    if details {
        println!();
        for (q, a) in b.questions.iter().zip(&out.answers) {
            let at = |r: Option<usize>| r.map_or("-".to_string(), |r| format!("@{}", r + 1));
            println!(
                "{} a{} b{} c{} {:?}\n    gold: {}\n    route ({:.2}, margin {:.2}{}): {}",
                q.id,
                at(a.first[0]),
                at(a.first[1]),
                at(a.first[2]),
                q.text.chars().take(100).collect::<String>(),
                q.gold.iter().map(|s| s.path.join(" > ")).collect::<Vec<_>>().join(" | "),
                a.confidence,
                a.margin,
                if a.top_right { ", right" } else { ", wrong" },
                a.routed.iter().map(|(id, p, c)| format!("{id} {p} {c:.2}")).collect::<Vec<_>>().join("; "),
            );
            for (path, lines, score) in a.hits.iter().take(3) {
                println!("      {path} (lines {}-{}, {score:.2})", lines.0, lines.1);
            }
        }
    }
}

/// How often the route's top chapter holds the answer, per confidence bucket.
fn buckets(outs: &[Outcome]) -> String {
    let mut b = [(0usize, 0usize); 4];
    for a in outs.iter().flat_map(|o| &o.answers) {
        let slot = &mut b[((a.confidence * 4.0) as usize).min(3)];
        slot.0 += 1;
        slot.1 += usize::from(a.top_right);
    }
    let shown: Vec<String> = b
        .iter()
        .enumerate()
        .filter(|(_, x)| x.0 > 0)
        .map(|(i, &(n, right))| {
            format!("{:.2}-{:.2}: {right}/{n} ({:.2})", i as f64 / 4.0, (i + 1) as f64 / 4.0, right as f64 / n as f64)
        })
        .collect();
    format!("route confidence vs its top chapter holding the answer: {}", shown.join("; "))
}

/// The macro-average over manuals (each manual counts once, whatever its number of questions),
/// over all of them and over the given two and the others apart.
fn macro_tables(benches: &[Bench], outs: &[Outcome]) {
    let given = ["rclone", "trpl-zh-cn"];
    // Which manuals each table averages: all, the given ones, the others.
    let groups = [("every manual", None), ("the two given manuals", Some(true)), ("the new manuals", Some(false))];
    for (title, given_only) in groups {
        let chosen: Vec<usize> = (0..benches.len())
            .filter(|&i| given_only.is_none_or(|g| given.contains(&benches[i].spec.name.as_str()) == g))
            .collect();
        if chosen.is_empty() || chosen.len() == benches.len() && title != "every manual" {
            continue;
        }
        println!("\n## Macro-average over {title} ({})\n", chosen.len());
        println!("| retriever | sec@1 | sec@3 | sec@5 | sec@10 | chap@1 | chap@3 | all-found@10 | MRR@10 |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for (r, name) in RETRIEVERS.iter().enumerate() {
            let cols: Vec<Vec<Option<f64>>> = chosen.iter().map(|&i| full_columns(&outs[i].tallies[r])).collect();
            let mean: Vec<String> = (0..8)
                .map(|c| {
                    let vals: Vec<f64> = cols.iter().filter_map(|row| row[c]).collect();
                    if vals.is_empty() {
                        "-".into()
                    } else {
                        format!("{:.2}", vals.iter().sum::<f64>() / vals.len() as f64)
                    }
                })
                .collect();
            println!("| {name} | {} |", mean.join(" | "));
        }
        let picked: Vec<&Outcome> = chosen.iter().map(|&i| &outs[i]).collect();
        let pooled: Vec<Outcome> = picked
            .iter()
            .map(|o| Outcome { tallies: o.tallies.clone(), answers: o.answers.clone(), search_ms: Vec::new() })
            .collect();
        println!("\n{} (pooled)", buckets(&pooled));
    }
}

/// The eight columns of a tally, all-found `None` without multi-section questions.
fn full_columns(t: &Tally) -> Vec<Option<f64>> {
    let n = t.questions.max(1) as f64;
    let mut c: Vec<Option<f64>> = t.section.iter().chain(&t.chapter).map(|&x| Some(x as f64 / n)).collect();
    c.push(t.all_found_share());
    c.push(Some(t.mrr()));
    c
}
