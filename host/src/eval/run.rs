//! Running a configured tool on labelled questions through the host, as an agent would call it.

use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::questions::Question;
use super::score::{DEPTH, Fragment, Row, Tally, chapter_order, chapters_of, percentile};
use crate::args::Args;
use crate::bindings::quarry::retrieval::types::Route;
use crate::bindings::{Hit, ToolError};
use crate::registry::Registry;
use crate::registry::errors::CallError;
use crate::registry::instance::Caller;

/// The retrieval modes `--compare` asks for, with the eval-only argument `retrieval`: global
/// vector search, global hybrid search, and the tool's own routing.
pub const COMPARED: [&str; 3] = ["global_vector", "global_hybrid", "routed"];

/// Argument names that take the question, in order of preference.
const QUESTION_ARGS: [&str; 3] = ["question", "search_query", "query"];

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// No such tool.
    #[error("no tool {name:?}; the configured tools are: {known}")]
    UnknownTool {
        /// As given.
        name: String,
        /// The tools there are.
        known: String,
    },
    /// The tool's schema does not say where the question goes, or needs more than eval fills.
    #[error("{tool}: {message}")]
    Schema {
        /// The tool.
        tool: String,
        /// What is missing.
        message: String,
    },
    /// A call failed.
    #[error("{tool}, question {id}: {error}")]
    Call {
        /// The tool.
        tool: String,
        /// The question's id.
        id: String,
        /// The host's error.
        error: String,
    },
    /// The hits say nothing about where they are in the manual.
    #[error(
        "{tool}: its hits carry neither a heading path nor a line range (metadata `path`, `heading_path` or `lines`), so they cannot be scored; quarry eval scores chapter-rag and docx-search tools"
    )]
    Unplaced {
        /// The tool.
        tool: String,
    },
}

/// How to call a tool with a question: the argument that takes it, and `limit` when the tool
/// has one that allows [`DEPTH`] results.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `instance.tool`.
    pub tool: String,
    question_arg: String,
    limit: bool,
}

impl Plan {
    /// Reads tool `name`'s schema (`instance.tool`, or an instance with one tool).
    pub fn for_tool(registry: &Registry, name: &str) -> Result<Plan, EvalError> {
        let tools = registry.tools();
        let by_instance: Vec<_> = tools.iter().filter(|t| t.instance == name).collect();
        let entry = tools
            .iter()
            .find(|t| t.qualified == name)
            .or_else(|| if by_instance.len() == 1 { by_instance.first().copied() } else { None })
            .ok_or_else(|| EvalError::UnknownTool {
                name: crate::support::text::cut(name, 64),
                known: tools.iter().map(|t| t.qualified.as_str()).collect::<Vec<_>>().join(", "),
            })?;
        let tool = entry.qualified.clone();
        let schema = &entry.schema;
        let props = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        let required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let is_string = |name: &str| props.get(name).is_some_and(|p| p["type"] == "string");
        let question_arg = QUESTION_ARGS.iter().map(|s| s.to_string()).find(|a| is_string(a)).ok_or_else(|| {
            EvalError::Schema {
                tool: tool.clone(),
                message: format!(
                    "cannot tell which argument takes the question (no string argument named {}); evaluate a search tool such as INSTANCE.search",
                    QUESTION_ARGS.join(", ")
                ),
            }
        })?;
        let others: Vec<&String> = required.iter().filter(|r| **r != question_arg).collect();
        if !others.is_empty() {
            return Err(EvalError::Schema {
                tool,
                message: format!(
                    "it also requires {others:?}, and eval fills only the question and `limit`; configure the instance so that they are not needed (for docx-search, a fixed `docx`)"
                ),
            });
        }
        let limit = props.get("limit").is_some_and(|p| {
            p["type"] == "integer"
                && p["minimum"].as_u64().is_none_or(|m| m <= DEPTH as u64)
                && p["maximum"].as_u64().is_none_or(|m| m >= DEPTH as u64)
        });
        Ok(Plan { tool, question_arg, limit })
    }

    fn args(&self, question: &str, retrieval: Option<&str>) -> Args {
        let mut args = Map::new();
        args.insert(self.question_arg.clone(), json!(question));
        if self.limit {
            args.insert("limit".into(), json!(DEPTH));
        }
        if let Some(r) = retrieval {
            args.insert("retrieval".into(), json!(r));
        }
        Args::from_object(&args)
    }
}

/// Where a hit lies, from its typed location (WIT's `location`): its heading path and lines.
/// An empty heading path places a hit before the first heading (it answers no section); a hit
/// without a location cannot be placed.
fn fragment(hit: &Hit) -> Option<Fragment> {
    let l = hit.location.as_ref()?;
    Some(Fragment { path: l.path.clone(), lines: l.lines.map(|r| (r.first as usize, r.last as usize)) })
}

/// The chapters a tool ranks: those it routed to and then the rest of its ranking, when it
/// reports a route (WIT's `route`), then the fragments' chapters.
fn chapters(route: Option<&Route>, fragments: &[Fragment]) -> Vec<String> {
    let routed: Vec<String> =
        route.map(|r| r.chapters.iter().filter_map(|c| c.path.first().cloned()).collect()).unwrap_or_default();
    let ranking = route.map(|r| r.ranking.clone()).unwrap_or_default();
    chapter_order([routed.as_slice(), ranking.as_slice(), chapters_of(fragments).as_slice()])
}

/// Fragments shown per question by `--details`.
pub const SHOWN_HITS: usize = 3;

/// What one question got, for `--details`: where the first right fragment was, the route, and
/// the first fragments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Detail {
    /// The question's id.
    pub id: String,
    /// Rank (1-based) of the first fragment inside a gold or acceptable section, in the first
    /// [`DEPTH`]; `None`: not in the first [`DEPTH`].
    pub found_at: Option<usize>,
    /// For a multi-section question, whether every gold section is in the first [`DEPTH`].
    pub all_found: Option<bool>,
    /// The chapters the tool routed to, with their confidences (chapter-rag's `extra.route`).
    pub routed: Vec<RoutedChapter>,
    /// The first [`SHOWN_HITS`] fragments: heading path and score.
    pub hits: Vec<ShownHit>,
}

/// One routed chapter as the tool reported it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoutedChapter {
    /// Its id.
    pub id: String,
    /// Its heading path.
    pub path: String,
    /// The tool's confidence.
    pub confidence: Option<f64>,
}

/// One fragment as `--details` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShownHit {
    /// Its heading path.
    pub path: String,
    /// Its lines, when the tool says.
    pub lines: Option<(usize, usize)>,
    /// The tool's score.
    pub score: Option<f32>,
}

/// One retriever's row and its per-question details, in the questions' order.
#[derive(Clone, Debug)]
pub struct Scored {
    /// The scores.
    pub row: Row,
    /// Per question.
    pub details: Vec<Detail>,
    /// Every heading path, and each of its prefixes, of the fragments returned.
    pub seen: std::collections::BTreeSet<Vec<String>>,
}

/// What `--details` shows of the route a tool reported (WIT's `route`).
fn routed_chapters(route: Option<&Route>) -> Vec<RoutedChapter> {
    let text = |s: &str| crate::support::text::cut(s, 200);
    route
        .map(|r| {
            r.chapters
                .iter()
                .take(SHOWN_HITS)
                .map(|c| RoutedChapter {
                    id: text(&c.chapter),
                    path: c.path.iter().map(|p| text(p)).collect::<Vec<_>>().join(" > "),
                    confidence: c.confidence.map(f64::from),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Asks every question of `plan`'s tool (with `retrieval`, when given) and scores the answers.
/// None when the tool refuses the `retrieval` argument: it has one mode.
pub async fn run(
    registry: &Registry,
    plan: &Plan,
    questions: &[Question],
    retrieval: Option<&str>,
) -> Result<Option<Scored>, EvalError> {
    let mut tally = Tally::default();
    let mut details = Vec::with_capacity(questions.len());
    let mut ms = Vec::with_capacity(questions.len());
    let mut seen = std::collections::BTreeSet::new();
    for q in questions {
        let t = Instant::now();
        let args = plan.args(&q.text, retrieval);
        let out = match registry.call_cancellable(&plan.tool, &args, Caller::default(), std::future::pending()).await {
            Ok(out) => out,
            Err(CallError::Tool { error: ToolError::InvalidArgs(m), .. })
                if retrieval.is_some() && m.contains("retrieval") =>
            {
                return Ok(None);
            }
            Err(e) => return Err(EvalError::Call { tool: plan.tool.clone(), id: q.id.clone(), error: e.to_string() }),
        };
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        let fragments: Vec<Fragment> = out.hits.iter().filter_map(fragment).collect();
        if fragments.len() < out.hits.len() {
            return Err(EvalError::Unplaced { tool: plan.tool.clone() });
        }
        for f in &fragments {
            for n in 1..=f.path.len() {
                seen.insert(f.path[..n].to_vec());
            }
        }
        tally.add(q, &fragments, &chapters(out.route.as_ref(), &fragments));
        let top = &fragments[..fragments.len().min(DEPTH)];
        details.push(Detail {
            id: q.id.clone(),
            found_at: top.iter().position(|f| q.gold.iter().chain(&q.acceptable).any(|s| s.holds(f))).map(|r| r + 1),
            all_found: q.multi.then(|| q.gold.iter().all(|s| top.iter().any(|f| s.holds(f)))),
            routed: routed_chapters(out.route.as_ref()),
            hits: fragments
                .iter()
                .zip(&out.hits)
                .take(SHOWN_HITS)
                .map(|(f, h)| ShownHit {
                    path: crate::support::text::cut(&f.path.join(" > "), 300),
                    lines: f.lines,
                    score: h.score,
                })
                .collect(),
        });
    }
    let name = retrieval.unwrap_or("as configured").to_string();
    let row = Row { name, tally, latency: Some((percentile(&ms, 0.5), percentile(&ms, 0.99))) };
    Ok(Some(Scored { row, details, seen }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::quarry::retrieval::types::{LineRange, Location};

    fn hit(location: Option<Location>) -> Hit {
        Hit { content: "x".into(), score: Some(0.5), source: None, location, resource: None, metadata: "{}".into() }
    }

    fn at(path: &[&str], lines: Option<(u32, u32)>) -> Option<Location> {
        let lines = lines.map(|(first, last)| LineRange { first, last });
        Some(Location { path: path.iter().map(|p| p.to_string()).collect(), lines, chapter: None })
    }

    #[test]
    fn hits_are_placed_by_heading_path_or_lines() {
        let f = fragment(&hit(at(&["A", "B"], None))).unwrap();
        assert_eq!((f.path, f.lines), (vec!["A".to_string(), "B".to_string()], None));
        let f = fragment(&hit(at(&["A"], Some((3, 9))))).unwrap();
        assert_eq!(f.lines, Some((3, 9)));
        // Before the first heading: placed, in no section.
        assert_eq!(fragment(&hit(at(&[], None))).map(|f| f.path.len()), Some(0));
        assert_eq!(fragment(&hit(None)), None);
    }
}
