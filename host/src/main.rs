//! The `quarry` binary: parse flags, run, map the outcome to an exit status.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Logs go to stderr (stdout carries results, and later the MCP protocol).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        // Colour codes are for a terminal; in a pipe or a file they are noise to every reader.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = quarry::cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(quarry::cli::EXIT_USAGE);
        }
    };
    rt.block_on(quarry::cli::run(cli))
}
