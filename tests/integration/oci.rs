//! Components from a real OCI registry on loopback (Debian's docker-registry, started by
//! tests/oci/registry.sh): pushed with `quarry push`, pulled by digest, tags pinned in
//! quarry.lock and moved by a pull (which a running host swaps in), refused when the registry
//! serves other bytes, an oversized or foreign layer, and served from the cache when the
//! registry is down.

use std::path::PathBuf;

use quarry_tests::oci_registry::LocalRegistry;
use quarry_tests::{CHAPTER_RAG, ECHO_V1, ECHO_V2, Need, TestEnv, run_quarry, skip_unless, within};

/// `quarry push FILE REF`: the digest it printed.
fn push(env: &TestEnv, file: &str, reference: &str) -> String {
    let (code, out, err) = run_quarry(env, &["push", file, reference]);
    assert_eq!(code, 0, "quarry push: {out}{err}");
    let digest = out.split_whitespace().find(|w| w.starts_with("sha256:")).expect("a digest").to_string();
    assert!(out.contains(&format!("@{digest}")), "push says how to pin it: {out}");
    digest
}

/// A config with echo from `component`, in a cache of the test's own (what is cached is part
/// of what is tested), and `host` lines added to `[host]`.
fn config(env: &TestEnv, component: &str, host: &str) -> PathBuf {
    let cache = env.path("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let path = env.path("quarry.toml");
    std::fs::write(
        &path,
        format!(
            "[host]\ncache_dir = {:?}\n{host}\n[tools.echo]\ncomponent = {component:?}\nconfig = {{ greeting = \"hi\" }}\n",
            cache.display()
        ),
    )
    .unwrap();
    path
}

fn call(env: &TestEnv) -> (i32, String, String) {
    run_quarry(env, &["call", "echo", r#"{"text": "x"}"#])
}

fn cached(env: &TestEnv) -> Vec<String> {
    std::fs::read_dir(env.path("cache/oci/sha256"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn a_component_pinned_by_digest_is_pulled_checked_and_served_from_the_cache_when_the_registry_is_down() {
    if skip_unless(Need::Registry) {
        return;
    }
    let mut registry = LocalRegistry::start();
    let env = TestEnv::new();
    let digest = push(&env, ECHO_V1, &format!("oci://{}/tools/echo:v1", registry.addr));
    let pinned = format!("oci://{}/tools/echo@{digest}", registry.addr);
    config(&env, &pinned, "");
    let (code, out, err) = call(&env);
    assert_eq!((code, out.trim()), (0, "hi x [v1]"), "{err}");
    assert_eq!(cached(&env), vec![format!("{}.wasm", &digest[7..])]);
    assert!(!env.path("quarry.lock").exists(), "a digest needs no lock");

    // Down: what is pinned and cached still serves; what is not says which registry failed.
    registry.stop();
    let (code, out, err) = call(&env);
    assert_eq!((code, out.trim()), (0, "hi x [v1]"), "{err}");
    std::fs::remove_dir_all(env.path("cache")).unwrap();
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("tools.echo.component") && err.contains(&format!("registry {}", registry.addr)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_is_pinned_in_the_lock_and_a_pull_moves_it_and_swaps_the_running_instance() {
    if skip_unless(Need::Registry) {
        return;
    }
    let registry = LocalRegistry::start();
    let env = TestEnv::new();
    let tag = format!("oci://{}/tools/echo:stable", registry.addr);
    let v1 = push(&env, ECHO_V1, &tag);
    let path = config(&env, &tag, "");
    let (code, out, err) = call(&env);
    assert_eq!((code, out.trim()), (0, "hi x [v1]"), "{err}");
    let lock = std::fs::read_to_string(env.path("quarry.lock")).expect("the tag is locked");
    assert!(lock.contains(&format!("{tag:?} = {v1:?}")), "{lock}");

    // The tag moves; a restart keeps the locked digest.
    let v2 = push(&env, ECHO_V2, &tag);
    assert_ne!(v1, v2);
    let (code, out, err) = call(&env);
    assert_eq!((code, out.trim()), (0, "hi x [v1]"), "a restart followed the moved tag: {err}");

    // A running host swaps to the new digest when a pull moves the lock.
    let cfg = quarry::Config::load(&path).unwrap();
    let fetched = quarry::oci::fetch(&cfg, false).await.unwrap();
    assert_eq!(fetched[0].digest, v1);
    let host = quarry::Registry::new(cfg).unwrap();
    assert!(host.load_all().await.is_empty());
    let _watcher = quarry::watch::watch(host.clone()).unwrap();
    let mut swaps = host.subscribe();
    let (code, out, err) = run_quarry(&env, &["pull"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("echo: {tag} is now {v2}")), "{out}");
    within(60, swaps.recv()).await.expect("the instance swapped");
    assert_eq!(host.call("echo", r#"{"text": "x"}"#).await.unwrap().text, "hi x [v2]");
    let lock = std::fs::read_to_string(env.path("quarry.lock")).unwrap();
    assert!(lock.contains(&format!("{tag:?} = {v2:?}")), "{lock}");
    let (_, out, _) = run_quarry(&env, &["pull"]);
    assert!(out.contains(&format!("echo: {tag} is still {v2}")), "{out}");
}

#[test]
fn a_registry_that_serves_other_bytes_for_a_digest_is_refused_and_nothing_is_kept() {
    if skip_unless(Need::Registry) {
        return;
    }
    let registry = LocalRegistry::start();
    let env = TestEnv::new();
    let digest = push(&env, ECHO_V1, &format!("oci://{}/tools/echo:v1", registry.addr));
    // The component's layer, changed on the registry's disk: as many bytes (so that the size
    // check passes whatever the two components' sizes), one of them other.
    let mut bytes = std::fs::read(ECHO_V1).unwrap();
    let layer = format!("sha256:{}", quarry_tests::sha256_hex(&bytes));
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(registry.blob_file(&layer), bytes).unwrap();
    config(&env, &format!("oci://{}/tools/echo@{digest}", registry.addr), "");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("did not arrive as its digest says") && err.contains("nothing was kept"), "{err}");
    assert!(cached(&env).iter().all(|f| !f.ends_with(".wasm")), "{:?}", cached(&env));

    // A digest the registry does not hold at all.
    let other = format!("oci://{}/tools/echo@sha256:{}", registry.addr, "0".repeat(64));
    config(&env, &other, "");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("registry {}", registry.addr)), "{err}");
}

#[test]
fn an_oversized_or_foreign_layer_is_refused_before_it_is_downloaded() {
    if skip_unless(Need::Registry) {
        return;
    }
    let registry = LocalRegistry::start();
    let env = TestEnv::new();
    // chapter-rag is 5 MB; this host takes components of at most 1 MiB.
    let digest = push(&env, CHAPTER_RAG, &format!("oci://{}/tools/chapters:v1", registry.addr));
    // Its version section became the manifest's standard annotation.
    let manifest = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use quarry_oci::oci_client::client::{ClientConfig, ClientProtocol};
        use quarry_oci::oci_client::{Client, Reference, secrets::RegistryAuth};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() });
        let r: Reference = format!("{}/tools/chapters@{digest}", registry.addr).parse().unwrap();
        client.pull_image_manifest(&r, &RegistryAuth::Anonymous).await.unwrap().0
    });
    let annotations = manifest.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(quarry_oci::VERSION_ANNOTATION).map(String::as_str),
        Some(env!("CARGO_PKG_VERSION")),
        "{annotations:?}"
    );
    config(&env, &format!("oci://{}/tools/chapters@{digest}", registry.addr), "max_component_size = \"1MiB\"");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("over the host's max_component_size") && err.contains("nothing was downloaded"), "{err}");
    assert!(cached(&env).is_empty(), "{:?}", cached(&env));

    // A manifest in the Wasm format whose layer is a tarball.
    let foreign = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use quarry_oci::oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
        use quarry_oci::oci_client::{Client, Reference, secrets::RegistryAuth};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() });
        let r: Reference = format!("{}/tools/tar:v1", registry.addr).parse().unwrap();
        let layer =
            ImageLayer::new(std::fs::read(ECHO_V1).unwrap(), "application/vnd.oci.image.layer.v1.tar".into(), None);
        let config = Config::new(b"{}".to_vec(), quarry_oci::oci_wasm::WASM_MANIFEST_CONFIG_MEDIA_TYPE.into(), None);
        client.push(&r, &[layer], config, &RegistryAuth::Anonymous, None).await.unwrap();
        client.fetch_manifest_digest(&r, &RegistryAuth::Anonymous).await.unwrap()
    });
    config(&env, &format!("oci://{}/tools/tar@{foreign}", registry.addr), "");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("application/vnd.oci.image.layer.v1.tar") && err.contains("not application/wasm"), "{err}");
}

#[test]
fn bad_references_are_refused_at_load_naming_the_key() {
    let env = TestEnv::new();
    config(&env, "oci://echo:v1", "");
    let (code, _, err) = call(&env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tools.echo.component") && err.contains("oci://REGISTRY/REPOSITORY@sha256:DIGEST"), "{err}");
    // Pushing something that is not a component.
    std::fs::write(env.path("x.wasm"), b"not wasm").unwrap();
    let (code, _, err) = run_quarry(&env, &["push", "x.wasm", "oci://127.0.0.1:1/tools/x:v1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is not a WebAssembly component"), "{err}");
}

/// An ECDSA P-256 key pair made by openssl, not by quarry: `NAME.key` (PKCS#8 PEM) and
/// `NAME.pub` (as cosign's `cosign.pub`).
fn keypair(env: &TestEnv, name: &str) {
    let key = env.path(&format!("{name}.key"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let key_s = key.display().to_string();
    run(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &key_s]);
    run(&["pkey", "-in", &key_s, "-pubout", "-out", &env.path(&format!("{name}.pub")).display().to_string()]);
}

/// The manifest the registry holds at `repo:tag`, read from its storage.
fn stored_manifest(registry: &LocalRegistry, repo: &str, tag: &str) -> serde_json::Value {
    let link = registry
        .dir
        .path()
        .join(format!("storage/docker/registry/v2/repositories/{repo}/_manifests/tags/{tag}/current/link"));
    let digest = std::fs::read_to_string(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
    serde_json::from_slice(&std::fs::read(registry.blob_file(digest.trim())).unwrap()).unwrap()
}

#[test]
fn with_a_key_configured_only_components_signed_by_it_run() {
    if skip_unless(Need::Registry) {
        return;
    }
    let mut registry = LocalRegistry::start();
    let env = TestEnv::new();
    keypair(&env, "ours");
    keypair(&env, "theirs");

    // Unsigned: refused before anything is downloaded, naming the key and the digest.
    let unsigned = push(&env, ECHO_V1, &format!("oci://{}/tools/plain:v1", registry.addr));
    let config = |pinned: &str, host: &str, instance: &str| {
        std::fs::write(
            env.path("quarry.toml"),
            format!(
                "[host]\ncache_dir = {:?}\n{host}\n[tools.echo]\ncomponent = {pinned:?}\n{instance}\nconfig = {{ greeting = \"hi\" }}\n",
                env.path("cache").display()
            ),
        )
        .unwrap();
    };
    config(&format!("oci://{}/tools/plain@{unsigned}", registry.addr), "", "signed_by = \"ours.pub\"");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("{unsigned} is not signed")) && err.contains("ours.pub"), "{err}");
    assert!(cached(&env).is_empty(), "{:?}", cached(&env));

    // Signed by another key (`quarry push --sign`): refused, naming the key and the digest.
    let (code, out, err) = run_quarry(
        &env,
        &["push", ECHO_V1, &format!("oci://{}/tools/signed:v1", registry.addr), "--sign", "theirs.key"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let signed = out.split_whitespace().find(|w| w.starts_with("sha256:")).unwrap().to_string();
    let sig_tag = format!("sha256-{}.sig", &signed[7..]);
    assert!(out.contains(&sig_tag), "{out}");
    let pinned = format!("oci://{}/tools/signed@{signed}", registry.addr);
    let config = |host: &str, instance: &str| config(&pinned, host, instance);
    config("", "signed_by = \"ours.pub\"");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("{signed} is not signed by the key")) && err.contains("ours.pub"), "{err}");
    assert!(err.contains("none valid") && err.contains(&sig_tag), "{err}");

    // The signature is cosign's: a simple-signing payload naming the digest, whose signature
    // openssl verifies with the public key.
    let manifest = stored_manifest(&registry, "tools/signed", &sig_tag);
    let layer = &manifest["layers"][0];
    assert_eq!(layer["mediaType"], "application/vnd.dev.cosign.simplesigning.v1+json", "{manifest}");
    let payload = std::fs::read(registry.blob_file(layer["digest"].as_str().unwrap())).unwrap();
    let p: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(p["critical"]["image"]["docker-manifest-digest"], signed.as_str(), "{p}");
    assert_eq!(p["critical"]["type"], "cosign container image signature", "{p}");
    use base64::Engine as _;
    let sig = base64::engine::general_purpose::STANDARD
        .decode(layer["annotations"]["dev.cosignproject.cosign/signature"].as_str().unwrap())
        .unwrap();
    std::fs::write(env.path("payload"), &payload).unwrap();
    std::fs::write(env.path("payload.sig"), &sig).unwrap();
    let out = std::process::Command::new("openssl")
        .current_dir(env.path(""))
        .args(["dgst", "-sha256", "-verify", "theirs.pub", "-signature", "payload.sig", "payload"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Verified OK"), "{out:?}");

    // Its key, named for the registry's repository prefix in [host]: it runs, and once
    // verified and cached it runs with the registry down.
    config(&format!("signed_by = {{ {:?} = \"theirs.pub\" }}", format!("{}/tools", registry.addr)), "");
    let (code, out, err) = call(&env);
    assert_eq!((code, out.trim()), (0, "hi x [v1]"), "{err}");
    // The instance's own key comes first.
    config(&format!("signed_by = {{ {:?} = \"theirs.pub\" }}", registry.addr), "signed_by = \"ours.pub\"");
    let (code, _, err) = call(&env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ours.pub"), "{err}");
    config("", "signed_by = \"theirs.pub\"");
    registry.stop();
    let (code, out, err) = call(&env);
    assert_eq!((code, out.trim()), (0, "hi x [v1]"), "{err}");
}

#[test]
fn keys_are_checked_when_the_config_loads() {
    let env = TestEnv::new();
    std::fs::write(env.path("junk.pub"), "not a key").unwrap();
    let component = format!("oci://127.0.0.1:1/tools/echo@sha256:{}", "0".repeat(64));
    config(&env, &component, "signed_by = { \"127.0.0.1:1\" = \"junk.pub\" }");
    let (code, _, err) = call(&env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("host.signed_by") && err.contains("BEGIN PUBLIC KEY"), "{err}");
    config(&env, &component, "signed_by = { \"oci://127.0.0.1:1\" = \"junk.pub\" }");
    let (code, _, err) = call(&env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("without oci://"), "{err}");
    // A key for a component file, which no registry signs.
    std::fs::write(
        env.path("quarry.toml"),
        format!("[tools.echo]\ncomponent = {ECHO_V1:?}\nsigned_by = \"junk.pub\"\n"),
    )
    .unwrap();
    let (code, _, err) = call(&env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tools.echo.signed_by") && err.contains("components from registries"), "{err}");
    // A private key that is not one.
    let (code, _, err) = run_quarry(&env, &["push", ECHO_V1, "oci://127.0.0.1:1/tools/x:v1", "--sign", "junk.pub"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sign") && err.contains("openssl genpkey"), "{err}");
}

/// A registry that answers every request with 401 and `challenge`, on a loopback port of its
/// own; it keeps the `Authorization` header of each request it got.
struct Challenger {
    addr: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Challenger {
    fn start(challenge: impl Fn(&str) -> String + Send + 'static) -> Challenger {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (kept, own) = (seen.clone(), addr.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut reader = std::io::BufReader::new(&stream);
                let mut auth = String::from("none");
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("authorization")
                    {
                        auth = value.trim().to_string();
                    }
                    line.clear();
                }
                kept.lock().unwrap().push(auth);
                let reply = format!(
                    "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: {}\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}",
                    challenge(&own)
                );
                let _ = (&stream).write_all(reply.as_bytes());
            }
        });
        Challenger { addr, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// `quarry pull` of `oci://REGISTRY/tools/echo:v1` with the environment's credential scoped to
/// `scope`.
fn pull_with_credential(registry: &str, scope: &str) -> String {
    let env = TestEnv::new();
    config(&env, &format!("oci://{registry}/tools/echo:v1"), "");
    let out = std::process::Command::new(quarry_tests::quarry_bin())
        .current_dir(env.dir.path())
        .arg("pull")
        .env_remove("QUARRY_CONFIG")
        .env("DOCKER_CONFIG", env.path("no-docker-config"))
        .env("QUARRY_OCI_USERNAME", "me")
        .env("QUARRY_OCI_PASSWORD", "secret")
        .env("QUARRY_OCI_REGISTRY", scope)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "the challenger serves nothing");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Hardening III, class 1: a credential goes to the registry it is for, to no other registry
/// a config names, to no token service on another host, and over plain HTTP only to a
/// loopback registry whose key says so. (On c8d5fbc every one of these received it.)
#[test]
fn a_credential_goes_only_to_the_host_it_is_for() {
    let basic = Challenger::start(|_| r#"Basic realm="registry""#.to_string());
    let sent = "Basic bWU6c2VjcmV0"; // me:secret

    // Scoped to another registry: the registry the config names gets nothing.
    pull_with_credential(&basic.addr, "registry.example.com");
    assert!(!basic.seen().is_empty() && basic.seen().iter().all(|a| a == "none"), "{:?}", basic.seen());
    // Scoped to it, but as HTTPS while this loopback registry speaks plain HTTP: nothing.
    let err = pull_with_credential(&basic.addr, &basic.addr);
    assert!(basic.seen().iter().all(|a| a == "none"), "{:?}", basic.seen());
    assert!(err.contains("not sent over plain HTTP") && err.contains(&format!("http://{}", basic.addr)), "{err}");
    // Scoped to it and marked plain HTTP on purpose: it gets it.
    pull_with_credential(&basic.addr, &format!("http://{}", basic.addr));
    assert!(basic.seen().iter().any(|a| a == sent), "{:?}", basic.seen());

    // A token service on another host ("localhost" is not 127.0.0.1), over plain HTTP: nothing,
    // although the registry is the one the credential is for.
    let token = Challenger::start(|_| r#"Basic realm="token""#.to_string());
    let realm = format!("http://localhost:{}/token", token.addr.rsplit(':').next().unwrap());
    let bearer = Challenger::start(move |_| format!(r#"Bearer realm="{realm}",service="fake""#));
    let err = pull_with_credential(&bearer.addr, &format!("http://{}", bearer.addr));
    assert!(!token.seen().is_empty(), "the client asked the token service");
    assert!(token.seen().iter().all(|a| a == "none"), "{:?}", token.seen());
    assert!(bearer.seen().iter().all(|a| a == "none"), "{:?}", bearer.seen());
    assert!(err.contains("kept back") && err.contains("another host (localhost)"), "{err}");
}

/// Hardening III, class 2: `quarry pull` of two components where the second fails its digest
/// check changes nothing: not the lock, and not the first instance's file that a running host
/// would swap to. (On c8d5fbc the first was put in place, and a restart rolled it back.)
#[test]
fn a_pull_is_all_or_nothing() {
    if skip_unless(Need::Registry) {
        return;
    }
    let registry = LocalRegistry::start();
    let env = TestEnv::new();
    let (first, second) =
        (format!("oci://{}/tools/echo:v1", registry.addr), format!("oci://{}/tools/other:v1", registry.addr));
    push(&env, ECHO_V1, &first);
    push(&env, ECHO_V1, &second);
    let cache = env.path("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(
        env.path("quarry.toml"),
        format!(
            "[host]\ncache_dir = {:?}\n[tools.a]\ncomponent = {first:?}\n[tools.b]\ncomponent = {second:?}\n",
            cache.display()
        ),
    )
    .unwrap();
    let (code, out, err) = run_quarry(&env, &["pull"]);
    assert_eq!(code, 0, "{out}{err}");
    let lock = std::fs::read_to_string(env.path("quarry.lock")).unwrap();
    let stamps = || {
        let mut s: Vec<String> = std::fs::read_dir(cache.join("oci/refs"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "digest"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect();
        s.sort();
        s
    };
    let before = stamps();
    assert_eq!(before.len(), 2, "{before:?}");

    // Both tags move: the first to a good component, the second to one whose layer the
    // registry then serves changed.
    push(&env, ECHO_V2, &first);
    push(&env, CHAPTER_RAG, &second);
    let mut bytes = std::fs::read(CHAPTER_RAG).unwrap();
    let layer = format!("sha256:{}", quarry_tests::sha256_hex(&bytes));
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(registry.blob_file(&layer), bytes).unwrap();

    let (code, out, err) = run_quarry(&env, &["pull"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("tools.b.component") && err.contains("did not arrive as its digest says"), "{err}");
    assert_eq!(std::fs::read_to_string(env.path("quarry.lock")).unwrap(), lock, "the lock moved");
    assert_eq!(stamps(), before, "an instance's file moved");
    assert!(err.contains("nothing was changed") && err.contains("quarry.lock is as it was"), "{err}");
}
