//! `quarry call`: one tool call, its output on stdout.

use std::path::Path;

use super::{EXIT_OK, EXIT_TOOL, EXIT_USAGE, Outcome, fail, load_config, load_for, printable, registry};
use crate::registry::errors::CallError;

/// `quarry call`'s flags.
#[derive(clap::Args, Debug)]
pub struct Flags {
    /// `instance.tool`, or the instance name alone when it offers one tool.
    pub tool: String,
    /// The arguments, a JSON object.
    #[arg(default_value = "{}")]
    pub args: String,
    /// Print the whole output (text, hits, extra) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Calls the tool once its instance has prepared (the CLI waits for an index build to the end,
/// with the progress bar; an MCP call waits at most its deadline).
pub async fn run(path: &Path, flags: Flags) -> Outcome {
    let registry = registry(load_config(path).await?)?;
    // The call's error says why its instance is unprepared.
    registry.failures_reported_by_caller();
    load_for(&registry, &flags.tool).await?;
    registry.prepared().await;
    let out = registry.call(&flags.tool, &flags.args).await.map_err(|e| {
        let code = match e {
            CallError::UnknownTool { .. } | CallError::BadArgs { .. } | CallError::ArgsTooLarge { .. } => EXIT_USAGE,
            _ => EXIT_TOOL,
        };
        fail(code, e)
    })?;
    if flags.json {
        println!("{}", crate::output::output_json(&out));
    } else {
        println!("{}", printable(&out.text));
    }
    Ok(EXIT_OK)
}
