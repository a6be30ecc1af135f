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
    // The example is the tool's own (echo's one argument is `text`).
    assert!(err.contains(r#"like '{"text":"..."}'"#), "{err}");
}

#[test]
fn tool_errors_exit_1() {
    let env = echo_env();
    let (code, _, err) = run(&env, &["call", "echo", r#"{"txt":"x"}"#]);
    assert_eq!(code, 1);
    assert!(err.contains("invalid-args") && err.contains("`text`"), "{err}");
}

/// A call or an eval of a tool whose instance did not load exits 1 as a tool error does (the
/// name was right), saying why once.
#[test]
fn a_tool_whose_instance_did_not_load_exits_1_saying_why_once() {
    let env = echo_env();
    env.plugin(HOSTILE, "hostile");
    env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.h]\ncomponent = \"plugins/hostile.wasm\"\nconfig = { nope = 1 }\n");
    std::fs::write(env.path("q.jsonl"), "{\"question\": \"x\", \"answer_sections\": [\"A\"]}\n").unwrap();
    for args in [&["call", "h.search", "{}"][..], &["call", "h", "{}"], &["eval", "h.search", "q.jsonl"]] {
        let (code, _, err) = run(&env, args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("error: tool instance \"h\" not loaded: rejected its config: ") && err.contains("`nope`"),
            "{err}"
        );
        assert_eq!(err.matches("unknown config key").count(), 1, "said once: {err}");
    }
    // Another instance's failure is a warning beside a call that works.
    let (code, out, err) = run(&env, &["call", "echo", r#"{"text":"there"}"#]);
    assert_eq!((code, out.trim()), (0, "hello there [v1]"), "{err}");
    assert!(err.contains("warning: tool instance \"h\" not loaded"), "{err}");
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
    assert!(err.contains("nope.toml") && err.contains("quarry init --manual") && err.contains("-c FILE"), "{err}");
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
    assert!(err.contains("warning: tool instance \"h\" not prepared: upstream: no index\n"), "{err}");
    // Its tools are listed, not as ok, and not counted: their calls fail.
    assert!(out.contains("1 of 2 tool instances opened, 1 tools\n") && out.contains("  ok  echo.echo\n"), "{out}");
    assert!(out.contains("  not prepared  h.echo\n") && !out.contains("  ok  h."), "{out}");
    assert_eq!(err.matches("no index").count(), 1, "said once: {err}");
    assert!(out.contains("pool echo: 3 instances, memory at most 192 MiB (3 x grants.memory 64 MiB)"), "{out}");
    assert!(out.contains("pool h: 1 instance, memory at most 256 MiB"), "{out}");
}

/// `quarry init` writes the model the guide recommends (q8 on onnxruntime) where both are
/// installed, else fp32 on tract, saying which and why.
#[test]
fn init_writes_the_recommended_model_where_it_is_installed() {
    if quarry_tests::skip_unless(quarry_tests::Need::Models)
        || quarry_tests::skip_unless(quarry_tests::Need::Onnxruntime)
    {
        return;
    }
    let env = TestEnv::new();
    std::fs::write(env.path("manual.md"), "# Install\n\nRun the installer.\n").unwrap();
    let only_fp32 = env.path("fp32-only");
    std::fs::create_dir_all(&only_fp32).unwrap();
    std::os::unix::fs::symlink(quarry_tests::models_dir().join("all-minilm-l6-v2"), only_fp32.join("all-minilm-l6-v2"))
        .unwrap();
    for (models, want, said) in [
        (
            quarry_tests::models_dir(),
            "dir = \"builtin:all-minilm-l6-v2-q8\"\nbackend = \"onnxruntime\"",
            "q8 on onnxruntime",
        ),
        (
            only_fp32,
            "dir = \"builtin:all-minilm-l6-v2\"\n",
            "fp32 on tract (no all-minilm-l6-v2-q8 model and no onnxruntime library here",
        ),
    ] {
        let out = std::process::Command::new(quarry_tests::quarry_bin())
            .current_dir(env.dir.path())
            .args(["init", "--manual", "manual.md", "--force"])
            .env("QUARRY_MODELS", &models)
            // Nothing else to find it in: no ~/.cache/quarry/models.
            .env("HOME", env.path("home"))
            .env_remove("XDG_CACHE_HOME")
            .env_remove("QUARRY_ONNXRUNTIME")
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        assert!(stdout.contains(said), "{stdout}");
        let written = std::fs::read_to_string(env.path("quarry.toml")).unwrap();
        assert!(written.contains(want), "{written}");
    }
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

/// A component of `mib` MiB whose code costs the compiler time in proportion: 64 functions,
/// each a long run of `local.get 0; i32.const 1; i32.add; local.set 0`, in a component that
/// only holds the module (enough for wasmtime to compile it).
fn costly_component(mib: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn section(id: u8, data: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(data.len(), out);
        out.extend_from_slice(data);
    }
    let funcs = 64;
    let unit = [0x20, 0, 0x41, 1, 0x6a, 0x21, 0];
    let mut body = vec![1, 1, 0x7f]; // one group of locals: one i32
    for _ in 0..(mib << 20) / funcs / unit.len() {
        body.extend_from_slice(&unit);
    }
    body.push(0x0b);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut module); // one type: () -> ()
    let mut fns = Vec::new();
    leb(funcs, &mut fns);
    fns.extend(std::iter::repeat_n(0, funcs));
    section(3, &fns, &mut module);
    let mut code = Vec::new();
    leb(funcs, &mut code);
    for _ in 0..funcs {
        leb(body.len(), &mut code);
        code.extend_from_slice(&body);
    }
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component); // a core module section
    component
}

/// Compiling is bounded in memory and time (`[host] compile_memory`, `compile_timeout`): a
/// compilation over either is stopped, the instance does not load and says which limit to
/// raise, nothing is cached, and the other instances serve. (c8d5fbc compiled in process,
/// without bounds: a 20 MiB component took 17.5 s and 1.7 GB on 2 cores.)
#[test]
fn compiling_is_bounded_in_memory_and_time() {
    let env = TestEnv::new();
    env.plugin(ECHO_V1, "echo");
    env.plugin(quarry_tests::CHAPTER_RAG, "chapters");
    std::fs::write(env.path("plugins/costly.wasm"), costly_component(48)).unwrap();
    let write = |host: &str, tool: &str| {
        std::fs::write(
            env.path("quarry.toml"),
            format!(
                "[host]\ncache_dir = \"cache\"\n{host}\n[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n\
                 [tools.x]\ncomponent = \"plugins/{tool}.wasm\"\n"
            ),
        )
        .unwrap();
    };
    let cached = || {
        std::fs::read_dir(env.path("cache")).map_or(0, |d| {
            d.filter_map(Result::ok).filter(|e| e.path().extension().is_some_and(|x| x == "cwasm")).count()
        })
    };

    // chapter-rag (5.7 MiB) takes over 100 MB to compile.
    write("compile_memory = \"64MiB\"", "chapters");
    let (code, _, err) = run(&env, &["check"]);
    assert_ne!(code, 0);
    assert!(err.contains("compiling it needs more than [host] compile_memory (64 MiB); raise that"), "{err}");
    assert_eq!(cached(), 1, "only echo is cached");

    let start = std::time::Instant::now();
    write("compile_timeout = \"1s\"", "costly");
    let (code, _, err) = run(&env, &["check"]);
    assert_ne!(code, 0);
    assert!(err.contains("compiling it took longer than [host] compile_timeout (1s); raise that"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", start.elapsed());
    assert_eq!(cached(), 1);
    let (code, out, err) = run(&env, &["call", "echo", r#"{"text":"still"}"#]);
    assert_eq!((code, out.trim()), (0, "hello still [v1]"), "{err}");

    // Out of range is a config error naming the key.
    write("compile_memory = \"1MiB\"", "chapters");
    let (code, _, err) = run(&env, &["check"]);
    assert_ne!(code, 0);
    assert!(err.contains("host.compile_memory") && err.contains("between 64MiB and 64GiB"), "{err}");

    // Within its limits, the same component compiles and is cached.
    write("", "chapters");
    let (_, _, err) = run(&env, &["check"]);
    assert!(!err.contains("compile"), "{err}");
    assert_eq!(cached(), 2);
}

/// The compile worker, started as a compilation starts it, holds and reaches nothing: none of
/// the host's environment, no file the host can read, nothing written, no TCP or UDP to this
/// machine, no program run.
#[test]
fn the_compile_worker_holds_and_reaches_nothing() {
    let env = TestEnv::new();
    let secret = env.path("secret.txt");
    std::fs::write(&secret, "the host reads this").unwrap();
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the host reads this");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let got = quarry::runtime::compile::probe(&quarry_tests::quarry_bin(), secret.to_str().unwrap(), &addr).unwrap();
    assert_eq!(got["env"], serde_json::json!([]), "{got}");
    for attempt in ["read", "write", "connect", "udp", "exec"] {
        assert!(got[attempt].as_str().unwrap().starts_with("refused"), "{attempt}: {got}");
    }
    assert_eq!(got["missing"], serde_json::json!([]), "every layer applies on this machine: {got}");
}
