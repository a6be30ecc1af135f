//! Loading a model directory and embedding one text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::dims;

/// Why loading or embedding failed (mirrors WIT `embed-error`).
#[derive(Debug)]
pub enum EmbedError {
    /// The input or the config cannot be used.
    InvalidInput(String),
    /// The model is missing, corrupt or not loaded.
    Unavailable(String),
    /// A bug.
    Internal(String),
}

/// The model's identity (mirrors WIT `model-info`).
pub struct ModelInfo {
    /// Model id from the manifest.
    pub id: String,
    /// Vector length.
    pub dimension: u32,
    /// Window, in tokens.
    pub max_tokens: u32,
}

/// One embedded text (mirrors WIT `embedding`).
pub struct Embedding {
    /// L2-normalised.
    pub vector: Vec<f32>,
    /// The text was longer than the window.
    pub truncated: bool,
}

/// The command that fetches and converts models; named in every missing-file error.
const FETCH: &str = "make models (components/embedder-onnx/models/fetch.sh)";

/// Whether a text is a query or a document.
#[derive(Clone, Copy)]
pub enum Kind {
    /// Gets the model's query prefix.
    Query,
    /// Gets the model's passage prefix.
    Document,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    model_dir: PathBuf,
    #[serde(default = "yes")]
    verify: bool,
}

fn yes() -> bool {
    true
}

/// `quarry-model.json`.
#[derive(Deserialize)]
struct Manifest {
    id: String,
    dimension: u32,
    max_tokens: u32,
    pooling: String,
    normalize: bool,
    #[serde(default)]
    query_prefix: String,
    #[serde(default)]
    passage_prefix: String,
    sha256: std::collections::BTreeMap<String, String>,
}

/// A loaded model.
pub struct Model {
    manifest: Manifest,
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation, for counting.
    counter: Tokenizer,
    plan: Arc<TypedRunnableModel>,
}

fn internal(e: TractError) -> EmbedError {
    EmbedError::Internal(format!("inference failed: {e:#}"))
}

fn unavailable(msg: String) -> EmbedError {
    EmbedError::Unavailable(msg)
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|e| {
        unavailable(format!("cannot read model file {}: {e}; fetch the models with `{FETCH}` and grant their directory to this embedder", path.display()))
    })
}

impl Model {
    /// Reads, verifies and prepares the model named by `config` (JSON).
    pub fn load(config: &str) -> Result<Model, EmbedError> {
        // (The component and the native bench share this code.)
        let cfg: Config = serde_json::from_str(config).map_err(|e| {
            EmbedError::InvalidInput(format!(
                "embedder config: {e}; expected {{\"model_dir\": \"/models/NAME\", \"verify\": true}}"
            ))
        })?;
        let dir = &cfg.model_dir;
        let manifest_path = dir.join("quarry-model.json");
        let manifest: Manifest = serde_json::from_slice(&read(&manifest_path)?).map_err(|e| {
            unavailable(format!("{} is not a model manifest: {e}; refetch with `{FETCH}`", manifest_path.display()))
        })?;
        if manifest.pooling != "mean" || !manifest.normalize {
            return Err(unavailable(format!(
                "{}: only mean pooling with L2 normalisation is supported",
                manifest_path.display()
            )));
        }
        let mut files = std::collections::BTreeMap::new();
        for name in ["model.onnx", "tokenizer.json"] {
            let path = dir.join(name);
            let bytes = read(&path)?;
            if cfg.verify {
                let want = manifest.sha256.get(name).ok_or_else(|| {
                    unavailable(format!(
                        "{} lists no checksum for {name}; refetch with `{FETCH}`",
                        manifest_path.display()
                    ))
                })?;
                let got = hex::encode(Sha256::digest(&bytes));
                if &got != want {
                    return Err(unavailable(format!(
                        "model file {} is corrupt (sha256 {got}, expected {want}); delete {} and run `{FETCH}`",
                        path.display(),
                        dir.display()
                    )));
                }
            }
            files.insert(name, bytes);
        }

        let mut tokenizer = Tokenizer::from_bytes(&files["tokenizer.json"])
            .map_err(|e| unavailable(format!("{}: {e}", dir.join("tokenizer.json").display())))?;
        // The packaged tokenizer files pad to and truncate at 128; the model's window is the manifest's.
        tokenizer.with_padding(None);
        let mut counter = tokenizer.clone();
        counter.with_truncation(None).map_err(|e| unavailable(format!("tokenizer truncation: {e}")))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: manifest.max_tokens as usize, ..Default::default() }))
            .map_err(|e| unavailable(format!("tokenizer truncation: {e}")))?;

        let bad_model = |e: TractError| unavailable(format!("{}: {e:#}", dir.join("model.onnx").display()));
        // The shapes an exporter recorded (symbolic `batch`) would pin our facts;
        // tract infers them again from the inputs.
        let model = tract_onnx::onnx()
            .with_ignore_output_shapes(true)
            .with_ignore_value_info(true)
            .model_for_read(&mut files["model.onnx"].as_slice())
            .map_err(bad_model)?;
        // Each run is one text: batch 1 (a constant lets tract specialise every
        // kernel), no padding, any length up to the window.
        let seq = model.sym("S");
        let fact = || -> InferenceFact { i64::fact(dims!(1, seq.clone())).into() };
        let plan = model
            .with_input_fact(0, fact())
            .and_then(|m| m.with_input_fact(1, fact()))
            .and_then(|m| m.with_input_fact(2, fact()))
            .and_then(|m| m.into_optimized())
            .and_then(|m| m.into_runnable())
            .map_err(bad_model)?;
        Ok(Model { manifest, tokenizer, counter, plan })
    }

    /// The model's identity.
    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            id: self.manifest.id.clone(),
            dimension: self.manifest.dimension,
            max_tokens: self.manifest.max_tokens,
        }
    }

    /// Prefixes and tokenises a text, truncating at the window: the token ids and whether
    /// anything was cut.
    fn encode(&self, text: &str, kind: Kind) -> Result<(Vec<i64>, bool), EmbedError> {
        let prefix = match kind {
            Kind::Query => &self.manifest.query_prefix,
            Kind::Document => &self.manifest.passage_prefix,
        };
        let input = format!("{prefix}{text}");
        let enc = self
            .tokenizer
            .encode(input.as_str(), true)
            .map_err(|e| EmbedError::InvalidInput(format!("cannot tokenise the text: {e}")))?;
        let truncated = !enc.get_overflowing().is_empty();
        Ok((enc.get_ids().iter().map(|&i| i64::from(i)).collect(), truncated))
    }

    /// The model's three inputs for one text's token ids.
    fn inputs(ids: Vec<i64>) -> Result<TVec<TValue>, EmbedError> {
        let n = ids.len();
        let tensor = |v: Vec<i64>| Tensor::from_shape(&[1, n], &v).map_err(internal);
        Ok(tvec!(tensor(ids)?.into(), tensor(vec![1; n])?.into(), tensor(vec![0; n])?.into()))
    }

    /// Time spent per kind of operator over `runs` runs on `text`, largest first: where
    /// inference time goes, natively or inside the sandbox (the `profile` example prints it).
    pub fn profile(&self, text: &str, runs: usize) -> Result<Vec<(String, std::time::Duration)>, EmbedError> {
        let (ids, _) = self.encode(text, Kind::Document)?;
        let mut spent = std::collections::BTreeMap::<String, std::time::Duration>::new();
        let mut state = TypedSimpleState::new(&self.plan).map_err(internal)?;
        for _ in 0..runs {
            state
                .run_plan_with_eval(Self::inputs(ids.clone())?, |ctx, op_state, node, input| {
                    let t = std::time::Instant::now();
                    let out = tract_onnx::tract_core::plan::eval(ctx, op_state, node, input);
                    *spent.entry(node.op().name().to_string()).or_default() += t.elapsed();
                    out
                })
                .map_err(internal)?;
        }
        let mut spent: Vec<_> = spent.into_iter().collect();
        spent.sort_by_key(|e| std::cmp::Reverse(e.1));
        Ok(spent)
    }

    /// Tokens `text` takes in the window, without special tokens or prefix and without truncation.
    pub fn count_tokens(&self, text: &str) -> Result<u32, EmbedError> {
        let enc = self
            .counter
            .encode(text, false)
            .map_err(|e| EmbedError::InvalidInput(format!("cannot tokenise the text: {e}")))?;
        Ok(u32::try_from(enc.get_ids().len()).unwrap_or(u32::MAX))
    }

    /// Embeds one text: prefix, tokenise (truncating at the window), run, mean-pool, normalise.
    pub fn embed(&self, text: &str, kind: Kind) -> Result<Embedding, EmbedError> {
        let (ids, truncated) = self.encode(text, kind)?;
        let n = ids.len();
        let outputs = self.plan.run(Self::inputs(ids)?).map_err(internal)?;
        let hidden = outputs[0].to_plain_array_view::<f32>().map_err(internal)?;
        let dim = self.manifest.dimension as usize;
        if hidden.shape() != [1, n, dim] {
            return Err(EmbedError::Internal(format!(
                "model output has shape {:?}, expected [1, {n}, {dim}]",
                hidden.shape()
            )));
        }
        let mut v = vec![0f32; dim];
        for t in 0..n {
            for (j, x) in v.iter_mut().enumerate() {
                *x += hidden[[0, t, j]];
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.iter_mut().for_each(|x| *x /= norm);
        Ok(Embedding { vector: v, truncated })
    }
}
