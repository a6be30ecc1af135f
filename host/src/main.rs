//! The `quarry` binary: parse flags, run, map the outcome to an exit status.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // A compile worker (runtime::compile): before anything else, and with nothing else.
    if std::env::args_os().nth(1).is_some_and(|a| a == quarry::runtime::compile::WORKER_ARG) {
        return ExitCode::from(u8::try_from(quarry::runtime::compile::child_main()).unwrap_or(1));
    }
    // Components are compiled in workers of this binary, under [host] compile_memory and
    // compile_timeout; without it, in process.
    match std::env::current_exe() {
        Ok(exe) => quarry::runtime::compile::use_worker(exe),
        Err(e) => eprintln!(
            "warning: cannot find this program's file ({e}): components are compiled in process, without compile_memory and compile_timeout"
        ),
    }
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
