//! Host benchmark: prints its figures side by side.
//!
//! - instantiate-and-call: a fresh instance (store, instantiate, `open`, `specs`) plus one call;
//! - warm call: a call on a running instance;
//! - component load: compiling vs loading the cached precompiled `.cwasm`;
//! - hot swap: from the new file renamed into place to the new version serving;
//! - what yielding at every epoch tick costs: a CPU-bound call with yielding (what the host
//!   does) beside the same call trapping at its deadline without yielding.
//!
//! Run with `make bench` (or `cargo bench -p quarry-tests --bench host`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry::registry::instance::ToolInstance;
use quarry::registry::version::ComponentVersion;
use quarry::runtime::engine::QuarryEngine;
use quarry_tests::{ECHO_V1, ECHO_V2, HOSTILE, TestEnv};

fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), v[0])
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

fn row(name: &str, samples: Vec<Duration>) -> Duration {
    let n = samples.len();
    let (p50, p99, min) = stats(samples);
    println!("{name:<44} {:>12} {:>12} {:>12} {n:>7}", fmt(p50), fmt(p99), fmt(min));
    p50
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("{:<44} {:>12} {:>12} {:>12} {:>7}", "measure", "p50", "p99", "min", "runs");
    let env = TestEnv::new();
    let echo = env.plugin(ECHO_V1, "echo");
    let host = env.host("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\nconfig = { greeting = \"hi\" }\n").await;

    // Warm calls on a running instance.
    let args = r#"{"text":"bench"}"#;
    for _ in 0..200 {
        host.call("echo", args).await.unwrap();
    }
    let mut warm = Vec::new();
    for _ in 0..5000 {
        let t = Instant::now();
        host.call("echo", args).await.unwrap();
        warm.push(t.elapsed());
    }
    let warm_p50 = row("warm call (echo)", warm);

    // A fresh instance per call.
    let cfg = Arc::new(host.config().tools["echo"].clone());
    let engine = host.engine().clone();
    let linker = quarry::registry::build_linker(engine.engine()).unwrap();
    let plugin = ComponentVersion::load(&engine, &linker, &cfg.component).await.unwrap();
    let echo_args = quarry::Args::parse(args).unwrap();
    let mut cold = Vec::new();
    for _ in 0..500 {
        let t = Instant::now();
        let inst = Arc::new(ToolInstance::open(&engine, cfg.clone(), plugin.clone(), None).await.unwrap());
        inst.prepare().await.unwrap();
        inst.call("echo", &echo_args).await.unwrap();
        cold.push(t.elapsed());
    }
    let cold_p50 = row("instantiate + open + call (echo)", cold);

    // Compiling vs loading the cached .cwasm, for each fixture.
    let mut ratios = Vec::new();
    for (name, path) in [("echo", ECHO_V1), ("hostile", HOSTILE)] {
        let bytes = std::fs::read(path).unwrap();
        let (mut compile, mut cached) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let e = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
            let t = Instant::now();
            e.load_component(std::path::Path::new(path), &bytes).unwrap();
            compile.push(t.elapsed());
            for _ in 0..5 {
                // A new engine has an empty in-memory cache: this is the disk path.
                let e = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
                let t = Instant::now();
                let (_, outcome) = e.load_component(std::path::Path::new(path), &bytes).unwrap();
                cached.push(t.elapsed());
                assert_eq!(outcome, quarry::runtime::cache::CacheOutcome::Disk);
            }
        }
        let kb = bytes.len() / 1024;
        let c = row(&format!("compile {name} ({kb} KiB)"), compile);
        let l = row(&format!("load cached .cwasm {name}"), cached);
        ratios.push((name, c.as_secs_f64() / l.as_secs_f64()));
    }

    // Hot swap: rename a new version into place; time to the swap event and to
    // the first call answered by the new version.
    let _watcher = quarry::watch::watch(host.clone()).unwrap();
    let versions = [std::fs::read(ECHO_V2).unwrap(), std::fs::read(ECHO_V1).unwrap()];
    let (mut to_event, mut to_serving) = (Vec::new(), Vec::new());
    for i in 0..10 {
        let mut rx = host.subscribe();
        let want = if i % 2 == 0 { "[v2]" } else { "[v1]" };
        let t = Instant::now();
        env.replace(&echo, &versions[i % 2]);
        let mut evented = None;
        loop {
            if evented.is_none() && rx.try_recv().is_ok() {
                evented = Some(t.elapsed());
            }
            if host.call("echo", args).await.unwrap().text.ends_with(want) {
                to_serving.push(t.elapsed());
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "swap never happened");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        to_event.push(evented.unwrap_or_else(|| t.elapsed()));
    }
    row("hot swap: file renamed -> swap event", to_event);
    row("hot swap: file renamed -> new version serving", to_serving);
    println!("  (includes the {:?} debounce; compile is cached after the first two swaps)", quarry::watch::DEBOUNCE);

    // Yielding at each epoch tick (so long calls share the runtime's workers) against trapping
    // at the deadline without yielding, on one CPU-bound call, alternated so both see the same
    // machine.
    let hostile_path = env.plugin(HOSTILE, "hostile-bench");
    let mut hostile_cfg = cfg.as_ref().clone();
    hostile_cfg.component = hostile_path.canonicalize().unwrap();
    hostile_cfg.config_json = "{}".into();
    hostile_cfg.grants.deadline = Duration::from_secs(60);
    let hostile_cfg = Arc::new(hostile_cfg);
    let mut yielding = None;
    let mut trapping = None;
    for (slot, e) in [(&mut yielding, engine.clone()), (&mut trapping, engine.clone().without_yielding())] {
        let linker = quarry::registry::build_linker(e.engine()).unwrap();
        let plugin = ComponentVersion::load(&e, &linker, &hostile_cfg.component).await.unwrap();
        let inst = Arc::new(ToolInstance::open(&e, hostile_cfg.clone(), plugin, None).await.unwrap());
        inst.prepare().await.unwrap();
        *slot = Some(inst);
    }
    let (yielding, trapping) = (yielding.unwrap(), trapping.unwrap());
    let work = &quarry::Args::parse(r#"{"n": 100}"#).unwrap();
    assert_eq!(yielding.call("work", work).await.unwrap().text, trapping.call("work", work).await.unwrap().text);
    let (mut y, mut tr) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        for (inst, v) in [(&yielding, &mut y), (&trapping, &mut tr)] {
            let t = Instant::now();
            inst.call("work", work).await.unwrap();
            v.push(t.elapsed());
        }
    }
    let y50 = row("CPU-bound call, yielding every 10 ms tick", y);
    let t50 = row("CPU-bound call, trapping only (no yields)", tr);

    println!();
    println!("instantiate+call vs warm call: {:.1}x", cold_p50.as_secs_f64() / warm_p50.as_secs_f64());
    println!(
        "yielding vs trapping only: {:.3}x the time ({:+.1}%)",
        y50.as_secs_f64() / t50.as_secs_f64(),
        (y50.as_secs_f64() / t50.as_secs_f64() - 1.0) * 100.0
    );
    for (name, r) in ratios {
        println!("compile vs cached load, {name}: {r:.0}x faster from cache");
    }
}
