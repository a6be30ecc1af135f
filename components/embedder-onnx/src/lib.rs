//! Local sentence embeddings inside the sandbox: `tokenizers` (pure Rust,
//! fancy-regex) and `tract-onnx`, exporting `quarry:retrieval/embedder`.
//!
//! The model directory comes from a read-only preopen granted in the host
//! config; this component carries no weights. A model directory holds
//! `model.onnx` (inputs `input_ids`, `attention_mask`, `token_type_ids`;
//! output `last_hidden_state`), `tokenizer.json`, and `quarry-model.json`, the
//! manifest written by `components/embedder-onnx/models/fetch.sh`: model id,
//! dimension, window, prefixes, and the sha256 of each file.
//!
//! Each text is tokenised with the model's own prefix (e5: `query: ` /
//! `passage: `), truncated at the model's window (the output says so), run
//! without padding, mean-pooled over its tokens and L2-normalised, which is
//! how MiniLM and e5 were trained.
//!
//! Config: `{"model_dir": "/models/all-minilm-l6-v2", "verify": true}`.
//!
//! [`model`] is plain Rust, also built natively so that tract in wasm can be
//! compared with tract on the host (`cargo run --release -p embedder-onnx
//! --example native`); the component glue is wasm-only.

pub mod model;

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "embedding-model",
        generate_all,
    });

    use std::cell::RefCell;

    use exports::quarry::retrieval::embedder::{EmbedError, Embedding, Guest as EmbedderGuest, InputKind, ModelInfo};
    use exports::quarry::retrieval::model::Guest as ModelGuest;

    use crate::model::{self, Kind, Model};

    struct Component;

    thread_local! {
        // Components are single-threaded; the model is loaded once by `load`.
        static MODEL: RefCell<Option<Model>> = const { RefCell::new(None) };
    }

    fn error(e: model::EmbedError) -> EmbedError {
        match e {
            model::EmbedError::InvalidInput(m) => EmbedError::InvalidInput(m),
            model::EmbedError::Unavailable(m) => EmbedError::Unavailable(m),
            model::EmbedError::Internal(m) => EmbedError::Internal(m),
        }
    }

    fn info(i: model::ModelInfo) -> ModelInfo {
        ModelInfo { id: i.id, dimension: i.dimension, max_tokens: i.max_tokens }
    }

    impl ModelGuest for Component {
        fn load(config: String) -> Result<ModelInfo, EmbedError> {
            let model = Model::load(&config).map_err(error)?;
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
            MODEL.with(|m| {
                let m = m.borrow();
                let model = m
                    .as_ref()
                    .ok_or_else(|| EmbedError::Unavailable("no model loaded; the host calls `load` first".into()))?;
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
            MODEL.with(|m| {
                let m = m.borrow();
                let model = m
                    .as_ref()
                    .ok_or_else(|| EmbedError::Unavailable("no model loaded; the host calls `load` first".into()))?;
                texts.iter().map(|t| model.count_tokens(t).map_err(error)).collect()
            })
        }
    }

    export!(Component);
}
