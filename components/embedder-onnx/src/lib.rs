//! Local sentence embeddings in a sandbox: `tokenizers` (pure Rust, fancy-regex) in the
//! component, the model's graph run by the host through `wasi:nn`; exports
//! `quarry:retrieval/embedder`.
//!
//! The component carries no weights and parses no model: the host loads the ONNX graph of a
//! model the operator named (`[models.NAME]`) and granted (`models = ["NAME"]`), and shows the
//! model's directory read-only at `/models/NAME`, where this component reads the tokenizer and
//! the manifest (`quarry-model.json`, written by `components/embedder-onnx/models/fetch.sh`:
//! model id, dimension, window, prefixes, and the sha256 of each file).
//!
//! Each text is tokenised with the model's own prefix (e5: `query: ` / `passage: `), truncated
//! at the model's window (the output says so), run without padding (inputs `input_ids`,
//! `attention_mask`, `token_type_ids`; output `last_hidden_state`), mean-pooled over its tokens
//! and L2-normalised, which is how MiniLM and e5 were trained.
//!
//! Config: `{"model": "NAME", "verify": true}` (`verify` checks the tokenizer's sha256).
//!
//! [`model`] is plain Rust, also built natively (`make eval` runs it over the host's native
//! inference); the component glue is wasm-only.

pub mod model;

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "embedding-model",
        generate_all,
    });

    use std::cell::RefCell;

    use exports::quarry::retrieval::embedder::{
        EmbedError, Embedding, Guest as EmbedderGuest, InputKind, ModelInfo, TokenSpan,
    };
    use exports::quarry::retrieval::model::Guest as ModelGuest;

    use wasi::nn::graph::{GraphExecutionContext, load_by_name};
    use wasi::nn::tensor::{Tensor, TensorType};

    use crate::model::{self, Kind, Model};

    struct Component;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        model: String,
        #[serde(default = "yes")]
        verify: bool,
    }

    fn yes() -> bool {
        true
    }

    /// The graph of a granted model, run by the host.
    struct HostGraph {
        /// Holds the graph it was made from: wasi-nn ties a context to its graph's life.
        _graph: wasi::nn::graph::Graph,
        context: GraphExecutionContext,
    }

    fn nn_error(what: &str, e: wasi::nn::errors::Error) -> model::EmbedError {
        use wasi::nn::errors::ErrorCode;
        let message = format!("{what}: {}", e.data());
        match e.code() {
            ErrorCode::InvalidArgument => model::EmbedError::InvalidInput(message),
            ErrorCode::NotFound | ErrorCode::Security | ErrorCode::Timeout | ErrorCode::TooLarge => {
                model::EmbedError::Unavailable(message)
            }
            _ => model::EmbedError::Internal(message),
        }
    }

    impl model::Inference for HostGraph {
        fn hidden_state(&self, ids: &[i64]) -> Result<Vec<f32>, model::EmbedError> {
            let dims = [1, ids.len() as u32];
            let inputs = model::graph_inputs(ids)
                .into_iter()
                .map(|(name, data)| (name.to_string(), Tensor::new(&dims, TensorType::I64, &data)))
                .collect();
            let outputs = self.context.compute(inputs).map_err(|e| nn_error("inference failed", e))?;
            let (_, hidden) = outputs
                .iter()
                .find(|(name, _)| name == model::HIDDEN_STATE)
                .or(outputs.first())
                .ok_or_else(|| model::EmbedError::Internal("the model returned no output".into()))?;
            if hidden.ty() != TensorType::Fp32 {
                return Err(model::EmbedError::Internal("the model's hidden state is not f32".into()));
            }
            Ok(model::f32s(&hidden.data()))
        }
    }

    /// The model `config` names: its graph from the host, its tokenizer and manifest from
    /// `/models/NAME`.
    fn open(config: &str) -> Result<Model<HostGraph>, model::EmbedError> {
        let cfg: Config = serde_json::from_str(config).map_err(|e| {
            let hint = if config.contains("model_dir") {
                "; the host runs the model now: declare [models.NAME] with its `dir`, grant it with `models = [\"NAME\"]`, and set config = { model = \"NAME\" }"
            } else {
                ""
            };
            model::EmbedError::InvalidInput(format!("embedder config: {e}; expected {{\"model\": \"NAME\", \"verify\": true}}{hint}"))
        })?;
        let graph = load_by_name(&cfg.model).map_err(|e| nn_error(&format!("model {:?}", cfg.model), e))?;
        let context = graph.init_execution_context().map_err(|e| nn_error("execution context", e))?;
        let dir = std::path::PathBuf::from(format!("/models/{}", cfg.model));
        Model::open(&dir, cfg.verify, HostGraph { _graph: graph, context })
    }

    thread_local! {
        // Components are single-threaded; the model is loaded once by `load`.
        static MODEL: RefCell<Option<Model<HostGraph>>> = const { RefCell::new(None) };
    }

    fn error(e: model::EmbedError) -> EmbedError {
        match e {
            model::EmbedError::InvalidInput(m) => EmbedError::InvalidInput(m),
            model::EmbedError::Unavailable(m) => EmbedError::Unavailable(m),
            model::EmbedError::Internal(m) => EmbedError::Internal(m),
        }
    }

    /// Runs `f` on the loaded model.
    fn with_model<T>(f: impl FnOnce(&Model<HostGraph>) -> Result<T, EmbedError>) -> Result<T, EmbedError> {
        MODEL.with(|m| match m.borrow().as_ref() {
            Some(model) => f(model),
            None => Err(EmbedError::Unavailable("no model loaded; the host calls `load` first".into())),
        })
    }

    fn info(i: model::ModelInfo) -> ModelInfo {
        ModelInfo { id: i.id, dimension: i.dimension, max_tokens: i.max_tokens }
    }

    impl ModelGuest for Component {
        fn load(config: String) -> Result<ModelInfo, EmbedError> {
            let model = open(&config).map_err(error)?;
            let i = model.info();
            MODEL.with(|m| *m.borrow_mut() = Some(model));
            Ok(info(i))
        }
    }

    impl EmbedderGuest for Component {
        fn info() -> ModelInfo {
            MODEL.with(|m| m.borrow().as_ref().map(|m| info(m.info()))).unwrap_or(ModelInfo {
                id: String::new(),
                dimension: 0,
                max_tokens: 0,
            })
        }

        fn embed(texts: Vec<String>, kind: InputKind) -> Result<Vec<Embedding>, EmbedError> {
            let kind = match kind {
                InputKind::Query => Kind::Query,
                InputKind::Document => Kind::Document,
            };
            with_model(|model| {
                texts
                    .iter()
                    .map(|t| {
                        model
                            .embed(t, kind)
                            .map(|e| Embedding { vector: e.vector, truncated: e.truncated })
                            .map_err(error)
                    })
                    .collect()
            })
        }

        fn count_tokens(texts: Vec<String>) -> Result<Vec<u32>, EmbedError> {
            with_model(|model| texts.iter().map(|t| model.count_tokens(t).map_err(error)).collect())
        }

        fn token_spans(texts: Vec<String>) -> Result<Vec<Vec<TokenSpan>>, EmbedError> {
            with_model(|model| {
                texts
                    .iter()
                    .map(|t| {
                        let spans = model.token_spans(t).map_err(error)?;
                        Ok(spans.into_iter().map(|(start, end)| TokenSpan { start, end }).collect())
                    })
                    .collect()
            })
        }
    }

    export!(Component);

    // The component's version as a custom section, as tool-guest's `component_version!` writes
    // it for the tool components (this crate does not depend on tool-guest): `quarry list`
    // shows it.
    #[used]
    #[unsafe(link_section = "version")]
    static COMPONENT_VERSION: [u8; env!("CARGO_PKG_VERSION").len()] = {
        let (text, mut out) = (env!("CARGO_PKG_VERSION").as_bytes(), [0u8; env!("CARGO_PKG_VERSION").len()]);
        let mut i = 0;
        while i < out.len() {
            out[i] = text[i];
            i += 1;
        }
        out
    };
}
