//! Couchbase (`quarry:retrieval/couchbase`), from the `quarry-couchbase` crate; here, its place
//! in the capability list: `[couchbase.NAME]` connections and `grants.couchbase`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use wasmtime::component::Linker;

pub use quarry_couchbase::*;

use super::{Capability, CapabilityStore, GrantContext, SandboxError, StoreContext, state_of};
use crate::support::exposition::{Exposition, Kind};
use crate::support::values::KeyError;

/// The Couchbase capability.
pub struct Couchbase;

impl Capability for Couchbase {
    const GRANT_KEYS: &'static [&'static str] = &["couchbase"];
    const SECTION_KEYS: &'static [&'static str] = &["couchbase"];

    type RawGrant = Option<RawGrant>;
    type Grant = Option<CouchbaseGrant>;
    type RawSection = BTreeMap<String, RawConnection>;
    type RawHost = ();
    /// The named connections.
    type Section = BTreeMap<String, Arc<Connection>>;
    type AppState = ();
    type State = State;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Option<RawGrant>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = Some(map.next_value()?);
        Ok(())
    }

    fn read_section<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut BTreeMap<String, RawConnection>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = map.next_value()?;
        Ok(())
    }

    fn section(
        raw: BTreeMap<String, RawConnection>,
        _: (),
        base: &Path,
    ) -> Result<BTreeMap<String, Arc<Connection>>, KeyError> {
        let mut connections = BTreeMap::new();
        for (name, raw) in raw {
            let c = connection(base, raw).map_err(|e| e.under(&format!("couchbase.{name}")))?;
            connections.insert(name, Arc::new(c));
        }
        Ok(connections)
    }

    fn grant(
        raw: Option<RawGrant>,
        connections: &BTreeMap<String, Arc<Connection>>,
        cx: &GrantContext<'_>,
    ) -> Result<Option<CouchbaseGrant>, KeyError> {
        raw.map(|c| grant(c, connections, cx.deadline).map_err(|e| e.under("couchbase"))).transpose()
    }

    fn metrics(_: &BTreeMap<String, Arc<Connection>>, _: &(), out: &mut Exposition) {
        let mut f = out.family(
            "quarry_couchbase_operations_total",
            Kind::Counter,
            "Couchbase calls made for guests, by operation and outcome (ok, or the error's kind).",
        );
        for (op, outcome, n) in counts() {
            f.sample(&[("op", op), ("outcome", outcome)], n as f64);
        }
        let mut f = out.family(
            "quarry_couchbase_store_operations_total",
            Kind::Counter,
            "Couchbase calls the host made for its corpora kept in Couchbase, by operation and outcome.",
        );
        for (op, outcome, n) in store_counts() {
            f.sample(&[("op", op), ("outcome", outcome)], n as f64);
        }
    }

    fn state(grant: &Option<CouchbaseGrant>, _: &(), cx: &mut StoreContext<'_>) -> Result<State, SandboxError> {
        Ok(State::new(grant.as_ref(), cx.max_output))
    }

    fn link<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        link(l, state_of::<Couchbase, T>)
    }
}
