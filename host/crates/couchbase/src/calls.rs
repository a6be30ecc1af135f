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

/// Every `(operation, outcome, calls)` with at least one call.
pub fn counts() -> Vec<(&'static str, &'static str, u64)> {
    let mut out = Vec::new();
    for (op, row) in OPS.iter().zip(&COUNTS) {
        for (outcome, n) in OUTCOMES.iter().zip(row) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                out.push((*op, *outcome, n));
            }
        }
    }
    out
}

/// The calls the host's own `Store`s make (a corpus in Couchbase).
#[derive(Debug, Clone, Copy)]
pub(super) enum StoreOp {
    Get,
    Upsert,
    Insert,
    Replace,
    Remove,
    Search,
    Index,
}

const STORE_OPS: [&str; 7] = ["get", "upsert", "insert", "replace", "remove", "search", "index"];
const STORE_OUTCOMES: [&str; 8] =
    ["ok", "not_found", "exists", "cas_mismatch", "unavailable", "temporary", "invalid", "service"];

static STORE_COUNTS: [[AtomicU64; STORE_OUTCOMES.len()]; STORE_OPS.len()] =
    [const { [const { AtomicU64::new(0) }; STORE_OUTCOMES.len()] }; STORE_OPS.len()];

/// Counts one store call of `op` that ended as `r`, and passes `r` on.
pub(super) fn count_store<T>(
    op: StoreOp,
    r: Result<T, crate::store::StoreError>,
) -> Result<T, crate::store::StoreError> {
    use crate::store::StoreError as E;
    let outcome = match &r {
        Ok(_) => 0,
        Err(E::NotFound(_)) => 1,
        Err(E::Exists(_)) => 2,
        Err(E::CasMismatch(_)) => 3,
        Err(E::Unavailable(_)) => 4,
        Err(E::Temporary(_)) => 5,
        Err(E::Invalid(_)) => 6,
        Err(E::Service(_)) => 7,
    };
    STORE_COUNTS[op as usize][outcome].fetch_add(1, Ordering::Relaxed);
    r
}

/// Every `(operation, outcome, calls)` of the host's own store calls with at least one call.
pub fn store_counts() -> Vec<(&'static str, &'static str, u64)> {
    let mut out = Vec::new();
    for (op, row) in STORE_OPS.iter().zip(&STORE_COUNTS) {
        for (outcome, n) in STORE_OUTCOMES.iter().zip(row) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                out.push((*op, *outcome, n));
            }
        }
    }
    out
}
