//! `quarry list`: every tool of every configured instance, with its description, argument
//! schema and component.

use std::path::Path;

use super::{EXIT_OK, EXIT_TOOL, Outcome, load_all, load_config, printable, registry};

/// `quarry list`'s flags.
#[derive(clap::Args, Debug)]
pub struct Flags {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Lists the tools of the config at `path`; fails (after listing) when an instance did not load.
pub async fn run(path: &Path, flags: Flags) -> Outcome {
    let registry = registry(load_config(path).await?)?;
    let failures = load_all(&registry).await;
    let tools = registry.tools();
    if flags.json {
        let v: Vec<serde_json::Value> = tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.qualified,
                    "instance": t.instance,
                    "description": t.spec.description,
                    "args_schema": *t.schema,
                    "component": {"version": t.component_version, "sha256": t.component_hash},
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        for t in tools.iter() {
            println!(
                "{}\n    {}\n    args: {}\n    component: {}, sha256:{}",
                t.qualified,
                printable(&t.spec.description),
                printable(&t.spec.args_schema),
                t.component_version.as_deref().map_or("no version".to_string(), |v| format!("version {v}")),
                &t.component_hash[..12.min(t.component_hash.len())],
            );
        }
    }
    Ok(if failures.is_empty() { EXIT_OK } else { EXIT_TOOL })
}
