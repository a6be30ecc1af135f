//! The index of documents and chunks, and its file.
//!
//! A document is known by its source (a path or URL) and keyed by the sha256 of its bytes, the
//! embedding model's id and the chunking parameters: adding it again with the same key does
//! nothing; a new content, model or chunking replaces its chunks.
//!
//! File format, version [`FORMAT_VERSION`]: the magic `QUARRYIX`, the version (u32 LE), the
//! header length (u64 LE), the header (JSON: model, dimension, documents, chunks), the vectors
//! (f32 LE, one per chunk), then the sha256 of everything before it. [`Index::save`] writes a
//! temporary file beside the target and renames it into place, so a crash leaves the old index
//! or the new one, never half of one. [`Index::load`] checks every part and says what is wrong.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::bm25::Bm25;
use crate::vector::{DimensionMismatch, VectorIndex};

/// The first bytes of an index file.
pub const MAGIC: &[u8; 8] = b"QUARRYIX";
/// The version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Why an index could not be read, written or changed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing the file failed.
    #[error("index file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not an index this build can read: damaged, truncated, from another program
    /// or another format version. Delete it, or let the tool rebuild it.
    #[error("index file {path} is unusable ({reason}); it will be rebuilt")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file holds vectors of another model: they cannot be compared with this one's.
    #[error("index file {path} was built with model {found}, not {expected}; it will be rebuilt")]
    OtherModel {
        /// The file.
        path: PathBuf,
        /// The model it was built with.
        found: String,
        /// The model in use.
        expected: String,
    },
    /// A vector of the wrong length.
    #[error(transparent)]
    Dimension(#[from] DimensionMismatch),
    /// Chunks and vectors do not pair up.
    #[error("{chunks} chunks but {vectors} vectors")]
    Mismatch {
        /// Chunks given.
        chunks: usize,
        /// Vectors given.
        vectors: usize,
    },
}

/// One indexed document.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Document {
    /// sha256 of the document's bytes, hex.
    pub content_sha256: String,
    /// The chunking parameters' key ([`crate::chunk::Chunking::key`]).
    pub chunking: String,
    /// How many chunks it has.
    pub chunks: usize,
}

/// One chunk as stored.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StoredChunk {
    /// The document's source.
    pub source: String,
    /// Position among the document's chunks.
    pub index: usize,
    /// The chunk's text.
    pub text: String,
    /// What the component attaches (heading path, chapter id, ...).
    pub meta: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
struct Header {
    model: String,
    dimension: usize,
    documents: BTreeMap<String, Document>,
    chunks: Vec<StoredChunk>,
}

/// One search result.
#[derive(Clone, Debug, PartialEq)]
pub struct Found<'a> {
    /// The chunk.
    pub chunk: &'a StoredChunk,
    /// Its normalised score ([`crate::score`]).
    pub score: f32,
}

/// Documents, their chunks and the chunks' vectors, for one embedding model.
pub struct Index {
    model: String,
    documents: BTreeMap<String, Document>,
    chunks: Vec<StoredChunk>,
    vectors: VectorIndex,
    bm25: Option<Bm25>,
}

/// sha256 of a document's bytes, hex: the content part of its key.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("model", &self.model)
            .field("documents", &self.documents.len())
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl Index {
    /// An empty index for `model`'s `dimension`-dimensional vectors.
    pub fn new(model: &str, dimension: usize) -> Index {
        Index {
            model: model.to_string(),
            documents: BTreeMap::new(),
            chunks: Vec::new(),
            vectors: VectorIndex::new(dimension),
            bm25: None,
        }
    }

    /// The model whose vectors it holds.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The documents, by source.
    pub fn documents(&self) -> &BTreeMap<String, Document> {
        &self.documents
    }

    /// Every chunk.
    pub fn chunks(&self) -> &[StoredChunk] {
        &self.chunks
    }

    /// Whether `source` is indexed with this content and chunking: adding it again would change
    /// nothing. (The model is the index's own.)
    pub fn is_current(&self, source: &str, content_sha256: &str, chunking: &str) -> bool {
        self.documents.get(source).is_some_and(|d| d.content_sha256 == content_sha256 && d.chunking == chunking)
    }

    /// Sets `source`'s chunks and their vectors, replacing what it had. Checks everything
    /// before changing anything: on error the index is as it was.
    pub fn put(
        &mut self,
        source: &str,
        content_sha256: &str,
        chunking: &str,
        chunks: Vec<(String, serde_json::Value)>,
        vectors: &[Vec<f32>],
    ) -> Result<(), StoreError> {
        if chunks.len() != vectors.len() {
            return Err(StoreError::Mismatch { chunks: chunks.len(), vectors: vectors.len() });
        }
        let want = self.vectors.dimension();
        if let Some(v) = vectors.iter().find(|v| v.len() != want) {
            return Err(DimensionMismatch { want, got: v.len() }.into());
        }
        self.remove(source);
        for (i, ((text, meta), v)) in chunks.into_iter().zip(vectors).enumerate() {
            self.vectors.push(v)?;
            self.chunks.push(StoredChunk { source: source.to_string(), index: i, text, meta });
        }
        let count = vectors.len();
        self.documents.insert(
            source.to_string(),
            Document { content_sha256: content_sha256.to_string(), chunking: chunking.to_string(), chunks: count },
        );
        self.bm25 = None;
        Ok(())
    }

    /// Drops `source` and its chunks; false when it was not indexed.
    pub fn remove(&mut self, source: &str) -> bool {
        if self.documents.remove(source).is_none() {
            return false;
        }
        let keep: Vec<bool> = self.chunks.iter().map(|c| c.source != source).collect();
        self.vectors.retain(|i| keep[i]);
        self.chunks.retain(|c| c.source != source);
        self.bm25 = None;
        true
    }

    /// The `limit` chunks nearest to `query` (an embedding of the query) whose score is at least
    /// `threshold`, best first, among the chunks `allowed` (all when `None`).
    pub fn search(
        &mut self,
        query: &[f32],
        limit: usize,
        threshold: f32,
        allowed: Option<&dyn Fn(&StoredChunk) -> bool>,
    ) -> Result<Vec<Found<'_>>, StoreError> {
        let chunks = &self.chunks;
        let filter = allowed.map(|f| move |i: usize| f(&chunks[i]));
        let hits = self.vectors.search(query, limit, filter.as_ref().map(|f| f as &dyn Fn(usize) -> bool))?;
        Ok(hits
            .into_iter()
            .map(|(i, cos)| Found { chunk: &self.chunks[i], score: crate::score::from_cosine(cos) })
            .filter(|f| f.score >= threshold)
            .collect())
    }

    /// The vector of chunk `i` (a position in [`Index::chunks`]).
    pub fn vector(&self, i: usize) -> &[f32] {
        self.vectors.get(i)
    }

    /// The `k` chunks nearest to `query` among those `allowed` (by position), as (position,
    /// normalised score), best first, with no threshold: for fusing with other rankings.
    pub fn nearest(
        &mut self,
        query: &[f32],
        k: usize,
        allowed: Option<&dyn Fn(usize) -> bool>,
    ) -> Result<Vec<(usize, f32)>, StoreError> {
        Ok(self
            .vectors
            .search(query, k, allowed)?
            .into_iter()
            .map(|(i, cos)| (i, crate::score::from_cosine(cos)))
            .collect())
    }

    /// The `limit` best chunks for `query` by BM25, as (chunk position, BM25 score).
    pub fn keyword_search(
        &mut self,
        query: &str,
        limit: usize,
        allowed: Option<&dyn Fn(&StoredChunk) -> bool>,
    ) -> Vec<(usize, f32)> {
        let chunks = &self.chunks;
        let bm25 = self.bm25.get_or_insert_with(|| Bm25::build(chunks.iter().map(|c| c.text.as_str())));
        let filter = allowed.map(|f| move |i: usize| f(&chunks[i]));
        bm25.search(query, limit, filter.as_ref().map(|f| f as &dyn Fn(usize) -> bool))
    }

    /// Writes the index to `path` atomically (a temporary file, then a rename).
    pub fn save(&self, path: &Path) -> Result<(), StoreError> {
        let io = |source| StoreError::Io { path: path.to_path_buf(), source };
        let header = serde_json::to_vec(&Header {
            model: self.model.clone(),
            dimension: self.vectors.dimension(),
            documents: self.documents.clone(),
            chunks: self.chunks.clone(),
        })
        .map_err(|e| io(std::io::Error::other(e)))?;
        let mut bytes = Vec::with_capacity(header.len() + self.vectors.raw().len() * 4 + 64);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&header);
        for x in self.vectors.raw() {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "index".into());
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&bytes).and_then(|()| f.sync_all()).map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads the index at `path`, built for `model` with `dimension`-dimensional vectors.
    /// `Ok(None)` when there is no file yet.
    pub fn load(path: &Path, model: &str, dimension: usize) -> Result<Option<Index>, StoreError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { path: path.to_path_buf(), source }),
        };
        let corrupt = |reason: String| StoreError::Corrupt { path: path.to_path_buf(), reason };
        if bytes.len() < 20 + 32 || &bytes[..8] != MAGIC {
            return Err(corrupt("not a Quarry index file".into()));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != FORMAT_VERSION {
            return Err(corrupt(format!("format version {version}, this build reads {FORMAT_VERSION}")));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body).as_slice() != sum {
            return Err(corrupt("checksum mismatch (damaged or truncated)".into()));
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&bytes[12..20]);
        let header_len = usize::try_from(u64::from_le_bytes(len)).unwrap_or(usize::MAX);
        let header_end = 20usize.checked_add(header_len).filter(|&e| e <= body.len());
        let header_end = header_end.ok_or_else(|| corrupt("header length past the end".into()))?;
        let header: Header =
            serde_json::from_slice(&body[20..header_end]).map_err(|e| corrupt(format!("header: {e}")))?;
        if header.model != model {
            return Err(StoreError::OtherModel {
                path: path.to_path_buf(),
                found: header.model,
                expected: model.to_string(),
            });
        }
        if header.dimension != dimension {
            return Err(corrupt(format!("{}-dimensional vectors, the model makes {dimension}", header.dimension)));
        }
        let raw = &body[header_end..];
        if Some(raw.len()) != header.chunks.len().checked_mul(dimension).and_then(|n| n.checked_mul(4)) {
            return Err(corrupt(format!("{} bytes of vectors for {} chunks", raw.len(), header.chunks.len())));
        }
        let counted: usize = header.documents.values().map(|d| d.chunks).sum();
        if counted != header.chunks.len() {
            return Err(corrupt(format!("documents list {counted} chunks, the file has {}", header.chunks.len())));
        }
        let mut vectors = VectorIndex::new(dimension);
        let floats: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        for v in floats.chunks_exact(dimension.max(1)) {
            vectors.push(v)?;
        }
        Ok(Some(Index { model: header.model, documents: header.documents, chunks: header.chunks, vectors, bm25: None }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn unit(x: f32, y: f32) -> Vec<f32> {
        let n = (x * x + y * y).sqrt();
        vec![x / n, y / n]
    }

    fn sample() -> Index {
        let mut ix = Index::new("test-model", 2);
        let chunks = vec![("east".to_string(), json!({"h": ["A"]})), ("north".to_string(), json!({"h": ["B"]}))];
        ix.put("a.docx", "h1", "chars:2500/250", chunks, &[unit(1.0, 0.0), unit(0.0, 1.0)]).unwrap();
        ix.put("b.docx", "h2", "chars:2500/250", vec![("north east".into(), json!({}))], &[unit(1.0, 1.0)]).unwrap();
        ix
    }

    #[test]
    fn search_scores_and_thresholds() {
        let mut ix = sample();
        let found = ix.search(&unit(1.0, 0.1), 3, 0.0, None).unwrap();
        assert_eq!(found[0].chunk.text, "east");
        assert_eq!(found[1].chunk.text, "north east");
        assert!(found[0].score > found[1].score && found[1].score > found[2].score);
        // cos(east, north) ≈ 0.1 → score ≈ 0.55, under the default 0.6.
        let kept = ix.search(&unit(1.0, 0.1), 3, 0.6, None).unwrap();
        assert_eq!(kept.len(), 2);
        let only_b = |c: &StoredChunk| c.source == "b.docx";
        assert_eq!(ix.search(&unit(1.0, 0.0), 3, 0.0, Some(&only_b)).unwrap().len(), 1);
        assert_eq!(ix.keyword_search("north", 5, None).len(), 2);
    }

    #[test]
    fn put_replaces_and_refuses_bad_input_without_change() {
        let mut ix = sample();
        assert!(ix.is_current("a.docx", "h1", "chars:2500/250"));
        assert!(!ix.is_current("a.docx", "h1", "tokens:248/24"));
        assert!(!ix.is_current("a.docx", "changed", "chars:2500/250"));
        // Wrong dimension, mismatched counts: refused, index unchanged.
        assert!(ix.put("a.docx", "h3", "c", vec![("x".into(), json!({}))], &[vec![1.0, 0.0, 0.0]]).is_err());
        assert!(ix.put("a.docx", "h3", "c", vec![], &[unit(1.0, 0.0)]).is_err());
        assert_eq!(ix.chunks().len(), 3);
        assert!(ix.is_current("a.docx", "h1", "chars:2500/250"));
        // Replace a.docx with one chunk.
        ix.put("a.docx", "h3", "c", vec![("west".into(), json!({}))], &[unit(-1.0, 0.0)]).unwrap();
        assert_eq!(ix.chunks().len(), 2);
        assert_eq!(ix.search(&unit(-1.0, 0.0), 1, 0.0, None).unwrap()[0].chunk.text, "west");
        assert!(ix.remove("b.docx"));
        assert!(!ix.remove("b.docx"));
        assert_eq!(ix.chunks().len(), 1);
    }

    #[test]
    fn round_trip_and_atomic_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docs.qix");
        assert!(Index::load(&path, "test-model", 2).unwrap().is_none());
        sample().save(&path).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["docs.qix"], "no temporary file is left behind");
        let mut back = Index::load(&path, "test-model", 2).unwrap().unwrap();
        assert_eq!(back.documents(), sample().documents());
        assert_eq!(back.chunks(), sample().chunks());
        assert_eq!(back.search(&unit(0.0, 1.0), 1, 0.0, None).unwrap()[0].chunk.text, "north");
    }

    #[test]
    fn damaged_foreign_and_other_model_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docs.qix");
        sample().save(&path).unwrap();
        let good = std::fs::read(&path).unwrap();

        let other = Index::load(&path, "another-model", 2).unwrap_err();
        assert!(matches!(other, StoreError::OtherModel { .. }), "{other}");
        assert!(other.to_string().contains("built with model test-model, not another-model"));

        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("truncated", good[..good.len() / 2].to_vec(), "checksum"),
            (
                "flipped",
                {
                    let mut b = good.clone();
                    b[30] ^= 1;
                    b
                },
                "checksum",
            ),
            (
                "foreign",
                b"PK\x03\x04 this is a zip, not an index........................".to_vec(),
                "not a Quarry index",
            ),
            ("empty", Vec::new(), "not a Quarry index"),
            (
                "version",
                {
                    let mut b = good.clone();
                    b[8] = 9;
                    b
                },
                "format version 9",
            ),
        ];
        for (name, bytes, want) in cases {
            std::fs::write(&path, bytes).unwrap();
            let e = Index::load(&path, "test-model", 2).unwrap_err();
            assert!(matches!(e, StoreError::Corrupt { .. }), "{name}: {e}");
            assert!(e.to_string().contains(want), "{name}: {e}");
            assert!(e.to_string().contains("docs.qix"), "{name}: {e}");
        }
    }
}
