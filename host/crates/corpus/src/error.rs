//! Why a local corpus could not be opened, read or changed: the one error type of this crate's
//! local backend, below every module that returns it.

use std::path::PathBuf;
use std::time::Duration;

use rag_core::corpus::{MAX_DIMENSION, Metric};

/// Why a corpus could not be opened, read or changed.
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
    /// The database refused a call for another reason than the file system.
    #[error("corpus {dir}: the database failed: {source}")]
    Store {
        /// The corpus's directory.
        dir: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// Another process held the database's write lock for longer than a writer waits.
    #[error(
        "corpus {dir}: another process has held it for writing for over {waited:?}; try again, or stop the process that holds it"
    )]
    Busy {
        /// The corpus's directory.
        dir: PathBuf,
        /// How long this writer waited.
        waited: Duration,
    },
    /// A search was stopped at its call's deadline.
    #[error(
        "the search was stopped at its call's deadline; ask with fewer terms or a filter, or raise the instance's deadline"
    )]
    Stopped,
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
    /// A batch the corpus cannot take (a vector of another dimension), or a query it cannot
    /// answer.
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
    /// The nearest-neighbour graph beside the database could not be built or read (searches
    /// scan exactly meanwhile).
    #[error("corpus {dir}: the nearest-neighbour graph: {reason}")]
    Index {
        /// The corpus's directory.
        dir: PathBuf,
        /// usearch's words.
        reason: String,
    },
    /// The database was written by a newer Quarry.
    #[error("corpus {dir} was written by a newer Quarry (schema {found}; this build reads {reads}); upgrade Quarry")]
    Newer {
        /// The corpus's directory.
        dir: PathBuf,
        /// The schema found.
        found: i64,
        /// The one this build reads.
        reads: i64,
    },
}
