//! wasi-nn, absent: the host was built without the `nn` feature (see [`super::absent`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Linker;

use crate::support::values::KeyError;

/// `[models.NAME]` as written: any table, refused by [`section`].
pub type RawModel = toml::Table;

/// No model section can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSection {}

/// `[host] onnxruntime` as written: any table (no model can use it here).
pub type RawOnnxruntime = toml::Table;

/// Refuses the section: this host runs no models.
pub fn section(
    _name: &str,
    _raw: RawModel,
    _base: &Path,
    _onnxruntime: Option<&RawOnnxruntime>,
) -> Result<ModelSection, KeyError> {
    Err(super::absent::missing("wasi-nn", "nn"))
}

/// The models an instance is granted: none, ever.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelGrant {
    /// By name (always empty).
    pub models: BTreeMap<String, Arc<ModelSection>>,
}

/// An empty `models` grant; any name is refused.
pub fn grant(names: &[String], _sections: &BTreeMap<String, Arc<ModelSection>>) -> Result<ModelGrant, KeyError> {
    if names.is_empty() {
        Ok(ModelGrant::default())
    } else {
        Err(super::absent::missing("wasi-nn", "nn").under("models"))
    }
}

/// Nothing to watch.
pub fn watched(_models: &BTreeMap<String, Arc<ModelSection>>) -> Vec<(PathBuf, PathBuf)> {
    Vec::new()
}

/// No directories.
pub fn host_read_dirs(_models: &BTreeMap<String, Arc<ModelSection>>) -> Vec<(String, PathBuf)> {
    Vec::new()
}

/// Nothing to reload.
pub fn reload(
    _models: &BTreeMap<String, Arc<ModelSection>>,
    _path: &Path,
    _app: &AppState,
) -> Result<Vec<String>, String> {
    Ok(Vec::new())
}

/// No models, no inference pool.
#[derive(Clone, Default)]
pub struct AppState;

/// Nothing to hold.
pub struct State;

impl State {
    /// The state of a store: nothing.
    pub fn new(_grant: &ModelGrant, _instance: &str, _app: &AppState) -> State {
        State
    }

    /// Nothing to note.
    pub fn begin_call(&mut self, _for_caller: Option<(&str, std::time::Instant)>, _tool_code: bool) {}

    /// Nothing to end.
    pub fn end_call(&mut self) {}
}

/// No model directories.
pub fn read_only_dirs(_grant: &ModelGrant) -> std::iter::Empty<(&Path, String)> {
    std::iter::empty()
}

/// Nothing to view.
pub fn view(
    _state: &mut State,
    _table: &mut wasmtime::component::ResourceTable,
    _deadline: std::time::Instant,
    _memory: usize,
) {
}

/// Links nothing: a component that imports `wasi:nn` fails to link.
pub fn link<T: Send + 'static>(_l: &mut Linker<T>, _get: fn(&mut T)) -> wasmtime::Result<()> {
    Ok(())
}
