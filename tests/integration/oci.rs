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
    // The component's layer, swapped on the registry's disk for another component's bytes.
    let layer = format!("sha256:{}", quarry_tests::sha256_hex(&std::fs::read(ECHO_V1).unwrap()));
    std::fs::write(registry.blob_file(&layer), std::fs::read(ECHO_V2).unwrap()).unwrap();
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
