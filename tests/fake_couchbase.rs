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
//! What it does not do: TLS, documents over KV (GET/SET answer "unknown command"), N1QL,
//! analytics, index creation. Only SCRAM-SHA512 is offered (a real server also offers
//! SCRAM-SHA256/SHA1, which the SDK only tries after SHA512).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use hmac::Mac;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::percent_decode;

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
    ports: (u16, u16, u16),
    seen: Mutex<Vec<Seen>>,
    behaviour: Mutex<QueryBehaviour>,
    scram: ScramSecrets,
}

/// What a real server stores for a SCRAM user: the salt, the iteration count, StoredKey and
/// ServerKey (never the password).
struct ScramSecrets {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

/// The config revision. Constant: the SDK polls every 2.5 s and must keep seeing the same map.
const REV: i64 = 1073;

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
        self.state.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes how the FTS query endpoints answer from now on.
    pub fn set_query_behaviour(&self, b: QueryBehaviour) {
        *self.state.behaviour.lock().unwrap_or_else(|p| p.into_inner()) = b;
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

impl State {
    fn record(&self, seen: Seen) {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).push(seen);
    }

    fn bucket(&self, name: &str) -> Option<&BucketSpec> {
        self.spec.buckets.iter().find(|b| b.name == name)
    }
}

// ---------------------------------------------------------------------------------------------
// KV: the memcached binary protocol.

const OP_NOOP: u8 = 0x0a;
const OP_HELLO: u8 = 0x1f;
const OP_SASL_LIST_MECHS: u8 = 0x20;
const OP_SASL_AUTH: u8 = 0x21;
const OP_SASL_STEP: u8 = 0x22;
const OP_SELECT_BUCKET: u8 = 0x89;
const OP_GET_CLUSTER_CONFIG: u8 = 0xb5;
const OP_GET_ERROR_MAP: u8 = 0xfe;

const ST_SUCCESS: u16 = 0x00;
const ST_AUTH_ERROR: u16 = 0x20;
const ST_AUTH_CONTINUE: u16 = 0x21;
const ST_EACCESS: u16 = 0x24;
const ST_INVALID_ARGS: u16 = 0x04;
const ST_UNKNOWN_COMMAND: u16 = 0x81;

const DATATYPE_JSON: u8 = 0x01;

/// The HELLO features the fake implements: XERROR (JSON error contexts), SELECT_BUCKET, JSON.
const GRANTABLE: [u16; 3] = [0x07, 0x08, 0x0b];

fn opcode_name(op: u8) -> String {
    match op {
        0x00 => "GET".into(),
        0x01 => "SET".into(),
        OP_NOOP => "NOOP".into(),
        OP_HELLO => "HELLO".into(),
        OP_SASL_LIST_MECHS => "SASL_LIST_MECHS".into(),
        OP_SASL_AUTH => "SASL_AUTH".into(),
        OP_SASL_STEP => "SASL_STEP".into(),
        OP_SELECT_BUCKET => "SELECT_BUCKET".into(),
        OP_GET_CLUSTER_CONFIG => "GET_CLUSTER_CONFIG".into(),
        0xbb => "GET_COLLECTION_ID".into(),
        0xba => "GET_COLLECTIONS_MANIFEST".into(),
        OP_GET_ERROR_MAP => "GET_ERROR_MAP".into(),
        other => format!("0x{other:02x}"),
    }
}

/// Per-connection state.
#[derive(Default)]
struct KvConn {
    authenticated: bool,
    xerror: bool,
    bucket: Option<String>,
    /// Between SASL_AUTH and SASL_STEP: `client-first-bare,server-first`, the combined nonce
    /// and whether the user name was known.
    scram: Option<(String, String, bool)>,
}

struct KvReply {
    status: u16,
    datatype: u8,
    value: Vec<u8>,
}

impl KvReply {
    fn ok(value: impl Into<Vec<u8>>) -> Self {
        KvReply { status: ST_SUCCESS, datatype: 0, value: value.into() }
    }
    fn json(status: u16, value: &Value) -> Self {
        KvReply { status, datatype: DATATYPE_JSON, value: value.to_string().into_bytes() }
    }
}

async fn serve_kv(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut conn = KvConn::default();
    loop {
        let mut header = [0u8; 24];
        stream.read_exact(&mut header).await?;
        let magic = header[0];
        let opcode = header[1];
        // 0x80 is the classic request; 0x08 the "alt" request with flexible framing extras
        // (never sent unless negotiated, which the fake does not, but cheap to parse).
        let (framing_len, key_len) = match magic {
            0x80 => (0usize, u16::from_be_bytes([header[2], header[3]]) as usize),
            0x08 => (header[2] as usize, header[3] as usize),
            _ => return Ok(()),
        };
        let ext_len = header[4] as usize;
        let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let opaque = [header[12], header[13], header[14], header[15]];
        let mut body = vec![0u8; body_len];
        stream.read_exact(&mut body).await?;
        let key_start = (framing_len + ext_len).min(body.len());
        let key_end = (key_start + key_len).min(body.len());
        let key = &body[key_start..key_end];
        let value = &body[key_end..];

        let reply = kv_handle(state, &mut conn, opcode, key, value);
        let recorded_value = if opcode == OP_HELLO {
            json!(
                value.chunks(2).filter(|c| c.len() == 2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect::<Vec<_>>()
            )
        } else {
            json!(String::from_utf8_lossy(value))
        };
        state.record(Seen {
            service: "kv",
            method: opcode_name(opcode),
            path: String::from_utf8_lossy(key).into_owned(),
            body: json!({"status": reply.status, "value": recorded_value}),
            authenticated: conn.authenticated,
        });

        let mut out = Vec::with_capacity(24 + reply.value.len());
        out.push(0x81);
        out.push(opcode);
        out.extend_from_slice(&0u16.to_be_bytes()); // key length
        out.push(0); // extras length
        out.push(reply.datatype);
        out.extend_from_slice(&reply.status.to_be_bytes());
        out.extend_from_slice(&(reply.value.len() as u32).to_be_bytes());
        out.extend_from_slice(&opaque);
        out.extend_from_slice(&0u64.to_be_bytes()); // cas
        out.extend_from_slice(&reply.value);
        stream.write_all(&out).await?;
    }
}

fn kv_error(conn: &KvConn, status: u16, context: &str) -> KvReply {
    // With XERROR negotiated, a real server explains errors in a JSON body.
    if conn.xerror {
        KvReply::json(status, &json!({"error": {"context": context, "ref": "00000000-0000-0000-0000-000000000000"}}))
    } else {
        KvReply { status, datatype: 0, value: Vec::new() }
    }
}

fn kv_handle(state: &State, conn: &mut KvConn, opcode: u8, key: &[u8], value: &[u8]) -> KvReply {
    match opcode {
        OP_HELLO => {
            let mut granted = Vec::new();
            for c in value.chunks(2).filter(|c| c.len() == 2) {
                let f = u16::from_be_bytes([c[0], c[1]]);
                if GRANTABLE.contains(&f) && !granted.contains(&f) {
                    granted.push(f);
                }
            }
            conn.xerror = granted.contains(&0x07);
            KvReply::ok(granted.iter().flat_map(|f| f.to_be_bytes()).collect::<Vec<u8>>())
        }
        OP_GET_ERROR_MAP => KvReply::json(ST_SUCCESS, &json!({"version": 2, "revision": 1, "errors": {}})),
        OP_SASL_LIST_MECHS => KvReply::ok(b"SCRAM-SHA512".to_vec()),
        OP_SASL_AUTH => {
            if key != b"SCRAM-SHA512" {
                return kv_error(conn, ST_AUTH_ERROR, "Unsupported authentication mechanism");
            }
            let msg = String::from_utf8_lossy(value);
            // gs2 header "n,," (no channel binding), then client-first-bare "n=USER,r=NONCE".
            let Some(bare) = msg.strip_prefix("n,,").or_else(|| msg.strip_prefix("y,,")) else {
                return kv_error(conn, ST_INVALID_ARGS, "Invalid SCRAM client-first message");
            };
            let mut user = None;
            let mut nonce = None;
            for attr in bare.split(',') {
                if let Some(u) = attr.strip_prefix("n=") {
                    user = Some(u.replace("=2C", ",").replace("=3D", "="));
                } else if let Some(r) = attr.strip_prefix("r=") {
                    nonce = Some(r.to_string());
                }
            }
            let (Some(user), Some(nonce)) = (user, nonce) else {
                return kv_error(conn, ST_INVALID_ARGS, "Invalid SCRAM client-first message");
            };
            let server_nonce = hex::encode(&Sha512::digest(format!("{nonce}{:?}", Instant::now()).as_bytes())[..12]);
            let combined = format!("{nonce}{server_nonce}");
            // An unknown user gets the same kind of answer (a real server fakes a salt so
            // user names cannot be probed); the proof then cannot check out.
            let server_first = format!("r={combined},s={},i={}", B64.encode(&state.scram.salt), state.scram.iterations);
            conn.scram = Some((format!("{bare},{server_first}"), combined, user == USERNAME));
            KvReply { status: ST_AUTH_CONTINUE, datatype: 0, value: server_first.into_bytes() }
        }
        OP_SASL_STEP => {
            let Some((first_part, combined, known_user)) = conn.scram.take() else {
                return kv_error(conn, ST_AUTH_ERROR, "SASL_STEP without SASL_AUTH");
            };
            let msg = String::from_utf8_lossy(value).into_owned();
            let Some((without_proof, proof)) = msg.rsplit_once(",p=") else {
                return kv_error(conn, ST_AUTH_ERROR, "Invalid SCRAM client-final message");
            };
            let nonce_ok = without_proof.split(',').any(|a| a.strip_prefix("r=") == Some(combined.as_str()));
            let binding_ok = without_proof.split(',').any(|a| a == "c=biws" || a == "c=eSws");
            let auth_message = format!("{first_part},{without_proof}");
            let proof_ok = B64.decode(proof).is_ok_and(|proof| {
                // ClientKey = proof XOR HMAC(StoredKey, AuthMessage); it must hash to StoredKey.
                let signature = hmac512(&state.scram.stored_key, auth_message.as_bytes());
                proof.len() == signature.len() && {
                    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
                    Sha512::digest(&client_key).as_slice() == state.scram.stored_key.as_slice()
                }
            });
            if known_user && nonce_ok && binding_ok && proof_ok {
                conn.authenticated = true;
                let server_signature = hmac512(&state.scram.server_key, auth_message.as_bytes());
                KvReply::ok(format!("v={}", B64.encode(server_signature)).into_bytes())
            } else {
                conn.authenticated = false;
                kv_error(
                    conn,
                    ST_AUTH_ERROR,
                    "Authentication failed. This could be due to invalid credentials or if the user is not associated with a bucket.",
                )
            }
        }
        OP_SELECT_BUCKET => {
            if !conn.authenticated {
                return kv_error(conn, ST_EACCESS, "Not authenticated");
            }
            let name = String::from_utf8_lossy(key).into_owned();
            // A real server answers EACCESS, not "no such bucket", so names cannot be probed.
            if state.bucket(&name).is_none() {
                return kv_error(conn, ST_EACCESS, "No access to bucket");
            }
            conn.bucket = Some(name);
            KvReply::ok(Vec::new())
        }
        OP_GET_CLUSTER_CONFIG => {
            if !conn.authenticated {
                return kv_error(conn, ST_EACCESS, "Not authenticated");
            }
            let config = match &conn.bucket {
                Some(b) => bucket_config(state, b),
                None => cluster_config(state),
            };
            KvReply::json(ST_SUCCESS, &config)
        }
        OP_NOOP => KvReply::ok(Vec::new()),
        _ => kv_error(conn, ST_UNKNOWN_COMMAND, "Unknown command"),
    }
}

fn uuid_for(what: &str) -> String {
    hex::encode(&Sha512::digest(what.as_bytes())[..16])
}

fn nodes_ext(state: &State) -> Value {
    let (kv, mgmt, fts) = state.ports;
    // No "hostname": the SDK then uses the host it bootstrapped from (127.0.0.1).
    json!([{"services": {"kv": kv, "mgmt": mgmt, "fts": fts}, "thisNode": true}])
}

fn cluster_capabilities(state: &State) -> Value {
    let mut search = vec![];
    if state.spec.vector_search {
        search.push("vectorSearch");
    }
    search.push("scopedSearchIndex");
    json!({"n1ql": ["enhancedPreparedStatements", "readFromReplica"], "search": search})
}

/// The terse cluster config a 7.6 node answers GET_CLUSTER_CONFIG with before a bucket is
/// selected.
fn cluster_config(state: &State) -> Value {
    json!({
        "rev": REV,
        "revEpoch": 1,
        "nodesExt": nodes_ext(state),
        "clusterCapabilitiesVer": [1, 0],
        "clusterCapabilities": cluster_capabilities(state),
        "clusterUUID": uuid_for("cluster"),
        "clusterName": "quarry-fake",
    })
}

/// The terse bucket config: one node owning all 1024 vbuckets.
fn bucket_config(state: &State, bucket: &str) -> Value {
    let (kv, mgmt, _) = state.ports;
    let uuid = uuid_for(bucket);
    json!({
        "rev": REV,
        "revEpoch": 1,
        "name": bucket,
        "nodeLocator": "vbucket",
        "uuid": uuid,
        "uri": format!("/pools/default/buckets/{bucket}?bucket_uuid={uuid}"),
        "streamingUri": format!("/pools/default/bucketsStreaming/{bucket}?bucket_uuid={uuid}"),
        "bucketCapabilitiesVer": "",
        "bucketCapabilities": [
            "collections", "durableWrite", "tombstonedUserXAttrs", "couchapi", "subdoc.ReplaceBodyWithXattr",
            "subdoc.DocumentMacroSupport", "subdoc.ReviveDocument", "dcp.IgnorePurgedTombstones", "preserveExpiry",
            "querySystemCollection", "mobileSystemCollection", "subdoc.ReplicaRead", "rangeScan", "dcp", "cbhello",
            "touch", "cccp", "xdcrCheckpointing", "nodesExt", "xattr"
        ],
        "collectionsManifestUid": "2",
        "ddocs": {"uri": format!("/pools/default/buckets/{bucket}/ddocs")},
        "vBucketServerMap": {
            "hashAlgorithm": "CRC",
            "numReplicas": 0,
            "serverList": [format!("$HOST:{kv}")],
            "vBucketMap": vec![vec![0]; 1024],
        },
        "nodes": [{"couchApiBase": format!("http://$HOST:{mgmt}/{bucket}%2B{uuid}"), "hostname": format!("$HOST:{mgmt}"), "ports": {"direct": kv}}],
        "nodesExt": nodes_ext(state),
        "clusterCapabilitiesVer": [1, 0],
        "clusterCapabilities": cluster_capabilities(state),
        "clusterUUID": uuid_for("cluster"),
        "clusterName": "quarry-fake",
    })
}

// ---------------------------------------------------------------------------------------------
// HTTP: management and Search.

/// A response body: all at once, or cut short (see [`QueryBehaviour::DropMidResponse`]).
enum ReplyBody {
    Full(Option<Bytes>),
    /// Sends the bytes, waits a moment so they reach the socket, then fails: hyper then closes
    /// the connection short of the Content-Length it announced.
    Truncated(Option<Bytes>, Option<Pin<Box<tokio::time::Sleep>>>),
}

impl hyper::body::Body for ReplyBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            ReplyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ReplyBody::Truncated(b, sleep) => {
                if let Some(b) = b.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                let sleep = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(50))));
                match sleep.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "fake search node dropped the connection",
                    )))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ReplyBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            ReplyBody::Full(Some(b)) => hyper::body::SizeHint::with_exact(b.len() as u64),
            ReplyBody::Full(None) => hyper::body::SizeHint::with_exact(0),
            ReplyBody::Truncated(..) => hyper::body::SizeHint::default(),
        }
    }
}

fn reply_json(status: u16, body: &Value) -> Response<ReplyBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(ReplyBody::Full(Some(Bytes::from(body.to_string()))))
        .expect("valid response")
}

fn reply_text(status: u16, body: &str) -> Response<ReplyBody> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain;charset=utf-8")
        .body(ReplyBody::Full(Some(Bytes::from(body.to_string()))))
        .expect("valid response")
}

fn basic_auth_ok(req: &Request<hyper::body::Incoming>) -> bool {
    let Some(value) = req.headers().get("authorization").and_then(|v| v.to_str().ok()) else { return false };
    let Some(encoded) = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic ")) else { return false };
    B64.decode(encoded.trim()).is_ok_and(|d| d == format!("{USERNAME}:{PASSWORD}").as_bytes())
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

fn mgmt(state: &State, method: &str, segs: &[&str]) -> Response<ReplyBody> {
    let not_found = || reply_text(404, "Requested resource not found.\r\n");
    match (method, segs) {
        ("GET", ["pools", "default", "buckets", b]) => match state.bucket(b) {
            Some(bucket) => reply_json(200, &bucket_settings(state, bucket)),
            None => not_found(),
        },
        ("GET", ["pools", "default", "buckets"]) => {
            reply_json(200, &Value::Array(state.spec.buckets.iter().map(|b| bucket_settings(state, b)).collect()))
        }
        ("GET", ["pools", "default", "buckets", b, "scopes"]) => match state.bucket(b) {
            Some(bucket) => reply_json(200, &manifest(bucket)),
            None => not_found(),
        },
        // HTTP bootstrap and config polling paths (used only when the SDK is seeded with HTTP
        // addresses; `couchbase://host:port` seeds KV): the terse configs, $HOST filled in.
        ("GET", ["pools", "default", "nodeServices"]) => reply_json(200, &host_filled(cluster_config(state))),
        ("GET", ["pools", "default", "b", b]) => match state.bucket(b) {
            Some(_) => reply_json(200, &host_filled(bucket_config(state, b))),
            None => not_found(),
        },
        _ => not_found(),
    }
}

fn host_filled(config: Value) -> Value {
    serde_json::from_str(&config.to_string().replace("$HOST", "127.0.0.1")).unwrap_or(config)
}

/// `GET /pools/default/buckets/{b}` as a 7.6 node answers it, trimmed to the settings the
/// SDK's BucketSettings reads (plus a few identifying fields).
fn bucket_settings(state: &State, bucket: &BucketSpec) -> Value {
    let (kv, mgmt, _) = state.ports;
    json!({
        "name": bucket.name,
        "nodeLocator": "vbucket",
        "bucketType": "membase",
        "storageBackend": "couchstore",
        "uuid": uuid_for(&bucket.name),
        "uri": format!("/pools/default/buckets/{}?bucket_uuid={}", bucket.name, uuid_for(&bucket.name)),
        "replicaNumber": 0,
        "replicaIndex": false,
        "threadsNumber": 3,
        "quota": {"ram": 104857600u64, "rawRAM": 104857600u64},
        "evictionPolicy": "valueOnly",
        "durabilityMinLevel": "none",
        "conflictResolutionType": "seqno",
        "compressionMode": "passive",
        "maxTTL": 0,
        "numVBuckets": 1024,
        "historyRetentionCollectionDefault": true,
        "historyRetentionBytes": 0,
        "historyRetentionSeconds": 0,
        "bucketCapabilitiesVer": "",
        "bucketCapabilities": ["collections", "durableWrite", "couchapi", "dcp", "cbhello", "touch", "cccp", "xattr", "nodesExt"],
        "collectionsManifestUid": "2",
        "nodes": [{"hostname": format!("127.0.0.1:{mgmt}"), "ports": {"direct": kv}, "services": ["fts", "kv"], "status": "healthy", "clusterMembership": "active", "version": "7.6.2-3721-enterprise"}],
        "basicStats": {"quotaPercentUsed": 1.5, "opsPerSec": 0, "diskFetches": 0, "itemCount": 0, "diskUsed": 0, "dataUsed": 0, "memUsed": 1572864},
    })
}

/// The collections manifest: uids are hex strings, `_default` scope and collection are 0.
fn manifest(bucket: &BucketSpec) -> Value {
    let mut next = 8u32;
    let mut uid = |name: &str| {
        if name == "_default" {
            "0".to_string()
        } else {
            next += 1;
            format!("{next:x}")
        }
    };
    let scopes: Vec<Value> = bucket
        .scopes
        .iter()
        .map(|(scope, collections)| {
            let scope_uid = uid(scope);
            let cols: Vec<Value> =
                collections.iter().map(|c| json!({"name": c, "uid": uid(c), "maxTTL": 0, "history": false})).collect();
            json!({"name": scope, "uid": scope_uid, "collections": cols})
        })
        .collect();
    json!({"uid": "2", "scopes": scopes})
}

/// The index's name as 7.6 lists it.
fn listed_name(state: &State, idx: &IndexSpec) -> String {
    match &idx.scope {
        Some(scope) if state.spec.qualified_scoped_names => format!("{}.{}.{}", idx.bucket, scope, idx.name),
        _ => idx.name.clone(),
    }
}

/// The scoped index a name in a scoped path means (bare or `bucket.scope.name`).
fn find_scoped<'a>(state: &'a State, bucket: &str, scope: &str, name: &str) -> Option<&'a IndexSpec> {
    state.spec.indexes.iter().find(|i| {
        i.bucket == bucket
            && i.scope.as_deref() == Some(scope)
            && (i.name == name || format!("{}.{}.{}", i.bucket, scope, i.name) == name)
    })
}

/// The index a cluster-level path means: a bucket-level index by name, or a scoped one by its
/// full `bucket.scope.name` (as a real server allows).
fn find_cluster<'a>(state: &'a State, name: &str) -> Option<&'a IndexSpec> {
    state.spec.indexes.iter().find(|i| match &i.scope {
        None => i.name == name,
        Some(scope) => format!("{}.{}.{}", i.bucket, scope, i.name) == name,
    })
}

fn index_not_found() -> Response<ReplyBody> {
    reply_json(400, &json!({"error": "rest_auth: preparePerms, err: index not found", "status": "fail"}))
}

async fn fts(state: &State, method: &str, segs: &[&str], body: &Value) -> Response<ReplyBody> {
    match (method, segs) {
        ("GET", ["api", "index"]) => {
            let defs: Map<String, Value> = state
                .spec
                .indexes
                .iter()
                .filter(|i| i.scope.is_none() || state.spec.cluster_lists_scoped)
                .map(|i| (listed_name(state, i), index_def(state, i)))
                .collect();
            reply_json(200, &json!({"status": "ok", "indexDefs": {"implVersion": "5.5.0", "indexDefs": defs}}))
        }
        ("GET", ["api", "bucket", b, "scope", s, "index"]) => {
            if state.bucket(b).is_none_or(|bk| !bk.scopes.iter().any(|(n, _)| n == s)) {
                return reply_json(
                    400,
                    &json!({"error": format!("rest_auth: preparePerms, err: bucket: {b}, scope: {s}, requested resource not found"), "status": "fail"}),
                );
            }
            let defs: Map<String, Value> = state
                .spec
                .indexes
                .iter()
                .filter(|i| i.bucket == *b && i.scope.as_deref() == Some(*s))
                .map(|i| (listed_name(state, i), index_def(state, i)))
                .collect();
            reply_json(200, &json!({"status": "ok", "indexDefs": {"implVersion": "5.5.0", "indexDefs": defs}}))
        }
        ("GET", ["api", "index", i]) => match find_cluster(state, i) {
            Some(idx) => reply_json(200, &json!({"status": "ok", "indexDef": index_def(state, idx)})),
            None => index_not_found(),
        },
        ("GET", ["api", "bucket", b, "scope", s, "index", i]) => match find_scoped(state, b, s, i) {
            Some(idx) => reply_json(200, &json!({"status": "ok", "indexDef": index_def(state, idx)})),
            None => index_not_found(),
        },
        ("GET", ["api", "index", i, "count"]) => match find_cluster(state, i) {
            Some(idx) => reply_json(200, &json!({"status": "ok", "count": idx.docs.len()})),
            None => index_not_found(),
        },
        ("GET", ["api", "bucket", b, "scope", s, "index", i, "count"]) => match find_scoped(state, b, s, i) {
            Some(idx) => reply_json(200, &json!({"status": "ok", "count": idx.docs.len()})),
            None => index_not_found(),
        },
        ("POST", ["api", "index", i, "query"]) => {
            let idx = find_cluster(state, i);
            query_endpoint(state, idx, body).await
        }
        ("POST", ["api", "bucket", b, "scope", s, "index", i, "query"]) => {
            let idx = find_scoped(state, b, s, i);
            query_endpoint(state, idx, body).await
        }
        ("GET", ["api", "ping"]) => reply_json(200, &json!({"status": "ok"})),
        _ => reply_text(404, "404 page not found\n"),
    }
}

async fn query_endpoint(state: &State, idx: Option<&IndexSpec>, body: &Value) -> Response<ReplyBody> {
    let behaviour = *state.behaviour.lock().unwrap_or_else(|p| p.into_inner());
    match behaviour {
        QueryBehaviour::Normal => {}
        QueryBehaviour::Slow(d) => tokio::time::sleep(d).await,
        QueryBehaviour::Status500 => {
            return reply_json(
                500,
                &json!({"error": "rest_index: Query, err: pindex not available, fake search node failure", "status": "fail"}),
            );
        }
        QueryBehaviour::DropMidResponse => {
            let partial = Bytes::from_static(
                b"{\"status\":{\"total\":1,\"failed\":0,\"successful\":1},\"hits\":[{\"index\":\"x\",\"id\":\"hotel_1\",\"sco",
            );
            return Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .header("content-length", "4096")
                .body(ReplyBody::Truncated(Some(partial), None))
                .expect("valid response");
        }
    }
    let Some(idx) = idx else { return index_not_found() };
    let started = Instant::now();
    match run_query(state, idx, body) {
        Ok(mut result) => {
            result["took"] = json!(started.elapsed().as_nanos() as u64);
            reply_json(200, &result)
        }
        Err(message) => reply_json(
            400,
            &json!({"error": format!("rest_index: Query, indexName: {}, err: {message}", listed_name(state, idx)), "status": "fail"}),
        ),
    }
}

/// A 7.6 vector index definition: the vector field, plus a stored mapping for every field the
/// documents carry (so `fields: ["*"]` has something to return on a real server too).
fn index_def(state: &State, idx: &IndexSpec) -> Value {
    let mut properties = Map::new();
    properties.insert(
        idx.field.clone(),
        json!({"dynamic": false, "enabled": true, "fields": [{
            "dims": idx.dims, "index": true, "name": idx.field, "similarity": "dot_product",
            "type": "vector", "vector_index_optimized_for": "recall"
        }]}),
    );
    let mut field_types: BTreeMap<String, &'static str> = BTreeMap::new();
    for d in &idx.docs {
        for (k, v) in &d.fields {
            let t = match v {
                Value::Number(_) => "number",
                Value::Bool(_) => "boolean",
                _ => "text",
            };
            field_types.entry(k.clone()).or_insert(t);
        }
    }
    for (k, t) in field_types {
        let mut f = json!({"index": true, "name": k, "store": true, "type": t});
        if t == "text" {
            f["analyzer"] = json!("standard");
            f["include_in_all"] = json!(true);
        }
        properties.insert(k, json!({"dynamic": false, "enabled": true, "fields": [f]}));
    }
    let type_mapping = json!({"dynamic": false, "enabled": true, "properties": properties});
    let (doc_config, default_mapping, types) = match &idx.scope {
        Some(scope) => {
            let collection = idx.collection.clone().unwrap_or_else(|| {
                state
                    .bucket(&idx.bucket)
                    .and_then(|b| b.scopes.iter().find(|(n, _)| n == scope))
                    .and_then(|(_, cols)| cols.first().cloned())
                    .unwrap_or_else(|| "_default".into())
            });
            let mut types = Map::new();
            types.insert(format!("{scope}.{collection}"), type_mapping);
            (
                json!({"docid_prefix_delim": "", "docid_regexp": "", "mode": "scope.collection.type_field", "type_field": "type"}),
                json!({"dynamic": true, "enabled": false}),
                Value::Object(types),
            )
        }
        None => (
            json!({"docid_prefix_delim": "", "docid_regexp": "", "mode": "type_field", "type_field": "type"}),
            type_mapping,
            json!({}),
        ),
    };
    json!({
        "type": "fulltext-index",
        "name": listed_name(state, idx),
        "uuid": &uuid_for(&format!("index/{}/{:?}/{}", idx.bucket, idx.scope, idx.name))[..16],
        "sourceType": "gocbcore",
        "sourceName": idx.bucket,
        "sourceUUID": uuid_for(&idx.bucket),
        "planParams": {"maxPartitionsPerPIndex": 1024, "indexPartitions": 1, "numReplicas": 0},
        "params": {
            "doc_config": doc_config,
            "mapping": {
                "analysis": {},
                "default_analyzer": "standard",
                "default_datetime_parser": "dateTimeOptional",
                "default_field": "_all",
                "default_mapping": default_mapping,
                "default_type": "_default",
                "docvalues_dynamic": false,
                "index_dynamic": true,
                "store_dynamic": false,
                "type_field": "_type",
                "types": types,
            },
            "store": {"indexType": "scorch", "segmentVersion": 16},
        },
        "sourceParams": {},
    })
}

// ---------------------------------------------------------------------------------------------
// Queries: kNN with prefilters, a subset of the bleve query language.

/// A parsed bleve query (prefilter or `query`).
enum Query {
    All,
    None,
    Term { field: Option<String>, term: String },
    Match { field: Option<String>, text: String, all: bool },
    Phrase { field: Option<String>, text: String },
    Prefix { field: Option<String>, prefix: String },
    NumRange { field: Option<String>, min: Option<f64>, max: Option<f64>, incl_min: bool, incl_max: bool },
    TermRange { field: Option<String>, min: Option<String>, max: Option<String>, incl_min: bool, incl_max: bool },
    Bool { field: Option<String>, value: bool },
    Ids(Vec<String>),
    Conj(Vec<Query>),
    Disj(Vec<Query>, usize),
    Boolean { must: Option<Box<Query>>, should: Option<Box<Query>>, must_not: Option<Box<Query>> },
}

fn parse_query(v: &Value) -> Result<Query, String> {
    let Some(o) = v.as_object() else { return Err("unknown query type".into()) };
    let field = o.get("field").and_then(Value::as_str).map(str::to_string);
    let list = |key: &str| -> Result<Vec<Query>, String> {
        o.get(key).and_then(Value::as_array).map_or(Ok(vec![]), |a| a.iter().map(parse_query).collect())
    };
    // Same precedence as bleve's ParseQuery.
    if o.contains_key("match_all") {
        return Ok(Query::All);
    }
    if o.contains_key("match_none") {
        return Ok(Query::None);
    }
    if o.contains_key("conjuncts") {
        return Ok(Query::Conj(list("conjuncts")?));
    }
    if o.contains_key("disjuncts") {
        let min = o.get("min").and_then(Value::as_u64).unwrap_or(0) as usize;
        return Ok(Query::Disj(list("disjuncts")?, min));
    }
    if o.contains_key("must") || o.contains_key("should") || o.contains_key("must_not") {
        let sub = |key: &str| -> Result<Option<Box<Query>>, String> {
            o.get(key).filter(|v| !v.is_null()).map(|v| parse_query(v).map(Box::new)).transpose()
        };
        return Ok(Query::Boolean { must: sub("must")?, should: sub("should")?, must_not: sub("must_not")? });
    }
    if let Some(t) = o.get("term") {
        return Ok(Query::Term { field, term: t.as_str().ok_or("term must be a string")?.to_string() });
    }
    if let Some(t) = o.get("match") {
        let all = o.get("operator").and_then(Value::as_str).is_some_and(|op| op.eq_ignore_ascii_case("and"));
        return Ok(Query::Match { field, text: t.as_str().ok_or("match must be a string")?.to_string(), all });
    }
    if let Some(t) = o.get("match_phrase") {
        return Ok(Query::Phrase { field, text: t.as_str().ok_or("match_phrase must be a string")?.to_string() });
    }
    if let Some(t) = o.get("prefix") {
        return Ok(Query::Prefix { field, prefix: t.as_str().ok_or("prefix must be a string")?.to_string() });
    }
    if o.get("min").is_some_and(Value::is_number) || o.get("max").is_some_and(Value::is_number) {
        return Ok(Query::NumRange {
            field,
            min: o.get("min").and_then(Value::as_f64),
            max: o.get("max").and_then(Value::as_f64),
            incl_min: o.get("inclusive_min").and_then(Value::as_bool).unwrap_or(true),
            incl_max: o.get("inclusive_max").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    if o.get("min").is_some_and(Value::is_string) || o.get("max").is_some_and(Value::is_string) {
        return Ok(Query::TermRange {
            field,
            min: o.get("min").and_then(Value::as_str).map(str::to_string),
            max: o.get("max").and_then(Value::as_str).map(str::to_string),
            incl_min: o.get("inclusive_min").and_then(Value::as_bool).unwrap_or(true),
            incl_max: o.get("inclusive_max").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    if let Some(b) = o.get("bool") {
        return Ok(Query::Bool { field, value: b.as_bool().ok_or("bool must be a boolean")? });
    }
    if let Some(ids) = o.get("ids") {
        let ids = ids.as_array().ok_or("ids must be an array")?;
        return Ok(Query::Ids(ids.iter().filter_map(Value::as_str).map(str::to_string).collect()));
    }
    if let Some(q) = o.get("query") {
        return parse_query_string(q.as_str().ok_or("query must be a string")?);
    }
    for real_but_unsupported in
        ["wildcard", "regexp", "terms", "start", "end", "location", "top_left", "polygon_points"]
    {
        if o.contains_key(real_but_unsupported) {
            return Err(format!("fake_couchbase does not implement the `{real_but_unsupported}` query"));
        }
    }
    Err("unknown query type".into())
}

/// A query-string query (bleve's syntax, the common part): whitespace-separated clauses, each
/// `+` (must), `-` (must not) or plain (should: at least one must match when there is no must);
/// a clause is `field:value`, `field:"a phrase"`, `field:>N` / `>=N` / `<N` / `<=N`, or a bare
/// word matched against every field.
fn parse_query_string(text: &str) -> Result<Query, String> {
    let mut clauses = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    clauses.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(format!("syntax error: unterminated quote in query string {text:?}"));
    }
    if !cur.is_empty() {
        clauses.push(cur);
    }
    if clauses.is_empty() {
        return Err("syntax error: empty query string".into());
    }
    let (mut must, mut should, mut not) = (Vec::new(), Vec::new(), Vec::new());
    for clause in clauses {
        let (list, body) = match clause.strip_prefix('+') {
            Some(rest) => (&mut must, rest),
            None => match clause.strip_prefix('-') {
                Some(rest) => (&mut not, rest),
                None => (&mut should, clause.as_str()),
            },
        };
        let (field, value) = match body.split_once(':') {
            Some((f, v)) if !f.is_empty() => (Some(f.to_string()), v),
            _ => (None, body),
        };
        if value.is_empty() {
            return Err(format!("syntax error: clause {clause:?} has no value"));
        }
        let range = |op: &str, rest: &str| -> Result<Query, String> {
            let n: f64 = rest.parse().map_err(|_| format!("syntax error: {rest:?} is not a number"))?;
            let (min, max, incl_min, incl_max) = match op {
                ">" => (Some(n), None, false, false),
                ">=" => (Some(n), None, true, false),
                "<" => (None, Some(n), true, false),
                _ => (None, Some(n), true, true),
            };
            Ok(Query::NumRange { field: field.clone(), min, max, incl_min, incl_max })
        };
        let q = if let Some(rest) = value.strip_prefix(">=") {
            range(">=", rest)?
        } else if let Some(rest) = value.strip_prefix("<=") {
            range("<=", rest)?
        } else if let Some(rest) = value.strip_prefix('>') {
            range(">", rest)?
        } else if let Some(rest) = value.strip_prefix('<') {
            range("<", rest)?
        } else if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
            Query::Phrase { field: field.clone(), text: value[1..value.len() - 1].to_string() }
        } else {
            Query::Match { field: field.clone(), text: value.to_string(), all: false }
        };
        list.push(q);
    }
    let has_must = !must.is_empty();
    Ok(Query::Boolean {
        must: has_must.then(|| Box::new(Query::Conj(must))),
        // With a must clause, should clauses only score; without one, one must match.
        should: (!has_must && !should.is_empty()).then(|| Box::new(Query::Disj(should, 1))),
        must_not: (!not.is_empty()).then(|| Box::new(Query::Disj(not, 1))),
    })
}

/// The standard analyzer, roughly: lowercase words.
fn tokens(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_lowercase).collect()
}

/// The values a field path names in a document (dotted paths reach into objects; arrays
/// contribute each element); no field means every stored field (`_all`).
fn values<'a>(doc: &'a Doc, field: &Option<String>) -> Vec<&'a Value> {
    fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| flatten(x, out)),
            Value::Object(o) => o.values().for_each(|x| flatten(x, out)),
            other => out.push(other),
        }
    }
    let mut out = Vec::new();
    match field {
        None => doc.fields.values().for_each(|v| flatten(v, &mut out)),
        Some(path) => {
            let mut parts = path.split('.');
            let mut cur = parts.next().and_then(|p| doc.fields.get(p));
            for p in parts {
                cur = cur.and_then(|v| v.get(p));
            }
            if let Some(v) = cur {
                flatten(v, &mut out);
            }
        }
    }
    out
}

fn text_tokens(doc: &Doc, field: &Option<String>) -> Vec<String> {
    values(doc, field).into_iter().filter_map(Value::as_str).flat_map(tokens).collect()
}

fn matches(q: &Query, doc: &Doc) -> bool {
    match q {
        Query::All => true,
        Query::None => false,
        Query::Term { field, term } => {
            values(doc, field).iter().any(|v| v.as_str() == Some(term.as_str()))
                || text_tokens(doc, field).iter().any(|t| t == term)
        }
        Query::Match { field, text, all } => {
            let have = text_tokens(doc, field);
            let want = tokens(text);
            if *all {
                !want.is_empty() && want.iter().all(|w| have.contains(w))
            } else {
                want.iter().any(|w| have.contains(w))
            }
        }
        Query::Phrase { field, text } => {
            let want = tokens(text);
            values(doc, field)
                .into_iter()
                .filter_map(Value::as_str)
                .any(|s| !want.is_empty() && tokens(s).windows(want.len()).any(|w| w == want.as_slice()))
        }
        Query::Prefix { field, prefix } => text_tokens(doc, field).iter().any(|t| t.starts_with(prefix.as_str())),
        Query::NumRange { field, min, max, incl_min, incl_max } => {
            values(doc, field).into_iter().filter_map(Value::as_f64).any(|x| {
                min.is_none_or(|m| if *incl_min { x >= m } else { x > m })
                    && max.is_none_or(|m| if *incl_max { x <= m } else { x < m })
            })
        }
        Query::TermRange { field, min, max, incl_min, incl_max } => text_tokens(doc, field).iter().any(|t| {
            min.as_ref().is_none_or(|m| if *incl_min { t >= m } else { t > m })
                && max.as_ref().is_none_or(|m| if *incl_max { t <= m } else { t < m })
        }),
        Query::Bool { field, value } => values(doc, field).iter().any(|v| v.as_bool() == Some(*value)),
        Query::Ids(ids) => ids.contains(&doc.id),
        Query::Conj(qs) => qs.iter().all(|q| matches(q, doc)),
        Query::Disj(qs, min) => qs.iter().filter(|q| matches(q, doc)).count() >= (*min).max(1),
        Query::Boolean { must, should, must_not } => {
            must.as_ref().is_none_or(|q| matches(q, doc))
                && should.as_ref().is_none_or(|q| matches(q, doc))
                && must_not.as_ref().is_none_or(|q| !matches(q, doc))
        }
    }
}

/// The query vector of a kNN request: `vector`, or `vector_base64` (little-endian f32s).
fn knn_vector(k: &Value) -> Result<Vec<f32>, String> {
    if let Some(v) = k.get("vector").and_then(Value::as_array).filter(|v| !v.is_empty()) {
        return v.iter().map(|x| x.as_f64().map(|f| f as f32).ok_or("vector must hold numbers".to_string())).collect();
    }
    if let Some(b) = k.get("vector_base64").and_then(Value::as_str).filter(|b| !b.is_empty()) {
        let bytes = B64.decode(b).map_err(|e| format!("error decoding vector_base64: {e}"))?;
        if bytes.len() % 4 != 0 {
            return Err("decoded byte array not divisible by 4".into());
        }
        return Ok(bytes.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
    }
    Ok(vec![])
}

fn run_query(state: &State, idx: &IndexSpec, body: &Value) -> Result<Value, String> {
    let size = body.get("size").and_then(Value::as_i64).filter(|s| *s >= 0).unwrap_or(10) as usize;
    let from = body.get("from").and_then(Value::as_i64).filter(|f| *f >= 0).unwrap_or(0) as usize;
    let query = match body.get("query") {
        Some(q) if !q.is_null() => {
            parse_query(q).map_err(|e| format!("bleve: QueryBleve parsing searchRequest, err: {e}"))?
        }
        _ => Query::None,
    };
    let knns = body.get("knn").and_then(Value::as_array).cloned().unwrap_or_default();
    let operator_and = match body.get("knn_operator").and_then(Value::as_str) {
        None | Some("") | Some("or") => false,
        Some("and") => true,
        Some(_) => {
            return Err("bleve: QueryBleve validating request, err: knn_operator must be either 'and' / 'or'".into());
        }
    };

    // Score per doc: the query's hits score 1, each kNN adds its (boosted) similarity.
    let mut scores: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for d in &idx.docs {
        if matches(&query, d) {
            scores.insert(&d.id, (1.0, 0));
        }
    }
    let mut effective_knns = 0;
    for k in &knns {
        let vector = knn_vector(k).map_err(|e| format!("bleve: QueryBleve validating request, err: {e}"))?;
        let kk = k.get("k").and_then(Value::as_i64).unwrap_or(0);
        if kk <= 0 || vector.is_empty() {
            return Err(
                "bleve: QueryBleve validating request, err: k must be greater than 0 and vector must be non-empty"
                    .into(),
            );
        }
        let field = k.get("field").and_then(Value::as_str).unwrap_or_default();
        if field.is_empty() {
            return Err("bleve: QueryBleve validating request, err: knn query field must be non-empty".into());
        }
        let filter = match k.get("filter") {
            Some(f) if !f.is_null() => {
                Some(parse_query(f).map_err(|e| format!("bleve: QueryBleve parsing searchRequest, err: {e}"))?)
            }
            _ => None,
        };
        if field != idx.field {
            // bleve: a kNN on a field with no vector mapping finds nothing.
            continue;
        }
        effective_knns += 1;
        if vector.len() != idx.dims {
            return Err(format!(
                "bleve: QueryBleve validating request, err: vector dimension mismatch for field `{field}`: query vector has {} dims, field has {}",
                vector.len(),
                idx.dims
            ));
        }
        let boost = k.get("boost").and_then(Value::as_f64).unwrap_or(1.0);
        let mut candidates: Vec<(&Doc, f64)> = idx
            .docs
            .iter()
            .filter(|d| filter.as_ref().is_none_or(|f| matches(f, d)))
            .filter(|d| d.vector.len() == vector.len())
            .map(|d| (d, d.vector.iter().zip(&vector).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()))
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
        for (d, score) in candidates.into_iter().take(kk as usize) {
            let e = scores.entry(&d.id).or_insert((0.0, 0));
            e.0 += score * boost;
            e.1 += 1;
        }
    }
    if operator_and && effective_knns > 0 {
        // "and": a kNN hit must be among every kNN's top k (query-only hits stay).
        scores.retain(|_, (_, n)| *n == 0 || *n == effective_knns);
    }
    let mut hits: Vec<(&str, f64)> = scores.into_iter().map(|(id, (s, _))| (id, s)).collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let total_hits = hits.len();
    let max_score = hits.first().map_or(0.0, |h| h.1);

    let wanted: Vec<String> = body
        .get("fields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let pindex = format!(
        "{}_{}_{}",
        listed_name(state, idx),
        &uuid_for(&format!("index/{}/{:?}/{}", idx.bucket, idx.scope, idx.name))[..16],
        &uuid_for(&idx.name)[..8]
    );
    let rows: Vec<Value> = hits
        .into_iter()
        .skip(from)
        .take(size)
        .map(|(id, score)| {
            let mut hit = json!({"index": pindex, "id": id, "score": score, "sort": ["_score"]});
            let doc = idx.docs.iter().find(|d| d.id == id);
            if let Some(doc) = doc
                && !wanted.is_empty()
            {
                let fields: Map<String, Value> = doc
                    .fields
                    .iter()
                    .filter(|(k, _)| wanted.iter().any(|w| w == "*" || w == *k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !fields.is_empty() {
                    hit["fields"] = Value::Object(fields);
                }
            }
            hit
        })
        .collect();
    let mut result = json!({
        "status": {"total": 1, "failed": 0, "successful": 1},
        "hits": rows,
        "total_hits": total_hits,
        "cost": 0,
        "max_score": max_score,
        "took": 0,
        "facets": null,
    });
    if body.get("showrequest").and_then(Value::as_bool) == Some(true) {
        result["request"] = body.clone();
    }
    Ok(result)
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn hmac512(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = hmac::Hmac::<Sha512>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// PBKDF2-HMAC-SHA512 with one output block (64 bytes, SCRAM-SHA512's SaltedPassword).
fn pbkdf2_sha512(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut block = salt.to_vec();
    block.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac512(password, &block);
    let mut out = u.clone();
    for _ in 1..iterations {
        u = hmac512(password, &u);
        out.iter_mut().zip(&u).for_each(|(o, x)| *o ^= x);
    }
    out
}
