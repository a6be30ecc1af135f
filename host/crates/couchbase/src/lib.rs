//! The `couchbase` capability: bucket, scope and search-index checks and vector search, called
//! by the host through the official SDK (`couchbase` 1.1) and, for cluster-level indexes, its
//! core crate's `Agent` (the SDK's 1.1 `Cluster` has no search API).
//!
//! - Connections are named in the host config (`[couchbase.NAME]`) with their credentials;
//!   a component never sees either. `grants.couchbase` names the connection and the
//!   `bucket.scope` pairs an instance may touch; cluster-level indexes need the whole bucket
//!   (`bucket.*`), since such an index may cover any of its scopes.
//! - Every call is bounded by the grant's timeout, connecting included: the SDK's `connect`
//!   never fails (it retries a wrong password or a closed port forever), and
//!   `cluster.bucket("missing")` hangs, so a bucket is always looked up first.
//!
//! Files: `connection` (`[couchbase.NAME]`), `grant` (`grants.couchbase`, name rules), `client`
//! (the SDK cluster and core agent of one instance, bucket and scope lookups, bounded calls),
//! `search` (search indexes, vector searches, index definitions), `errors` (SDK errors to the
//! WIT's), `calls` (what was called, for `/metrics`), `store` (a collection the host itself keeps
//! data in: documents and a Search index, for the Couchbase corpus); here, the per-store [`State`] and the WIT
//! `Host` impl.

#![deny(missing_docs)]

mod calls;
mod client;
mod connection;
mod errors;
mod grant;
mod search;
pub mod store;

/// The `quarry:retrieval/couchbase` interface's host bindings, generated here from the project's WIT
/// (a world that imports it alone).
#[expect(missing_docs, reason = "generated code")]
pub mod wit {
    wasmtime::component::bindgen!({
        path: "../../../wit",
        inline: "package quarry:couchbase-host; world host { import quarry:retrieval/couchbase@0.6.0; }",
        world: "quarry:couchbase-host/host",
        imports: { default: async | trappable },
    });
    pub use self::quarry::retrieval::couchbase::*;
}

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use wit::{CouchbaseError, IndexScope, ScopeInfo, SearchIndex, SearchRow, VectorSearch};

pub use calls::counts;
pub use client::Client;
pub use connection::{Connection, RawConnection, Secret, connection};
pub use grant::{
    CouchbaseGrant, DEFAULT_TIMEOUT, MAX_ROWS, RawGrant, check_bucket_name, check_index_name, check_scope_name, grant,
};
pub use search::vector_fields;
pub use store::store_counts;

use errors::{Result, to_wit};

/// One store's Couchbase: the instance's client, when it has a grant.
#[derive(Default)]
pub struct State {
    client: Option<Arc<Client>>,
}

impl State {
    /// The state for an instance granted `grant` (none: every call is `denied`), whose searches
    /// may bring at most `max_bytes` of rows into the host.
    pub fn new(grant: Option<&CouchbaseGrant>, max_bytes: u64) -> State {
        State { client: grant.map(|g| Client::new(g.clone(), max_bytes)) }
    }

    /// The instance's Couchbase client, or `denied` when its config grants none.
    fn client(&self) -> Result<Arc<Client>> {
        let denied = || {
            CouchbaseError::Denied(
                "this instance has no Couchbase grant; add [tools.NAME.grants.couchbase] with a connection and scopes"
                    .into(),
            )
        };
        Ok(self.client.clone().ok_or_else(denied)?)
    }
}

/// A result as the WIT returns it to the guest.
type Wit<T> = std::result::Result<T, CouchbaseError>;

/// Adds the `couchbase` interface, served by the [`State`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> &mut State) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<State>>(l, get)
}

impl wit::Host for State {
    async fn bucket_exists(&mut self, bucket: String) -> wasmtime::Result<Wit<bool>> {
        let client = self.client();
        let r = to_wit(async { client?.bucket_exists(&bucket).await }.await);
        calls::count(calls::Op::BucketExists, &r);
        r
    }

    async fn scopes(&mut self, bucket: String) -> wasmtime::Result<Wit<Vec<ScopeInfo>>> {
        let client = self.client();
        let r = to_wit(async { client?.scopes(&bucket).await }.await);
        calls::count(calls::Op::Scopes, &r);
        r
    }

    async fn search_indexes(&mut self, at: IndexScope) -> wasmtime::Result<Wit<Vec<SearchIndex>>> {
        let client = self.client();
        let r = to_wit(async { client?.search_indexes(&at).await }.await);
        calls::count(calls::Op::SearchIndexes, &r);
        r
    }

    async fn search(&mut self, query: VectorSearch) -> wasmtime::Result<Wit<Vec<SearchRow>>> {
        let client = self.client();
        let r = to_wit(async { client?.search(&query).await }.await);
        calls::count(calls::Op::Search, &r);
        r
    }
}
