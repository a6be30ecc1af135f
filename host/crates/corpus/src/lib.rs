//! The local corpus backend: a named set of chunks (id, text, vector, metadata, filter fields)
//! kept by the host in a directory, in an SQLite database ([`store`]).
//!
//! - **Generations.** A commit applies a batch of upserts and removals, and the notes, in one
//!   transaction, touching only the rows of the chunks it changes: it costs what the change
//!   costs, not what the corpus holds. Each commit is the next generation. Readers take a
//!   [`Snapshot`] (a read transaction): they see the generation they took until they drop it,
//!   so a commit never shows half of itself.
//! - **Crash-safe.** SQLite's write-ahead log: a commit killed half-way is rolled back when the
//!   database is next opened. A commit that fails (a full disk, a quota) changes nothing: the
//!   last committed generation keeps serving. A database that is not one (damaged, or another
//!   file) is moved aside at open, said so ([`LocalCorpus::warnings`]), and the corpus starts
//!   empty.
//! - **Writers do not lose each other's work.** A commit takes the database's write lock (in
//!   this process or another) and applies its batch to what is committed then.
//! - **Shape.** A corpus has a vector dimension and a metric, stored with it; opening it with
//!   another is refused ([`CorpusError::Shape`]).
//! - **Upgrades.** A directory written by an earlier Quarry (`gen-*.qcorpus` generation files)
//!   is imported at its first open, nothing embedded again, and the old files removed.
//!
//! Searches ([`snapshot`]) score as rag-core does for a tool keeping its own corpus: the same
//! dot product, the same BM25 formula and tokenising, so that scores do not depend on where the
//! corpus is kept.

mod ann;
pub mod config;
#[cfg(feature = "couchbase")]
pub mod couchbase;
mod error;
pub mod host;
mod import;
mod lease;
pub mod progress;
pub mod snapshot;
mod store;

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rusqlite::TransactionBehavior;

pub use ann::{AFTER as GRAPH_AFTER, Built as GraphBuilt};
pub use error::CorpusError;
pub use lease::LeaseFile;
pub use rag_core::corpus::{
    Change, Clause, Entry, Fields, Filter, Found, Info, MAX_DIMENSION, Match, Metric, Record, Shape,
};
pub use snapshot::Snapshot;

/// What a corpus's database says of itself ([`LocalCorpus::stored`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stored {
    /// The committed generation.
    pub generation: u64,
    /// Chunks in it.
    pub chunks: u64,
    /// Their bytes (ids, texts, metadata, fields, vectors; the notes not counted).
    pub bytes: u64,
    /// When the last commit was made, in seconds since the Unix epoch; 0 before the first, or
    /// when an earlier version made it.
    pub committed_at: u64,
}

/// A corpus in a directory, opened by this process; see the crate docs.
pub struct LocalCorpus {
    dir: PathBuf,
    shape: Shape,
    max_bytes: u64,
    writer: Mutex<rusqlite::Connection>,
    readers: snapshot::Pool,
    warnings: Vec<String>,
    graph: std::sync::Arc<ann::Slot>,
    /// Chunks new since the last graph that make the background build the next; `None`: never.
    graph_after: Option<u64>,
    /// Started by the first snapshot or commit (after the options are set).
    indexer: std::sync::OnceLock<Option<ann::Indexer>>,
}

impl LocalCorpus {
    /// Opens (creating it if needed) the corpus in `dir` for vectors of `shape`.
    pub fn open(dir: &Path, shape: Shape) -> Result<LocalCorpus, CorpusError> {
        if !(1..=MAX_DIMENSION).contains(&shape.dimension) {
            return Err(CorpusError::Dimensions { asked: shape.dimension });
        }
        std::fs::create_dir_all(dir).map_err(|source| CorpusError::Io { dir: dir.to_path_buf(), source })?;
        let mut warnings = Vec::new();
        let writer = match Self::prepare(dir, shape, &mut warnings) {
            Err(CorpusError::Store { source, .. }) if store::is_damage(&source) => {
                let aside = Self::move_aside(dir)?;
                warnings.push(format!(
                    "{} is not a corpus database ({source}); moved to {} and starting empty",
                    store::path(dir).display(),
                    aside.display()
                ));
                Self::prepare(dir, shape, &mut warnings)?
            }
            other => other?,
        };
        let graph = std::sync::Arc::new(ann::Slot::default());
        Ok(LocalCorpus {
            dir: dir.to_path_buf(),
            shape,
            max_bytes: u64::MAX,
            writer: Mutex::new(writer),
            readers: Default::default(),
            warnings,
            graph,
            graph_after: Some(ann::AFTER),
            indexer: std::sync::OnceLock::new(),
        })
    }

    /// Moves a damaged database (and its log) aside, under a name with the time.
    fn move_aside(dir: &Path) -> Result<PathBuf, CorpusError> {
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let db = store::path(dir);
        let aside = dir.join(format!("{}.damaged-{at}", store::DATABASE));
        std::fs::rename(&db, &aside).map_err(|source| CorpusError::Io { dir: dir.to_path_buf(), source })?;
        for log in ["-wal", "-shm"] {
            let from = dir.join(format!("{}{log}", store::DATABASE));
            if from.exists() {
                let _ = std::fs::rename(&from, dir.join(format!("{}.damaged-{at}{log}", store::DATABASE)));
            }
        }
        Ok(aside)
    }

    /// The writer's connection to the database in `dir`, its shape checked; the tables made and
    /// an earlier format's corpus imported if it is new.
    fn prepare(dir: &Path, shape: Shape, warnings: &mut Vec<String>) -> Result<rusqlite::Connection, CorpusError> {
        let err = |e| store::error(dir, e);
        let mut conn = store::connect(&store::path(dir)).map_err(err)?;
        let stored = match store::stored_shape(&conn).map_err(err)? {
            Some(s) => s,
            None => {
                // New: made under the write lock, so that two processes opening it at once
                // make it once.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
                let stored = match store::stored_shape(&tx).map_err(err)? {
                    Some(s) => s,
                    None => {
                        let (old, skipped) = import::latest(dir)?;
                        warnings.extend(skipped);
                        let s = old.as_ref().map_or(shape, |(g, _)| g.shape);
                        store::create(&tx, s).map_err(err)?;
                        if let Some((g, file)) = old {
                            warnings.push(Self::import(dir, &tx, g, &file)?);
                        }
                        s
                    }
                };
                tx.commit().map_err(err)?;
                // Committed: the earlier format's files are no longer needed.
                for f in import::files(dir)? {
                    let _ = std::fs::remove_file(f);
                }
                stored
            }
        };
        let schema = store::schema(&conn).map_err(err)?;
        if schema > store::SCHEMA {
            return Err(CorpusError::Newer { dir: dir.to_path_buf(), found: schema, reads: store::SCHEMA });
        }
        if store::totals(&conn).map_err(err)?.epoch == 0 {
            // Made before the graph: brought up once, under the write lock.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
            store::upgrade(&tx).map_err(err)?;
            tx.commit().map_err(err)?;
        }
        if stored != shape {
            return Err(CorpusError::Shape {
                dir: dir.to_path_buf(),
                stored_dimension: stored.dimension,
                stored_metric: stored.metric,
                dimension: shape.dimension,
                metric: shape.metric,
            });
        }
        Ok(conn)
    }

    /// Imports generation `g` of the earlier format (read from `file`) in `tx`; returns the
    /// line the log says.
    fn import(
        dir: &Path,
        tx: &rusqlite::Transaction<'_>,
        g: import::Generation,
        file: &Path,
    ) -> Result<String, CorpusError> {
        let d = g.shape.dimension;
        let (chunks, number) = (g.chunks.len(), g.number);
        let changes = g
            .chunks
            .into_iter()
            .zip(g.vectors.chunks_exact(d))
            .map(|(e, v)| {
                Change::Upsert(Record {
                    id: e.id,
                    text: e.text,
                    vector: v.to_vec(),
                    metadata: e.metadata,
                    fields: e.fields,
                })
            })
            .collect();
        store::apply(tx, g.shape, changes, Some(g.notes)).map_err(|e| Self::apply_error(dir, e))?;
        store::set_generation(tx, number).map_err(|e| store::error(dir, e))?;
        Ok(format!(
            "imported {chunks} chunks of generation {number} from {} (the format of Quarry before the SQLite store; nothing embedded again) and removed the old files",
            file.display()
        ))
    }

    fn apply_error(dir: &Path, e: store::ApplyError) -> CorpusError {
        match e {
            store::ApplyError::Batch(b) => CorpusError::Batch(b),
            store::ApplyError::Store(e) => store::error(dir, e),
        }
    }

    /// Refuses commits that would make the corpus hold more than `bytes` (ids, texts,
    /// metadata, fields, vectors and notes).
    pub fn with_max_bytes(mut self, bytes: u64) -> LocalCorpus {
        self.max_bytes = bytes;
        self
    }

    /// Builds the nearest-neighbour graph in the background once `chunks` were committed since
    /// the last (default [`GRAPH_AFTER`]); `None`: never, every unfiltered search scans.
    pub fn with_graph_after(mut self, chunks: Option<u64>) -> LocalCorpus {
        self.graph_after = chunks;
        self
    }

    fn indexer(&self) -> Option<&ann::Indexer> {
        self.indexer
            .get_or_init(|| self.graph_after.map(|a| ann::Indexer::start(&self.dir, self.shape, self.graph.clone(), a)))
            .as_ref()
    }

    /// Builds the next nearest-neighbour graph now, in this thread, from whatever was committed
    /// since the last (for benches and tests; a server leaves it to the background); `None`
    /// when nothing was new or another process is building.
    pub fn build_graph(&self) -> Result<Option<GraphBuilt>, CorpusError> {
        ann::build(&self.dir, self.shape, &self.graph, 1, true, &std::sync::atomic::AtomicBool::new(false))
    }

    /// The generation readers see now; it stays whole while held, whatever is committed after.
    pub fn snapshot(&self) -> Result<Snapshot, CorpusError> {
        self.indexer();
        let s = Snapshot::take(&self.dir, &self.readers, self.shape)?;
        let graph = self.graph.get(&self.dir, self.shape, s.epoch());
        Ok(s.with_graph(graph))
    }

    /// [`LocalCorpus::snapshot`] searched without the graph: every unfiltered kNN an exact
    /// scan (what recall is measured against).
    pub fn exact_snapshot(&self) -> Result<Snapshot, CorpusError> {
        Snapshot::take(&self.dir, &self.readers, self.shape)
    }

    /// What opening said (a database moved aside, an import, generation files skipped), for
    /// the log.
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

    /// The generation committed in `dir`'s corpus, if it has a database: without opening it
    /// for writing or changing anything.
    pub fn stored_generation(dir: &Path) -> Option<u64> {
        Self::stored(dir).map(|s| s.generation)
    }

    /// What `dir`'s corpus says of itself, if it has a database that can be read: without
    /// opening it for writing or changing anything.
    pub fn stored(dir: &Path) -> Option<Stored> {
        let path = store::path(dir);
        if !path.exists() {
            return None;
        }
        let c = store::connect_read_only(&path).ok()?;
        let t = store::totals(&c).ok()?;
        Some(Stored { generation: t.generation, chunks: t.chunks, bytes: t.bytes, committed_at: t.committed_at })
    }

    /// Applies `changes`, and `notes` replacing the notes when given, to what is committed now
    /// (by this process or another), as the next generation; returns its number. On an error
    /// nothing is committed and readers keep the generation they had.
    pub fn commit(&self, changes: Vec<Change>, notes: Option<String>) -> Result<u64, CorpusError> {
        let err = |e| store::error(&self.dir, e);
        let mut conn = self.writer.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
        let applied = store::apply(&tx, self.shape, changes, notes).map_err(|e| Self::apply_error(&self.dir, e))?;
        let bytes = applied.totals.bytes + applied.notes_bytes;
        if bytes > self.max_bytes {
            return Err(CorpusError::Full { dir: self.dir.clone(), bytes, limit: self.max_bytes });
        }
        tx.commit().map_err(err)?;
        // Folded into the database now rather than by a later reader: the log stays small.
        let _ = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
        if let Some(i) = self.indexer() {
            i.poke();
        }
        Ok(applied.totals.generation)
    }
}

/// A clean close leaves the WAL empty, so that the database file copied or restored on its own
/// is whole. SQLite's own checkpoint at close is off ([`store::connect`]: it held an exclusive
/// lock that other processes' opens waited on); this one waits for nobody: if another process
/// is reading or writing, the WAL stays, and a later commit folds it in.
impl Drop for LocalCorpus {
    fn drop(&mut self) {
        // The builder first: its reads would hold the checkpoint back.
        drop(self.indexer.take());
        let c = self.writer.get_mut();
        let _ = c.busy_timeout(std::time::Duration::ZERO);
        let _ = c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
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

    fn texts(g: &Snapshot, ids: &[&str]) -> Vec<Option<String>> {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        g.get(&ids).unwrap().into_iter().map(|r| r.map(|r| r.text)).collect()
    }

    fn state(c: &LocalCorpus) -> (u64, u64) {
        let g = c.snapshot().unwrap();
        (g.number(), g.len())
    }

    /// A commit is seen by new snapshots and after reopening; a snapshot taken before it stays
    /// as it was; upserts replace by id and removals remove.
    #[test]
    fn commits_are_whole_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert_eq!(state(&corpus), (0, 0));
        let n = corpus
            .commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1"), chunk("b", "beta", [0.0, 1.0, 0.0], "2")], None)
            .unwrap();
        assert_eq!(n, 1);
        let before = corpus.snapshot().unwrap();
        corpus.commit(vec![chunk("a", "alpha two", [0.0, 0.0, 2.0], "1"), Change::Remove("b".into())], None).unwrap();
        assert_eq!(before.len(), 2);
        assert_eq!(texts(&before, &["a"]), [Some("alpha".to_string())]);
        assert_eq!(before.keyword("beta", None, 3, &Filter::all()).unwrap().len(), 1);
        drop(before);
        let now = corpus.snapshot().unwrap();
        assert_eq!((now.number(), now.len()), (2, 1));
        assert_eq!(texts(&now, &["a", "b"]), [Some("alpha two".to_string()), None]);
        drop(corpus);
        let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert!(reopened.warnings().is_empty(), "{:?}", reopened.warnings());
        let g = reopened.snapshot().unwrap();
        assert_eq!((g.number(), g.len()), (2, 1));
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
        assert_eq!(state(&LocalCorpus::open(dir.path(), SHAPE).unwrap()), (12, 12));
    }

    /// A file that is not a database where the corpus's is (damaged, or written over) is moved
    /// aside, said so, and the corpus starts empty: the next commit builds it again. Nothing of
    /// the damaged file is lost.
    /// The last corpus on a database to close empties the WAL (SQLite's checkpoint at close
    /// being off); one closing while another reads leaves that reader its generation.
    #[test]
    fn a_clean_close_leaves_the_wal_empty() {
        let dir = tempfile::tempdir().unwrap();
        let wal = || std::fs::metadata(dir.path().join(format!("{}-wal", store::DATABASE))).map_or(0, |m| m.len());
        let (a, b) = (LocalCorpus::open(dir.path(), SHAPE).unwrap(), LocalCorpus::open(dir.path(), SHAPE).unwrap());
        let before = b.snapshot().unwrap();
        a.commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1")], None).unwrap();
        drop(a);
        assert_eq!((before.number(), before.len()), (0, 0), "the reader keeps its generation");
        drop(before);
        assert_eq!(state(&b), (1, 1));
        drop(b);
        assert_eq!(wal(), 0);
        assert_eq!(state(&LocalCorpus::open(dir.path(), SHAPE).unwrap()), (1, 1));
    }

    #[test]
    fn a_damaged_database_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        corpus.commit(vec![chunk("a", "alpha", [1.0, 0.0, 0.0], "1")], None).unwrap();
        drop(corpus);
        let db = dir.path().join(store::DATABASE);
        std::fs::write(&db, vec![7u8; 8192]).unwrap();
        let reopened = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        assert_eq!(state(&reopened), (0, 0));
        let w = reopened.warnings().join("\n");
        assert!(w.contains("is not a corpus database") && w.contains("moved to"), "{w}");
        let aside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("corpus.sqlite.damaged-") && !n.ends_with("-wal") && !n.ends_with("-shm"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read(dir.path().join(&aside[0])).unwrap(), vec![7u8; 8192]);
        assert_eq!(reopened.commit(vec![chunk("c", "gamma", [0.0, 0.0, 1.0], "2")], None).unwrap(), 1);
    }

    /// A directory the earlier format wrote (generation files) is imported at its first open:
    /// the newest good generation, its number, notes, chunks and vectors as they were; the
    /// files are removed, and the log says so.
    #[test]
    fn an_earlier_formats_corpus_is_imported_once() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gen-v1");
        for f in std::fs::read_dir(&fixture).unwrap().filter_map(Result::ok) {
            std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
        }
        let shape = Shape { dimension: 3, metric: Metric::Cosine };
        let corpus = LocalCorpus::open(dir.path(), shape).unwrap();
        let w = corpus.warnings().join("\n");
        assert!(w.contains("imported 2 chunks of generation 2 from") && w.contains("gen-00000000000000000002"), "{w}");
        assert!(
            w.contains("gen-00000000000000000003.qcorpus: checksum mismatch (damaged or truncated); skipped"),
            "{w}"
        );
        let g = corpus.snapshot().unwrap();
        assert_eq!((g.number(), g.len()), (2, 2));
        assert_eq!(g.info().unwrap().notes, r#"{"k":"v"}"#);
        assert_eq!(texts(&g, &["a", "b"]), [Some("alpha".to_string()), Some("beta".to_string())]);
        assert_eq!(ids(&g.nearest(&[0.0, 1.0, 0.0], 1, &Filter::all()).unwrap()), ["b"]);
        assert_eq!(ids(&g.keyword("alpha", None, 3, &Filter::exact("chapter", "1")).unwrap()), ["a"]);
        drop(g);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains("qcorpus"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        drop(corpus);
        let again = LocalCorpus::open(dir.path(), shape).unwrap();
        assert!(again.warnings().is_empty(), "{:?}", again.warnings());
        assert_eq!(state(&again), (2, 2));
    }

    /// Bytes this thread has handed to `write` so far (`/proc/thread-self/io`): SQLite writes
    /// on the committing thread.
    fn written() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines().find_map(|l| l.strip_prefix("wchar: ")).unwrap().trim().parse().unwrap()
    }

    /// A commit writes what it changes: the bytes one more chunk costs do not depend on how many
    /// the corpus holds (the earlier format rewrote them all), and stay within a small multiple
    /// of the chunk.
    #[test]
    fn a_commit_writes_the_change_not_the_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        let text = "words of a chunk that is about this long ".repeat(20);
        let batch = |from: usize, n: usize| {
            (from..from + n).map(|i| chunk(&format!("c{i}"), &text, [1.0, i as f32, 0.0], "1")).collect::<Vec<_>>()
        };
        corpus.commit(batch(0, 10), None).unwrap();
        let one = |from| {
            let before = written();
            corpus.commit(batch(from, 1), None).unwrap();
            written() - before
        };
        let small = (0..5).map(|i| one(100 + i)).max().unwrap();
        corpus.commit(batch(1_000, 3_000), None).unwrap();
        let large = (0..5).map(|i| one(10_000 + i)).max().unwrap();
        // A chunk of ~850 bytes dirties a few 4 KiB pages of each table, written to the log and
        // then to the database.
        assert!(large <= small * 2, "one chunk wrote {small} bytes at 10 chunks, {large} at 3,010");
        assert!(large < 200_000, "one chunk of ~850 bytes wrote {large}");
    }

    /// The store searches as rag-core's in-memory `Collection` does (what a tool keeping its
    /// own corpus runs, and what the format before this store searched): on the bundled rclone
    /// manual's paragraphs and words with inner marks and CJK, the same ids in the same order
    /// with the same scores, for kNN and for BM25 (through FTS5's postings unfiltered, through
    /// the chunks' own terms filtered), after upserts and removals.
    #[test]
    fn searches_score_as_the_in_memory_collection_does() {
        let manual =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../demo/rclone/MANUAL.md")).unwrap();
        let mut texts: Vec<String> =
            manual.split("\n\n").filter(|p| p.len() > 40).take(600).map(str::to_string).collect();
        texts.extend(
            ["don't use 3.14 as v1.2's value", "数据库的索引 and the index", "e-mail o'clock 3.14"].map(String::from),
        );
        let shape = Shape { dimension: 16, metric: Metric::Cosine };
        let mut seed = 7u64;
        let mut vector = || {
            (0..16)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect::<Vec<f32>>()
        };
        let changes: Vec<Change> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Change::Upsert(Record {
                    id: format!("c{i}"),
                    text: t.clone(),
                    vector: vector(),
                    metadata: "{}".into(),
                    fields: [("part".to_string(), vec![format!("p{}", i % 7)])].into(),
                })
            })
            .collect();
        let later: Vec<Change> = (0..40)
            .map(|i| Change::Remove(format!("c{}", i * 13)))
            .chain((0..20).map(|i| {
                Change::Upsert(Record {
                    id: format!("c{}", i * 29),
                    text: texts[i * 3].clone() + " bandwidth",
                    vector: vector(),
                    metadata: "{}".into(),
                    fields: [("part".to_string(), vec!["p9".to_string()])].into(),
                })
            }))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), shape).unwrap();
        corpus.commit(changes.clone(), None).unwrap();
        // Searched before the next commit: the document frequencies read for this generation
        // must not be those of the next.
        let first = corpus.snapshot().unwrap();
        for q in ["bandwidth limit timetable", "remote config password", "the"] {
            first.keyword(q, None, 10, &Filter::all()).unwrap();
        }
        corpus.commit(later.clone(), None).unwrap();
        for q in ["bandwidth limit timetable", "the"] {
            // An older snapshot, asked after the commit, keeps its own generation's counts.
            let memory = rag_core::corpus::Collection::empty(shape).apply(changes.clone(), None).unwrap();
            let pairs = |v: Vec<Found>| v.into_iter().map(|f| (f.id, f.score)).collect::<Vec<_>>();
            assert_eq!(
                pairs(first.keyword(q, None, 10, &Filter::all()).unwrap()),
                pairs(memory.keyword(q, None, 10, &Filter::all()).unwrap())
            );
        }
        drop(first);
        let memory =
            rag_core::corpus::Collection::empty(shape).apply(changes, None).unwrap().apply(later, None).unwrap();
        let g = corpus.snapshot().unwrap();
        assert_eq!(g.len() as usize, memory.entries().len());
        let same = |what: &str, a: Vec<Found>, b: Vec<Found>| {
            let pairs = |v: &[Found]| v.iter().map(|f| (f.id.clone(), f.score)).collect::<Vec<_>>();
            assert_eq!(pairs(&a), pairs(&b), "{what}");
            assert!(!a.is_empty(), "{what}: found nothing");
        };
        let filters = [Filter::all(), Filter::exact("part", "p3"), Filter::exact("part", "p9")];
        for q in ["bandwidth limit timetable", "remote config password", "don't 3.14", "数据库 index", "the"] {
            for f in &filters {
                let (a, b) = (g.keyword(q, None, 10, f).unwrap(), memory.keyword(q, None, 10, f).unwrap());
                if b.is_empty() {
                    assert!(a.is_empty(), "{q} {f:?}");
                    continue;
                }
                same(&format!("keyword {q:?} {f:?}"), a, b);
            }
        }
        for f in &filters {
            let q = vector();
            same(&format!("nearest {f:?}"), g.nearest(&q, 10, f).unwrap(), memory.nearest(&q, 10, f).unwrap());
        }
        assert_eq!(g.list(&filters[2], 0, 100).unwrap(), memory.list(&filters[2], 0, 100));
        assert_eq!(g.list(&Filter::all(), 5, 50).unwrap(), memory.list(&Filter::all(), 5, 50));
    }

    /// A kNN scan stops at its deadline: asked every few thousand vectors, it gives up with
    /// `Stopped`, filtered or not; never asked to stop, it answers.
    #[test]
    fn a_knn_scan_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), SHAPE).unwrap();
        let part = |i: usize| if i.is_multiple_of(2) { "even" } else { "odd" };
        corpus
            .commit((0..5_000).map(|i| chunk(&format!("c{i}"), "t", [1.0, i as f32, 0.0], part(i))).collect(), None)
            .unwrap();
        let g = corpus.snapshot().unwrap();
        let q = [1.0, 2.0, 0.0];
        for f in [Filter::all(), Filter::exact("chapter", "even")] {
            assert!(matches!(g.nearest_until(&q, 3, &f, &|| true), Err(CorpusError::Stopped)), "{f:?}");
            assert_eq!(g.nearest_until(&q, 3, &f, &|| false).unwrap().len(), 3, "{f:?}");
        }
        let e = g.nearest_until(&q, 3, &Filter::all(), &|| true).unwrap_err().to_string();
        assert!(e.contains("deadline") && e.contains("raise the instance's deadline"), "{e}");
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
        assert_eq!(state(&corpus).0, 1);
        let e = LocalCorpus::open(dir.path(), Shape { dimension: 0, metric: Metric::Cosine }).err().unwrap();
        assert!(e.to_string().contains("1 to 16384 dimensions, not 0"), "{e}");
        let e = corpus.snapshot().unwrap().nearest(&[1.0, 0.0], 1, &Filter::all()).unwrap_err();
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
        let g = corpus.snapshot().unwrap();
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
        assert_eq!(g.list(&under("90."), 0, 10).unwrap(), ["a", "b"]);
        assert_eq!(g.list(&all, 1, 10).unwrap(), ["b", "c"]);
    }

    const WIDE: Shape = Shape { dimension: 32, metric: Metric::Cosine };

    /// Chunk `i` of 32 dimensions: its document's direction plus a little of its own.
    fn wide(i: usize, doc: usize) -> Change {
        let v = (0..32).map(|d| ((doc * 31 + d * 7) % 17) as f32 - 8.0 + ((i * 13 + d) % 5) as f32 * 0.3).collect();
        Change::Upsert(Record {
            id: format!("c{i}"),
            text: format!("chunk {i}"),
            vector: v,
            metadata: "{}".into(),
            fields: [("document".to_string(), vec![format!("d{doc}")])].into(),
        })
    }

    fn graphs(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("ann-"))
            .collect();
        names.sort();
        names
    }

    /// Searched with the graph, a corpus answers what the exact scan answers, with the same
    /// scores: chunks committed after the graph (scanned), removed (dropped) and changed (scored
    /// from the table until the next graph) included; the next build adds only what is new and leaves one file.
    #[test]
    fn the_graph_answers_as_the_exact_scan_does() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), WIDE).unwrap().with_graph_after(None);
        corpus.commit((0..600).map(|i| wide(i, i / 12)).collect(), None).unwrap();
        let first = corpus.build_graph().unwrap().expect("built");
        assert!(first.whole && first.added == 600 && first.chunks == 600, "{first:?}");
        assert_eq!(graphs(dir.path()).len(), 1);
        // After it: new chunks, a removed one, a changed one.
        let mut later: Vec<Change> = (600..640).map(|i| wide(i, i / 12)).collect();
        later.push(Change::Remove("c5".into()));
        later.push(wide(7, 49));
        corpus.commit(later, None).unwrap();
        let check = |corpus: &LocalCorpus| {
            let (g, exact) = (corpus.snapshot().unwrap(), corpus.exact_snapshot().unwrap());
            assert!(g.graph_upto().is_some() && exact.graph_upto().is_none());
            for q in [0, 5, 7, 300, 620, 639] {
                let Change::Upsert(r) = wide(q, if q == 7 { 49 } else { q / 12 }) else { unreachable!() };
                let (a, b) = (
                    g.nearest(&r.vector, 10, &Filter::all()).unwrap(),
                    exact.nearest(&r.vector, 10, &Filter::all()).unwrap(),
                );
                assert_eq!(ids(&a), ids(&b), "query {q}");
                assert!(a.iter().zip(&b).all(|(x, y)| x.score == y.score));
                assert!(!ids(&a).contains(&"c5".to_string()));
            }
        };
        check(&corpus);
        let next = corpus.build_graph().unwrap().expect("built");
        // 40 new and the changed chunk again (under its number, its place kept); c5 removed.
        assert!(!next.whole && next.added == 41 && next.removed == 1 && next.chunks == 639, "{next:?}");
        assert_eq!(graphs(dir.path()).len(), 1, "{:?}", graphs(dir.path()));
        check(&corpus);
        assert!(corpus.build_graph().unwrap().is_none(), "nothing new");
        // Another process's corpus finds the file.
        drop(corpus);
        let again = LocalCorpus::open(dir.path(), WIDE).unwrap().with_graph_after(None);
        check(&again);
    }

    /// A graph of a database made again in the same directory (deleted by hand, the graph
    /// left) is never used: its keys would name the new database's chunks.
    #[test]
    fn a_graph_of_another_database_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), WIDE).unwrap().with_graph_after(None);
        corpus.commit((0..100).map(|i| wide(i, i / 12)).collect(), None).unwrap();
        corpus.build_graph().unwrap().expect("built");
        drop(corpus);
        for f in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.path().join(format!("{}{f}", store::DATABASE)));
        }
        let corpus = LocalCorpus::open(dir.path(), WIDE).unwrap().with_graph_after(None);
        corpus.commit((0..100).map(|i| wide(i + 1000, i / 12 + 3)).collect(), None).unwrap();
        assert_eq!(corpus.snapshot().unwrap().graph_upto(), None);
        corpus.build_graph().unwrap().expect("built");
        assert_eq!(graphs(dir.path()).len(), 1, "the other database's graph removed");
        assert!(corpus.snapshot().unwrap().graph_upto().is_some());
        // A graph deleted under a running corpus is built again, whole, at the next build.
        for g in graphs(dir.path()) {
            std::fs::remove_file(dir.path().join(g)).unwrap();
        }
        corpus.commit(vec![wide(5000, 99)], None).unwrap();
        let again = corpus.build_graph().unwrap().expect("built");
        assert!(again.whole && again.chunks == 101, "{again:?}");
        assert_eq!(graphs(dir.path()).len(), 1);
    }

    /// The background thread builds the graph once enough is committed, without being asked.
    #[test]
    fn the_graph_is_built_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = LocalCorpus::open(dir.path(), WIDE).unwrap().with_graph_after(Some(50));
        corpus.commit((0..30).map(|i| wide(i, i / 12)).collect(), None).unwrap();
        corpus.commit((30..60).map(|i| wide(i, i / 12)).collect(), None).unwrap();
        let t = std::time::Instant::now();
        while corpus.snapshot().unwrap().graph_upto().is_none() {
            assert!(t.elapsed() < std::time::Duration::from_secs(60), "no graph after 60 s");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(graphs(dir.path()).len(), 1);
    }
}
