//! `WasiHttpHooks` for a sandboxed instance: vet, then connect to the vetted address.
//!
//! The request/response plumbing follows wasmtime-wasi-http 48's
//! `default_send_request` (Apache-2.0 WITH LLVM-exception); what differs is that
//! the TCP connection goes to the address [`HttpPolicy::resolve`] vetted rather
//! than to the authority string, that every phase is bounded by the
//! instance's `http_timeout` instead of 600 s, and that what one instance can make the
//! host hold is bounded:
//! - at most [`MAX_IN_FLIGHT`] requests per instance are open at once (from resolving the
//!   name until the connection closes); one more is refused at once with
//!   `connection-limit-reached`;
//! - every request ends with the call that started it ([`PolicyHooks::end_call`]): nothing
//!   keeps a socket open, or waits on a server, once the guest's call has returned;
//! - a response head may take at most [`RESPONSE_HEAD_MAX`] bytes;
//! - refusals are kept and logged within bounds ([`Refusals`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::allowlist::split_host_port;
use super::policy::{HttpPolicy, Lookups, ResolveError};
use super::refusals::Refusals;

/// Requests one instance may have open at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// The largest response head (status line and headers) read from a server.
pub const RESPONSE_HEAD_MAX: usize = 64 << 10;
/// The longest authority (`host:port`) accepted: a DNS name is at most 253 bytes.
pub const MAX_AUTHORITY: usize = 262;

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;
type SendResult = Result<(http::Response<WasiBody>, IoFuture), Error>;

/// Enforces an instance's [`HttpPolicy`] on every outgoing request, bounds what its requests
/// hold (see the module docs), and records each refusal so the host can tell the user which
/// grant would allow it.
pub struct PolicyHooks {
    policy: Arc<HttpPolicy>,
    refusals: Arc<Refusals>,
    in_flight: Arc<Semaphore>,
    lookups: Lookups,
    /// Cancelled when the running call ends; every request started in it watches this token.
    call: CancellationToken,
}

impl PolicyHooks {
    /// Hooks enforcing `policy`, resolving names on `app`'s lookup threads.
    pub fn new(policy: Arc<HttpPolicy>, app: &super::AppState) -> Self {
        PolicyHooks {
            policy,
            refusals: Arc::default(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            lookups: Lookups {
                instance: Arc::new(Semaphore::new(super::policy::LOOKUPS_PER_INSTANCE)),
                host: app.lookups.clone(),
            },
            call: CancellationToken::new(),
        }
    }

    /// Takes the refusals recorded since the last call (bounded: see [`Refusals::take`]).
    pub fn take_refusals(&self) -> Vec<String> {
        self.refusals.take()
    }

    /// The refusal records, for tests and benches.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Ends every request the call that just returned started, and waits (at most a second)
    /// until each has let go of its connection, so the next call starts with every permit.
    pub async fn end_call(&mut self) {
        std::mem::replace(&mut self.call, CancellationToken::new()).cancel();
        if self.in_flight() > 0 {
            let all = self.in_flight.acquire_many(MAX_IN_FLIGHT as u32);
            let _ = tokio::time::timeout(Duration::from_secs(1), all).await;
        }
    }

    /// Requests open now.
    pub fn in_flight(&self) -> usize {
        MAX_IN_FLIGHT - self.in_flight.available_permits()
    }
}

impl WasiHttpHooks for PolicyHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: IoFuture,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let policy = self.policy.clone();
        let refusals = self.refusals.clone();
        let deny = move |msg: String| {
            refusals.record(policy.instance(), &msg);
            Error::HttpRequestDenied
        };
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            let _ = deny(format!(
                "HTTP request refused: tool instance {:?} already has {MAX_IN_FLIGHT} requests open; wait for their answers",
                self.policy.instance()
            ));
            return Box::new(async { Err(Error::ConnectionLimitReached) });
        };
        let policy = self.policy.clone();
        let (lookups, call) = (self.lookups.clone(), self.call.clone());
        Box::new(async move {
            let uri = request.uri().clone();
            let use_tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let scheme = if use_tls { "https" } else { "http" };
            let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
            if authority.as_str().len() > MAX_AUTHORITY {
                return Err(deny(format!(
                    "HTTP request refused: its authority is {} bytes, longer than any host name and port ({MAX_AUTHORITY})",
                    authority.as_str().len()
                )));
            }
            let (host, port) = split_host_port(authority.as_str()).map_err(|_| Error::HttpRequestUriInvalid)?;
            let host = host.to_string();
            let port = port.unwrap_or(if use_tls { 443 } else { 80 });
            policy.check_target(scheme, &host, port).map_err(|d| deny(d.0))?;
            let bound = |requested: Option<Duration>| requested.map_or(policy.timeout(), |d| d.min(policy.timeout()));
            let connect_timeout = bound(options.and_then(|o| o.connect_timeout));
            let first_byte_timeout = bound(options.and_then(|o| o.first_byte_timeout));
            let between_bytes_timeout = bound(options.and_then(|o| o.between_bytes_timeout));
            let send = async {
                let addr = match policy.resolve(&host, port, &lookups).await {
                    Ok(a) => a,
                    Err(ResolveError::Denied(d)) => return Err(deny(d.0)),
                    Err(ResolveError::Timeout) => return Err(Error::DnsTimeout),
                    Err(ResolveError::NotFound) => return Err(Error::DestinationNotFound),
                };
                send_to(request, addr, &host, use_tls, connect_timeout, first_byte_timeout, between_bytes_timeout).await
            };
            let (response, io) = tokio::select! {
                r = send => r?,
                () = call.cancelled() => return Err(Error::ConnectionTerminated),
            };
            // The connection, and with it the permit, lasts until the response is read or the
            // call ends, whichever comes first.
            let io: IoFuture = Box::new(async move {
                let _permit = permit;
                tokio::select! {
                    r = Pin::from(io) => r,
                    () = call.cancelled() => Err(Error::ConnectionTerminated),
                }
            });
            Ok((response, io))
        })
    }

    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        super::BODY_CHUNK
    }
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

async fn send_to(
    mut req: http::Request<WasiBody>,
    addr: std::net::SocketAddr,
    host: &str,
    use_tls: bool,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    between_bytes_timeout: Duration,
) -> SendResult {
    let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Ok(s) => s.map_err(Error::Connect)?,
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    let stream: Box<dyn Stream> = if use_tls {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(std::io::Error::other(e)))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = match bare.parse::<std::net::IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::from(ip),
            Err(_) => rustls::pki_types::ServerName::try_from(bare.to_string()).map_err(Error::InvalidDnsNameError)?,
        };
        match tokio::time::timeout(connect_timeout, connector.connect(name, tcp)).await {
            Ok(s) => Box::new(s.map_err(Error::Tls)?),
            Err(_) => return Err(Error::ConnectionTimeout),
        }
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::Builder::new()
            .max_buf_size(RESPONSE_HEAD_MAX)
            .handshake::<_, WasiBody>(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;

    // The request carries scheme and authority; on the wire only the path belongs.
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *req.uri_mut() = http::Uri::builder().path_and_query(path).build().map_err(|_| Error::HttpRequestUriInvalid)?;

    let mut conn = Some(conn);
    let send = async {
        let res = tokio::time::timeout(first_byte_timeout, sender.send_request(req))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)??;
        let mut timeout = tokio::time::interval(between_bytes_timeout.max(Duration::from_nanos(1)));
        timeout.reset();
        Ok::<_, Error>(res.map(|incoming| TimedBody { incoming, timeout }))
    };
    let mut send = std::pin::pin!(send);
    // Drive the connection while waiting for the response head.
    let res = std::future::poll_fn(|cx| match send.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(r),
        Poll::Pending => {
            let Some(c) = conn.as_mut() else {
                return Poll::Pending;
            };
            let r = ready!(Pin::new(c).poll(cx));
            conn = None;
            match r {
                Ok(()) => send.as_mut().poll(cx),
                Err(e) => Poll::Ready(Err(Error::from(e))),
            }
        }
    })
    .await?;
    let io: IoFuture = Box::new(async move {
        match conn.take() {
            None => Ok(()),
            Some(c) => c.await.map_err(|e| if e.is_timeout() { Error::HttpResponseTimeout } else { e.into() }),
        }
    });
    Ok((res.map(BodyExt::boxed_unsync), io))
}

/// A response body that fails if the peer goes quiet for longer than the bound.
struct TimedBody {
    incoming: hyper::body::Incoming,
    timeout: tokio::time::Interval,
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(if e.is_timeout() { Error::HttpResponseTimeout } else { Error::from(e) })))
            }
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}
