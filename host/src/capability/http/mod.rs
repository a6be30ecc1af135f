//! The outgoing-HTTP capability: `wasi:http/outgoing-handler` behind a per-instance
//! allowlist.
//!
//! Moving parts:
//! - [`AllowEntry`] and [`Cidr`] are parsed once, at config load; a bad entry is a
//!   config error.
//! - [`HttpPolicy`] decides: the request's scheme, host and port must match an
//!   allowlist entry; then every address the host resolves to is vetted, and
//!   loopback, private, link-local, shared (CGNAT), multicast, unspecified and
//!   cloud-metadata addresses are refused unless `private_networks` (or an IP
//!   literal allowlist entry) names them.
//! - [`PolicyHooks`] enforces it in `WasiHttpHooks::send_request`, resolves the
//!   name itself, and connects to the very address it vetted, so a DNS answer
//!   that changes between check and connect (rebinding) cannot slip past.
//!   Every phase (DNS, connect, TLS, first byte, between bytes) is bounded by the
//!   instance's `http_timeout`; requests in flight, name lookups and refusal records are
//!   bounded per instance, and a call's requests end with it.
//!
//! Example: with `http = ["https://docs.example.com"]`, a guest GET of
//! `https://docs.example.com/a.docx` resolves `docs.example.com`, drops any
//! private answers, connects to a public one with TLS for `docs.example.com`;
//! a GET of `http://169.254.169.254/` is refused before any packet is sent, and
//! the call's error says which grant would allow it.
//!
//! Files: `grant` (`http`, `private_networks`, `http_timeout`), `allowlist`, `policy`, `send`
//! (the hooks), `bounds` (what a guest may store in a request), `refusals`; here, the per-store [`State`], its view and the linker call.

mod allowlist;
mod bounds;
mod grant;
mod policy;
mod refusals;
mod send;

use std::sync::Arc;

use wasmtime::component::Linker;
use wasmtime_wasi_http::{WasiHttp, WasiHttpCtx, WasiHttpCtxView};

use super::StoreView;
use crate::support::values::{HumanDuration, KeyError};

pub use allowlist::{AllowEntry, Cidr, HostPattern};
pub use bounds::{MAX_METHOD, MAX_PATH_WITH_QUERY, MAX_REQUEST_STRINGS, MAX_SCHEME};
pub use grant::{DEFAULT_HTTP_TIMEOUT, grant};
pub use policy::{HttpPolicy, LOOKUPS_IN_HOST, LOOKUPS_PER_INSTANCE, Lookups, Refusal, special_range};
pub use refusals::{MAX_KEPT, MAX_REFUSAL_BYTES, Refusals};
pub use send::{MAX_AUTHORITY, MAX_IN_FLIGHT, PolicyHooks, RESPONSE_HEAD_MAX};

/// The largest header set (names and values) a guest may build or receive.
pub const FIELD_SIZE_LIMIT: usize = 64 << 10;
/// The largest write to an outgoing body; one is buffered while the previous one is sent.
pub const BODY_CHUNK: usize = 64 << 10;

/// Outgoing HTTP's state for one app: the name-lookup threads every instance shares.
pub struct AppState {
    lookups: Arc<tokio::sync::Semaphore>,
}

impl Default for AppState {
    fn default() -> Self {
        AppState { lookups: Arc::new(tokio::sync::Semaphore::new(LOOKUPS_IN_HOST)) }
    }
}

/// One store's outgoing HTTP: wasi-http's context and the hooks that enforce the policy.
pub struct State {
    ctx: WasiHttpCtx,
    hooks: PolicyHooks,
}

impl State {
    /// The state for an instance whose policy is `policy`, in `app`.
    pub fn new(policy: &HttpPolicy, app: &AppState) -> State {
        let mut ctx = WasiHttpCtx::new();
        ctx.set_field_size_limit(FIELD_SIZE_LIMIT);
        State { ctx, hooks: PolicyHooks::new(Arc::new(policy.clone()), app) }
    }

    /// The hooks: refusal records, requests in flight.
    pub fn hooks(&self) -> &PolicyHooks {
        &self.hooks
    }

    /// Refusals since the last call (bounded).
    pub fn take_refusals(&self) -> Vec<String> {
        self.hooks.take_refusals()
    }

    /// Ends the requests of the call that just returned (see [`PolicyHooks::end_call`]).
    pub async fn end_call(&mut self) {
        self.hooks.end_call().await;
    }
}

/// The outgoing-HTTP capability.
pub struct Http;

impl super::Capability for Http {
    const GRANT_KEYS: &'static [&'static str] = &["http", "private_networks", "http_timeout"];

    type RawGrant = RawGrant;
    type Grant = HttpPolicy;
    type RawSection = ();
    type RawHost = ();
    type Section = ();
    type AppState = AppState;
    type State = State;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut RawGrant,
        key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "http" => raw.http = map.next_value()?,
            "private_networks" => raw.private_networks = map.next_value()?,
            _ => raw.http_timeout = Some(map.next_value()?),
        }
        Ok(())
    }

    fn grant(raw: RawGrant, _: &(), cx: &super::GrantContext<'_>) -> Result<HttpPolicy, KeyError> {
        grant(cx.instance, &raw.http, &raw.private_networks, raw.http_timeout)
    }

    fn state(
        policy: &HttpPolicy,
        app: &AppState,
        _: &mut super::StoreContext<'_>,
    ) -> Result<State, super::SandboxError> {
        Ok(State::new(policy, app))
    }

    fn end_call(state: &mut State) -> impl std::future::Future<Output = ()> + Send {
        state.end_call()
    }

    fn take_refusals(state: &State) -> Vec<String> {
        state.take_refusals()
    }

    fn link<T: super::CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        link(l, |t| view(t.parts()))
    }
}

/// The outgoing-HTTP keys as written.
#[derive(Default)]
pub struct RawGrant {
    http: Vec<String>,
    private_networks: Vec<String>,
    http_timeout: Option<HumanDuration>,
}

/// wasi-http's view of a store: this capability's [`State`] and the store's resource table.
pub fn view(parts: StoreView<'_>) -> WasiHttpCtxView<'_> {
    let State { ctx, hooks } = parts.states.get_mut::<Http>();
    WasiHttpCtxView { ctx, table: parts.table, hooks }
}

/// Adds `wasi:http/outgoing-handler` and its types, served by the view `get` makes of the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> WasiHttpCtxView<'_>) -> wasmtime::Result<()> {
    use wasmtime_wasi_http::p2::bindings::{LinkOptions, http};
    http::outgoing_handler::add_to_linker::<_, WasiHttp>(l, get)?;
    http::types::add_to_linker::<_, WasiHttp>(l, &LinkOptions::default().into(), get)?;
    // Strings a guest stores in a request are bounded when stored, not when sent.
    bounds::shadow_setters(l, get)
}
