//! The capability's calls since the host started, by operation and outcome, for the host's
//! `/metrics`. Process-wide: every instance's client counts here, as one host is one process.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::wit::CouchbaseError;

/// The operations a guest can ask for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    BucketExists,
    Scopes,
    SearchIndexes,
    Search,
}

const OPS: [&str; 4] = ["bucket_exists", "scopes", "search_indexes", "search"];
/// `ok`, then each error of the WIT's `couchbase-error`, then a fault of the host's own.
const OUTCOMES: [&str; 7] = ["ok", "unavailable", "not_found", "denied", "invalid_request", "service", "host_bug"];

static COUNTS: [[AtomicU64; OUTCOMES.len()]; OPS.len()] =
    [const { [const { AtomicU64::new(0) }; OUTCOMES.len()] }; OPS.len()];

/// Counts one call of `op` that ended as `r` (a trap is a host bug).
pub(super) fn count<T>(op: Op, r: &wasmtime::Result<Result<T, CouchbaseError>>) {
    let outcome = match r {
        Ok(Ok(_)) => 0,
        Ok(Err(CouchbaseError::Unavailable(_))) => 1,
        Ok(Err(CouchbaseError::NotFound(_))) => 2,
        Ok(Err(CouchbaseError::Denied(_))) => 3,
        Ok(Err(CouchbaseError::InvalidRequest(_))) => 4,
        Ok(Err(CouchbaseError::Service(_))) => 5,
        Err(_) => 6,
    };
    COUNTS[op as usize][outcome].fetch_add(1, Ordering::Relaxed);
}

/// Every `(operation, outcome, calls)` of a table of counts with at least one call.
pub(super) fn nonzero<const O: usize>(
    ops: &[&'static str],
    outcomes: &[&'static str; O],
    counts: &[[AtomicU64; O]],
) -> Vec<(&'static str, &'static str, u64)> {
    let mut out = Vec::new();
    for (op, row) in ops.iter().zip(counts) {
        for (outcome, n) in outcomes.iter().zip(row) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                out.push((*op, *outcome, n));
            }
        }
    }
    out
}

/// Every `(operation, outcome, calls)` of the guests' calls with at least one call.
pub fn counts() -> Vec<(&'static str, &'static str, u64)> {
    nonzero(&OPS, &OUTCOMES, &COUNTS)
}
