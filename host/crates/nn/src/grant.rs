//! `[models.NAME]` (a model directory the operator names, optionally pinned) and the `models`
//! grant (which of them an instance may load), parsed once at load; a bad entry names its key
//! and says what to do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use quarry_support::builtin;
use quarry_support::values::{KeyError, expand_path, valid_name};

/// The file of a model directory that holds the graph the host runs.
pub const MODEL_FILE: &str = "model.onnx";
/// The file of a model directory that describes it (written by `make models`).
pub const MANIFEST_FILE: &str = "quarry-model.json";
/// Where a granted model's directory appears to the guest: `/models/NAME`, read-only.
pub const GUEST_ROOT: &str = "/models";

/// `[models.NAME]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// The model directory.
    pub dir: PathBuf,
    /// The SHA-256 `model.onnx` must have.
    pub sha256: Option<String>,
    /// `tract` (the default) or `onnxruntime`.
    pub backend: Option<String>,
}

/// `[host] onnxruntime = { library = "…" }` as written: where onnxruntime's shared library is.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawOnnxruntime {
    /// The `libonnxruntime.so` to load.
    pub library: PathBuf,
}

/// What runs a model's graph. A guest cannot tell which: the same directory, pins, grants and
/// `wasi:nn` calls serve both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// tract, in the host (pure Rust, always there).
    Tract,
    /// onnxruntime's shared library, loaded at run time: the library found when the config was
    /// read, or where it was looked for (the model then fails to load, saying so).
    Onnxruntime(Result<PathBuf, String>),
}

impl Backend {
    /// Its name in the config.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Tract => "tract",
            Backend::Onnxruntime(_) => "onnxruntime",
        }
    }
}

/// A model directory the operator named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSection {
    /// The section's name: what `load-by-name` and the `models` grant say.
    pub name: String,
    /// The directory (absolute, links resolved): `model.onnx`, the tokenizer, the manifest.
    pub dir: PathBuf,
    /// The SHA-256 `model.onnx` must have; a changed file that does not match is refused
    /// (the loaded one keeps serving). Without it, a changed file is loaded again.
    pub pin: Option<[u8; 32]>,
    /// What runs it.
    pub backend: Backend,
}

impl ModelSection {
    /// The graph file.
    pub fn model_file(&self) -> PathBuf {
        self.dir.join(MODEL_FILE)
    }
}

/// Validates `[models.NAME]`: a directory holding `model.onnx` and its manifest, a pin of 64
/// hex digits and a known backend (onnxruntime's library from `onnxruntime`, the `[host]` entry,
/// resolved against `base`, else [`crate::ort_library::locate`]). The model itself is read when
/// an instance first loads it.
pub fn section(
    name: &str,
    raw: RawModel,
    base: &Path,
    onnxruntime: Option<&RawOnnxruntime>,
) -> Result<ModelSection, KeyError> {
    if !valid_name(name) {
        return Err(KeyError::new("", "model names use lowercase letters, digits, `_` and `-` (at most 64)"));
    }
    let dir = match builtin::name_of(&raw.dir) {
        Some(n) => builtin::resolve(builtin::Kind::Model, n).map_err(|m| KeyError::new("dir", m))?,
        None => base.join(expand_path(&raw.dir).map_err(|m| KeyError::new("dir", m))?),
    };
    for file in [MODEL_FILE, MANIFEST_FILE] {
        if !dir.join(file).is_file() {
            return Err(KeyError::new(
                "dir",
                format!(
                    "{} does not exist; fetch the models with `make models` (components/embedder-onnx/models/fetch.sh) or fix the path",
                    dir.join(file).display()
                ),
            ));
        }
    }
    let pin = match raw.sha256 {
        None => None,
        Some(hex) => {
            let mut pin = [0u8; 32];
            hex::decode_to_slice(hex.trim(), &mut pin).map_err(|_| {
                KeyError::new(
                    "sha256",
                    format!("{hex:?} is not a SHA-256: write the 64 hex digits of `sha256sum model.onnx`"),
                )
            })?;
            Some(pin)
        }
    };
    let backend = match raw.backend.as_deref() {
        None | Some("tract") => Backend::Tract,
        Some("onnxruntime") => {
            let configured = match onnxruntime {
                Some(o) => Some(
                    base.join(
                        expand_path(&o.library)
                            .map_err(|m| KeyError::new("backend", format!("host.onnxruntime.library: {m}")))?,
                    ),
                ),
                None => None,
            };
            Backend::Onnxruntime(crate::ort_library::locate(configured))
        }
        Some(other) => {
            return Err(KeyError::new(
                "backend",
                format!("{other:?} is not a backend: write \"tract\" or \"onnxruntime\""),
            ));
        }
    };
    Ok(ModelSection { name: name.to_string(), dir: std::fs::canonicalize(&dir).unwrap_or(dir), pin, backend })
}

/// What an instance may load: the sections of the models it is granted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelGrant {
    /// By name.
    pub models: BTreeMap<String, Arc<ModelSection>>,
    /// The bytes of tensors the instance holds, all its stores together (an embedder's pool
    /// members, and the stores that replace recycled ones): made once with the grant, so every
    /// store of the instance shares it.
    pub tensors: Arc<TensorBudget>,
}

/// Bytes of tensors held by the stores of one instance.
#[derive(Debug, Default)]
pub struct TensorBudget {
    held: std::sync::atomic::AtomicU64,
}

impl PartialEq for TensorBudget {
    /// Budgets are state, not configuration: two grants that say the same are equal.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl TensorBudget {
    /// Charges `n` bytes if the instance then holds at most `limit`.
    pub fn charge(&self, n: u64, limit: u64) -> bool {
        use std::sync::atomic::Ordering;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| held.checked_add(n).filter(|&t| t <= limit))
            .is_ok()
    }

    /// Gives back `n` bytes.
    pub fn release(&self, n: u64) {
        self.held.fetch_sub(n, std::sync::atomic::Ordering::AcqRel);
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The `models` key: names of `[models.NAME]` sections; each must exist.
pub fn grant(names: &[String], sections: &BTreeMap<String, Arc<ModelSection>>) -> Result<ModelGrant, KeyError> {
    let mut models = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let Some(section) = sections.get(name) else {
            let known: Vec<_> = sections.keys().map(String::as_str).collect();
            return Err(KeyError::new(
                format!("models[{i}]"),
                format!(
                    "no model named {name:?}; define [models.{name}] with its `dir`, or use one of: {}",
                    if known.is_empty() { "(none defined)".to_string() } else { known.join(", ") }
                ),
            ));
        };
        models.insert(name.clone(), section.clone());
    }
    Ok(ModelGrant { models, tensors: Arc::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(MODEL_FILE), b"onnx").unwrap();
        std::fs::write(d.path().join(MANIFEST_FILE), b"{}").unwrap();
        d
    }

    #[test]
    fn a_section_needs_the_model_files_and_a_real_pin() {
        let d = model_dir();
        let raw =
            |sha256: Option<&str>| RawModel { dir: d.path().into(), sha256: sha256.map(str::to_string), backend: None };
        let s = section("minilm", raw(None), Path::new("/"), None).unwrap();
        assert_eq!(s.backend, Backend::Tract);
        assert_eq!(s.pin, None);
        assert_eq!(s.model_file(), std::fs::canonicalize(d.path()).unwrap().join(MODEL_FILE));
        let s = section("minilm", raw(Some(&"ab".repeat(32))), Path::new("/"), None).unwrap();
        assert_eq!(s.pin, Some([0xab; 32]));
        let e = section("minilm", raw(Some("abc")), Path::new("/"), None).unwrap_err();
        assert_eq!(e.key, "sha256");
        assert!(e.message.contains("sha256sum"), "{}", e.message);
        let e = section("Bad Name", raw(None), Path::new("/"), None).unwrap_err();
        assert!(e.message.contains("lowercase"), "{}", e.message);
        std::fs::remove_file(d.path().join(MANIFEST_FILE)).unwrap();
        let e = section("minilm", raw(None), Path::new("/"), None).unwrap_err();
        assert_eq!(e.key, "dir");
        assert!(e.message.contains(MANIFEST_FILE) && e.message.contains("make models"), "{}", e.message);
    }

    #[test]
    fn a_backend_is_tract_or_onnxruntime_with_its_library() {
        let d = model_dir();
        let raw = |backend: &str| RawModel { dir: d.path().into(), sha256: None, backend: Some(backend.into()) };
        let lib = d.path().join("libonnxruntime.so.1.32.0");
        std::fs::write(&lib, b"elf").unwrap();
        let host = RawOnnxruntime { library: lib.clone() };
        let s = section("m", raw("onnxruntime"), Path::new("/"), Some(&host)).unwrap();
        assert_eq!(s.backend, Backend::Onnxruntime(Ok(lib)));
        // A named library that is not there: the section loads, the model will say so.
        let host = RawOnnxruntime { library: d.path().join("missing.so") };
        match section("m", raw("onnxruntime"), Path::new("/"), Some(&host)).unwrap().backend {
            Backend::Onnxruntime(Err(m)) => assert!(m.contains("missing.so") && m.contains("library"), "{m}"),
            other => panic!("{other:?}"),
        }
        let e = section("m", raw("cuda"), Path::new("/"), None).unwrap_err();
        assert_eq!(e.key, "backend");
        assert!(e.message.contains("\"tract\" or \"onnxruntime\""), "{}", e.message);
    }

    #[test]
    fn a_tensor_budget_is_shared_and_bounded() {
        let g = ModelGrant::default();
        let copy = g.clone();
        assert!(g.tensors.charge(60, 100));
        assert!(!copy.tensors.charge(50, 100), "the clone shares the budget");
        assert!(copy.tensors.charge(40, 100));
        g.tensors.release(100);
        assert_eq!(copy.tensors.held(), 0);
        assert!(!g.tensors.charge(u64::MAX, u64::MAX - 1));
    }

    #[test]
    fn a_grant_names_defined_models() {
        let d = model_dir();
        let s = section("minilm", RawModel { dir: d.path().into(), sha256: None, backend: None }, Path::new("/"), None)
            .unwrap();
        let sections = BTreeMap::from([("minilm".to_string(), Arc::new(s))]);
        let g = grant(&["minilm".into()], &sections).unwrap();
        assert_eq!(g.models.keys().collect::<Vec<_>>(), ["minilm"]);
        let e = grant(&["minilm".into(), "e5".into()], &sections).unwrap_err();
        assert_eq!(e.key, "models[1]");
        assert!(e.message.contains("[models.e5]") && e.message.contains("minilm"), "{}", e.message);
    }
}
