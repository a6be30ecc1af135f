//! The SDK client of one instance, and the `Retrieve` call: the grant checked, the request
//! converted, the call bounded, the error mapped.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_bedrockagentruntime::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use tokio::sync::OnceCell;

use super::grant::{BedrockGrant, KbIdentifier};
use super::json::{request, response};
use crate::wit::{BedrockError, ServiceError};

/// The largest Retrieve request body the host parses (64 KiB): the query text is at most
/// 20,000 characters by the API model, and the rest is a few options and a filter.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

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
pub struct Client {
    grant: BedrockGrant,
    client: OnceCell<aws_sdk_bedrockagentruntime::Client>,
    /// The largest response body read (the instance's `max_output`).
    max_bytes: usize,
}

impl Client {
    /// A link for `grant`; a response body may take at most `max_bytes` in the host.
    pub fn new(grant: BedrockGrant, max_bytes: u64) -> Arc<Client> {
        Arc::new(Client { grant, client: OnceCell::new(), max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX) })
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
}
