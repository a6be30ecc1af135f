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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use couchbase::cluster::Cluster;
use couchbase::error::ErrorKind;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::bindings::quarry::retrieval::couchbase::{
    CouchbaseError, Host, IndexScope, ScopeInfo, SearchIndex, SearchRow, VectorField, VectorSearch,
};
use crate::sandbox::StoreState;

/// The default bound on one call, connecting included (never more than the deadline allows).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most rows (`limit`) or candidates (`k`) one search may ask for: the Search service's
/// default result window, beyond which a server refuses anyway.
pub const MAX_ROWS: u32 = 10_000;

/// Checks a bucket name against Couchbase's rules before it reaches a URL: 1 to 100 of
/// `A-Z a-z 0-9 _ - .`, not starting with `.`. Couchbase also allows `%`, which is refused here:
/// a name is put into request paths as it is, and `%2e%2e` would be a path segment `..`.
pub fn check_bucket_name(name: &str) -> std::result::Result<(), String> {
    let ok = (1..=100).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bucket name {} is not a Couchbase bucket name: 1 to 100 letters, digits, `_`, `-` and `.`, not starting with `.`",
            shown(name)
        ))
    }
}

/// Checks a scope name: 1 to 251 of `A-Z a-z 0-9 _ -` (Couchbase's rule, without its `%`).
pub fn check_scope_name(name: &str) -> std::result::Result<(), String> {
    let ok =
        (1..=251).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("scope name {} is not a Couchbase scope name: 1 to 251 letters, digits, `_` and `-`", shown(name)))
    }
}

/// Checks a search index name: a letter, then letters, digits, `_` and `-` (the Search
/// service's rule), at most 255 bytes. With `qualified`, `bucket.scope.index` is accepted too
/// (how a cluster-level listing names a scoped index), each part checked by its own rule.
pub fn check_index_name(name: &str, qualified: bool) -> std::result::Result<(), String> {
    let short = |n: &str| {
        n.len() <= 255
            && n.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    let ok = short(name)
        || (qualified
            && name.len() <= 610
            && matches!(name.rsplitn(3, '.').collect::<Vec<_>>()[..], [i, s, b]
                if short(i) && check_scope_name(s).is_ok() && check_bucket_name(b).is_ok()));
    if ok {
        Ok(())
    } else {
        let form = if qualified { " (or `bucket.scope.index`)" } else { "" };
        Err(format!(
            "index name {} is not a Couchbase search index name: a letter, then letters, digits, `_` and `-`{form}",
            shown(name)
        ))
    }
}

/// A guest-chosen name for a message: quoted, and cut to 64 characters so a hostile one
/// cannot make the error (and the log) large.
fn shown(name: &str) -> String {
    crate::text::quoted_prefix(name, 64)
}

/// A secret that `Debug` does not print.
#[derive(Clone, PartialEq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A named connection (`[couchbase.NAME]`), credentials resolved at load.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// `couchbase://…` or `couchbases://…`.
    pub connection_string: String,
    /// The RBAC user.
    pub username: String,
    /// Its password.
    pub password: Secret,
    /// A CA certificate (PEM) to trust instead of the system roots (TLS only).
    pub ca_pem: Option<Vec<u8>>,
    /// Skip certificate checks (TLS only; development clusters).
    pub accept_invalid_certs: bool,
}

/// What an instance may do with Couchbase (`[tools.NAME.grants.couchbase]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CouchbaseGrant {
    /// The connection's name in the config, for messages.
    pub connection_name: String,
    /// The connection.
    pub connection: Arc<Connection>,
    /// `(bucket, scope)` pairs; scope `*` is the whole bucket.
    pub scopes: Vec<(String, String)>,
    /// Bound on each call, connecting included.
    pub timeout: Duration,
}

impl CouchbaseGrant {
    /// Whether any scope of `bucket` is granted.
    pub fn allows_bucket(&self, bucket: &str) -> bool {
        self.scopes.iter().any(|(b, _)| b == bucket)
    }

    /// Whether scope `scope` of `bucket` is granted.
    pub fn allows_scope(&self, bucket: &str, scope: &str) -> bool {
        self.scopes.iter().any(|(b, s)| b == bucket && (s == "*" || s == scope))
    }

    /// Whether the whole of `bucket` is granted (needed for its cluster-level indexes).
    pub fn allows_whole_bucket(&self, bucket: &str) -> bool {
        self.scopes.iter().any(|(b, s)| b == bucket && s == "*")
    }

    fn granted(&self) -> String {
        self.scopes.iter().map(|(b, s)| format!("{b}.{s}")).collect::<Vec<_>>().join(", ")
    }

    fn deny_bucket(&self, bucket: &str) -> CouchbaseError {
        CouchbaseError::Denied(format!(
            "bucket {bucket:?} is not in this instance's grants.couchbase.scopes ({}); add \"{bucket}.SCOPE\" to use it",
            self.granted()
        ))
    }
}

/// One instance's link to Couchbase: the grant, and the SDK's cluster and core agent, each
/// made at its first use (connecting costs a bootstrap; a tool may never need the agent).
pub struct CouchbaseLink {
    grant: CouchbaseGrant,
    cluster: OnceCell<Cluster>,
    agent: OnceCell<couchbase_core::agent::Agent>,
    /// Buckets seen to exist, so that opening an instance (bucket, scopes, indexes) and each
    /// search do not look them up again.
    known: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Cluster-level indexes seen listed on a bucket the grant covers whole (at open, or by an
    /// earlier search), by the full name the cluster lists them under (`idx` for a bucket-level
    /// index, `bucket.scope.idx` for a scoped one): a cluster-level search names the index by
    /// that name, so only that name may authorise it.
    allowed_indexes: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The most bytes of rows one search may bring into the host (the instance's `max_output`):
    /// the rows are collected before the guest sees them.
    max_bytes: usize,
}

/// Errors inside the capability, before they become the WIT's.
type Result<T> = std::result::Result<T, CouchbaseError>;

impl CouchbaseLink {
    /// A link for `grant`; a search's rows may take at most `max_bytes` in the host.
    pub fn new(grant: CouchbaseGrant, max_bytes: u64) -> Arc<CouchbaseLink> {
        Arc::new(CouchbaseLink {
            grant,
            cluster: OnceCell::new(),
            agent: OnceCell::new(),
            known: Default::default(),
            allowed_indexes: Default::default(),
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        })
    }

    /// Runs `op` against the cluster, connecting first if needed, all within the timeout.
    async fn bounded<'a, T, F>(&'a self, what: &str, op: impl FnOnce(&'a Cluster) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.grant.timeout;
        let cluster =
            tokio::time::timeout_at(deadline, self.cluster()).await.map_err(|_| self.no_answer("connecting"))??;
        tokio::time::timeout_at(deadline, op(cluster)).await.map_err(|_| self.no_answer(what))?
    }

    fn no_answer(&self, what: &str) -> CouchbaseError {
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
    async fn agent_by(&self, deadline: Instant) -> Result<&couchbase_core::agent::Agent> {
        tokio::time::timeout_at(deadline, self.agent()).await.map_err(|_| self.no_answer("connecting"))?
    }

    async fn cluster(&self) -> Result<&Cluster> {
        self.cluster
            .get_or_try_init(|| async {
                let c = &self.grant.connection;
                let auth = couchbase::authenticator::PasswordAuthenticator::new(&c.username, &c.password.0);
                let mut opts = couchbase::options::cluster_options::ClusterOptions::new(auth.into());
                if c.connection_string.starts_with("couchbases://") {
                    let mut tls = couchbase::options::cluster_options::TlsOptions::new()
                        .danger_accept_invalid_certs(c.accept_invalid_certs);
                    if let Some(pem) = &c.ca_pem {
                        tls = tls.add_ca_certificates(ca_certificates(pem)?);
                    }
                    opts = opts.tls_options(tls);
                }
                Cluster::connect(&c.connection_string, opts).await.map_err(|e| sdk_error(&e))
            })
            .await
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
                couchbase_core::agent::Agent::new(AgentOptions::new(seed, auth).tls_config(tls))
                    .await
                    .map_err(|e| CouchbaseError::Unavailable(e.to_string()))
            })
            .await
    }

    /// Whether `bucket` exists.
    pub async fn bucket_exists(&self, bucket: &str) -> Result<bool> {
        check_bucket_name(bucket).map_err(CouchbaseError::InvalidRequest)?;
        if !self.grant.allows_bucket(bucket) {
            return Err(self.grant.deny_bucket(bucket));
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
            self.known.lock().unwrap_or_else(|p| p.into_inner()).insert(bucket.to_string());
        }
        Ok(exists)
    }

    /// Fails with `not-found` unless `bucket` exists; asks the cluster only the first time.
    async fn ensure_bucket(&self, bucket: &str) -> Result<()> {
        if self.known.lock().unwrap_or_else(|p| p.into_inner()).contains(bucket) {
            return Ok(());
        }
        match self.bucket_exists(bucket).await? {
            true => Ok(()),
            false => Err(CouchbaseError::NotFound(format!("bucket {bucket:?} does not exist"))),
        }
    }

    /// The scopes and collections of `bucket` (the bucket is looked up first: the SDK hangs on
    /// a missing one).
    pub async fn scopes(&self, bucket: &str) -> Result<Vec<ScopeInfo>> {
        self.ensure_bucket(bucket).await?;
        self.bounded("listing scopes", |c| async move {
            let scopes = c.bucket(bucket).collections().get_all_scopes(None).await.map_err(|e| sdk_error(&e))?;
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

    /// The search indexes at `at`.
    pub async fn search_indexes(&self, at: &IndexScope) -> Result<Vec<SearchIndex>> {
        match at {
            IndexScope::Scoped((bucket, scope)) => {
                self.check_scope(bucket, scope)?;
                self.ensure_bucket(bucket).await?;
                let defs = self
                    .bounded("listing search indexes", |c| async move {
                        let all = c
                            .bucket(bucket.as_str())
                            .scope(scope.as_str())
                            .search_indexes()
                            .get_all_indexes(None)
                            .await
                            .map_err(|e| sdk_error(&e))?;
                        all.iter().map(|i| serde_json::to_value(i).map_err(internal)).collect::<Result<Vec<_>>>()
                    })
                    .await?;
                Ok(defs.iter().map(|d| search_index(d, true)).collect())
            }
            IndexScope::Cluster => {
                if !self.grant.scopes.iter().any(|(_, s)| s == "*") {
                    return Err(CouchbaseError::Denied(format!(
                        "cluster-level search indexes may cover a whole bucket, so they need one granted whole: add \"BUCKET.*\" to grants.couchbase.scopes ({})",
                        self.grant.granted()
                    )));
                }
                let deadline = Instant::now() + self.grant.timeout;
                let agent = self.agent_by(deadline).await?;
                let all = tokio::time::timeout_at(deadline, async {
                    let opts = couchbase_core::options::search_management::GetAllIndexesOptions::new();
                    agent.get_all_search_indexes(&opts).await.map_err(|e| core_error(&e))
                })
                .await
                .map_err(|_| self.no_answer("listing cluster-level search indexes"))??;
                let defs: Vec<Value> =
                    all.iter().map(|i| serde_json::to_value(i).map_err(internal)).collect::<Result<_>>()?;
                // Listed by their full names: a cluster-level search must name a scoped index
                // `bucket.scope.index`, and only the name listed for a granted bucket may pass.
                let granted: Vec<SearchIndex> = defs
                    .iter()
                    .map(|d| search_index(d, false))
                    .filter(|i| self.grant.allows_whole_bucket(&i.source_bucket))
                    .collect();
                self.allowed_indexes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(granted.iter().map(|i| i.name.clone()));
                Ok(granted)
            }
        }
    }

    /// Checks the names (they go into request paths) and then the grant.
    fn check_scope(&self, bucket: &str, scope: &str) -> Result<()> {
        check_bucket_name(bucket).map_err(CouchbaseError::InvalidRequest)?;
        check_scope_name(scope).map_err(CouchbaseError::InvalidRequest)?;
        if self.grant.allows_scope(bucket, scope) {
            return Ok(());
        }
        Err(CouchbaseError::Denied(format!(
            "scope {bucket}.{scope} is not in this instance's grants.couchbase.scopes ({}); add \"{bucket}.{scope}\" to use it",
            self.grant.granted()
        )))
    }

    /// Runs a vector search.
    pub async fn search(&self, q: &VectorSearch) -> Result<Vec<SearchRow>> {
        if q.vector.is_empty() {
            return Err(CouchbaseError::InvalidRequest("the query vector is empty".into()));
        }
        if q.limit == 0 || q.k == 0 {
            return Err(CouchbaseError::InvalidRequest("limit and k must be at least 1".into()));
        }
        if q.limit > MAX_ROWS || q.k > MAX_ROWS {
            return Err(CouchbaseError::InvalidRequest(format!(
                "limit and k may be at most {MAX_ROWS} (the Search service's result window); ask for fewer rows"
            )));
        }
        check_index_name(&q.index, matches!(q.at, IndexScope::Cluster)).map_err(CouchbaseError::InvalidRequest)?;
        match &q.at {
            IndexScope::Scoped((bucket, scope)) => {
                self.check_scope(bucket, scope)?;
                self.scoped_search(bucket, scope, q).await
            }
            IndexScope::Cluster => {
                // The index's bucket decides what the search can reach: look it up, and check
                // that the grant covers the whole bucket.
                let seen = self.allowed_indexes.lock().unwrap_or_else(|p| p.into_inner()).contains(&q.index);
                if !seen {
                    let indexes = self.search_indexes(&IndexScope::Cluster).await?;
                    if !indexes.iter().any(|i| i.name == q.index) {
                        return Err(CouchbaseError::NotFound(format!(
                            "no cluster-level search index {:?} on a bucket granted whole (\"bucket.*\") to this instance",
                            q.index
                        )));
                    }
                    self.allowed_indexes.lock().unwrap_or_else(|p| p.into_inner()).insert(q.index.clone());
                }
                self.cluster_search(q).await
            }
        }
    }

    async fn scoped_search(&self, bucket: &str, scope: &str, q: &VectorSearch) -> Result<Vec<SearchRow>> {
        use couchbase::search::queries::{Query, QueryStringQuery};
        use couchbase::search::request::SearchRequest;
        use couchbase::search::vector::{VectorQuery, VectorSearch as SdkVectorSearch};
        self.ensure_bucket(bucket).await?;
        let mut vq = VectorQuery::with_vector(q.field.as_str(), q.vector.clone()).num_candidates(q.k);
        if let Some(p) = &q.prefilter {
            vq = vq.prefilter(Query::QueryString(QueryStringQuery::new(p.as_str())));
        }
        let req = SearchRequest::with_vector_search(SdkVectorSearch::new(vec![vq], None));
        let mut opts = couchbase::options::search_options::SearchOptions::new().limit(q.limit);
        if !q.fields.is_empty() {
            opts = opts.fields(q.fields.clone());
        }
        self.bounded("searching", |c| async move {
            let mut res =
                c.bucket(bucket).scope(scope).search(q.index.as_str(), req, opts).await.map_err(|e| sdk_error(&e))?;
            let mut out = Rows::new(self.max_bytes);
            let mut rows = res.rows();
            while let Some(row) = rows.next().await {
                let row = row.map_err(|e| sdk_error(&e))?;
                let fields = row.fields::<Value>().ok().map(|f| f.to_string());
                out.push(SearchRow { id: row.id, score: row.score, fields })?;
            }
            Ok(out.rows)
        })
        .await
    }

    async fn cluster_search(&self, q: &VectorSearch) -> Result<Vec<SearchRow>> {
        use couchbase_core::options::search::SearchOptions;
        use couchbase_core::searchx::queries::{MatchNoneQuery, Query, QueryStringQuery};
        use couchbase_core::searchx::query_options::KnnQuery;
        let mut knn = KnnQuery::new(q.field.as_str(), i64::from(q.k)).vector(q.vector.clone());
        if let Some(p) = &q.prefilter {
            knn = knn.filter(Some(Query::QueryString(QueryStringQuery::new(p.as_str()))));
        }
        // The same body the SDK sends for a scoped vector search.
        let mut opts = SearchOptions::new(q.index.as_str())
            .query(Query::MatchNone(MatchNoneQuery::new()))
            .knn(vec![knn])
            .size(q.limit)
            .show_request(false);
        if !q.fields.is_empty() {
            opts = opts.fields(q.fields.clone());
        }
        let deadline = Instant::now() + self.grant.timeout;
        let agent = self.agent_by(deadline).await?;
        tokio::time::timeout_at(deadline, async {
            let mut stream = agent.search(opts).await.map_err(|e| core_error(&e))?;
            let mut out = Rows::new(self.max_bytes);
            while let Some(hit) = stream.next().await {
                let hit = hit.map_err(|e| core_error(&e))?;
                out.push(SearchRow { id: hit.id, score: hit.score, fields: hit.fields.map(|f| f.get().to_string()) })?;
            }
            Ok(out.rows)
        })
        .await
        .map_err(|_| self.no_answer("searching"))?
    }
}

/// Rows collected for the guest, refused once they would take more than the instance's
/// `max_output`: the server (or a hostile one) chooses their size, and they are held in the
/// host until the call returns.
struct Rows {
    rows: Vec<SearchRow>,
    bytes: usize,
    max: usize,
}

impl Rows {
    fn new(max: usize) -> Self {
        Rows { rows: Vec::new(), bytes: 0, max }
    }

    fn push(&mut self, row: SearchRow) -> Result<()> {
        // The id, the fields and the record around them (an f64 and two lengths).
        self.bytes += row.id.len() + row.fields.as_ref().map_or(0, String::len) + 32;
        if self.bytes > self.max {
            return Err(CouchbaseError::Service(format!(
                "the search answered more than grants.max_output ({} bytes) of rows after {} rows; ask for fewer rows or fields",
                self.max,
                self.rows.len()
            )));
        }
        self.rows.push(row);
        Ok(())
    }
}

/// The certificates of a PEM bundle.
fn ca_certificates(pem: &[u8]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| CouchbaseError::InvalidRequest(format!("the connection's ca_file is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(CouchbaseError::InvalidRequest("the connection's ca_file holds no certificate".into()));
    }
    Ok(certs)
}

/// The TLS settings of the core agent, as the SDK derives its own from `TlsOptions`.
fn rustls_config(c: &Connection) -> Result<Arc<rustls::ClientConfig>> {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(internal)?;
    let builder = if c.accept_invalid_certs {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(couchbase_core::insecure_certverfier::InsecureCertVerifier {}))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &c.ca_pem {
            Some(pem) => {
                for cert in ca_certificates(pem)? {
                    roots.add(cert).map_err(internal)?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    Ok(Arc::new(builder.with_no_client_auth()))
}

fn internal(e: impl fmt::Display) -> CouchbaseError {
    CouchbaseError::Service(format!("internal: {e}"))
}

/// Maps an SDK error: what is missing is `not-found`, what did not answer `unavailable`, the
/// rest is the server's `service` error, with the SDK's text (it carries the server's).
fn sdk_error(e: &couchbase::error::Error) -> CouchbaseError {
    let text = e.to_string();
    match e.kind() {
        ErrorKind::BucketNotFound
        | ErrorKind::ScopeNotFound
        | ErrorKind::CollectionNotFound
        | ErrorKind::IndexNotFound => CouchbaseError::NotFound(text),
        ErrorKind::AuthenticationFailure | ErrorKind::ServiceNotAvailable(_) | ErrorKind::RequestCanceled => {
            CouchbaseError::Unavailable(text)
        }
        ErrorKind::InvalidArgument(_) => CouchbaseError::InvalidRequest(text),
        _ => CouchbaseError::Service(text),
    }
}

/// Maps a core (agent) error the same way, by the Search service's own error kinds.
fn core_error(e: &couchbase_core::error::Error) -> CouchbaseError {
    use couchbase_core::error::ErrorKind as Core;
    use couchbase_core::searchx::error::{ErrorKind as Search, ServerErrorKind as Server};
    let text = e.to_string();
    match e.kind() {
        Core::Search(se) => match se.kind() {
            Search::Server(s) => match s.kind() {
                Server::IndexNotFound | Server::SourceNotFound => CouchbaseError::NotFound(text),
                Server::AuthenticationFailure => CouchbaseError::Unavailable(text),
                _ => CouchbaseError::Service(text),
            },
            Search::InvalidArgument { .. } => CouchbaseError::InvalidRequest(text),
            _ => CouchbaseError::Service(text),
        },
        Core::InvalidArgument { .. } => CouchbaseError::InvalidRequest(text),
        _ => CouchbaseError::Service(text),
    }
}

/// A search index from its definition (the SDK's or the core's, serialised). A 7.6 server lists
/// scoped indexes as `bucket.scope.index`; `strip` drops that prefix (a scoped listing, whose
/// searches name the index inside its scope).
fn search_index(def: &Value, strip: bool) -> SearchIndex {
    let full = def.get("name").and_then(Value::as_str).unwrap_or_default();
    let name = if strip { full.rsplit('.').next().unwrap_or(full) } else { full }.to_string();
    SearchIndex {
        name,
        source_bucket: def
            .get("sourceName")
            .or_else(|| def.get("source_name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        vector_fields: vector_fields(def),
        definition: def.to_string(),
    }
}

/// The vector fields an index definition maps: every `vector` (or `vector_base64`) field under
/// the default mapping or a type mapping, by its query path (`a.b.field`).
pub fn vector_fields(def: &Value) -> Vec<VectorField> {
    fn walk(mapping: &Value, prefix: &str, out: &mut Vec<VectorField>) {
        if let Some(fields) = mapping.get("fields").and_then(Value::as_array) {
            for f in fields {
                let ty = f.get("type").and_then(Value::as_str).unwrap_or_default();
                if ty != "vector" && ty != "vector_base64" {
                    continue;
                }
                let leaf = f.get("name").and_then(Value::as_str).unwrap_or_default();
                let path = match (prefix.rsplit_once('.'), leaf.is_empty()) {
                    (_, true) => prefix.to_string(),
                    (Some((parent, _)), false) => format!("{parent}.{leaf}"),
                    (None, false) => leaf.to_string(),
                };
                out.push(VectorField {
                    path,
                    dims: f.get("dims").and_then(Value::as_u64).and_then(|d| u32::try_from(d).ok()).unwrap_or(0),
                    similarity: f.get("similarity").and_then(Value::as_str).unwrap_or_default().to_string(),
                });
            }
        }
        if let Some(props) = mapping.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                let p = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                walk(sub, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    let Some(mapping) = def.pointer("/params/mapping") else { return out };
    if let Some(d) = mapping.get("default_mapping") {
        walk(d, "", &mut out);
    }
    if let Some(types) = mapping.get("types").and_then(Value::as_object) {
        for t in types.values() {
            walk(t, "", &mut out);
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path && a.dims == b.dims);
    out
}

impl StoreState {
    /// The instance's Couchbase link, or `denied` when its config grants none.
    fn couchbase_link(&self) -> Result<Arc<CouchbaseLink>> {
        self.couchbase.clone().ok_or_else(|| {
            CouchbaseError::Denied(
                "this instance has no Couchbase grant; add [tools.NAME.grants.couchbase] with a connection and scopes"
                    .into(),
            )
        })
    }
}

impl Host for StoreState {
    async fn bucket_exists(&mut self, bucket: String) -> wasmtime::Result<Result<bool>> {
        let link = self.couchbase_link();
        Ok(async { link?.bucket_exists(&bucket).await }.await)
    }

    async fn scopes(&mut self, bucket: String) -> wasmtime::Result<Result<Vec<ScopeInfo>>> {
        let link = self.couchbase_link();
        Ok(async { link?.scopes(&bucket).await }.await)
    }

    async fn search_indexes(&mut self, at: IndexScope) -> wasmtime::Result<Result<Vec<SearchIndex>>> {
        let link = self.couchbase_link();
        Ok(async { link?.search_indexes(&at).await }.await)
    }

    async fn search(&mut self, query: VectorSearch) -> wasmtime::Result<Result<Vec<SearchRow>>> {
        let link = self.couchbase_link();
        Ok(async { link?.search(&query).await }.await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vector_fields_in_default_and_type_mappings() {
        let def = json!({"name": "b.s.idx", "sourceName": "b", "params": {"mapping": {
            "default_mapping": {"enabled": false, "properties": {}},
            "types": {"s.c": {"properties": {
                "embedding": {"fields": [{"name": "embedding", "type": "vector", "dims": 384, "similarity": "dot_product"}]},
                "doc": {"properties": {"vec": {"fields": [{"name": "vec", "type": "vector_base64", "dims": 8, "similarity": "l2_norm"}]}}},
                "title": {"fields": [{"name": "title", "type": "text"}]}
            }}}
        }}});
        let idx = search_index(&def, true);
        assert_eq!(idx.name, "idx");
        assert_eq!(idx.source_bucket, "b");
        let f: Vec<_> = idx.vector_fields.iter().map(|f| (f.path.as_str(), f.dims, f.similarity.as_str())).collect();
        assert_eq!(f, [("doc.vec", 8, "l2_norm"), ("embedding", 384, "dot_product")]);
        let plain = json!({"name": "x", "params": {"mapping": {"default_mapping": {"properties": {
            "e": {"fields": [{"name": "e", "type": "vector", "dims": 3}]}}}}}});
        assert_eq!(vector_fields(&plain)[0].path, "e");
        assert!(vector_fields(&json!({"name": "y"})).is_empty());
    }

    /// Names reach request paths as they are: only names by Couchbase's rules pass, and no name
    /// that a URL parser would turn into another path (dot segments, `/`, `?`, `#`, `%`).
    #[test]
    fn names_that_could_steer_a_request_path_are_refused() {
        for ok in ["travel", "travel-sample", "b_1", "my.bucket"] {
            assert!(check_bucket_name(ok).is_ok(), "{ok}");
        }
        for ok in ["inventory", "_default", "tenant-b"] {
            assert!(check_scope_name(ok).is_ok(), "{ok}");
        }
        for ok in ["hotels-vec", "idx_2"] {
            assert!(check_index_name(ok, false).is_ok(), "{ok}");
        }
        assert!(check_index_name("travel.inventory.hotels-vec", true).is_ok());
        assert!(check_index_name("my.bucket.inventory.idx", true).is_ok());
        let steering = [
            "",
            ".",
            "..",
            "../../../../../index/OTHER",
            "%2e%2e",
            "a/b",
            "idx?x=1",
            "idx#frag",
            "idx%2fother",
            "a b",
            "ä",
            "\\..",
        ];
        for bad in steering {
            assert!(check_bucket_name(bad).is_err(), "bucket {bad:?}");
            assert!(check_scope_name(bad).is_err(), "scope {bad:?}");
            assert!(check_index_name(bad, true).is_err(), "index {bad:?}");
        }
        assert!(check_bucket_name(".hidden").is_err());
        assert!(check_bucket_name(&"b".repeat(101)).is_err());
        assert!(check_scope_name("in.ventory").is_err());
        assert!(check_index_name("1idx", false).is_err());
        assert!(check_index_name("travel.inventory.hotels-vec", false).is_err());
        assert!(check_index_name("../inventory.idx", true).is_err());
        // The message shows at most 64 characters of a hostile name.
        let e = check_index_name(&"x/".repeat(1 << 20), false).unwrap_err();
        assert!(e.len() < 400, "{}", e.len());
    }

    #[test]
    fn grants_by_scope_and_bucket() {
        let g = CouchbaseGrant {
            connection_name: "c".into(),
            connection: Arc::new(Connection {
                connection_string: "couchbase://h".into(),
                username: "u".into(),
                password: Secret("p".into()),
                ca_pem: None,
                accept_invalid_certs: false,
            }),
            scopes: vec![("travel".into(), "inventory".into()), ("docs".into(), "*".into())],
            timeout: DEFAULT_TIMEOUT,
        };
        assert!(g.allows_scope("travel", "inventory"));
        assert!(!g.allows_scope("travel", "tenant_b"));
        assert!(!g.allows_whole_bucket("travel"));
        assert!(g.allows_scope("docs", "anything"));
        assert!(g.allows_whole_bucket("docs"));
        assert!(!g.allows_bucket("other"));
        assert_eq!(format!("{:?}", g.connection.password), "Secret(..)");
    }
}
