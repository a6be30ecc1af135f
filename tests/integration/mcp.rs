//! The MCP server (`quarry serve`) driven by real clients that nobody here wrote: the official
//! Python `mcp` SDK, 1.x (the handshake era CrewAI's adapter speaks) and 2.x (the stateless
//! 2026-07-28 revision), over stdio and streamable HTTP, plus CrewAI's own `MCPServerAdapter`.
//! The clients live in venvs made by `tests/mcp/venvs.sh` (`make test` runs it); the client
//! scripts, in `tests/mcp/`, assert; these tests set up the tools, run a script and check that
//! it passed.
//!
//! The config serves chapter RAG over a small manual and DOCX search (both on the toy
//! embedder), echo (swapped from v1 to v2 during the run), and the hostile component as `slow`,
//! whose `spin` runs into its 3 s deadline while other instances must keep answering.

use std::path::{Path, PathBuf};
use std::process::Command;

use quarry_tests::{
    CHAPTER_RAG, DOCX_SEARCH, ECHO_V1, ECHO_V2, HOSTILE, TOY_EMBEDDER, TestEnv, quarry_bin, shared_data, venv_python,
};

fn scripts() -> PathBuf {
    quarry_tests::crate_dir().join("mcp")
}

fn manual() -> String {
    let para = |topic: &str| format!("This paragraph explains {topic} for the reader in some detail. ").repeat(12);
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n## On Windows\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth\n\nUse --bwlimit with a timetable to limit the bandwidth of a transfer. {}\n",
        para("installation"),
        para("linux packages"),
        para("windows installers"),
        para("syncing folders"),
        para("bandwidth limits"),
    )
}

/// The tools of the MCP tests, and `quarry list --json` of them (what tools/list must say).
struct McpEnv {
    env: TestEnv,
    config: PathBuf,
    expected: PathBuf,
    echo: PathBuf,
}

/// The shared data's small DOCX with tables, as `docs/tables.docx`.
fn add_tables_docx(env: &TestEnv) {
    let docx = shared_data().join("docx/docling/tests/data/docx/sources/word_tables.docx");
    std::fs::copy(&docx, env.path("docs/tables.docx"))
        .unwrap_or_else(|e| panic!("{}: {e} (set QUARRY_SHARED_DATA)", docx.display()));
}

fn mcp_env() -> McpEnv {
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(CHAPTER_RAG, "chapters");
    env.plugin(DOCX_SEARCH, "docx");
    env.plugin(HOSTILE, "hostile");
    let echo = env.plugin(ECHO_V1, "echo");
    for d in ["docs", "index-manual", "index-docs"] {
        std::fs::create_dir_all(env.path(d)).unwrap();
    }
    std::fs::write(env.path("docs/MANUAL.md"), manual()).unwrap();
    add_tables_docx(&env);
    let config = env.config(
        r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = { dimension = 64, max_tokens = 256 }
pool = 1

[tools.manual]
component = "plugins/chapters.wasm"
embedder = "toy"
config = { manual = "/docs/MANUAL.md", index_dir = "/index", similarity_threshold = 0.0 }
[tools.manual.grants]
dirs = [{ host = "docs", guest = "/docs" }, { host = "index-manual", guest = "/index", mode = "rw" }]
memory = "1GiB"
deadline = "120s"

[tools.docs]
component = "plugins/docx.wasm"
embedder = "toy"
config = { index_dir = "/index" }
[tools.docs.grants]
dirs = [{ host = "docs", guest = "/docs" }, { host = "index-docs", guest = "/index", mode = "rw" }]
memory = "1GiB"
deadline = "120s"

[tools.echo]
component = "plugins/echo.wasm"
config = { greeting = "hi" }

[tools.slow]
component = "plugins/hostile.wasm"
[tools.slow.grants]
deadline = "3s"
"#,
    );
    // `check` builds the indexes (`list` does not wait for them), so that the server and the
    // clients' `quarry call`s all reopen the same ones and report alike.
    let out = Command::new(quarry_bin()).arg("--config").arg(&config).arg("check").output().unwrap();
    assert!(out.status.success(), "quarry check failed: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(quarry_bin()).arg("--config").arg(&config).args(["list", "--json"]).output().unwrap();
    assert!(out.status.success(), "quarry list failed: {}", String::from_utf8_lossy(&out.stderr));
    let expected = env.path("expected-tools.json");
    std::fs::write(&expected, &out.stdout).unwrap();
    McpEnv { env, config, expected, echo }
}

/// Runs a client script with `python`; fails the test with its output unless it exits 0.
fn run_client(python: &Path, script: &str, args: &[&str]) {
    let mut cmd = Command::new(python);
    cmd.current_dir(scripts()).arg(scripts().join(script)).args(args).env("PYTHONUNBUFFERED", "1");
    let out = quarry_tests::run_with_timeout(cmd, std::time::Duration::from_secs(600));
    let text = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.success, "{script} {args:?} failed\n{text}");
    assert!(out.stdout.contains("] ok"), "{script} did not finish\n{text}");
    println!("{text}");
}

fn client(venv: &str, script: &str, transport: &str) {
    let m = mcp_env();
    let (quarry, config, expected) = (quarry_bin(), m.config.display().to_string(), m.expected.display().to_string());
    run_client(
        &venv_python(venv),
        script,
        &[
            "--quarry",
            &quarry.display().to_string(),
            "--config",
            &config,
            "--transport",
            transport,
            "--expected",
            &expected,
            "--swap-src",
            ECHO_V2,
            "--swap-dest",
            &m.echo.display().to_string(),
        ],
    );
    drop(m.env);
}

#[test]
fn handshake_era_over_stdio() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    client("mcp1", "handshake_client.py", "stdio");
}

#[test]
fn handshake_era_over_http() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    client("mcp1", "handshake_client.py", "http");
}

#[test]
fn stateless_revision_over_stdio() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    client("mcp2", "modern_client.py", "stdio");
}

#[test]
fn stateless_revision_over_http() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    client("mcp2", "modern_client.py", "http");
}

/// The README's CrewAI example (tests/mcp/crewai_example.py): `MCPServerAdapter` over `url`, or
/// over stdio when `None`; the agent's tools are quarry's, and the one it runs answers.
fn crewai_example(url: Option<&str>, m: &McpEnv) {
    let mut cmd = Command::new(venv_python("crewai"));
    cmd.current_dir(scripts())
        .arg(scripts().join("crewai_example.py"))
        .arg(quarry_bin())
        .arg(&m.config)
        .args(url)
        // CrewAI's telemetry would try the network.
        .envs([("CREWAI_DISABLE_TELEMETRY", "true"), ("OTEL_SDK_DISABLED", "true"), ("ANONYMIZED_TELEMETRY", "False")]);
    let out = quarry_tests::run_with_timeout(cmd, std::time::Duration::from_secs(600));
    let text = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.success, "the CrewAI example failed\n{text}");
    assert!(out.stdout.contains("'manual_search'") && out.stdout.contains("'docs_search_docx'"), "{text}");
    assert!(out.stdout.contains("Routed to: "), "the search did not answer\n{text}");
}

#[test]
fn crewai_adapter_over_stdio() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let m = mcp_env();
    crewai_example(None, &m);
}

#[test]
fn crewai_adapter_over_http() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let m = mcp_env();
    let served = quarry_tests::mcp_client::Served::start(&quarry_bin(), &m.config);
    crewai_example(Some(&served.url), &m);
}

/// The guide's promise for a first start (docs/src/mcp.md): CrewAI's `MCPServerAdapter`, with its default 30 s
/// connect timeout, starts `quarry serve --stdio` on a manual whose index takes longer than that
/// to build (the toy embedder waits 8 s per batch of 32 chunks, and the manual, cut in small
/// chunks, makes more than four), lists the tools at once, and gets the answer once the index is
/// built.
#[test]
fn crewai_adapter_connects_to_a_first_start_with_its_default_timeout() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(CHAPTER_RAG, "chapters");
    for d in ["docs", "index"] {
        std::fs::create_dir_all(env.path(d)).unwrap();
    }
    // Small chunks (40 characters), so that the manual makes more than four batches of 32.
    std::fs::write(env.path("docs/MANUAL.md"), manual()).unwrap();
    let config = env.config(
        r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = { dimension = 64, max_tokens = 256, delay_ms = 8000 }
pool = 1
[embedders.toy.grants]
deadline = "60s"

[tools.manual]
component = "plugins/chapters.wasm"
embedder = "toy"
config = { manual = "/docs/MANUAL.md", index_dir = "/index", similarity_threshold = 0.0, chunk_size = 40, chunk_overlap = 0 }
[tools.manual.grants]
dirs = [{ host = "docs", guest = "/docs" }, { host = "index", guest = "/index", mode = "rw" }]
memory = "1GiB"
deadline = "300s"
"#,
    );
    let mut cmd = Command::new(venv_python("crewai"));
    cmd.current_dir(scripts()).arg(scripts().join("crewai_first_start.py")).arg(quarry_bin()).arg(&config).envs([
        ("CREWAI_DISABLE_TELEMETRY", "true"),
        ("OTEL_SDK_DISABLED", "true"),
        ("ANONYMIZED_TELEMETRY", "False"),
    ]);
    let out = quarry_tests::run_with_timeout(cmd, std::time::Duration::from_secs(600));
    let text = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(out.success && out.stdout.contains("[first start] ok"), "the first start failed\n{text}");
    let secs = |label: &str| -> f64 {
        let line = out.stdout.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label:?}\n{text}"));
        line[label.len()..].trim().trim_end_matches(" s").parse().unwrap()
    };
    // The adapter gave up after 30 s before; the answer itself needed the whole index.
    assert!(secs("connected in") < 30.0, "{text}");
    assert!(secs("answered after") > 30.0, "the preparation was not longer than the adapter's timeout\n{text}");
    println!("{text}");
}

/// The config of the progress and logging tests: `slow` prepares for 3 s in reported steps;
/// `docs` ingests DOCX files on the toy embedder.
fn progress_env() -> (TestEnv, PathBuf) {
    let env = TestEnv::new();
    env.plugin(TOY_EMBEDDER, "toy");
    env.plugin(DOCX_SEARCH, "docx");
    env.plugin(HOSTILE, "hostile");
    for d in ["docs", "index"] {
        std::fs::create_dir_all(env.path(d)).unwrap();
    }
    add_tables_docx(&env);
    let config = env.config(
        r#"
[embedders.toy]
component = "plugins/toy.wasm"
config = { dimension = 64, max_tokens = 256 }
pool = 1

[tools.docs]
component = "plugins/docx.wasm"
embedder = "toy"
config = { index_dir = "/index", similarity_threshold = 0.0 }
[tools.docs.grants]
dirs = [{ host = "docs", guest = "/docs" }, { host = "index", guest = "/index", mode = "rw" }]
memory = "1GiB"
deadline = "120s"

[tools.slow]
component = "plugins/hostile.wasm"
config = { prepare_ms = 3000 }
[tools.slow.grants]
deadline = "30s"
"#,
    );
    (env, config)
}

fn progress_and_logging(transport: &str) {
    let (env, config) = progress_env();
    let args = ["--quarry", &quarry_bin().display().to_string(), "--config", &config.display().to_string()]
        .map(str::to_string);
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(["--transport", transport]);
    run_client(&venv_python("mcp1"), "progress_logging.py", &all);
    drop(env);
}

/// The Python SDK's progress callback hears a call wait for a preparation and an ingest; its
/// logging callback hears the host's lines about the session's calls, at the level it set.
#[test]
fn progress_and_logging_over_stdio() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    progress_and_logging("stdio");
}

#[test]
fn progress_and_logging_over_http() {
    if quarry_tests::skip_unless(quarry_tests::Need::Venvs) {
        return;
    }
    progress_and_logging("http");
}

/// A launcher nobody here wrote: the MCP Inspector's CLI starts quarry over stdio. It takes
/// `--config` as a flag of its own (and refuses it without `--server`), so the README, the guide and
/// `quarry init` give `-c`; `QUARRY_CONFIG` works as well.
#[test]
fn the_mcp_inspector_launches_quarry_with_dash_c_or_quarry_config() {
    if quarry_tests::skip_unless(quarry_tests::Need::Conformance) {
        return;
    }
    let env = TestEnv::new();
    env.plugin(quarry_tests::ECHO_V1, "echo");
    let config = env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n");
    let inspect = |args: &[&str], var: Option<&Path>| {
        let mut cmd = Command::new(quarry_tests::inspector_bin());
        cmd.arg("--cli").arg(quarry_bin()).args(args).args(["serve", "--stdio", "--method", "tools/list"]);
        cmd.current_dir(env.dir.path()).env_remove("QUARRY_CONFIG");
        if let Some(v) = var {
            cmd.env("QUARRY_CONFIG", v);
        }
        quarry_tests::run_with_timeout(cmd, std::time::Duration::from_secs(120))
    };
    let c = config.display().to_string();
    let short = inspect(&["-c", &c], None);
    assert!(short.success && short.stdout.contains("\"echo.echo\""), "{}\n{}", short.stdout, short.stderr);
    let var = inspect(&[], Some(&config));
    assert!(var.success && var.stdout.contains("\"echo.echo\""), "{}\n{}", var.stdout, var.stderr);
    // Why not `--config`: the launcher keeps it.
    let long = inspect(&["--config", &c], None);
    let said = format!("{}{}", long.stdout, long.stderr);
    assert!(!long.success && said.contains("--config"), "{said}");
}
