//! The `quarry` command line: `init`, `list`, `call`, `check`, `serve`, `eval`; [`init`] writes
//! a config for the user's documents, [`progress_bar`] draws what tools report while they work.

pub mod init;
mod progress_bar;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::registry::Registry;
use crate::registry::instance::CallError;

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
    Init {
        /// A manual (Markdown, text or DOCX) for chapter RAG; repeatable.
        #[arg(long, value_name = "PATH")]
        manual: Vec<PathBuf>,
        /// A DOCX file for semantic search; repeatable.
        #[arg(long, value_name = "PATH")]
        docx: Vec<PathBuf>,
        /// The config file to write (default: --config, else ./quarry.toml).
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Publish a component to an OCI registry in the Wasm OCI artifact format, and print the
    /// digest to pin: `quarry push chapter_rag.wasm oci://127.0.0.1:5000/tools/chapter-rag:v1`.
    Push {
        /// The component file.
        file: PathBuf,
        /// `oci://REGISTRY/REPOSITORY:TAG`.
        reference: String,
        /// Also sign the pushed digest with this ECDSA P-256 private key (PEM PKCS#8), as
        /// `cosign sign --key` does: hosts whose config names its public key (`signed_by`)
        /// then accept it.
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
    },
    /// Resolve every `oci://` tag of the config again, write the digests to quarry.lock and
    /// fetch what changed; a running `quarry serve` swaps the instances whose digest moved.
    Pull,
    /// List every tool of every configured instance, with its description and argument schema.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool: `quarry call manual.search '{"question": "..."}'`.
    Call {
        /// `instance.tool`, or the instance name alone when it offers one tool.
        tool: String,
        /// The arguments, a JSON object.
        #[arg(default_value = "{}")]
        args: String,
        /// Print the whole output (text, hits, extra) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Validate the config and open every instance; report each failure.
    Check,
    /// Score a search tool on labelled questions: `quarry eval manual.search questions.jsonl`.
    /// Each line is a JSON object: {"question": "...", "answer_sections": ["Chapter > Section"]}
    /// (see the README). Prints section and chapter recall@k, all-found@10, MRR and latency.
    Eval {
        /// `instance.tool`, or the instance name alone when it offers one tool.
        tool: String,
        /// The question file (JSON lines); a `sections.jsonl` beside it lets questions name
        /// sections by id.
        questions: PathBuf,
        /// The manual's heading list (`sections.jsonl`) when it is not beside the question file.
        #[arg(long, value_name = "FILE")]
        sections: Option<PathBuf>,
        /// Run global vector, global hybrid and routed retrieval side by side (tools that
        /// accept the eval-only argument `retrieval`, such as chapter-rag's `search`).
        #[arg(long)]
        compare: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also say, per question, where the answer was found (with --compare, by which
        /// retriever), the routed chapters and the first fragments.
        #[arg(long)]
        details: bool,
    },
    /// Serve every tool over MCP, swapping in new component versions as their files change.
    Serve {
        /// Speak MCP on stdin/stdout (logs go to stderr).
        #[arg(long, conflicts_with = "http", required_unless_present = "http")]
        stdio: bool,
        /// Speak streamable HTTP at http://ADDR/mcp, e.g. 127.0.0.1:8765. An address other
        /// than loopback needs a bearer token in $QUARRY_MCP_TOKEN, and --insecure-http.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Serve beyond loopback over plain HTTP: the token and every call travel in clear.
        /// Prefer a TLS proxy in front of a loopback address.
        #[arg(long, requires = "http")]
        insecure_http: bool,
        /// MCP sessions at once over HTTP (overrides [serve] max_sessions; default 128).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_sessions: Option<u32>,
        /// Open HTTP connections (overrides [serve] max_connections; default 256).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_connections: Option<u32>,
        /// Tool calls one session may have waiting or running (overrides [serve]
        /// max_queued_calls; default 32).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_queued_calls: Option<u32>,
        /// Bytes of requests held at once, all clients together, e.g. 128MiB (overrides
        /// [serve] max_request_bytes).
        #[arg(long, value_name = "SIZE", value_parser = |s: &str| crate::support::values::ByteSize::parse(s).and_then(|b| crate::config::ServeConfig::check_request_bytes(b.0)))]
        max_request_bytes: Option<usize>,
        /// Time a client has to send a request body, e.g. 30s (overrides [serve] body_timeout).
        #[arg(long, value_name = "DURATION", value_parser = |s: &str| crate::support::values::HumanDuration::parse(s))]
        body_timeout: Option<crate::support::values::HumanDuration>,
        /// A browser origin allowed to call the server, e.g. http://localhost:6274
        /// (repeatable; adds to [serve] allowed_origins).
        #[arg(long = "allowed-origin", value_name = "ORIGIN", value_parser = |s: &str| crate::config::ServeConfig::check_origin(s).map(|()| s.to_string()))]
        allowed_origins: Vec<String>,
        /// Append one JSON line per tool call to FILE: time, client session, tool, arguments,
        /// outcome, duration (an audit log; off by default).
        #[arg(long, value_name = "FILE")]
        call_log: Option<PathBuf>,
    },
}

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the tool ran and returned an error, or an instance failed to load.
pub const EXIT_TOOL: u8 = 1;
/// Exit status: bad usage or config.
pub const EXIT_USAGE: u8 = 2;

/// Text a component or a document chose, for stdout: escaped when stdout is a terminal (see
/// [`crate::support::text::for_terminal`]), as it is when piped.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if std::io::stdout().is_terminal() { crate::support::text::for_terminal(text).into() } else { text.into() }
}

/// An error for stderr, escaped when stderr is a terminal (it may hold a tool's words).
fn printable_error(text: &str) -> std::borrow::Cow<'_, str> {
    if std::io::stderr().is_terminal() { crate::support::text::for_terminal(text).into() } else { text.into() }
}

/// `quarry push FILE REF`.
async fn push(file: &std::path::Path, reference: &str, sign: Option<&std::path::Path>) -> ExitCode {
    #[cfg(feature = "oci")]
    {
        // The key is read before anything is pushed: a bad key publishes nothing.
        let key = match sign.map(quarry_oci::SigningKey::load).transpose() {
            Ok(k) => k,
            Err(e) => {
                eprintln!("error: --sign: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        };
        let pushed = async {
            let r = quarry_oci::OciRef::parse(reference)?;
            let digest = quarry_oci::push(file, &r).await?;
            let signed = match &key {
                Some(k) => Some((quarry_oci::sign(&r, &digest, k).await?, k.fingerprint())),
                None => None,
            };
            Ok::<_, quarry_oci::OciError>((r, digest, signed))
        };
        match pushed.await {
            Ok((r, digest, signed)) => {
                let pinned = format!("oci://{}@{digest}", r.repository());
                println!("pushed {} as {digest}", file.display());
                if let Some((tag, fingerprint)) = signed {
                    println!("signed it with the key {fingerprint}: {}:{tag}", r.repository());
                }
                println!("pin it: component = \"{pinned}\"");
                ExitCode::from(EXIT_OK)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_TOOL)
            }
        }
    }
    #[cfg(not(feature = "oci"))]
    {
        let _ = (file, reference, sign);
        eprintln!("error: this quarry was built without registry support (cargo feature `oci`)");
        ExitCode::from(EXIT_USAGE)
    }
}

/// `quarry init`: writes the config, then says what to run next.
fn run_init(args: init::InitArgs) -> ExitCode {
    match init::init(&args) {
        Ok(written) => {
            let config = args.output.display();
            println!("wrote {config}:");
            for (name, document, _) in &written {
                println!("  tool instance {name:?} over {}", document.display());
            }
            let (first, _, example) = &written[0];
            println!("next:");
            println!("  quarry --config {config} list");
            println!("  quarry --config {config} call {first}{example}   (the first call builds the index)");
            println!(
                "  quarry --config {config} serve --stdio   (what an MCP client such as CrewAI's MCPServerAdapter starts)"
            );
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Runs the CLI; returns the exit status. Errors are printed on one line to stderr.
pub async fn run(cli: Cli) -> ExitCode {
    let path = cli
        .config
        .or_else(|| std::env::var_os("QUARRY_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("quarry.toml"));
    if let Command::Init { manual, docx, output, force } = cli.command {
        return run_init(init::InitArgs { manuals: manual, docx, output: output.unwrap_or(path), force });
    }
    if let Command::Push { file, reference, sign } = &cli.command {
        return push(file, reference, sign.as_deref()).await;
    }
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Components from registries are in place before anything loads (or pulled again).
    #[cfg(feature = "oci")]
    match crate::oci::fetch(&config, matches!(cli.command, Command::Pull)).await {
        Ok(fetched) => {
            for f in &fetched {
                tracing::info!(target: "quarry::oci", instance = %f.instance, reference = %f.reference, digest = %f.digest, downloaded = f.downloaded, "component from its registry");
                if matches!(cli.command, Command::Pull) {
                    let what = if f.moved { "now" } else { "still" };
                    let signed = f.signed_by.as_ref().map(|k| format!(", signed by {k}")).unwrap_or_default();
                    println!("{}: {} is {what} {}{signed}", f.instance, f.reference, f.digest);
                }
            }
            if matches!(cli.command, Command::Pull) {
                if fetched.is_empty() {
                    println!("{} names no oci:// component: nothing to pull", path.display());
                }
                return ExitCode::from(EXIT_OK);
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_TOOL);
        }
    }
    if matches!(cli.command, Command::Pull) {
        eprintln!("error: this quarry was built without registry support (cargo feature `oci`)");
        return ExitCode::from(EXIT_USAGE);
    }
    // A bad question file is reported before the tools load (which may take minutes).
    let questions = match &cli.command {
        Command::Eval { questions, sections, .. } => {
            match crate::eval::load_questions(questions, sections.as_deref()) {
                Ok(q) => q,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            }
        }
        _ => Vec::new(),
    };
    let registry = match Registry::new(config) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Ingesting a large document (at load in fixed mode, or in a call) shows a progress bar.
    tokio::spawn(progress_bar::show_progress(registry.apps().progress.subscribe()));
    let failures = if matches!(cli.command, Command::Serve { .. }) {
        // Served at once: clients hear `initialize` while the instances open, and `tools/list`
        // as soon as they have; index builds go on in the background.
        let h = registry.clone();
        tokio::spawn(async move {
            for (name, e) in h.load_all().await {
                eprintln!("warning: tool instance {name:?} not loaded: {}", printable_error(&e.to_string()));
            }
        });
        Vec::new()
    } else {
        let failures = registry.load_all().await;
        for (name, e) in &failures {
            eprintln!("warning: tool instance {name:?} not loaded: {}", printable_error(&e.to_string()));
        }
        failures
    };
    match cli.command {
        Command::Serve {
            stdio,
            http,
            insecure_http,
            max_sessions,
            max_connections,
            max_queued_calls,
            max_request_bytes,
            body_timeout,
            allowed_origins,
            call_log,
        } => {
            let mut limits = registry.config().serve.clone();
            if let Some(n) = max_sessions {
                limits.max_sessions = n as usize;
            }
            if let Some(n) = max_connections {
                limits.max_connections = n as usize;
            }
            if let Some(n) = max_queued_calls {
                limits.max_queued_calls = n as usize;
            }
            if let Some(n) = max_request_bytes {
                limits.max_request_bytes = n;
            }
            if let Some(t) = body_timeout {
                limits.body_timeout = t.0;
            }
            limits.allowed_origins.extend(allowed_origins);
            let log = match call_log.as_deref().map(crate::mcp::call_log::CallLog::open).transpose() {
                Ok(log) => log.map(Arc::new),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            serve(registry, stdio, http, limits, insecure_http, log).await
        }
        Command::Check => {
            // Checked to the end: an index that cannot be built is a failure too.
            let unprepared = registry.prepared().await;
            for (name, why) in &unprepared {
                eprintln!("warning: tool instance {name:?} not prepared: {}", printable_error(why));
            }
            let tools = registry.tools();
            let loaded = registry.config().tools.len() - failures.len() - unprepared.len();
            println!(
                "{}: {loaded} of {} tool instances opened, {} tools",
                path.display(),
                registry.config().tools.len(),
                tools.len()
            );
            for t in tools.iter() {
                println!("  ok  {}", t.qualified);
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
            ExitCode::from(if failures.is_empty() && unprepared.is_empty() { EXIT_OK } else { EXIT_TOOL })
        }
        Command::List { json } => {
            let tools = registry.tools();
            if json {
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
            ExitCode::from(if failures.is_empty() { EXIT_OK } else { EXIT_TOOL })
        }
        Command::Eval { tool, compare, json, details, .. } => {
            // The CLI waits for the index builds to the end, with the progress bar; an MCP call
            // waits at most its deadline.
            registry.prepared().await;
            eval(&registry, &tool, &questions, compare, json, details).await
        }
        Command::Call { tool, args, json } => {
            registry.prepared().await;
            match registry.call(&tool, &args).await {
                Ok(out) => {
                    if json {
                        println!("{}", crate::output::output_json(&out));
                    } else {
                        println!("{}", printable(&out.text));
                    }
                    ExitCode::from(EXIT_OK)
                }
                Err(e) => {
                    eprintln!("error: {}", printable_error(&e.to_string()));
                    ExitCode::from(match e {
                        CallError::UnknownTool { .. } | CallError::BadArgs { .. } | CallError::ArgsTooLarge { .. } => {
                            EXIT_USAGE
                        }
                        _ => EXIT_TOOL,
                    })
                }
            }
        }
        // Answered before the registry is built.
        Command::Init { .. } | Command::Push { .. } | Command::Pull => ExitCode::from(EXIT_USAGE),
    }
}

/// `quarry eval`: the scores of `tool` on `questions`, as a table or JSON; with `details`,
/// per question too.
async fn eval(
    registry: &Registry,
    tool: &str,
    questions: &[crate::eval::questions::Question],
    compare: bool,
    json: bool,
    details: bool,
) -> ExitCode {
    let plan = match crate::eval::Plan::for_tool(registry, tool) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}", printable_error(&e.to_string()));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let modes: Vec<Option<&str>> =
        if compare { crate::eval::COMPARED.iter().map(|m| Some(*m)).collect() } else { vec![None] };
    let mut scored = Vec::new();
    for mode in modes {
        match crate::eval::run(registry, &plan, questions, mode).await {
            Ok(Some(s)) => scored.push(s),
            Ok(None) => {
                eprintln!("note: {} does not offer retrieval {:?}; skipped", plan.tool, mode.unwrap_or_default())
            }
            Err(e) => {
                eprintln!("error: {}", printable_error(&e.to_string()));
                return ExitCode::from(EXIT_TOOL);
            }
        }
    }
    if scored.is_empty() {
        eprintln!(
            "error: {} has no retrieval modes to compare (it refuses the argument `retrieval`); run without --compare",
            plan.tool
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let rows: Vec<crate::eval::score::Row> = scored.iter().map(|s| s.row.clone()).collect();
    let multi = questions.iter().filter(|q| q.multi).count();
    if json {
        let mut v = serde_json::json!({"tool": plan.tool, "questions": questions.len(), "rows": crate::eval::score::to_json(&rows)});
        if details {
            v["details"] = crate::eval::details_json(questions, &scored);
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("{}: {} questions ({multi} multi-section)\n", plan.tool, questions.len());
        print!("{}", crate::eval::score::table(&rows));
        if details {
            println!();
            print!("{}", printable(&crate::eval::details_text(questions, &scored)));
        }
    }
    ExitCode::from(EXIT_OK)
}

/// `quarry serve`: watch the components, then serve until the client leaves (stdio) or the
/// process is interrupted (HTTP).
async fn serve(
    registry: std::sync::Arc<Registry>,
    stdio: bool,
    http: Option<std::net::SocketAddr>,
    limits: crate::config::ServeConfig,
    insecure_http: bool,
    log: Option<Arc<crate::mcp::call_log::CallLog>>,
) -> ExitCode {
    let _watcher = match crate::watch::watch(registry.clone()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {}", crate::mcp::ServeError::Watch(e));
            return ExitCode::from(EXIT_TOOL);
        }
    };
    let result = match (stdio, http) {
        (true, _) => crate::mcp::stdio::serve_stdio(registry, limits.max_queued_calls, log).await,
        (false, Some(addr)) => {
            let token = std::env::var(crate::mcp::http::TOKEN_ENV).ok();
            let options = crate::mcp::http::HttpOptions { addr, token, limits, insecure_http, call_log: log };
            match crate::mcp::http::HttpServer::bind(registry, options).await {
                Err(e) => Err(e),
                Ok(server) => {
                    match server.addr() {
                        Ok(a) => eprintln!("quarry: serving MCP at http://{a}{}", crate::mcp::http::PATH),
                        Err(e) => eprintln!("quarry: serving MCP (address unknown: {e})"),
                    }
                    let stop = server.stopper();
                    tokio::spawn(async move {
                        let _ = tokio::signal::ctrl_c().await;
                        stop.cancel();
                    });
                    server.serve().await
                }
            }
        }
        (false, None) => {
            eprintln!("error: say how to serve: --stdio or --http ADDR");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match e {
                crate::mcp::ServeError::NoToken(_)
                | crate::mcp::ServeError::PlainHttp(_)
                | crate::mcp::ServeError::Bind { .. } => EXIT_USAGE,
                _ => EXIT_TOOL,
            })
        }
    }
}
