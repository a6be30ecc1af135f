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
//! A generation in memory is rag-core's [`Collection`]: the kNN (exact scans up to its limit, an
//! HNSW graph above) and BM25 (the tools' tokenising) that a tool keeping its own corpus runs too,
//! built once per generation and shared by every reader.

pub mod config;
#[cfg(feature = "couchbase")]
pub mod couchbase;
mod file;
pub mod host;
pub mod progress;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

pub use file::LeaseFile;
pub use rag_core::corpus::{
    Change, Clause, Collection, Entry, Fields, Filter, Found, Info, MAX_DIMENSION, Match, Metric, Record, Shape,
};

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
    /// A batch the corpus cannot take (a vector of another dimension).
    #[error(transparent)]
    Batch(#[from] rag_core::corpus::CorpusError),
    /// The commit would make the corpus larger than it may be.
    #[error(
        "corpus {dir} would hold {bytes} bytes after this commit, over its limit of {limit}; raise max_bytes in its [corpora.NAME] section, or remove chunks"
    )]
    Full {
        /// The corpus's directory.
        dir: PathBuf,
        /// What it would hold.
        bytes: u64,
        /// Its limit.
        limit: u64,
    },
}

/// A corpus in a directory, opened by this process; see the crate docs.
pub struct LocalCorpus {
    dir: PathBuf,
    shape: Shape,
    max_bytes: u64,
    current: RwLock<Arc<Collection>>,
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
                if stored.shape() != shape {
                    return Err(CorpusError::Shape {
                        dir: dir.to_path_buf(),
                        stored_dimension: stored.shape().dimension,
                        stored_metric: stored.shape().metric,
                        dimension: shape.dimension,
                        metric: shape.metric,
                    });
                }
                stored
            }
            None => Collection::empty(shape),
        };
        generation.prepare();
        Ok(LocalCorpus {
            dir: dir.to_path_buf(),
            shape,
            max_bytes: u64::MAX,
            current: RwLock::new(Arc::new(generation)),
            warnings,
        })
    }

    /// Refuses commits that would make the corpus hold more than `bytes`
    /// ([`Collection::bytes`]).
    pub fn with_max_bytes(mut self, bytes: u64) -> LocalCorpus {
        self.max_bytes = bytes;
        self
    }

    /// The generation readers see now; it stays whole while held, whatever is committed after.
    pub fn snapshot(&self) -> Arc<Collection> {
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

    /// Its vectors' shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Takes up the newest generation on disk when another process has committed one since this
    /// handle last looked: a writer does, under the lease, so that what it reads before writing
    /// (the notes, whether a build is there) is current. Returns the generation now served.
    pub fn refresh(&self) -> Result<u64, CorpusError> {
        let mine = self.snapshot();
        if file::numbers(&self.dir)?.first().is_some_and(|&n| n > mine.number())
            && let (Some(newer), _) = file::latest(&self.dir)?
            && newer.number() > mine.number()
            && newer.shape() == self.shape
        {
            newer.prepare();
            *self.current.write() = Arc::new(newer);
        }
        Ok(self.snapshot().number())
    }

    /// Applies `changes` to the newest committed generation (this process's or another's),
    /// `notes` replacing its notes when given, and commits the result as the next generation;
    /// returns its number. On an error nothing is committed and readers keep the generation they
    /// had.
    pub fn commit(&self, changes: Vec<Change>, notes: Option<String>) -> Result<u64, CorpusError> {
        let _lock = file::WriteLock::take(&self.dir)?;
        // Another process may have committed since: its generation is the base.
        let mine = self.snapshot();
        let newer = file::numbers(&self.dir)?.first().is_some_and(|&n| n > mine.number());
        let theirs = newer.then(|| file::latest(&self.dir)).transpose()?.and_then(|(s, _)| s);
        let base = theirs.as_ref().filter(|s| s.number() > mine.number()).unwrap_or(&mine);
        let next = base.apply(changes, notes)?;
        let bytes = next.bytes();
        if bytes > self.max_bytes {
            return Err(CorpusError::Full { dir: self.dir.clone(), bytes, limit: self.max_bytes });
        }
        file::write(&self.dir, &next)?;
        let number = next.number();
        next.prepare();
        *self.current.write() = Arc::new(next);
        Ok(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape { dimension: 3, metric: Metric::Cosine };

    fn chunk(id: &str, text: &str, v: [f32; 3], chapter: &str) -> Change {
        Change::Upsert(Record {
            id: id.into(),
            text: text.into(),
            vector: v.to_vec(),
            metadata: format!("{{\"id\":\"{id}\"}}"),
            fields: [("chapter".to_string(), vec![chapter.to_string()])].into(),
        })
    }

    fn ids(hits: &[Found]) -> Vec<String> {
        hits.iter().map(|h| h.id.clone()).collect()
    }

    fn texts(g: &Collection, ids: &[&str]) -> Vec<Option<String>> {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        g.get(&ids).into_iter().map(|r| r.map(|r| r.text)).collect()
    }

    /// A commit is seen by new snapshots and after reopening; a snapshot taken before it stays
    /// as it was; upserts replace by id and removals remove.
    #[test]
    fn commits_are_whole_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert_eq!((corpus.snapshot().number(), corpus.snapshot().entries().len()), (0, 0));
        let n = corpus
            .commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1"), chunk("b", "beta", [0.0, 1.0, 0.0], "2")], None)
            .unwrap();
        assert_eq!(n, 1);
        let before = corpus.snapshot();
        corpus.commit(vec![chunk("a", "alpha two", [0.0, 0.0, 2.0], "1"), Change::Remove("b".into())], None).unwrap();
        assert_eq!(before.entries().len(), 2);
        assert_eq!(texts(&before, &["a"]), [Some("alpha".to_string())]);
        let now = corpus.snapshot();
        assert_eq!((now.number(), now.entries().len()), (2, 1));
        assert_eq!(texts(&now, &["a", "b"]), [Some("alpha two".to_string()), None]);
        drop(corpus);
        let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert!(reopened.warnings().is_empty(), "{:?}", reopened.warnings());
        let g = reopened.snapshot();
        assert_eq!((g.number(), g.entries().len()), (2, 1));
        // Stored normalised (cosine): the nearest of a scaled query scores 1.
        let hit = g.nearest(&[0.0, 0.0, 5.0], 1, &Filter::all()).unwrap();
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
                        w.commit(vec![chunk(&format!("{name}{i}"), "text", [1.0, i as f32, 0.0], name)], None).unwrap();
                    }
                });
            }
        });
        let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap().snapshot();
        assert_eq!((reopened.number(), reopened.entries().len()), (12, 12));
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
            corpus.commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1")], None).unwrap();
            corpus.commit(vec![chunk("b", "beta", [0.0, 1.0, 0.0], "1")], None).unwrap();
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
            assert_eq!((g.number(), g.entries().len()), (1, 1), "{damage}");
            assert!(reopened.warnings()[0].contains("checksum mismatch"), "{damage}: {:?}", reopened.warnings());
            // The next commit builds on what is served and replaces the damaged file.
            assert_eq!(reopened.commit(vec![chunk("c", "gamma", [0.0, 0.0, 1.0], "2")], None).unwrap(), 2);
            assert_eq!(LocalCorpus::open(dir.path(), SHAPE).unwrap().snapshot().entries().len(), 2);
        }
    }

    /// Another dimension or metric than the stored one is refused, and so are vectors of another
    /// dimension, clearly; nothing is committed.
    #[test]
    fn shapes_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        corpus.commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1")], None).unwrap();
        let e = LocalCorpus::open(dir.path(), Shape { dimension: 4, metric: Metric::Cosine }).err().unwrap();
        assert!(e.to_string().contains("holds 3-dimensional vectors compared by Cosine, not 4-dimensional"), "{e}");
        assert!(LocalCorpus::open(dir.path(), Shape { dimension: 3, metric: Metric::Dot }).is_err());
        let bad = Change::Upsert(Record {
            id: "x".into(),
            text: String::new(),
            vector: vec![1.0],
            metadata: "{}".into(),
            fields: Default::default(),
        });
        let e = corpus.commit(vec![bad], None).unwrap_err();
        assert!(e.to_string().contains("chunk \"x\" has a 1-dimensional vector"), "{e}");
        assert_eq!(corpus.snapshot().number(), 1);
        let e = LocalCorpus::open(dir.path(), Shape { dimension: 0, metric: Metric::Cosine }).err().unwrap();
        assert!(e.to_string().contains("1 to 16384 dimensions, not 0"), "{e}");
        let e = corpus.snapshot().nearest(&[1.0, 0.0], 1, &Filter::all()).unwrap_err();
        assert!(e.to_string().contains("query vector has 2 dimensions"), "{e}");
    }

    /// kNN and BM25 with the same filter: exact values and prefixes of the filter fields.
    #[test]
    fn searches_honour_filters() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        corpus
            .commit(
                vec![
                    chunk("a", "bandwidth limits by timetable", [1.0, 0.0, 0.0], "90.10"),
                    chunk("b", "bandwidth of the connection", [0.9, 0.1, 0.0], "90.11"),
                    chunk("c", "checksums and hashes", [0.0, 1.0, 0.0], "12.1"),
                ],
                None,
            )
            .unwrap();
        let g = corpus.snapshot();
        let all = Filter::default();
        assert_eq!(ids(&g.nearest(&[1.0, 0.0, 0.0], 2, &all).unwrap()), ["a", "b"]);
        let in_b = Filter::exact("chapter", "90.11");
        assert_eq!(ids(&g.nearest(&[1.0, 0.0, 0.0], 3, &in_b).unwrap()), ["b"]);
        let under =
            |p: &str| Filter::all().and(Clause { field: "chapter".into(), values: vec![p.into()], how: Match::Prefix });
        let under_12 = under("12.");
        assert_eq!(ids(&g.nearest(&[1.0, 0.0, 0.0], 3, &under_12).unwrap()), ["c"]);
        assert_eq!(ids(&g.keyword("bandwidth timetable", None, 3, &all).unwrap()), ["a", "b"]);
        let under_90 = under("90.11");
        assert_eq!(ids(&g.keyword("bandwidth", None, 3, &under_90).unwrap()), ["b"]);
        assert!(g.keyword("bandwidth", None, 3, &under_12).unwrap().is_empty());
        let missing = Filter::exact("document", "x");
        assert!(g.nearest(&[1.0, 0.0, 0.0], 3, &missing).unwrap().is_empty());
    }
}
