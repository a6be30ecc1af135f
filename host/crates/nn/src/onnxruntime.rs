//! The onnxruntime backend: the same models run by onnxruntime's CPU kernels (its int8 kernels use
//! VNNI and AMX where the CPU has them), through the `ort` crate with its library loaded at run
//! time from the file [`crate::ort_library::locate`] found. Nothing is downloaded or linked at
//! build time.
//!
//! - **One library per process**, loaded the first time a model needs it; its version must
//!   offer onnxruntime's C API at [`API_VERSION`] or later (an older one is refused, naming its
//!   path and the version needed, and the models of other backends keep serving).
//! - **Two sessions per model, shared by the inference threads**: one that runs on the calling
//!   thread alone (a question, or any job while others run) and, on a machine of several cores,
//!   one whose intra-op pool spans them (an ingest batch alone on the host): the pool says which
//!   ([`Threads`]). onnxruntime's `Run` may be called on one session from several threads at
//!   once (its C API says so), while `ort`'s safe `run` takes the session mutably; so the host
//!   calls `Run` through the C API itself, from each of the pool's threads. The two sessions share
//!   the weights their kernels pre-pack (a `PrepackedWeights` container). A 16-token question on
//!   one thread costs less CPU than on two (the second only waits for its share), and a 256-token
//!   batch alone runs in little more than half the time on two: see tests/benches/README.md.

use std::ffi::{CString, c_char};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;

use ort::AsPointer as _;
use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, PrepackedWeights};
use ort::value::{DynValue, Tensor, TensorElementType, ValueType};

use crate::tensor::{Code, ElementType, InputSpec, NnError, RawTensor};
use crate::threads::{Threads, cores};

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

/// A model loaded by onnxruntime: its sessions, and its inputs' and outputs' names.
pub struct OrtModel {
    /// The session that runs on the calling thread.
    one: Session,
    /// The session whose intra-op pool spans the cores (none on one core).
    every: Option<Session>,
    /// What the sessions' kernels pre-packed, held once for both.
    _weights: PrepackedWeights,
    /// The graph's outputs, in order.
    outputs: Vec<String>,
    output_names: Vec<CString>,
}

impl std::fmt::Debug for OrtModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtModel").field("outputs", &self.outputs).field("wide", &self.every.is_some()).finish()
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
        let refused = |e: ort::Error| {
            NnError::new(Code::Runtime, format!("onnxruntime {version} refuses {}: {e}", path.display()))
        };
        let weights = PrepackedWeights::new();
        let one = session(bytes, 1, &weights).map_err(refused)?;
        let every = if cores() > 1 { Some(session(bytes, cores(), &weights).map_err(refused)?) } else { None };
        let unsupported = |what: String| NnError::new(Code::Unsupported, format!("{}: {what}", path.display()));
        let mut inputs = Vec::new();
        for input in one.inputs() {
            let ValueType::Tensor { ty, shape, .. } = input.dtype() else {
                return Err(unsupported(format!("input {:?} is not a tensor", input.name())));
            };
            let ty =
                element_type(*ty).ok_or_else(|| unsupported(format!("input {:?} has type {ty:?}", input.name())))?;
            let dims = shape.iter().map(|&d| usize::try_from(d).ok()).collect();
            inputs.push(InputSpec { name: input.name().to_string(), ty, dims });
        }
        let outputs: Vec<String> = one.outputs().iter().map(|o| o.name().to_string()).collect();
        let output_names = outputs
            .iter()
            .map(|n| CString::new(n.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| unsupported("an output's name holds a NUL".into()))?;
        Ok((OrtModel { one, every, _weights: weights, outputs, output_names }, inputs))
    }

    /// The graph's outputs, in order.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Runs the graph on checked inputs (in the graph's order, named `names`) on `threads`; the
    /// outputs, named. Blocks. Any number of threads may run it at once.
    pub fn run(
        &self,
        names: &[&str],
        inputs: Vec<RawTensor>,
        threads: Threads,
    ) -> Result<Vec<(String, RawTensor)>, NnError> {
        let session = match (threads, &self.every) {
            (Threads::Every, Some(every)) => every,
            _ => &self.one,
        };
        let failed = |e: ort::Error| NnError::new(Code::Runtime, format!("inference failed: {e}"));
        let mut values: Vec<DynValue> = Vec::with_capacity(inputs.len());
        for t in inputs {
            let shape: Vec<i64> = t.dims.iter().map(|&d| i64::from(d)).collect();
            values.push(tensor(shape, t.ty, &t.data).map_err(failed)?);
        }
        let input_names: Vec<CString> = names
            .iter()
            .map(|n| CString::new(*n))
            .collect::<Result<_, _>>()
            .map_err(|_| NnError::new(Code::InvalidArgument, "an input's name holds a NUL"))?;
        let input_ptrs: Vec<*const c_char> = input_names.iter().map(|n| n.as_ptr()).collect();
        let value_ptrs: Vec<*const ort::sys::OrtValue> = values.iter().map(|v| v.ptr()).collect();
        let output_ptrs: Vec<*const c_char> = self.output_names.iter().map(|n| n.as_ptr()).collect();
        let mut out: Vec<*mut ort::sys::OrtValue> = vec![std::ptr::null_mut(); output_ptrs.len()];
        let api = ort::api();
        // SAFETY: every pointer lives to the end of the call (`values`, the names, `out`), the
        // lengths are theirs, and onnxruntime allows concurrent `Run` calls on one session; the
        // session is not changed through `ort` after it was built.
        let status = unsafe {
            (api.Run)(
                session.ptr().cast_mut(),
                std::ptr::null(),
                input_ptrs.as_ptr(),
                value_ptrs.as_ptr(),
                value_ptrs.len(),
                output_ptrs.as_ptr(),
                output_ptrs.len(),
                out.as_mut_ptr(),
            )
        };
        // Owned from here, so that they are released whatever happens next.
        let owned: Vec<Option<DynValue>> = out
            .iter()
            .map(|&p| {
                // SAFETY: a non-null output of `Run` is a value the session's allocator made.
                NonNull::new(p).map(|p| unsafe { DynValue::from_ptr(p, Some(session.allocator())) })
            })
            .collect();
        if !status.0.is_null() {
            // SAFETY: a non-null status is an OrtStatus, its message a NUL-terminated string
            // that lives until the status is released.
            let message = unsafe {
                let m = std::ffi::CStr::from_ptr((api.GetErrorMessage)(status.0)).to_string_lossy().into_owned();
                (api.ReleaseStatus)(status.0);
                m
            };
            return Err(NnError::new(Code::Runtime, format!("inference failed: {message}")));
        }
        self.outputs
            .iter()
            .zip(owned)
            .map(|(name, value)| {
                let value = value
                    .ok_or_else(|| NnError::new(Code::Runtime, format!("onnxruntime returned no output {name:?}")))?;
                Ok((name.clone(), raw(name, &value)?))
            })
            .collect()
    }
}

/// A session of `bytes` in the loaded library, every graph optimisation, whose runs use
/// `threads` threads (the calling one among them) and pre-pack into `weights`. The intra-op pool
/// does not spin between runs: the guests' own code shares the cores.
fn session(bytes: &[u8], threads: usize, weights: &PrepackedWeights) -> ort::Result<Session> {
    let env = match LOADED.get() {
        Some(Ok((_, _, env))) => env,
        _ => return Err(ort::Error::new("onnxruntime is not loaded")),
    };
    Session::builder(env)?
        .with_optimization_level(GraphOptimizationLevel::All)?
        .with_intra_threads(threads)?
        .with_inter_threads(1)?
        .with_intra_op_spinning(false)?
        .with_prepacked_weights(weights)?
        .commit_from_memory(bytes)
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
