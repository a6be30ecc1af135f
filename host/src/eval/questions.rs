//! Labelled question files: one JSON object a line, in the format of the project's development
//! manuals (`question`, `answer_sections` or `answer_section_ids`, `acceptable_sections(_ids)`,
//! `chapters`, `type`). Every error names the file and the line.

use std::collections::HashMap;

use serde_json::Value;

/// One line of a question file, for the messages that show what to write.
pub const EXAMPLE: &str =
    r#"{"question": "How do I limit bandwidth at night?", "answer_sections": ["Usage > Bandwidth"]}"#;

/// Where an answer lies: a section with its whole subtree, by heading path, and by line range
/// when a `sections.jsonl` gave one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Heading titles from the top down.
    pub path: Vec<String>,
    /// First and last line of the section's subtree (inclusive), when known.
    pub lines: Option<(usize, usize)>,
}

impl Section {
    /// A section named by a heading path written `A > B > C`.
    pub fn from_path(path: &str) -> Section {
        Section { path: split_path(path), lines: None }
    }
}

/// `A > B > C` as its titles.
pub fn split_path(path: &str) -> Vec<String> {
    path.split(" > ").map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect()
}

/// One labelled question.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    /// Its `id`, or `line N`.
    pub id: String,
    /// What is asked.
    pub text: String,
    /// The sections that answer it (all of them, for a `multi` question).
    pub gold: Vec<Section>,
    /// Other sections that answer it as well.
    pub acceptable: Vec<Section>,
    /// Top-level chapters that hold the answer: given, or the first title of each gold path.
    pub chapters: Vec<String>,
    /// It needs every gold section (`type: "multi"`; the default when it names several).
    pub multi: bool,
}

/// Why a question file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum QuestionError {
    /// The file cannot be read.
    #[error("cannot read {file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// One line is wrong.
    #[error("{file} line {line}: {message}")]
    Line {
        /// The file.
        file: String,
        /// 1-based.
        line: usize,
        /// What is wrong and what to write.
        message: String,
    },
    /// No question at all.
    #[error("{file} holds no questions; write one JSON object a line, e.g. {EXAMPLE}")]
    Empty {
        /// The file.
        file: String,
    },
}

/// The sections of a manual by id (`sections.jsonl`: `id`, `path`, `line_start`,
/// `subtree_line_end`), so that questions can name sections by id.
#[derive(Debug, Default)]
pub struct SectionIndex(HashMap<String, Section>);

impl SectionIndex {
    /// Parses `sections.jsonl` text (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> Result<SectionIndex, QuestionError> {
        let mut out = HashMap::new();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = |message: String| QuestionError::Line { file: file.to_string(), line: n + 1, message };
            let v: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
            let id = v["id"].as_str().ok_or_else(|| bad("`id` (a string) is required".into()))?;
            let path: Vec<String> = match &v["path"] {
                Value::Array(a) => a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
                _ => return Err(bad("`path` (a list of titles) is required".into())),
            };
            let (start, end) = match (v["line_start"].as_u64(), v["subtree_line_end"].as_u64()) {
                (Some(s), Some(e)) if s <= e => (s as usize, e as usize),
                _ => {
                    return Err(
                        bad("`line_start` and `subtree_line_end` (line numbers, in order) are required".into()),
                    );
                }
            };
            out.insert(id.to_string(), Section { path, lines: Some((start, end)) });
        }
        Ok(SectionIndex(out))
    }
}

/// Parses a question file's `text` (`file` names it in errors); ids in `*_section_ids` are
/// looked up in `sections` when given, else the heading paths of `*_sections` are used.
pub fn parse(text: &str, file: &str, sections: Option<&SectionIndex>) -> Result<Vec<Question>, QuestionError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| QuestionError::Line { file: file.to_string(), line: n + 1, message };
        let v: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON ({e}); write e.g. {EXAMPLE}")))?;
        if !v.is_object() {
            return Err(bad(format!("not a JSON object; write e.g. {EXAMPLE}")));
        }
        let text = match v["question"].as_str().map(str::trim) {
            Some(t) if !t.is_empty() => t.to_string(),
            _ => return Err(bad(format!("`question` (a non-empty string) is required; write e.g. {EXAMPLE}"))),
        };
        let gold = targets(&v, "answer_sections", "answer_section_ids", sections).map_err(&bad)?;
        if gold.is_empty() {
            return Err(bad(format!(
                "name the sections that answer it in `answer_sections` (heading paths such as \"Usage > Bandwidth\"); e.g. {EXAMPLE}"
            )));
        }
        let acceptable = targets(&v, "acceptable_sections", "acceptable_section_ids", sections).map_err(&bad)?;
        let chapters = match &v["chapters"] {
            Value::Null => {
                let mut c: Vec<String> = Vec::new();
                for t in gold.iter().filter_map(|s| s.path.first()) {
                    if !c.contains(t) {
                        c.push(t.clone());
                    }
                }
                c
            }
            value => strings(value).ok_or_else(|| bad("`chapters` must be a list of chapter titles".into()))?,
        };
        let multi = match v["type"].as_str() {
            None if v["type"].is_null() => gold.len() > 1,
            Some("single") => false,
            Some("multi") => true,
            _ => return Err(bad("`type` must be \"single\" or \"multi\"".into())),
        };
        let id = v["id"].as_str().map_or_else(|| format!("line {}", n + 1), str::to_string);
        out.push(Question { id, text, gold, acceptable, chapters, multi });
    }
    if out.is_empty() {
        return Err(QuestionError::Empty { file: file.to_string() });
    }
    Ok(out)
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(|x| x.as_str().map(str::to_string)).collect()
}

/// The sections a question names under `paths_key` (heading paths) or `ids_key` (ids in
/// `sections`): ids win when the index is there.
fn targets(v: &Value, paths_key: &str, ids_key: &str, sections: Option<&SectionIndex>) -> Result<Vec<Section>, String> {
    let paths = match &v[paths_key] {
        Value::Null => Vec::new(),
        value => strings(value).ok_or_else(|| format!("`{paths_key}` must be a list of heading paths"))?,
    };
    let ids = match &v[ids_key] {
        Value::Null => Vec::new(),
        value => strings(value).ok_or_else(|| format!("`{ids_key}` must be a list of section ids"))?,
    };
    match sections {
        Some(index) if !ids.is_empty() => ids
            .iter()
            .map(|id| {
                index.0.get(id).cloned().ok_or_else(|| format!("`{ids_key}`: no section {id:?} in sections.jsonl"))
            })
            .collect(),
        None if !ids.is_empty() && paths.is_empty() => Err(format!(
            "`{ids_key}` needs a sections.jsonl beside the question file; or name the sections in `{paths_key}`"
        )),
        _ => Ok(paths.iter().map(|p| Section::from_path(p)).filter(|s| !s.path.is_empty()).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTIONS: &str = r#"{"id": "S1", "path": ["Usage"], "line_start": 1, "subtree_line_end": 40}
{"id": "S2", "path": ["Usage", "Bandwidth"], "line_start": 20, "subtree_line_end": 30}
"#;

    #[test]
    fn paths_ids_defaults_and_types() {
        let index = SectionIndex::parse(SECTIONS, "sections.jsonl").unwrap();
        let text = format!(
            "{EXAMPLE}\n\n{}\n{}\n",
            r#"{"id": "q2", "question": "Both?", "answer_section_ids": ["S2", "S1"], "chapters": ["Usage"]}"#,
            r#"{"question": "One", "answer_sections": ["A > B", "C"], "type": "single", "acceptable_sections": ["D"]}"#
        );
        let qs = parse(&text, "q.jsonl", Some(&index)).unwrap();
        assert_eq!(qs.len(), 3);
        assert_eq!(qs[0].id, "line 1");
        assert_eq!(qs[0].gold, vec![Section::from_path("Usage > Bandwidth")]);
        assert_eq!(qs[0].chapters, vec!["Usage"]);
        assert!(!qs[0].multi);
        assert_eq!(qs[1].id, "q2");
        assert_eq!(qs[1].gold[0].lines, Some((20, 30)));
        assert!(qs[1].multi, "two gold sections and no type: multi");
        assert_eq!(qs[2].chapters, vec!["A", "C"]);
        assert!(!qs[2].multi);
        assert_eq!(qs[2].acceptable, vec![Section::from_path("D")]);
    }

    #[test]
    fn every_error_names_the_line_and_what_to_write() {
        let index = SectionIndex::parse(SECTIONS, "sections.jsonl").unwrap();
        let cases = [
            ("{\"question\": ", "line 2: not JSON"),
            ("[1, 2]", "line 2: not a JSON object"),
            (r#"{"question": "  ", "answer_sections": ["A"]}"#, "line 2: `question` (a non-empty string) is required"),
            (r#"{"question": "Q"}"#, "line 2: name the sections that answer it in `answer_sections`"),
            (r#"{"question": "Q", "answer_section_ids": ["S9"]}"#, "line 2: `answer_section_ids`: no section \"S9\""),
            (r#"{"question": "Q", "answer_sections": "A > B"}"#, "must be a list of heading paths"),
            (
                r#"{"question": "Q", "answer_sections": ["A"], "type": "many"}"#,
                "`type` must be \"single\" or \"multi\"",
            ),
            (r#"{"question": "Q", "answer_sections": ["A"], "chapters": "A"}"#, "`chapters` must be a list"),
        ];
        for (line, want) in cases {
            let e = parse(&format!("{EXAMPLE}\n{line}\n"), "q.jsonl", Some(&index)).unwrap_err().to_string();
            assert!(e.starts_with("q.jsonl line 2: ") && e.contains(want), "{line}: {e}");
        }
        let e = parse(r#"{"question": "Q", "answer_section_ids": ["S1"]}"#, "q.jsonl", None).unwrap_err();
        assert!(e.to_string().contains("needs a sections.jsonl beside the question file"), "{e}");
        let e = parse("\n\n", "q.jsonl", None).unwrap_err();
        assert!(e.to_string().contains("holds no questions"), "{e}");
        let e = SectionIndex::parse("{\"id\": \"S1\"}", "s.jsonl").unwrap_err();
        assert!(e.to_string().starts_with("s.jsonl line 1: `path`"), "{e}");
    }
}
