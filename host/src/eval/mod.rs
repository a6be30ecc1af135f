//! Measuring retrieval on labelled questions: `quarry eval` runs a configured tool through the
//! host on a question file and scores what it returns; `make eval` (tests/eval) scores the
//! chapter RAG's retrievers natively with the same [`score`].
//!
//! A question names the sections that answer it, by heading path (`Usage > Bandwidth`) or by id
//! in a `sections.jsonl` beside the question file ([`questions`]); a section means its whole
//! subtree. A returned fragment is right when it lies inside one: by line range when both sides
//! have one, else by heading path.

pub mod questions;
mod run;
pub mod score;

pub use run::{COMPARED, EvalError, Plan, run};

use std::path::Path;

use questions::{Question, QuestionError, SectionIndex};

/// Reads a question file, and the `sections.jsonl` beside it when there is one.
pub fn load_questions(path: &Path) -> Result<Vec<Question>, QuestionError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| QuestionError::Read { file: p.display().to_string(), source })
    };
    let sections_path = path.with_file_name("sections.jsonl");
    let sections = match sections_path.is_file() {
        true => Some(SectionIndex::parse(&read(&sections_path)?, &sections_path.display().to_string())?),
        false => None,
    };
    questions::parse(&read(path)?, &path.display().to_string(), sections.as_ref())
}
