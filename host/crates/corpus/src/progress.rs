//! Progress shared through a corpus: the builder of a corpus kept in a cluster puts its latest
//! report in the write lease, and a host waiting for that lease reports it as its own.

/// One report of long work, as a corpus shares it between hosts (in a Couchbase corpus's
/// write lease).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseProgress {
    /// What is being done.
    pub task: String,
    /// Units done.
    pub done: u64,
    /// Units in all; 0 when unknown.
    pub total: u64,
    /// The unit.
    pub unit: String,
}

/// A store's progress reporting, as its corpora use it: the builder of a shared corpus shares
/// its latest report with the hosts waiting for its lease, which report it as theirs.
pub trait ProgressLink: Send + Sync {
    /// The store's latest report, if any.
    fn latest(&self) -> Option<LeaseProgress>;
    /// Reports `p` as the store's own.
    fn report(&self, p: &LeaseProgress);
}
