//! The chapter RAG's environment in this process: the embedder component's model code over the
//! host's own inference (quarry's `nn` capability, the code that serves `wasi:nn`), so that the
//! scores are the component's.

use std::path::Path;

use anyhow::{Context, Result};
use chapter_rag::tool::{BaseEnv, Env, Model, ToolError};
use embedder_onnx::model::{self as onnx, Inference, Kind};
use quarry::capability::nn::native::NativeModel;
use quarry::capability::nn::tensor::{ElementType, RawTensor};
use quarry::capability::nn::threads::Threads;

/// The host's inference, called directly: what `wasi:nn` runs for the component.
pub struct HostInference(std::sync::Arc<NativeModel>);

impl Inference for HostInference {
    fn hidden_state(&self, ids: &[i64]) -> Result<Vec<f32>, onnx::EmbedError> {
        let failed = |e: quarry::capability::nn::tensor::NnError| onnx::EmbedError::Internal(e.message);
        let dims = vec![1, ids.len() as u32];
        let inputs = onnx::graph_inputs(ids)
            .into_iter()
            .map(|(name, data)| (name.to_string(), RawTensor { dims: dims.clone(), ty: ElementType::I64, data }))
            .collect();
        let outputs = self.0.run(self.0.check_inputs(inputs).map_err(failed)?, Threads::One).map_err(failed)?;
        let hidden = outputs.iter().find(|(n, _)| n == onnx::HIDDEN_STATE).or(outputs.first());
        Ok(onnx::f32s(&hidden.ok_or_else(|| onnx::EmbedError::Internal("no output".into()))?.1.data))
    }
}

/// The model in the process, used from every core while indexing.
pub struct Native {
    model: onnx::Model<HostInference>,
    threads: usize,
    /// Where `open_corpus` keeps corpora (`--couchbase`); without one it refuses, as a host
    /// without corpora does.
    #[cfg(feature = "couchbase")]
    pub cluster: Option<std::sync::Arc<crate::couchbase::Cluster>>,
}

impl Native {
    /// Loads the model in `model_dir` (as `make models` writes it).
    pub fn open(model_dir: &Path) -> Result<Native> {
        let dir = std::fs::canonicalize(model_dir).with_context(|| model_dir.display().to_string())?;
        // QUARRY_EVAL_BACKEND=onnxruntime runs the model with onnxruntime (its library found as
        // the host finds it), to judge it on the same questions.
        let backend = match std::env::var("QUARRY_EVAL_BACKEND").as_deref() {
            Ok("onnxruntime") => {
                quarry::capability::nn::Backend::Onnxruntime(quarry::capability::nn::ort_library::locate(None))
            }
            _ => quarry::capability::nn::Backend::Tract,
        };
        let section =
            quarry::capability::nn::ModelSection { name: "eval".into(), dir: dir.clone(), pin: None, backend };
        let graph = HostInference(
            quarry::capability::nn::native::Models::default().model(&section).map_err(|e| anyhow::anyhow!("{e}"))?,
        );
        let model = onnx::Model::open(&dir, true, graph).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok(Native {
            model,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            #[cfg(feature = "couchbase")]
            cluster: None,
        })
    }
}

fn err(e: onnx::EmbedError) -> ToolError {
    ToolError::Upstream(format!("{e:?}"))
}

impl BaseEnv for Native {
    fn model(&self) -> Model {
        let i = self.model.info();
        Model { id: i.id, dimension: i.dimension as usize, max_tokens: i.max_tokens as usize }
    }
    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError> {
        let kind = if query { Kind::Query } else { Kind::Document };
        let per = texts.len().div_ceil(self.threads).max(1);
        std::thread::scope(|s| {
            let parts: Vec<_> = texts
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .map(|t| self.model.embed(t, kind).map(|e| e.vector).map_err(err))
                            .collect::<Result<Vec<_>, _>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(texts.len());
            for p in parts {
                out.extend(p.join().map_err(|_| ToolError::Internal("an embedding thread panicked".into()))??);
            }
            Ok(out)
        })
    }
    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, ToolError> {
        texts.iter().map(|t| self.model.count_tokens(t).map_err(err)).collect()
    }
    fn token_spans(&self, texts: &[String]) -> Result<Vec<Vec<(u32, u32)>>, ToolError> {
        texts.iter().map(|t| self.model.token_spans(t).map_err(err)).collect()
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        let b = std::fs::read(path).map_err(|e| ToolError::NotFound(format!("{path}: {e}")))?;
        if b.len() as u64 > max_bytes {
            return Err(ToolError::InvalidArgs(format!("{path} is larger than {max_bytes} bytes")));
        }
        Ok(b)
    }
    fn log(&self, line: &str) {
        eprintln!("{line}");
    }
    fn progress(&self, task: &str, done: u64, total: u64, unit: &str) {
        if done.is_multiple_of(640) || done == total {
            eprintln!("{task}: {done}/{total} {unit}");
        }
    }
    #[cfg(feature = "couchbase")]
    fn open_corpus(
        &self,
        name: &str,
        shape: rag_core::corpus::Shape,
    ) -> Result<std::rc::Rc<dyn rag_core::corpus::Corpus>, ToolError> {
        match &self.cluster {
            Some(c) => c.open(name, shape).map_err(|e| {
                // The backend's own errors name the corpus already.
                let e = e.to_string();
                ToolError::Upstream(if e.starts_with(&format!("corpus {name}")) {
                    e
                } else {
                    format!("corpus {name}: {e}")
                })
            }),
            None => Err(ToolError::InvalidConfig(format!("corpus {name:?}: run with --couchbase to keep corpora"))),
        }
    }
}

impl Env for Native {
    fn stamp(&self, path: &str) -> Option<(u64, u128)> {
        let m = std::fs::metadata(path).ok()?;
        Some((m.len(), m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos()))
    }
}
