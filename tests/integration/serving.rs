//! Serving many clients: an instance is listed as soon as it has opened while its preparation
//! (an index build) goes on in the background; calls wait for it with its progress, within the
//! deadline; a pool of instances serves calls in parallel. The hostile fixture's `prepare_ms`
//! makes preparation slow (reporting a step every 100 ms) and `prepare_error` makes it fail.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quarry::capability::progress::Report;
use quarry::registry::instance::{Caller, Level, Listener, Readiness};
use quarry_tests::{CallError, ECHO_V1, ECHO_V2, HOSTILE, TestEnv, within};

/// Collects what a call hears.
#[derive(Default)]
struct Heard {
    progress: Mutex<Vec<Report>>,
    lines: Mutex<Vec<(Level, String)>>,
}

impl Listener for Heard {
    fn progress(&self, report: &Report) {
        self.progress.lock().unwrap().push(report.clone());
    }
    fn log(&self, level: Level, line: &str) {
        self.lines.lock().unwrap().push((level, line.to_string()));
    }
}

/// The hostile fixture as `slow`, preparing for `prepare_ms`, with `extra` config keys.
fn slow(prepare_ms: u64, deadline: &str, extra: &str) -> String {
    format!(
        "[tools.slow]\ncomponent = \"plugins/hostile.wasm\"\nconfig = {{ prepare_ms = {prepare_ms}{extra} }}\n[tools.slow.grants]\ndeadline = \"{deadline}\"\n"
    )
}

/// The tools are listed while the instance prepares; a call waits for the preparation, hearing
/// its progress, and then runs.
#[tokio::test(flavor = "multi_thread")]
async fn tools_are_listed_at_once_and_calls_wait_for_the_preparation() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let host = within(60, env.opened_host(&slow(3000, "30s", ""))).await;
    let inst = host.instance("slow").expect("opened");
    assert_eq!(inst.readiness(), Readiness::Preparing, "a 3 s preparation cannot be over yet");
    assert!(host.tools().iter().any(|t| t.qualified == "slow.echo"), "the tools are listed while it prepares");

    let heard = Heard::default();
    let caller = Caller { client: "a", listener: Some(&heard), asker: None };
    let out = within(
        30,
        host.call_cancellable(
            "slow.echo",
            &quarry::Args::parse(r#"{"text": "after"}"#).unwrap(),
            caller,
            std::future::pending(),
        ),
    )
    .await
    .expect("the call waits and then runs");
    assert!(out.text.contains("after"), "{}", out.text);
    assert_eq!(inst.readiness(), Readiness::Ready);
    let progress = heard.progress.lock().unwrap();
    assert!(progress.len() >= 2, "the wait heard the preparation's progress: {progress:?}");
    assert!(progress.iter().all(|r| r.progress.task == "preparing the fixture" && r.progress.total == 30));
    assert!(progress.windows(2).all(|w| w[0].progress.done <= w[1].progress.done), "{progress:?}");
    let lines = heard.lines.lock().unwrap();
    // The call may come before the first report: the line then says none has come yet.
    assert!(
        lines.iter().any(|(_, l)| l.starts_with("slow: the call waits for the instance, still preparing")),
        "{lines:?}"
    );
}

/// A call that has waited its deadline for a preparation that is still going says how far along
/// it is (the preparation has its own, longer deadline), and the preparation goes on: once it is
/// done, calls run.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_waits_past_its_deadline_says_how_far_along_the_preparation_is() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let host = within(60, env.opened_host(&slow(6000, "2s", ""))).await;
    let e = within(30, host.call("slow.echo", r#"{"text": "x"}"#)).await.unwrap_err();
    assert!(matches!(e, CallError::NotReady { .. }), "{e}");
    let m = e.to_string();
    assert!(m.contains("slow.echo: not ready yet: after waiting 2s the instance is still preparing: "), "{m}");
    assert!(m.contains("preparing the fixture: ") && m.contains(" of 60 steps"), "{m}");
    assert!(m.ends_with("try again later"), "{m}");
    assert!(within(30, host.prepared()).await.is_empty(), "the preparation went on to its end");
    let out = within(30, host.call("slow.echo", r#"{"text": "later"}"#)).await.expect("prepared by now");
    assert!(out.text.contains("later"));
}

/// A preparation that fails is reported for the instance; every call says why, and tries again.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_preparation_is_reported_and_each_call_tries_again() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let host = within(60, env.opened_host(&slow(0, "10s", ", prepare_error = \"the index is gone\""))).await;
    let failed = within(30, host.prepared()).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].1.contains("could not prepare: upstream: the index is gone"), "{failed:?}");
    for _ in 0..2 {
        let e = within(30, host.call("slow.echo", r#"{"text": "x"}"#)).await.unwrap_err();
        let m = e.to_string();
        assert_eq!(m, "slow.echo: its instance could not prepare (each call tries again): upstream: the index is gone");
        assert_eq!(e.kind(), "unprepared");
    }
}

/// `pool = 2` serves two calls at once; `pool = 1` queues the second behind the first.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_serves_calls_in_parallel() {
    for (pool, expect_waiting) in [(2usize, 0usize), (1, 1)] {
        let env = TestEnv::new();
        env.plugin(HOSTILE, "hostile");
        let body = format!(
            "[tools.slow]\ncomponent = \"plugins/hostile.wasm\"\npool = {pool}\n[tools.slow.grants]\ndeadline = \"30s\"\n"
        );
        let host = within(60, env.host(&body)).await;
        let inst = host.instance("slow").unwrap();
        assert_eq!(inst.members(), pool);
        // Every member has prepared and joined once the last is free.
        within(30, async {
            while inst.load().0 < pool {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let calls: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|client| {
                let host = host.clone();
                tokio::spawn(async move {
                    let caller = Caller { client, listener: None, asker: None };
                    host.call_cancellable(
                        "slow.sleep",
                        &quarry::Args::parse(r#"{"ms": 1500}"#).unwrap(),
                        caller,
                        std::future::pending(),
                    )
                    .await
                })
            })
            .collect();
        // Both calls hold a member (no member free, no one waiting), or one waits behind the
        // other: each call sleeps 1.5 s, so the state lasts while the queue is looked at.
        let want = (0, expect_waiting);
        let seen = within(10, async {
            loop {
                if inst.load() == want {
                    break want;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert_eq!(seen, want, "pool = {pool}: (members free, clients waiting) while the calls run");
        for c in calls {
            c.await.unwrap().expect("slept");
        }
        assert_eq!(inst.load(), (pool, 0));
    }
}

/// A recycled member (its call trapped) is started again by its next call while the other
/// member is still busy: the pool does not wait for it, nor it for the pool.
#[tokio::test(flavor = "multi_thread")]
async fn a_recycled_member_does_not_hold_up_the_pool() {
    let env = TestEnv::new();
    env.plugin(HOSTILE, "hostile");
    let body =
        "[tools.slow]\ncomponent = \"plugins/hostile.wasm\"\npool = 2\n[tools.slow.grants]\ndeadline = \"30s\"\n";
    let host = within(60, env.host(body)).await;
    let inst = host.instance("slow").unwrap();
    within(30, async {
        while inst.load().0 < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // One member sleeps for 5 s; meanwhile the other faults and is recycled, three times.
    let sleeper = tokio::spawn({
        let host = host.clone();
        async move { host.call("slow.sleep", r#"{"ms": 5000}"#).await }
    });
    within(10, async {
        while inst.load().0 > 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    for _ in 0..3 {
        let e = within(30, host.call("slow.panic", "{}")).await.unwrap_err();
        assert!(matches!(e, CallError::Fault { .. }), "{e}");
        let out = within(30, host.call("slow.echo", r#"{"text": "still here"}"#)).await.expect("served");
        assert!(out.text.contains("still here"));
    }
    assert!(!sleeper.is_finished(), "the recycled member answered while the other was still busy");
    within(30, sleeper).await.unwrap().expect("slept");
}

/// A hot swap replaces the whole pool: every member serves the new version afterwards, and a call
/// in flight finishes on the old one.
#[tokio::test(flavor = "multi_thread")]
async fn a_hot_swap_replaces_the_whole_pool() {
    let env = TestEnv::new();
    let echo = env.plugin(ECHO_V1, "echo");
    let host = within(60, env.host("[tools.echo]\ncomponent = \"plugins/echo.wasm\"\npool = 3\n")).await;
    let before = within(30, host.call("echo", r#"{"text": "a"}"#)).await.unwrap();
    assert!(before.text.ends_with("[v1]"), "{}", before.text);
    let old = host.instance("echo").unwrap();
    env.replace(&echo, &std::fs::read(ECHO_V2).unwrap());
    let report = within(60, host.reload(&echo)).await.expect("swapped");
    assert_eq!(report.instances, ["echo"]);
    let new = host.instance("echo").unwrap();
    assert!(!Arc::ptr_eq(&old, &new) && new.members() == 3);
    // Three calls at once: whichever members take them, each answers from v2.
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let host = host.clone();
            tokio::spawn(async move { host.call("echo", &format!(r#"{{"text": "{i}"}}"#)).await })
        })
        .collect();
    for c in calls {
        let out = c.await.unwrap().unwrap();
        assert!(out.text.ends_with("[v2]"), "{}", out.text);
    }
    // The old pool still answers a call already holding it, from v1.
    let out = within(30, old.call("echo", &quarry::Args::parse(r#"{"text": "old"}"#).unwrap())).await.unwrap();
    assert!(out.text.ends_with("[v1]"), "{}", out.text);
}
