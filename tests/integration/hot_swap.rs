//! Replacing a component while calls run: no call fails, the new version
//! becomes visible, and a broken replacement leaves the old one serving.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use quarry_tests::{ECHO_V1, ECHO_V2, HOSTILE, TestEnv, within};

const ECHO: &str = r#"
[tools.echo]
component = "plugins/echo.wasm"
config = { greeting = "hi" }
"#;

/// Answers per load task.
type Counts = Arc<Vec<AtomicUsize>>;
/// A load task: every answer (or error) it had.
type Task = tokio::task::JoinHandle<Vec<Result<String, String>>>;

/// Calls `echo` in a loop on `tasks` tasks until `stop`, counting each task's answers in
/// `calls`; returns every answer (or error) per task.
fn load(host: &Arc<quarry::Registry>, tasks: usize, stop: &Arc<AtomicBool>) -> (Vec<Task>, Counts) {
    let calls: Counts = Arc::new((0..tasks).map(|_| AtomicUsize::new(0)).collect());
    let handles = (0..tasks)
        .map(|i| {
            let (host, stop, calls) = (host.clone(), stop.clone(), calls.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let r = host.call("echo", &format!(r#"{{"text":"t{i}"}}"#)).await;
                    seen.push(r.map(|o| o.text).map_err(|e| e.to_string()));
                    calls[i].fetch_add(1, Ordering::Relaxed);
                }
                seen
            })
        })
        .collect();
    (handles, calls)
}

/// Waits until every load task has had `n` more answers: an event, however loaded the machine.
async fn more_calls(calls: &Counts, n: usize) {
    let targets: Vec<usize> = calls.iter().map(|c| c.load(Ordering::Relaxed) + n).collect();
    within(60, async {
        while calls.iter().zip(&targets).any(|(c, t)| c.load(Ordering::Relaxed) < *t) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swap_under_load_loses_no_call() {
    let env = TestEnv::new();
    let plugin = env.plugin(ECHO_V1, "echo");
    let host = env.host(ECHO).await;
    let _watcher = quarry::watch::watch(host.clone()).expect("watch");
    let mut swaps = host.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let (workers, calls) = load(&host, 4, &stop);
    more_calls(&calls, 3).await;

    env.replace(&plugin, &std::fs::read(ECHO_V2).unwrap());
    let report = within(60, swaps.recv()).await.expect("swap event");
    assert_eq!(report.instances, vec!["echo".to_string()]);
    // Every task has answers from after the swap: it had one more call still on the old
    // version at most.
    more_calls(&calls, 3).await;
    stop.store(true, Ordering::Relaxed);

    let mut total = 0;
    for w in workers {
        let seen = within(30, w).await.unwrap();
        total += seen.len();
        let failures: Vec<_> = seen.iter().filter(|r| r.is_err()).collect();
        assert!(failures.is_empty(), "calls failed during the swap: {failures:?}");
        let texts: Vec<&String> = seen.iter().flatten().collect();
        assert!(texts.first().unwrap().ends_with("[v1]"), "{:?}", texts.first());
        assert!(texts.last().unwrap().ends_with("[v2]"), "{:?}", texts.last());
        // Once a task has seen v2, it never sees v1 again.
        let first_v2 = texts.iter().position(|t| t.ends_with("[v2]")).unwrap();
        assert!(texts[first_v2..].iter().all(|t| t.ends_with("[v2]")));
    }
    assert!(total > 20, "the load loop barely ran: {total} calls");
    let listed = host.tools();
    assert!(listed[0].spec.description.contains("(v2)"), "{:?}", listed[0].spec.description);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_replacement_keeps_the_old_version() {
    let env = TestEnv::new();
    let plugin = env.plugin(ECHO_V1, "echo");
    let host = env.host(ECHO).await;
    let watcher = quarry::watch::watch(host.clone()).expect("watch");
    let mut tried = watcher.tried();
    let stop = Arc::new(AtomicBool::new(false));
    let (workers, _) = load(&host, 2, &stop);

    // Not a component at all.
    env.replace(&plugin, b"\0asm garbage that is not a component");
    let err = within(60, host.reload(&plugin.canonicalize().unwrap())).await.unwrap_err();
    assert!(err.to_string().contains("not a valid WebAssembly component"), "{err}");
    assert!(err.to_string().contains("previous version keeps serving"), "{err}");

    // A valid component whose instances refuse the config (`greeting` is unknown to it).
    env.replace(&plugin, &std::fs::read(HOSTILE).unwrap());
    let err = within(60, host.reload(&plugin.canonicalize().unwrap())).await.unwrap_err();
    assert!(err.to_string().contains("unknown config key `greeting`"), "{err}");

    // The watcher sees the bad versions too, and refuses them as the reloads above did.
    within(60, tried.wait_for(|n| *n >= 1)).await.expect("the watcher tried the bad versions");
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        for r in within(30, w).await.unwrap() {
            assert_eq!(
                r.as_deref(),
                Ok(format!("hi {} [v1]", r.as_ref().unwrap().split(' ').nth(1).unwrap()).as_str())
            );
        }
    }
    assert_eq!(host.call("echo", r#"{"text":"x"}"#).await.unwrap().text, "hi x [v1]");

    // And a good version after the bad ones still goes live.
    let mut swaps = host.subscribe();
    env.replace(&plugin, &std::fs::read(ECHO_V2).unwrap());
    within(60, swaps.recv()).await.expect("swap event");
    assert_eq!(host.call("echo", r#"{"text":"x"}"#).await.unwrap().text, "hi x [v2]");
}

#[tokio::test]
async fn same_bytes_are_not_swapped_or_recompiled() {
    let env = TestEnv::new();
    let plugin = env.plugin(ECHO_V1, "echo");
    let host = env.host(ECHO).await;
    let err = host.reload(&plugin.canonicalize().unwrap()).await.unwrap_err();
    assert!(matches!(err, quarry::ReloadError::Unchanged(_)), "{err}");
}
