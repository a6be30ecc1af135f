//! The `quarry` binary as a user drives it.

use quarry_tests::{ECHO_V1, HOSTILE, TestEnv, run_quarry as run};

fn echo_env() -> TestEnv {
    let env = TestEnv::new();
    env.plugin(ECHO_V1, "echo");
    env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\nconfig = { greeting = \"hey\" }\n");
    env
}

#[test]
fn list_call_and_json() {
    let env = echo_env();
    let (code, out, err) = run(&env, &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("echo.echo") && out.contains("Echoes `text`") && out.contains("component: no version"),
        "{out}"
    );
    let (code, out, _) = run(&env, &["list", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], "echo.echo");
    assert_eq!(v[0]["args_schema"]["type"], "object");
    // echo is written without tool-guest and carries no version section.
    assert_eq!(v[0]["component"]["version"], serde_json::Value::Null);
    assert_eq!(v[0]["component"]["sha256"].as_str().map(str::len), Some(64));

    let (code, out, err) = run(&env, &["call", "echo", r#"{"text":"there"}"#]);
    assert_eq!((code, out.trim()), (0, "hey there [v1]"), "{err}");
    let (code, out, _) = run(&env, &["call", "echo.echo", r#"{"text":"there"}"#, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["text"], "hey there [v1]");
    assert_eq!(v["hits"][0]["source"], "echo-v1");
    assert_eq!(v["hits"][0]["metadata"]["version"], "v1");
}

#[test]
fn usage_errors_exit_2_with_a_hint() {
    let env = echo_env();
    let (code, _, err) = run(&env, &["call", "ecko", r#"{"text":"x"}"#]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean \"echo.echo\""), "{err}");
    let (code, _, err) = run(&env, &["call", "echo", "[1,2]"]);
    assert_eq!(code, 2);
    assert!(err.contains("must be a JSON object") && err.contains("an array"), "{err}");
    let (code, _, err) = run(&env, &["call", "echo", "{not json"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn tool_errors_exit_1() {
    let env = echo_env();
    let (code, _, err) = run(&env, &["call", "echo", r#"{"txt":"x"}"#]);
    assert_eq!(code, 1);
    assert!(err.contains("invalid-args") && err.contains("`text`"), "{err}");
}

#[test]
fn config_errors_exit_2_naming_file_and_key() {
    let env = echo_env();
    env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.echo.grants]\ndeadline = \"forever\"\n");
    let (code, _, err) = run(&env, &["check"]);
    assert_eq!(code, 2);
    assert!(err.contains("quarry.toml") && err.contains("deadline") && err.contains("\"10s\""), "{err}");
    let (code, _, err) = run(&env, &["--config", "nope.toml", "list"]);
    assert_eq!(code, 2);
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn check_opens_every_instance() {
    let env = echo_env();
    env.plugin(HOSTILE, "hostile");
    let (code, out, err) = run(&env, &["check"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 of 1 tool instances opened"), "{out}");
    env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\nconfig = { nope = 1 }\n");
    let (code, out, err) = run(&env, &["check"]);
    assert_eq!(code, 1);
    assert!(out.contains("1 of 2"), "{out}");
    assert!(err.contains("\"h\"") && err.contains("unknown config key `nope`"), "{err}");
}

/// An embedder that does not load fails `check` with its tools, counted as tool instances that
/// did not open (the embedder is none).
#[test]
fn check_counts_the_tools_of_an_embedder_that_did_not_load() {
    let env = echo_env();
    env.config(
        "[embedders.e]\ncomponent = \"plugins/echo.wasm\"\n\n[tools.echo]\ncomponent = \"plugins/echo.wasm\"\nembedder = \"e\"\n",
    );
    let (code, out, err) = run(&env, &["check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("0 of 1 tool instances opened, 0 tools"), "{out}{err}");
    assert!(err.contains("needs embedder \"e\", which did not load"), "{err}");
    assert!(err.contains("warning: embedder \"e\" not loaded: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `check` waits for every preparation, counts one that failed, and says what each pool may use.
#[test]
fn check_prepares_every_instance_and_sizes_the_pools() {
    let env = echo_env();
    env.plugin(HOSTILE, "hostile");
    env.config(
        "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\npool = 3\n[tools.echo.grants]\nmemory = \"64MiB\"\n\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\nconfig = { prepare_ms = 300, prepare_error = \"no index\" }\n",
    );
    let (code, out, err) = run(&env, &["check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("1 of 2 tool instances opened"), "{out}");
    assert!(err.contains("\"h\" not prepared") && err.contains("could not prepare: upstream: no index"), "{err}");
    assert!(out.contains("pool echo: 3 instances, memory at most 192 MiB (3 x grants.memory 64 MiB)"), "{out}");
    assert!(out.contains("pool h: 1 instance, memory at most 256 MiB"), "{out}");
}

/// `quarry init` for a model that is not installed: nothing written, not even the index folder
/// it would have granted, and the message says what to install.
#[test]
fn init_without_the_model_writes_nothing() {
    let env = TestEnv::new();
    std::fs::write(env.path("manual.md"), "# Install\n\nRun the installer.\n").unwrap();
    let (home, models) = (env.path("home"), env.path("no-models"));
    std::fs::create_dir_all(&models).unwrap();
    let out = std::process::Command::new(quarry_tests::quarry_bin())
        .current_dir(env.dir.path())
        .args(["init", "--manual", "manual.md"])
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME")
        .env("QUARRY_MODELS", &models)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("all-minilm-l6-v2") && err.contains("quarry-wasm-minilm"), "{err}");
    assert!(!env.path("quarry.toml").exists());
    assert!(!home.join(".cache").exists(), "left behind: {:?}", std::fs::read_dir(&home).map(|d| d.count()));
}
