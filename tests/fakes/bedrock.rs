//! A local Bedrock Agent Runtime that speaks `Retrieve` as the API model (botocore's
//! service-2.json, summarised in shared/reference/bedrock-retrieve-shapes.txt) defines it:
//! restJson1, `POST /knowledgebases/{knowledgeBaseId}/retrieve`, SigV4 with signing name
//! `bedrock`.
//!
//! It checks every request's SigV4 signature against the test credentials, independently of
//! the SDK (its own canonical request and HMAC chain), and records every request (path,
//! headers, body) for tests to assert on. What it answers depends on the knowledge-base id:
//! see [`Fake::start`].

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::percent_decode;

/// The access key the fake accepts.
pub const ACCESS_KEY: &str = "AKIAQUARRYTEST000001";
/// Its secret.
pub const SECRET_KEY: &str = "quarry/test/secret/key/not/a/real/one/000";
/// The region the fake expects in signatures.
pub const REGION: &str = "us-east-1";

/// A knowledge base that answers normally: two pages of results covering every location and
/// content type.
pub const KB_OK: &str = "KBOK000001";
/// Answers 429 (ThrottlingException) to the first two attempts of every call, then normally.
pub const KB_THROTTLED: &str = "KBTHROTTL1";
/// Answers after 30 s.
pub const KB_SLOW: &str = "KBSLOW0001";
/// Answers no results.
pub const KB_EMPTY: &str = "KBEMPTY001";
/// Answers one result of 4 MiB of text.
pub const KB_HUGE: &str = "KBHUGE0001";
/// Answers ResourceNotFoundException (404) with the error type in the `x-amzn-errortype` header.
pub const KB_MISSING_HEADER: &str = "KBNOTFOUNH";
/// Answers ValidationException (400) with the error type in the body's `__type`.
pub const KB_INVALID_TYPE: &str = "KBINVALIDT";
/// Answers AccessDeniedException (403) with the error type in the body's `code`.
pub const KB_DENIED_CODE: &str = "KBDENIEDC1";
/// Answers InternalServerException (500), every attempt, the type in the `x-amzn-errortype` header.
pub const KB_BROKEN: &str = "KBBROKEN01";
/// Answers BadGatewayException (502), every attempt, the type in the body's `__type`.
pub const KB_BAD_GATEWAY_TYPE: &str = "KBGATEWAYT";
/// Answers InternalServerException (500), every attempt, the type in the body's `code`.
pub const KB_BROKEN_CODE: &str = "KBBROKENC1";

/// One request the fake saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The path as sent.
    pub path: String,
    /// Headers, lowercased names.
    pub headers: BTreeMap<String, String>,
    /// The body, parsed.
    pub body: Value,
    /// Whether its signature checked out.
    pub signed: bool,
}

/// A running fake; stops when dropped.
pub struct Fake {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    /// Starts the fake on a free port.
    pub async fn start() -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let attempts: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let (seen2, attempts2) = (seen.clone(), attempts.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (seen, attempts) = (seen2.clone(), attempts2.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (seen, attempts) = (seen.clone(), attempts.clone());
                        async move { Ok::<_, std::convert::Infallible>(handle(req, &seen, &attempts).await) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Fake { endpoint, seen, task }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }
}

fn reply(status: u16, headers: &[(&str, &str)], body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(status).header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Full::new(Bytes::from(body.to_string()))).expect("valid response")
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<Seen>>,
    attempts: &Mutex<BTreeMap<String, u32>>,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let headers: BTreeMap<String, String> = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_lowercase(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let path = parts.uri.path().to_string();
    let signed = verify(parts.method.as_str(), &path, parts.uri.query().unwrap_or(""), &headers, &body);
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().push(Seen {
        path: path.clone(),
        headers: headers.clone(),
        body: parsed.clone(),
        signed: signed.is_ok(),
    });
    if let Err(why) = signed {
        return reply(
            403,
            &[("x-amzn-errortype", "InvalidSignatureException")],
            json!({"message": format!("The request signature we calculated does not match the signature you provided. {why}")}),
        );
    }
    let Some(kb) = path.strip_prefix("/knowledgebases/").and_then(|p| p.strip_suffix("/retrieve")) else {
        return reply(
            404,
            &[("x-amzn-errortype", "UnknownOperationException")],
            json!({"message": "unknown operation"}),
        );
    };
    let kb = percent_decode(kb);
    let id = kb.rsplit_once("knowledge-base/").map_or(kb.as_str(), |(_, id)| id).to_string();
    let token = parsed["nextToken"].as_str().map(str::to_string);
    let key = format!("{id}:{}", token.as_deref().unwrap_or(""));
    let attempt = {
        let mut a = attempts.lock();
        let n = a.entry(key).or_default();
        *n += 1;
        *n
    };
    match id.as_str() {
        KB_THROTTLED if attempt <= 2 => {
            reply(429, &[("x-amzn-errortype", "ThrottlingException")], json!({"message": "Rate exceeded"}))
        }
        KB_SLOW => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            results(&parsed, token.as_deref())
        }
        KB_EMPTY => reply(200, &[], json!({"retrievalResults": []})),
        KB_HUGE => reply(200, &[], json!({"retrievalResults": [{"content": {"text": "h".repeat(4 << 20)}}]})),
        KB_MISSING_HEADER => reply(
            404,
            &[("x-amzn-errortype", "ResourceNotFoundException:http://internal.amazon.com/coral/com.amazon.bedrock/")],
            json!({"message": format!("Knowledge base {id} does not exist")}),
        ),
        KB_INVALID_TYPE => reply(
            400,
            &[],
            json!({"__type": "com.amazon.bedrock.agent.runtime#ValidationException", "message": "numberOfResults is too large"}),
        ),
        KB_DENIED_CODE => {
            reply(403, &[], json!({"code": "AccessDeniedException", "message": "not authorized to retrieve"}))
        }
        KB_BROKEN => reply(
            500,
            &[("x-amzn-errortype", "InternalServerException")],
            json!({"message": "internal failure", "reason": "test"}),
        ),
        KB_BAD_GATEWAY_TYPE => reply(
            502,
            &[],
            json!({"__type": "com.amazon.bedrock.agent.runtime#BadGatewayException", "message": "upstream model failed", "resourceName": "m"}),
        ),
        KB_BROKEN_CODE => {
            reply(500, &[], json!({"code": "InternalServerException", "message": "internal failure (code)"}))
        }
        _ => results(&parsed, token.as_deref()),
    }
}

/// Page one: one result per location type, with TEXT, ROW and byte content among them, and a
/// next token; page two (`nextToken: "page-2"`): one more result and no token. A guardrail in
/// the request makes `guardrailAction: INTERVENED`.
fn results(request: &Value, token: Option<&str>) -> Response<Full<Bytes>> {
    let text = |t: &str| json!({"type": "TEXT", "text": t});
    let mut body = if token == Some("page-2") {
        json!({"retrievalResults": [
            {"content": text("second page"), "location": {"type": "S3", "s3Location": {"uri": "s3://docs/page2.txt"}}, "score": 0.4}
        ]})
    } else {
        json!({"nextToken": "page-2", "retrievalResults": [
            {"content": text("from s3"), "location": {"type": "S3", "s3Location": {"uri": "s3://docs/a.txt"}}, "score": 0.91,
             "metadata": {"x-amz-bedrock-kb-source-uri": "s3://docs/a.txt", "year": 2024, "tags": ["a", "b"]}, "documentId": "doc-a"},
            {"content": text("from the web"), "location": {"type": "WEB", "webLocation": {"url": "https://example.com/w"}}, "score": 0.9},
            {"content": text("from confluence"), "location": {"type": "CONFLUENCE", "confluenceLocation": {"url": "https://wiki.example.com/c"}}, "score": 0.8},
            {"content": text("from salesforce"), "location": {"type": "SALESFORCE", "salesforceLocation": {"url": "https://sf.example.com/s"}}, "score": 0.7},
            {"content": text("from sharepoint"), "location": {"type": "SHAREPOINT", "sharePointLocation": {"url": "https://sp.example.com/p"}}, "score": 0.6},
            {"content": text("custom"), "location": {"type": "CUSTOM", "customDocumentLocation": {"id": "custom-1"}}, "score": 0.5},
            {"content": text("from kendra"), "location": {"type": "KENDRA", "kendraDocumentLocation": {"uri": "https://kendra.example.com/k"}}, "score": 0.45},
            {"content": {"type": "ROW", "row": [
                {"columnName": "id", "columnValue": "7", "type": "LONG"},
                {"columnName": "name", "columnValue": "widget", "type": "STRING"}]},
             "location": {"type": "SQL", "sqlLocation": {"query": "SELECT id, name FROM items"}}, "score": 0.44},
            {"content": text("from onedrive"), "location": {"type": "ONEDRIVE", "oneDriveLocation": {"url": "https://onedrive.example.com/o"}}, "score": 0.43},
            {"content": {"type": "IMAGE", "byteContent": "data:image/png;base64,iVBORw0KGgo="},
             "location": {"type": "GOOGLEDRIVE", "googleDriveLocation": {"url": "https://drive.example.com/g"}}, "score": 0.42}
        ]})
    };
    if request.get("guardrailConfiguration").is_some() {
        body["guardrailAction"] = json!("INTERVENED");
    }
    reply(200, &[], body)
}

/// SigV4's URI encoding: everything but the unreserved characters.
const SIGV4_RESERVED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

fn uri_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SIGV4_RESERVED).to_string()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac;
    let mut m = hmac::Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// Checks a SigV4 signature the way the service does (for a non-S3 service, the path as sent is
/// encoded once more); `Err` says what did not match.
fn verify(
    method: &str,
    path: &str,
    query: &str,
    headers: &BTreeMap<String, String>,
    body: &[u8],
) -> Result<(), String> {
    let auth = headers.get("authorization").ok_or("no Authorization header")?;
    let rest = auth.strip_prefix("AWS4-HMAC-SHA256 ").ok_or("not AWS4-HMAC-SHA256")?;
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|p| p.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
            .ok_or(format!("no {name} in Authorization"))
    };
    let (credential, signed_headers, signature) = (field("Credential")?, field("SignedHeaders")?, field("Signature")?);
    let mut scope = credential.splitn(2, '/');
    let (key_id, scope) = (scope.next().unwrap_or_default(), scope.next().unwrap_or_default());
    if key_id != ACCESS_KEY {
        return Err(format!("unknown access key {key_id}"));
    }
    let parts: Vec<&str> = scope.split('/').collect();
    if parts.len() != 4 || parts[1] != REGION || parts[2] != "bedrock" || parts[3] != "aws4_request" {
        return Err(format!("bad credential scope {scope}"));
    }
    let amz_date = headers.get("x-amz-date").ok_or("no x-amz-date")?;
    let canonical_uri = path.split('/').map(uri_encode).collect::<Vec<_>>().join("/");
    let mut q: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (uri_encode(&percent_decode(k)), uri_encode(&percent_decode(v)))
        })
        .collect();
    q.sort();
    let canonical_query = q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let mut canonical_headers = String::new();
    for h in signed_headers.split(';') {
        let v = headers.get(h).ok_or(format!("signed header {h} is missing"))?;
        canonical_headers.push_str(&format!("{h}:{}\n", v.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
    let payload_hash = hex::encode(Sha256::digest(body));
    if let Some(claimed) = headers.get("x-amz-content-sha256")
        && claimed != &payload_hash
    {
        return Err("x-amz-content-sha256 does not match the body".into());
    }
    let canonical =
        format!("{method}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{payload_hash}");
    let to_sign =
        format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let mut key = hmac(format!("AWS4{SECRET_KEY}").as_bytes(), parts[0].as_bytes());
    for p in &parts[1..] {
        key = hmac(&key, p.as_bytes());
    }
    let expected = hex::encode(hmac(&key, to_sign.as_bytes()));
    if expected != signature {
        return Err("signature mismatch".into());
    }
    Ok(())
}
