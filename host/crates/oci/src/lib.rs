//! Components from OCI registries: `component = "oci://REGISTRY/REPO@sha256:…"` (or `:TAG`,
//! pinned in `quarry.lock` the first time it is resolved), in the CNCF Wasm OCI artifact format
//! (a manifest whose config is `application/vnd.wasm.config.v0+json` and whose one layer is
//! `application/wasm`), through `oci-client` and `oci-wasm`.
//!
//! - **By digest.** What runs is the manifest digest the config or the lock names; the manifest
//!   is checked against it, the layer against the manifest's digest for it, as the bytes arrive.
//!   A registry that serves other bytes is refused, and nothing of them is kept.
//! - **Bounded.** A layer over the host's `max_component_size` is refused from its manifest,
//!   before any of it is fetched, and a download stops at that size whatever the registry says;
//!   manifests and configs are at most 4 MiB. Every request is bounded in time.
//! - **Cached by digest** in the host's private cache (`oci/sha256/HEX.wasm`), under its trust
//!   rules: a cached digest serves with the registry down.
//! - **Credentials** come from `QUARRY_OCI_USERNAME`/`QUARRY_OCI_PASSWORD` for the registry
//!   `QUARRY_OCI_REGISTRY` names, or the standard docker config (`$DOCKER_CONFIG/config.json`,
//!   `~/.docker/config.json`), each scoped to its registry's host, never sent to a token service
//!   on another host nor over plain HTTP unless its key says so (`credentials`); components
//!   never see them.
//!
//! - **Signed**, when the config names a key: cosign key-based signatures (`sign`), checked
//!   before the component is downloaded.
//!
//! Files: `reference` (`oci://` references), `credentials` (who gets a credential), `pull` (manifests, layers, the cache), `push`
//! (`quarry push`), `sign` (cosign signatures), `lock` (`quarry.lock`).

#![deny(missing_docs)]

mod credentials;
mod lock;
mod pull;
mod push;
mod reference;
mod sign;

use std::time::Duration;

/// The registry client and the Wasm artifact format, for callers that speak to a registry
/// directly (the tests push what `quarry push` would not).
pub use {oci_client, oci_wasm};

pub use credentials::auth_for;
pub use lock::Lock;
pub use pull::{Pulled, Puller, component_layer};
pub use push::{VERSION_ANNOTATION, push};
pub use reference::OciRef;
pub use sign::{PublicKey, SigningKey, sign, signature_tag, verify};

/// Why a component could not be had from its registry.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse.
    #[error("{0}")]
    Reference(String),
    /// The registry could not be reached or refused the request.
    #[error("registry {registry}: {message}")]
    Registry {
        /// The registry's host (and port).
        registry: String,
        /// What failed.
        message: String,
    },
    /// The registry served something that is not what was pinned, or not a component.
    #[error("{reference}: {message}")]
    Refused {
        /// The reference, as written.
        reference: String,
        /// Why.
        message: String,
    },
    /// The cache could not be written or read.
    #[error("the component cache: {0}")]
    Cache(String),
}

/// Every request to a registry ends within this (a manifest, a layer of at most
/// `max_component_size`, a push).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Connecting to a registry.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest manifest or config accepted.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// A registry client for `registry`: plain HTTP only on loopback (as docker allows for a local
/// registry), HTTPS with the system's roots elsewhere.
fn client_for(registry: &str) -> oci_client::Client {
    // oci-client's rustls has no provider of its own: the host's is ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = if reference::is_loopback(registry) {
        oci_client::client::ClientProtocol::Http
    } else {
        oci_client::client::ClientProtocol::Https
    };
    oci_client::Client::new(oci_client::client::ClientConfig {
        protocol,
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    })
}
