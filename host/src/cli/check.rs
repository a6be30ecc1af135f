//! `quarry check`: the config validated and every instance opened and prepared, each failure
//! reported, and what each pool may hold.

use std::path::Path;

use super::{EXIT_OK, EXIT_TOOL, Outcome, load_all, load_config, printable_error, registry};

/// Checks the config at `path` to the end: an index that cannot be built is a failure too.
pub async fn run(path: &Path) -> Outcome {
    let registry = registry(load_config(path).await?)?;
    // Said below, each once.
    registry.failures_reported_by_caller();
    let failures = load_all(&registry).await;
    let unprepared = registry.prepared().await;
    for (name, why) in &unprepared {
        // `why` names the instance too: said once.
        let why = why.strip_prefix(&format!("tool instance {name:?} could not prepare: ")).unwrap_or(why);
        eprintln!("warning: tool instance {name:?} not prepared: {}", printable_error(why));
    }
    let tools = registry.tools();
    let configured = registry.config().tools.len();
    // Counted by name: the failures also name embedders (`embedders.NAME`), which are no tool
    // instances.
    let loaded = registry
        .config()
        .tools
        .keys()
        .filter(|name| registry.instance(name).is_some() && !unprepared.iter().any(|(u, _)| u == *name))
        .count();
    // A tool of an instance that could not prepare is listed, but not as `ok`: its calls fail.
    let unready = |instance: &str| unprepared.iter().any(|(u, _)| u == instance);
    let ready = tools.iter().filter(|t| !unready(&t.instance)).count();
    println!("{}: {loaded} of {configured} tool instances opened, {ready} tools", path.display());
    for t in tools.iter() {
        println!("  {}  {}", if unready(&t.instance) { "not prepared" } else { "ok" }, t.qualified);
    }
    for (name, cfg) in &registry.config().tools {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        println!(
            "  pool {name}: {} instance{}, memory at most {:.0} MiB ({} x grants.memory {:.0} MiB)",
            cfg.pool,
            if cfg.pool == 1 { "" } else { "s" },
            mib(cfg.grants.memory * cfg.pool as u64),
            cfg.pool,
            mib(cfg.grants.memory)
        );
    }
    Ok(if failures.is_empty() && unprepared.is_empty() { EXIT_OK } else { EXIT_TOOL })
}
