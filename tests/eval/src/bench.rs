//! One development manual: its index (built once, cached), its labelled questions embedded once,
//! and the three retrievers scored on them under any [`search::Params`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use chapter_rag::search::{self, Query, Scored};
use chapter_rag::tool::ChapterTool;
use quarry::eval::questions::Question;
use quarry::eval::score::{DEPTH, Fragment, Tally, chapter_order, chapters_of};
use serde_json::json;

use crate::native::Native;

/// The retrievers compared, in table order.
pub const RETRIEVERS: [&str; 3] = ["(a) global vector", "(b) global hybrid", "(c) routed hybrid"];

/// Where a manual and its questions are: `NAME=MANUAL,QUESTIONS,MODEL_DIR[,SECTIONS]`.
#[derive(Clone, Debug)]
pub struct Spec {
    /// A short name for tables.
    pub name: String,
    /// The manual (Markdown).
    pub manual: PathBuf,
    /// Its labelled questions.
    pub questions: PathBuf,
    /// The embedding model's directory.
    pub model: PathBuf,
    /// Its `sections.jsonl`, when not beside the questions.
    pub sections: Option<PathBuf>,
}

impl Spec {
    /// Parses `NAME=MANUAL,QUESTIONS,MODEL_DIR[,SECTIONS]`.
    pub fn parse(s: &str) -> Result<Spec> {
        let usage = || anyhow!("{s:?}: write NAME=MANUAL,QUESTIONS,MODEL_DIR[,SECTIONS]");
        let (name, rest) = s.split_once('=').ok_or_else(usage)?;
        let parts: Vec<&str> = rest.split(',').collect();
        if !(3..=4).contains(&parts.len()) || name.is_empty() {
            return Err(usage());
        }
        Ok(Spec {
            name: name.to_string(),
            manual: parts[0].into(),
            questions: parts[1].into(),
            model: parts[2].into(),
            sections: parts.get(3).map(PathBuf::from),
        })
    }
}

/// What one question got from each retriever.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Rank (0-based) of the first right fragment in the top [`DEPTH`], per retriever.
    pub first: [Option<usize>; 3],
    /// The routed chapters: id, heading path and confidence.
    pub routed: Vec<(String, String, f32)>,
    /// The route's confidence.
    pub confidence: f32,
    /// Its best chapter's share of the evidence.
    pub share: f32,
    /// The best chapter's share of the best two's evidence.
    pub margin: f32,
    /// Whether the route's best chapter holds an answer.
    pub top_right: bool,
    /// The routed search's first fragments: heading path, lines and score.
    pub hits: Vec<(String, (usize, usize), f32)>,
}

/// One retriever's tally and the per-question answers under one set of params.
pub struct Outcome {
    /// Per retriever, in [`RETRIEVERS`] order.
    pub tallies: [Tally; 3],
    /// Per question.
    pub answers: Vec<Answer>,
    /// Per question, the routed search's time without the question's embedding (ms).
    pub search_ms: Vec<f64>,
}

/// A manual ready to be scored.
pub struct Bench {
    /// Its spec.
    pub spec: Spec,
    /// The tool over it, index built.
    pub tool: ChapterTool,
    /// Its questions.
    pub questions: Vec<Question>,
    /// Each question embedded (as the `search` tool embeds it).
    pub queries: Vec<Query>,
    /// Each question's embedding time (ms).
    pub embed_ms: Vec<f64>,
    /// How the index build went, one line.
    pub summary: String,
}

impl Bench {
    /// Opens `spec`'s manual with `env` (building or reopening its index under
    /// `~/.cache/quarry/eval/<model>/<name>`) and embeds its questions; with `corpus`, its
    /// chunks are kept in the host corpus of that name (the vectors taken from that index).
    pub fn open(spec: &Spec, env: &Arc<Native>, corpus: Option<&str>) -> Result<Bench> {
        use chapter_rag::tool::BaseEnv as _;
        let questions = quarry::eval::load_questions(&spec.questions, spec.sections.as_deref())?;
        let model_id = env.model().id;
        let index_dir = PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/quarry/eval")
            .join(model_id.replace('/', "_"))
            .join(&spec.name);
        std::fs::create_dir_all(&index_dir)?;
        let t = Instant::now();
        let mut config = json!({"manual": spec.manual, "index_dir": index_dir, "similarity_threshold": 0.0});
        if let Some(name) = corpus {
            config["corpus"] = json!(name);
        }
        let tool = ChapterTool::open(&config.to_string(), env.as_ref()).map_err(|e| anyhow!("{}: {e}", spec.name))?;
        let r = tool.report().clone();
        let summary = format!(
            "{}{}: {} chapters, {} chunks ({} embedded, {} tokens; {} over the window) in {:.1} s, model {model_id}",
            spec.manual.display(),
            corpus.map(|c| format!(" (corpus {c})")).unwrap_or_default(),
            r.chapters,
            r.chunks,
            r.embedded,
            r.tokens_embedded,
            r.over_window,
            t.elapsed().as_secs_f64()
        );
        let (mut queries, mut embed_ms) = (Vec::new(), Vec::new());
        for q in &questions {
            let t = Instant::now();
            queries.push(tool.query(env.as_ref(), "eval", &q.text).map_err(|e| anyhow!("{e}"))?);
            embed_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(Bench { spec: spec.clone(), tool, questions, queries, embed_ms, summary })
    }

    /// Scores the three retrievers under `params`.
    pub fn run(&mut self, params: &search::Params) -> Result<Outcome> {
        self.tool.search = params.clone();
        let mut tallies: [Tally; 3] = Default::default();
        let (mut answers, mut search_ms) = (Vec::new(), Vec::new());
        for (q, qv) in self.questions.iter().zip(&self.queries) {
            let t = Instant::now();
            let (route, found) = self.tool.routed_search_for(qv, DEPTH).map_err(|e| anyhow!("{e}"))?;
            search_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let built = self.tool.built();
            let routed_fragments = fragments(built, &found);
            let vector = search::vector_only(built, qv, DEPTH, None).map_err(|e| anyhow!("{e}"))?;
            let vector = fragments(built, &vector);
            let hybrid =
                search::hybrid(built, qv, DEPTH, 0.0, params.vector_weight, None).map_err(|e| anyhow!("{e}"))?;
            let hybrid = fragments(built, &hybrid);
            tallies[0].add(q, &vector, &chapters_of(&vector));
            tallies[1].add(q, &hybrid, &chapters_of(&hybrid));
            // What `quarry eval` reads from the search tool's output: the routed chapters, the
            // rest of the router's ranking, then the fragments' chapters.
            let title = |n: usize| built.tree.nodes[n].title.clone();
            let routed: Vec<String> = route.chapters.iter().map(|r| title(built.tree.top(r.node))).collect();
            let ranking: Vec<String> = route.ranking.iter().map(|&n| title(n)).collect();
            let order =
                chapter_order([routed.as_slice(), ranking.as_slice(), chapters_of(&routed_fragments).as_slice()]);
            tallies[2].add(q, &routed_fragments, &order);
            let right = |f: &Fragment| q.gold.iter().chain(&q.acceptable).any(|g| g.holds(f));
            let first = |fr: &[Fragment]| fr.iter().take(DEPTH).position(right);
            answers.push(Answer {
                first: [first(&vector), first(&hybrid), first(&routed_fragments)],
                routed: route
                    .chapters
                    .iter()
                    .map(|r| (r.chapter_id.clone(), r.path.join(" > "), r.confidence))
                    .collect(),
                confidence: route.confidence,
                share: route.share,
                margin: route.margin,
                top_right: routed.first().is_some_and(|c| q.chapters.contains(c)),
                hits: found
                    .iter()
                    .zip(&routed_fragments)
                    .map(|(s, f)| (f.path.join(" > "), f.lines.unwrap_or_default(), s.score))
                    .collect(),
            });
        }
        Ok(Outcome { tallies, answers, search_ms })
    }
}

/// The fragments of `hits`, as the scorer sees them: heading path and lines.
pub fn fragments(b: &chapter_rag::index::Built, hits: &[Scored]) -> Vec<Fragment> {
    hits.iter()
        .map(|h| {
            let c = &b.chunks[h.chunk];
            Fragment { path: b.tree.path(c.chapter), lines: Some(c.lines) }
        })
        .collect()
}
