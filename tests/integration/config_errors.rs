//! Each kind of config error gets a message naming the file, the key and the fix.

use quarry_tests::{ECHO_V1, TestEnv};

fn error_for(env: &TestEnv, body: &str) -> String {
    let path = env.config(body);
    let err = quarry::Config::load(&path).expect_err("config should be rejected").to_string();
    assert!(err.contains(&path.display().to_string()), "message does not name the file: {err}");
    err
}

fn echo_env() -> TestEnv {
    let env = TestEnv::new();
    env.plugin(ECHO_V1, "echo");
    std::fs::create_dir_all(env.path("data")).unwrap();
    env
}

#[test]
fn unknown_keys_are_named() {
    let env = echo_env();
    let e = error_for(&env, "[tool.echo]\ncomponent = \"plugins/echo.wasm\"\n");
    assert!(e.contains("unknown field `tool`"), "{e}");
    let e =
        error_for(&env, "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.echo.grants]\nmemroy = \"1GiB\"\n");
    assert!(e.contains("unknown field `memroy`") && e.contains("memory"), "{e}");
    let e = error_for(
        &env,
        "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\ngrants = { dirs = [{ host = \"data\", guest = \"/d\", mdoe = \"rw\" }] }\n",
    );
    assert!(e.contains("unknown field `mdoe`"), "{e}");
}

#[test]
fn bad_values_say_the_accepted_form() {
    let env = echo_env();
    let cases = [
        ("memory = \"64 parsecs\"", "\"64MiB\""),
        ("memory = \"8GiB\"", "tools.echo.grants.memory"),
        ("deadline = \"soon\"", "\"10s\""),
        ("deadline = 5", "invalid type"),
        ("max_output = -1", "negative"),
        ("http = [\"example.com\"]", "tools.echo.grants.http[0]"),
        ("http = [\"ftp://example.com\"]", "scheme"),
        ("http = [\"https://example.com/path\"]", "no path"),
        ("private_networks = [\"localhost\"]", "tools.echo.grants.private_networks[0]"),
        ("dirs = [{ host = \"data\", guest = \"/d\", mode = \"rwx\" }]", "unknown variant `rwx`"),
        ("dirs = [{ host = \"missing\", guest = \"/d\" }]", "tools.echo.grants.dirs[0].host"),
        ("dirs = [{ host = \"data\", guest = \"d\" }]", "must be absolute"),
        ("dirs = [{ host = \"data\", guest = \"/d\" }, { host = \"data\", guest = \"/d\" }]", "granted twice"),
        ("bedrock = { knowledge_bases = [] }", "tools.echo.grants.bedrock.knowledge_bases"),
        ("bedrock = { knowledge_bases = [\"KB-1\"] }", "is not a knowledge-base id"),
        ("bedrock = { knowledge_bases = [\"*\"], endpoint = \"localhost:9\" }", "is not an http(s) URL"),
        ("bedrock = { knowledge_bases = [\"*\"], max_attempts = 0 }", "between 1 and 10 attempts"),
        ("bedrock = { knowledge_bases = [\"*\"], timeout = \"11m\" }", "tools.echo.grants.bedrock.timeout"),
        (
            "bedrock = { knowledge_bases = [\"*\"], timeout = \"30s\" }",
            "does not fit in the call's grants.deadline of 10s",
        ),
        ("bedrock = { knowledge_bases = [\"*\"], secret = \"x\" }", "unknown field `secret`"),
    ];
    for (grant, expect) in cases {
        let e = error_for(
            &env,
            &format!("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.echo.grants]\n{grant}\n"),
        );
        assert!(e.contains(expect), "{grant}: {e}");
    }
}

#[test]
fn references_and_files_are_checked() {
    let env = echo_env();
    let e = error_for(&env, "[tools.echo]\ncomponent = \"plugins/nope.wasm\"\n");
    assert!(e.contains("tools.echo.component") && e.contains("does not exist"), "{e}");
    let e = error_for(&env, "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\nembedder = \"minilm\"\n");
    assert!(e.contains("tools.echo.embedder") && e.contains("no embedder named \"minilm\""), "{e}");
    let e = error_for(&env, "[tools.Echo]\ncomponent = \"plugins/echo.wasm\"\n");
    assert!(e.contains("tools.Echo") && e.contains("lowercase"), "{e}");
    let e = error_for(&env, "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\nconfig = 3\n");
    assert!(e.contains("invalid type"), "{e}");
    let e = error_for(&env, "[tools.echo\ncomponent = 1");
    assert!(e.contains("TOML parse error at line") && e.contains("unclosed table"), "{e}");
}

#[test]
fn couchbase_connections_and_grants_are_checked() {
    let env = echo_env();
    let conn = "[couchbase.local]\nconnection_string = \"couchbase://127.0.0.1\"\nusername = \"u\"\npassword = \"p\"\n";
    let tool = "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.echo.grants]\n";
    let cases = [
        (
            conn.replace("couchbase://", "http://"),
            "couchbase.local.connection_string",
            "is not a Couchbase connection string",
        ),
        (conn.replace("couchbase://127.0.0.1", "couchbase://"), "couchbase.local.connection_string", "names no host"),
        (
            conn.replace("password = \"p\"", "password_env = \"QUARRY_TEST_UNSET_CB_PASSWORD\""),
            "couchbase.local.password_env",
            "QUARRY_TEST_UNSET_CB_PASSWORD is not set",
        ),
        (conn.replace("password = \"p\"\n", ""), "couchbase.local.password", "give password or password_env"),
        (format!("{conn}password_env = \"X\"\n"), "couchbase.local.password", "not both"),
        (format!("{conn}ca_file = \"ca.pem\"\n"), "couchbase.local.ca_file", "couchbases://"),
        (
            conn.replace("couchbase://", "couchbases://") + "ca_file = \"missing.pem\"\n",
            "couchbase.local.ca_file",
            "cannot read",
        ),
        (
            format!("{conn}{tool}couchbase = {{ connection = \"other\", scopes = [\"b.s\"] }}\n"),
            "tools.echo.grants.couchbase.connection",
            "no connection named \"other\"; define [couchbase.other] or use one of: local",
        ),
        (
            format!("{conn}{tool}couchbase = {{ connection = \"local\", scopes = [] }}\n"),
            "tools.echo.grants.couchbase.scopes",
            "\"bucket.*\"",
        ),
        (
            format!("{conn}{tool}couchbase = {{ connection = \"local\", scopes = [\"travel\"] }}\n"),
            "tools.echo.grants.couchbase.scopes",
            "\"travel\" is not \"bucket.scope\"",
        ),
        (
            format!("{conn}{tool}couchbase = {{ connection = \"local\", scopes = [\"b.s\"], timeout = \"30s\" }}\n"),
            "tools.echo.grants.couchbase.timeout",
            "does not fit in the call's grants.deadline of 10s",
        ),
        (
            format!("{conn}{tool}couchbase = {{ connection = \"local\", scopes = [\"b.s\"], password = \"p\" }}\n"),
            "",
            "unknown field `password`",
        ),
    ];
    for (body, key, expect) in cases {
        let e = error_for(&env, &body);
        assert!(e.contains(key) && e.contains(expect), "{body}: {e}");
    }
}

#[test]
fn missing_file_is_a_read_error() {
    let err = quarry::Config::load(std::path::Path::new("/nonexistent/quarry.toml")).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/quarry.toml"), "{err}");
}

#[tokio::test]
async fn open_rejecting_its_config_is_reported_and_others_serve() {
    let env = echo_env();
    env.plugin(quarry_tests::HOSTILE, "hostile");
    let cfg = quarry::Config::load(&env.config(
        "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.bad]\ncomponent = \"plugins/hostile.wasm\"\nconfig = { colour = \"red\" }\n",
    ))
    .unwrap();
    let host = quarry::Registry::new(cfg).unwrap();
    let failures = host.load_all().await;
    assert_eq!(failures.len(), 1);
    let msg = failures[0].1.to_string();
    assert!(msg.contains("\"bad\"") && msg.contains("unknown config key `colour`"), "{msg}");
    assert_eq!(host.call("echo", r#"{"text":"x"}"#).await.unwrap().text, "hello x [v1]");
    let err = host.call("bad.echo", "{}").await.unwrap_err().to_string();
    assert!(err.contains("did not load") && err.contains("colour"), "{err}");
}

/// A read-write grant may not hold code, models or config the host trusts: the precompiled cache
/// (native code), a component's directory (hot swap would load what a guest wrote, with every
/// instance's grants), a model directory or the config file's directory.
#[test]
fn read_write_grants_over_code_the_host_runs_are_refused() {
    let env = echo_env();
    std::fs::create_dir_all(env.path("state/cache")).unwrap();
    let rw = |host: &str| {
        format!(
            "[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.echo.grants]\ndirs = [{{ host = \"{host}\", guest = \"/w\", mode = \"rw\" }}]\n"
        )
    };
    for (host, holds) in [(".", "the config file's directory"), ("plugins", "the directory of tools.echo.component")] {
        let e = error_for(&env, &rw(host));
        assert!(
            e.contains("tools.echo.grants.dirs[0].host")
                && e.contains(holds)
                && e.contains("make this grant read-only"),
            "{host}: {e}"
        );
        // Read-only, the same directory is fine.
        let ro = rw(host).replace(", mode = \"rw\"", "");
        quarry::Config::load(&env.config(&ro)).unwrap();
    }
    // The cache directory, or one above it.
    let path = env.path("quarry.toml");
    for host in ["state", "state/cache"] {
        std::fs::write(&path, format!("[host]\ncache_dir = \"state/cache\"\n\n{}", rw(host))).unwrap();
        let e = quarry::Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("the precompiled-component cache (host.cache_dir)"), "{host}: {e}");
    }
    // One inside the instances' own corpora, which the host writes (it may not exist yet).
    std::fs::create_dir_all(env.path("state/cache/instances/echo-x")).unwrap();
    std::fs::write(&path, format!("[host]\ncache_dir = \"state/cache\"\n\n{}", rw("state/cache/instances/echo-x")))
        .unwrap();
    let e = quarry::Config::load(&path).unwrap_err().to_string();
    assert!(e.contains("the instances' own corpora"), "{e}");
    // A grant beside them is fine.
    std::fs::write(&path, format!("[host]\ncache_dir = \"state/cache\"\n\n{}", rw("data"))).unwrap();
    quarry::Config::load(&path).unwrap();
    // A model directory (the host's native ONNX parser reads it), a directory above it, or one
    // inside it (its manifest names files there).
    std::fs::create_dir_all(env.path("models/m/sub")).unwrap();
    std::fs::write(env.path("models/m/model.onnx"), b"not read at load").unwrap();
    std::fs::write(env.path("models/m/quarry-model.json"), b"{}").unwrap();
    for host in ["models", "models/m", "models/m/sub"] {
        std::fs::write(&path, format!("[models.m]\ndir = \"models/m\"\n\n{}", rw(host))).unwrap();
        let e = quarry::Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("tools.echo.grants.dirs[0].host") && e.contains("the directory of models.m"), "{host}: {e}");
        let ro = rw(host).replace(", mode = \"rw\"", "");
        std::fs::write(&path, format!("[models.m]\ndir = \"models/m\"\n\n{ro}")).unwrap();
        quarry::Config::load(&path).unwrap();
    }
    std::fs::write(&path, format!("[models.m]\ndir = \"models/m\"\n\n{}", rw("data"))).unwrap();
    quarry::Config::load(&path).unwrap();
}

#[test]
fn quotas_and_serve_limits_are_checked() {
    let env = echo_env();
    let dir = |d: &str| format!("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n[tools.echo.grants]\ndirs = [{d}]\n");
    let cases = [
        (
            dir(r#"{ host = "data", guest = "/d", quota = { bytes = "1MiB" } }"#),
            "tools.echo.grants.dirs[0].quota",
            "only to a read-write grant",
        ),
        (
            dir(r#"{ host = "data", guest = "/d", mode = "rw", quota = { files = 0 } }"#),
            "tools.echo.grants.dirs[0].quota",
            "above zero",
        ),
        (dir(r#"{ host = "data", guest = "/d", mode = "rw", quota = { bytes = "lots" } }"#), "", "\"64MiB\""),
        (dir(r#"{ host = "data", guest = "/d", mode = "rw", quota = { inodes = 5 } }"#), "", "unknown field `inodes`"),
        ("[serve]\nmax_sessions = 0\n".to_string(), "serve.max_sessions", "between 1 and"),
        (
            "[serve]\nallowed_origins = [\"localhost:3000\"]\n".to_string(),
            "serve.allowed_origins[0]",
            "scheme://host[:port]",
        ),
        ("[serve]\nbody_timeout = \"forever\"\n".to_string(), "", "\"10s\""),
        ("[serve]\nmax_conns = 3\n".to_string(), "", "unknown field `max_conns`"),
    ];
    for (body, key, expect) in cases {
        let e = error_for(&env, &body);
        assert!(e.contains(key) && e.contains(expect), "{body}: {e}");
    }
    let ok = quarry::Config::load(&env.config(&format!(
        "[serve]\nmax_sessions = 3\nallowed_origins = [\"http://localhost:6274\"]\n\n{}",
        dir(r#"{ host = "data", guest = "/d", mode = "rw", quota = { bytes = "2MiB", files = 7 } }"#)
    )))
    .unwrap();
    assert_eq!(ok.serve.max_sessions, 3);
    assert_eq!(
        ok.tools["echo"].grants.files[0].quota,
        Some(quarry::capability::files::Quota { bytes: 2 << 20, files: 7 })
    );
}

#[test]
fn a_pool_has_1_to_64_instances() {
    let env = echo_env();
    for pool in [0, 65] {
        let e = error_for(&env, &format!("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\npool = {pool}\n"));
        assert!(e.contains("tools.echo.pool") && e.contains("between 1 and 64"), "{e}");
    }
    let path = env.config("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\n");
    assert_eq!(quarry::Config::load(&path).unwrap().tools["echo"].pool, 1, "a tool has one instance by default");
}

/// A corpus in Couchbase names its connection, bucket, scope and collection; a connection no
/// `[couchbase.NAME]` defines is named with the key at fault, and so is a key of the other
/// backend.
#[test]
fn a_couchbase_corpus_names_what_it_lacks() {
    let env = echo_env();
    let corpus = "[corpora.m]\nbackend = \"couchbase\"\nconnection = \"cluster\"\nbucket = \"b\"\nscope = \"s\"\ncollection = \"c\"\n";
    let e = error_for(&env, corpus);
    assert!(e.contains("corpora.m.connection") && e.contains("no [couchbase.cluster] section"), "{e}");
    let e = error_for(&env, "[corpora.m]\nbackend = \"couchbase\"\nconnection = \"cluster\"\n");
    assert!(e.contains("corpora.m.bucket") && e.contains("missing"), "{e}");
    let e = error_for(&env, "[corpora.m]\ndir = \"d\"\nlease_ttl = \"10s\"\n");
    assert!(e.contains("corpora.m.lease_ttl") && e.contains("backend = \"couchbase\" only"), "{e}");
    let ok = format!(
        "[couchbase.cluster]\nconnection_string = \"couchbase://127.0.0.1\"\nusername = \"u\"\npassword = \"p\"\n\n{corpus}"
    );
    quarry::Config::load(&env.config(&ok)).expect("a Couchbase corpus with its connection");
}
