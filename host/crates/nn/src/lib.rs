//! The `nn` capability: `wasi:nn` (`0.2.0-rc-2024-10-28`, the version wasmtime-wasi-nn 48
//! ships), served by tract running natively in the host. A component keeps its own
//! tokenising, pooling and every decision; the tensor work runs here, at native speed.
//!
//! - **Models are host config.** `[models.NAME]` names a model directory (`model.onnx`, the
//!   tokenizer, the manifest; optionally pinned by SHA-256), and the grant `models = ["NAME"]`
//!   says which instances may use it. A granted model's directory is preopened read-only at
//!   `/models/NAME`, for its tokenizer and manifest.
//! - **Only by name.** A guest gets a graph with `load-by-name` of a granted model; `load` of
//!   guest-supplied bytes is refused (the host never parses a model a component sends).
//! - **Once per host.** A model is loaded, checked and optimised once ([`native`]) and shared by
//!   every instance; a store holds only its handles.
//! - **Off the async workers.** `compute` runs on the inference threads ([`inference`]), in turn with
//!   other callers, within the deadline of the call that asked: the embedder's own call, or the
//!   tool call it is embedding for ([`State::set_caller`]).
//! - **Bounded.** A tensor's size is checked against its data before anything is allocated; a
//!   store holds at most [`MAX_GRAPHS`] graphs and [`MAX_CONTEXTS`] execution contexts, and an
//!   instance (every store of an embedder's pool together) at most its `grants.memory` of
//!   tensors, and never more than [`MAX_TENSOR_BYTES`]. A forged handle traps in the component
//!   ABI. An inference that has started when its call's deadline passes runs to its end on its
//!   inference thread (tract cannot be stopped part-way): the call fails at its deadline, the
//!   thread's slot stays taken until then, and what bounds the run is the model and the size of
//!   its inputs (a tensor is at most 16M elements); no inference starts past a deadline.
//!
//! Files: `grant.rs` (the section and the grant), `tensor.rs` (the tensor, its caps and the
//! error both backends use), `native.rs` (tract, the shared models), `onnxruntime.rs` and
//! `ort_library.rs` (the second backend and where its library is found), `inference.rs` (the
//! inference threads).

#![deny(missing_docs)]

mod grant;
pub mod inference;
pub mod native;
#[cfg(feature = "onnxruntime")]
pub mod onnxruntime;
pub mod ort_library;
pub mod tensor;
pub mod threads;

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};

pub use grant::{
    Backend, GUEST_ROOT, MANIFEST_FILE, MODEL_FILE, ModelGrant, ModelSection, RawModel, RawOnnxruntime, grant, section,
};
use native::NativeModel;
use tensor::{Code, ElementType, NnError, RawTensor};

mod wit {
    wasmtime::component::bindgen!({
        path: "../../../wit/deps/wasi-nn.wit",
        world: "ml",
        with: {
            "wasi:nn/graph.graph": super::Graph,
            "wasi:nn/tensor.tensor": super::Tensor,
            "wasi:nn/inference.graph-execution-context": super::ExecutionContext,
            "wasi:nn/errors.error": super::Error,
        },
        imports: { default: async | trappable },
    });
}

use wit::wasi::nn::errors::ErrorCode;
use wit::wasi::nn::graph::{ExecutionTarget, GraphBuilder, GraphEncoding};
use wit::wasi::nn::inference::NamedTensor;
use wit::wasi::nn::tensor::{TensorData, TensorDimensions, TensorType};

/// Graphs one store may hold at once.
pub const MAX_GRAPHS: usize = 4;
/// Execution contexts one store may hold at once.
pub const MAX_CONTEXTS: usize = 16;
/// Bytes of tensors (inputs waiting for `compute`, outputs not yet dropped) one instance may
/// hold, whatever its grant.
pub const MAX_TENSOR_BYTES: u64 = 256 << 20;

/// A loaded graph, as the guest holds it.
pub struct Graph(std::sync::Arc<NativeModel>);

/// An execution context of a graph.
pub struct ExecutionContext(std::sync::Arc<NativeModel>);

/// A tensor; one the host refused to take holds why, and fails the `compute` it is given to.
pub struct Tensor(Result<RawTensor, NnError>);

/// A wasi-nn error, as the guest holds it.
pub struct Error(NnError);

/// One store's wasi-nn state: what it is granted, who its calls are for, what it holds.
/// wasi-nn's state for one app: the models it has loaded and its inference threads, shared by
/// every store of the app.
#[derive(Clone, Default)]
pub struct AppState {
    /// The loaded models, by file.
    pub models: Arc<native::Models>,
    /// The inference threads.
    pub inference: Arc<inference::InferenceThreads>,
}

/// One store's wasi-nn: its grant, what it holds, and who its running call computes for.
pub struct State {
    grant: ModelGrant,
    instance: String,
    app: AppState,
    /// Held while the store runs a tool's own code (see [`inference::Busy`]).
    busy: Option<inference::Busy>,
    /// The tool instance (and its deadline) the running call computes for, when another
    /// instance's call asked for it (an embedder embedding for a tool).
    caller: Option<(String, Instant)>,
    graphs: usize,
    contexts: usize,
    /// This store's share of the instance's tensor budget (given back when the store goes).
    tensor_bytes: u64,
}

impl Drop for State {
    fn drop(&mut self) {
        // A recycled store's tensors go with it, never dropped one by one by the guest.
        self.grant.tensors.release(self.tensor_bytes);
    }
}

impl State {
    /// Charges `n` bytes of tensors to the instance, within `limit`.
    fn charge(&mut self, n: u64, limit: u64) -> bool {
        let ok = self.grant.tensors.charge(n, limit);
        if ok {
            self.tensor_bytes += n;
        }
        ok
    }

    /// Gives back `n` bytes of tensors.
    fn release(&mut self, n: u64) {
        self.tensor_bytes -= n;
        self.grant.tensors.release(n);
    }
}

impl State {
    /// The state of `instance`, granted `grant`, in `app`.
    pub fn new(grant: &ModelGrant, instance: &str, app: &AppState) -> State {
        State {
            grant: grant.clone(),
            instance: instance.to_string(),
            app: app.clone(),
            busy: None,
            caller: None,
            graphs: 0,
            contexts: 0,
            tensor_bytes: 0,
        }
    }

    /// Before a guest call: who it computes for. An embedder's call computes for the tool
    /// that asked (the inference threads serve it in that client's turn, and refuses work past
    /// its deadline); a tool's own code counts as a running tool call.
    /// `for_caller`: the client and deadline of the tool call it computes for (none: the
    /// store's own); `tool_code`: whether it is a tool's own call or preparation.
    pub fn begin_call(&mut self, for_caller: Option<(&str, Instant)>, tool_code: bool) {
        self.caller = for_caller.map(|(c, d)| (c.to_string(), d));
        self.busy = tool_code.then(|| self.app.inference.enter());
    }

    /// After a guest call.
    pub fn end_call(&mut self) {
        self.busy = None;
    }
}

/// The files `[models.*]` read, for the host's watcher: each model's file, and its manifest
/// (written beside it), as `(the file that changes, the model file it reloads)`.
pub fn watched(
    models: &std::collections::BTreeMap<String, Arc<ModelSection>>,
) -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    models
        .values()
        .flat_map(|m| [(m.model_file(), m.model_file()), (m.dir.join(MANIFEST_FILE), m.model_file())])
        .collect()
}

/// The directories of `[models.*]`, as `(models.NAME, directory)`: the host's ONNX parser reads
/// them.
pub fn host_read_dirs(
    models: &std::collections::BTreeMap<String, Arc<ModelSection>>,
) -> Vec<(String, std::path::PathBuf)> {
    models.iter().map(|(name, m)| (format!("models.{name}"), m.dir.clone())).collect()
}

/// Loads again the models whose file is `path` (unless a pin or the manifest refuses the file:
/// then the error, and the model loaded before keeps serving); returns the names of those now
/// serving a new model. Blocks: call it off the async runtime.
pub fn reload(
    models: &std::collections::BTreeMap<String, Arc<ModelSection>>,
    path: &std::path::Path,
    app: &AppState,
) -> Result<Vec<String>, String> {
    let mut changed = Vec::new();
    for section in models.values().filter(|m| m.model_file() == path) {
        if app.models.refresh(section).map_err(|e| e.message)? {
            changed.push(section.name.clone());
        }
    }
    Ok(changed)
}

/// The directories a store granted `grant` reads its models' files from (the tokenizer beside
/// a model): each granted model's directory, read-only at `/models/NAME`. The capability list
/// preopens them through the directory capability.
pub fn read_only_dirs(grant: &ModelGrant) -> impl Iterator<Item = (&std::path::Path, String)> {
    grant.models.iter().map(|(name, model)| (model.dir.as_path(), format!("{GUEST_ROOT}/{name}")))
}

/// What the wasi-nn functions need of a store, borrowed together.
pub struct View<'a> {
    state: &'a mut State,
    table: &'a mut ResourceTable,
    deadline: Instant,
    /// The most tensors the instance may hold: its memory grant, at most [`MAX_TENSOR_BYTES`].
    tensor_limit: u64,
}

/// The [`View`] of a store: its wasi-nn state, its resource table, the running call's
/// deadline, and the instance's memory grant in bytes (what it may hold in tensors is sized
/// against it).
pub fn view<'a>(state: &'a mut State, table: &'a mut ResourceTable, deadline: Instant, memory: usize) -> View<'a> {
    let tensor_limit = (memory as u64).min(MAX_TENSOR_BYTES);
    View { state, table, deadline, tensor_limit }
}

struct HasView;

impl HasData for HasView {
    type Data<'a> = View<'a>;
}

/// Adds `wasi:nn`, served by the [`View`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> View<'_>) -> wasmtime::Result<()> {
    wit::wasi::nn::errors::add_to_linker::<T, HasView>(l, get)?;
    wit::wasi::nn::tensor::add_to_linker::<T, HasView>(l, get)?;
    wit::wasi::nn::inference::add_to_linker::<T, HasView>(l, get)?;
    wit::wasi::nn::graph::add_to_linker::<T, HasView>(l, get)
}

type Fallible<T> = wasmtime::Result<Result<T, Resource<Error>>>;

impl View<'_> {
    fn fail<T>(&mut self, e: NnError) -> Fallible<T> {
        Ok(Err(self.table.push(Error(e))?))
    }
}

fn ty_of(t: TensorType) -> ElementType {
    match t {
        TensorType::Fp16 => ElementType::F16,
        TensorType::Fp32 => ElementType::F32,
        TensorType::Fp64 => ElementType::F64,
        TensorType::Bf16 => ElementType::Bf16,
        TensorType::U8 => ElementType::U8,
        TensorType::I32 => ElementType::I32,
        TensorType::I64 => ElementType::I64,
    }
}

fn wit_ty(t: ElementType) -> TensorType {
    match t {
        ElementType::F16 => TensorType::Fp16,
        ElementType::F32 => TensorType::Fp32,
        ElementType::F64 => TensorType::Fp64,
        ElementType::Bf16 => TensorType::Bf16,
        ElementType::U8 => TensorType::U8,
        ElementType::I32 => TensorType::I32,
        ElementType::I64 => TensorType::I64,
    }
}

impl wit::wasi::nn::graph::Host for View<'_> {
    async fn load(&mut self, _: Vec<GraphBuilder>, _: GraphEncoding, _: ExecutionTarget) -> Fallible<Resource<Graph>> {
        self.fail(NnError::new(
            Code::Security,
            "the host does not load models from bytes a component sends; name a model in [models.NAME], grant it with `models = [\"NAME\"]` and use load-by-name",
        ))
    }

    async fn load_by_name(&mut self, name: String) -> Fallible<Resource<Graph>> {
        let Some(section) = self.state.grant.models.get(&name).cloned() else {
            let granted: Vec<_> = self.state.grant.models.keys().cloned().collect();
            return self.fail(NnError::new(
                Code::NotFound,
                format!(
                    "instance {:?} is not granted a model named {}; it may load {granted:?} (grant more with `models = [\"NAME\"]`)",
                    self.state.instance,
                    quarry_support::text::quoted_prefix(&name, 100)
                ),
            ));
        };
        if self.state.graphs >= MAX_GRAPHS {
            return self.fail(NnError::new(
                Code::TooLarge,
                format!("an instance may hold {MAX_GRAPHS} graphs at once; drop one first"),
            ));
        }
        // Loading reads and optimises the model (about a second, once per host): off the
        // runtime's workers, like inference.
        let models = self.state.app.models.clone();
        let loaded = match tokio::task::spawn_blocking(move || models.model(&section)).await {
            Ok(r) => r,
            Err(e) => Err(NnError::new(Code::Runtime, format!("the model loader failed: {e}"))),
        };
        match loaded {
            Ok(model) => {
                self.state.graphs += 1;
                Ok(Ok(self.table.push(Graph(model))?))
            }
            Err(e) => self.fail(e),
        }
    }
}

impl wit::wasi::nn::graph::HostGraph for View<'_> {
    async fn init_execution_context(&mut self, graph: Resource<Graph>) -> Fallible<Resource<ExecutionContext>> {
        if self.state.contexts >= MAX_CONTEXTS {
            return self.fail(NnError::new(
                Code::TooLarge,
                format!("an instance may hold {MAX_CONTEXTS} execution contexts at once; drop one first"),
            ));
        }
        let model = self.table.get(&graph)?.0.clone();
        self.state.contexts += 1;
        Ok(Ok(self.table.push(ExecutionContext(model))?))
    }

    async fn drop(&mut self, graph: Resource<Graph>) -> wasmtime::Result<()> {
        self.table.delete(graph)?;
        self.state.graphs -= 1;
        Ok(())
    }
}

impl wit::wasi::nn::inference::Host for View<'_> {}

impl wit::wasi::nn::inference::HostGraphExecutionContext for View<'_> {
    async fn compute(
        &mut self,
        ctx: Resource<ExecutionContext>,
        inputs: Vec<NamedTensor>,
    ) -> Fallible<Vec<NamedTensor>> {
        let model = self.table.get(&ctx)?.0.clone();
        let mut given = Vec::with_capacity(inputs.len());
        let mut refused = None;
        for (name, t) in inputs {
            // The tensors move to the host with the call, as wasi-nn says: taken out of the table.
            let t = self.table.delete(t)?;
            self.state.release(t.0.as_ref().map_or(0, |t| t.data.len() as u64));
            match t.0 {
                Ok(t) => given.push((name, t)),
                Err(e) => refused = refused.or(Some(e)),
            }
        }
        if let Some(e) = refused {
            return self.fail(e);
        }
        let inputs = match model.check_inputs(given) {
            Ok(inputs) => inputs,
            Err(e) => return self.fail(e),
        };
        let (client, deadline) = match &self.state.caller {
            Some((client, d)) => (client.clone(), (*d).min(self.deadline)),
            None => (self.state.instance.clone(), self.deadline),
        };
        // The job's size: the first input's elements (the token ids, batch times length).
        let tokens = inputs.first().map_or(0, |t| t.dims.iter().map(|&d| d as usize).product());
        let outputs = match self
            .state
            .app
            .inference
            .run(&client, deadline, tokens, move |threads| model.run(inputs, threads))
            .await
        {
            Ok(outputs) => outputs,
            Err(e) => return self.fail(e),
        };
        let bytes: u64 = outputs.iter().map(|(_, t)| t.data.len() as u64).sum();
        if !self.state.charge(bytes, self.tensor_limit) {
            return self.fail(NnError::new(
                Code::TooLarge,
                format!(
                    "the outputs ({bytes} bytes) would pass the {} bytes of tensors this instance may hold (its grants.memory, all its stores together); drop tensors first",
                    self.tensor_limit
                ),
            ));
        }
        let mut named = Vec::with_capacity(outputs.len());
        for (name, t) in outputs {
            named.push((name, self.table.push(Tensor(Ok(t)))?));
        }
        Ok(Ok(named))
    }

    async fn drop(&mut self, ctx: Resource<ExecutionContext>) -> wasmtime::Result<()> {
        self.table.delete(ctx)?;
        self.state.contexts -= 1;
        Ok(())
    }
}

impl wit::wasi::nn::tensor::Host for View<'_> {}

impl wit::wasi::nn::tensor::HostTensor for View<'_> {
    async fn new(
        &mut self,
        dims: TensorDimensions,
        ty: TensorType,
        data: TensorData,
    ) -> wasmtime::Result<Resource<Tensor>> {
        // The constructor cannot fail in wasi-nn: a refused tensor keeps why (and none of its
        // data) and fails the `compute` it is given to.
        let ty = ty_of(ty);
        let len = data.len() as u64;
        let limit = self.tensor_limit;
        let checked = RawTensor::check(&dims, ty, data.len()).and_then(|()| {
            if self.state.charge(len, limit) {
                Ok(())
            } else {
                Err(NnError::new(
                    Code::TooLarge,
                    format!(
                        "this instance may hold {limit} bytes of tensors (its grants.memory, all its stores together); drop tensors or compute in smaller batches"
                    ),
                ))
            }
        });
        let tensor = checked.map(|()| RawTensor { dims, ty, data });
        Ok(self.table.push(Tensor(tensor))?)
    }

    async fn dimensions(&mut self, t: Resource<Tensor>) -> wasmtime::Result<TensorDimensions> {
        Ok(self.table.get(&t)?.0.as_ref().map_or_else(|_| Vec::new(), |t| t.dims.clone()))
    }

    async fn ty(&mut self, t: Resource<Tensor>) -> wasmtime::Result<TensorType> {
        Ok(self.table.get(&t)?.0.as_ref().map_or(TensorType::U8, |t| wit_ty(t.ty)))
    }

    async fn data(&mut self, t: Resource<Tensor>) -> wasmtime::Result<TensorData> {
        Ok(self.table.get(&t)?.0.as_ref().map_or_else(|_| Vec::new(), |t| t.data.clone()))
    }

    async fn drop(&mut self, t: Resource<Tensor>) -> wasmtime::Result<()> {
        let t = self.table.delete(t)?;
        self.state.release(t.0.as_ref().map_or(0, |t| t.data.len() as u64));
        Ok(())
    }
}

impl wit::wasi::nn::errors::Host for View<'_> {}

impl wit::wasi::nn::errors::HostError for View<'_> {
    async fn code(&mut self, e: Resource<Error>) -> wasmtime::Result<ErrorCode> {
        Ok(match self.table.get(&e)?.0.code {
            Code::InvalidArgument => ErrorCode::InvalidArgument,
            Code::Unsupported => ErrorCode::UnsupportedOperation,
            Code::NotFound => ErrorCode::NotFound,
            Code::TooLarge => ErrorCode::TooLarge,
            Code::Security => ErrorCode::Security,
            Code::Timeout => ErrorCode::Timeout,
            Code::Runtime => ErrorCode::RuntimeError,
        })
    }

    async fn data(&mut self, e: Resource<Error>) -> wasmtime::Result<String> {
        Ok(self.table.get(&e)?.0.message.clone())
    }

    async fn drop(&mut self, e: Resource<Error>) -> wasmtime::Result<()> {
        self.table.delete(e)?;
        Ok(())
    }
}
