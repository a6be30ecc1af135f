//! wasi-nn, from the `quarry-nn` crate; here, its place in the capability list:
//! `[models.NAME]` sections, `[host] onnxruntime`, `grants.models`, and the model directories
//! a grant preopens through the directory capability ([`Files`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Linker;

pub use quarry_nn::*;

use super::files::Files;
use super::{CallCx, Capability, CapabilityStore, GrantContext, SandboxError, StoreContext};
use crate::support::exposition::{Exposition, Kind};
use crate::support::values::KeyError;

/// The wasi-nn capability.
pub struct Nn;

/// `[models.NAME]` and `[host] onnxruntime` as written.
#[derive(Default)]
pub struct RawSections {
    models: BTreeMap<String, RawModel>,
}

impl Capability for Nn {
    const GRANT_KEYS: &'static [&'static str] = &["models"];
    const SECTION_KEYS: &'static [&'static str] = &["models"];
    const HOST_KEYS: &'static [&'static str] = &["onnxruntime"];

    type RawGrant = Vec<String>;
    type Grant = ModelGrant;
    type RawSection = RawSections;
    type RawHost = Option<RawOnnxruntime>;
    /// The model directories.
    type Section = BTreeMap<String, Arc<ModelSection>>;
    type AppState = AppState;
    type State = State;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Vec<String>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = map.next_value()?;
        Ok(())
    }

    fn read_section<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut RawSections,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        raw.models = map.next_value()?;
        Ok(())
    }

    fn read_host<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Option<RawOnnxruntime>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = Some(map.next_value()?);
        Ok(())
    }

    fn section(
        raw: RawSections,
        onnxruntime: Option<RawOnnxruntime>,
        base: &Path,
    ) -> Result<BTreeMap<String, Arc<ModelSection>>, KeyError> {
        let mut models = BTreeMap::new();
        for (name, raw) in raw.models {
            let m = section(&name, raw, base, onnxruntime.as_ref()).map_err(|e| e.under(&format!("models.{name}")))?;
            models.insert(name, Arc::new(m));
        }
        Ok(models)
    }

    fn grant(
        raw: Vec<String>,
        models: &BTreeMap<String, Arc<ModelSection>>,
        _: &GrantContext<'_>,
    ) -> Result<ModelGrant, KeyError> {
        grant(&raw, models)
    }

    fn uses(grant: &ModelGrant, section: &str) -> bool {
        section.strip_prefix("models.").is_some_and(|m| grant.models.contains_key(m))
    }

    fn host_read_dirs(models: &BTreeMap<String, Arc<ModelSection>>) -> Vec<(String, PathBuf)> {
        host_read_dirs(models)
    }

    fn watched(models: &BTreeMap<String, Arc<ModelSection>>) -> Vec<(PathBuf, PathBuf)> {
        watched(models)
    }

    fn reload(
        models: &BTreeMap<String, Arc<ModelSection>>,
        path: &Path,
        app: &AppState,
    ) -> Result<Vec<String>, String> {
        Ok(reload(models, path, app)?.into_iter().map(|m| format!("models.{m}")).collect())
    }

    fn metrics(_: &BTreeMap<String, Arc<ModelSection>>, app: &AppState, out: &mut Exposition) {
        let s = app.inference.stats();
        out.single("quarry_inference_slots", Kind::Gauge, "Inference threads (wasi-nn).", s.slots as f64);
        out.single("quarry_inference_slots_busy", Kind::Gauge, "Inference threads running a job now.", s.busy as f64);
        out.single(
            "quarry_inference_queue_clients",
            Kind::Gauge,
            "Tool instances with inference jobs waiting for a thread.",
            s.waiting as f64,
        );
        out.single("quarry_inference_jobs_total", Kind::Counter, "Inference jobs started.", s.jobs as f64);
        out.single(
            "quarry_inference_seconds_total",
            Kind::Counter,
            "Time inference jobs spent running on their threads.",
            s.seconds,
        );
    }

    fn state(grant: &ModelGrant, app: &AppState, cx: &mut StoreContext<'_>) -> Result<State, SandboxError> {
        // A model's tokenizer and manifest are files: its directory comes through the
        // directory capability.
        for (host, guest) in read_only_dirs(grant) {
            Files::grant_read_only(cx, host, &guest)?;
        }
        Ok(State::new(grant, cx.instance, app))
    }

    fn begin_call(state: &mut State, cx: &CallCx<'_>) {
        state.begin_call(cx.for_caller, cx.tool_code);
    }

    fn end_call(state: &mut State) -> impl std::future::Future<Output = ()> + Send {
        state.end_call();
        async {}
    }

    fn link<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        link(l, |t| {
            let p = t.parts();
            view(p.states.get_mut::<Nn>(), p.table, p.deadline, p.memory)
        })
    }
}
