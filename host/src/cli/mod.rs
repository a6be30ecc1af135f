//! The `quarry` command line: a file per subcommand ([`init`], [`list`], [`call`], [`check`],
//! [`eval`], [`serve`], and [`oci`] for `push` and `pull`), each with its flags and its run;
//! [`run`] only dispatches. What several share is here: where the config is, loading it with
//! its registry components, the registry and its progress bar ([`progress_bar`]), and text fit
//! for the terminal.

pub mod call;
pub mod check;
pub mod eval;
pub mod init;
pub mod list;
pub mod oci;
mod progress_bar;
pub mod serve;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::registry::Registry;
use crate::registry::errors::OpenError;

/// What `quarry --version` prints: the host's version, the WIT package its components are built
/// against, and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (WIT quarry:retrieval@",
    env!("QUARRY_WIT_VERSION"),
    ", commit ",
    env!("QUARRY_GIT_COMMIT"),
    ")"
);

/// Sandboxed WebAssembly retrieval tools for AI agents.
#[derive(Parser, Debug)]
#[command(name = "quarry", version = VERSION, about)]
pub struct Cli {
    /// The host config file (TOML). Defaults to $QUARRY_CONFIG, else ./quarry.toml.
    #[arg(long, short, global = true)]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a config for your documents, with the built-in embedder and model:
    /// `quarry init --manual docs/MANUAL.md` (chapter RAG), `--docx handbook.docx` (DOCX search).
    Init(init::Flags),
    /// Publish a component to an OCI registry in the Wasm OCI artifact format, and print the
    /// digest to pin: `quarry push chapter_rag.wasm oci://127.0.0.1:5000/tools/chapter-rag:v1`.
    Push(oci::PushFlags),
    /// Resolve every `oci://` tag of the config again, write the digests to quarry.lock and
    /// fetch what changed; a running `quarry serve` swaps the instances whose digest moved.
    Pull,
    /// List every tool of every configured instance, with its description and argument schema.
    List(list::Flags),
    /// Call a tool: `quarry call manual.search '{"question": "..."}'`.
    Call(call::Flags),
    /// Validate the config and open every instance; report each failure.
    Check,
    /// Score a search tool on labelled questions: `quarry eval manual.search questions.jsonl`.
    /// Each line is a JSON object: {"question": "...", "answer_sections": ["Chapter > Section"]}
    /// (see docs/src/evaluation.md). Prints section and chapter recall@k, all-found@10, MRR and latency.
    Eval(eval::Flags),
    /// Serve every tool over MCP, swapping in new component versions as their files change.
    Serve(serve::Flags),
}

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the tool ran and returned an error, or an instance failed to load.
pub const EXIT_TOOL: u8 = 1;
/// Exit status: bad usage or config.
pub const EXIT_USAGE: u8 = 2;

/// Runs the CLI; returns the exit status. Errors are printed on one line to stderr.
pub async fn run(cli: Cli) -> ExitCode {
    let path = cli
        .config
        .or_else(|| std::env::var_os("QUARRY_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("quarry.toml"));
    let outcome = match cli.command {
        Command::Init(flags) => init::run(flags, path),
        Command::Push(flags) => oci::push(flags).await,
        Command::Pull => oci::pull(&path).await,
        Command::List(flags) => list::run(&path, flags).await,
        Command::Call(flags) => call::run(&path, flags).await,
        Command::Check => check::run(&path).await,
        Command::Eval(flags) => eval::run(&path, flags).await,
        Command::Serve(flags) => serve::run(&path, flags).await,
    };
    ExitCode::from(outcome.unwrap_or_else(|e| e.0))
}

/// A subcommand that stopped early: its message is printed, this is its exit status.
#[derive(Debug)]
pub struct Exit(u8);

/// What a subcommand returns: its exit status, or the status of the error it printed.
pub type Outcome = Result<u8, Exit>;

/// Prints `error: {e}` (escaped for a terminal: it may hold a tool's words) and stops with `code`.
fn fail(code: u8, e: impl std::fmt::Display) -> Exit {
    eprintln!("error: {}", printable_error(&e.to_string()));
    Exit(code)
}

/// The config at `path`, with the components it names in registries in place (see
/// [`crate::oci`]): what every subcommand that loads tools starts from.
async fn load_config(path: &Path) -> Result<Config, Exit> {
    let config = Config::load(path).map_err(|e| fail(EXIT_USAGE, e))?;
    #[cfg(feature = "oci")]
    {
        let fetched = crate::oci::fetch(&config, false).await.map_err(|e| fail(EXIT_TOOL, e))?;
        for f in &fetched {
            tracing::info!(target: "quarry::oci", instance = %f.instance, reference = %f.reference, digest = %f.digest, downloaded = f.downloaded, "component from its registry");
        }
    }
    Ok(config)
}

/// A registry over `config` (nothing loaded yet); what its tools report while they work (an
/// ingest, at load or in a call) is drawn as a progress bar on stderr.
fn registry(config: Config) -> Result<Arc<Registry>, Exit> {
    let registry = Registry::new(config).map_err(|e| fail(EXIT_USAGE, e))?;
    tokio::spawn(progress_bar::show_progress(registry.apps().progress.subscribe()));
    Ok(registry)
}

/// Loads every instance of `registry` (see [`Registry::load_all`]), warning of each that did
/// not load; returns those.
async fn load_all(registry: &Arc<Registry>) -> Vec<(String, OpenError)> {
    let failures = registry.load_all().await;
    warn_not_loaded(&failures);
    failures
}

/// Loads every instance of `registry` for a call of `tool` (`instance.tool`, or the instance
/// alone): the instance's own failure to load is the command's error, printed once, exit
/// status 1 (a tool that failed, not a name the user got wrong); the others' are warnings.
async fn load_for(registry: &Arc<Registry>, tool: &str) -> Result<(), Exit> {
    let instance = tool.split_once('.').map_or(tool, |(i, _)| i);
    let (own, others): (Vec<_>, Vec<_>) = registry.load_all().await.into_iter().partition(|(n, _)| n == instance);
    warn_not_loaded(&others);
    match own.into_iter().next() {
        Some((name, e)) => Err(fail(EXIT_TOOL, not_loaded(&name, &e))),
        None => Ok(()),
    }
}

fn warn_not_loaded(failures: &[(String, OpenError)]) {
    for (name, e) in failures {
        eprintln!("warning: {}", printable_error(&not_loaded(name, e)));
    }
}

/// `tool instance "NAME" not loaded: WHY` (or `embedder "NAME"` for `embedders.NAME`), the
/// name said once where `WHY` starts with it.
fn not_loaded(name: &str, e: &OpenError) -> String {
    let what = match name.strip_prefix("embedders.") {
        Some(embedder) => format!("embedder {embedder:?}"),
        None => format!("tool instance {name:?}"),
    };
    let why = e.to_string();
    match why.strip_prefix(what.as_str()) {
        Some(rest) => format!("{what} not loaded:{}", rest.strip_prefix(':').unwrap_or(rest)),
        None => format!("{what} not loaded: {why}"),
    }
}

/// Text a component or a document chose, for stdout: escaped when stdout is a terminal (see
/// [`crate::support::text::for_terminal`]), as it is when piped.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if std::io::stdout().is_terminal() { crate::support::text::for_terminal(text).into() } else { text.into() }
}

/// An error for stderr, escaped when stderr is a terminal (it may hold a tool's words).
fn printable_error(text: &str) -> std::borrow::Cow<'_, str> {
    if std::io::stderr().is_terminal() { crate::support::text::for_terminal(text).into() } else { text.into() }
}
