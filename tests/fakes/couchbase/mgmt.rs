//! HTTP plumbing shared by the management and Search services (response bodies, Basic
//! credentials), and the management REST API: bucket settings, collections manifests and the
//! HTTP bootstrap configs.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use hyper::body::Frame;
use hyper::{Request, Response};
use serde_json::{Value, json};

use super::kv::{bucket_config, cluster_config};
use super::{BucketSpec, PASSWORD, State, USERNAME, uuid_for};

/// A response body: all at once, or cut short (see
/// [`QueryBehaviour::DropMidResponse`](super::QueryBehaviour::DropMidResponse)).
pub(super) enum ReplyBody {
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

pub(super) fn reply_json(status: u16, body: &Value) -> Response<ReplyBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(ReplyBody::Full(Some(Bytes::from(body.to_string()))))
        .expect("valid response")
}

pub(super) fn reply_text(status: u16, body: &str) -> Response<ReplyBody> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain;charset=utf-8")
        .body(ReplyBody::Full(Some(Bytes::from(body.to_string()))))
        .expect("valid response")
}

pub(super) fn basic_auth_ok(req: &Request<hyper::body::Incoming>) -> bool {
    let Some(value) = req.headers().get("authorization").and_then(|v| v.to_str().ok()) else { return false };
    let Some(encoded) = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic ")) else { return false };
    B64.decode(encoded.trim()).is_ok_and(|d| d == format!("{USERNAME}:{PASSWORD}").as_bytes())
}

pub(super) fn mgmt(state: &State, method: &str, segs: &[&str]) -> Response<ReplyBody> {
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
            Some(bucket) => reply_json(200, &manifest(state, bucket)),
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

/// `GET /pools/default/buckets/{b}` as a 7.6 (or 8.0) node answers it, trimmed to the settings
/// the SDK's BucketSettings reads (plus a few identifying fields).
fn bucket_settings(state: &State, bucket: &BucketSpec) -> Value {
    let (kv, mgmt, _) = state.ports;
    let version = if state.spec.version_8 { "8.0.0-3777-enterprise" } else { "7.6.2-3721-enterprise" };
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
        "nodes": [{"hostname": format!("127.0.0.1:{mgmt}"), "ports": {"direct": kv}, "services": ["fts", "kv"], "status": "healthy", "clusterMembership": "active", "version": version}],
        "basicStats": {"quotaPercentUsed": 1.5, "opsPerSec": 0, "diskFetches": 0, "itemCount": 0, "diskUsed": 0, "dataUsed": 0, "memUsed": 1572864},
    })
}

/// The collections manifest: uids are hex strings, `_default` scope and collection are 0; a
/// collection's uid is the id KV's GET_COLLECTION_ID answers.
fn manifest(state: &State, bucket: &BucketSpec) -> Value {
    let ids = state.collection_ids(&bucket.name);
    let mut next_scope = 7u32;
    let scopes: Vec<Value> = bucket
        .scopes
        .iter()
        .map(|(scope, collections)| {
            let scope_uid = if scope == "_default" {
                0
            } else {
                next_scope += 1;
                next_scope
            };
            let cols: Vec<Value> = collections
                .iter()
                .map(|c| {
                    let id = ids.iter().find(|((s, n), _)| s == scope && n == c).map_or(0, |(_, id)| *id);
                    json!({"name": c, "uid": format!("{id:x}"), "maxTTL": 0, "history": false})
                })
                .collect();
            json!({"name": scope, "uid": format!("{scope_uid:x}"), "collections": cols})
        })
        .collect();
    json!({"uid": "2", "scopes": scopes})
}
