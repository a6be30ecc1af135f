//! MCP over streamable HTTP, at `/mcp` on one address.
//!
//! - Handshake-era clients get a session each (`Mcp-Session-Id`) and a GET stream on
//!   which `tools/list_changed` arrives; 2026-07-28 requests are served statelessly.
//! - Loopback only by default. Any other address needs a bearer token
//!   ([`TOKEN_ENV`]), checked on every request; on loopback the token is optional, and
//!   rmcp's Host-header check stops DNS-rebinding pages from reaching the server.
//! - A body that is not one JSON-RPC message gets a JSON-RPC error (400), one over
//!   [`MAX_BODY_BYTES`] gets 413 with one; a client that sends its headers slower than
//!   [`HEADER_TIMEOUT`], or its body slower than `[serve] body_timeout`, is dropped (408).
//! - What clients hold is bounded (`[serve]`, see [`crate::config::ServeConfig`]): open
//!   connections (one more is answered 503 and closed), sessions (a new `initialize` beyond the
//!   cap gets 503 with a JSON-RPC error) and tool calls waiting or running per session (one
//!   more is a tool error).
//! - What every client together makes the server hold is bounded by `[serve] max_request_bytes`
//!   ([`crate::mcp::budget`]): a body is charged as it arrives, and the tree it will be parsed
//!   into is charged before it is built ([`crate::mcp::scan`]); a `tools/call` whose arguments
//!   are over [`crate::args::MAX_ARGS_BYTES`] is refused before any tree. One that does not
//!   fit gets 503 with a JSON-RPC error.
//! - A connection that has not yet sent one request the server accepts (past the token check)
//!   has [`UNACCEPTED_TIMEOUT`] to do so, and when every connection slot is taken, the oldest
//!   such connection is closed to make room: clients without a token cannot hold the slots.
//! - A call whose client closes its connection before the answer is dropped if it is still
//!   waiting for its instance.
//! - A request carrying an `Origin` header (a browser) is refused with 403 unless the origin
//!   is in `[serve] allowed_origins` or is the server's own, as the MCP specification requires
//!   of servers.
//! - A bearer token over plain HTTP beyond loopback travels in clear: that needs
//!   `--insecure-http`, and TLS belongs in a proxy in front.
//!
//! What bounds a request (the path, a browser's `Origin`, the bearer token, then the body
//! limit, body timeout and request budget) is `tower`/`tower-http` layers in front of the
//! endpoint ([`endpoint`]); what bounds connections (their cap, shedding the oldest unaccepted
//! one, the header and accept timeouts) is the accept loop's, which no per-request layer sees.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tower::util::BoxCloneService;

use crate::config::ServeConfig;
use crate::mcp::ServeError;
use crate::mcp::budget::{Budget, Held};
use crate::mcp::call_log::CallLog;
use crate::mcp::handler::{ClientGone, QuarryMcp};
use crate::mcp::notify::{Peers, fan_out};
use crate::mcp::ops::{self, HttpReply};
use crate::mcp::scan::{self, Admitted, Edge};
use crate::registry::Registry;

/// The environment variable holding the bearer token clients must send.
pub const TOKEN_ENV: &str = "QUARRY_MCP_TOKEN";
/// The path the server answers on.
pub const PATH: &str = "/mcp";
/// The largest request body accepted (16 MiB, as over stdio).
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// How long a handshake-era session may sit idle before the server forgets it. rmcp's default
/// is 5 minutes, shorter than an agent may think between two tool calls; a forgotten session
/// answers 404 and the client must start over.
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);
/// How long a client may take to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a new connection may take to send a request the server accepts (its headers in
/// full, past the token check): a client that has not authenticated holds a slot no longer.
pub const UNACCEPTED_TIMEOUT: Duration = Duration::from_secs(5);

/// How to serve.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen; port 0 picks a free port.
    pub addr: SocketAddr,
    /// The bearer token clients must send; required unless `addr` is loopback.
    pub token: Option<String>,
    /// The limits (`[serve]` and its flags).
    pub limits: ServeConfig,
    /// Serve a token beyond loopback over plain HTTP anyway (`--insecure-http`).
    pub insecure_http: bool,
    /// Where every tool call is logged (`--call-log`), if anywhere.
    pub call_log: Option<Arc<CallLog>>,
}

impl HttpOptions {
    /// Options for `addr` with the default limits, no token.
    pub fn new(addr: SocketAddr) -> Self {
        HttpOptions { addr, token: None, limits: ServeConfig::default(), insecure_http: false, call_log: None }
    }
}

/// A bound server, before it serves: [`HttpServer::addr`] is the real address (with the
/// port chosen when 0 was asked for).
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    peers: Arc<Peers>,
    stop: CancellationToken,
    connections: Arc<tokio::sync::Semaphore>,
    unaccepted: Arc<Unaccepted>,
}

/// What every connection's requests need.
struct Shared {
    service: StreamableHttpService<QuarryMcp, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    token: Option<String>,
    limits: ServeConfig,
    budget: Budget,
    /// What is served, for the probes and `/metrics`.
    registry: Arc<Registry>,
    /// The connection slots ([`ServeConfig::max_connections`]), for `/metrics`.
    connections: Arc<tokio::sync::Semaphore>,
    /// The server's own origins (`http://127.0.0.1:PORT`, and `http://localhost:PORT` on
    /// loopback): a request from them is no cross-site request.
    own_origins: Vec<String>,
}

/// The origins of a server bound to `addr`. Only a page the server itself served could send
/// them, and Quarry serves no pages; a page that DNS rebinding brought here carries its own
/// origin (`http://evil.example:PORT`), which is not among them.
fn own_origins(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut own = vec![match addr {
        SocketAddr::V4(a) => format!("http://{}:{port}", a.ip()),
        SocketAddr::V6(a) => format!("http://[{}]:{port}", a.ip()),
    }];
    if addr.ip().is_loopback() {
        own.push(format!("http://localhost:{port}"));
    }
    own
}

/// Connections that have not yet sent a request the server accepted, oldest first: the first
/// to be closed when every slot is taken.
#[derive(Default)]
struct Unaccepted {
    next: AtomicU64,
    queue: Mutex<VecDeque<(u64, CancellationToken)>>,
}

impl Unaccepted {
    fn add(&self, close: CancellationToken) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.queue.lock().push_back((id, close));
        id
    }

    /// The connection sent a request that was accepted, or ended: it is no longer shed first.
    fn remove(&self, id: u64) {
        self.queue.lock().retain(|(i, _)| *i != id);
    }

    /// Closes the oldest unaccepted connection; false when there is none.
    fn shed_oldest(&self) -> bool {
        let oldest = self.queue.lock().pop_front();
        oldest.map(|(_, close)| close.cancel()).is_some()
    }
}

/// One connection's standing, seen by its requests.
struct Connection {
    id: u64,
    unaccepted: Arc<Unaccepted>,
    accepted: tokio::sync::Notify,
    was_accepted: std::sync::atomic::AtomicBool,
}

impl Connection {
    fn accept(&self) {
        if !self.was_accepted.swap(true, Ordering::AcqRel) {
            self.unaccepted.remove(self.id);
            self.accepted.notify_one();
        }
    }
}

impl HttpServer {
    /// Binds `options.addr`; refuses a non-loopback address without a token.
    pub async fn bind(registry: Arc<Registry>, options: HttpOptions) -> Result<HttpServer, ServeError> {
        let token = options.token.filter(|t| !t.is_empty());
        let loopback = options.addr.ip().is_loopback();
        if !loopback && token.is_none() {
            return Err(ServeError::NoToken(options.addr));
        }
        if !loopback && !options.insecure_http {
            return Err(ServeError::PlainHttp(options.addr));
        }
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|source| ServeError::Bind { addr: options.addr, source })?;
        let stop = CancellationToken::new();
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(true)
            .with_max_request_body_bytes(MAX_BODY_BYTES)
            .with_cancellation_token(stop.child_token());
        if !loopback {
            // Remote clients name the server by whatever host they reach it as; the bearer
            // token, not the Host header, is what keeps strangers out.
            config = config.disable_allowed_hosts();
        }
        let peers = Arc::new(Peers::default());
        let budget = Budget::new(options.limits.max_request_bytes);
        let handler = QuarryMcp::new(registry.clone(), peers.clone())
            .with_queue_cap(options.limits.max_queued_calls)
            .with_budget(budget.clone())
            .with_call_log(options.call_log.clone());
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(SESSION_IDLE);
        let sessions = Arc::new(sessions);
        // One handler per session, each with its own count of calls.
        let service = StreamableHttpService::new(move || Ok(handler.for_session()), sessions.clone(), config);
        let connections = Arc::new(tokio::sync::Semaphore::new(options.limits.max_connections));
        let bound = listener.local_addr().map_err(|source| ServeError::Bind { addr: options.addr, source })?;
        let own_origins = own_origins(bound);
        let shared = Arc::new(Shared {
            service,
            sessions,
            token,
            limits: options.limits,
            budget,
            registry: registry.clone(),
            connections: connections.clone(),
            own_origins,
        });
        Ok(HttpServer { listener, shared, registry, peers, stop, connections, unaccepted: Arc::default() })
    }

    /// The address actually bound.
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A token that stops the server when cancelled.
    pub fn stopper(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Accepts connections until stopped.
    pub async fn serve(self) -> Result<(), ServeError> {
        let fan = tokio::spawn(fan_out(self.registry.clone(), self.peers.clone()));
        loop {
            let (stream, remote) = tokio::select! {
                () = self.stop.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, don't spin.
                        tracing::warn!(target: "quarry::mcp", "accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let permit = match self.connections.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                // Every slot is taken: make room by closing the oldest connection that has not
                // sent an accepted request, if there is one (its slot comes back as its task ends).
                Err(_) if self.unaccepted.shed_oldest() => {
                    tokio::time::timeout(Duration::from_secs(1), self.connections.clone().acquire_owned())
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
                Err(_) => None,
            };
            let Some(permit) = permit else {
                if let Some(held) = REFUSALS_LOG.take() {
                    tracing::warn!(target: "quarry::mcp", %remote, "refused a connection: {} are open ([serve] max_connections); {held} more refused since the last line", self.shared.limits.max_connections);
                }
                tokio::spawn(refuse_connection(stream));
                continue;
            };
            // A response goes out in several writes (an SSE priming event, the message, the end
            // of the stream); with Nagle's algorithm on, the client's delayed ACK adds ~40 ms.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(target: "quarry::mcp", %remote, "cannot set TCP_NODELAY: {e}");
            }
            let shared = self.shared.clone();
            let stop = self.stop.clone();
            let shed = CancellationToken::new();
            let connection = Arc::new(Connection {
                id: self.unaccepted.add(shed.clone()),
                unaccepted: self.unaccepted.clone(),
                accepted: tokio::sync::Notify::new(),
                was_accepted: false.into(),
            });
            tokio::spawn(async move {
                let _permit = permit;
                let svc = hyper_util::service::TowerToHyperService::new(endpoint(shared, connection.clone()));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), svc);
                let unaccepted_for_too_long = async {
                    if tokio::time::timeout(UNACCEPTED_TIMEOUT, connection.accepted.notified()).await.is_err()
                        && !connection.was_accepted.load(Ordering::Acquire)
                    {
                        return;
                    }
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    res = conn => if let Err(e) = res {
                        tracing::debug!(target: "quarry::mcp", %remote, "connection ended: {e}");
                    },
                    () = stop.cancelled() => {}
                    () = shed.cancelled() => {
                        tracing::debug!(target: "quarry::mcp", %remote, "closed an unaccepted connection to make room");
                    }
                    () = unaccepted_for_too_long => {
                        tracing::debug!(target: "quarry::mcp", %remote, "closed a connection that sent no accepted request within {UNACCEPTED_TIMEOUT:?}");
                    }
                }
                connection.unaccepted.remove(connection.id);
            });
        }
        fan.abort();
        Ok(())
    }
}

/// Log lines for refused connections and sessions: a client chooses how many it sends.
static REFUSALS_LOG: crate::support::log_budget::LogBudget =
    crate::support::log_budget::LogBudget::new(5, Duration::from_secs(1));

/// Answers a connection over the cap with 503 and closes it, within a second.
async fn refuse_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "too many connections; try again later\n";
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
}

/// One connection's service: the probes ([`ops::probe`]: `/healthz`, `/readyz`), answered in
/// front of every check; then, as `tower`/`tower-http` layers in front of the MCP endpoint, the
/// checks every other request passes (the path, then a browser's `Origin`, then the bearer
/// token); then the connection counts as accepted; then a POST's message is read, bounded in
/// size and time and charged to the request budget ([`ReadMessage`]); then the endpoint
/// ([`serve_mcp`]), or `/metrics` ([`ops::metrics`]).
fn endpoint(
    shared: Arc<Shared>,
    connection: Arc<Connection>,
) -> BoxCloneService<Request<Incoming>, HttpReply, Infallible> {
    let checked = checked_endpoint(shared.clone(), connection);
    tower::service_fn(move |req: Request<Incoming>| {
        let (shared, checked) = (shared.clone(), checked.clone());
        async move {
            let details = with_the_token(&shared, &req).is_ok();
            match ops::probe(&shared.registry, req.method(), req.uri().path(), details).await {
                Some(answer) => Ok(answer),
                None => checked.oneshot(req).await,
            }
        }
    })
    .boxed_clone()
}

/// [`endpoint`] past the probes.
#[allow(clippy::result_large_err, reason = "tower-http's ValidateRequest refuses with the Response itself")]
fn checked_endpoint(
    shared: Arc<Shared>,
    connection: Arc<Connection>,
) -> BoxCloneService<Request<Incoming>, HttpReply, Infallible> {
    use tower_http::validate_request::ValidateRequestHeaderLayer as Check;
    let (origins, tokens, reader) = (shared.clone(), shared.clone(), shared.clone());
    tower::ServiceBuilder::new()
        .layer(Check::custom(|req: &mut Request<Incoming>| on_the_endpoint(req)))
        .layer(Check::custom(move |req: &mut Request<Incoming>| from_an_allowed_origin(&origins, req)))
        .layer(Check::custom(move |req: &mut Request<Incoming>| with_the_token(&tokens, req)))
        .map_request(move |req: Request<Incoming>| {
            connection.accept();
            req
        })
        .layer(tower::layer::layer_fn(move |inner| ReadMessage { inner, shared: reader.clone() }))
        .service(tower::service_fn(move |req: Request<Full<Bytes>>| {
            let shared = shared.clone();
            async move {
                if req.uri().path() == ops::METRICS {
                    let figures = ops::ServerFigures {
                        connections: shared
                            .limits
                            .max_connections
                            .saturating_sub(shared.connections.available_permits()),
                        sessions: shared.sessions.sessions.read().await.len(),
                    };
                    return Ok::<_, Infallible>(ops::metrics(&shared.registry, figures));
                }
                Ok::<_, Infallible>(serve_mcp(&shared, req).await)
            }
        }))
        .boxed_clone()
}

/// The layer that reads a POST's message: its body bounded by [`MAX_BODY_BYTES`] and
/// `[serve] body_timeout`, charged to `[serve] max_request_bytes` as it arrives, its envelope
/// scanned once ([`read_message`]). The endpoint gets the whole body, and in the request's
/// extensions what the scan found ([`Scanned`]) and the arguments it took out; the budget is
/// held until the endpoint has answered (rmcp has parsed the message and handed it on). Other
/// methods (a GET stream, a DELETE) have no body to read.
#[derive(Clone)]
struct ReadMessage<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> tower::Service<Request<Incoming>> for ReadMessage<S>
where
    S: tower::Service<Request<Full<Bytes>>, Response = HttpReply, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = HttpReply;
    type Error = Infallible;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<HttpReply, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        // The clone that was made ready serves this request; the one left is made ready next.
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        let shared = self.shared.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            if parts.method != hyper::Method::POST {
                return inner.call(Request::from_parts(parts, Full::new(Bytes::new()))).await;
            }
            let Message { bytes, held, id, initialize, refused } =
                match read_message(body, &parts.headers, &shared).await {
                    Ok(read) => read,
                    Err(refusal) => return Ok(refusal),
                };
            parts.extensions.insert(Scanned { bytes: bytes.clone(), id, initialize });
            if let Some(refused) = refused {
                parts.extensions.insert(refused);
            }
            let answer = inner.call(Request::from_parts(parts, Full::new(bytes))).await;
            drop(held);
            answer
        })
    }
}

/// What [`ReadMessage`] found in a POST's message, for the endpoint.
#[derive(Clone)]
struct Scanned {
    /// The body as rmcp gets it (arguments over the limit taken out).
    bytes: Bytes,
    /// Its `id` (null when it has none a JSON-RPC error can echo).
    id: serde_json::Value,
    /// For an `initialize` request, its `id`.
    initialize: Option<serde_json::Value>,
}

/// Only [`PATH`] and `GET` [`ops::METRICS`] are served past the probes.
#[allow(clippy::result_large_err, reason = "tower-http's ValidateRequest refuses with the Response itself")]
fn on_the_endpoint(req: &Request<Incoming>) -> Result<(), Refusal> {
    let path = req.uri().path();
    if path == ops::METRICS && req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return Err(ops::not_allowed());
    }
    if path != PATH && path != ops::METRICS {
        return Err(plain(
            StatusCode::NOT_FOUND,
            &format!(
                "not found; the MCP endpoint is {PATH} (and {}, {}, {} for operators)",
                ops::HEALTHZ,
                ops::READYZ,
                ops::METRICS
            ),
        ));
    }
    Ok(())
}

/// A request from a browser page (it carries `Origin`) only from an allowed origin or the
/// server's own.
#[allow(clippy::result_large_err, reason = "tower-http's ValidateRequest refuses with the Response itself")]
fn from_an_allowed_origin(shared: &Shared, req: &Request<Incoming>) -> Result<(), Refusal> {
    let Some(origin) = req.headers().get(hyper::header::ORIGIN) else { return Ok(()) };
    let allowed = origin.to_str().is_ok_and(|o| {
        shared.limits.allowed_origins.iter().chain(&shared.own_origins).any(|a| a.eq_ignore_ascii_case(o))
    });
    if !allowed {
        let shown = crate::support::text::quoted_prefix(&String::from_utf8_lossy(origin.as_bytes()), 100);
        return Err(plain(
            StatusCode::FORBIDDEN,
            &format!(
                "origin {shown} is not allowed; add it to [serve] allowed_origins (or --allowed-origin) to let that page call this server"
            ),
        ));
    }
    Ok(())
}

/// With a token configured, every request carries it (`Authorization: Bearer`), compared in
/// constant time.
#[allow(clippy::result_large_err, reason = "tower-http's ValidateRequest refuses with the Response itself")]
fn with_the_token(shared: &Shared, req: &Request<Incoming>) -> Result<(), Refusal> {
    let Some(expected) = shared.token.as_deref() else { return Ok(()) };
    let sent =
        req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_credentials);
    if !sent.is_some_and(|s| same(s.as_bytes(), expected.as_bytes())) {
        let mut r = plain(StatusCode::UNAUTHORIZED, "missing or wrong bearer token (Authorization: Bearer <token>)");
        r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
        return Err(r);
    }
    Ok(())
}

/// The MCP endpoint, for a request that passed the layers ([`endpoint`]): the session cap on
/// a new `initialize`, then rmcp serves it.
async fn serve_mcp(shared: &Shared, req: Request<Full<Bytes>>) -> HttpReply {
    let service = &shared.service;
    let ends_session = req.method() == hyper::Method::DELETE;
    // Cancelled when the client is gone: when this future is dropped (the connection closed
    // before the answer), or when the answer's body is (sent, or the connection closed then).
    let gone = CancellationToken::new();
    let guard = gone.clone().drop_guard();
    let (mut parts, body) = req.into_parts();
    let scanned = parts.extensions.remove::<Scanned>();
    if let Some(Scanned { initialize: Some(id), .. }) = &scanned
        && !parts.headers.contains_key("mcp-session-id")
        && shared.sessions.sessions.read().await.len() >= shared.limits.max_sessions
    {
        let msg = format!(
            "the server holds its maximum of {} sessions; end idle ones (HTTP DELETE with their Mcp-Session-Id) or raise [serve] max_sessions",
            shared.limits.max_sessions
        );
        return rpc_error(StatusCode::SERVICE_UNAVAILABLE, -32000, &msg, id.clone());
    }
    parts.extensions.insert(ClientGone(gone.clone()));
    let response = service.handle(Request::from_parts(parts, body)).await;
    // rmcp answers a message it cannot parse (invalid UTF-8 in a string, a lone surrogate,
    // nesting past serde's limit, a number out of range, a shape it does not know) with a
    // bare 415; a JSON-RPC client gets a JSON-RPC error it can read instead. Parsed again
    // only then, to say why.
    if let Some(Scanned { bytes, id, .. }) = scanned
        && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
        && let Err(e) = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes)
    {
        return refused(scan::Refusal::malformed(e.into(), id, Edge::Http));
    }
    // The answer's body lives as long as the client waits for it: when it is dropped (sent, or
    // the connection closed), a call still waiting for its instance is dropped too.
    let response = response.map(|body| Guarded { body, _gone: guard }.boxed());
    if ends_session && response.status() == StatusCode::ACCEPTED {
        // rmcp acknowledges a session's end with 202; the Python SDK 1.x (CrewAI's) logs
        // "Session termination failed" on anything but 200 or 204.
        let mut done = Response::new(Full::new(Bytes::new()).boxed());
        *done.status_mut() = StatusCode::NO_CONTENT;
        return done;
    }
    response
}

/// A response body that cancels a token when it is dropped.
struct Guarded {
    body: BoxBody<Bytes, Infallible>,
    _gone: tokio_util::sync::DropGuard,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// An answer that refuses a request.
type Refusal = HttpReply;

/// A POST body [`read_message`] let through.
struct Message {
    /// The body, with arguments over the limit taken out.
    bytes: Bytes,
    /// What it holds of the budget.
    held: Held,
    /// Its `id` (null when it has none a JSON-RPC error can echo).
    id: serde_json::Value,
    /// For an `initialize` request, its `id`.
    initialize: Option<serde_json::Value>,
    /// The arguments taken out, for the handler to answer (see [`crate::mcp::scan::RefusedArguments`]).
    refused: Option<crate::mcp::scan::RefusedArguments>,
}

/// Reads a POST body (at most [`MAX_BODY_BYTES`], charged to the server's budget as it
/// arrives) and its envelope (JSON, one message object), building no tree; rmcp's parse, the
/// only one, completes the check (see [`serve_mcp`]).
/// Returns the body, what it holds of the budget (its bytes and the tree rmcp will build), for
/// an `initialize` request its `id`, and arguments it took out for their size.
///
/// rmcp answers a body that is not JSON, or not a JSON-RPC message, with a bare
/// `415 Unsupported Media Type`; a JSON-RPC client should get a JSON-RPC error it can read:
/// parse error (-32700) or invalid request (-32600), with `id` when one can be found.
async fn read_message(mut body: Incoming, headers: &hyper::HeaderMap, shared: &Shared) -> Result<Message, Refusal> {
    use http_body_util::BodyExt as _;
    let timeout = shared.limits.body_timeout;
    let budget = &shared.budget;
    let too_large = || {
        let msg = format!("the request is over {MAX_BODY_BYTES} bytes; send less");
        rpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, &msg, serde_json::Value::Null)
    };
    // A request that does not fit beside the others may fit later (503, try again); one that
    // would not fit an empty budget never will (413, send less), and must not be retried.
    let refuse = |id: serde_json::Value, needed: usize| {
        if needed > budget.total() {
            let msg = format!(
                "this request would take {needed} bytes of the server's memory (its body, and {} bytes a JSON value once parsed), more than [serve] max_request_bytes allows at once ({}); send less, or raise the limit",
                crate::mcp::scan::NODE_BYTES,
                budget.total()
            );
            return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, &msg, id);
        }
        let msg = format!(
            "the server holds its maximum of {} bytes of requests from all clients ([serve] max_request_bytes); try again in a moment",
            budget.total()
        );
        let mut r = rpc_error(StatusCode::SERVICE_UNAVAILABLE, -32000, &msg, id);
        r.headers_mut().insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
        r
    };
    let mut held = Held::none();
    // A declared length is refused or charged whole before a byte is read.
    let declared =
        headers.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared {
        if n > MAX_BODY_BYTES {
            return Err(too_large());
        }
        if !budget.charge(&mut held, n) {
            return Err(refuse(serde_json::Value::Null, n));
        }
    }
    let read = async {
        let mut buf = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                let msg = format!("cannot read the request body: {e}");
                rpc_error(StatusCode::BAD_REQUEST, -32600, &msg, serde_json::Value::Null)
            })?;
            let Ok(data) = frame.into_data() else { continue };
            if buf.len() + data.len() > MAX_BODY_BYTES {
                return Err(too_large());
            }
            let needed = buf.len() + data.len();
            let uncharged = needed.saturating_sub(held.bytes());
            if !budget.charge(&mut held, uncharged) {
                return Err(refuse(serde_json::Value::Null, needed));
            }
            buf.extend_from_slice(&data);
        }
        Ok(buf.freeze())
    };
    let bytes = match tokio::time::timeout(timeout, read).await {
        Ok(read) => read?,
        Err(_) => {
            let msg = format!("the request body did not arrive within {timeout:?}; send it at once");
            return Err(rpc_error(StatusCode::REQUEST_TIMEOUT, -32600, &msg, serde_json::Value::Null));
        }
    };
    let admitted = scan::admit(&bytes, Edge::Http).map_err(refused)?;
    let Admitted { smaller, id, initialize, refused, tree } = admitted;
    let initialize = initialize.then(|| id.clone());
    let bytes = smaller.map_or(bytes, Bytes::from);
    // The tree rmcp will build, the only one.
    if !budget.charge(&mut held, tree) {
        return Err(refuse(id, held.bytes().saturating_add(tree)));
    }
    Ok(Message { bytes, held, id, initialize, refused })
}

/// The answer to a body that is not one JSON-RPC message: 400 with its JSON-RPC error.
fn refused(m: scan::Refusal) -> Refusal {
    rpc_error(StatusCode::BAD_REQUEST, m.code, &m.message, m.id)
}

fn rpc_error(status: StatusCode, code: i64, message: &str, id: serde_json::Value) -> HttpReply {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// The credentials of an `Authorization` value in the Bearer scheme. The scheme name is
/// case-insensitive and may be followed by more than one space (RFC 9110 §11.1, §11.4).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim_start_matches(' '))
}

/// Compares in time that depends only on the lengths, so the token can't be guessed byte by byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn plain(status: StatusCode, message: &str) -> HttpReply {
    let mut r = Response::new(Full::new(Bytes::from(format!("{message}\n"))).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

#[cfg(test)]
mod tests {
    use super::{bearer_credentials, own_origins, same};

    #[test]
    fn a_server_knows_its_own_origins() {
        assert_eq!(own_origins("127.0.0.1:8765".parse().unwrap()), ["http://127.0.0.1:8765", "http://localhost:8765"]);
        assert_eq!(own_origins("[::1]:9".parse().unwrap()), ["http://[::1]:9", "http://localhost:9"]);
        assert_eq!(own_origins("10.0.0.5:80".parse().unwrap()), ["http://10.0.0.5:80"]);
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer tok", "bearer tok", "BEARER tok", "BeArEr   tok"] {
            assert_eq!(bearer_credentials(v), Some("tok"), "{v}");
        }
        for v in ["Basic tok", "Bearertok", "Bearer", "Bearer\ttok", "tok"] {
            assert_eq!(bearer_credentials(v), None, "{v}");
        }
    }

    #[test]
    fn token_comparison() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
