//! Couchbase, absent: the host was built without the `couchbase` feature (see [`super::absent`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;

use crate::support::values::KeyError;

/// `grants.couchbase` as written: any table, refused by [`grant`].
pub type RawGrant = toml::Table;

/// `[couchbase.NAME]` as written: any table, refused by [`connection`].
pub type RawConnection = toml::Table;

/// No connection can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {}

/// No grant can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CouchbaseGrant {}

/// Refuses the section: this host has no Couchbase.
pub fn connection(_base: &Path, _raw: RawConnection) -> Result<Connection, KeyError> {
    Err(super::absent::missing("Couchbase", "couchbase"))
}

/// Refuses the grant: this host has no Couchbase.
pub fn grant(
    _raw: RawGrant,
    _connections: &BTreeMap<String, Arc<Connection>>,
    _deadline: Duration,
) -> Result<CouchbaseGrant, KeyError> {
    Err(super::absent::missing("Couchbase", "couchbase"))
}

/// Nothing to hold.
pub struct State;

impl State {
    /// The state of a store: nothing.
    pub fn new(_grant: Option<&CouchbaseGrant>, _max_bytes: u64) -> State {
        State
    }
}

/// Links nothing: a component that imports `quarry:retrieval/couchbase` fails to link.
pub fn link<T: Send + 'static>(_l: &mut Linker<T>, _get: fn(&mut T) -> &mut State) -> wasmtime::Result<()> {
    Ok(())
}
