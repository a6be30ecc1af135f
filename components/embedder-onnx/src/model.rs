//! A model directory's tokenizer and manifest, and what an embedding is made of around the
//! graph: prefix, tokenise (truncating at the window), run the graph ([`Inference`]), mean-pool,
//! L2-normalise. The graph itself runs wherever the [`Inference`] runs it: in the host through
//! `wasi:nn` for the component, or natively for `make eval`.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

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
pub const FETCH: &str = "make models (components/embedder-onnx/models/fetch.sh)";

/// Whether a text is a query or a document.
#[derive(Clone, Copy)]
pub enum Kind {
    /// Gets the model's query prefix.
    Query,
    /// Gets the model's passage prefix.
    Document,
}

/// Runs the model's graph: what the host does through `wasi:nn`, or a native runner.
pub trait Inference {
    /// The graph's last hidden state for one text's token ids: `ids.len()` rows of
    /// `dimension` floats, row after row. The graph takes `input_ids`, `attention_mask` (all
    /// ones: no padding) and `token_type_ids` (all zeros), each of shape `[1, ids.len()]`.
    fn hidden_state(&self, ids: &[i64]) -> Result<Vec<f32>, EmbedError>;
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

/// A loaded model, over the runner `G` of its graph.
pub struct Model<G> {
    manifest: Manifest,
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation, for counting.
    counter: Tokenizer,
    graph: G,
}

/// The output the hidden state is read from (else the graph's first output).
pub const HIDDEN_STATE: &str = "last_hidden_state";

/// The graph's inputs for one text's token ids, by name, as little-endian `i64` data of shape
/// `[1, ids.len()]` (see [`Inference::hidden_state`]).
pub fn graph_inputs(ids: &[i64]) -> [(&'static str, Vec<u8>); 3] {
    let le = |it: &mut dyn Iterator<Item = i64>| it.flat_map(i64::to_le_bytes).collect::<Vec<u8>>();
    [
        ("input_ids", le(&mut ids.iter().copied())),
        ("attention_mask", le(&mut std::iter::repeat_n(1, ids.len()))),
        ("token_type_ids", le(&mut std::iter::repeat_n(0, ids.len()))),
    ]
}

/// Little-endian `f32` data as floats.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn unavailable(msg: String) -> EmbedError {
    EmbedError::Unavailable(msg)
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|e| {
        unavailable(format!(
            "cannot read model file {}: {e}; fetch the models with `{FETCH}` and grant the model to this embedder (`models = [\"NAME\"]`)",
            path.display()
        ))
    })
}

impl<G: Inference> Model<G> {
    /// Reads the manifest and the tokenizer of model directory `dir` (checking the tokenizer's
    /// sha256 when `verify`), over `graph`, which runs the directory's `model.onnx`.
    pub fn open(dir: &Path, verify: bool, graph: G) -> Result<Model<G>, EmbedError> {
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
        let path = dir.join("tokenizer.json");
        let bytes = read(&path)?;
        if verify {
            let want = manifest.sha256.get("tokenizer.json").ok_or_else(|| {
                unavailable(format!(
                    "{} lists no checksum for tokenizer.json; refetch with `{FETCH}`",
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
        let mut tokenizer =
            Tokenizer::from_bytes(&bytes).map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        // The packaged tokenizer files pad to and truncate at 128; the model's window is the manifest's.
        tokenizer.with_padding(None);
        let mut counter = tokenizer.clone();
        counter.with_truncation(None).map_err(|e| unavailable(format!("tokenizer truncation: {e}")))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: manifest.max_tokens as usize, ..Default::default() }))
            .map_err(|e| unavailable(format!("tokenizer truncation: {e}")))?;
        Ok(Model { manifest, tokenizer, counter, graph })
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

    /// Tokens `text` takes in the window, without special tokens or prefix and without truncation.
    pub fn count_tokens(&self, text: &str) -> Result<u32, EmbedError> {
        let enc = self
            .counter
            .encode(text, false)
            .map_err(|e| EmbedError::InvalidInput(format!("cannot tokenise the text: {e}")))?;
        Ok(u32::try_from(enc.get_ids().len()).unwrap_or(u32::MAX))
    }

    /// Byte spans in `text` of the tokens [`Model::count_tokens`] counts, in order.
    pub fn token_spans(&self, text: &str) -> Result<Vec<(u32, u32)>, EmbedError> {
        let enc = self
            .counter
            .encode(text, false)
            .map_err(|e| EmbedError::InvalidInput(format!("cannot tokenise the text: {e}")))?;
        let at = |o: usize| u32::try_from(o).unwrap_or(u32::MAX);
        Ok(enc.get_offsets().iter().map(|&(s, e)| (at(s), at(e))).collect())
    }

    /// Embeds one text: prefix, tokenise (truncating at the window), run, mean-pool, normalise.
    pub fn embed(&self, text: &str, kind: Kind) -> Result<Embedding, EmbedError> {
        let (ids, truncated) = self.encode(text, kind)?;
        let n = ids.len();
        let dim = self.manifest.dimension as usize;
        let hidden = self.graph.hidden_state(&ids)?;
        if hidden.len() != n * dim {
            return Err(EmbedError::Internal(format!(
                "the model's hidden state has {} floats, expected {n} tokens of {dim}",
                hidden.len()
            )));
        }
        let mut v = vec![0f32; dim];
        for row in hidden.chunks_exact(dim) {
            for (x, h) in v.iter_mut().zip(row) {
                *x += h;
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.iter_mut().for_each(|x| *x /= norm);
        Ok(Embedding { vector: v, truncated })
    }
}
