//! KV: the memcached binary protocol, as far as the SDK goes: its bootstrap (HELLO, the error
//! map, SASL with SCRAM-SHA512, SELECT_BUCKET, GET_CLUSTER_CONFIG, NOOP), collections
//! (GET_COLLECTION_ID, and keys prefixed with their collection's id), the document operations
//! (GET, SET, ADD, REPLACE, DELETE, TOUCH, with CAS and expiry, over `docs`), and the terse
//! cluster and bucket configs it hands out.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::docs::{Mutation, Store};
use super::scram::hmac512;
use super::{Seen, State, USERNAME, uuid_for};

const OP_GET: u8 = 0x00;
const OP_SET: u8 = 0x01;
const OP_ADD: u8 = 0x02;
const OP_REPLACE: u8 = 0x03;
const OP_DELETE: u8 = 0x04;
const OP_TOUCH: u8 = 0x1c;
const OP_GET_COLLECTION_ID: u8 = 0xbb;
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
const ST_NO_BUCKET: u16 = 0x08;
const ST_TMPFAIL: u16 = 0x86;
const ST_UNKNOWN_COLLECTION: u16 = 0x88;
const ST_UNKNOWN_SCOPE: u16 = 0x8c;

const DATATYPE_JSON: u8 = 0x01;

/// The HELLO features the fake implements: XERROR (JSON error contexts), SELECT_BUCKET, JSON,
/// COLLECTIONS. Not SEQNO (no mutation tokens), SNAPPY, ALT_REQUESTS (no framing extras) or
/// DUPLEX: the SDK does without them.
const GRANTABLE: [u16; 4] = [0x07, 0x08, 0x0b, 0x12];
/// The collections manifest's uid, as GET_COLLECTION_ID answers it (the bucket config's
/// `collectionsManifestUid`).
const MANIFEST_UID: u64 = 2;

fn opcode_name(op: u8) -> String {
    match op {
        OP_GET => "GET".into(),
        OP_SET => "SET".into(),
        OP_ADD => "ADD".into(),
        OP_REPLACE => "REPLACE".into(),
        OP_DELETE => "DELETE".into(),
        OP_TOUCH => "TOUCH".into(),
        OP_NOOP => "NOOP".into(),
        OP_HELLO => "HELLO".into(),
        OP_SASL_LIST_MECHS => "SASL_LIST_MECHS".into(),
        OP_SASL_AUTH => "SASL_AUTH".into(),
        OP_SASL_STEP => "SASL_STEP".into(),
        OP_SELECT_BUCKET => "SELECT_BUCKET".into(),
        OP_GET_CLUSTER_CONFIG => "GET_CLUSTER_CONFIG".into(),
        OP_GET_COLLECTION_ID => "GET_COLLECTION_ID".into(),
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
    /// Whether COLLECTIONS was negotiated: keys then start with their collection's id (LEB128).
    collections: bool,
    bucket: Option<String>,
    /// Between SASL_AUTH and SASL_STEP: `client-first-bare,server-first`, the combined nonce
    /// and whether the user name was known.
    scram: Option<(String, String, bool)>,
}

struct KvReply {
    status: u16,
    datatype: u8,
    extras: Vec<u8>,
    cas: u64,
    value: Vec<u8>,
}

impl KvReply {
    fn ok(value: impl Into<Vec<u8>>) -> Self {
        KvReply { status: ST_SUCCESS, datatype: 0, extras: Vec::new(), cas: 0, value: value.into() }
    }
    fn json(status: u16, value: &Value) -> Self {
        KvReply { status, datatype: DATATYPE_JSON, extras: Vec::new(), cas: 0, value: value.to_string().into_bytes() }
    }
    fn cas(cas: u64) -> Self {
        KvReply { cas, ..KvReply::ok(Vec::new()) }
    }
}

/// A request as the handlers see it.
struct KvRequest<'a> {
    opcode: u8,
    datatype: u8,
    cas: u64,
    extras: &'a [u8],
    key: &'a [u8],
    value: &'a [u8],
}

/// A key's collection id (LEB128) and the key itself.
fn split_collection(key: &[u8]) -> Option<(u32, &[u8])> {
    let mut id: u32 = 0;
    for (i, b) in key.iter().enumerate().take(5) {
        id |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((id, &key[i + 1..]));
        }
    }
    None
}

pub(super) async fn serve_kv(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
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
        let datatype = header[5];
        let cas = u64::from_be_bytes(header[16..24].try_into().expect("8 bytes"));
        let ext_start = framing_len.min(body.len());
        let key_start = (framing_len + ext_len).min(body.len());
        let key_end = (key_start + key_len).min(body.len());
        let extras = &body[ext_start..key_start];
        let key = &body[key_start..key_end];
        let value = &body[key_end..];

        let request = KvRequest { opcode, datatype, cas, extras, key, value };
        let reply = match opcode {
            OP_GET | OP_SET | OP_ADD | OP_REPLACE | OP_DELETE | OP_TOUCH => kv_data(state, &conn, &request),
            _ => kv_handle(state, &mut conn, opcode, key, value),
        };
        // Recorded without the collection prefix, as the SDK's caller named it.
        let key = match opcode {
            OP_GET | OP_SET | OP_ADD | OP_REPLACE | OP_DELETE | OP_TOUCH if conn.collections => {
                split_collection(key).map_or(key, |(_, k)| k)
            }
            _ => key,
        };
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
        out.push(reply.extras.len() as u8);
        out.push(reply.datatype);
        out.extend_from_slice(&reply.status.to_be_bytes());
        out.extend_from_slice(&((reply.extras.len() + reply.value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&opaque);
        out.extend_from_slice(&reply.cas.to_be_bytes());
        out.extend_from_slice(&reply.extras);
        out.extend_from_slice(&reply.value);
        stream.write_all(&out).await?;
    }
}

fn kv_error(conn: &KvConn, status: u16, context: &str) -> KvReply {
    // With XERROR negotiated, a real server explains errors in a JSON body.
    if conn.xerror {
        KvReply::json(status, &json!({"error": {"context": context, "ref": "00000000-0000-0000-0000-000000000000"}}))
    } else {
        KvReply { status, datatype: 0, extras: Vec::new(), cas: 0, value: Vec::new() }
    }
}

/// GET, SET, ADD, REPLACE, DELETE and TOUCH on the selected bucket's documents.
fn kv_data(state: &State, conn: &KvConn, r: &KvRequest<'_>) -> KvReply {
    if !conn.authenticated {
        return kv_error(conn, ST_EACCESS, "Not authenticated");
    }
    let Some(bucket) = &conn.bucket else {
        return kv_error(conn, ST_NO_BUCKET, "No bucket selected");
    };
    let (collection, key) = if conn.collections {
        match split_collection(r.key) {
            Some(split) => split,
            None => return kv_error(conn, ST_INVALID_ARGS, "Invalid collection id prefix"),
        }
    } else {
        (0, r.key)
    };
    if !state.collection_ids(bucket).iter().any(|(_, id)| *id == collection) {
        return kv_error(conn, ST_UNKNOWN_COLLECTION, "Unknown collection");
    }
    let u32_at = |i: usize| r.extras.get(i..i + 4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    let refused = |status: u16| {
        let why = if status == super::docs::ST_KEY_EXISTS { "CAS mismatch or key exists" } else { "Not found" };
        kv_error(conn, status, why)
    };
    let failing = &state.failing_writes;
    let write = matches!(r.opcode, OP_SET | OP_ADD | OP_REPLACE | OP_DELETE | OP_TOUCH);
    // The key knob refuses changes to a document, not its creation (ADD).
    let failing_key = r.opcode != OP_ADD && state.failing_key.lock().as_deref() == Some(key);
    if write && (failing_key || failing.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok()) {
        return kv_error(conn, ST_TMPFAIL, "Temporary failure");
    }
    match r.opcode {
        OP_GET => match state.docs.get(bucket, collection, key) {
            Ok(d) => KvReply {
                status: ST_SUCCESS,
                datatype: d.datatype,
                extras: d.flags.to_be_bytes().to_vec(),
                cas: d.cas,
                value: d.value,
            },
            Err(st) => refused(st),
        },
        OP_SET | OP_ADD | OP_REPLACE => {
            let (Some(flags), Some(expiry)) = (u32_at(0), u32_at(4)) else {
                return kv_error(conn, ST_INVALID_ARGS, "Request must include extras");
            };
            let how = match r.opcode {
                OP_SET => Store::Set,
                OP_ADD => Store::Add,
                _ => Store::Replace,
            };
            // ADD takes no CAS: a real server refuses one with EINVAL.
            if how == Store::Add && r.cas != 0 {
                return kv_error(conn, ST_INVALID_ARGS, "Invalid CAS for add");
            }
            let m =
                Mutation { bucket, collection, key, value: r.value, datatype: r.datatype, flags, expiry, cas: r.cas };
            state.docs.store(how, &m).map_or_else(refused, KvReply::cas)
        }
        OP_DELETE => state.docs.delete(bucket, collection, key, r.cas).map_or_else(refused, KvReply::cas),
        OP_TOUCH => match u32_at(0) {
            Some(expiry) => state.docs.touch(bucket, collection, key, expiry).map_or_else(refused, KvReply::cas),
            None => kv_error(conn, ST_INVALID_ARGS, "Request must include extras"),
        },
        _ => kv_error(conn, ST_UNKNOWN_COMMAND, "Unknown command"),
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
            conn.collections = granted.contains(&0x12);
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
            KvReply { status: ST_AUTH_CONTINUE, ..KvReply::ok(server_first.into_bytes()) }
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
        OP_GET_COLLECTION_ID => {
            let Some(bucket) = &conn.bucket else {
                return kv_error(conn, ST_NO_BUCKET, "No bucket selected");
            };
            // The path is the value ("scope.collection"); an empty scope or collection is the
            // default one.
            let path = String::from_utf8_lossy(value);
            let (scope, collection) = path.split_once('.').unwrap_or((&path, ""));
            let scope = if scope.is_empty() { "_default" } else { scope };
            let collection = if collection.is_empty() { "_default" } else { collection };
            let ids = state.collection_ids(bucket);
            match ids.iter().find(|((s, c), _)| s == scope && c == collection) {
                Some((_, id)) => {
                    let mut extras = MANIFEST_UID.to_be_bytes().to_vec();
                    extras.extend_from_slice(&id.to_be_bytes());
                    KvReply { extras, ..KvReply::ok(Vec::new()) }
                }
                None if ids.iter().any(|((s, _), _)| s == scope) => {
                    kv_error(conn, ST_UNKNOWN_COLLECTION, "Unknown collection")
                }
                None => kv_error(conn, ST_UNKNOWN_SCOPE, "Unknown scope"),
            }
        }
        OP_NOOP => KvReply::ok(Vec::new()),
        _ => kv_error(conn, ST_UNKNOWN_COMMAND, "Unknown command"),
    }
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

/// The config revision. Constant: the SDK polls every 2.5 s and must keep seeing the same map.
const REV: i64 = 1073;

/// The terse cluster config a 7.6 node answers GET_CLUSTER_CONFIG with before a bucket is
/// selected.
pub(super) fn cluster_config(state: &State) -> Value {
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
pub(super) fn bucket_config(state: &State, bucket: &str) -> Value {
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
