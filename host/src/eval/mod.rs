//! Measuring retrieval on labelled questions: `quarry eval` runs a configured tool through the
//! host on a question file and scores what it returns; `make eval` (tests/eval) scores the
//! chapter RAG's retrievers natively with the same [`score`].
//!
//! A question names the sections that answer it, by heading path (`Usage > Bandwidth`) or by id
//! in a `sections.jsonl` beside the question file ([`questions`]); a section means its whole
//! subtree. A returned fragment is right when it lies inside one: by line range when both sides
//! have one, else by heading path.

mod details;
mod gold;
pub mod questions;
mod run;
pub mod score;

pub use details::{details_json, details_text};
pub use gold::unseen_sections;
pub use run::{COMPARED, Detail, EvalError, Plan, RoutedChapter, SHOWN_HITS, Scored, ShownHit, run};

use std::path::Path;

use questions::{Question, QuestionError, SectionIndex};

/// Reads a question file, and its manual's `sections.jsonl`: `sections` when given, else the
/// one beside the question file when there is one.
pub fn load_questions(path: &Path, sections: Option<&Path>) -> Result<Vec<Question>, QuestionError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| QuestionError::Read { file: p.display().to_string(), source })
    };
    let beside = path.with_file_name("sections.jsonl");
    let sections_path = sections.map(Path::to_path_buf).or_else(|| beside.is_file().then_some(beside));
    let sections = match sections_path {
        Some(p) => Some(SectionIndex::parse(&read(&p)?, &p.display().to_string())?),
        None => None,
    };
    questions::parse(&read(path)?, &path.display().to_string(), sections.as_ref())
}
