//! What every room of the host builds on and that knows none of them: bounding and escaping
//! text the host does not trust, the config's value types, the limits, rate-limited log lines,
//! the fair queue that shares a pool between clients, where `builtin:` names are, what a
//! component says of itself (its version), and the Prometheus text the host's `/metrics` writes.

#![deny(missing_docs)]

pub mod builtin;
pub mod exposition;
pub mod fair;
pub mod held;
pub mod limits;
pub mod log_budget;
pub mod metadata;
pub mod text;
pub mod values;
