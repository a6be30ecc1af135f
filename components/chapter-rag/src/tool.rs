//! The six tools over one manual: configuration, schemas, argument checks and output.
//! Everything outside the component (files, the embedder, progress) comes through [`Env`], so
//! this module is tested natively with a fake one.
//!
//! The config is checked at open ([`Configured::parse`], cheap: the tools can be listed at once)
//! and the manual indexed at prepare ([`Configured::prepare`]). Before each call the tool looks at the file's size and
//! modification time; when they changed it rebuilds (embedding only changed text) and switches
//! to the new index only once it is complete, so a failed rebuild leaves the old index serving.

use std::path::PathBuf;
use std::rc::Rc;

use rag_core::corpus::{Corpus, CorpusError, MemoryCorpus, Metric, Shape};
use rag_core::score::json_f32;
use rag_core::store::Index;
use serde::Deserialize;
use serde_json::{Value, json};

pub use tool_guest::args::Spec;
pub use tool_guest::tool::{BaseEnv, Hit, Location, Model, Output, RoutedChapter, ToolError, corpus_error};

use crate::args::{GetArgs, ListArgs, Retrieval, RouteArgs, SearchArgs, SearchInArgs, ValidateArgs};
use crate::index::{self, Built, Report, Reuse};
use crate::manual::Manual;
use crate::search::{self, Query, Route, RoutedBy, Scored};
use crate::units::Params;

/// The index file inside `index_dir`.
pub const INDEX_FILE: &str = "chapter-rag.qix";
/// Default threshold on the normalised score (`rag_core::score`): cosine ≥ 0.1.
pub const DEFAULT_THRESHOLD: f32 = 0.55;
/// The largest manual accepted, by default.
pub const DEFAULT_MAX_BYTES: u64 = 20 << 20;
/// The most headings accepted, by default (the rclone manual has 2,224).
pub const DEFAULT_MAX_HEADINGS: usize = 5000;
/// Fragments `search` returns by default, and its bounds.
pub const DEFAULT_FRAGMENTS: usize = 10;
const FRAGMENTS: std::ops::RangeInclusive<usize> = 8..=12;
/// Levels `list_chapter_tree` shows by default.
const DEFAULT_LEVEL: usize = 2;
/// Results `search_chapter_content` returns by default.
const DEFAULT_TOP_K: usize = 5;
/// Characters `get_chapter` returns by default.
pub const DEFAULT_MAX_CHARS: usize = 20_000;
/// Lines `list_chapter_tree` prints at most.
const MAX_TREE_LINES: usize = 400;
/// The longest question or query accepted, in bytes.
const MAX_QUERY_BYTES: usize = 4096;

pub use crate::env::Env;

/// `config` as the host passes it to `open`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The manual (a Markdown, text or DOCX file in a granted directory).
    manual: String,
    /// The corpus to keep the index in: a host corpus (`[corpora.NAME]`, granted `rw`), shared
    /// by every instance that opens it, or `self`, the instance's own.
    corpus: Option<String>,
    /// A granted directory where an earlier version kept an index file: its vectors move into
    /// the corpus once. Without `corpus`, it stands for `corpus = "self"`; without either the
    /// index lives in memory.
    index_dir: Option<String>,
    chunk_size: Option<usize>,
    chunk_overlap: Option<usize>,
    min_chapter_chars: Option<usize>,
    similarity_threshold: Option<f32>,
    fragments: Option<usize>,
    max_bytes: Option<u64>,
    max_headings: Option<usize>,
}

/// What a config says, validated: kept by [`Configured`] and then by the [`ChapterTool`] it
/// prepares.
#[derive(Clone)]
struct Settings {
    manual: String,
    corpus: Option<String>,
    index_file: Option<PathBuf>,
    params: Params,
    threshold: f32,
    fragments: usize,
    max_bytes: u64,
    max_headings: usize,
}

/// One configured instance.
pub struct ChapterTool {
    /// How questions are routed and searched (the defaults; `make eval` varies them).
    pub search: search::Params,
    settings: Settings,
    built: Built,
    stamp: Option<(u64, u128)>,
    /// Set when the last rebuild failed and the previous index is serving.
    stale: Option<String>,
    /// The tree as the client's model is shown it ([`crate::model_route::outline`]): made once
    /// per build, not at every route.
    outline: std::cell::OnceCell<crate::model_route::Outline>,
}

fn bad_config(m: impl std::fmt::Display) -> ToolError {
    ToolError::InvalidConfig(format!("chapter-rag config: {m}"))
}

fn bad_args(tool: &str, m: impl std::fmt::Display) -> ToolError {
    ToolError::InvalidArgs(format!("{tool}: {m}"))
}

/// The tools: each named once here, in the order `specs` lists them; `call` dispatches on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    /// `list_chapter_tree`.
    ListChapterTree,
    /// `get_chapter`.
    GetChapter,
    /// `route`.
    Route,
    /// `search_chapter_content`.
    SearchChapterContent,
    /// `search`.
    Search,
    /// `validate_citations`.
    ValidateCitations,
}

impl Name {
    /// Every tool, in the order `specs` lists them.
    pub const ALL: [Name; 6] = [
        Name::ListChapterTree,
        Name::GetChapter,
        Name::Route,
        Name::SearchChapterContent,
        Name::Search,
        Name::ValidateCitations,
    ];

    /// The tool's name as clients call it.
    pub fn as_str(self) -> &'static str {
        match self {
            Name::ListChapterTree => "list_chapter_tree",
            Name::GetChapter => "get_chapter",
            Name::Route => "route",
            Name::SearchChapterContent => "search_chapter_content",
            Name::Search => "search",
            Name::ValidateCitations => "validate_citations",
        }
    }

    /// The tool called `name`, if there is one.
    pub fn parse(name: &str) -> Option<Name> {
        Name::ALL.into_iter().find(|n| n.as_str() == name)
    }
}

/// A validated config and the manual it names, read and checked but not indexed: what `open`
/// does at once, and all that the tools' specs need. [`Configured::prepare`] does the heavy part.
#[derive(Clone)]
pub struct Configured {
    settings: Settings,
    /// The manual as read at open, and its size and modification time then.
    text: Manual,
    stamp: Option<(u64, u128)>,
}

impl Configured {
    /// Validates `config`, reads the manual and checks that it parses.
    pub fn parse(config: &str, env: &dyn Env) -> Result<Configured, ToolError> {
        let c: Config = serde_json::from_str(config).map_err(bad_config)?;
        let defaults = Params::default();
        let params = Params {
            size: c.chunk_size.unwrap_or(defaults.size),
            overlap: c.chunk_overlap.unwrap_or(defaults.overlap),
            min_chapter_chars: c.min_chapter_chars.unwrap_or(defaults.min_chapter_chars),
        };
        params.chunking().validate().map_err(bad_config)?;
        let threshold = c.similarity_threshold.unwrap_or(DEFAULT_THRESHOLD);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(bad_config(format!("similarity_threshold must be within 0 and 1, got {threshold}")));
        }
        let fragments = c.fragments.unwrap_or(DEFAULT_FRAGMENTS);
        if !FRAGMENTS.contains(&fragments) {
            return Err(bad_config(format!("fragments must be within 8 and 12, got {fragments}")));
        }
        let max_bytes = c.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        let max_headings = c.max_headings.unwrap_or(DEFAULT_MAX_HEADINGS);
        let index_file = c.index_dir.as_deref().map(|d| PathBuf::from(d).join(INDEX_FILE));
        let corpus = tool_guest::index_home::configured(c.corpus, c.index_dir.as_deref()).map_err(bad_config)?;
        // Reading and parsing a manual takes milliseconds (embedding it is the heavy part), so
        // a manual that is missing, too large, empty or not one is refused here, at load.
        let stamp = env.stamp(&c.manual);
        let text = read_manual(env, &c.manual, max_bytes).map_err(at_open)?;
        text.tree(max_headings).map_err(|e| ToolError::InvalidConfig(format!("{}: {e}", c.manual)))?;
        let settings =
            Settings { manual: c.manual, corpus, index_file, params, threshold, fragments, max_bytes, max_headings };
        Ok(Configured { settings, text, stamp })
    }

    /// The tools' specs: (name, description, JSON schema) of each.
    pub fn specs(&self) -> Vec<Spec> {
        tool_specs(&self.settings.manual, self.settings.threshold, self.settings.fragments)
    }

    /// The manual's path, as configured.
    pub fn manual(&self) -> &str {
        &self.settings.manual
    }

    /// Reads the manual and indexes it, or reopens its saved index when that is current.
    pub fn prepare(self, env: &dyn Env) -> Result<ChapterTool, ToolError> {
        let Configured { mut settings, text, stamp } = self;
        let shape = shape(&env.model());
        let (corpus, kept_in) =
            tool_guest::index_home::open(env, settings.corpus.as_deref(), shape).map_err(at_open)?;
        settings.corpus = kept_in;
        let built = open_or_build(env, &settings, text, corpus).map_err(at_open)?;
        if let Some(w) = &built.tree.warning {
            env.log(&format!("warning: {}: {w}", settings.manual));
        }
        Ok(ChapterTool {
            search: search::Params::default(),
            settings,
            built,
            stamp,
            stale: None,
            outline: std::cell::OnceCell::new(),
        })
    }
}

/// The manual's build in `corpus`: reopened when the corpus has it, else built under the
/// corpus's write lease (reusing the vectors of earlier builds, in the corpus or in the index
/// file an earlier version kept in `index_dir`) and committed.
fn open_or_build(env: &dyn Env, settings: &Settings, text: Manual, corpus: Rc<dyn Corpus>) -> Result<Built, ToolError> {
    let Settings { manual, index_file, params, max_headings, .. } = settings;
    let model = env.model();
    let reopen = |text: &Manual| index::reopen(manual, text.clone(), params, *max_headings, &model.id, corpus.clone());
    let held = |b: Built| {
        if let Some(name) = &settings.corpus {
            env.log(&format!("{manual}: serving the index in corpus {name} ({} chunks)", b.chunks.len()));
        }
        b
    };
    if let Some(b) = reopen(&text)? {
        return Ok(held(b));
    }
    let writer = corpus.write().map_err(corpus_error)?;
    // Another instance sharing the corpus may have built it while this one waited for the lease.
    if let Some(b) = reopen(&text)? {
        return Ok(held(b));
    }
    let mut reuse = Reuse::from_corpus(&*corpus, manual, &model.id)?;
    if reuse.is_empty()
        && let Some(f) = index_file
    {
        match Index::load(f, &model.id, model.dimension) {
            Ok(Some(ix)) => {
                reuse = Reuse::from_index(&ix);
                if let Some(name) = &settings.corpus {
                    env.log(&format!(
                        "{manual}: moving the {} vectors of {} into corpus {name}; the file is no longer written and may be deleted",
                        reuse.len(),
                        f.display()
                    ));
                }
            }
            Ok(None) => {}
            Err(e) => env.log(&format!("warning: {e}")),
        }
    }
    let (b, records) = index::build(env, manual, text, params, *max_headings, &reuse, corpus.clone())?;
    match index::store(&b, &records, writer) {
        Ok(_) => {}
        // The host cannot save it (a full disk, a quota): the build is served from the tool's
        // own memory, and the corpus keeps what it had, for the other instances.
        Err(e @ (CorpusError::Unavailable(_) | CorpusError::Invalid(_))) if settings.corpus.is_some() => {
            env.log(&format!(
                "warning: {manual}: the index could not be saved to corpus {}: {e}; serving it from this instance's memory until it can be",
                settings.corpus.as_deref().unwrap_or_default()
            ));
            let own: Rc<dyn Corpus> = Rc::new(MemoryCorpus::new(shape(&model)).map_err(corpus_error)?);
            let b = Built { corpus: own, ..b };
            index::store(&b, &records, b.corpus.write().map_err(corpus_error)?).map_err(corpus_error)?;
            return Ok(b);
        }
        Err(e) => return Err(corpus_error(e)),
    }
    Ok(b)
}

/// The shape of the corpus an embedding model's vectors go in.
fn shape(model: &Model) -> Shape {
    Shape { dimension: model.dimension, metric: Metric::Cosine }
}

impl ChapterTool {
    /// Validates `config` and indexes the manual (or reopens its index): [`Configured::parse`]
    /// then [`Configured::prepare`].
    pub fn open(config: &str, env: &dyn Env) -> Result<ChapterTool, ToolError> {
        Configured::parse(config, env)?.prepare(env)
    }

    /// What the last build or reopen did.
    pub fn report(&self) -> &Report {
        &self.built.report
    }

    /// The manual's tree, chunks and index.
    pub fn built(&mut self) -> &mut Built {
        &mut self.built
    }

    /// (name, description, JSON schema) of each tool.
    pub fn specs(&self) -> Vec<Spec> {
        tool_specs(&self.settings.manual, self.settings.threshold, self.settings.fragments)
    }

    /// Runs tool `tool` with `args` (a JSON object).
    pub fn call(&mut self, env: &dyn Env, tool: &str, args: &str) -> Result<Output, ToolError> {
        let args: Value =
            serde_json::from_str(args).map_err(|e| bad_args(tool, format!("arguments are not JSON: {e}")))?;
        if !args.is_object() {
            return Err(bad_args(tool, "arguments must be a JSON object"));
        }
        let Some(name) = Name::parse(tool) else {
            let all: Vec<&str> = Name::ALL.iter().map(|n| n.as_str()).collect();
            return Err(ToolError::NotFound(format!("no tool {tool:?}; this instance offers {}", all.join(", "))));
        };
        self.refresh(env);
        let mut out = match name {
            Name::ListChapterTree => self.list(&args),
            Name::GetChapter => self.get(&args),
            Name::Route => self.route_tool(env, &args),
            Name::SearchChapterContent => self.search_in(env, &args),
            Name::Search => self.search(env, &args),
            Name::ValidateCitations => self.validate(&args),
        }?;
        if let Some(stale) = &self.stale {
            out.extra["stale_index"] = json!(stale);
        }
        Ok(out)
    }

    /// Rebuilds when the manual changed; on failure keeps serving the old index.
    fn refresh(&mut self, env: &dyn Env) {
        let stamp = env.stamp(&self.settings.manual);
        if stamp == self.stamp || stamp.is_none() {
            return;
        }
        self.stamp = stamp;
        let rebuilt = read_manual(env, &self.settings.manual, self.settings.max_bytes).and_then(|text| {
            if rag_core::store::content_hash(text.text.as_bytes()) == self.built.sha256 {
                return Ok(None);
            }
            open_or_build(env, &self.settings, text, self.built.corpus.clone()).map(Some)
        });
        match rebuilt {
            Ok(None) => {}
            Ok(Some(b)) => {
                env.log(&format!(
                    "{}: rebuilt the index: {} chunks, {} embedded, {} reused",
                    self.settings.manual, b.report.chunks, b.report.embedded, b.report.reused
                ));
                self.built = b;
                self.outline = std::cell::OnceCell::new();
                self.stale = None;
            }
            Err(e) => {
                let m = format!(
                    "{} changed but could not be indexed ({e}); answers come from the previous version",
                    self.settings.manual
                );
                env.log(&format!("warning: {m}"));
                self.stale = Some(m);
            }
        }
    }

    /// The index it serves from.
    pub(crate) fn built_ref(&self) -> &Built {
        &self.built
    }

    /// The position of chapter `id`, or a `not-found` error naming the nearest ids.
    fn node(&self, id: &str) -> Result<usize, ToolError> {
        self.built.tree.find(id.trim()).ok_or_else(|| {
            let near = nearest_ids(&self.built.tree, id.trim(), 5);
            ToolError::NotFound(format!(
                "no chapter {id:?} in {}; the nearest ids are {} (list_chapter_tree shows them all)",
                self.settings.manual,
                near.join(", ")
            ))
        })
    }

    fn list(&self, args: &Value) -> Result<Output, ToolError> {
        let a: ListArgs = parse_args("list_chapter_tree", args)?;
        let depth = a.level.unwrap_or(DEFAULT_LEVEL);
        if !(1..=6).contains(&depth) {
            return Err(bad_args("list_chapter_tree", format!("level must be within 1 and 6, got {depth}")));
        }
        let tree = &self.built.tree;
        let mut counts = vec![0usize; tree.nodes.len()];
        for c in &self.built.chunks {
            counts[c.chapter] += 1;
        }
        let starts: Vec<(usize, usize)> = match &a.under {
            Some(id) => tree.nodes[self.node(id)?].children.iter().map(|&c| (c, 0)).collect(),
            None => tree.roots.iter().map(|&r| (r, 0)).collect(),
        };
        let mut lines = Vec::new();
        let mut nodes = Vec::new();
        let mut more = 0usize;
        let mut stack: Vec<(usize, usize)> = starts.into_iter().rev().collect();
        while let Some((i, d)) = stack.pop() {
            let n = &tree.nodes[i];
            if lines.len() >= MAX_TREE_LINES {
                more += 1;
                continue;
            }
            let hidden = if d + 1 == depth && !n.children.is_empty() {
                format!(", {} sections below", n.children.len())
            } else {
                String::new()
            };
            lines.push(format!("{}{} {} ({} chunks{hidden})", "  ".repeat(d), n.id, n.title, counts[i]));
            nodes.push(json!({"id": n.id, "title": n.title, "level": n.level, "depth": d, "children": n.children.len(), "chunks": counts[i]}));
            if d + 1 < depth {
                stack.extend(n.children.iter().rev().map(|&c| (c, d + 1)));
            }
        }
        let mut text = lines.join("\n");
        if more > 0 {
            text.push_str(&format!("\n… {more} more not shown: use a smaller level, or `under` to list one chapter"));
        }
        if let Some(w) = &tree.warning {
            text = format!("Note: {w}\n{text}");
        }
        Ok(Output {
            text,
            hits: Vec::new(),
            route: None,
            extra: json!({"nodes": nodes, "not_shown": more, "report": self.built.report}),
            content: Vec::new(),
        })
    }

    fn get(&self, args: &Value) -> Result<Output, ToolError> {
        let a: GetArgs = parse_args("get_chapter", args)?;
        let i = self.node(&a.chapter_id)?;
        let max = a.max_chars.unwrap_or(DEFAULT_MAX_CHARS).max(100);
        let tree = &self.built.tree;
        let n = &tree.nodes[i];
        let parent = n.parent.map(|p| &tree.nodes[p]);
        let body = &self.built.text[n.subtree.clone()];
        let total = body.chars().count();
        let (shown, truncated) =
            if total > max { (body.chars().take(max).collect::<String>(), true) } else { (body.to_string(), false) };
        let mut text = format!(
            "Chapter {} {}\nParent: {}\nLines {}-{}\n\n{}",
            n.id,
            n.title,
            parent.map_or("(none: a top-level chapter)".to_string(), |p| format!("{} {}", p.id, p.title)),
            n.lines.0,
            n.subtree_last_line,
            shown.trim_end()
        );
        if truncated {
            let sections: Vec<&str> = n.children.iter().take(12).map(|&c| tree.nodes[c].id.as_str()).collect();
            text.push_str(&format!(
                "\n\n[cut at {max} of {total} characters; ask for a larger max_chars{}]",
                if sections.is_empty() {
                    String::new()
                } else {
                    format!(", or get its sections one by one: {}", sections.join(", "))
                }
            ));
        }
        Ok(Output {
            text,
            hits: Vec::new(),
            route: None,
            extra: json!({
                "chapter_id": n.id, "title": n.title, "level": n.level,
                "parent_id": parent.map(|p| &p.id), "parent_title": parent.map(|p| &p.title),
                "path": tree.path(i), "lines": [n.lines.0, n.subtree_last_line],
                "chars": total, "truncated": truncated,
                "children": n.children.iter().map(|&c| &tree.nodes[c].id).collect::<Vec<_>>(),
            }),
            content: Vec::new(),
        })
    }

    /// Checks and embeds a question.
    pub fn query(&self, env: &dyn Env, tool: &str, q: &str) -> Result<Query, ToolError> {
        let q = q.trim();
        if q.is_empty() {
            return Err(bad_args(tool, "the question is empty: ask it in words"));
        }
        if q.len() > MAX_QUERY_BYTES {
            return Err(bad_args(tool, format!("the question is {} bytes; keep it under {MAX_QUERY_BYTES}", q.len())));
        }
        let vector = env
            .embed(&[q.to_string()], true)?
            .into_iter()
            .next()
            .ok_or_else(|| ToolError::Upstream("the embedder returned no vector for the question".into()))?;
        Ok(Query { text: q.to_string(), vector })
    }

    /// Routes a question by embeddings alone (what `make eval` measures).
    pub fn route(&mut self, env: &dyn Env, question: &str) -> Result<Route, ToolError> {
        let q = self.query(env, "route", question)?;
        search::route(&self.built, &q, &self.search)
    }

    /// Routes `question` (embedded as `q`) as every tool and prompt of the instance does: by
    /// embeddings, with the client's model's pick fused in where it may be asked
    /// ([`crate::model_route`]).
    fn route_question(&self, env: &dyn Env, q: &Query, question: &str) -> Result<Route, ToolError> {
        let route = search::route(&self.built, q, &self.search)?;
        let tree = &self.built.tree;
        let outline = self.outline.get_or_init(|| crate::model_route::outline(tree, crate::model_route::MAX_LINES));
        Ok(match crate::model_route::ask(tree, outline, env, question)? {
            crate::model_route::ModelRoute::Picked(pick) => crate::model_route::fuse(&self.built.tree, route, pick),
            crate::model_route::ModelRoute::Fallback(why) => Route { fallback: why, ..route },
        })
    }

    fn route_tool(&mut self, env: &dyn Env, args: &Value) -> Result<Output, ToolError> {
        let a: RouteArgs = parse_args("route", args)?;
        let q = self.query(env, "route", &a.question)?;
        let route = self.route_question(env, &q, &a.question)?;
        audit(env, "route", &a.question, &route, &[]);
        let body = serde_json::to_value(&route).unwrap_or_default();
        Ok(Output { text: pretty(&body), hits: Vec::new(), route: None, extra: body, content: Vec::new() })
    }

    fn hit(&self, s: &Scored) -> Hit {
        let c = &self.built.chunks[s.chunk];
        let tree = &self.built.tree;
        let n = &tree.nodes[c.chapter];
        Hit {
            content: c.text.clone(),
            score: Some(s.score),
            source: Some(format!("{} > {}", self.settings.manual, tree.path(c.chapter).join(" > "))),
            location: Some(Location {
                path: tree.path(c.chapter),
                lines: Some((line(c.lines.0), line(c.lines.1))),
                chapter: Some(n.id.clone()),
            }),
            // The chapter as a resource (resources/read), as the host lists it.
            resource: Some(crate::tree::chapter_uri(&n.id)),
            metadata: json!({
                "chapter_title": n.title,
                "chapter_ids": c.chapters.iter().map(|&x| &tree.nodes[x].id).collect::<Vec<_>>(),
                "parent_id": n.parent.map(|p| &tree.nodes[p].id),
                "chunk_index": c.chunk_index,
            }),
        }
    }

    fn search_in(&mut self, env: &dyn Env, args: &Value) -> Result<Output, ToolError> {
        const T: &str = "search_chapter_content";
        let a: SearchInArgs = parse_args(T, args)?;
        let mut ids: Vec<String> = a.chapter_ids.unwrap_or_default();
        ids.extend(a.chapter_id);
        if ids.is_empty() {
            return Err(bad_args(
                T,
                "give chapter_id (or chapter_ids): the chapters to search in (route or list_chapter_tree names them)",
            ));
        }
        let nodes = ids.iter().map(|id| self.node(id)).collect::<Result<Vec<_>, _>>()?;
        let k = a.top_k.unwrap_or(DEFAULT_TOP_K);
        if !(1..=50).contains(&k) {
            return Err(bad_args(T, format!("top_k must be within 1 and 50, got {k}")));
        }
        let threshold = a.similarity_threshold.unwrap_or(self.settings.threshold);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(bad_args(T, format!("similarity_threshold must be within 0 and 1, got {threshold}")));
        }
        let q = self.query(env, T, &a.query)?;
        let within = self.ids(&nodes);
        let found = search::hybrid(&self.built, &q, k, threshold, self.search.vector_weight, Some(&within))?;
        let hits: Vec<Hit> = found.iter().map(|s| self.hit(s)).collect();
        let results: Vec<Value> = hits
            .iter()
            .map(|h| {
                json!({
                    "chapter_id": chapter_of(h), "chapter_title": h.metadata["chapter_title"],
                    "chunk_index": h.metadata["chunk_index"], "score": h.score.map(json_f32), "content": h.content,
                })
            })
            .collect();
        Ok(Output {
            text: pretty(&Value::Array(results)),
            hits,
            route: None,
            extra: json!({"chapter_ids": ids, "threshold": json_f32(threshold)}),
            content: Vec::new(),
        })
    }

    /// The ids of `nodes`, for a search inside them.
    fn ids(&self, nodes: &[usize]) -> Vec<String> {
        nodes.iter().map(|&n| self.built.tree.nodes[n].id.clone()).collect()
    }

    /// Routes `question` as the `route` tool does and searches inside the routed chapters (the
    /// `search` tool's work); the fragments are spread over sections
    /// ([`rag_core::hybrid::spread`]).
    pub fn routed_search(
        &mut self,
        env: &dyn Env,
        question: &str,
        limit: usize,
    ) -> Result<(Route, Vec<Scored>), ToolError> {
        let q = self.query(env, "search", question)?;
        let route = self.route_question(env, &q, question)?;
        self.search_routed(route, &q, limit)
    }

    /// [`ChapterTool::routed_search`] for a question already embedded, routed by embeddings
    /// alone (what `make eval` measures).
    pub fn routed_search_for(&mut self, q: &Query, limit: usize) -> Result<(Route, Vec<Scored>), ToolError> {
        let route = search::route(&self.built, q, &self.search)?;
        self.search_routed(route, q, limit)
    }

    /// Searches inside `route`'s chapters (and the sections of the manual's best passages), or
    /// the whole manual when the route is unsure.
    fn search_routed(&self, mut route: Route, q: &Query, limit: usize) -> Result<(Route, Vec<Scored>), ToolError> {
        let mut nodes: Vec<usize> = route.chapters.iter().map(|r| r.node).collect();
        if nodes.is_empty() {
            return Ok((route, Vec::new()));
        }
        nodes.extend(&route.kept);
        // An unsure route (two chapters close) narrows nothing: the whole manual is searched.
        let widen = route.confidence < self.search.widen_below;
        if widen {
            route.reason.push_str("; the route is unsure, so the whole manual is searched");
        }
        let within = (!widen).then(|| self.ids(&nodes));
        let pool = limit.saturating_mul(rag_core::hybrid::DIVERSITY_POOL);
        let weight = self.search.vector_weight;
        let found = search::hybrid(&self.built, q, pool, self.settings.threshold, weight, within.as_deref())?;
        let chunks = &self.built.chunks;
        Ok((route, rag_core::hybrid::spread(found, limit, |s| chunks[s.chunk].chapter)))
    }

    fn search(&mut self, env: &dyn Env, args: &Value) -> Result<Output, ToolError> {
        let a: SearchArgs = parse_args("search", args)?;
        let limit = a.limit.unwrap_or(self.settings.fragments);
        if !FRAGMENTS.contains(&limit) {
            return Err(bad_args("search", format!("limit must be within 8 and 12, got {limit}")));
        }
        let (route, found) = match a.retrieval.unwrap_or(Retrieval::Routed) {
            Retrieval::Routed => self.routed_search(env, &a.question, limit)?,
            mode @ (Retrieval::GlobalVector | Retrieval::GlobalHybrid) => {
                let q = self.query(env, "search", &a.question)?;
                let found = if mode == Retrieval::GlobalVector {
                    let mut v = search::vector_only(&self.built, &q, limit, None)?;
                    v.retain(|s| s.score >= self.settings.threshold);
                    v
                } else {
                    search::hybrid(&self.built, &q, limit, self.settings.threshold, self.search.vector_weight, None)?
                };
                let name = if mode == Retrieval::GlobalVector { "global_vector" } else { "global_hybrid" };
                let reason = format!("not routed: retrieval = {name} searches the whole manual");
                (Route::none(reason, RoutedBy::NotRouted), found)
            }
        };
        let hits: Vec<Hit> = found.iter().map(|s| self.hit(s)).collect();
        let cited: Vec<&str> = hits.iter().filter_map(chapter_of).collect();
        audit(env, "search", &a.question, &route, &cited);
        let routed: Vec<String> = route
            .chapters
            .iter()
            .map(|r| format!("{} {} (confidence {:.2})", r.chapter_id, r.path.join(" > "), r.confidence))
            .collect();
        let mut text = format!(
            "Routed to: {}\nWhy: {}\n",
            if routed.is_empty() { "nothing".into() } else { routed.join("; ") },
            route.reason
        );
        // Said when the client's model was asked: whether its pick was used, or why not.
        match (&route.routed_by, &route.fallback) {
            (RoutedBy::ClientModelAndEmbeddings, _) => {
                text.push_str("Routed by: the client's model and the embeddings\n")
            }
            (_, Some(why)) => text.push_str(&format!("Routed by: the embeddings ({why})\n")),
            _ => {}
        }
        if hits.is_empty() {
            text.push_str("\nNo relevant content found.");
        }
        for (k, h) in hits.iter().enumerate() {
            let m = &h.metadata;
            let at = h.location.clone().unwrap_or_default();
            let (first, last) = at.lines.unwrap_or_default();
            // A chunk of merged short chapters names them all.
            let ids: Vec<&str> =
                m["chapter_ids"].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
            let ids = match ids.len() {
                0 | 1 => format!("chapter {}", chapter_of(h).unwrap_or_default()),
                _ => format!("chapters {}", ids.join(", ")),
            };
            text.push_str(&format!(
                "\n[{}] {} ({ids}, lines {}-{}, score {:.2})\n{}\n",
                k + 1,
                at.path.join(" > "),
                first,
                last,
                h.score.unwrap_or_default(),
                h.content
            ));
        }
        // The chapters searched and every top-level chapter with evidence, best first (for
        // `quarry eval`'s chapter recall), typed; how the route was made is this tool's own.
        let typed = tool_guest::tool::Route {
            chapters: route
                .chapters
                .iter()
                .map(|r| RoutedChapter {
                    chapter: r.chapter_id.clone(),
                    path: r.path.clone(),
                    confidence: Some(r.confidence),
                })
                .collect(),
            ranking: route.ranking.iter().map(|&n| self.built.tree.nodes[n].title.clone()).collect(),
        };
        Ok(Output {
            text,
            hits,
            route: Some(typed),
            extra: json!({"route": {
                "confidence": json_f32(route.confidence),
                "reason": route.reason,
                "routed_by": route.routed_by,
                "model": route.model,
                "fallback": route.fallback,
            }}),
            content: Vec::new(),
        })
    }

    fn validate(&self, args: &Value) -> Result<Output, ToolError> {
        let a: ValidateArgs = parse_args("validate_citations", args)?;
        let tree = &self.built.tree;
        let candidates: Vec<Option<usize>> = a.candidates.iter().map(|c| tree.find(c.trim())).collect();
        let mut checks = Vec::new();
        for c in &a.cited {
            let check = match tree.find(c.trim()) {
                None => {
                    json!({"id": c, "valid": false, "reason": format!("no such chapter; nearest: {}", nearest_ids(tree, c.trim(), 3).join(", "))})
                }
                Some(i) => match a
                    .candidates
                    .iter()
                    .zip(&candidates)
                    .find(|(_, n)| n.is_some_and(|n| tree.is_within(i, n)))
                {
                    Some((cand, _)) => json!({"id": c, "valid": true, "reason": format!("inside candidate {cand}")}),
                    None => json!({"id": c, "valid": false, "reason": "not among the candidates or their sections"}),
                },
            };
            checks.push(check);
        }
        let valid = !checks.is_empty() && checks.iter().all(|c| c["valid"] == true);
        let unknown: Vec<&String> =
            a.candidates.iter().zip(&candidates).filter(|(_, n)| n.is_none()).map(|(c, _)| c).collect();
        let body = json!({"valid": valid, "cited": checks, "unknown_candidates": unknown});
        Ok(Output { text: pretty(&body), hits: Vec::new(), route: None, extra: body, content: Vec::new() })
    }
}

/// One line per question for the host's log (`RUST_LOG=quarry=info`): what was asked, where it
/// was routed and which chapters the fragments came from, so answers can be audited.
fn audit(env: &dyn Env, tool: &str, question: &str, route: &Route, fragments: &[&str]) {
    let routed: Vec<String> = route.chapters.iter().map(|r| format!("{}@{:.2}", r.chapter_id, r.confidence)).collect();
    env.log(&format!(
        "audit: {tool} question={:?} routed=[{}] fragments=[{}]",
        question.trim(),
        routed.join(" "),
        fragments.join(" ")
    ));
}

fn at_open(e: ToolError) -> ToolError {
    match e {
        ToolError::InvalidArgs(m) => ToolError::InvalidConfig(m),
        e => e,
    }
}

/// Each tool's spec, over manual `m`: its arguments' schema derived from their type, with the
/// instance's defaults.
fn tool_specs(m: &str, threshold: f32, fragments: usize) -> Vec<Spec> {
    vec![
        Spec::of::<ListArgs>(
            Name::ListChapterTree.as_str(),
            format!("Lists the chapter tree of the manual {m}: ids, titles and chunk counts. Start here, then get_chapter or search_chapter_content."),
        )
        .default_of("level", DEFAULT_LEVEL),
        Spec::of::<GetArgs>(
            Name::GetChapter.as_str(),
            format!("Returns one chapter of the manual {m}: its title, its parent's title and its full text (sections included)."),
        )
        .default_of("max_chars", DEFAULT_MAX_CHARS),
        Spec::of::<RouteArgs>(
            Name::Route.as_str(),
            format!("Picks the 1-3 chapters of the manual {m} most likely to answer a question, with a confidence in [0, 1] and a one-line reason, as JSON. Below confidence 0.7 it names the parent chapter rather than a section."),
        ),
        Spec::of::<SearchInArgs>(
            Name::SearchChapterContent.as_str(),
            format!("Searches inside given chapters of the manual {m} (sections included), by meaning and by keywords; returns JSON results with chapter_id, chapter_title, chunk_index, score and content."),
        )
        .default_of("top_k", DEFAULT_TOP_K)
        .default_of("similarity_threshold", json_f32(threshold)),
        Spec::of::<SearchArgs>(
            Name::Search.as_str(),
            format!("Answers a question from the manual {m}: routes it to the right chapters, searches inside them and returns up to {fragments} fragments, each with its chapter path and id, for citing."),
        )
        .default_of("limit", fragments),
        Spec::of::<ValidateArgs>(
            Name::ValidateCitations.as_str(),
            "Checks that the chapter ids an answer cites are among the candidates routing gave (a section of a candidate counts as inside it). Returns JSON.",
        ),
    ]
}

fn read_manual(env: &dyn Env, path: &str, max_bytes: u64) -> Result<Manual, ToolError> {
    let lower = path.to_ascii_lowercase();
    if ![".md", ".markdown", ".txt", ".docx"].iter().any(|e| lower.ends_with(e)) {
        // Refused before reading: the file may be large.
        return Manual::from_bytes(path, Vec::new());
    }
    Manual::from_bytes(path, env.read_file(path, max_bytes)?)
}

/// A tool's typed arguments, read from the call's parsed object where it stands (no copy of
/// the tree).
fn parse_args<'a, T: Deserialize<'a>>(tool: &str, args: &'a Value) -> Result<T, ToolError> {
    T::deserialize(args).map_err(|e| bad_args(tool, e))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Up to `n` ids most like `id`: siblings and relatives first (shared prefix), then by edit
/// distance.
fn nearest_ids(tree: &crate::tree::Tree, id: &str, n: usize) -> Vec<String> {
    let mut scored: Vec<(usize, usize, &str)> = tree
        .nodes
        .iter()
        .enumerate()
        .map(|(k, node)| {
            let common = node.id.split('.').zip(id.split('.')).take_while(|(a, b)| a == b).count();
            let d = strsim::levenshtein(&node.id, id) + 10 * (id.split('.').count().saturating_sub(common));
            (d, k, node.id.as_str())
        })
        .collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, _, s)| s.to_string()).collect()
}

/// The chapter a hit lies in.
fn chapter_of(h: &Hit) -> Option<&str> {
    h.location.as_ref().and_then(|l| l.chapter.as_deref())
}

/// A line number as WIT carries it.
fn line(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived schemas are the ones CrewAI's agents were given when they were written by
    /// hand (as of c8d5fbc), defaults of the instance included.
    #[test]
    fn derived_schemas_are_the_hand_written_ones() {
        let id =
            json!({"type": "string", "description": "A chapter id from list_chapter_tree, e.g. \"3\" or \"3.4.1\""});
        let expected = [
            json!({"type": "object", "properties": {
                "level": {"type": "integer", "minimum": 1, "maximum": 6, "default": 2, "description": "How many levels to show (below `under`, or from the top)"},
                "under": {"type": "string", "description": "Show only the chapters inside this chapter id"}
            }, "additionalProperties": false}),
            json!({"type": "object", "properties": {
                "chapter_id": id,
                "max_chars": {"type": "integer", "minimum": 100, "default": DEFAULT_MAX_CHARS, "description": "Cut the text after this many characters"}
            }, "required": ["chapter_id"], "additionalProperties": false}),
            json!({"type": "object", "properties": {
                "question": {"type": "string", "description": "The question, in words"}
            }, "required": ["question"], "additionalProperties": false}),
            json!({"type": "object", "properties": {
                "chapter_id": id,
                "chapter_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Several chapter ids, instead of chapter_id"},
                "query": {"type": "string", "description": "What to look for"},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                "similarity_threshold": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.55, "description": "Drop results scoring below this (normalised cosine)"}
            }, "required": ["query"], "additionalProperties": false}),
            json!({"type": "object", "properties": {
                "question": {"type": "string", "description": "The question, in words"},
                "limit": {"type": "integer", "minimum": 8, "maximum": 12, "default": 9, "description": "Fragments to return"},
                "retrieval": {"type": "string", "enum": ["routed", "global_hybrid", "global_vector"], "description": "How to search: routed (default: inside the chapters the question routes to), or the whole manual by global_hybrid or global_vector search"}
            }, "required": ["question"], "additionalProperties": false}),
            json!({"type": "object", "properties": {
                "cited": {"type": "array", "items": {"type": "string"}, "description": "Chapter ids the answer cites"},
                "candidates": {"type": "array", "items": {"type": "string"}, "description": "Chapter ids from route or search"}
            }, "required": ["cited", "candidates"], "additionalProperties": false}),
        ];
        let specs = tool_specs("m.md", 0.55, 9);
        assert_eq!(specs.len(), expected.len());
        for (spec, expected) in specs.iter().zip(expected) {
            assert_eq!(spec.schema, expected, "{}", spec.name);
        }
    }
}
