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

mod allowlist;
mod policy;
mod refusals;
mod send;

pub use allowlist::{AllowEntry, Cidr, HostPattern};
pub use policy::{Denial, HttpPolicy, LOOKUPS_IN_HOST, LOOKUPS_PER_INSTANCE, special_range};
pub use refusals::{MAX_KEPT, MAX_REFUSAL_BYTES, Refusals};
pub use send::{MAX_AUTHORITY, MAX_IN_FLIGHT, PolicyHooks, RESPONSE_HEAD_MAX};
