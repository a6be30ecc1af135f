//! The onnxruntime backend: the same models run by onnxruntime's CPU kernels (its int8 kernels use
//! VNNI and AMX where the CPU has them), through the `ort` crate with its library loaded at run
//! time from the file [`crate::ort_library::locate`] found. Nothing is downloaded or linked at
//! build time.
//!
//! - **One library per process**, loaded the first time a model needs it; its version must
//!   offer onnxruntime's C API at [`API_VERSION`] or later (an older one is refused, naming its
//!   path and the version needed, and the models of other backends keep serving).
//! - **A session per inference slot**: `ort` runs a session from one thread at a time, and the
//!   host's pool runs one job per core, so a model keeps up to that many sessions, made as they
//!   are first needed and sharing their pre-packed weights. Each runs on the thread that asks
//!   (one intra-op thread), so the pool and its fair queue decide what runs where, as for tract.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, PrepackedWeights};
use ort::value::{DynValue, Tensor, TensorElementType, ValueType};
use parking_lot::Mutex;

use crate::native::{Code, ElementType, InputSpec, NnError, RawTensor};

/// The onnxruntime C API version this host is built for (`ort`'s `api-22`): onnxruntime 1.22 or
/// later.
pub const API_VERSION: u32 = ort::MINOR_VERSION;

/// The library this process loaded (its path and version), or why it could not.
static LOADED: OnceLock<Result<(PathBuf, String, Environment), String>> = OnceLock::new();

/// Loads onnxruntime from `library` once per process; its version. A later call with another
/// library is refused: a process holds one.
pub fn load(library: &Path) -> Result<String, NnError> {
    let loaded = LOADED.get_or_init(|| {
        let version = library_version(library)?;
        let builder = ort::init_from(library).map_err(|e| {
            format!(
                "cannot load onnxruntime from {}: {e}; this host needs onnxruntime 1.{API_VERSION} or later",
                library.display()
            )
        })?;
        let env = builder
            .with_name("quarry")
            .with_telemetry(false)
            .build()
            .map_err(|e| format!("onnxruntime from {} failed to start: {e}", library.display()))?;
        Ok((library.to_path_buf(), version, env))
    });
    match loaded {
        Ok((path, version, _)) if path == library => Ok(version.clone()),
        Ok((path, version, _)) => Err(NnError::new(
            Code::Unsupported,
            format!(
                "this process already runs onnxruntime {version} from {}; it cannot load {} beside it (restart quarry to change the library)",
                path.display(),
                library.display()
            ),
        )),
        Err(e) => Err(NnError::new(Code::Unsupported, e.clone())),
    }
}

/// The version `library` says it is, read before it is used: an older one than [`API_VERSION`]
/// is refused with its path, its version and the version needed.
fn library_version(library: &Path) -> Result<String, String> {
    // SAFETY: loading a shared library runs its initialisers; the operator named it (or it is
    // the pinned wheel's), as they name every binary the host runs.
    let lib = unsafe { libloading::Library::new(library) }
        .map_err(|e| format!("cannot load onnxruntime's library {}: {e}", library.display()))?;
    type GetApiBase = unsafe extern "C" fn() -> *const ort::sys::OrtApiBase;
    // SAFETY: the symbol's type is onnxruntime's C API (`OrtGetApiBase`).
    let get: libloading::Symbol<'_, GetApiBase> = unsafe { lib.get(b"OrtGetApiBase") }
        .map_err(|_| format!("{} is not onnxruntime's library (it has no OrtGetApiBase)", library.display()))?;
    // SAFETY: OrtGetApiBase returns a pointer to a static table, and GetVersionString a static
    // NUL-terminated string.
    let version = unsafe {
        let base = get();
        if base.is_null() {
            return Err(format!("{} returned no API", library.display()));
        }
        std::ffi::CStr::from_ptr(((*base).GetVersionString)()).to_string_lossy().into_owned()
    };
    let minor: u32 = version.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0);
    if !version.starts_with("1.") || minor < API_VERSION {
        return Err(format!(
            "{} is onnxruntime {version}; this host needs onnxruntime 1.{API_VERSION} or later (install a newer onnxruntime wheel, or name another library)",
            library.display()
        ));
    }
    Ok(version)
}

/// A model loaded by onnxruntime: its bytes (to make more sessions), the sessions made so far,
/// and the weights they share.
pub struct OrtModel {
    bytes: Arc<[u8]>,
    sessions: Vec<Mutex<Option<Session>>>,
    prepacked: PrepackedWeights,
    /// The graph's outputs, in order.
    outputs: Vec<String>,
}

impl std::fmt::Debug for OrtModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtModel").field("outputs", &self.outputs).finish()
    }
}

fn element_type(t: TensorElementType) -> Option<ElementType> {
    Some(match t {
        TensorElementType::Float32 => ElementType::F32,
        TensorElementType::Float16 => ElementType::F16,
        TensorElementType::Float64 => ElementType::F64,
        TensorElementType::Uint8 => ElementType::U8,
        TensorElementType::Int32 => ElementType::I32,
        TensorElementType::Int64 => ElementType::I64,
        _ => return None,
    })
}

impl OrtModel {
    /// Loads `bytes` (read from `path`, for messages) with the library `library`; the model and
    /// its inputs.
    pub(crate) fn build(library: &Path, path: &Path, bytes: &[u8]) -> Result<(OrtModel, Vec<InputSpec>), NnError> {
        let version = load(library)?;
        let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
        let model = OrtModel {
            bytes: bytes.into(),
            sessions: (0..slots).map(|_| Mutex::new(None)).collect(),
            prepacked: PrepackedWeights::new(),
            outputs: Vec::new(),
        };
        let first = model.session().map_err(|e| {
            NnError::new(Code::Runtime, format!("onnxruntime {version} refuses {}: {e}", path.display()))
        })?;
        let unsupported = |what: String| NnError::new(Code::Unsupported, format!("{}: {what}", path.display()));
        let mut inputs = Vec::new();
        for input in first.inputs() {
            let ValueType::Tensor { ty, shape, .. } = input.dtype() else {
                return Err(unsupported(format!("input {:?} is not a tensor", input.name())));
            };
            let ty =
                element_type(*ty).ok_or_else(|| unsupported(format!("input {:?} has type {ty:?}", input.name())))?;
            let dims = shape.iter().map(|&d| usize::try_from(d).ok()).collect();
            inputs.push(InputSpec { name: input.name().to_string(), ty, dims });
        }
        let outputs = first.outputs().iter().map(|o| o.name().to_string()).collect();
        *model.sessions[0].lock() = Some(first);
        Ok((OrtModel { outputs, ..model }, inputs))
    }

    /// A new session of the model, sharing the pre-packed weights of the others.
    fn session(&self) -> ort::Result<Session> {
        let env = match LOADED.get() {
            Some(Ok((_, _, env))) => env,
            _ => return Err(ort::Error::new("onnxruntime is not loaded")),
        };
        Session::builder(env)?
            .with_optimization_level(GraphOptimizationLevel::All)?
            .with_intra_threads(1)?
            .with_inter_threads(1)?
            .with_prepacked_weights(&self.prepacked)?
            .commit_from_memory(&self.bytes)
    }

    /// The graph's outputs, in order.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Runs the graph on checked inputs (in the graph's order, named `names`); the outputs,
    /// named. Blocks.
    pub fn run(&self, names: &[&str], inputs: Vec<RawTensor>) -> Result<Vec<(String, RawTensor)>, NnError> {
        let failed = |e: ort::Error| NnError::new(Code::Runtime, format!("inference failed: {e}"));
        // A free session, else the first (the pool runs at most one job per slot, so one is free).
        let mut guard = self.sessions.iter().find_map(|s| s.try_lock()).unwrap_or_else(|| self.sessions[0].lock());
        if guard.is_none() {
            *guard = Some(self.session().map_err(failed)?);
        }
        let Some(session) = guard.as_mut() else { return Err(NnError::new(Code::Runtime, "no session")) };
        let mut values: Vec<(String, DynValue)> = Vec::with_capacity(inputs.len());
        for (name, t) in names.iter().zip(inputs) {
            let shape: Vec<i64> = t.dims.iter().map(|&d| i64::from(d)).collect();
            values.push((name.to_string(), tensor(shape, t.ty, &t.data).map_err(failed)?));
        }
        let outputs = session.run(values).map_err(failed)?;
        self.outputs
            .iter()
            .map(|name| {
                let value = outputs
                    .get(name.as_str())
                    .ok_or_else(|| NnError::new(Code::Runtime, format!("onnxruntime returned no output {name:?}")))?;
                Ok((name.clone(), raw(name, value)?))
            })
            .collect()
    }
}

/// An onnxruntime tensor of `ty` from little-endian `bytes` (their length already checked).
fn tensor(shape: Vec<i64>, ty: ElementType, bytes: &[u8]) -> ort::Result<DynValue> {
    fn typed<T, const N: usize>(shape: Vec<i64>, b: &[u8], f: fn([u8; N]) -> T) -> ort::Result<DynValue>
    where
        T: ort::value::PrimitiveTensorElementType + Clone + std::fmt::Debug + 'static,
    {
        let v: Vec<T> = b.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect();
        Ok(Tensor::from_array((shape, v))?.into_dyn())
    }
    match ty {
        ElementType::I64 => typed(shape, bytes, i64::from_le_bytes),
        ElementType::I32 => typed(shape, bytes, i32::from_le_bytes),
        ElementType::F32 => typed(shape, bytes, f32::from_le_bytes),
        ElementType::F64 => typed(shape, bytes, f64::from_le_bytes),
        ElementType::U8 => typed(shape, bytes, u8::from_le_bytes),
        ElementType::F16 | ElementType::Bf16 => {
            Err(ort::Error::new(format!("{ty:?} tensors are not supported by the onnxruntime backend")))
        }
    }
}

/// An output as wasi-nn carries it: dimensions, type, little-endian bytes.
fn raw(name: &str, value: &DynValue) -> Result<RawTensor, NnError> {
    let unsupported = |what: String| NnError::new(Code::Unsupported, format!("output {name:?}: {what}"));
    let failed = |e: ort::Error| NnError::new(Code::Runtime, format!("output {name:?}: {e}"));
    let ValueType::Tensor { ty, .. } = value.dtype() else { return Err(unsupported("not a tensor".into())) };
    fn bytes<T: ort::value::PrimitiveTensorElementType, const N: usize>(
        value: &DynValue,
        f: fn(&T) -> [u8; N],
    ) -> ort::Result<(Vec<u32>, Vec<u8>)> {
        let (shape, data) = value.try_extract_tensor::<T>()?;
        let dims = shape.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect();
        Ok((dims, data.iter().flat_map(f).collect()))
    }
    let ety = element_type(*ty).ok_or_else(|| unsupported(format!("type {ty:?}")))?;
    let (dims, data) = match ety {
        ElementType::F32 => bytes::<f32, 4>(value, |x| x.to_le_bytes()),
        ElementType::F64 => bytes::<f64, 8>(value, |x| x.to_le_bytes()),
        ElementType::I64 => bytes::<i64, 8>(value, |x| x.to_le_bytes()),
        ElementType::I32 => bytes::<i32, 4>(value, |x| x.to_le_bytes()),
        ElementType::U8 => bytes::<u8, 1>(value, |x| [*x]),
        other => return Err(unsupported(format!("type {other:?}"))),
    }
    .map_err(failed)?;
    Ok(RawTensor { dims, ty: ety, data })
}
