//! The host's capabilities: what a component may ask the host for, each in its own folder.
//!
//! Each capability is a type that implements [`Capability`]: its keys of
//! `[tools.NAME.grants]` and its operator-level sections (`[couchbase.NAME]`), parsed with
//! errors that name the key; its app-level and per-store state; its WIT `Host` impls, on its
//! own state, never on the store type; and its linker calls, which reach the state through a
//! projection of the store ([`CapabilityStore`], as wasmtime's wasi-http and wasi-nn do), so
//! no capability names the store.
//!
//! `list.rs` is the one list of them, one line each; everything that goes over all of them
//! (the grants, the sections, the app and store states, linking) is generated from it.
//! Adding a capability means a type that implements [`Capability`], its line, and its WIT. A
//! capability behind a cargo feature has its line under `#[cfg(feature = …)]`, and an entry in
//! [`OPTIONAL`] so that a host built without it says how to get it.
//!
//! | capability | grant keys | section | WIT |
//! |---|---|---|---|
//! | [`files::Files`] | `dirs` | | `wasi:filesystem` (a few functions shadowed) |
//! | [`http::Http`] | `http`, `private_networks`, `http_timeout` | | `wasi:http/outgoing-handler` |
//! | [`embedder::Embedder`] | (the instance's `embedder = "NAME"`) | | `quarry:retrieval/embedder` |
//! | [`progress::Reporting`] | | | `quarry:retrieval/progress` |
//! | [`corpus::Corpora`] | `corpora` | `[corpora.NAME]` | `quarry:retrieval/corpus` |
//! | [`client::Client`] | `client` | | `quarry:retrieval/client` |
//! | `bedrock::Bedrock` | `bedrock` | | `quarry:retrieval/bedrock` |
//! | `couchbase::Couchbase` | `couchbase` | `[couchbase.NAME]` | `quarry:retrieval/couchbase` |
//! | `nn::Nn` | `models` | `[models.NAME]`, `[host] onnxruntime` | `wasi:nn` |

mod keys;
mod list;

#[cfg(feature = "bedrock")]
pub mod bedrock;
pub mod client;
pub mod corpus;
#[cfg(feature = "couchbase")]
pub mod couchbase;
pub mod embedder;
pub mod files;
pub mod http;
#[cfg(feature = "nn")]
pub mod nn;
pub mod progress;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::MapAccess;
use wasmtime::component::ResourceTable;
use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::bindings::quarry::retrieval::types as wit_types;
use crate::support::exposition::Exposition;
use crate::support::values::KeyError;

/// Why a store's capability state could not be made (a granted directory that cannot be
/// preopened).
pub use files::SandboxError;
pub use keys::{CapabilityKeys, Disabled, Keyed, OPTIONAL, OptionalCapability, Table};
pub use list::{
    AppStates, CapabilitySections, CapabilityStates, Grants, HasCapability, RawCapabilityGrants, RawCapabilityHost,
    RawCapabilitySections, link_all,
};

/// A capability: what a component may ask the host for, from its config keys to its linker
/// calls. Spin's `Factor` is the model: associated types for each stage, methods that take one
/// stage to the next. A capability that needs another names it by type (wasi-nn preopens its
/// model directories through [`files::Files`]); the list (`list.rs`) holds one line for each.
///
/// The stages:
/// 1. its keys of `[tools.NAME.grants]` ([`Capability::GRANT_KEYS`], read into
///    [`Capability::RawGrant`]), of the top level ([`Capability::SECTION_KEYS`]: its sections,
///    such as `[models.NAME]`) and of `[host]` ([`Capability::HOST_KEYS`]);
/// 2. its [`Capability::Section`], validated once per config, and an instance's
///    [`Capability::Grant`], validated against it;
/// 3. its [`Capability::AppState`], built once per app (a registry and what it loads) and
///    shared by every store of the app;
/// 4. a store's [`Capability::State`], built from the grant when the store is made;
/// 5. its linker calls, which reach the state through the store's [`CapabilityStore`] view.
pub trait Capability: Sized + 'static {
    /// Its keys in `[tools.NAME.grants]`.
    const GRANT_KEYS: &'static [&'static str] = &[];
    /// Its top-level tables (`models` for `[models.NAME]`).
    const SECTION_KEYS: &'static [&'static str] = &[];
    /// Its keys in `[host]`.
    const HOST_KEYS: &'static [&'static str] = &[];

    /// Its grant keys as written.
    type RawGrant: Default;
    /// What an instance is granted (a grant with none of its keys is the empty grant).
    type Grant: std::fmt::Debug + Clone + PartialEq + Send + Sync + 'static;
    /// Its sections as written.
    type RawSection: Default;
    /// Its `[host]` keys as written.
    type RawHost: Default;
    /// Its sections, validated.
    type Section: std::fmt::Debug + Clone + Default + Send + Sync + 'static;
    /// Its state for one app.
    type AppState: Default + Send + Sync + 'static;
    /// Its state for one store.
    type State: Send + 'static;

    /// Reads the value of grant key `key` (one of [`Capability::GRANT_KEYS`]).
    fn read_grant<'de, A: MapAccess<'de>>(raw: &mut Self::RawGrant, key: &str, map: &mut A) -> Result<(), A::Error> {
        let _ = (raw, map);
        Err(serde::de::Error::custom(format!("`{key}` is not a grant key of this capability")))
    }

    /// Reads the value of top-level key `key` (one of [`Capability::SECTION_KEYS`]).
    fn read_section<'de, A: MapAccess<'de>>(
        raw: &mut Self::RawSection,
        key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        let _ = (raw, map);
        Err(serde::de::Error::custom(format!("`{key}` is not a section of this capability")))
    }

    /// Reads the value of `[host]` key `key` (one of [`Capability::HOST_KEYS`]).
    fn read_host<'de, A: MapAccess<'de>>(raw: &mut Self::RawHost, key: &str, map: &mut A) -> Result<(), A::Error> {
        let _ = (raw, map);
        Err(serde::de::Error::custom(format!("`{key}` is not a [host] key of this capability")))
    }

    /// Validates its sections; an error's key is the section's (`couchbase.NAME.key`).
    fn section(raw: Self::RawSection, host: Self::RawHost, base: &Path) -> Result<Self::Section, KeyError> {
        let _ = (raw, host, base);
        Ok(Self::Section::default())
    }

    /// Its sections again, once every capability's are read, where they name another's (a
    /// corpus in Couchbase names a `[couchbase.NAME]` connection): `None` keeps them as they are;
    /// an error's key is the full key at fault.
    fn linked(all: &CapabilitySections) -> Result<Option<Self::Section>, KeyError> {
        let _ = all;
        Ok(None)
    }

    /// Validates an instance's grant; an error's key is relative to the grants table.
    fn grant(raw: Self::RawGrant, section: &Self::Section, cx: &GrantContext<'_>) -> Result<Self::Grant, KeyError>;

    /// Whether `grant` uses section `section` (`models.NAME`): an instance that does restarts
    /// when the section's file changes.
    fn uses(grant: &Self::Grant, section: &str) -> bool {
        let _ = (grant, section);
        false
    }

    /// The directories `grant` lets a guest write, as `(key under the grants table, host
    /// directory)`: none may hold what the host loads.
    fn writable_dirs(grant: &Self::Grant) -> Vec<(String, PathBuf)> {
        let _ = grant;
        Vec::new()
    }

    /// The directories the host itself reads for a section, as `(section, directory)`: no
    /// read-write grant may overlap one.
    fn host_read_dirs(section: &Self::Section) -> Vec<(String, PathBuf)> {
        let _ = section;
        Vec::new()
    }

    /// Files the sections read, for the host's watcher: `(the file that changes, the file it
    /// reloads)`.
    fn watched(section: &Self::Section) -> Vec<(PathBuf, PathBuf)> {
        let _ = section;
        Vec::new()
    }

    /// Reloads, in `app`, what the sections read from `path`: the sections now serving a
    /// changed file (`models.NAME`), or why the file is refused. Blocks.
    fn reload(section: &Self::Section, path: &Path, app: &Self::AppState) -> Result<Vec<String>, String> {
        let _ = (section, path, app);
        Ok(Vec::new())
    }

    /// Writes its own figures for `/metrics` (the calls it made for guests, its queue) from
    /// `app` and its sections.
    fn metrics(section: &Self::Section, app: &Self::AppState, out: &mut Exposition) {
        let _ = (section, app, out);
    }

    /// What it cannot reach now, for `/readyz` (a corpus directory that is gone, a cluster that
    /// does not answer): one line each, naming the section. Called on every readiness probe:
    /// cheap checks, each bounded in time.
    fn unreachable(section: &Self::Section) -> impl Future<Output = Vec<String>> + Send {
        let _ = section;
        async { Vec::new() }
    }

    /// A new store's state for an instance granted `grant`.
    fn state(grant: &Self::Grant, app: &Self::AppState, cx: &mut StoreContext<'_>)
    -> Result<Self::State, SandboxError>;

    /// Before each guest call: who it runs for.
    fn begin_call(state: &mut Self::State, cx: &CallCx<'_>) {
        let _ = (state, cx);
    }

    /// After each guest call: what a call started ends with it.
    fn end_call(state: &mut Self::State) -> impl Future<Output = ()> + Send {
        let _ = state;
        async {}
    }

    /// What it refused since the last call (appended to a tool's error).
    fn take_refusals(state: &Self::State) -> Vec<String> {
        let _ = state;
        Vec::new()
    }

    /// Adds its interfaces to `l`, after WASI.
    fn link<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()>;
}

/// What a capability's grant may depend on beside its own keys and section.
pub struct GrantContext<'a> {
    /// The instance, for messages.
    pub instance: &'a str,
    /// The config file's directory: relative paths start there.
    pub base: &'a Path,
    /// The instance's deadline: a capability's timeouts must fit in it.
    pub deadline: Duration,
    /// The directory the host keeps for this instance alone (see the config's `private_dir`),
    /// where the host has a cache directory.
    pub private_dir: Option<&'a Path>,
}

/// Who a guest call runs for, as the capabilities see it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallCx<'a> {
    /// The client and deadline of the tool call an embedder's call computes for; none: the
    /// store's own instance and call.
    pub for_caller: Option<(&'a str, Instant)>,
    /// Whether this is a tool's own code (a call, a preparation), which the inference threads
    /// count (see `quarry_nn::inference::Busy`).
    pub tool_code: bool,
}

impl CallCx<'_> {
    /// A tool's own call or preparation.
    pub const TOOL_CODE: CallCx<'static> = CallCx { for_caller: None, tool_code: true };
}

/// What a capability's state may depend on beside its grant.
pub struct StoreContext<'a> {
    /// The instance's name.
    pub instance: &'a str,
    /// Its `max_output`: what a capability may bring into the host for one call.
    pub max_output: u64,
    /// The backend of its `embedder` import, when it has one.
    pub embedder: Option<Arc<dyn embedder::EmbedderBackend>>,
    /// The app the store belongs to.
    pub app: &'a AppStates,
    /// The store's WASI context as it is built: directory grants become its preopens.
    pub wasi: &'a mut WasiCtxBuilder,
    /// What the capabilities hold in the host for the store, counted against its memory grant.
    pub held: &'a crate::support::held::HostHeld,
}

/// What a store lends the capabilities, borrowed together: their states, and the parts of the
/// store some of them build on (the resource table, WASI's context, the instance's name).
pub struct StoreView<'a> {
    /// Every capability's state.
    pub states: &'a mut CapabilityStates,
    /// The store's resource table.
    pub table: &'a mut ResourceTable,
    /// WASI's context (its filesystem, for the directory capability).
    pub wasi: &'a mut WasiCtx,
    /// The instance's name.
    pub instance: &'a str,
    /// When the running call must end.
    pub deadline: Instant,
    /// The instance's memory grant (`grants.memory`), in bytes: what a capability holds for it
    /// is sized against it.
    pub memory: usize,
    /// Bytes of the store's linear memory now: what the host holds for it fits beside them.
    pub linear: usize,
}

/// A store the capabilities can be linked into. The store implements it; no capability names
/// the store, and the store names no capability.
pub trait CapabilityStore: Send + 'static {
    /// The store's parts, for the capabilities' projections.
    fn parts(&mut self) -> StoreView<'_>;
}

/// Capability `C`'s state in store `t`: the projection a capability's linker calls use.
pub fn state_of<C: Capability, T: CapabilityStore>(t: &mut T) -> &mut C::State
where
    CapabilityStates: HasCapability<C>,
{
    t.parts().states.state_mut()
}

/// The `types` interface has no functions: its linking needs a `Host`, with nothing in it.
impl wit_types::Host for CapabilityStates {}

/// Links the `types` interface (part of every capability's WIT).
fn link_types<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
    wit_types::add_to_linker::<T, HasSelf<CapabilityStates>>(l, |t| t.parts().states)
}
