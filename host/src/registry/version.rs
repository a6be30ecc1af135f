//! One version of a component: read, bounded, compiled (or loaded from the cache) and
//! pre-instantiated once, then shared by every instance and pool member that runs it.

use std::path::Path;
use std::sync::Arc;

use wasmtime::component::{Component, Linker};

use crate::bindings::ToolHostPre;
use crate::capability::embedder::EMBEDDER_IMPORT;
use crate::runtime::cache::ComponentCache;
use crate::runtime::engine::{EngineError, QuarryEngine};
use crate::runtime::store::StoreState;

use super::errors::OpenError;

/// One version of a component, compiled and pre-instantiated.
pub struct ComponentVersion {
    /// SHA-256 of its bytes.
    pub hash: [u8; 32],
    /// The version it carries (its `version` custom section), if any.
    pub version: Option<String>,
    /// Whether it imports the embedder.
    pub imports_embedder: bool,
    pub(super) pre: ToolHostPre<StoreState>,
    /// Keeps the compiled component in the engine's memory while this version serves.
    _component: Arc<Component>,
}

/// A component read and compiled: what the host knows of it before running it.
#[derive(Clone)]
pub(crate) struct Compiled {
    /// The compiled component.
    pub component: Arc<Component>,
    /// SHA-256 of its bytes.
    pub hash: [u8; 32],
    /// The version it says it is (its `version` custom section), bounded and checked.
    pub version: Option<String>,
}

/// Reads and compiles (or loads from cache) the component at `path`. A file over the engine's
/// [`QuarryEngine::max_component_bytes`] is refused before it is compiled: compiling takes time
/// and memory in proportion to its size.
pub(crate) async fn compile(engine: &QuarryEngine, path: &Path) -> Result<Compiled, OpenError> {
    use tokio::io::AsyncReadExt as _;
    let read_error = |source| EngineError::Read { path: path.to_path_buf(), source };
    let max = engine.max_component_bytes();
    let file = tokio::fs::File::open(path).await.map_err(read_error)?;
    let mut bytes = Vec::new();
    // Read one byte past the cap, so a file that grows while it is read is caught too.
    file.take(max.saturating_add(1)).read_to_end(&mut bytes).await.map_err(read_error)?;
    if bytes.len() as u64 > max {
        return Err(EngineError::TooLarge { path: path.to_path_buf(), limit: max }.into());
    }
    let hash = ComponentCache::content_hash(&bytes);
    let (engine2, path2) = (engine.clone(), path.to_path_buf());
    let (component, version) = tokio::task::spawn_blocking(move || {
        let version = crate::support::metadata::version(&bytes);
        engine2.load_component(&path2, &bytes).map(|(component, _)| (component, version))
    })
    .await
    .map_err(|e| OpenError::Link { path: path.to_path_buf(), message: format!("compiler task failed: {e}") })??;
    Ok(Compiled { component, hash, version })
}

impl ComponentVersion {
    /// Reads, compiles (or loads from cache) and pre-instantiates the component at `path`.
    pub async fn load(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        path: &Path,
    ) -> Result<Arc<ComponentVersion>, OpenError> {
        Self::from_compiled(engine, linker, path, compile(engine, path).await?)
    }

    /// Pre-instantiates `compiled`, read from `path`.
    pub(crate) fn from_compiled(
        engine: &QuarryEngine,
        linker: &Linker<StoreState>,
        path: &Path,
        compiled: Compiled,
    ) -> Result<Arc<ComponentVersion>, OpenError> {
        let Compiled { component, hash, version } = compiled;
        let imports_embedder =
            component.component_type().imports(engine.engine()).any(|(name, _)| name == EMBEDDER_IMPORT);
        let link = |message: String| OpenError::Link { path: path.to_path_buf(), message };
        let pre = linker.instantiate_pre(&component).map_err(|e| link(format!("{e:#}")))?;
        let pre = ToolHostPre::new(pre).map_err(|e| {
            link(format!("{e:#} (a tool component must export `quarry:retrieval/tool@0.6.0`; see wit/)"))
        })?;
        Ok(Arc::new(ComponentVersion { hash, version, imports_embedder, pre, _component: component }))
    }
}
