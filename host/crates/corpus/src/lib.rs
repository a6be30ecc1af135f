//! The local corpus backend: a named set of chunks (id, text, vector, metadata, filter fields)
//! kept by the host in a directory, in generations.
//!
//! - **Generations.** A commit applies a batch of upserts and removals to the latest committed
//!   generation and writes the result as the next one ([`file`]: checksummed, written to a
//!   temporary file, synced, renamed into place, the directory synced). Readers hold a
//!   [`Generation`] (an `Arc`): they see the one they took until they take another, so a commit
//!   never shows half of itself.
//! - **Crash-safe.** Opening takes the newest generation file that checks out; a truncated or
//!   damaged newer one is skipped, and said so ([`LocalCorpus::warnings`]). The previous
//!   generation is kept beside the newest for that. A commit that fails (a full disk, a quota)
//!   changes nothing: the last committed generation keeps serving.
//! - **Writers do not lose each other's work.** A commit holds an exclusive `flock` on the
//!   directory's lock file, reads the newest generation on disk (another process may have
//!   committed since this one opened) and applies its batch to that.
//! - **Shape.** A corpus has a vector dimension and a metric, stored with it; opening it with
//!   another is refused ([`CorpusError::Shape`]).
//!
//! kNN and BM25 are rag-core's (exact scans up to its limit, an HNSW graph above; the tools'
//! tokenising), built once per generation and shared by every reader.

mod file;
mod generation;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

pub use file::StoredChunk;
pub use generation::{Filter, Generation, Hit};

/// How vectors are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Cosine similarity: vectors are normalised when stored and queries when asked.
    Cosine,
    /// The dot product of the vectors as given.
    Dot,
}

/// The most floats a vector may have (OpenAI's largest embeddings have 3,072).
pub const MAX_DIMENSION: usize = 16_384;

/// What a corpus's vectors are: their dimension and how they are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Floats per vector.
    pub dimension: usize,
    /// How they are compared.
    pub metric: Metric,
}

/// One chunk as a writer gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Unique within the corpus; an upsert of a known id replaces that chunk.
    pub id: String,
    /// The text (searched by BM25, returned with hits).
    pub text: String,
    /// Its embedding, of the corpus's dimension.
    pub vector: Vec<f32>,
    /// JSON the writer keeps with it, returned as it was given.
    pub metadata: String,
    /// Fields a search may filter on (a chapter id, a document, a path).
    pub fields: std::collections::BTreeMap<String, String>,
}

/// A change in a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Adds the chunk, or replaces the one with its id.
    Upsert(Chunk),
    /// Removes the chunk with this id (nothing if there is none).
    Remove(String),
}

/// Why a corpus could not be opened or changed.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The file system failed (a full disk, a quota, permissions).
    #[error("corpus {dir}: {source}")]
    Io {
        /// The corpus's directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The stored corpus has another dimension or metric than the one asked for.
    #[error(
        "corpus {dir} holds {stored_dimension}-dimensional vectors compared by {stored_metric:?}, not {dimension}-dimensional by {metric:?}; use another corpus, or empty this one to rebuild it"
    )]
    Shape {
        /// The corpus's directory.
        dir: PathBuf,
        /// What it holds.
        stored_dimension: usize,
        /// How it compares them.
        stored_metric: Metric,
        /// What was asked for.
        dimension: usize,
        /// How the caller compares them.
        metric: Metric,
    },
    /// A corpus was asked for with a dimension no vector can have.
    #[error("a corpus holds vectors of 1 to {MAX_DIMENSION} dimensions, not {asked}")]
    Dimensions {
        /// The dimension asked for.
        asked: usize,
    },
    /// A chunk's vector has another dimension than the corpus's.
    #[error("chunk {id:?} has a {got}-dimensional vector; the corpus holds {want}-dimensional ones")]
    Dimension {
        /// The chunk.
        id: String,
        /// The corpus's dimension.
        want: usize,
        /// The vector's.
        got: usize,
    },
    /// A query vector has another dimension than the corpus's.
    #[error("the query vector has {got} dimensions; the corpus holds {want}-dimensional vectors")]
    Query {
        /// The corpus's dimension.
        want: usize,
        /// The query's.
        got: usize,
    },
}

/// A corpus in a directory, opened by this process; see the crate docs.
pub struct LocalCorpus {
    dir: PathBuf,
    shape: Shape,
    current: RwLock<Arc<Generation>>,
    warnings: Vec<String>,
}

impl LocalCorpus {
    /// Opens (creating it if needed) the corpus in `dir` for vectors of `shape`: the newest
    /// generation on disk that checks out, or an empty one.
    pub fn open(dir: &Path, shape: Shape) -> Result<LocalCorpus, CorpusError> {
        if !(1..=MAX_DIMENSION).contains(&shape.dimension) {
            return Err(CorpusError::Dimensions { asked: shape.dimension });
        }
        std::fs::create_dir_all(dir).map_err(|source| CorpusError::Io { dir: dir.to_path_buf(), source })?;
        let (latest, warnings) = file::latest(dir)?;
        let generation = match latest {
            Some(stored) => {
                if stored.shape != shape {
                    return Err(CorpusError::Shape {
                        dir: dir.to_path_buf(),
                        stored_dimension: stored.shape.dimension,
                        stored_metric: stored.shape.metric,
                        dimension: shape.dimension,
                        metric: shape.metric,
                    });
                }
                Generation::build(stored)
            }
            None => Generation::empty(shape),
        };
        Ok(LocalCorpus { dir: dir.to_path_buf(), shape, current: RwLock::new(Arc::new(generation)), warnings })
    }

    /// The generation readers see now; it stays whole while held, whatever is committed after.
    pub fn snapshot(&self) -> Arc<Generation> {
        self.current.read().clone()
    }

    /// What opening skipped (generation files that did not check out), for the log.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Applies `changes` to the newest committed generation (this process's or another's) and
    /// commits the result as the next generation; returns its number. On an error nothing is
    /// committed and readers keep the generation they had.
    pub fn commit(&self, changes: Vec<Change>) -> Result<u64, CorpusError> {
        for c in &changes {
            if let Change::Upsert(chunk) = c
                && chunk.vector.len() != self.shape.dimension
            {
                return Err(CorpusError::Dimension {
                    id: chunk.id.clone(),
                    want: self.shape.dimension,
                    got: chunk.vector.len(),
                });
            }
        }
        let _lock = file::WriteLock::take(&self.dir)?;
        // Another process may have committed since: its generation is the base.
        let mine = self.snapshot();
        let newer = file::numbers(&self.dir)?.first().is_some_and(|&n| n > mine.number());
        let theirs = newer.then(|| file::latest(&self.dir)).transpose()?.and_then(|(s, _)| s);
        let base = theirs.as_ref().filter(|s| s.number > mine.number()).unwrap_or(mine.stored());
        let next = generation::apply(base, changes);
        file::write(&self.dir, &next)?;
        let number = next.number;
        *self.current.write() = Arc::new(Generation::build(next));
        Ok(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape { dimension: 3, metric: Metric::Cosine };

    fn chunk(id: &str, text: &str, v: [f32; 3], chapter: &str) -> Change {
        Change::Upsert(Chunk {
            id: id.into(),
            text: text.into(),
            vector: v.to_vec(),
            metadata: format!("{{\"id\":\"{id}\"}}"),
            fields: [("chapter".to_string(), chapter.to_string())].into(),
        })
    }

    fn ids(hits: &[Hit<'_>]) -> Vec<String> {
        hits.iter().map(|h| h.chunk.id.clone()).collect()
    }

    /// A commit is seen by new snapshots and after reopening; a snapshot taken before it stays
    /// as it was; upserts replace by id and removals remove.
    #[test]
    fn commits_are_whole_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert_eq!((corpus.snapshot().number(), corpus.snapshot().len()), (0, 0));
        let n = corpus
            .commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1"), chunk("b", "beta", [0.0, 1.0, 0.0], "2")])
            .unwrap();
        assert_eq!(n, 1);
        let before = corpus.snapshot();
        corpus.commit(vec![chunk("a", "alpha two", [0.0, 0.0, 2.0], "1"), Change::Remove("b".into())]).unwrap();
        assert_eq!(before.len(), 2);
        assert_eq!(before.get(&["a"])[0].unwrap().text, "alpha");
        let now = corpus.snapshot();
        assert_eq!((now.number(), now.len()), (2, 1));
        assert_eq!(
            now.get(&["a", "b"]).iter().map(|c| c.map(|c| c.text.as_str())).collect::<Vec<_>>(),
            [Some("alpha two"), None]
        );
        drop(corpus);
        let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert!(reopened.warnings().is_empty(), "{:?}", reopened.warnings());
        let g = reopened.snapshot();
        assert_eq!((g.number(), g.len()), (2, 1));
        // Stored normalised (cosine): the nearest of a scaled query scores 1.
        let hit = g.nearest(&[0.0, 0.0, 5.0], 1, &Filter::default()).unwrap();
        assert_eq!(ids(&hit), ["a"]);
        assert!((hit[0].score - 1.0).abs() < 1e-5, "{}", hit[0].score);
    }

    /// Two writers of one corpus (as two processes would be: each its own handle, opened before
    /// the other committed) keep each other's chunks: twelve of twelve, not six.
    #[test]
    fn writers_do_not_lose_each_others_work() {
        let dir = tempfile::tempdir().unwrap();
        let a = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        let b = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        std::thread::scope(|s| {
            for (w, name) in [(&a, "a"), (&b, "b")] {
                s.spawn(move || {
                    for i in 0..6 {
                        w.commit(vec![chunk(&format!("{name}{i}"), "text", [1.0, i as f32, 0.0], name)]).unwrap();
                    }
                });
            }
        });
        let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap().snapshot();
        assert_eq!((reopened.number(), reopened.len()), (12, 12));
        // Only the last generation and the one before it stay on disk.
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".qcorpus"))
            .count();
        assert_eq!(files, 2);
    }

    /// A newest generation that is truncated or has a flipped byte is skipped, said so, and the
    /// one before it served: never a partial one.
    #[test]
    fn a_damaged_generation_falls_back_to_the_one_before() {
        for damage in ["truncate", "flip"] {
            let dir = tempfile::tempdir().unwrap();
            let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
            corpus.commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1")]).unwrap();
            corpus.commit(vec![chunk("b", "beta", [0.0, 1.0, 0.0], "1")]).unwrap();
            let newest = dir.path().join("gen-00000000000000000002.qcorpus");
            let mut bytes = std::fs::read(&newest).unwrap();
            match damage {
                "truncate" => bytes.truncate(bytes.len() / 2),
                _ => {
                    let mid = bytes.len() / 2;
                    bytes[mid] ^= 1;
                }
            }
            std::fs::write(&newest, bytes).unwrap();
            let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap();
            let g = reopened.snapshot();
            assert_eq!((g.number(), g.len()), (1, 1), "{damage}");
            assert!(reopened.warnings()[0].contains("checksum mismatch"), "{damage}: {:?}", reopened.warnings());
            // The next commit builds on what is served and replaces the damaged file.
            assert_eq!(reopened.commit(vec![chunk("c", "gamma", [0.0, 0.0, 1.0], "2")]).unwrap(), 2);
            assert_eq!(LocalCorpus::open(dir.path(), SHAPE).unwrap().snapshot().len(), 2);
        }
    }

    /// Another dimension or metric than the stored one is refused, and so are vectors of another
    /// dimension, clearly; nothing is committed.
    #[test]
    fn shapes_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        corpus.commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1")]).unwrap();
        let e = LocalCorpus::open(dir.path(), Shape { dimension: 4, metric: Metric::Cosine }).err().unwrap();
        assert!(e.to_string().contains("holds 3-dimensional vectors compared by Cosine, not 4-dimensional"), "{e}");
        assert!(LocalCorpus::open(dir.path(), Shape { dimension: 3, metric: Metric::Dot }).is_err());
        let bad = Change::Upsert(Chunk {
            id: "x".into(),
            text: String::new(),
            vector: vec![1.0],
            metadata: "{}".into(),
            fields: Default::default(),
        });
        let e = corpus.commit(vec![bad]).unwrap_err();
        assert!(e.to_string().contains("chunk \"x\" has a 1-dimensional vector"), "{e}");
        assert_eq!(corpus.snapshot().number(), 1);
        let e = LocalCorpus::open(dir.path(), Shape { dimension: 0, metric: Metric::Cosine }).err().unwrap();
        assert!(e.to_string().contains("1 to 16384 dimensions, not 0"), "{e}");
        let e = corpus.snapshot().nearest(&[1.0, 0.0], 1, &Filter::default()).unwrap_err();
        assert!(e.to_string().contains("query vector has 2 dimensions"), "{e}");
    }

    /// kNN and BM25 with the same filter: exact values and prefixes of the filter fields.
    #[test]
    fn searches_honour_filters() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        corpus
            .commit(vec![
                chunk("a", "bandwidth limits by timetable", [1.0, 0.0, 0.0], "90.10"),
                chunk("b", "bandwidth of the connection", [0.9, 0.1, 0.0], "90.11"),
                chunk("c", "checksums and hashes", [0.0, 1.0, 0.0], "12.1"),
            ])
            .unwrap();
        let g = corpus.snapshot();
        let all = Filter::default();
        assert_eq!(ids(&g.nearest(&[1.0, 0.0, 0.0], 2, &all).unwrap()), ["a", "b"]);
        let in_b = Filter { equals: vec![("chapter".into(), "90.11".into())], prefixes: vec![] };
        assert_eq!(ids(&g.nearest(&[1.0, 0.0, 0.0], 3, &in_b).unwrap()), ["b"]);
        let under_12 = Filter { equals: vec![], prefixes: vec![("chapter".into(), "12.".into())] };
        assert_eq!(ids(&g.nearest(&[1.0, 0.0, 0.0], 3, &under_12).unwrap()), ["c"]);
        assert_eq!(ids(&g.keyword("bandwidth timetable", 3, &all)), ["a", "b"]);
        let under_90 = Filter { equals: vec![], prefixes: vec![("chapter".into(), "90.11".into())] };
        assert_eq!(ids(&g.keyword("bandwidth", 3, &under_90)), ["b"]);
        assert!(g.keyword("bandwidth", 3, &under_12).is_empty());
        let missing = Filter { equals: vec![("document".into(), "x".into())], prefixes: vec![] };
        assert!(g.nearest(&[1.0, 0.0, 0.0], 3, &missing).unwrap().is_empty());
    }
}
