//! One collection of a cluster as the host itself keeps data in it (a corpus): documents by key
//! with their CAS and expiry, written in bounded batches and retried when the cluster says
//! "later", and a scoped Search index over them. Guests never reach this: it serves host code,
//! with the host's connection (`[couchbase.NAME]`).
//!
//! Every call is bounded by the store's timeout, connecting included (the SDK retries a closed
//! port or a refused password forever, and an operation on a missing collection until its own
//! timeout: [`Store::check`] looks the bucket, scope and collection up first, to say which is
//! missing).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use couchbase::cluster::Cluster;
use couchbase::collection::Collection;
use couchbase::error::ErrorKind;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::OnceCell;

use super::connection::{Connection, connect};

/// Documents written or read at once, at most.
pub const BATCH: usize = 32;

/// How long the first read through a new bucket handle may take before it is made again (see
/// [`Store::bucket_by`]).
const FIRST_READ: Duration = Duration::from_secs(2);

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The bucket, scope, collection, index or document is not there.
    #[error("{0}")]
    NotFound(String),
    /// An insert found the key taken.
    #[error("{0}")]
    Exists(String),
    /// The document changed since its CAS was read.
    #[error("{0}")]
    CasMismatch(String),
    /// No answer within the timeout, or the cluster is unreachable or refused the credentials.
    #[error("{0}")]
    Unavailable(String),
    /// The cluster said to try again later (busy, a temporary failure) and the SDK gave up
    /// trying.
    #[error("{0}")]
    Temporary(String),
    /// The request cannot be served as it is (a key too long, a value too large).
    #[error("{0}")]
    Invalid(String),
    /// The cluster answered with another error.
    #[error("{0}")]
    Service(String),
}

type Result<T> = std::result::Result<T, StoreError>;

fn from_sdk(what: &str, e: &couchbase::error::Error) -> StoreError {
    let m = format!("{what}: {e}");
    match e.kind() {
        ErrorKind::DocumentNotFound
        | ErrorKind::BucketNotFound
        | ErrorKind::ScopeNotFound
        | ErrorKind::CollectionNotFound
        | ErrorKind::IndexNotFound => StoreError::NotFound(m),
        ErrorKind::DocumentExists => StoreError::Exists(m),
        ErrorKind::CasMismatch => StoreError::CasMismatch(m),
        ErrorKind::TemporaryFailure
        | ErrorKind::ServerTimeout
        | ErrorKind::DocumentLocked
        | ErrorKind::RateLimitedFailure
        | ErrorKind::DurabilityWriteInProgress => StoreError::Temporary(m),
        ErrorKind::AuthenticationFailure
        | ErrorKind::ServiceNotAvailable(_)
        | ErrorKind::RequestCanceled
        | ErrorKind::ClusterDropped => StoreError::Unavailable(m),
        ErrorKind::InvalidArgument(_) | ErrorKind::ValueTooLarge | ErrorKind::EncodingFailure(_) => {
            StoreError::Invalid(m)
        }
        _ => StoreError::Service(m),
    }
}

/// The calls the host's own stores make, counted for `/metrics`.
#[derive(Debug, Clone, Copy)]
enum StoreOp {
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
fn count_store<T>(op: StoreOp, r: Result<T>) -> Result<T> {
    use StoreError as E;
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
    super::calls::nonzero(&STORE_OPS, &STORE_OUTCOMES, &STORE_COUNTS)
}

/// A search's hits, best first, and how many documents it matched in all.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHits {
    /// The hits the request's limit let through.
    pub hits: Vec<SearchHit>,
    /// Every document the query matched (the Search service's `total_hits`).
    pub total: u64,
}

/// One hit of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The document's key.
    pub key: String,
    /// Its score.
    pub score: f64,
    /// The stored fields asked for, when any came back.
    pub fields: Option<Value>,
}

/// A document as read: its body and CAS.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// The body.
    pub value: Value,
    /// Its CAS: the version a guarded write names.
    pub cas: u64,
}

/// One collection (`bucket.scope.collection`) of the cluster a [`Connection`] reaches. A clone
/// shares the connection once it is made.
#[derive(Clone)]
pub struct Store {
    connection: Arc<Connection>,
    /// `bucket`, `scope`, `collection`.
    path: [String; 3],
    timeout: Duration,
    cluster: OnceCell<Cluster>,
    /// The bucket's handle, made once (see [`Store::bucket_by`]).
    bucket: OnceCell<couchbase::bucket::Bucket>,
    /// Set once the collection's id is resolved (see [`Store::resolve`]).
    resolved: OnceCell<()>,
}

impl Store {
    /// The store for `bucket.scope.collection` over `connection`; each call bounded by `timeout`.
    pub fn new(connection: Arc<Connection>, bucket: &str, scope: &str, collection: &str, timeout: Duration) -> Self {
        Store {
            connection,
            path: [bucket.to_string(), scope.to_string(), collection.to_string()],
            timeout,
            cluster: OnceCell::new(),
            bucket: OnceCell::new(),
            resolved: OnceCell::new(),
        }
    }

    /// `bucket.scope.collection`.
    pub fn path(&self) -> String {
        self.path.join(".")
    }

    fn no_answer(&self, what: &str) -> StoreError {
        StoreError::Unavailable(format!(
            "no answer from Couchbase ({}) within {:?} while {what} in {}",
            self.connection.connection_string,
            self.timeout,
            self.path()
        ))
    }

    /// The SDK's cluster, connected by `deadline`.
    async fn cluster_by(&self, deadline: tokio::time::Instant) -> Result<&Cluster> {
        let connecting = self.cluster.get_or_try_init(|| connect(&self.connection));
        match tokio::time::timeout_at(deadline, connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(_)) | Err(_) => Err(self.no_answer("connecting")),
        }
    }

    /// The bucket's handle, made once and kept: the SDK 1.1 gives each `cluster.bucket(..)` an
    /// agent provider that a spawned task fills, and its `get_agent` checks for the agent, then
    /// awaits a `Notify` it starts listening on only afterwards (`couchbase`'s
    /// `clients/agent_provider.rs`): a call that loses that race waits forever. A handle made
    /// per call raced on every call (the rare stalls seen under load); a kept one can lose it
    /// only on its first call, which [`Store::resolve`] makes alone and tries again.
    async fn bucket_by(&self, deadline: tokio::time::Instant) -> Result<&couchbase::bucket::Bucket> {
        let cluster = self.cluster_by(deadline).await?;
        Ok(self.bucket.get_or_init(|| async { cluster.bucket(&self.path[0]) }).await)
    }

    /// Makes the SDK resolve the collection's id, once, with a single read in a task of its own,
    /// before any batch runs on it. The SDK 1.1's cache of collection ids
    /// (`couchbase-core`'s `collection_resolver_cached.rs`) is not safe for concurrent first use:
    /// the first caller resolves while the others wait on a `Notify` they may start polling only
    /// after `notify_waiters` has fired (they then wait forever); and it sets the entry after it
    /// has awaited the resolution, so a first caller dropped meanwhile (by a timeout) leaves the
    /// entry pending for every later call. Here one read resolves it, alone, in a task of its own
    /// that completes even if its caller gives up. (The bucket handle's own race: see
    /// [`Store::bucket_by`].)
    async fn resolve(&self, deadline: tokio::time::Instant) -> Result<()> {
        let bucket = self.bucket_by(deadline).await?;
        let once = self.resolved.get_or_try_init(|| async {
            let [_, s, c] = self.path.clone();
            loop {
                let collection = bucket.scope(&s).collection(&c);
                let first = tokio::spawn(async move {
                    match collection.get("_quarry::resolve", None).await {
                        Err(e) if !matches!(e.kind(), ErrorKind::DocumentNotFound) => {
                            Err(from_sdk("resolving the collection", &e))
                        }
                        _ => Ok(()),
                    }
                });
                // A first read that lost the agent provider's race never ends: given up after a
                // moment and made again, it finds the agent there.
                let attempt = (tokio::time::Instant::now() + FIRST_READ).min(deadline);
                // Not aborted when given up: a resolution dropped part-way would leave the
                // resolver's entry pending (above); a read stuck in the race is one idle task.
                match tokio::time::timeout_at(attempt, first).await {
                    Ok(Ok(r)) => return r,
                    Ok(Err(e)) => return Err(StoreError::Service(format!("resolving the collection: {e}"))),
                    Err(_) if attempt < deadline => continue,
                    Err(_) => return Err(self.no_answer("resolving the collection")),
                }
            }
        });
        once.await.map(|_| ())
    }

    /// Runs `op` on the collection within the timeout, connecting first if needed; counts it
    /// as `kind` for `/metrics`.
    async fn bounded<T, F>(&self, kind: StoreOp, what: &str, op: impl FnOnce(Collection) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let run = async {
            self.resolve(deadline).await?;
            let [_, s, c] = &self.path;
            let collection = self.bucket_by(deadline).await?.scope(s).collection(c);
            tokio::time::timeout_at(deadline, op(collection)).await.map_err(|_| self.no_answer(what))?
        };
        count_store(kind, run.await)
    }

    /// Checks that the bucket, the scope and the collection exist (through the management API,
    /// which answers at once where a document call on a missing one retries until it times out).
    pub async fn check(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let cluster = self.cluster_by(deadline).await?;
        let [b, s, c] = &self.path;
        let look = async {
            match cluster.buckets().get_bucket(b, None).await {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::BucketNotFound) => {
                    return Err(StoreError::NotFound(format!(
                        "bucket {b:?} does not exist; create it, or name another"
                    )));
                }
                Err(e) => return Err(from_sdk("looking up the bucket", &e)),
            }
            // A read, so tried again if the bucket handle's first call lost the SDK's race.
            let bucket = self.bucket_by(deadline).await?;
            let scopes = loop {
                let attempt = (tokio::time::Instant::now() + FIRST_READ).min(deadline);
                match tokio::time::timeout_at(attempt, bucket.collections().get_all_scopes(None)).await {
                    Ok(r) => break r.map_err(|e| from_sdk("listing the scopes", &e))?,
                    Err(_) if attempt < deadline => continue,
                    Err(_) => return Err(self.no_answer("listing the scopes")),
                }
            };
            let Some(scope) = scopes.iter().find(|x| x.name() == s) else {
                return Err(StoreError::NotFound(format!(
                    "bucket {b:?} has no scope {s:?}; create it, or name another"
                )));
            };
            if !scope.collections().iter().any(|x| x.name() == c) {
                return Err(StoreError::NotFound(format!(
                    "scope {b}.{s} has no collection {c:?}; create it, or name another"
                )));
            }
            Ok(())
        };
        tokio::time::timeout_at(deadline, look).await.map_err(|_| self.no_answer("looking up the collection"))?
    }

    /// The document at `key`, if there is one.
    pub async fn get(&self, key: &str) -> Result<Option<Doc>> {
        self.bounded(StoreOp::Get, "reading a document", |c| async move {
            match c.get(key, None).await {
                Ok(r) => {
                    let value = r.content_as::<Value>().map_err(|e| from_sdk("decoding a document", &e))?;
                    Ok(Some(Doc { value, cas: r.cas() }))
                }
                Err(e) if matches!(e.kind(), ErrorKind::DocumentNotFound) => Ok(None),
                Err(e) => Err(from_sdk(&format!("reading {key:?}"), &e)),
            }
        })
        .await
    }

    /// The documents at `keys`, in order, [`BATCH`] at a time.
    pub async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Doc>>> {
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(BATCH) {
            // Futures built in a loop, not by a closure: the caller's future must stay `Send`
            // for every lifetime (wasmtime's host calls), which a borrowing closure defeats.
            let mut reads = Vec::with_capacity(batch.len());
            for k in batch {
                reads.push(self.get(k));
            }
            for r in futures::future::join_all(reads).await {
                out.push(r?);
            }
        }
        Ok(out)
    }

    /// Writes every document (created or replaced, whatever is there), [`BATCH`] at a time.
    /// A data node's temporary failure (TMPFAIL, a locked document) the SDK tries again itself,
    /// with a growing pause, until the timeout. Idempotent: writing a batch again writes the
    /// same documents.
    pub async fn upsert_many(&self, docs: &[(String, Value)]) -> Result<()> {
        for batch in docs.chunks(BATCH) {
            let mut writes = Vec::with_capacity(batch.len());
            for (k, v) in batch {
                writes.push(self.upsert(k, v, None));
            }
            futures::future::join_all(writes).await.into_iter().collect::<Result<Vec<u64>>>()?;
        }
        Ok(())
    }

    /// Writes `value` at `key`, whatever is there; with `expiry`, the document ends after it.
    pub async fn upsert(&self, key: &str, value: &Value, expiry: Option<Duration>) -> Result<u64> {
        self.bounded(StoreOp::Upsert, "writing a document", |c| async move {
            let mut opts = couchbase::options::kv_options::UpsertOptions::new();
            if let Some(e) = expiry {
                opts = opts.expiry(e);
            }
            c.upsert(key, value, opts).await.map(|r| r.cas()).map_err(|e| from_sdk(&format!("writing {key:?}"), &e))
        })
        .await
    }

    /// Creates the document at `key`; [`StoreError::Exists`] when there is one.
    pub async fn insert(&self, key: &str, value: &Value, expiry: Option<Duration>) -> Result<u64> {
        self.bounded(StoreOp::Insert, "creating a document", |c| async move {
            let mut opts = couchbase::options::kv_options::InsertOptions::new();
            if let Some(e) = expiry {
                opts = opts.expiry(e);
            }
            c.insert(key, value, opts).await.map(|r| r.cas()).map_err(|e| from_sdk(&format!("creating {key:?}"), &e))
        })
        .await
    }

    /// Replaces the document at `key` if it is still at `cas`; [`StoreError::CasMismatch`]
    /// when it changed, [`StoreError::NotFound`] when it is gone.
    pub async fn replace(&self, key: &str, value: &Value, cas: u64, expiry: Option<Duration>) -> Result<u64> {
        self.bounded(StoreOp::Replace, "replacing a document", |c| async move {
            let mut opts = couchbase::options::kv_options::ReplaceOptions::new().cas(cas);
            if let Some(e) = expiry {
                opts = opts.expiry(e);
            }
            c.replace(key, value, opts).await.map(|r| r.cas()).map_err(|e| from_sdk(&format!("replacing {key:?}"), &e))
        })
        .await
    }

    /// Removes the document at `key` (only if it is at `cas`, when given). A missing document is
    /// [`StoreError::NotFound`].
    pub async fn remove(&self, key: &str, cas: Option<u64>) -> Result<()> {
        self.bounded(StoreOp::Remove, "removing a document", |c| async move {
            let mut opts = couchbase::options::kv_options::RemoveOptions::new();
            if let Some(cas) = cas {
                opts = opts.cas(cas);
            }
            c.remove(key, opts).await.map(|_| ()).map_err(|e| from_sdk(&format!("removing {key:?}"), &e))
        })
        .await
    }

    async fn remove_if_there(&self, key: &str) -> Result<()> {
        match self.remove(key, None).await {
            Err(StoreError::NotFound(_)) => Ok(()),
            r => r,
        }
    }

    /// Removes every document of `keys` that is there, [`BATCH`] at a time; a missing one is
    /// no error (removing twice removes the same).
    pub async fn remove_many(&self, keys: &[String]) -> Result<()> {
        for batch in keys.chunks(BATCH) {
            let mut removals = Vec::with_capacity(batch.len());
            for k in batch {
                removals.push(self.remove_if_there(k));
            }
            futures::future::join_all(removals).await.into_iter().collect::<Result<Vec<()>>>()?;
        }
        Ok(())
    }
}

/// A vector field a Search index must map for the store's use.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorField {
    /// Its path in the documents (`embedding`).
    pub path: String,
    /// Its dimension.
    pub dims: u32,
    /// `dot_product` or `l2_norm`.
    pub similarity: String,
}

impl Store {
    /// Runs `op` on the scope within the timeout, connecting first if needed; counts it as
    /// `kind` for `/metrics`.
    async fn scope_bounded<T, F>(
        &self,
        kind: StoreOp,
        what: &str,
        op: impl FnOnce(couchbase::scope::Scope) -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let run = async {
            self.resolve(deadline).await?;
            let scope = self.bucket_by(deadline).await?.scope(&self.path[1]);
            tokio::time::timeout_at(deadline, op(scope)).await.map_err(|_| self.no_answer(what))?
        };
        count_store(kind, run.await)
    }

    /// Makes sure the scope has Search index `name` mapping `vector`: creates it from `params`
    /// (its `doc_config` and `mapping`) when it is missing, and checks an existing one maps the
    /// same dimension and similarity at the same path (an index made for another model would
    /// answer nonsense). Returns whether it created the index. Two hosts creating it at once is
    /// no error: the one that loses checks the winner's.
    pub async fn ensure_index(
        &self,
        name: &str,
        params: std::collections::HashMap<String, Value>,
        vector: &VectorField,
    ) -> Result<bool> {
        use couchbase::management::search::index::SearchIndex;
        let [bucket, ..] = &self.path;
        if let Some(existing) = self.index_definition(name).await? {
            return self.check_index(name, &existing, vector).map(|()| false);
        }
        let create = |params: std::collections::HashMap<String, Value>| {
            let index = SearchIndex::new(name, "fulltext-index").source_name(bucket.clone()).params(params);
            self.scope_bounded(StoreOp::Index, "creating a search index", |s| async move {
                s.search_indexes()
                    .upsert_index(index, None)
                    .await
                    .map_err(|e| from_sdk(&format!("creating search index {name:?}"), &e))
            })
        };
        let mut created = create(params.clone()).await;
        // A cluster before 8.0 parses mappings strictly and knows no `scoring_model`: the index
        // is made without it (scored by tf-idf, the only model those clusters have).
        if let Err(e) = &created
            && e.to_string().contains("invalid keys")
            && e.to_string().contains("scoring_model")
        {
            let mut older = params;
            if let Some(Value::Object(m)) = older.get_mut("mapping") {
                m.remove("scoring_model");
            }
            tracing::info!(index = name, "the cluster predates Couchbase 8.0: its search index scores text by tf-idf");
            created = create(older).await;
        }
        match created {
            Ok(()) => Ok(true),
            // The SDK 1.1 reports "already exists" as IndexNotFound: look again.
            Err(e @ (StoreError::NotFound(_) | StoreError::Service(_))) => match self.index_definition(name).await? {
                Some(existing) => self.check_index(name, &existing, vector).map(|()| false),
                None => Err(StoreError::Service(format!("search index {name:?} could not be created: {e}"))),
            },
            Err(e) => Err(e),
        }
    }

    /// Index `name`'s definition, if the scope has it.
    pub async fn index_definition(&self, name: &str) -> Result<Option<Value>> {
        self.scope_bounded(StoreOp::Index, "reading a search index", |s| async move {
            match s.search_indexes().get_index(name, None).await {
                Ok(i) => serde_json::to_value(&i).map(Some).map_err(|e| StoreError::Service(e.to_string())),
                Err(e) if matches!(e.kind(), ErrorKind::IndexNotFound) => Ok(None),
                Err(e) => Err(from_sdk(&format!("reading search index {name:?}"), &e)),
            }
        })
        .await
    }

    fn check_index(&self, name: &str, def: &Value, want: &VectorField) -> Result<()> {
        let fields = super::search::vector_fields(def);
        let found = fields.iter().find(|f| f.path == want.path);
        match found {
            Some(f) if f.dims == want.dims && f.similarity == want.similarity => Ok(()),
            Some(f) => Err(StoreError::Invalid(format!(
                "search index {name:?} maps {} as {} dimensions by {}, not {} by {}: drop the index (the corpus makes it again), or give the corpus another index name",
                want.path, f.dims, f.similarity, want.dims, want.similarity
            ))),
            None => Err(StoreError::Invalid(format!(
                "search index {name:?} maps no vector field {}: drop it (the corpus makes it again), or give the corpus another index name",
                want.path
            ))),
        }
    }

    /// The hits of `request` on index `name` (as many as `opts` asks for), as `(document key,
    /// score)`.
    pub async fn search(
        &self,
        name: &str,
        request: couchbase::search::request::SearchRequest,
        opts: couchbase::options::search_options::SearchOptions,
    ) -> Result<Vec<(String, f64)>> {
        let found = self.search_hits(name, request, opts).await?;
        Ok(found.hits.into_iter().map(|h| (h.key, h.score)).collect())
    }

    /// [`Store::search`] with each hit's stored fields (those `opts` asks for) and the number of
    /// documents the query matched in all.
    pub async fn search_hits(
        &self,
        name: &str,
        request: couchbase::search::request::SearchRequest,
        opts: couchbase::options::search_options::SearchOptions,
    ) -> Result<SearchHits> {
        self.scope_bounded(StoreOp::Search, "searching", |s| async move {
            let mut res =
                s.search(name, request, opts).await.map_err(|e| from_sdk(&format!("searching index {name:?}"), &e))?;
            let mut hits = Vec::new();
            let mut rows = res.rows();
            while let Some(row) = rows.next().await {
                let row = row.map_err(|e| from_sdk(&format!("reading the hits of index {name:?}"), &e))?;
                let fields = row.fields::<Value>().ok();
                hits.push(SearchHit { key: row.id, score: row.score, fields });
            }
            drop(rows);
            let total = res
                .metadata()
                .map_err(|e| from_sdk(&format!("reading the totals of index {name:?}"), &e))?
                .metrics
                .total_hits;
            Ok(SearchHits { hits, total })
        })
        .await
    }
}
