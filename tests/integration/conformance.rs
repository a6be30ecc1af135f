//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, the version
//! `tests/mcp/conformance/package.json` pins, installed by `tests/mcp/conformance/install.sh`,
//! which `make test` runs) in server mode against `quarry serve --http`, for both requirement
//! sets the suite freezes: `2025-11-25` (the handshake era CrewAI speaks) and `2026-07-28`.
//!
//! The fixture component `tests/components/conformance` is the suite's reference server: every
//! tool, resource, template and prompt it calls, the 2026-07-28 diagnostic tools among them. One
//! instance serves it with `bare_names = true` (the suite calls tools and prompts by their own
//! names) and a grant to ask its client everything. In `--requirements` mode the suite fails
//! on any scored scenario that fails; no failure is expected.

use std::path::PathBuf;
use std::process::Command;

use quarry_tests::{CONFORMANCE, TestEnv, quarry_bin};

/// The fixture config: the reference server, listed by its own names.
const CONFIG: &str = r#"
[tools.conformance]
component = "plugins/conformance.wasm"
bare_names = true
# The suite reads its resources at `test://…`: the operator gives the instance that scheme.
resource_schemes = ["test"]
pool = 2
grants = { client = ["sampling", "elicitation", "roots"] }
"#;

fn suite() -> PathBuf {
    let index = quarry_tests::conformance_index();
    assert!(
        index.is_file(),
        "the MCP conformance suite is not installed at {}: run tests/mcp/conformance/install.sh (make test does)",
        index.display()
    );
    index
}

/// Runs the suite's requirement set `revision` against a fresh server; returns its report.
fn requirements(revision: &str) -> String {
    let index = suite();
    let env = TestEnv::new();
    env.plugin(CONFORMANCE, "conformance");
    let config = env.config(CONFIG);
    let served = quarry_tests::mcp_client::Served::start(&quarry_bin(), &config);
    let out = Command::new("node")
        .arg(&index)
        .args(["server", "--url", &served.url, "--requirements", revision])
        .current_dir(env.dir.path())
        .output()
        .expect("run node (the conformance suite needs Node 20 or later)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(out.status.success(), "requirements {revision}: the conformance suite failed (see its report above)");
    stdout
}

/// Whether the report's summary passed `scenario`.
fn passed(report: &str, scenario: &str) -> bool {
    report.lines().any(|l| l.starts_with(&format!("✓ {scenario}:")))
}

#[test]
fn the_2025_11_25_requirements_pass_in_full() {
    if quarry_tests::skip_unless(quarry_tests::Need::Conformance) {
        return;
    }
    let report = requirements("2025-11-25");
    // The suite ran what this fixture is for, and it passed: not nothing.
    for scenario in [
        "server-initialize",
        "tools-call-with-progress",
        "tools-call-sampling",
        "elicitation-sep1330-enums",
        "resources-templates-read",
        "prompts-get-embedded-resource",
        "completion-complete",
        "dns-rebinding-protection",
    ] {
        assert!(passed(&report, scenario), "scenario {scenario} did not pass:\n{report}");
    }
}

#[test]
fn the_2026_07_28_requirements_pass_in_full() {
    if quarry_tests::skip_unless(quarry_tests::Need::Conformance) {
        return;
    }
    let report = requirements("2026-07-28");
    for scenario in [
        "server-stateless",
        "caching",
        "sep-2164-resource-not-found",
        "input-required-result-multi-round",
        "input-required-result-tampered-state",
        "input-required-result-capability-check",
        "input-required-result-non-tool-request",
        "tools-call-mixed-content",
    ] {
        assert!(passed(&report, scenario), "scenario {scenario} did not pass:\n{report}");
    }
}
