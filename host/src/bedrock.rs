//! The `bedrock` capability: Amazon Bedrock knowledge-base `Retrieve`, called by the host
//! through the official SDK (`aws-sdk-bedrockagentruntime`, `aws-config`).
//!
//! - Credentials come from the standard chain (environment, profile files, web identity,
//!   container and instance metadata, `credential_process`) and never reach a component.
//! - Region: `grants.bedrock.region`, then `AWS_REGION`, then `AWS_DEFAULT_REGION`, then
//!   `us-east-1`; an empty value counts as unset (the SDK would take `""` as a region).
//! - Every call is bounded: attempts, per-attempt and whole-operation timeouts come from the
//!   grant (defaults: 3 attempts, 10 s, 30 s, all within the instance's deadline), and the SDK
//!   retries throttling and 5xx.
//! - The grant lists the knowledge bases an instance may query; anything else is `denied`.
//!
//! Requests and responses cross the WIT boundary as the service's JSON shapes; [`request`]
//! and [`response`] convert them to and from the SDK's types.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_bedrockagentruntime::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockagentruntime::operation::retrieve::RetrieveOutput;
use aws_sdk_bedrockagentruntime::types as t;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::{Document, Number};
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

use crate::bindings::quarry::retrieval::bedrock::{BedrockError, Host, ServiceError};
use crate::sandbox::StoreState;

/// The largest Retrieve request body the host parses (64 KiB): the query text is at most
/// 20,000 characters by the API model, and the rest is a few options and a filter.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// What an instance may do with Bedrock (`[tools.NAME.grants.bedrock]`).
#[derive(Debug, Clone, PartialEq)]
pub struct BedrockGrant {
    /// Knowledge-base ids the instance may query; `*` allows any.
    pub knowledge_bases: Vec<String>,
    /// The region; when unset, the environment's (see the module docs).
    pub region: Option<String>,
    /// An endpoint instead of the region's (tests, VPC endpoints).
    pub endpoint: Option<String>,
    /// The AWS profile to take credentials and settings from.
    pub profile: Option<String>,
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Limit on one attempt.
    pub attempt_timeout: Duration,
    /// Limit on a whole call, retries included.
    pub timeout: Duration,
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
}

impl Default for BedrockGrant {
    fn default() -> Self {
        BedrockGrant {
            knowledge_bases: Vec::new(),
            region: None,
            endpoint: None,
            profile: None,
            max_attempts: 3,
            attempt_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

impl BedrockGrant {
    /// Whether `kb` is granted: `*` grants everything; an id grants that id; an ARN grants that
    /// ARN, and an ARN pattern (`*` for a whole field: region, account or id) grants the ARNs it
    /// matches. An id never grants an ARN (it could name another account's or region's
    /// knowledge base), nor an ARN an id.
    pub fn allows(&self, kb: &str) -> bool {
        let Ok(asked) = KbIdentifier::parse(kb) else { return false };
        self.knowledge_bases.iter().any(|k| k == "*" || KbIdentifier::parse(k).is_ok_and(|g| g.grants(&asked)))
    }
}

/// A knowledge base as the API names it (`KnowledgeBaseIdentifier`): a 10-character id, or
/// `arn:aws[-x]:bedrock:REGION:ACCOUNT:knowledge-base/ID`. In a grant, an ARN's region, account
/// and id may each be `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KbIdentifier {
    /// A bare id.
    Id(String),
    /// An ARN's fields.
    Arn {
        /// `aws`, `aws-cn`, `aws-us-gov`, …
        partition: String,
        /// The region, or `*`.
        region: String,
        /// The 12-digit account, or `*`.
        account: String,
        /// The id, or `*`.
        id: String,
    },
}

impl KbIdentifier {
    /// Parses an id or an ARN by the API model's pattern, accepting `*` fields (for grants; a
    /// request naming `*` matches no knowledge base the service has, and is refused there).
    pub fn parse(s: &str) -> Result<KbIdentifier, String> {
        let id_ok = |id: &str| id == "*" || (id.len() == 10 && id.bytes().all(|b| b.is_ascii_alphanumeric()));
        let bad = || {
            format!(
                "{} is not a knowledge-base id (10 letters and digits) or ARN (arn:aws:bedrock:REGION:ACCOUNT:knowledge-base/ID)",
                crate::text::quoted_prefix(s, 64)
            )
        };
        if !s.starts_with("arn:") {
            return if s != "*" && id_ok(s) { Ok(KbIdentifier::Id(s.to_string())) } else { Err(bad()) };
        }
        let parts: Vec<&str> = s.splitn(6, ':').collect();
        let [_, partition, "bedrock", region, account, resource] = parts[..] else { return Err(bad()) };
        let id = resource.strip_prefix("knowledge-base/").ok_or_else(bad)?;
        let partition_ok = partition == "aws"
            || partition
                .strip_prefix("aws-")
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        let region_ok = region == "*"
            || ((1..=20).contains(&region.len())
                && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        let account_ok = account == "*" || (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()));
        if !(partition_ok && region_ok && account_ok && id_ok(id)) {
            return Err(bad());
        }
        Ok(KbIdentifier::Arn {
            partition: partition.to_string(),
            region: region.to_string(),
            account: account.to_string(),
            id: id.to_string(),
        })
    }

    /// Whether a field is `*`: a grant pattern, not a knowledge base.
    pub fn is_pattern(&self) -> bool {
        match self {
            KbIdentifier::Id(_) => false,
            KbIdentifier::Arn { region, account, id, .. } => [region, account, id].iter().any(|f| *f == "*"),
        }
    }

    /// Whether this grant entry covers `asked`.
    fn grants(&self, asked: &KbIdentifier) -> bool {
        let field = |granted: &str, asked: &str| granted == "*" || granted == asked;
        match (self, asked) {
            (KbIdentifier::Id(g), KbIdentifier::Id(a)) => g == a,
            (
                KbIdentifier::Arn { partition: gp, region: gr, account: ga, id: gi },
                KbIdentifier::Arn { partition: ap, region: ar, account: aa, id: ai },
            ) => gp == ap && field(gr, ar) && field(ga, aa) && field(gi, ai),
            _ => false,
        }
    }
}

/// The region to use: the grant's, else the environment's, else `us-east-1`.
pub fn region(grant: Option<&str>, env: impl Fn(&str) -> Option<String>) -> String {
    let set = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    set(grant.map(str::to_string))
        .or_else(|| set(env("AWS_REGION")))
        .or_else(|| set(env("AWS_DEFAULT_REGION")))
        .unwrap_or_else(|| "us-east-1".to_string())
}

/// One instance's link to Bedrock: the grant, and a client built at the first call (loading
/// credentials and profiles is slow and may not be needed).
pub struct BedrockLink {
    grant: BedrockGrant,
    client: OnceCell<aws_sdk_bedrockagentruntime::Client>,
    /// The largest response body read (the instance's `max_output`).
    max_bytes: usize,
}

impl BedrockLink {
    /// A link for `grant`; a response body may take at most `max_bytes` in the host.
    pub fn new(grant: BedrockGrant, max_bytes: u64) -> Arc<BedrockLink> {
        Arc::new(BedrockLink {
            grant,
            client: OnceCell::new(),
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        })
    }

    async fn client(&self) -> &aws_sdk_bedrockagentruntime::Client {
        self.client
            .get_or_init(|| async {
                let g = &self.grant;
                let http = aws_smithy_http_client::Builder::new()
                    .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                        aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                    ))
                    .build_https();
                let http = aws_sdk_bedrockagentruntime::config::SharedHttpClient::new(BoundedClient {
                    inner: http,
                    max: self.max_bytes,
                });
                let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .http_client(http)
                    .region(aws_config::Region::new(region(g.region.as_deref(), |k| std::env::var(k).ok())))
                    .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(g.max_attempts))
                    .timeout_config(
                        aws_config::timeout::TimeoutConfig::builder()
                            .connect_timeout(g.connect_timeout)
                            .operation_attempt_timeout(g.attempt_timeout)
                            .operation_timeout(g.timeout)
                            .build(),
                    );
                if let Some(e) = &g.endpoint {
                    loader = loader.endpoint_url(e);
                }
                if let Some(p) = &g.profile {
                    loader = loader.profile_name(p);
                }
                aws_sdk_bedrockagentruntime::Client::new(&loader.load().await)
            })
            .await
    }

    /// `Retrieve` (see the WIT docs): checks the grant, converts, calls, converts back.
    pub async fn retrieve(&self, kb: &str, body: &str) -> Result<String, BedrockError> {
        // The identifier goes into the request path: it must be one the API accepts.
        let asked = KbIdentifier::parse(kb).map_err(BedrockError::InvalidRequest)?;
        if asked.is_pattern() {
            return Err(BedrockError::InvalidRequest(format!("{kb:?} is a pattern, not a knowledge base")));
        }
        if !self.grant.allows(kb) {
            let hint = if matches!(asked, KbIdentifier::Arn { .. }) {
                "; an ARN is granted by that ARN or an ARN pattern (arn:aws:bedrock:REGION:ACCOUNT:knowledge-base/*), never by its id alone"
            } else {
                ""
            };
            return Err(BedrockError::Denied(format!(
                "knowledge base {kb:?} is not in this instance's grants.bedrock.knowledge_bases ({}); add it to query it{hint}",
                self.grant.knowledge_bases.join(", ")
            )));
        }
        if body.len() > MAX_REQUEST_BYTES {
            return Err(BedrockError::InvalidRequest(format!(
                "the request body is {} bytes, over the limit of {MAX_REQUEST_BYTES} bytes (a Retrieve request is a query text of at most 20,000 characters and a few options)",
                body.len()
            )));
        }
        let req = request(body).map_err(BedrockError::InvalidRequest)?;
        let client = self.client().await;
        let mut call = client
            .retrieve()
            .knowledge_base_id(kb)
            .retrieval_query(req.query)
            .set_retrieval_configuration(req.configuration)
            .set_guardrail_configuration(req.guardrail)
            .set_next_token(req.next_token);
        if let Some(u) = req.user {
            call = call.user_context(u);
        }
        // The SDK's operation timeout bounds the call; this is a backstop against a hang it
        // misses, still inside the instance's deadline (the config keeps a second free).
        let limit = self.grant.timeout + Duration::from_millis(500);
        match tokio::time::timeout(limit, call.send()).await {
            Err(_) => Err(BedrockError::Unavailable(format!("no answer from Bedrock within {limit:?}"))),
            Ok(Ok(out)) => Ok(response(&out).to_string()),
            Ok(Err(e)) => Err(error(e)),
        }
    }
}

/// An HTTP client whose response bodies end in an error past `max` bytes: the SDK reads a whole
/// body before it parses it, and the endpoint (a proxy, a VPC endpoint, a hostile server)
/// chooses its size.
#[derive(Debug)]
struct BoundedClient {
    inner: aws_sdk_bedrockagentruntime::config::SharedHttpClient,
    max: usize,
}

impl HttpClient for BoundedClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        SharedHttpConnector::new(BoundedConnector {
            inner: self.inner.http_connector(settings, components),
            max: self.max,
        })
    }
}

#[derive(Debug)]
struct BoundedConnector {
    inner: SharedHttpConnector,
    max: usize,
}

impl HttpConnector for BoundedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (call, max) = (self.inner.call(request), self.max);
        HttpConnectorFuture::new(async move {
            let response = call.await?;
            Ok(response
                .map(|body| aws_smithy_types::body::SdkBody::from_body_1_x(http_body_util::Limited::new(body, max))))
        })
    }
}

fn error(
    e: SdkError<
        aws_sdk_bedrockagentruntime::operation::retrieve::RetrieveError,
        aws_sdk_bedrockagentruntime::config::http::HttpResponse,
    >,
) -> BedrockError {
    match &e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            BedrockError::Service(ServiceError {
                code: err.code().unwrap_or("Unknown").to_string(),
                message: err.message().unwrap_or("").to_string(),
                status: se.raw().status().as_u16(),
            })
        }
        SdkError::TimeoutError(_) => BedrockError::Unavailable("the call to Bedrock timed out".into()),
        _ => BedrockError::Unavailable(source_chain(&e)),
    }
}

/// The error and its causes on one line: the SDK's top-level messages ("dispatch failure")
/// say little on their own.
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// The parts of a RetrieveRequest body, as SDK types.
pub struct Request {
    /// `retrievalQuery`.
    pub query: t::KnowledgeBaseQuery,
    /// `retrievalConfiguration`.
    pub configuration: Option<t::KnowledgeBaseRetrievalConfiguration>,
    /// `guardrailConfiguration`.
    pub guardrail: Option<t::GuardrailConfiguration>,
    /// `nextToken`.
    pub next_token: Option<String>,
    /// `userContext`.
    pub user: Option<t::UserContext>,
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| format!("{path} must be an object"))
}

fn only(o: &Map<String, Value>, path: &str, known: &[&str]) -> Result<(), String> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{path}.{k} is not supported here; known fields: {}", known.join(", "))),
        None => Ok(()),
    }
}

fn string(o: &Map<String, Value>, key: &str, path: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{path}.{key} must be a string")),
    }
}

/// Parses a RetrieveRequest body. Supports the query text, the vector-search configuration
/// (number of results, search type, metadata filters), guardrails, paging and the user context;
/// a field it does not know is an error naming it, never silently dropped.
pub fn request(body: &str) -> Result<Request, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("the request is not JSON: {e}"))?;
    let o = object(&v, "request")?;
    only(
        o,
        "request",
        &["retrievalQuery", "retrievalConfiguration", "guardrailConfiguration", "nextToken", "userContext"],
    )?;
    let q = object(o.get("retrievalQuery").ok_or("request.retrievalQuery is required")?, "retrievalQuery")?;
    only(q, "retrievalQuery", &["text", "type"])?;
    let mut query = t::KnowledgeBaseQuery::builder().set_text(string(q, "text", "retrievalQuery")?);
    if let Some(ty) = string(q, "type", "retrievalQuery")? {
        query = query.r#type(t::KnowledgeBaseQueryType::from(ty.as_str()));
    }
    let configuration = match o.get("retrievalConfiguration") {
        None | Some(Value::Null) => None,
        Some(c) => {
            let c = object(c, "retrievalConfiguration")?;
            only(c, "retrievalConfiguration", &["vectorSearchConfiguration"])?;
            let vs = match c.get("vectorSearchConfiguration") {
                None => None,
                Some(vs) => Some(vector_search(object(vs, "retrievalConfiguration.vectorSearchConfiguration")?)?),
            };
            Some(t::KnowledgeBaseRetrievalConfiguration::builder().set_vector_search_configuration(vs).build())
        }
    };
    let guardrail = match o.get("guardrailConfiguration") {
        None | Some(Value::Null) => None,
        Some(g) => {
            let p = "guardrailConfiguration";
            let g = object(g, p)?;
            only(g, p, &["guardrailId", "guardrailVersion"])?;
            Some(
                t::GuardrailConfiguration::builder()
                    .set_guardrail_id(string(g, "guardrailId", p)?)
                    .set_guardrail_version(string(g, "guardrailVersion", p)?)
                    .build()
                    .map_err(|e| format!("{p}: {e}"))?,
            )
        }
    };
    let user = match o.get("userContext") {
        None | Some(Value::Null) => None,
        Some(u) => {
            let u = object(u, "userContext")?;
            only(u, "userContext", &["userId"])?;
            Some(
                t::UserContext::builder()
                    .set_user_id(string(u, "userId", "userContext")?)
                    .build()
                    .map_err(|e| format!("userContext: {e}"))?,
            )
        }
    };
    Ok(Request { query: query.build(), configuration, guardrail, next_token: string(o, "nextToken", "request")?, user })
}

fn vector_search(o: &Map<String, Value>) -> Result<t::KnowledgeBaseVectorSearchConfiguration, String> {
    let p = "retrievalConfiguration.vectorSearchConfiguration";
    only(o, p, &["numberOfResults", "overrideSearchType", "filter"])?;
    let mut b = t::KnowledgeBaseVectorSearchConfiguration::builder();
    if let Some(n) = o.get("numberOfResults") {
        let n =
            n.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or(format!("{p}.numberOfResults must be an integer"))?;
        b = b.number_of_results(n);
    }
    if let Some(s) = string(o, "overrideSearchType", p)? {
        b = b.override_search_type(t::SearchType::from(s.as_str()));
    }
    if let Some(f) = o.get("filter") {
        b = b.filter(filter(f, &format!("{p}.filter"))?);
    }
    Ok(b.build())
}

/// A RetrievalFilter: exactly one operator, `andAll`/`orAll` of filters or a `{key, value}`.
fn filter(v: &Value, path: &str) -> Result<t::RetrievalFilter, String> {
    let o = object(v, path)?;
    let [(op, arg)] = o.iter().collect::<Vec<_>>()[..] else {
        return Err(format!(
            "{path} must have exactly one operator, like {{\"equals\": {{\"key\": \"k\", \"value\": \"v\"}}}}"
        ));
    };
    let here = format!("{path}.{op}");
    let list = |arg: &Value| -> Result<Vec<t::RetrievalFilter>, String> {
        let items = arg.as_array().ok_or(format!("{here} must be a list of filters"))?;
        items.iter().enumerate().map(|(i, f)| filter(f, &format!("{here}[{i}]"))).collect()
    };
    let attr = |arg: &Value| -> Result<t::FilterAttribute, String> {
        let a = object(arg, &here)?;
        only(a, &here, &["key", "value"])?;
        t::FilterAttribute::builder()
            .set_key(string(a, "key", &here)?)
            .set_value(a.get("value").map(document))
            .build()
            .map_err(|e| format!("{here}: {e}"))
    };
    use t::RetrievalFilter as F;
    Ok(match op.as_str() {
        "andAll" => F::AndAll(list(arg)?),
        "orAll" => F::OrAll(list(arg)?),
        "equals" => F::Equals(attr(arg)?),
        "notEquals" => F::NotEquals(attr(arg)?),
        "greaterThan" => F::GreaterThan(attr(arg)?),
        "greaterThanOrEquals" => F::GreaterThanOrEquals(attr(arg)?),
        "lessThan" => F::LessThan(attr(arg)?),
        "lessThanOrEquals" => F::LessThanOrEquals(attr(arg)?),
        "in" => F::In(attr(arg)?),
        "notIn" => F::NotIn(attr(arg)?),
        "listContains" => F::ListContains(attr(arg)?),
        "startsWith" => F::StartsWith(attr(arg)?),
        "stringContains" => F::StringContains(attr(arg)?),
        other => return Err(format!("{path}: unknown filter operator {other:?}")),
    })
}

/// JSON to a Smithy document.
pub fn document(v: &Value) -> Document {
    match v {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(if let Some(u) = n.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = n.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(n.as_f64().unwrap_or(0.0))
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(a) => Document::Array(a.iter().map(document).collect()),
        Value::Object(o) => Document::Object(o.iter().map(|(k, v)| (k.clone(), document(v))).collect()),
    }
}

/// A Smithy document to JSON.
pub fn json_of(d: &Document) -> Value {
    match d {
        Document::Null => Value::Null,
        Document::Bool(b) => json!(b),
        Document::Number(Number::PosInt(u)) => json!(u),
        Document::Number(Number::NegInt(i)) => json!(i),
        Document::Number(Number::Float(f)) => json!(f),
        Document::String(s) => json!(s),
        Document::Array(a) => Value::Array(a.iter().map(json_of).collect()),
        Document::Object(o) => {
            let mut m: Vec<_> = o.iter().collect();
            m.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(m.into_iter().map(|(k, v)| (k.clone(), json_of(v))).collect())
        }
    }
}

/// A RetrieveResponse body, as the service would have sent it.
pub fn response(out: &RetrieveOutput) -> Value {
    let results: Vec<Value> = out
        .retrieval_results()
        .iter()
        .map(|r| {
            let mut o = Map::new();
            if let Some(c) = r.content() {
                let mut content = Map::new();
                if let Some(ty) = c.r#type() {
                    content.insert("type".into(), json!(ty.as_str()));
                }
                content.insert("text".into(), json!(c.text()));
                if let Some(b) = c.byte_content() {
                    content.insert("byteContent".into(), json!(b));
                }
                if let Some(row) = &c.row {
                    let cols: Vec<Value> = row
                        .iter()
                        .map(|col| {
                            json!({
                                "columnName": col.column_name,
                                "columnValue": col.column_value,
                                "type": col.r#type.as_ref().map(|t| t.as_str()),
                            })
                        })
                        .collect();
                    content.insert("row".into(), Value::Array(cols));
                }
                o.insert("content".into(), Value::Object(content));
            }
            if let Some(l) = r.location() {
                o.insert("location".into(), location(l));
            }
            if let Some(s) = r.score {
                o.insert("score".into(), json!(s));
            }
            if let Some(m) = &r.metadata {
                let mut m: Vec<_> = m.iter().collect();
                m.sort_by(|a, b| a.0.cmp(b.0));
                o.insert(
                    "metadata".into(),
                    Value::Object(m.into_iter().map(|(k, v)| (k.clone(), json_of(v))).collect()),
                );
            }
            if let Some(d) = &r.document_id {
                o.insert("documentId".into(), json!(d));
            }
            Value::Object(o)
        })
        .collect();
    let mut body = json!({ "retrievalResults": results });
    if let Some(t) = &out.next_token {
        body["nextToken"] = json!(t);
    }
    if let Some(g) = &out.guardrail_action {
        body["guardrailAction"] = json!(g.as_str());
    }
    body
}

fn location(l: &t::RetrievalResultLocation) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), json!(l.r#type().as_str()));
    let mut put = |key: &str, field: &str, value: Option<&str>| {
        if let Some(v) = value {
            o.insert(key.into(), json!({ field: v }));
        }
    };
    put("s3Location", "uri", l.s3_location.as_ref().and_then(|x| x.uri.as_deref()));
    put("webLocation", "url", l.web_location.as_ref().and_then(|x| x.url.as_deref()));
    put("confluenceLocation", "url", l.confluence_location.as_ref().and_then(|x| x.url.as_deref()));
    put("salesforceLocation", "url", l.salesforce_location.as_ref().and_then(|x| x.url.as_deref()));
    put("sharePointLocation", "url", l.share_point_location.as_ref().and_then(|x| x.url.as_deref()));
    put("customDocumentLocation", "id", l.custom_document_location.as_ref().and_then(|x| x.id.as_deref()));
    put("kendraDocumentLocation", "uri", l.kendra_document_location.as_ref().and_then(|x| x.uri.as_deref()));
    put("sqlLocation", "query", l.sql_location.as_ref().and_then(|x| x.query.as_deref()));
    put("oneDriveLocation", "url", l.one_drive_location.as_ref().and_then(|x| x.url.as_deref()));
    put("googleDriveLocation", "url", l.google_drive_location.as_ref().and_then(|x| x.url.as_deref()));
    Value::Object(o)
}

impl Host for StoreState {
    async fn default_knowledge_base(&mut self) -> wasmtime::Result<Option<String>> {
        // Only an instance granted Bedrock may read this one host variable.
        Ok(self.bedrock.as_ref().and_then(|_| std::env::var("BEDROCK_KB_ID").ok()).filter(|v| !v.trim().is_empty()))
    }

    async fn retrieve(&mut self, kb: String, request: String) -> wasmtime::Result<Result<String, BedrockError>> {
        Ok(match &self.bedrock {
            Some(link) => link.clone().retrieve(&kb, &request).await,
            None => Err(BedrockError::Denied(
                "this instance has no Bedrock grant; add [tools.NAME.grants.bedrock] with knowledge_bases = [\"...\"]"
                    .into(),
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_order_ignores_empty_values() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(region(None, env(&[])), "us-east-1");
        assert_eq!(region(None, env(&[("AWS_DEFAULT_REGION", "eu-west-1")])), "eu-west-1");
        assert_eq!(region(None, env(&[("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "eu-west-1")])), "eu-west-1");
        assert_eq!(
            region(None, env(&[("AWS_REGION", "ap-south-1"), ("AWS_DEFAULT_REGION", "eu-west-1")])),
            "ap-south-1"
        );
        assert_eq!(region(Some("us-west-2"), env(&[("AWS_REGION", "ap-south-1")])), "us-west-2");
        assert_eq!(region(Some(" "), env(&[])), "us-east-1");
    }

    #[test]
    fn grant_matches_ids_and_arns() {
        let g = BedrockGrant { knowledge_bases: vec!["ABCDEFGHIJ".into()], ..Default::default() };
        assert!(g.allows("ABCDEFGHIJ"));
        // An id grants no ARN: the ARN may name another account's or region's knowledge base.
        assert!(!g.allows("arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ"));
        assert!(!g.allows("arn:aws:bedrock:eu-west-1:999999999999:knowledge-base/ABCDEFGHIJ"));
        assert!(!g.allows("ABCDEFGHIK"));
        let mine = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ";
        let g = BedrockGrant { knowledge_bases: vec![mine.into()], ..Default::default() };
        assert!(g.allows(mine));
        for other in [
            "arn:aws:bedrock:us-east-1:999999999999:knowledge-base/ABCDEFGHIJ",
            "arn:aws:bedrock:eu-west-1:123456789012:knowledge-base/ABCDEFGHIJ",
            "arn:aws-cn:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ",
            "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ/x",
            "xarn:aws:bedrock:us-east-1:999999999999:knowledge-base/ABCDEFGHIJ",
            "ABCDEFGHIJ",
        ] {
            assert!(!g.allows(other), "{other}");
        }
        let pattern = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/*";
        let g = BedrockGrant { knowledge_bases: vec![pattern.into()], ..Default::default() };
        assert!(g.allows("arn:aws:bedrock:us-east-1:123456789012:knowledge-base/KB00000001"));
        assert!(!g.allows("arn:aws:bedrock:us-east-1:999999999999:knowledge-base/KB00000001"));
        assert!(!g.allows("KB00000001"));
        for bad in ["../x", "ABCDEFGHIJ?x", "arn:aws:bedrock:us-east-1:123:knowledge-base/ABCDEFGHIJ", ""] {
            assert!(KbIdentifier::parse(bad).is_err(), "{bad}");
        }
        assert!(!BedrockGrant::default().allows("ABCDEFGHIJ"));
        assert!(BedrockGrant { knowledge_bases: vec!["*".into()], ..Default::default() }.allows("ANYTHING12"));
    }

    #[test]
    fn request_fields_and_unknown_ones() {
        let r = request(
            r#"{"retrievalQuery":{"text":"q"},"nextToken":"t1",
                "retrievalConfiguration":{"vectorSearchConfiguration":{"numberOfResults":7,"overrideSearchType":"HYBRID",
                  "filter":{"andAll":[{"equals":{"key":"lang","value":"en"}},{"greaterThan":{"key":"year","value":2020}}]}}},
                "guardrailConfiguration":{"guardrailId":"g1","guardrailVersion":"DRAFT"}}"#,
        )
        .unwrap();
        assert_eq!(r.query.text(), "q");
        assert_eq!(r.next_token.as_deref(), Some("t1"));
        let vs = r.configuration.unwrap().vector_search_configuration.unwrap();
        assert_eq!(vs.number_of_results, 7);
        assert!(matches!(vs.filter, Some(t::RetrievalFilter::AndAll(ref f)) if f.len() == 2));
        assert_eq!(r.guardrail.unwrap().guardrail_version(), "DRAFT");
        let e = request(r#"{"retrievalQuery":{"text":"q"},"retrievalConfiguration":{"vectorSearchConfiguration":{"rerankingConfiguration":{}}}}"#)
            .err()
            .unwrap();
        assert!(e.contains("rerankingConfiguration is not supported"), "{e}");
        let e = request(r#"{"retrievalQuery":{"text":"q"},"retrievalConfiguration":{"vectorSearchConfiguration":{"filter":{"equals":{"key":"a","value":1},"in":{"key":"b","value":[1]}}}}}"#)
            .err()
            .unwrap();
        assert!(e.contains("exactly one operator"), "{e}");
    }
}
