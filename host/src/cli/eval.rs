//! `quarry eval`: a search tool scored on labelled questions (see [`crate::eval`]), as a table
//! or JSON, per question with `--details`.

use std::path::{Path, PathBuf};

use super::{
    EXIT_OK, EXIT_TOOL, EXIT_USAGE, Outcome, fail, load_config, load_for, printable, printable_error, registry,
};

/// `quarry eval`'s flags.
#[derive(clap::Args, Debug)]
pub struct Flags {
    /// `instance.tool`, or the instance name alone when it offers one tool.
    pub tool: String,
    /// The question file (JSON lines); a `sections.jsonl` beside it lets questions name
    /// sections by id.
    pub questions: PathBuf,
    /// The manual's heading list (`sections.jsonl`) when it is not beside the question file.
    #[arg(long, value_name = "FILE")]
    pub sections: Option<PathBuf>,
    /// Run global vector, global hybrid and routed retrieval side by side (tools that
    /// accept the eval-only argument `retrieval`, such as chapter-rag's `search`).
    #[arg(long)]
    pub compare: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also say, per question, where the answer was found (with --compare, by which
    /// retriever), the routed chapters and the first fragments.
    #[arg(long)]
    pub details: bool,
}

/// Scores `flags.tool` on the question file once every instance has prepared.
pub async fn run(path: &Path, flags: Flags) -> Outcome {
    let config = load_config(path).await?;
    // A bad question file is reported before the tools load (which may take minutes).
    let questions =
        crate::eval::load_questions(&flags.questions, flags.sections.as_deref()).map_err(|e| fail(EXIT_USAGE, e))?;
    let registry = registry(config)?;
    // A call that finds its instance unprepared says why.
    registry.failures_reported_by_caller();
    load_for(&registry, &flags.tool).await?;
    // The CLI waits for the index builds to the end, with the progress bar.
    registry.prepared().await;
    let plan = crate::eval::Plan::for_tool(&registry, &flags.tool).map_err(|e| fail(EXIT_USAGE, e))?;
    let modes: Vec<Option<&str>> =
        if flags.compare { crate::eval::COMPARED.iter().map(|m| Some(*m)).collect() } else { vec![None] };
    let mut scored = Vec::new();
    for mode in modes {
        match crate::eval::run(&registry, &plan, &questions, mode).await.map_err(|e| fail(EXIT_TOOL, e))? {
            Some(s) => scored.push(s),
            None => eprintln!("note: {} does not offer retrieval {:?}; skipped", plan.tool, mode.unwrap_or_default()),
        }
    }
    if scored.is_empty() {
        return Err(fail(
            EXIT_USAGE,
            format!(
                "{} has no retrieval modes to compare (it refuses the argument `retrieval`); run without --compare",
                plan.tool
            ),
        ));
    }
    for w in crate::eval::unseen_sections(&questions, &scored) {
        eprintln!("warning: {}", printable_error(&w));
    }
    let rows: Vec<crate::eval::score::Row> = scored.iter().map(|s| s.row.clone()).collect();
    let multi = questions.iter().filter(|q| q.multi).count();
    if flags.json {
        let mut v = serde_json::json!({"tool": plan.tool, "questions": questions.len(), "rows": crate::eval::score::to_json(&rows)});
        if flags.details {
            v["details"] = crate::eval::details_json(&questions, &scored);
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("{}: {} questions ({multi} multi-section)\n", plan.tool, questions.len());
        print!("{}", crate::eval::score::table(&rows));
        if flags.details {
            println!();
            print!("{}", printable(&crate::eval::details_text(&questions, &scored)));
        }
    }
    Ok(EXIT_OK)
}
