//! A local Couchbase cluster that answers what the couchbase 1.1.0 Rust SDK sends
//! (shared/reference/couchbase-wire.md): the memcached binary protocol on a KV port, the
//! management REST API and the Search (FTS) REST API, each on its own random port of 127.0.0.1.
//!
//! It is protocol-faithful where the SDK looks: it really checks SCRAM-SHA512 proofs (RFC 5802)
//! and HTTP Basic credentials, refuses bucket selection and config fetches before
//! authentication, advertises its ports only through the cluster config (so the SDK finds the
//! HTTP services the way it does on a real cluster), answers FTS index definitions shaped like
//! Couchbase 7.6 ones, and runs kNN queries for real: dot product against every stored vector,
//! prefilters applied, dimension mismatches rejected. Every request is recorded for tests to
//! assert on ([`FakeCluster::seen`]).
//!
//! Documents over KV are kept with their CAS and expiry and follow a data node's rules (see
//! `docs`). What it does not do: TLS, sub-document operations, durability, mutation tokens,
//! N1QL, analytics, cluster-level index creation. Scoped indexes can be created, replaced (by
//! their uuid) and dropped through the API, and are searched over the live documents. Only SCRAM-SHA512 is offered (a real server also offers
//! SCRAM-SHA256/SHA1, which the SDK only tries after SHA512).
//!
//! Here: the public API, the shared state, the accept loops and the HTTP dispatch; the KV protocol
//! is in `kv` (its SCRAM-SHA512 primitives in `scram`, the documents in `docs`), the HTTP plumbing
//! and the management API in `mgmt`, the Search API in `search` and the bleve queries it runs in
//! `query_string`.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::percent_decode;

mod analysis;
mod docs;
mod kv;
mod mgmt;
mod query_string;
mod scoring;
mod scram;
mod search;

use kv::serve_kv;
use mgmt::{ReplyBody, basic_auth_ok, mgmt, reply_json};
use scram::{ScramSecrets, hmac512, pbkdf2_sha512};
use search::fts;

/// The user the fake accepts, on KV (SCRAM) and HTTP (Basic).
pub const USERNAME: &str = "quarry";
/// Its password.
pub const PASSWORD: &str = "quarry-test-password";

/// What the cluster holds.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The buckets; SELECT_BUCKET and the management API know only these.
    pub buckets: Vec<BucketSpec>,
    /// The Search indexes.
    pub indexes: Vec<IndexSpec>,
    /// Whether the cluster advertises the `vectorSearch` search capability. Without it the SDK
    /// refuses kNN queries itself (FeatureNotAvailable) before sending anything.
    pub vector_search: bool,
    /// Whether scoped index listings name indexes `bucket.scope.index`, as Couchbase 7.6 does
    /// (true), or by their bare name (false). Queries accept both forms either way.
    pub qualified_scoped_names: bool,
    /// Whether the cluster-level listing (`/api/index`) includes scoped indexes (by their
    /// `bucket.scope.index` names), as a 7.6 cluster's does; otherwise it lists only
    /// bucket-level indexes.
    pub cluster_lists_scoped: bool,
    /// Whether the cluster is Couchbase 8.0, whose Search service takes a mapping's
    /// `scoring_model` (`bm25`); a 7.6 one refuses the key (cbft parses mappings strictly).
    pub version_8: bool,
}

/// One bucket.
#[derive(Debug, Clone)]
pub struct BucketSpec {
    /// Its name.
    pub name: String,
    /// Scope name -> its collections' names, in listing order.
    pub scopes: Vec<(String, Vec<String>)>,
}

/// One Search index with a single vector field.
#[derive(Debug, Clone)]
pub struct IndexSpec {
    /// Its (bare) name.
    pub name: String,
    /// The bucket it indexes (`sourceName`).
    pub bucket: String,
    /// `None`: a cluster-level index on the bucket's default collection, reached at
    /// `/api/index/...`. `Some(scope)`: a scoped index, reached at
    /// `/api/bucket/{b}/scope/{s}/index/...`.
    pub scope: Option<String>,
    /// For a scoped index, the collection its type mapping names (`scope.collection`);
    /// `None` takes the scope's first collection in the bucket spec.
    pub collection: Option<String>,
    /// The vector field.
    pub field: String,
    /// Its dimension; query vectors of another length are rejected with a 400.
    pub dims: usize,
    /// The indexed documents.
    pub docs: Vec<Doc>,
}

/// One indexed document.
#[derive(Debug, Clone)]
pub struct Doc {
    /// The document key (hit `id`).
    pub id: String,
    /// Its vector (should have the index's dims).
    pub vector: Vec<f32>,
    /// Stored fields: what `fields` returns in hits and what prefilters look at.
    pub fields: Map<String, Value>,
}

/// How the FTS query endpoints answer (listing and getting indexes are not affected, so an
/// index can be opened and then made to fail).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueryBehaviour {
    /// Run the query.
    Normal,
    /// 500 with a JSON error body, like a failing search node.
    Status500,
    /// Send the status line, headers (with a Content-Length larger than what follows) and part
    /// of the body, then close the connection.
    DropMidResponse,
    /// Sleep this long, then run the query.
    Slow(Duration),
}

/// One request the fake saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `"kv"`, `"mgmt"` or `"fts"`.
    pub service: &'static str,
    /// The HTTP method, or the KV opcode's name (`HELLO`, `SASL_STEP`, ... or `0xNN`).
    pub method: String,
    /// The HTTP path (without the query string), or the KV key (the SASL mechanism, the
    /// bucket of SELECT_BUCKET, the client name of HELLO).
    pub path: String,
    /// HTTP: the body parsed as JSON, `Null` when empty or not JSON. KV:
    /// `{"status": <reply status>, "value": <request value as text, or HELLO's feature codes>}`.
    pub body: Value,
    /// HTTP: whether the Basic credentials were right. KV: whether the connection was
    /// authenticated after this request (so a successful SASL_STEP records `true`).
    pub authenticated: bool,
}

/// A running fake cluster; stops its listeners and every open connection when dropped.
pub struct FakeCluster {
    kv_port: u16,
    mgmt_port: u16,
    fts_port: u16,
    state: Arc<State>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        // Each accept loop owns a JoinSet of its connections; aborting the loop drops the set,
        // which aborts the connections too (the SDK keeps KV connections open and polls).
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct State {
    spec: Spec,
    docs: docs::Docs,
    /// Search indexes created through the API.
    created: Mutex<Vec<search::CreatedIndex>>,
    /// Each created index's documents, read at a version of the documents.
    #[allow(clippy::type_complexity, reason = "a cache keyed by the index and its uuid")]
    materialised: Mutex<
        std::collections::HashMap<(String, String, String, String), (u64, Arc<IndexSpec>, Arc<analysis::Analysed>)>,
    >,
    /// Writes still to be answered with a temporary failure (TMPFAIL, 0x86).
    failing_writes: std::sync::atomic::AtomicUsize,
    /// A key every write to is answered with a temporary failure.
    failing_key: Mutex<Option<Vec<u8>>>,
    /// Bumped for each uuid the fake hands out.
    uuids: std::sync::atomic::AtomicU64,
    ports: (u16, u16, u16),
    seen: Mutex<Vec<Seen>>,
    behaviour: Mutex<QueryBehaviour>,
    scram: ScramSecrets,
}

impl FakeCluster {
    /// Starts the three listeners on free ports of 127.0.0.1.
    pub async fn start(spec: Spec) -> FakeCluster {
        let kv = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake KV port");
        let mgmt = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake mgmt port");
        let fts = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake FTS port");
        let port = |l: &TcpListener| l.local_addr().expect("address").port();
        let (kv_port, mgmt_port, fts_port) = (port(&kv), port(&mgmt), port(&fts));
        // 4096 iterations: RFC 7677's minimum. A real server uses 15000; the SDK does the same
        // work either way, and fewer keeps debug-build tests quick.
        let salt = Sha512::digest(b"quarry-fake-couchbase-salt")[..16].to_vec();
        let iterations = 4096;
        let salted = pbkdf2_sha512(PASSWORD.as_bytes(), &salt, iterations);
        let client_key = hmac512(&salted, b"Client Key");
        let state = Arc::new(State {
            spec,
            docs: docs::Docs::default(),
            created: Mutex::default(),
            materialised: Mutex::default(),
            failing_writes: Default::default(),
            failing_key: Mutex::default(),
            uuids: Default::default(),
            ports: (kv_port, mgmt_port, fts_port),
            seen: Mutex::default(),
            behaviour: Mutex::new(QueryBehaviour::Normal),
            scram: ScramSecrets {
                salt,
                iterations,
                stored_key: Sha512::digest(&client_key).to_vec(),
                server_key: hmac512(&salted, b"Server Key"),
            },
        });
        let tasks = vec![
            tokio::spawn(accept_loop(kv, state.clone(), Service::Kv)),
            tokio::spawn(accept_loop(mgmt, state.clone(), Service::Mgmt)),
            tokio::spawn(accept_loop(fts, state.clone(), Service::Fts)),
        ];
        FakeCluster { kv_port, mgmt_port, fts_port, state, tasks }
    }

    /// `couchbase://127.0.0.1:{kv_port}`: the SDK bootstraps over KV and learns the HTTP ports
    /// from the cluster config.
    pub fn connection_string(&self) -> String {
        format!("couchbase://127.0.0.1:{}", self.kv_port)
    }

    /// Stops answering, as a cluster that goes away: closes its listeners and every open
    /// connection. What it holds stays for [`FakeCluster::restart`].
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    /// Answers again on the same ports, with what it held (as a cluster back from a network
    /// partition). Waits until the ports are bound.
    pub async fn restart(&mut self) {
        self.stop();
        let bind = |port: u16| async move {
            let started = std::time::Instant::now();
            loop {
                match TcpListener::bind(("127.0.0.1", port)).await {
                    Ok(l) => return l,
                    Err(e) if started.elapsed() < Duration::from_secs(10) => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => panic!("rebind the fake's port {port}: {e}"),
                }
            }
        };
        let (kv, mgmt, fts) = (bind(self.kv_port).await, bind(self.mgmt_port).await, bind(self.fts_port).await);
        self.tasks = vec![
            tokio::spawn(accept_loop(kv, self.state.clone(), Service::Kv)),
            tokio::spawn(accept_loop(mgmt, self.state.clone(), Service::Mgmt)),
            tokio::spawn(accept_loop(fts, self.state.clone(), Service::Fts)),
        ];
    }

    /// The KV (memcached) port.
    pub fn kv_port(&self) -> u16 {
        self.kv_port
    }

    /// The management REST port.
    pub fn mgmt_port(&self) -> u16 {
        self.mgmt_port
    }

    /// The Search REST port.
    pub fn fts_port(&self) -> u16 {
        self.fts_port
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().clone()
    }

    /// The live documents of `bucket`'s `scope.collection`, by key, their bodies parsed as JSON
    /// (`Null` for a body that is not).
    pub fn documents(&self, bucket: &str, scope: &str, collection: &str) -> Vec<(String, Value)> {
        let ids = self.state.collection_ids(bucket);
        let Some((_, id)) = ids.iter().find(|((s, c), _)| s == scope && c == collection) else { return Vec::new() };
        self.state
            .docs
            .all(bucket, *id)
            .into_iter()
            .map(|(k, d)| (k, serde_json::from_slice(&d.value).unwrap_or(Value::Null)))
            .collect()
    }

    /// Answers the next `n` document writes (SET, ADD, REPLACE, DELETE) with a temporary
    /// failure (TMPFAIL, as a data node short of memory does), writing nothing.
    pub fn fail_writes(&self, n: usize) {
        self.state.failing_writes.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes the Search service's indexes trail the data by `lag`, as a real one's do (a
    /// mutation is searchable some time after it is acknowledged); `Duration::ZERO` for at once.
    pub fn set_search_lag(&self, lag: Duration) {
        self.state.docs.set_lag(lag);
    }

    /// Answers every change to document `key` (in any collection: SET, REPLACE, DELETE, TOUCH;
    /// not its creation, ADD) with a temporary failure from now on; `None` ends it.
    pub fn fail_writes_to(&self, key: Option<&str>) {
        *self.state.failing_key.lock() = key.map(|k| k.as_bytes().to_vec());
    }

    /// The config of a corpus `manual` kept in this cluster's `travel.inventory.COLLECTION`: a
    /// `[couchbase.local]` connection to it and `[corpora.manual]` with `backend = "couchbase"`,
    /// `extra` keys appended to the section (`timeout = "3s"`).
    pub fn corpus_section(&self, collection: &str, extra: &str) -> String {
        format!(
            "[couchbase.local]\nconnection_string = \"{}\"\nusername = \"{USERNAME}\"\npassword = \"{PASSWORD}\"\n\n[corpora.manual]\nbackend = \"couchbase\"\nconnection = \"local\"\nbucket = \"travel\"\nscope = \"inventory\"\ncollection = \"{collection}\"\n{extra}\n",
            self.connection_string()
        )
    }

    /// Changes how the FTS query endpoints answer from now on.
    pub fn set_query_behaviour(&self, b: QueryBehaviour) {
        *self.state.behaviour.lock() = b;
    }
}

/// A ready fixture: bucket `travel` (scopes `inventory` with `hotels` and `airlines`, and
/// `_default._default`); a scoped index `hotels-vec` on `travel.inventory.hotels` and a
/// cluster-level index `travel-vec` on `travel`, both with a 4-dims `embedding` field and the
/// same five documents (axis-aligned and diagonal vectors, fields `name`, `city`, `category`,
/// `stars`); vector search on; scoped names listed qualified, as 7.6 does.
pub fn standard() -> Spec {
    let doc = |id: &str, vector: [f32; 4], name: &str, city: &str, category: &str, stars: i64| Doc {
        id: id.to_string(),
        vector: vector.to_vec(),
        fields: json!({"name": name, "city": city, "category": category, "stars": stars})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let docs = vec![
        doc("hotel_1", [1.0, 0.0, 0.0, 0.0], "Grand Hotel", "Paris", "luxury", 5),
        doc("hotel_2", [0.0, 1.0, 0.0, 0.0], "Budget Inn", "London", "budget", 2),
        doc("hotel_3", [0.0, 0.0, 1.0, 0.0], "Seaside Resort", "Nice", "resort", 4),
        doc("hotel_4", [0.0, 0.0, 0.0, 1.0], "City Hostel", "Paris", "budget", 1),
        doc("hotel_5", [0.6, 0.8, 0.0, 0.0], "Royal Palace", "London", "luxury", 5),
    ];
    Spec {
        buckets: vec![BucketSpec {
            name: "travel".into(),
            scopes: vec![
                ("inventory".into(), vec!["hotels".into(), "airlines".into()]),
                ("_default".into(), vec!["_default".into()]),
            ],
        }],
        indexes: vec![
            IndexSpec {
                name: "hotels-vec".into(),
                bucket: "travel".into(),
                scope: Some("inventory".into()),
                collection: Some("hotels".into()),
                field: "embedding".into(),
                dims: 4,
                docs: docs.clone(),
            },
            IndexSpec {
                name: "travel-vec".into(),
                bucket: "travel".into(),
                scope: None,
                collection: None,
                field: "embedding".into(),
                dims: 4,
                docs,
            },
        ],
        vector_search: true,
        qualified_scoped_names: true,
        cluster_lists_scoped: false,
        version_8: false,
    }
}

#[derive(Clone, Copy)]
enum Service {
    Kv,
    Mgmt,
    Fts,
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, service: Service) {
    let mut conns = JoinSet::new();
    loop {
        // Reap finished connections so the set does not grow with every short HTTP exchange.
        while conns.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else { continue };
        let state = state.clone();
        match service {
            Service::Kv => {
                conns.spawn(async move {
                    let _ = serve_kv(stream, &state).await;
                });
            }
            Service::Mgmt | Service::Fts => {
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle_http(req, &state, service).await) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        }
    }
}

async fn handle_http(req: Request<hyper::body::Incoming>, state: &State, service: Service) -> Response<ReplyBody> {
    let authenticated = basic_auth_ok(&req);
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.record(Seen {
        service: if matches!(service, Service::Fts) { "fts" } else { "mgmt" },
        method: method.clone(),
        path: path.clone(),
        body: parsed.clone(),
        authenticated,
    });
    let segments: Vec<String> = path.split('/').filter(|s| !s.is_empty()).map(percent_decode).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match service {
        Service::Mgmt => {
            if !authenticated {
                // ns_server: an empty 401 with a Basic challenge.
                return Response::builder()
                    .status(401)
                    .header("www-authenticate", "Basic realm=\"Couchbase Server Admin / REST\"")
                    .body(ReplyBody::Full(None))
                    .expect("valid response");
            }
            mgmt(state, &method, &segs)
        }
        Service::Fts => {
            if !authenticated {
                return reply_json(
                    401,
                    &json!({"error": "rest_auth: preparePerms, err: authentication failure, invalid username or password", "status": "fail"}),
                );
            }
            fts(state, &method, &segs, &parsed).await
        }
        Service::Kv => unreachable!("KV is not HTTP"),
    }
}

impl State {
    fn record(&self, seen: Seen) {
        self.seen.lock().push(seen);
    }

    fn next_uuid(&self) -> u64 {
        self.uuids.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn bucket(&self, name: &str) -> Option<&BucketSpec> {
        self.spec.buckets.iter().find(|b| b.name == name)
    }

    /// The ids of bucket `name`'s collections, by `(scope, collection)`: `_default._default` is
    /// 0, as on a real server; the others count from 8 (ids below 8 are reserved) in the spec's
    /// order.
    fn collection_ids(&self, name: &str) -> Vec<((String, String), u32)> {
        let Some(b) = self.bucket(name) else { return Vec::new() };
        let mut next = 8;
        let mut ids = Vec::new();
        for (scope, collections) in &b.scopes {
            for c in collections {
                let id = if scope == "_default" && c == "_default" {
                    0
                } else {
                    next += 1;
                    next - 1
                };
                ids.push(((scope.clone(), c.clone()), id));
            }
        }
        ids
    }
}

fn uuid_for(what: &str) -> String {
    hex::encode(&Sha512::digest(what.as_bytes())[..16])
}
