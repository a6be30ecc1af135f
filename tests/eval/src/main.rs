//! `chapter-eval MANUAL QUESTIONS MODEL_DIR [INDEX_DIR]`: the chapter RAG's retrieval quality on
//! a manual with labelled questions (format in ../shared/data/README.md), printed as one table:
//! section recall@1/3/5/10, chapter recall@1/3 and, for questions that need two sections,
//! all-found@10, for (a) global vector search, (b) global hybrid search and (c) routed hybrid
//! search (the `search` tool), scored by `quarry::eval` (the scorer of `quarry eval`); how
//! often the route's top chapter holds the answer, per confidence bucket; then the latency of
//! `route` and `search` (native, p50/p99).
//!
//! It runs chapter-rag's own code natively, with the embedder component's model code over the
//! host's own inference (quarry's `nn` capability, the code that serves `wasi:nn`), so scores
//! equal the component's; the index is cached in INDEX_DIR (default
//! ~/.cache/quarry/eval/<model>/) and rebuilt only when the manual or the model changes.
//! `make eval` runs it on both development manuals.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use chapter_rag::search::{self, Scored};
use chapter_rag::tool::{BaseEnv, ChapterTool, Env, Model, ToolError};
use embedder_onnx::model::{self as onnx, Inference, Kind};
use quarry::eval::score::{Fragment, Row, Tally, chapter_order, chapters_of, percentile};
use quarry::nn::native::{ElementType, NativeModel, RawTensor};
use serde_json::json;

/// The host's inference, called directly: what `wasi:nn` runs for the component.
struct HostInference(std::sync::Arc<NativeModel>);

impl Inference for HostInference {
    fn hidden_state(&self, ids: &[i64]) -> Result<Vec<f32>, onnx::EmbedError> {
        let failed = |e: quarry::nn::native::NnError| onnx::EmbedError::Internal(e.message);
        let dims = vec![1, ids.len() as u32];
        let inputs = onnx::graph_inputs(ids)
            .into_iter()
            .map(|(name, data)| (name.to_string(), RawTensor { dims: dims.clone(), ty: ElementType::I64, data }))
            .collect();
        let outputs = self.0.run(self.0.check_inputs(inputs).map_err(failed)?).map_err(failed)?;
        let hidden = outputs.iter().find(|(n, _)| n == onnx::HIDDEN_STATE).or(outputs.first());
        Ok(onnx::f32s(&hidden.ok_or_else(|| onnx::EmbedError::Internal("no output".into()))?.1.data))
    }
}

/// The model in the process, used from two threads while indexing.
struct Native {
    model: onnx::Model<HostInference>,
    threads: usize,
}

fn err(e: onnx::EmbedError) -> ToolError {
    ToolError::Upstream(format!("{e:?}"))
}

impl BaseEnv for Native {
    fn model(&self) -> Model {
        let i = self.model.info();
        Model { id: i.id, dimension: i.dimension as usize, max_tokens: i.max_tokens as usize }
    }
    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError> {
        let kind = if query { Kind::Query } else { Kind::Document };
        let per = texts.len().div_ceil(self.threads).max(1);
        std::thread::scope(|s| {
            let parts: Vec<_> = texts
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .map(|t| self.model.embed(t, kind).map(|e| e.vector).map_err(err))
                            .collect::<Result<Vec<_>, _>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(texts.len());
            for p in parts {
                out.extend(p.join().map_err(|_| ToolError::Internal("an embedding thread panicked".into()))??);
            }
            Ok(out)
        })
    }
    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, ToolError> {
        texts.iter().map(|t| self.model.count_tokens(t).map_err(err)).collect()
    }
    fn token_spans(&self, texts: &[String]) -> Result<Vec<Vec<(u32, u32)>>, ToolError> {
        texts.iter().map(|t| self.model.token_spans(t).map_err(err)).collect()
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        let b = std::fs::read(path).map_err(|e| ToolError::NotFound(format!("{path}: {e}")))?;
        if b.len() as u64 > max_bytes {
            return Err(ToolError::InvalidArgs(format!("{path} is larger than {max_bytes} bytes")));
        }
        Ok(b)
    }
    fn log(&self, line: &str) {
        eprintln!("{line}");
    }
    fn progress(&self, task: &str, done: u64, total: u64, unit: &str) {
        if done.is_multiple_of(640) || done == total {
            eprintln!("{task}: {done}/{total} {unit}");
        }
    }
}

impl Env for Native {
    fn stamp(&self, path: &str) -> Option<(u64, u128)> {
        let m = std::fs::metadata(path).ok()?;
        Some((m.len(), m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos()))
    }
}

/// The fragments of `hits`, as the scorer sees them: heading path and lines.
fn fragments(b: &chapter_rag::index::Built, hits: &[Scored]) -> Vec<Fragment> {
    hits.iter()
        .map(|h| {
            let c = &b.chunks[h.chunk];
            Fragment { path: b.tree.path(c.chapter), lines: Some(c.lines) }
        })
        .collect()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        bail!("usage: chapter-eval MANUAL QUESTIONS MODEL_DIR [INDEX_DIR]");
    }
    let (manual, questions, model_dir) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]), &args[2]);
    let questions = quarry::eval::load_questions(&questions)?;
    let dir = std::fs::canonicalize(model_dir).with_context(|| model_dir.clone())?;
    let section = quarry::nn::ModelSection { name: "eval".into(), dir: dir.clone(), pin: None };
    let graph =
        HostInference(quarry::nn::native::Models::default().model(&section).map_err(|e| anyhow::anyhow!("{e}"))?);
    let model = onnx::Model::open(&dir, true, graph).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let env = Native { model, threads: std::thread::available_parallelism().map_or(2, |n| n.get()) };
    let model_id = env.model().id;
    let index_dir = args.get(3).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/quarry/eval")
            .join(model_id.replace('/', "_"))
            .join(manual.file_stem().unwrap_or_default())
    });
    std::fs::create_dir_all(&index_dir)?;
    let t = Instant::now();
    let config = json!({"manual": manual, "index_dir": index_dir, "similarity_threshold": 0.0});
    let mut tool = ChapterTool::open(&config.to_string(), &env).map_err(|e| anyhow::anyhow!("{e}"))?;
    let r = tool.report().clone();
    println!(
        "{}: {} chapters, {} chunks ({} embedded, {} tokens; {} over the window) in {:.1} s, model {model_id}",
        manual.display(),
        r.chapters,
        r.chunks,
        r.embedded,
        r.tokens_embedded,
        r.over_window,
        t.elapsed().as_secs_f64()
    );

    let verbose = std::env::var_os("QUARRY_EVAL_VERBOSE").is_some();
    // QUARRY_EVAL_PRF=M,BETA: dense pseudo-relevance feedback (Rocchio), for measuring it: the
    // question's vector moves toward the mean of its best M hybrid hits, with weight BETA, and
    // every retriever uses the moved vector. Measured and not adopted (chapter-rag's README).
    let prf: Option<(usize, f32)> = std::env::var("QUARRY_EVAL_PRF").ok().and_then(|v| {
        let (m, b) = v.split_once(',')?;
        Some((m.parse().ok()?, b.parse().ok()?))
    });
    let mut tallies: [Tally; 3] = Default::default();
    let (mut route_ms, mut search_ms) = (Vec::new(), Vec::new());
    // Where a query's time goes: embedding the question, and the rest of a routed search.
    let (mut embed_ms, mut rest_ms) = (Vec::new(), Vec::new());
    // Whether the route's confidence means something: per confidence bucket, how often its top
    // chapter holds the answer.
    let mut buckets = [(0usize, 0usize); 4];
    for q in &questions {
        let t = Instant::now();
        let mut qv = tool.query(&env, "eval", &q.text).map_err(|e| anyhow::anyhow!("{e}"))?;
        embed_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if let Some((m, beta)) = prf {
            let built = tool.built();
            let top = search::hybrid(built, &qv, m, 0.0, None).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut v = qv.vector.clone();
            for h in &top {
                for (a, b) in v.iter_mut().zip(built.index.vector(h.chunk)) {
                    *a += beta * b / top.len() as f32;
                }
            }
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= n);
            qv.vector = v;
        }
        let t = Instant::now();
        tool.routed_search_for(&qv, 10).map_err(|e| anyhow::anyhow!("{e}"))?;
        rest_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let built = tool.built();
        let found = search::vector_only(built, &qv, 10, None).map_err(|e| anyhow::anyhow!("{e}"))?;
        let v = fragments(built, &found);
        tallies[0].add(q, &v, &chapters_of(&v));
        let found = search::hybrid(built, &qv, 10, 0.0, None).map_err(|e| anyhow::anyhow!("{e}"))?;
        let h = fragments(built, &found);
        tallies[1].add(q, &h, &chapters_of(&h));
        let t = Instant::now();
        tool.route(&env, &q.text).map_err(|e| anyhow::anyhow!("{e}"))?;
        route_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let (route, found) = if prf.is_some() {
            tool.routed_search_for(&qv, 10).map_err(|e| anyhow::anyhow!("{e}"))?
        } else {
            tool.routed_search(&env, &q.text, 10).map_err(|e| anyhow::anyhow!("{e}"))?
        };
        search_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let built = tool.built();
        let f = fragments(built, &found);
        // What `quarry eval` reads from the search tool's output: the routed chapters, the rest
        // of the router's ranking, then the fragments' chapters.
        let title = |n: usize| built.tree.nodes[n].title.clone();
        let routed: Vec<String> = route.chapters.iter().map(|r| title(built.tree.top(r.node))).collect();
        let ranking: Vec<String> = route.ranking.iter().map(|&n| title(n)).collect();
        tallies[2].add(q, &f, &chapter_order([routed.as_slice(), ranking.as_slice(), chapters_of(&f).as_slice()]));
        let bucket = &mut buckets[((route.confidence * 4.0) as usize).min(3)];
        bucket.0 += 1;
        bucket.1 += usize::from(routed.first().is_some_and(|c| q.chapters.contains(c)));
        if verbose {
            let first =
                |fr: &[Fragment]| fr.iter().position(|x| q.gold.iter().chain(&q.acceptable).any(|g| g.holds(x)));
            eprintln!(
                "{:?} gold {:?} | routed {:?} conf {:.2} | first gold rank a {:?} b {:?} c {:?}",
                q.text.chars().take(60).collect::<String>(),
                q.chapters,
                route
                    .chapters
                    .iter()
                    .map(|r| format!("{} {} {:.2}", r.chapter_id, r.title, r.confidence))
                    .collect::<Vec<_>>(),
                route.confidence,
                first(&v),
                first(&h),
                first(&f)
            );
        }
    }
    let multi = questions.iter().filter(|q| q.multi).count();
    println!("{} questions ({multi} multi-section)", questions.len());
    let rows: Vec<Row> = ["(a) global vector", "(b) global hybrid", "(c) routed hybrid"]
        .iter()
        .zip(tallies)
        .map(|(name, tally)| Row { name: name.to_string(), tally, latency: None })
        .collect();
    print!("{}", quarry::eval::score::table(&rows));
    let shown: Vec<String> = buckets
        .iter()
        .enumerate()
        .filter(|(_, b)| b.0 > 0)
        .map(|(i, &(n, right))| {
            format!("{:.2}-{:.2}: {right}/{n} ({:.2})", i as f64 / 4.0, (i + 1) as f64 / 4.0, right as f64 / n as f64)
        })
        .collect();
    println!("route confidence vs its top chapter holding the answer: {}", shown.join("; "));
    println!(
        "native latency over {} questions: route p50 {:.1} ms p99 {:.1} ms; search p50 {:.1} ms p99 {:.1} ms",
        questions.len(),
        percentile(&route_ms, 0.5),
        percentile(&route_ms, 0.99),
        percentile(&search_ms, 0.5),
        percentile(&search_ms, 0.99)
    );
    println!(
        "of which: question embedding p50 {:.1} ms p99 {:.1} ms; routed search without it p50 {:.1} ms p99 {:.1} ms",
        percentile(&embed_ms, 0.5),
        percentile(&embed_ms, 0.99),
        percentile(&rest_ms, 0.5),
        percentile(&rest_ms, 0.99)
    );
    Ok(())
}
