//! The backend: ONNX graphs run natively by tract (its AVX2/FMA kernels, no sandbox), loaded,
//! checked and optimised once per app (a registry: [`Models`]) and shared by every store granted them.
//!
//! A model is loaded the first time an instance asks for it, off the async runtime. Later
//! requests get the same [`NativeModel`] while `model.onnx` is unchanged on disk. A changed
//! file is loaded again if its section is unpinned; a pinned one must match its pin, and
//! until it does the loaded model keeps serving (and the host says why in its log).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::dims;
use tract_onnx::tract_core::internal::DimLike;

use crate::grant::{Backend, MANIFEST_FILE, MODEL_FILE, ModelSection};
use crate::tensor::{Code, ElementType, InputSpec, NnError, RawTensor};
use crate::threads::{Threads, cores, unpinned};

/// tract's executor over every core, made at the first wide run and shared by all models. Made
/// on an inference thread, which may be pinned to one core: its threads must not inherit that.
fn wide_executor() -> tract_linalg::multithread::Executor {
    static WIDE: std::sync::OnceLock<tract_linalg::multithread::Executor> = std::sync::OnceLock::new();
    WIDE.get_or_init(|| unpinned(|| tract_linalg::multithread::Executor::multithread_with_name(cores(), "quarry-nn")))
        .clone()
}

/// What runs a loaded graph.
enum Engine {
    Tract(Arc<TypedRunnableModel>),
    #[cfg(feature = "onnxruntime")]
    Onnxruntime(crate::onnxruntime::OrtModel),
}

/// A graph loaded, checked and optimised, ready to run from any thread.
pub struct NativeModel {
    engine: Engine,
    inputs: Vec<InputSpec>,
    outputs: Vec<String>,
    /// SHA-256 of the `model.onnx` it was loaded from.
    pub sha256: [u8; 32],
    /// The backend that runs it (`tract`, `onnxruntime`), and for onnxruntime its version.
    pub runs_on: String,
}

impl std::fmt::Debug for NativeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeModel")
            .field("runs_on", &self.runs_on)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

const FETCH: &str = "fetch the models again with `make models` (components/embedder-onnx/models/fetch.sh)";

impl NativeModel {
    /// Loads ONNX `bytes` (read from `path`, for messages) with `backend`.
    fn build(backend: &Backend, path: &Path, bytes: &[u8], sha256: [u8; 32]) -> Result<NativeModel, NnError> {
        match backend {
            Backend::Tract => NativeModel::build_tract(path, bytes, sha256),
            #[cfg(feature = "onnxruntime")]
            Backend::Onnxruntime(Ok(library)) => {
                let (model, inputs) = crate::onnxruntime::OrtModel::build(library, path, bytes)?;
                let version = crate::onnxruntime::load(library)?;
                let outputs = model.outputs().to_vec();
                Ok(NativeModel {
                    engine: Engine::Onnxruntime(model),
                    inputs,
                    outputs,
                    sha256,
                    runs_on: format!("onnxruntime {version}"),
                })
            }
            Backend::Onnxruntime(Err(why)) => Err(NnError::new(Code::Unsupported, why.clone())),
            #[cfg(not(feature = "onnxruntime"))]
            Backend::Onnxruntime(Ok(_)) => Err(NnError::new(
                Code::Unsupported,
                "this quarry was built without the onnxruntime backend (cargo feature `onnxruntime`); use backend = \"tract\"",
            )),
        }
    }

    /// Parses and optimises ONNX `bytes` with tract. Every input gets a batch of 1 and any
    /// length (a constant batch lets tract specialise its kernels).
    fn build_tract(path: &Path, bytes: &[u8], sha256: [u8; 32]) -> Result<NativeModel, NnError> {
        let bad = |e: TractError| NnError::new(Code::Runtime, format!("{}: {e:#}; {FETCH}", path.display()));
        // The shapes an exporter recorded would pin the facts; tract infers them from the inputs.
        let mut model = tract_onnx::onnx()
            .with_ignore_output_shapes(true)
            .with_ignore_value_info(true)
            .model_for_read(&mut &bytes[..])
            .map_err(bad)?;
        let seq = model.sym("S");
        for i in 0..model.input_outlets().map_err(bad)?.len() {
            let dt = model.input_fact(i).map_err(bad)?.datum_type().unwrap_or(DatumType::I64);
            model
                .set_input_fact(i, InferenceFact::from(TypedFact::dt_shape(dt, dims!(1, seq.clone()))))
                .map_err(bad)?;
        }
        let plan = model.into_optimized().and_then(|m| m.into_runnable()).map_err(bad)?;
        let typed = plan.model();
        let mut inputs = Vec::new();
        for (i, outlet) in typed.input_outlets().map_err(bad)?.iter().enumerate() {
            let fact = typed.input_fact(i).map_err(bad)?;
            let ty = element_type(fact.datum_type).ok_or_else(|| {
                NnError::new(Code::Unsupported, format!("{}: input {i} has type {:?}", path.display(), fact.datum_type))
            })?;
            let dims = fact.shape.iter().map(|d| d.to_usize().ok()).collect();
            inputs.push(InputSpec { name: typed.node(outlet.node).name.clone(), ty, dims });
        }
        let outputs = typed
            .output_outlets()
            .map_err(bad)?
            .iter()
            .map(|o| typed.outlet_label(*o).map_or_else(|| typed.node(o.node).name.clone(), str::to_string))
            .collect();
        Ok(NativeModel { engine: Engine::Tract(plan), inputs, outputs, sha256, runs_on: "tract".into() })
    }

    /// Names of the inputs, in the graph's order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|i| i.name.as_str()).collect()
    }

    /// Checks `inputs` against the graph (names, types, ranks, fixed dimensions) without
    /// running it, and puts them in the graph's order.
    pub fn check_inputs(&self, mut inputs: Vec<(String, RawTensor)>) -> Result<Vec<RawTensor>, NnError> {
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for spec in &self.inputs {
            let at = inputs.iter().position(|(n, _)| *n == spec.name).ok_or_else(|| {
                NnError::new(
                    Code::InvalidArgument,
                    format!("the graph's input {:?} was not given; it takes {:?}", spec.name, self.input_names()),
                )
            })?;
            let (_, t) = inputs.swap_remove(at);
            let fits = t.dims.len() == spec.dims.len()
                && t.dims.iter().zip(&spec.dims).all(|(&d, want)| want.is_none_or(|w| w == d as usize));
            if t.ty != spec.ty || !fits {
                return Err(NnError::new(
                    Code::InvalidArgument,
                    format!(
                        "input {:?} must be {:?} of dimensions {:?} (_ = any), not {:?} of {:?}",
                        spec.name,
                        spec.ty,
                        spec.dims.iter().map(|d| d.map_or("_".to_string(), |d| d.to_string())).collect::<Vec<_>>(),
                        t.ty,
                        t.dims
                    ),
                ));
            }
            RawTensor::check(&t.dims, t.ty, t.data.len())?;
            ordered.push(t);
        }
        if let Some((name, _)) = inputs.first() {
            return Err(NnError::new(
                Code::InvalidArgument,
                format!(
                    "the graph has no input {:?}; it takes {:?}",
                    quarry_support::text::cut(name, 200),
                    self.input_names()
                ),
            ));
        }
        Ok(ordered)
    }

    /// Runs the graph on inputs that passed [`NativeModel::check_inputs`], on `threads`; the
    /// outputs, named. Blocks: call it from the inference threads, never from an async worker.
    pub fn run(&self, inputs: Vec<RawTensor>, threads: Threads) -> Result<Vec<(String, RawTensor)>, NnError> {
        // Without the onnxruntime feature the match has one arm.
        #[allow(clippy::infallible_destructuring_match)]
        let plan = match &self.engine {
            Engine::Tract(plan) => plan,
            #[cfg(feature = "onnxruntime")]
            Engine::Onnxruntime(model) => return model.run(&self.input_names(), inputs, threads),
        };
        match threads {
            Threads::Every if cores() > 1 => {
                tract_linalg::multithread::multithread_tract_scope(wide_executor(), || {
                    run_tract(plan, &self.outputs, inputs)
                })
            }
            _ => run_tract(plan, &self.outputs, inputs),
        }
    }
}

/// Runs a tract plan on the calling thread (and the executor of the scope it is called in).
fn run_tract(
    plan: &Arc<TypedRunnableModel>,
    names: &[String],
    inputs: Vec<RawTensor>,
) -> Result<Vec<(String, RawTensor)>, NnError> {
    let failed = |e: TractError| NnError::new(Code::Runtime, format!("inference failed: {e:#}"));
    let mut values = TVec::new();
    for t in inputs {
        let dt = datum(t.ty).ok_or_else(|| NnError::new(Code::Unsupported, "bf16 tensors are not supported"))?;
        let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        values.push(tensor_from_le(dt, &shape, &t.data).map_err(failed)?.into());
    }
    let outputs = plan.run(values).map_err(failed)?;
    outputs
        .into_iter()
        .zip(names)
        .map(|(v, name)| {
            let ty = element_type(v.datum_type()).ok_or_else(|| {
                NnError::new(Code::Unsupported, format!("output {name:?} has type {:?}", v.datum_type()))
            })?;
            let dims = v.shape().iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect();
            Ok((name.clone(), RawTensor { dims, ty, data: v.as_bytes().to_vec() }))
        })
        .collect()
}

/// The tract datum type of a wasi-nn element type (tract has no bfloat16).
fn datum(ty: ElementType) -> Option<DatumType> {
    Some(match ty {
        ElementType::F16 => DatumType::F16,
        ElementType::F32 => DatumType::F32,
        ElementType::F64 => DatumType::F64,
        ElementType::U8 => DatumType::U8,
        ElementType::I32 => DatumType::I32,
        ElementType::I64 => DatumType::I64,
        ElementType::Bf16 => return None,
    })
}

/// The wasi-nn element type of a tract datum type, if wasi-nn has one.
fn element_type(dt: DatumType) -> Option<ElementType> {
    Some(match dt {
        DatumType::F16 => ElementType::F16,
        DatumType::F32 => ElementType::F32,
        DatumType::F64 => ElementType::F64,
        DatumType::U8 => ElementType::U8,
        DatumType::I32 => ElementType::I32,
        DatumType::I64 => ElementType::I64,
        _ => return None,
    })
}

/// A tract tensor of `dt` from little-endian `bytes` (their length already checked).
fn tensor_from_le(dt: DatumType, shape: &[usize], bytes: &[u8]) -> TractResult<Tensor> {
    fn typed<T: Datum + Copy, const N: usize>(shape: &[usize], b: &[u8], f: fn([u8; N]) -> T) -> TractResult<Tensor> {
        let v: Vec<T> = b.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect();
        Tensor::from_shape(shape, &v)
    }
    match dt {
        DatumType::I64 => typed(shape, bytes, i64::from_le_bytes),
        DatumType::I32 => typed(shape, bytes, i32::from_le_bytes),
        DatumType::F32 => typed(shape, bytes, f32::from_le_bytes),
        DatumType::F64 => typed(shape, bytes, f64::from_le_bytes),
        DatumType::U8 => typed(shape, bytes, u8::from_le_bytes),
        DatumType::F16 => typed(shape, bytes, |b| tract_onnx::prelude::f16::from_bits(u16::from_le_bytes(b))),
        other => anyhow::bail!("tensors of type {other:?} are not supported"),
    }
}

/// What identifies a file's version cheaply: its length and modification time.
type Stamp = (u64, Option<SystemTime>);

fn stamp(path: &Path) -> Result<Stamp, NnError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        NnError::new(Code::NotFound, format!("cannot read model file {}: {e}; {FETCH}", path.display()))
    })?;
    Ok((meta.len(), meta.modified().ok()))
}

#[derive(Default)]
struct Slot {
    loaded: Option<(Stamp, Arc<NativeModel>)>,
    /// How many times a model was built from this file (tests check that it is once).
    loads: u64,
}

/// Every model an app has loaded, by file and backend; each behind its own lock, so one slow
/// load holds up only the instances waiting for the same model.
#[derive(Default)]
pub struct Models {
    slots: Mutex<HashMap<SlotKey, Arc<Mutex<Slot>>>>,
}

/// A model's file and the name of the backend that runs it.
type SlotKey = (PathBuf, &'static str);

impl Models {
    fn slot(&self, section: &ModelSection) -> Arc<Mutex<Slot>> {
        self.slots.lock().entry((section.model_file(), section.backend.name())).or_default().clone()
    }

    /// What runs each model loaded now (`tract`, `onnxruntime 1.32.0`), for benches and logs.
    pub fn runs_on(&self) -> Vec<String> {
        let slots: Vec<_> = self.slots.lock().values().cloned().collect();
        slots.iter().filter_map(|s| s.lock().loaded.as_ref().map(|(_, m)| m.runs_on.clone())).collect()
    }

    /// How many times this app has built a model from `section`'s file.
    pub fn load_count(&self, section: &ModelSection) -> u64 {
        self.slot(section).lock().loads
    }

    /// The model of `section`, loaded now unless it is held and the file is unchanged (see the
    /// module docs). Blocks: call it off the async runtime.
    pub fn model(&self, section: &ModelSection) -> Result<Arc<NativeModel>, NnError> {
        let path = section.model_file();
        let slot = self.slot(section);
        let mut slot = slot.lock();
        match current(&mut slot, section, &path) {
            Ok((model, _)) => Ok(model),
            Err(e) => match &slot.loaded {
                Some((_, model)) => {
                    tracing::warn!(target: "quarry::nn", model = %section.name, "{e}; the model loaded before keeps serving");
                    Ok(model.clone())
                }
                None => Err(e),
            },
        }
    }

    /// Checks `section`'s file now, as a hot swap does: whether a new model was loaded from it.
    /// A file that fails its checks (a pin, the manifest) is an error here, and the model
    /// loaded before stays the one [`Models::model`] serves. Blocks: call it off the async
    /// runtime.
    pub fn refresh(&self, section: &ModelSection) -> Result<bool, NnError> {
        let path = section.model_file();
        let slot = self.slot(section);
        let mut slot = slot.lock();
        current(&mut slot, section, &path).map(|(_, built)| built)
    }
}

/// The model of the file as it is now (whether it was built just now), or why the file is refused.
fn current(slot: &mut Slot, section: &ModelSection, path: &Path) -> Result<(Arc<NativeModel>, bool), NnError> {
    let now = stamp(path)?;
    if let Some((was, model)) = &slot.loaded
        && *was == now
    {
        return Ok((model.clone(), false));
    }
    let (bytes, sha256) = read_checked(section, path)?;
    if let Some((_, model)) = &slot.loaded
        && model.sha256 == sha256
    {
        let model = model.clone();
        slot.loaded = Some((now, model.clone()));
        return Ok((model, false));
    }
    let model = Arc::new(NativeModel::build(&section.backend, path, &bytes, sha256)?);
    slot.loads += 1;
    slot.loaded = Some((now, model.clone()));
    tracing::info!(target: "quarry::nn", model = %section.name, file = %path.display(), runs_on = %model.runs_on, "model loaded");
    Ok((model, true))
}

/// Reads `model.onnx` and checks it against its manifest and the section's pin.
fn read_checked(section: &ModelSection, path: &Path) -> Result<(Vec<u8>, [u8; 32]), NnError> {
    let bytes = std::fs::read(path).map_err(|e| {
        NnError::new(Code::NotFound, format!("cannot read model file {}: {e}; {FETCH}", path.display()))
    })?;
    let sha256: [u8; 32] = Sha256::digest(&bytes).into();
    let got = hex::encode(sha256);
    if let Some(pin) = section.pin
        && pin != sha256
    {
        return Err(NnError::new(
            Code::Security,
            format!(
                "model file {} has sha256 {got}, but [models.{}] pins {}; restore the pinned file, or change or remove `sha256`",
                path.display(),
                section.name,
                hex::encode(pin)
            ),
        ));
    }
    let manifest_path = section.dir.join(MANIFEST_FILE);
    let manifest: serde_json::Value =
        std::fs::read(&manifest_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).ok_or_else(|| {
            NnError::new(Code::NotFound, format!("{} is not a model manifest; {FETCH}", manifest_path.display()))
        })?;
    match manifest.pointer(&format!("/sha256/{MODEL_FILE}")).and_then(|v| v.as_str()) {
        Some(want) if want == got => Ok((bytes, sha256)),
        Some(want) => Err(NnError::new(
            Code::Runtime,
            format!(
                "model file {} is corrupt (sha256 {got}, expected {want}); delete {} and {FETCH}",
                path.display(),
                section.dir.display()
            ),
        )),
        None => Err(NnError::new(
            Code::NotFound,
            format!("{} lists no checksum for {MODEL_FILE}; {FETCH}", manifest_path.display()),
        )),
    }
}
