//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, the version
//! `tests/mcp/conformance/package.json` pins, installed by `tests/mcp/conformance/install.sh`,
//! which `make test` runs) in server mode against `quarry serve --http`.
//!
//! The fixture component `tests/components/conformance` implements the suite's reference tools,
//! one instance per tool named after it (the suite calls them by bare name, which Quarry resolves
//! for an instance that offers one tool). The scenarios for what Quarry does not offer are in
//! `tests/mcp/conformance/expected-failures.yml`, each with its reason; the suite fails on any
//! other failure and on an entry that has started to pass.

use std::path::PathBuf;
use std::process::Command;

use quarry_tests::{CONFORMANCE, TestEnv, quarry_bin};

/// The reference tools the fixture implements, one instance each.
const TOOLS: [&str; 5] = [
    "test_simple_text",
    "test_error_handling",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "json_schema_2020_12_tool",
];

fn suite() -> PathBuf {
    let index = quarry_tests::conformance_index();
    assert!(
        index.is_file(),
        "the MCP conformance suite is not installed at {}: run tests/mcp/conformance/install.sh (make test does)",
        index.display()
    );
    index
}

#[test]
fn the_official_conformance_suite_passes_in_server_mode() {
    if quarry_tests::skip_unless(quarry_tests::Need::Conformance) {
        return;
    }
    let index = suite();
    let env = TestEnv::new();
    env.plugin(CONFORMANCE, "conformance");
    let mut body = String::new();
    for tool in TOOLS {
        body +=
            &format!("[tools.{tool}]\ncomponent = \"plugins/conformance.wasm\"\nconfig = {{ tool = \"{tool}\" }}\n\n");
    }
    let config = env.config(&body);
    let served = quarry_tests::mcp_client::Served::start(&quarry_bin(), &config);
    let here = quarry_tests::crate_dir().join("mcp/conformance");
    let out = Command::new("node")
        .arg(&index)
        .args(["server", "--url", &served.url, "--expected-failures"])
        .arg(here.join("expected-failures.yml"))
        .current_dir(env.dir.path())
        .output()
        .expect("run node (the conformance suite needs Node 20 or later)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(out.status.success(), "the conformance suite failed (see its report above)");
    // The suite ran the scenarios this fixture is for, not nothing.
    for scenario in
        ["server-initialize", "tools-call-with-progress", "tools-call-with-logging", "dns-rebinding-protection"]
    {
        assert!(stdout.contains(scenario), "scenario {scenario} did not run:\n{stdout}");
    }
}
