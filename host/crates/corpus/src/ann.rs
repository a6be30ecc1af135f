//! The approximate nearest-neighbour index beside the database: an HNSW graph (usearch) over
//! the vectors committed up to some chunk number, built in the background, saved as a file and
//! memory-mapped by readers.
//!
//! An exact scan reads every vector (786 ms at a million chunks); a graph answers in a few
//! milliseconds but costs minutes of CPU to build at that size, so it is never built by a
//! commit. A commit stays what the change costs; the [`Indexer`] thread adds what was committed
//! since the last graph, once there is enough of it, and publishes the next file.
//!
//! - **Keys are chunk numbers.** A number is never given twice, and a changed chunk gets a new
//!   one (`store`), so a key names the vector the graph was built from, or a chunk since
//!   removed.
//! - **Scores are the exact path's.** A search asks the graph for candidates among the chunks
//!   up to its `upto`, drops those no longer stored, scores the rest from their stored vectors
//!   with the same dot product, and scans the chunks after `upto` exactly. Only recall is
//!   approximate (measured by `make bench-corpus`).
//! - **Files.** `ann-EPOCH-UPTO.usearch`: EPOCH is the database's own ([`store::Totals::epoch`]),
//!   so a graph never names the chunks of a database made again in the directory; written
//!   under a temporary name, synced and renamed, so a reader maps a whole file or none. Older
//!   files are removed once the next is in place (a reader that mapped one keeps it).
//! - **One builder at a time**, across processes: `ann.lock` (flock). Readers in another
//!   process find the new file when they look again ([`Slot`]).
//! - **Memory.** The graph keeps its vectors as i8 (cosine, vectors normalised) or f16 (dot):
//!   ~0.5 KB a chunk of 384 dimensions with its links. Readers map the file; the builder holds
//!   it while it adds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use rag_core::corpus::{Metric, Shape};

use crate::error::CorpusError;
use crate::store;

/// Chunks committed since the last graph (or in all, before the first) that make the indexer
/// build the next: below it the exact scan of what the graph lacks stays within ~15 ms.
pub const AFTER: u64 = 20_000;
/// Links per node and the breadth of the search while building and asking (usearch's
/// `connectivity`, `expansion_add`, `expansion_search`): recall@10 ≥ 0.95 at a million chunks in
/// `make bench-corpus`.
const CONNECTIVITY: usize = 16;
const EXPANSION_ADD: usize = 128;
const EXPANSION_SEARCH: usize = 128;
/// Vectors read from the database at a time while building (a stop waits for one batch: ~2 s
/// of two cores at a million chunks).
const BATCH: i64 = 1_024;
/// How often a corpus looks for a graph another process built.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// A graph's file, mapped.
pub struct Ann {
    index: Index,
    /// The database it was built from.
    pub epoch: u64,
    /// The greatest chunk number it was built from; chunks after it are not in it.
    pub upto: i64,
    path: PathBuf,
}

impl Ann {
    /// Up to `count` chunk numbers (at most `upto`) whose vectors are nearest `query` in the
    /// graph, among those `allowed` lets through when given.
    pub fn candidates(&self, query: &[f32], count: usize, allowed: Option<&[i64]>) -> Result<Vec<i64>, String> {
        let count = count.min(EXPANSION_SEARCH);
        let found = match allowed {
            None => self.index.search(query, count),
            Some(a) => self.index.filtered_search(query, count, |k: u64| a.binary_search(&(k as i64)).is_ok()),
        }
        .map_err(|e| e.to_string())?;
        Ok(found.keys.into_iter().map(|k| k as i64).collect())
    }

    /// The chunks it holds (removed ones not counted).
    fn held(&self) -> usize {
        self.index.size()
    }
}

fn options(shape: Shape) -> IndexOptions {
    let (metric, quantization) = match shape.metric {
        // Stored normalised: every value within [-1, 1], which i8 keeps to within 1/127.
        Metric::Cosine => (MetricKind::Cos, ScalarKind::I8),
        Metric::Dot => (MetricKind::IP, ScalarKind::F16),
    };
    IndexOptions {
        dimensions: shape.dimension,
        metric,
        quantization,
        connectivity: CONNECTIVITY,
        expansion_add: EXPANSION_ADD,
        expansion_search: EXPANSION_SEARCH,
        multi: false,
    }
}

fn file_name(epoch: u64, upto: i64) -> String {
    format!("ann-{epoch}-{upto}.usearch")
}

/// The epoch and `upto` a graph's file name says.
fn parse(name: &str) -> Option<(u64, i64)> {
    let (epoch, upto) = name.strip_prefix("ann-")?.strip_suffix(".usearch")?.split_once('-')?;
    Some((epoch.parse().ok()?, upto.parse().ok()?))
}

/// The newest graph of database `epoch` in `dir`: its `upto` and path.
fn latest(dir: &Path, epoch: u64) -> Option<(i64, PathBuf)> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let (ep, upto) = parse(e.file_name().to_str()?)?;
            (ep == epoch).then(|| (upto, e.path()))
        })
        .max_by_key(|(upto, _)| *upto)
}

fn view(path: &Path, shape: Shape, epoch: u64, upto: i64) -> Result<Ann, String> {
    let index = Index::new(&options(shape)).map_err(|e| e.to_string())?;
    index.view(&path.to_string_lossy()).map_err(|e| e.to_string())?;
    if index.dimensions() != shape.dimension {
        return Err(format!("{} has {} dimensions, not {}", path.display(), index.dimensions(), shape.dimension));
    }
    Ok(Ann { index, epoch, upto, path: path.to_path_buf() })
}

/// The graph a corpus's readers use, looked for again on disk every [`LOOK_EVERY`] (another
/// process may have built a newer one).
#[derive(Default)]
pub struct Slot {
    state: Mutex<(Option<Arc<Ann>>, Option<Instant>)>,
}

impl Slot {
    /// The newest graph of database `epoch` in `dir`, if there is one.
    pub fn get(&self, dir: &Path, shape: Shape, epoch: u64) -> Option<Arc<Ann>> {
        let mut state = self.state.lock();
        let fresh = state.1.is_some_and(|t| t.elapsed() < LOOK_EVERY);
        if fresh && state.0.as_ref().is_none_or(|a| a.epoch == epoch) {
            return state.0.clone();
        }
        state.1 = Some(Instant::now());
        if let Some((upto, path)) = latest(dir, epoch)
            && state.0.as_ref().is_none_or(|a| a.path != path)
        {
            match view(&path, shape, epoch, upto) {
                Ok(a) => state.0 = Some(Arc::new(a)),
                Err(e) => tracing::warn!(target: "quarry::corpus", "{}: not used ({e})", path.display()),
            }
        }
        state.0.clone().filter(|a| a.epoch == epoch)
    }

    fn put(&self, ann: Ann) {
        *self.state.lock() = (Some(Arc::new(ann)), Some(Instant::now()));
    }

    fn current(&self) -> Option<Arc<Ann>> {
        self.state.lock().0.clone()
    }
}

/// What a build did.
#[derive(Clone, Copy, Debug)]
pub struct Built {
    /// Chunks in the graph.
    pub chunks: usize,
    /// Chunks added by this build.
    pub added: usize,
    /// Chunks removed from it since the last.
    pub removed: usize,
    /// Whether it was built from nothing (the first, or too many removed since the last).
    pub whole: bool,
    /// How long it took.
    pub took: Duration,
}

/// Builds the next graph of the corpus in `dir` if at least `after` chunks were committed since
/// the last; `None` when there was nothing to do, or another process is building.
/// `wait`: for a builder in another thread or process to finish (else `None` at once).
pub fn build(
    dir: &Path,
    shape: Shape,
    slot: &Slot,
    after: u64,
    wait: bool,
    stop: &AtomicBool,
) -> Result<Option<Built>, CorpusError> {
    let t = Instant::now();
    let io = |source| CorpusError::Io { dir: dir.to_path_buf(), source };
    let index_err = |reason: String| CorpusError::Index { dir: dir.to_path_buf(), reason };
    let lock =
        std::fs::File::options().create(true).truncate(false).write(true).open(dir.join("ann.lock")).map_err(io)?;
    if wait {
        lock.lock().map_err(io)?;
    } else if lock.try_lock().is_err() {
        return Ok(None);
    }
    let db = |e| store::error(dir, e);
    let c = store::connect(&store::path(dir)).map_err(db)?;
    let epoch = store::totals(&c).map_err(db)?.epoch;
    if epoch == 0 {
        return Ok(None);
    }
    let last = slot.current().filter(|a| a.epoch == epoch).or_else(|| {
        let (upto, path) = latest(dir, epoch)?;
        view(&path, shape, epoch, upto).ok().map(Arc::new)
    });
    let upto0 = last.as_ref().map_or(0, |a| a.upto);
    // Read before any vector: a chunk changed again after this is marked again, with a later
    // generation, and keeps its mark.
    let restated: Vec<(i64, i64)> = c
        .prepare("SELECT n, generation FROM restated")
        .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(db)?;
    let count = |sql: &str| c.query_row(sql, [upto0], |r| r.get::<_, i64>(0)).map_err(db);
    let fresh = count("SELECT count(*) FROM vectors WHERE n > ?1")? as u64;
    let changed: Vec<i64> = restated.iter().map(|r| r.0).filter(|&n| n <= upto0).collect();
    if fresh + (changed.len() as u64) < after.max(1) {
        return Ok(None);
    }
    let end: i64 = c.query_row("SELECT coalesce(max(n), 0) FROM vectors", [], |r| r.get(0)).map_err(db)?;
    let kept = count("SELECT count(*) FROM vectors WHERE n <= ?1")? as usize;
    let held = last.as_ref().map_or(0, |a| a.held());
    // Removed chunks stay in the graph as tombstones a search walks past: past a third of it,
    // build it again from what is stored.
    let mut whole = last.is_none() || held.saturating_sub(kept) * 3 > held;
    let mut index = Index::new(&options(shape)).map_err(|e| index_err(e.to_string()))?;
    let mut removed = 0;
    if let (false, Some(last)) = (whole, &last)
        && let Err(e) = index.load(&last.path.to_string_lossy())
    {
        // Deleted or damaged since it was mapped: built again from what is stored.
        tracing::warn!(target: "quarry::corpus", "{}: {e}; building the graph again", last.path.display());
        whole = true;
        index = Index::new(&options(shape)).map_err(|e| index_err(e.to_string()))?;
    }
    if let (false, Some(_)) = (whole, &last) {
        removed = remove_gone(&c, &index, upto0).map_err(db)?;
        for &n in &changed {
            if index.contains(n as u64) {
                let _ = index.remove(n as u64);
            }
        }
    }
    drop(last);
    let from = if whole { 0 } else { upto0 };
    let mut added = add_stored(&c, &index, shape, from, end, stop).map_err(db)?;
    if !whole {
        added += add_changed(&c, &index, shape, &changed).map_err(db)?;
    }
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let name = file_name(epoch, end);
    let tmp = dir.join(format!("{name}.tmp"));
    index.save(&tmp.to_string_lossy()).map_err(|e| index_err(e.to_string()))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io)?;
    let path = dir.join(&name);
    std::fs::rename(&tmp, &path).map_err(io)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    let chunks = index.size();
    drop(index);
    slot.put(view(&path, shape, epoch, end).map_err(index_err)?);
    // The graph holds these chunks' vectors as of their marks now: the marks go (unless the
    // chunk changed again since, with a later generation).
    let tx = c.unchecked_transaction().map_err(db)?;
    {
        let mut s = tx.prepare("DELETE FROM restated WHERE n = ?1 AND generation = ?2").map_err(db)?;
        for (n, g) in restated.iter().filter(|r| r.0 <= end) {
            s.execute([n, g]).map_err(db)?;
        }
    }
    tx.commit().map_err(db)?;
    for e in std::fs::read_dir(dir).map_err(io)?.filter_map(Result::ok) {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n != name && n.starts_with("ann-") && (n.ends_with(".usearch") || n.ends_with(".usearch.tmp")) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(Some(Built { chunks, added, removed, whole, took: t.elapsed() }))
}

/// Removes from `index` the chunks up to `upto` no longer stored; returns how many.
fn remove_gone(c: &Connection, index: &Index, upto: i64) -> rusqlite::Result<usize> {
    let mut s = c.prepare("SELECT n FROM vectors WHERE n <= ?1 ORDER BY n")?;
    let mut rows = s.query([upto])?;
    let mut removed = 0;
    let mut gone = |from: i64, to: i64| {
        for k in from..to {
            if index.contains(k as u64) && index.remove(k as u64).is_ok() {
                removed += 1;
            }
        }
    };
    let mut expect = 1;
    while let Some(r) = rows.next()? {
        let n: i64 = r.get(0)?;
        gone(expect, n);
        expect = n + 1;
    }
    gone(expect, upto + 1);
    Ok(removed)
}

/// Adds the stored vectors numbered `from` (exclusive) to `end` (inclusive) to `index`, a batch
/// at a time, on every core; returns how many.
fn add_stored(
    c: &Connection,
    index: &Index,
    shape: Shape,
    from: i64,
    end: i64,
    stop: &AtomicBool,
) -> rusqlite::Result<usize> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut s = c.prepare("SELECT n, v FROM vectors WHERE n > ?1 AND n <= ?2 ORDER BY n LIMIT ?3")?;
    let (mut after, mut added) = (from, 0);
    loop {
        // Each batch its own short read: a build never holds the log open for minutes.
        let batch: Vec<(i64, Vec<f32>)> = s
            .query_map(rusqlite::params![after, end, BATCH], |r| {
                let mut v = Vec::with_capacity(shape.dimension);
                store::read_vector(r.get_ref(1)?.as_blob()?, &mut v);
                Ok((r.get(0)?, v))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let Some(&(last, _)) = batch.last() else { return Ok(added) };
        if index.capacity() < index.size() + batch.len() {
            let want = (index.size() + batch.len()).max(index.capacity() * 3 / 2);
            // usearch keeps per-thread state: it must know how many threads add at once.
            let _ = index.reserve_capacity_and_threads(want, threads);
        }
        std::thread::scope(|s| {
            for t in 0..threads {
                let batch = &batch;
                s.spawn(move || {
                    for (n, v) in batch.iter().skip(t).step_by(threads) {
                        if let Err(e) = index.add(*n as u64, v) {
                            tracing::warn!(target: "quarry::corpus", "graph: chunk {n} not added ({e})");
                        }
                    }
                });
            }
        });
        added += batch.len();
        after = last;
        if stop.load(Ordering::Relaxed) {
            return Ok(added);
        }
    }
}

/// Adds chunks `ns` with their stored vectors now (changed since the last graph); returns how
/// many are still stored.
fn add_changed(c: &Connection, index: &Index, shape: Shape, ns: &[i64]) -> rusqlite::Result<usize> {
    let mut s = c.prepare("SELECT v FROM vectors WHERE n = ?1")?;
    let mut added = 0;
    let mut v = Vec::with_capacity(shape.dimension);
    for &n in ns {
        let found = s
            .query_row([n], |r| {
                store::read_vector(r.get_ref(0)?.as_blob()?, &mut v);
                Ok(())
            })
            .optional()?;
        if found.is_some() {
            if index.capacity() <= index.size() {
                let _ = index.reserve(index.size() + ns.len());
            }
            if let Err(e) = index.add(n as u64, &v) {
                tracing::warn!(target: "quarry::corpus", "graph: chunk {n} not added ({e})");
            }
            added += 1;
        }
    }
    Ok(added)
}

/// The thread that builds a corpus's next graph after commits, in the background; stopped and
/// joined when dropped (a build in progress stops at its next batch).
pub struct Indexer {
    wake: Option<std::sync::mpsc::Sender<()>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Indexer {
    /// Starts the thread for the corpus in `dir`, building once `after` chunks are new; it
    /// looks once now, then after each [`Indexer::poke`].
    pub fn start(dir: &Path, shape: Shape, slot: Arc<Slot>, after: u64) -> Indexer {
        let (wake, woken) = std::sync::mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let (dir, stop2) = (dir.to_path_buf(), stop.clone());
        let thread = std::thread::Builder::new().name("corpus-graph".into()).spawn(move || {
            let mut warned = false;
            while woken.recv().is_ok() {
                while woken.try_recv().is_ok() {}
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                match build(&dir, shape, &slot, after, false, &stop2) {
                    Ok(Some(b)) => tracing::info!(
                        target: "quarry::corpus",
                        "{}: graph of {} chunks built ({} added, {} removed) in {:.1} s",
                        dir.display(), b.chunks, b.added, b.removed, b.took.as_secs_f64()
                    ),
                    Ok(None) => {}
                    // Searches go on exact: said once, not at every commit.
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(target: "quarry::corpus", "{e}; searches scan exactly until a graph can be built");
                    }
                    Err(_) => {}
                }
            }
        });
        let indexer = Indexer { wake: Some(wake), stop, thread: thread.ok() };
        indexer.poke();
        indexer
    }

    /// Asks the thread to look whether there is enough new to build (after a commit).
    pub fn poke(&self) {
        if let Some(w) = &self.wake {
            let _ = w.send(());
        }
    }
}

impl Drop for Indexer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_says_its_epoch_and_upto() {
        assert_eq!(parse(&file_name(77, 1234)), Some((77, 1234)));
        assert_eq!(parse("ann-77-1234.usearch.tmp"), None);
        assert_eq!(parse("corpus.sqlite"), None);
    }
}
