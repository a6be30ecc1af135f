//! `fake-couchbase [--version-7] COLLECTION...`: the project's fake Couchbase cluster as a
//! process of its own, on free ports of 127.0.0.1, holding bucket `quarry` with scope `eval`
//! and the named collections (empty). It prints one JSON line, `{"connection_string",
//! "username", "password", "bucket", "scope"}`, and serves until its standard input closes.
//! `make eval-couchbase` runs the chapter RAG's evaluation on it; it answers as Couchbase 8.0
//! (BM25 text scoring) unless `--version-7` is given.

use std::io::Read;

use quarry_tests::fakes::couchbase::{self as fc, BucketSpec, FakeCluster, Spec};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let version_7 = args.iter().position(|a| a == "--version-7").map(|i| args.remove(i)).is_some();
    if args.is_empty() || args.iter().any(|a| a.starts_with('-')) {
        anyhow::bail!("usage: fake-couchbase [--version-7] COLLECTION...");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let spec = Spec {
        buckets: vec![BucketSpec { name: "quarry".into(), scopes: vec![("eval".into(), args)] }],
        indexes: Vec::new(),
        version_8: !version_7,
        ..fc::standard()
    };
    let fake = runtime.block_on(FakeCluster::start(spec));
    println!(
        "{}",
        json!({
            "connection_string": fake.connection_string(), "username": fc::USERNAME, "password": fc::PASSWORD,
            "bucket": "quarry", "scope": "eval",
        })
    );
    // Serve until whoever started it closes the pipe (or exits).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    if let Some(path) = std::env::var_os("FAKE_COUCHBASE_SEEN") {
        let lines: Vec<String> =
            fake.seen().iter().map(|s| format!("{} {} {} {}", s.service, s.method, s.path, s.body)).collect();
        std::fs::write(path, lines.join("\n"))?;
    }
    drop(fake);
    Ok(())
}
