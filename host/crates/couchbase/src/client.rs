//! One instance's clients: the SDK's `Cluster` (buckets, scopes, scoped indexes and searches)
//! and its core `Agent` (cluster-level indexes and searches), each made at first use, every
//! call bounded by the grant's timeout.

use std::sync::Arc;

use couchbase::cluster::Cluster;
use couchbase::error::ErrorKind;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::connection::{connect, rustls_config};
use super::errors::{Result, sdk_error};
use super::grant::{CouchbaseGrant, check_bucket_name};
use crate::wit::{CouchbaseError, ScopeInfo};

/// One instance's link to Couchbase: the grant, and the SDK's cluster and core agent, each
/// made at its first use (connecting costs a bootstrap; a tool may never need the agent).
pub struct Client {
    pub(super) grant: CouchbaseGrant,
    cluster: OnceCell<Cluster>,
    agent: OnceCell<couchbase_core::agent::Agent>,
    /// Buckets seen to exist, so that opening an instance (bucket, scopes, indexes) and each
    /// search do not look them up again.
    known_buckets: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// A handle per bucket, made once: the SDK 1.1 gives each `cluster.bucket(..)` an agent
    /// provider whose `get_agent` can miss the wake-up of the task that fills it and wait
    /// forever (`couchbase`'s `clients/agent_provider.rs`); a handle made per call risked that
    /// on every call, a kept one only on its first.
    buckets: parking_lot::Mutex<std::collections::HashMap<String, couchbase::bucket::Bucket>>,
    /// Cluster-level indexes seen listed on a bucket the grant covers whole (at open, or by an
    /// earlier search), by the full name the cluster lists them under (`idx` for a bucket-level
    /// index, `bucket.scope.idx` for a scoped one): a cluster-level search names the index by
    /// that name, so only that name may authorise it.
    pub(super) allowed_indexes: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// The most bytes of rows one search may bring into the host (the instance's `max_output`):
    /// the rows are collected before the guest sees them.
    pub(super) max_bytes: usize,
}

impl Client {
    /// A link for `grant`; a search's rows may take at most `max_bytes` in the host.
    pub fn new(grant: CouchbaseGrant, max_bytes: u64) -> Arc<Client> {
        Arc::new(Client {
            grant,
            cluster: OnceCell::new(),
            agent: OnceCell::new(),
            known_buckets: Default::default(),
            buckets: Default::default(),
            allowed_indexes: Default::default(),
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        })
    }

    /// Runs `op` against the cluster, connecting first if needed, all within the timeout.
    pub(super) async fn bounded<'a, T, F>(&'a self, what: &str, op: impl FnOnce(&'a Cluster) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.grant.timeout;
        let cluster =
            tokio::time::timeout_at(deadline, self.cluster()).await.map_err(|_| self.no_answer("connecting"))??;
        tokio::time::timeout_at(deadline, op(cluster)).await.map_err(|_| self.no_answer(what))?
    }

    pub(super) fn no_answer(&self, what: &str) -> CouchbaseError {
        let c = &self.grant.connection;
        // The SDK retries a refused password or a closed port until the timeout: connecting is
        // where bad credentials show. Later, the cluster is up but slow.
        let hint = if what == "connecting" {
            format!("check that the cluster is up and that user {:?} and its password are right", c.username)
        } else {
            "the cluster is connected but slow; raise grants.couchbase.timeout if this is expected".to_string()
        };
        CouchbaseError::Unavailable(format!(
            "no answer from Couchbase ({}, connection {:?}) within {:?} while {what}: {hint}",
            c.connection_string, self.grant.connection_name, self.grant.timeout
        ))
    }

    /// The core agent, connected within the deadline.
    pub(super) async fn agent_by(&self, deadline: Instant) -> Result<&couchbase_core::agent::Agent> {
        tokio::time::timeout_at(deadline, self.agent()).await.map_err(|_| self.no_answer("connecting"))?
    }

    async fn cluster(&self) -> Result<&Cluster> {
        self.cluster.get_or_try_init(|| connect(&self.grant.connection)).await
    }

    async fn agent(&self) -> Result<&couchbase_core::agent::Agent> {
        use couchbase_core::address::Address;
        use couchbase_core::authenticator::{Authenticator, PasswordAuthenticator};
        use couchbase_core::options::agent::{AgentOptions, SeedConfig};
        self.agent
            .get_or_try_init(|| async {
                let c = &self.grant.connection;
                let spec = couchbase_connstr::parse(&c.connection_string)
                    .map_err(|e| CouchbaseError::InvalidRequest(format!("connection string: {e}")))?;
                let spec = couchbase_connstr::resolve(spec, None)
                    .await
                    .map_err(|e| CouchbaseError::Unavailable(format!("resolving the connection string: {e}")))?;
                let addr = |a: couchbase_connstr::Address| Address { host: a.host, port: a.port };
                let seed = SeedConfig::new()
                    .memd_addrs(spec.memd_hosts.into_iter().map(addr).collect())
                    .http_addrs(spec.http_hosts.into_iter().map(addr).collect());
                let auth = Authenticator::PasswordAuthenticator(PasswordAuthenticator {
                    username: c.username.clone(),
                    password: c.password.0.clone(),
                });
                let tls = if spec.use_ssl { Some(rustls_config(c)?) } else { None };
                let agent = couchbase_core::agent::Agent::new(AgentOptions::new(seed, auth).tls_config(tls)).await;
                Ok(agent.map_err(|e| CouchbaseError::Unavailable(e.to_string()))?)
            })
            .await
    }

    /// Whether `bucket` exists.
    pub(super) async fn bucket_exists(&self, bucket: &str) -> Result<bool> {
        check_bucket_name(bucket).map_err(CouchbaseError::InvalidRequest)?;
        if !self.grant.allows_bucket(bucket) {
            return Err(self.grant.deny_bucket(bucket).into());
        }
        let exists = self
            .bounded("looking up the bucket", |c| async move {
                match c.buckets().get_bucket(bucket, None).await {
                    Ok(_) => Ok(true),
                    Err(e) if matches!(e.kind(), ErrorKind::BucketNotFound) => Ok(false),
                    Err(e) => Err(sdk_error(&e)),
                }
            })
            .await?;
        if exists {
            self.known_buckets.lock().insert(bucket.to_string());
        }
        Ok(exists)
    }

    /// The kept handle of `bucket` (see [`Client::buckets`]).
    pub(super) fn bucket(&self, cluster: &Cluster, bucket: &str) -> couchbase::bucket::Bucket {
        self.buckets.lock().entry(bucket.to_string()).or_insert_with(|| cluster.bucket(bucket)).clone()
    }

    /// Fails with `not-found` unless `bucket` exists; asks the cluster only the first time.
    pub(super) async fn ensure_bucket(&self, bucket: &str) -> Result<()> {
        if self.known_buckets.lock().contains(bucket) {
            return Ok(());
        }
        match self.bucket_exists(bucket).await? {
            true => Ok(()),
            false => Err(CouchbaseError::NotFound(format!("bucket {bucket:?} does not exist")).into()),
        }
    }

    /// The scopes and collections of `bucket` (the bucket is looked up first: the SDK hangs on
    /// a missing one).
    pub(super) async fn scopes(&self, bucket: &str) -> Result<Vec<ScopeInfo>> {
        self.ensure_bucket(bucket).await?;
        self.bounded("listing scopes", |c| async move {
            let scopes = self.bucket(c, bucket).collections().get_all_scopes(None).await.map_err(|e| sdk_error(&e))?;
            Ok(scopes
                .iter()
                .map(|s| ScopeInfo {
                    name: s.name().to_string(),
                    collections: s.collections().iter().map(|c| c.name().to_string()).collect(),
                })
                .collect())
        })
        .await
    }
}
