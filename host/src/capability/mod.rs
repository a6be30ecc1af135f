//! The host's capabilities: what a component may ask the host for, each in its own folder.
//!
//! Each capability owns, in its folder:
//! - its keys of `[tools.NAME.grants]` (a `Raw…` type and a `grant` function that validates
//!   them into its grant, with errors that name the key), and its operator-level sections
//!   (`[couchbase.NAME]`);
//! - its per-store `State`, built from its grant when a store is made;
//! - its WIT `Host` impls, on its own `State`, never on the store type;
//! - its linker call, `link(linker, projection)`: the store hands each capability its state
//!   through a projection (`fn(&mut T) -> &mut State`, as wasmtime's wasi-http and wasi-nn
//!   do), so no capability names the store.
//!
//! This module is the one list of them. It holds no logic: one field per capability in
//! [`RawGrants`], [`Grants`], [`CapabilitySections`] and [`CapabilityStates`], and one line per capability where
//! they are built and linked. Adding a capability means a new folder, a line in each of these,
//! and its WIT.
//!
//! | capability | grant keys | section | WIT |
//! |---|---|---|---|
//! | [`files`] | `dirs` | | `wasi:filesystem` (a few functions shadowed) |
//! | [`http`] | `http`, `private_networks`, `http_timeout` | | `wasi:http/outgoing-handler` |
//! | [`embedder`] | (the instance's `embedder = "NAME"`) | | `quarry:retrieval/embedder` |
//! | [`progress`] | | | `quarry:retrieval/progress` |
//! | [`bedrock`] | `bedrock` | | `quarry:retrieval/bedrock` |
//! | [`couchbase`] | `couchbase` | `[couchbase.NAME]` | `quarry:retrieval/couchbase` |
//! | [`nn`] | `models` | `[models.NAME]` | `wasi:nn` |

#[cfg(any(not(feature = "bedrock"), not(feature = "couchbase"), not(feature = "nn")))]
mod absent;
#[cfg(feature = "bedrock")]
pub use quarry_bedrock as bedrock;
#[cfg(not(feature = "bedrock"))]
#[path = "absent/bedrock.rs"]
pub mod bedrock;
#[cfg(feature = "couchbase")]
pub use quarry_couchbase as couchbase;
#[cfg(not(feature = "couchbase"))]
#[path = "absent/couchbase.rs"]
pub mod couchbase;
pub mod embedder;
pub mod files;
pub mod http;
#[cfg(feature = "nn")]
pub use quarry_nn as nn;
#[cfg(not(feature = "nn"))]
#[path = "absent/nn.rs"]
pub mod nn;
pub mod progress;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use wasmtime::component::ResourceTable;
use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::bindings::quarry::retrieval::types as wit_types;
use crate::support::values::{ByteSize, HumanDuration, KeyError};

/// `[tools.NAME.grants]` as written: the limits every instance has (`memory`, `deadline`,
/// `max_output`, read by the config) and each capability's keys.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawGrants {
    #[serde(default)]
    dirs: Vec<files::RawDir>,
    #[serde(default)]
    http: Vec<String>,
    #[serde(default)]
    private_networks: Vec<String>,
    /// `memory`: the linear-memory limit.
    pub memory: Option<ByteSize>,
    /// `deadline`: the time a call may take.
    pub deadline: Option<HumanDuration>,
    /// `prepare_deadline`: the time the instance's preparation (an index build) may take.
    pub prepare_deadline: Option<HumanDuration>,
    http_timeout: Option<HumanDuration>,
    /// `max_output`: the largest output of a call.
    pub max_output: Option<ByteSize>,
    bedrock: Option<bedrock::RawGrant>,
    couchbase: Option<couchbase::RawGrant>,
    #[serde(default)]
    models: Vec<String>,
}

/// What a capability's grant may depend on beside its own keys.
pub struct GrantContext<'a> {
    /// The instance, for messages.
    pub instance: &'a str,
    /// The config file's directory: relative paths start there.
    pub base: &'a Path,
    /// The instance's deadline: a capability's timeouts must fit in it.
    pub deadline: Duration,
    /// The capabilities' sections.
    pub sections: &'a CapabilitySections,
}

/// What an instance is granted, capability by capability.
#[derive(Debug, Clone, PartialEq)]
pub struct Grants {
    /// Directories.
    pub dirs: Vec<files::DirGrant>,
    /// Outgoing HTTP.
    pub http: http::HttpPolicy,
    /// Amazon Bedrock; none: no Bedrock at all.
    pub bedrock: Option<bedrock::BedrockGrant>,
    /// Couchbase; none: no Couchbase at all.
    pub couchbase: Option<couchbase::CouchbaseGrant>,
    /// Models for `wasi:nn`.
    pub models: nn::ModelGrant,
}

impl Grants {
    /// Whether these grants use section `section` (`models.NAME`): an instance that does
    /// restarts when the section's file changes.
    pub fn uses(&self, section: &str) -> bool {
        section.strip_prefix("models.").is_some_and(|m| self.models.models.contains_key(m))
    }

    /// Each capability's grant from its keys of `raw`; an error's key is relative to the grants
    /// table.
    pub fn parse(raw: RawGrants, cx: &GrantContext<'_>) -> Result<Grants, KeyError> {
        Ok(Grants {
            dirs: files::grant(raw.dirs, cx.base)?,
            http: http::grant(cx.instance, &raw.http, &raw.private_networks, raw.http_timeout)?,
            bedrock: raw.bedrock.map(|b| bedrock::grant(b, cx.deadline).map_err(|e| e.under("bedrock"))).transpose()?,
            couchbase: raw
                .couchbase
                .map(|c| couchbase::grant(c, &cx.sections.couchbase, cx.deadline).map_err(|e| e.under("couchbase")))
                .transpose()?,
            models: nn::grant(&raw.models, &cx.sections.models)?,
        })
    }
}

/// The capabilities' operator-level sections as written (top-level tables of the config file).
pub struct RawCapabilitySections {
    /// `[couchbase.NAME]`.
    pub couchbase: BTreeMap<String, couchbase::RawConnection>,
    /// `[models.NAME]`.
    pub models: BTreeMap<String, nn::RawModel>,
    /// `[host] onnxruntime`: the library of the models run by onnxruntime.
    pub onnxruntime: Option<nn::RawOnnxruntime>,
}

/// The capabilities' operator-level sections.
#[derive(Debug, Clone, Default)]
pub struct CapabilitySections {
    /// `[couchbase.NAME]`: named connections.
    pub couchbase: BTreeMap<String, Arc<couchbase::Connection>>,
    /// `[models.NAME]`: model directories.
    pub models: BTreeMap<String, Arc<nn::ModelSection>>,
}

impl CapabilitySections {
    /// Validates the sections; an error's key is the section's (`couchbase.NAME.key`).
    pub fn parse(raw: RawCapabilitySections, base: &Path) -> Result<CapabilitySections, KeyError> {
        let mut sections = CapabilitySections::default();
        let raw_onnxruntime = raw.onnxruntime;
        for (name, raw) in raw.couchbase {
            let c = couchbase::connection(base, raw).map_err(|e| e.under(&format!("couchbase.{name}")))?;
            sections.couchbase.insert(name, Arc::new(c));
        }
        for (name, raw) in raw.models {
            let m = nn::section(&name, raw, base, raw_onnxruntime.as_ref())
                .map_err(|e| e.under(&format!("models.{name}")))?;
            sections.models.insert(name, Arc::new(m));
        }
        Ok(sections)
    }

    /// Files the sections read, for the host's watcher: `(the file that changes, the file it
    /// reloads)`.
    pub fn watched(&self) -> Vec<(PathBuf, PathBuf)> {
        nn::watched(&self.models)
    }

    /// The directories the host itself reads for a section (a model's: its native ONNX parser
    /// reads them), as `(section, directory)`: no read-write grant may overlap one.
    pub fn host_read_dirs(&self) -> Vec<(String, PathBuf)> {
        nn::host_read_dirs(&self.models)
    }

    /// Whether a section reads `path` (a file [`CapabilitySections::reload`] takes).
    pub fn reads(&self, path: &Path) -> bool {
        self.watched().iter().any(|(_, file)| file == path)
    }

    /// Reloads, in `app`, what the sections read from `path`: the sections now serving a
    /// changed file (`models.NAME`), or why the file is refused (the loaded one keeps serving).
    /// Blocks: call it off the async runtime.
    pub fn reload(&self, path: &Path, app: &AppStates) -> Result<Vec<String>, String> {
        Ok(nn::reload(&self.models, path, &app.nn)?.into_iter().map(|m| format!("models.{m}")).collect())
    }
}

/// Each capability's state for one app (a registry and everything it loads), as Spin's factors
/// have an app state: built once with the engine and handed to every store made from it, so
/// two registries in one process share nothing.
#[derive(Default)]
pub struct AppStates {
    /// Directory usage.
    pub files: files::AppState,
    /// Name-lookup threads.
    pub http: http::AppState,
    /// The progress bus.
    pub progress: progress::AppState,
    /// Loaded models and the inference pool.
    pub nn: nn::AppState,
}

/// Who a guest call runs for, as the capabilities see it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallCx<'a> {
    /// The client and deadline of the tool call an embedder's call computes for; none: the
    /// store's own instance and call.
    pub for_caller: Option<(&'a str, Instant)>,
    /// Whether this is a tool's own code (a call, a preparation), which the inference pool
    /// counts (see [`nn::pool::Busy`]).
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
}

/// One store's state of every capability.
pub struct CapabilityStates {
    /// Directory quotas.
    pub files: files::FileGuard,
    /// Outgoing HTTP.
    pub http: http::State,
    /// The embedder import.
    pub embedder: embedder::State,
    /// Progress reports.
    pub progress: progress::State,
    /// Bedrock.
    pub bedrock: bedrock::State,
    /// Couchbase.
    pub couchbase: couchbase::State,
    /// wasi-nn.
    pub nn: nn::State,
}

impl CapabilityStates {
    /// The states for a new store of an instance granted `grants`; directory grants become
    /// preopens of `wasi`.
    pub fn new(
        grants: &Grants,
        cx: StoreContext<'_>,
        wasi: &mut WasiCtxBuilder,
    ) -> Result<CapabilityStates, files::SandboxError> {
        let files = files::preopen(&grants.dirs, &cx.app.files, wasi)?;
        // wasi-nn's models are files too: their directories come through the directory capability.
        for (host, guest) in nn::read_only_dirs(&grants.models) {
            files::preopen_read_only(host, &guest, wasi)?;
        }
        Ok(CapabilityStates {
            files,
            http: http::State::new(&grants.http, &cx.app.http),
            embedder: embedder::State::new(cx.embedder, cx.instance),
            progress: progress::State::new(cx.instance, &cx.app.progress),
            bedrock: bedrock::State::new(grants.bedrock.as_ref(), cx.max_output),
            couchbase: couchbase::State::new(grants.couchbase.as_ref(), cx.max_output),
            nn: nn::State::new(&grants.models, cx.instance, &cx.app.nn),
        })
    }

    /// Before each guest call: who it runs for.
    pub fn begin_call(&mut self, cx: &CallCx<'_>) {
        self.nn.begin_call(cx.for_caller, cx.tool_code);
    }

    /// What the capabilities refused since the last call (appended to a tool's error).
    pub fn take_refusals(&self) -> Vec<String> {
        self.http.take_refusals()
    }

    /// After each guest call: what a call started ends with it.
    pub async fn end_call(&mut self) {
        self.nn.end_call();
        self.http.end_call().await;
    }
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
}

/// A store the capabilities can be linked into. The store implements it; no capability names
/// the store, and the store names no capability.
pub trait CapabilityStore: Send + 'static {
    /// The store's parts, for the capabilities' projections.
    fn parts(&mut self) -> StoreView<'_>;
}

fn states<T: CapabilityStore>(t: &mut T) -> &mut CapabilityStates {
    t.parts().states
}

/// Adds every capability to `l`, after WASI.
pub fn link_all<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
    files::link(l, |t| files::view(t.parts()))?;
    http::link(l, |t| http::view(t.parts()))?;
    embedder::link(l, |t| embedder::view(t.parts()))?;
    progress::link(l, |t| &mut states(t).progress)?;
    bedrock::link(l, |t| &mut states(t).bedrock)?;
    couchbase::link(l, |t| &mut states(t).couchbase)?;
    nn::link(l, |t| {
        let p = t.parts();
        nn::view(&mut p.states.nn, p.table, p.deadline, p.memory)
    })?;
    wit_types::add_to_linker::<T, HasSelf<CapabilityStates>>(l, states)
}

/// The `types` interface has no functions: its linking needs a `Host`, with nothing in it.
impl wit_types::Host for CapabilityStates {}
