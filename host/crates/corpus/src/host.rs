//! The `quarry:retrieval/corpus` capability: the WIT `Host` impls over [`LocalCorpus`], the
//! per-store [`State`], and the one copy of each corpus per host process ([`Shared`]).
//!
//! - **One copy per host.** Every store that opens corpus `NAME` gets the same [`Shared`]: one
//!   [`LocalCorpus`] (one database connection for writing, a few for reading), however many
//!   instances and pool members search it. It lives while a store holds it.
//! - **The lease.** `write` takes the corpus's lease: in this process a queue (a fair mutex), and
//!   across processes a `flock` on the directory's `.lease`; a writer waits at most until its
//!   call's deadline, then gets `busy`. Readers never wait for it. Every read sees what is
//!   committed at the time of the call, by this process or another, so the writer reads what
//!   it builds on.
//! - **A writer lasts one call.** Its `commit` gives the lease back, and so does the end of the
//!   guest call that took it ([`State::end_call`]): an uncommitted batch is dropped then, and
//!   said in the log. A guest that keeps a writer handle across calls (in a static) keeps a
//!   handle that refuses everything, never the lease: the longest another writer of the corpus
//!   waits is one call's deadline.
//! - **Bounds, charged to the caller.** Ids, texts, metadata, fields, filters and result counts
//!   have limits ([`limits`]), and vectors must have the corpus's dimension and finite floats; a
//!   writer's pending batch is held by the host for the instance, so it is charged to the store's
//!   one count of what the host holds for it ([`HostHeld`]), which with its linear memory may
//!   not exceed its memory grant, however many writers and corpora it has; what a call brings back (a `get`'s chunks, a search's or `ids`'s
//!   ids) may not exceed its `max_output`; and the corpus may not grow past its section's
//!   `max_bytes`.
//! - **An instance's own.** Every instance may open [`OWN`] (`self`) without a grant: a local
//!   corpus private to it, in the host's cache ([`CorpusGrant::own`]), with the same lease,
//!   commits and bounds. A tool whose config names no corpus keeps its index there, so there is
//!   one way an index is saved, whatever the config.
//! - **Read-only when it cannot save.** A commit that fails (a full disk, a quota) changes nothing:
//!   the corpus keeps serving its last generation, and the error says so.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};

use crate::config::{Backend, CorpusGrant, CorpusSection, Mode, OWN};
use crate::progress::ProgressLink;
use crate::{Change, Clause, CorpusError, Filter, LeaseFile, LocalCorpus, Match, Metric, Record, Shape};
use quarry_support::held::{Charge, HostHeld};

/// The interface's host bindings, generated here from the project's WIT (a world that imports it
/// alone).
#[expect(missing_docs, reason = "generated code")]
pub mod wit {
    wasmtime::component::bindgen!({
        path: "../../../wit",
        inline: "package quarry:corpus-host; world host { import quarry:retrieval/corpus@0.6.0; }",
        world: "quarry:corpus-host/host",
        with: {
            "quarry:retrieval/corpus.collection": super::CollectionHandle,
            "quarry:retrieval/corpus.writer": super::WriterHandle,
        },
        imports: { default: async | trappable },
    });
    pub use self::quarry::retrieval::corpus::*;
}

use wit::CorpusError as WitError;

/// What one call may ask for and carry.
pub mod limits {
    /// Results one search returns at most.
    pub const MAX_K: u32 = 10_000;
    /// Ids one `get`, `ids` or `remove` names or returns at most.
    pub const MAX_IDS: usize = 10_000;
    /// Bytes of a chunk id.
    pub const MAX_ID_BYTES: usize = 1024;
    /// Bytes of a chunk's text.
    pub const MAX_TEXT_BYTES: usize = 1 << 20;
    /// Bytes of a chunk's metadata, and of a corpus's notes.
    pub const MAX_METADATA_BYTES: usize = 64 << 10;
    /// Fields of a chunk, and values of all its fields together.
    pub const MAX_FIELD_VALUES: usize = 1024;
    /// Bytes of a field name or value, and of a keyword query.
    pub const MAX_VALUE_BYTES: usize = 4096;
    /// Clauses of a filter, and values of all its clauses together.
    pub const MAX_FILTER_VALUES: usize = 4096;
    /// Shapes (dimension and metric) an instance's own corpus keeps, a directory each: each may
    /// grow to the default `max_bytes`, so a component asking for shape after shape would
    /// otherwise have the host make corpora without end.
    pub const MAX_OWN_SHAPES: usize = 4;
}

use limits::*;

/// One corpus as this process has it open: shared by every store that opened it.
pub struct Shared {
    section: Arc<CorpusSection>,
    kept: Kept,
    /// Writers of this process take turns here before they take the lease (file or document).
    queue: Arc<tokio::sync::Mutex<()>>,
    /// The last readiness probe of a remote corpus: when, and what it found. Probes come from
    /// anyone who can reach `/readyz`, without a token: they share one question to the cluster
    /// a second at most.
    probed: tokio::sync::Mutex<Option<(Instant, Option<String>)>>,
}

/// Where an open corpus is kept.
enum Kept {
    /// On this host's disk, in an SQLite database, searched here.
    Local(Box<LocalCorpus>),
    /// In a Couchbase collection: searched by the cluster, nothing kept here.
    #[cfg(feature = "couchbase")]
    Couchbase(Box<crate::couchbase::CouchbaseCorpus>),
}

/// The write lease a writer holds, by backend.
enum WriteLease {
    /// Held while the file lock is (it goes with the handle).
    Local(#[allow(dead_code, reason = "held for its lock, never read")] LeaseFile),
    #[cfg(feature = "couchbase")]
    Couchbase(Box<crate::couchbase::Lease>),
}

/// The corpora open in this process, by where they are kept (a directory, a collection): a
/// corpus is opened once, however many apps and stores use it.
static OPEN: LazyLock<Mutex<HashMap<String, Weak<Shared>>>> = LazyLock::new(Default::default);

fn shape_name(s: Shape) -> String {
    let metric = match s.metric {
        Metric::Cosine => "cosine",
        Metric::Dot => "dot",
    };
    format!("{}-dimensional vectors compared by {metric}", s.dimension)
}

/// What `/metrics` says of one local corpus.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The section's name (`self` for an instance's own).
    pub name: String,
    /// Where it is kept (its directory): with the name, one series per corpus however many
    /// instances share it.
    pub place: String,
    /// What its database says.
    pub stored: crate::Stored,
}

/// The figures of every local corpus of `sections` that has a database, and of every other
/// local corpus this process has open (the instances' own), read now from each database's
/// totals through a read-only connection: a scrape never makes, locks or changes a corpus. A
/// corpus in Couchbase is left out: reading its manifest would send every scrape to the
/// cluster.
pub fn figures<'a>(sections: impl IntoIterator<Item = &'a CorpusSection>) -> Vec<Figures> {
    let own: Vec<Arc<CorpusSection>> =
        OPEN.lock().values().filter_map(Weak::upgrade).map(|s| s.section.clone()).filter(|s| s.name == OWN).collect();
    let read = |s: &CorpusSection| {
        let stored = LocalCorpus::stored(s.dir()?)?;
        Some(Figures { name: s.name.clone(), place: s.place(), stored })
    };
    let mut out: Vec<Figures> = sections.into_iter().filter_map(read).collect();
    out.extend(own.iter().filter_map(|s| read(s)));
    out.sort_by(|a, b| (&a.name, &a.place).cmp(&(&b.name, &b.place)));
    out.dedup_by(|a, b| a.place == b.place);
    out
}

/// Corpus `section` open for `shape`: the one this process already has, or opened now.
async fn open_shared(section: &Arc<CorpusSection>, shape: Shape) -> Result<Arc<Shared>, WitError> {
    let place = section.place();
    let found = {
        let mut open = OPEN.lock();
        open.retain(|_, w| w.strong_count() > 0);
        open.get(&place).and_then(Weak::upgrade)
    };
    if let Some(shared) = found {
        if shared.shape() != shape {
            return Err(WitError::Shape(format!(
                "corpus {} holds {}, not {}; use another corpus, or empty this one to rebuild it",
                section.name,
                shape_name(shared.shape()),
                shape_name(shape)
            )));
        }
        return Ok(shared);
    }
    let kept = match &section.backend {
        Backend::Local { dir } => {
            let (dir, s) = (dir.clone(), section.clone());
            let opened = tokio::task::spawn_blocking(move || {
                LocalCorpus::open(&dir, shape)
                    .map_err(|e| from_corpus(&s.name, e))
                    .map(|c| c.with_max_bytes(s.max_bytes))
            })
            .await
            .map_err(|e| WitError::Unavailable(format!("opening corpus {} failed: {e}", section.name)))??;
            for w in opened.warnings() {
                tracing::warn!(corpus = %section.name, "{w}");
            }
            Kept::Local(Box::new(opened))
        }
        #[cfg(feature = "couchbase")]
        Backend::Couchbase(t) => {
            let connection = t.resolved.clone().ok_or_else(|| {
                WitError::Unavailable(format!(
                    "corpus {}: connection {:?} was not resolved (a bug)",
                    section.name, t.connection
                ))
            })?;
            let store = quarry_couchbase::store::Store::new(connection, &t.bucket, &t.scope, &t.collection, t.timeout);
            // Boxed here and below: the SDK's futures are deep, and wasmtime's host calls nest
            // them deeper still (past the compiler's layout depth).
            let opened = Box::pin(crate::couchbase::CouchbaseCorpus::open(&section.name, store, &t.index, shape))
                .await
                .map_err(from_rag)?
                .with_max_bytes(section.max_bytes);
            Kept::Couchbase(Box::new(opened))
        }
        #[cfg(not(feature = "couchbase"))]
        Backend::Couchbase(_) => unreachable!("a host without Couchbase refuses such a section when it reads it"),
    };
    let shared = Arc::new(Shared {
        section: section.clone(),
        kept,
        queue: Arc::new(tokio::sync::Mutex::new(())),
        probed: tokio::sync::Mutex::new(None),
    });
    let mut open = OPEN.lock();
    // Another store may have opened it meanwhile: one copy per host.
    if let Some(theirs) = open.get(&place).and_then(Weak::upgrade) {
        return Ok(theirs);
    }
    open.insert(place, Arc::downgrade(&shared));
    Ok(shared)
}

/// How long a readiness probe waits for a corpus's cluster.
const PROBE_WAIT: Duration = Duration::from_secs(3);
/// A readiness probe asks a corpus's cluster at most this often; others take its answer.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Why corpus `section` cannot serve now, if this process has it open and it does not answer
/// (its manifest read) within a few seconds: for `/readyz`. A corpus no store has opened yet is
/// not asked (its instances' readiness says whether they could open it).
pub async fn unreachable(section: &CorpusSection) -> Option<String> {
    let shared = OPEN.lock().get(&section.place()).and_then(Weak::upgrade)?;
    // Held while the cluster is asked: concurrent probes wait for the one answer.
    let mut probed = shared.probed.lock().await;
    if let Some((at, found)) = &*probed
        && at.elapsed() < PROBE_EVERY
    {
        return found.clone();
    }
    let found = match tokio::time::timeout(PROBE_WAIT, shared.info()).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!("corpora.{}: {}", section.name, wit_message(&e))),
        Err(_) => Some(format!("corpora.{}: no answer within {PROBE_WAIT:?}", section.name)),
    };
    *probed = Some((Instant::now(), found.clone()));
    found
}

fn wit_message(e: &WitError) -> &str {
    match e {
        WitError::Shape(m)
        | WitError::Invalid(m)
        | WitError::Denied(m)
        | WitError::Busy(m)
        | WitError::Unavailable(m) => m,
    }
}

fn from_corpus(name: &str, e: CorpusError) -> WitError {
    match e {
        CorpusError::Io { .. } | CorpusError::Store { .. } | CorpusError::Newer { .. } | CorpusError::Index { .. } => {
            WitError::Unavailable(format!("corpus {name}: {e}"))
        }
        CorpusError::Busy { .. } | CorpusError::Stopped => WitError::Busy(e.to_string()),
        CorpusError::Shape { .. } => WitError::Shape(e.to_string()),
        CorpusError::Dimensions { .. } | CorpusError::Full { .. } => WitError::Invalid(e.to_string()),
        CorpusError::Batch(b) => from_rag(b),
    }
}

/// The `corpus` interface's error for a search's or a remote corpus's.
fn from_rag(e: rag_core::corpus::CorpusError) -> WitError {
    use rag_core::corpus::CorpusError as E;
    match e {
        E::Shape(m) => WitError::Shape(m),
        E::Invalid(m) => WitError::Invalid(m),
        E::Denied(m) => WitError::Denied(m),
        E::Busy(m) => WitError::Busy(m),
        E::Unavailable(m) => WitError::Unavailable(m),
    }
}

impl Shared {
    fn shape(&self) -> Shape {
        match &self.kept {
            Kept::Local(c) => c.shape(),
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => c.shape(),
        }
    }

    /// `read` on a snapshot of the local corpus, off the async runtime (a read is file I/O).
    async fn local<T: Send + 'static>(
        self: &Arc<Self>,
        read: impl FnOnce(&crate::Snapshot) -> Result<T, CorpusError> + Send + 'static,
    ) -> Wit<T> {
        let shared = self.clone();
        let name = self.section.name.clone();
        tokio::task::spawn_blocking(move || {
            #[allow(irrefutable_let_patterns, reason = "one backend in a host without Couchbase")]
            let Kept::Local(c) = &shared.kept else { unreachable!("called for a local corpus") };
            c.snapshot().and_then(|s| read(&s)).map_err(|e| from_corpus(&name, e))
        })
        .await
        .map_err(|e| WitError::Unavailable(format!("reading corpus {} failed: {e}", self.section.name)))?
    }

    async fn info(self: &Arc<Self>) -> Wit<crate::Info> {
        match &self.kept {
            Kept::Local(_) => self.local(|s| s.info()).await,
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => Box::pin(c.info()).await.map_err(from_rag),
        }
    }

    async fn nearest(
        self: &Arc<Self>,
        vector: &[f32],
        k: usize,
        filter: &Filter,
        deadline: Instant,
    ) -> Wit<Vec<crate::Found>> {
        match &self.kept {
            Kept::Local(_) => {
                // An unfiltered kNN scans every vector: stopped at the call's deadline.
                let (vector, filter) = (vector.to_vec(), filter.clone());
                let stop = move || Instant::now() >= deadline;
                self.local(move |s| s.nearest_until(&vector, k, &filter, &stop)).await
            }
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => Box::pin(c.nearest(vector, k, filter)).await.map_err(from_rag),
        }
    }

    async fn keyword(
        self: &Arc<Self>,
        query: &str,
        similar_to: Option<&[f32]>,
        k: usize,
        filter: &Filter,
        deadline: Instant,
    ) -> Wit<Vec<crate::Found>> {
        match &self.kept {
            Kept::Local(_) => {
                // Stopped at the call's deadline: the work ends when the call does.
                let (query, similar_to, filter) = (query.to_string(), similar_to.map(<[f32]>::to_vec), filter.clone());
                let stop = move || Instant::now() >= deadline;
                self.local(move |s| s.keyword_until(&query, similar_to.as_deref(), k, &filter, &stop)).await
            }
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => Box::pin(c.keyword(query, similar_to, k, filter)).await.map_err(from_rag),
        }
    }

    /// The chunks of `ids`, with their vectors or without (a local corpus then reads none; a
    /// Couchbase one reads its documents whole and drops them before they reach the guest).
    async fn get(self: &Arc<Self>, ids: &[String], vectors: bool) -> Wit<Vec<Option<Record>>> {
        match &self.kept {
            Kept::Local(_) => {
                let ids = ids.to_vec();
                if vectors {
                    self.local(move |s| s.get(&ids)).await
                } else {
                    self.local(move |s| s.get_without_vectors(&ids)).await
                }
            }
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => {
                let mut records = Box::pin(c.get(ids)).await.map_err(from_rag)?;
                if !vectors {
                    records.iter_mut().flatten().for_each(|r| r.vector = Vec::new());
                }
                Ok(records)
            }
        }
    }

    async fn list(self: &Arc<Self>, filter: &Filter, offset: usize, limit: usize) -> Wit<Vec<String>> {
        match &self.kept {
            Kept::Local(_) => {
                let filter = filter.clone();
                self.local(move |s| s.list(&filter, offset, limit)).await
            }
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => Box::pin(c.list(filter, offset, limit)).await.map_err(from_rag),
        }
    }
}

/// An open corpus, as a guest holds it.
pub struct CollectionHandle {
    shared: Arc<Shared>,
    writable: bool,
}

/// A writer, as a guest holds it: its batch and the lease while it may write.
pub struct WriterHandle {
    shared: Arc<Shared>,
    /// Gone at its commit, or at the end of the call that took it.
    open: Option<Batch>,
    /// Why `open` is gone.
    closed: Closed,
}

/// Why a writer may not write any more.
#[derive(Clone, Copy)]
enum Closed {
    Committed,
    CallEnded,
}

/// A writer's batch under the lease.
struct Batch {
    changes: Vec<Change>,
    notes: Option<String>,
    /// Bytes of `changes` and `notes`, held by the host for the store.
    charge: Charge,
    _queue: tokio::sync::OwnedMutexGuard<()>,
    lease: WriteLease,
}

/// One store's corpora: its grant, and the handles its guest holds.
pub struct State {
    grant: CorpusGrant,
    table: ResourceTable,
    max_output: u64,
    progress: Option<Arc<dyn ProgressLink>>,
    held: HostHeld,
}

impl State {
    /// The state for an instance granted `grant`, whose calls may bring at most `max_output`
    /// bytes back into the guest, and whose pending batches are charged to `held`.
    pub fn new(grant: &CorpusGrant, max_output: u64, held: &HostHeld) -> State {
        State { grant: grant.clone(), table: ResourceTable::new(), max_output, progress: None, held: held.clone() }
    }

    /// At the end of a guest call: every writer the call took lets its lease go, and a batch
    /// it did not commit is dropped (and said in the log). Returns the writers closed so.
    pub fn end_call(&mut self) -> usize {
        let mut closed = 0;
        for entry in self.table.iter_mut() {
            let Some(w) = entry.downcast_mut::<WriterHandle>() else { continue };
            let Some(batch) = w.open.take() else { continue };
            w.closed = Closed::CallEnded;
            closed += 1;
            if !batch.changes.is_empty() || batch.notes.is_some() {
                tracing::warn!(
                    target: "quarry::corpus",
                    corpus = %w.shared.section.name,
                    "the call ended with an uncommitted batch of {} changes ({} bytes){}: dropped, and the write lease given back",
                    batch.changes.len(),
                    batch.charge.bytes(),
                    if batch.notes.is_some() { " and notes" } else { "" }
                );
            }
        }
        closed
    }

    /// Shares the store's progress through the corpora it writes, and reports what a corpus's
    /// other writer shares while this store waits for it.
    pub fn set_progress(&mut self, link: Arc<dyn ProgressLink>) {
        self.progress = Some(link);
    }
}

/// A store's corpus state with what its calls are bounded by.
pub struct View<'a> {
    state: &'a mut State,
    deadline: Instant,
    memory: usize,
    linear: usize,
}

/// The [`View`] of a store: its corpus state, the running call's deadline (a writer waits for
/// the lease until then), the instance's memory grant in bytes and its linear memory now (what
/// the host holds for it fits beside that, within the grant).
pub fn view(state: &mut State, deadline: Instant, memory: usize, linear: usize) -> View<'_> {
    View { state, deadline, memory, linear }
}

struct HasView;

impl HasData for HasView {
    type Data<'a> = View<'a>;
}

/// Adds the `corpus` interface, served by the [`View`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> View<'_>) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasView>(l, get)
}

type Wit<T> = Result<T, WitError>;

fn invalid<T>(m: impl Into<String>) -> Wit<T> {
    Err(WitError::Invalid(m.into()))
}

fn filter(clauses: Vec<wit::Clause>) -> Wit<Filter> {
    let values: usize = clauses.iter().map(|c| c.values.len().max(1)).sum();
    if values > MAX_FILTER_VALUES {
        return invalid(format!("a filter of {values} values; at most {MAX_FILTER_VALUES}"));
    }
    if clauses.iter().any(|c| c.field.len() > MAX_VALUE_BYTES || c.values.iter().any(|v| v.len() > MAX_VALUE_BYTES)) {
        return invalid(format!("a filter value over {MAX_VALUE_BYTES} bytes"));
    }
    Ok(Filter(
        clauses
            .into_iter()
            .map(|c| Clause {
                field: c.field,
                values: c.values,
                how: match c.how {
                    wit::MatchKind::Exact => Match::Exact,
                    wit::MatchKind::Prefix => Match::Prefix,
                },
            })
            .collect(),
    ))
}

fn check_k(k: u32) -> Wit<usize> {
    if k == 0 || k > MAX_K {
        return invalid(format!("k must be within 1 and {MAX_K}, got {k}"));
    }
    Ok(k as usize)
}

fn check_ids(ids: &[String]) -> Wit<()> {
    if ids.len() > MAX_IDS {
        return invalid(format!("{} ids in one call; at most {MAX_IDS}", ids.len()));
    }
    Ok(())
}

/// A chunk as the guest gave it, checked against the limits; with its size in bytes.
fn record(c: wit::Chunk) -> Wit<(Record, u64)> {
    if c.id.is_empty() || c.id.len() > MAX_ID_BYTES {
        return invalid(format!("a chunk id must have 1 to {MAX_ID_BYTES} bytes, got {}", c.id.len()));
    }
    if c.text.len() > MAX_TEXT_BYTES {
        return invalid(format!("chunk {:?}: {} bytes of text; at most {MAX_TEXT_BYTES}", c.id, c.text.len()));
    }
    if c.metadata.len() > MAX_METADATA_BYTES {
        return invalid(format!(
            "chunk {:?}: {} bytes of metadata; at most {MAX_METADATA_BYTES}",
            c.id,
            c.metadata.len()
        ));
    }
    let values: usize = c.fields.iter().map(|f| f.values.len().max(1)).sum();
    if values > MAX_FIELD_VALUES {
        return invalid(format!("chunk {:?}: {values} field values; at most {MAX_FIELD_VALUES}", c.id));
    }
    if c.fields.iter().any(|f| f.name.len() > MAX_VALUE_BYTES || f.values.iter().any(|v| v.len() > MAX_VALUE_BYTES)) {
        return invalid(format!("chunk {:?}: a field name or value over {MAX_VALUE_BYTES} bytes", c.id));
    }
    let field_bytes: usize =
        c.fields.iter().map(|f| f.name.len() + f.values.iter().map(String::len).sum::<usize>()).sum();
    let bytes = (c.id.len() + c.text.len() + c.metadata.len() + field_bytes + c.vector.len() * 4) as u64;
    let fields = c.fields.into_iter().map(|f| (f.name, f.values)).collect();
    Ok((Record { id: c.id, text: c.text, vector: c.vector, metadata: c.metadata, fields }, bytes))
}

/// The hits of a search as the WIT returns them, if their ids fit in `max_output` (an id, a
/// score and a similarity: the id's bytes and 16).
fn answer(found: Wit<Vec<crate::Found>>, max_output: u64) -> Wit<Vec<wit::Found>> {
    let found = found?;
    fits(found.iter().map(|f| f.id.as_str()), max_output)?;
    Ok(found.into_iter().map(|f| wit::Found { id: f.id, score: f.score, similarity: f.similarity }).collect())
}

/// Whether ids `ids`, 16 bytes each beside their own, fit in `max_output`.
fn fits<'a>(ids: impl Iterator<Item = &'a str>, max_output: u64) -> Wit<()> {
    let bytes: u64 = ids.map(|id| id.len() as u64 + 16).sum();
    if bytes > max_output {
        return invalid(format!(
            "the answer would be {bytes} bytes, over this instance's max_output of {max_output}; ask for fewer"
        ));
    }
    Ok(())
}

/// Who holds a Couchbase corpus's lease: this host and process, for the operator who reads the
/// lease document.
#[cfg(feature = "couchbase")]
fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string());
    format!("{}/{}", host.unwrap_or_else(|_| "host".into()), std::process::id())
}

/// Refuses a new shape's directory `dir` of an instance's own corpus when the corpus keeps
/// [`MAX_OWN_SHAPES`] already.
fn room_for_shape(dir: &Path) -> Result<(), WitError> {
    let Some(parent) = dir.parent().filter(|_| !dir.exists()) else { return Ok(()) };
    let kept: Vec<String> = std::fs::read_dir(parent)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if kept.len() < MAX_OWN_SHAPES {
        return Ok(());
    }
    Err(WitError::Denied(format!(
        "corpus self, the instance's own, keeps vectors of {} shapes already ({}), the most it keeps; remove those of models no longer used from {}",
        kept.len(),
        kept.join(", "),
        parent.display()
    )))
}

/// How long a writer may wait for the lease: until the call's deadline, less a margin to
/// answer in.
fn lease_wait(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).saturating_sub(Duration::from_millis(250))
}

impl View<'_> {
    /// `get` and `get-without-vectors`: the chunks of `ids`, bounded by the instance's
    /// `max_output`.
    async fn chunks(
        &mut self,
        h: Resource<CollectionHandle>,
        ids: Vec<String>,
        vectors: bool,
    ) -> wasmtime::Result<Wit<Vec<Option<wit::Chunk>>>> {
        if let Err(e) = check_ids(&ids) {
            return Ok(Err(e));
        }
        let max_output = self.state.max_output;
        let shared = self.collection(&h)?.shared.clone();
        let found = match shared.get(&ids, vectors).await {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let mut out = Vec::with_capacity(ids.len());
        let mut bytes = 0u64;
        for r in found {
            let Some(r) = r else {
                out.push(None);
                continue;
            };
            bytes += (r.id.len() + r.text.len() + r.metadata.len() + r.vector.len() * 4) as u64;
            if bytes > max_output {
                return Ok(invalid(format!(
                    "these {} chunks come to over {max_output} bytes, this instance's max_output; ask for fewer at a time",
                    ids.len()
                )));
            }
            out.push(Some(wit::Chunk {
                id: r.id,
                text: r.text,
                vector: r.vector,
                metadata: r.metadata,
                fields: r.fields.into_iter().map(|(name, values)| wit::Field { name, values }).collect(),
            }));
        }
        Ok(Ok(out))
    }

    fn collection(&self, h: &Resource<CollectionHandle>) -> wasmtime::Result<&CollectionHandle> {
        Ok(self.state.table.get(h)?)
    }

    async fn open(&mut self, name: String, shape: wit::Shape) -> Wit<CollectionHandle> {
        let metric = match shape.metric {
            wit::Metric::Cosine => Metric::Cosine,
            wit::Metric::Dot => Metric::Dot,
        };
        let shape = Shape { dimension: shape.dimension as usize, metric };
        rag_core::corpus::check_shape(shape).map_err(|e| WitError::Invalid(e.to_string()))?;
        let (section, mode) = if name == OWN {
            let Some(own) = self.state.grant.own_section(shape) else {
                return Err(WitError::Denied(
                    "corpus self, the instance's own, is kept in the host's cache directory, and this host has none: set [host] cache_dir (or HOME)".into(),
                ));
            };
            if let Some(dir) = own.dir() {
                room_for_shape(dir)?;
            }
            (Arc::new(own), Mode::Rw)
        } else {
            let Some(granted) = self.state.grant.corpora.get(&name).cloned() else {
                let granted: Vec<&str> = self.state.grant.corpora.keys().map(String::as_str).collect();
                return Err(WitError::Denied(format!(
                    "corpus {} is not in this instance's grants.corpora ({}); add {{ name = \"NAME\", mode = \"rw\" }} for a [corpora.NAME] the host defines, or open the instance's own, \"self\"",
                    quarry_support::text::quoted_prefix(&name, 64),
                    if granted.is_empty() { "none".to_string() } else { granted.join(", ") }
                )));
            };
            granted
        };
        let shared = open_shared(&section, shape).await?;
        Ok(CollectionHandle { shared, writable: mode == Mode::Rw })
    }

    async fn write(&mut self, h: &Resource<CollectionHandle>) -> wasmtime::Result<Wit<WriterHandle>> {
        let c = self.collection(h)?;
        let (shared, writable) = (c.shared.clone(), c.writable);
        let name = shared.section.name.clone();
        if !writable {
            return Ok(Err(WitError::Denied(format!(
                "corpus {name} is granted read-only; grant it with mode = \"rw\" to write it"
            ))));
        }
        let wait = lease_wait(self.deadline);
        let busy = || {
            WitError::Busy(format!(
                "corpus {name} is being written by another instance or process; it did not let go within {} s",
                wait.as_secs()
            ))
        };
        let start = Instant::now();
        let Ok(queue) = tokio::time::timeout(wait, shared.queue.clone().lock_owned()).await else {
            return Ok(Err(busy()));
        };
        let lease = match &shared.kept {
            Kept::Local(_) => {
                // Another process's writer: poll its lease file until the deadline.
                let dir = shared.section.dir().map(Path::to_path_buf).unwrap_or_default();
                loop {
                    match LeaseFile::try_take(&dir) {
                        // What another process committed meanwhile is what the next read sees.
                        Ok(Some(lease)) => break WriteLease::Local(lease),
                        Ok(None) if start.elapsed() < wait => tokio::time::sleep(Duration::from_millis(50)).await,
                        Ok(None) => return Ok(Err(busy())),
                        Err(e) => return Ok(Err(from_corpus(&name, e))),
                    }
                }
            }
            #[cfg(feature = "couchbase")]
            Kept::Couchbase(c) => {
                let Backend::Couchbase(t) = &shared.section.backend else { unreachable!("kept as configured") };
                let waiting = wait.saturating_sub(start.elapsed());
                match Box::pin(c.lease_sharing(&holder(), t.lease_ttl, waiting, self.state.progress.clone())).await {
                    Ok(lease) => WriteLease::Couchbase(Box::new(lease)),
                    Err(e) => return Ok(Err(from_rag(e))),
                }
            }
        };
        let batch = Batch { changes: Vec::new(), notes: None, charge: self.state.held.charge(), _queue: queue, lease };
        Ok(Ok(WriterHandle { shared, open: Some(batch), closed: Closed::Committed }))
    }

    /// Writer `w`'s batch, or why it has none.
    fn batch(&mut self, w: &Resource<WriterHandle>) -> wasmtime::Result<Wit<&mut Batch>> {
        let w = self.state.table.get_mut(w)?;
        Ok(match (&mut w.open, w.closed) {
            (Some(b), _) => Ok(b),
            (None, Closed::Committed) => invalid("this writer has committed; take another with write"),
            (None, Closed::CallEnded) => invalid(
                "this writer was taken in an earlier call: a writer and its lease last one call; take another with write",
            ),
        })
    }

    /// Charges `bytes` more to writer `w`'s batch, within what the host may hold for the store.
    fn charge(&mut self, w: &Resource<WriterHandle>, bytes: u64) -> wasmtime::Result<Wit<()>> {
        let (memory, linear) = (self.memory, self.linear);
        let batch = match self.batch(w)? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        Ok(batch.charge.add(bytes, linear, memory).map_err(|over| {
            WitError::Invalid(format!(
                "the host would hold {} bytes of pending batches for this instance (all its writers together) beside {} bytes of its own memory, over its memory grant of {memory}; commit in smaller batches or raise grants.memory",
                over.held, over.linear
            ))
        }))
    }
}

impl wit::Host for View<'_> {}

impl wit::HostCollection for View<'_> {
    async fn open(&mut self, name: String, shape: wit::Shape) -> wasmtime::Result<Wit<Resource<CollectionHandle>>> {
        match View::open(self, name, shape).await {
            Ok(h) => Ok(Ok(self.state.table.push(h)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn info(&mut self, h: Resource<CollectionHandle>) -> wasmtime::Result<Wit<wit::Info>> {
        let shared = self.collection(&h)?.shared.clone();
        Ok(shared.info().await.map(|i| wit::Info { generation: i.generation, chunks: i.chunks, notes: i.notes }))
    }

    async fn nearest(
        &mut self,
        h: Resource<CollectionHandle>,
        vector: Vec<f32>,
        k: u32,
        clauses: Vec<wit::Clause>,
    ) -> wasmtime::Result<Wit<Vec<wit::Found>>> {
        let (k, filter) = match (check_k(k), filter(clauses)) {
            (Ok(k), Ok(f)) => (k, f),
            (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
        };
        let shared = self.collection(&h)?.shared.clone();
        Ok(answer(shared.nearest(&vector, k, &filter, self.deadline).await, self.state.max_output))
    }

    async fn keyword(
        &mut self,
        h: Resource<CollectionHandle>,
        query: String,
        similar_to: Option<Vec<f32>>,
        k: u32,
        clauses: Vec<wit::Clause>,
    ) -> wasmtime::Result<Wit<Vec<wit::Found>>> {
        if query.len() > MAX_VALUE_BYTES * 16 {
            return Ok(invalid(format!("a keyword query of {} bytes; at most {}", query.len(), MAX_VALUE_BYTES * 16)));
        }
        let (k, filter) = match (check_k(k), filter(clauses)) {
            (Ok(k), Ok(f)) => (k, f),
            (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
        };
        let shared = self.collection(&h)?.shared.clone();
        let deadline = self.deadline;
        Ok(answer(shared.keyword(&query, similar_to.as_deref(), k, &filter, deadline).await, self.state.max_output))
    }

    async fn get(
        &mut self,
        h: Resource<CollectionHandle>,
        ids: Vec<String>,
    ) -> wasmtime::Result<Wit<Vec<Option<wit::Chunk>>>> {
        self.chunks(h, ids, true).await
    }

    async fn get_without_vectors(
        &mut self,
        h: Resource<CollectionHandle>,
        ids: Vec<String>,
    ) -> wasmtime::Result<Wit<Vec<Option<wit::Chunk>>>> {
        self.chunks(h, ids, false).await
    }

    async fn ids(
        &mut self,
        h: Resource<CollectionHandle>,
        clauses: Vec<wit::Clause>,
        offset: u32,
        limit: u32,
    ) -> wasmtime::Result<Wit<Vec<String>>> {
        let filter = match filter(clauses) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let limit = (limit as usize).min(MAX_IDS);
        let shared = self.collection(&h)?.shared.clone();
        let ids = match shared.list(&filter, offset as usize, limit).await {
            Ok(ids) => ids,
            Err(e) => return Ok(Err(e)),
        };
        Ok(fits(ids.iter().map(String::as_str), self.state.max_output).map(|()| ids))
    }

    async fn write(&mut self, h: Resource<CollectionHandle>) -> wasmtime::Result<Wit<Resource<WriterHandle>>> {
        match View::write(self, &h).await? {
            Ok(w) => Ok(Ok(self.state.table.push(w)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    async fn drop(&mut self, h: Resource<CollectionHandle>) -> wasmtime::Result<()> {
        self.state.table.delete(h)?;
        Ok(())
    }
}

impl wit::HostWriter for View<'_> {
    async fn upsert(&mut self, w: Resource<WriterHandle>, chunks: Vec<wit::Chunk>) -> wasmtime::Result<Wit<()>> {
        let shared = self.state.table.get(&w)?.shared.clone();
        let mut records = Vec::with_capacity(chunks.len());
        let mut bytes = 0u64;
        for c in chunks {
            // Refused now, not at the commit: the batch so far stays good.
            let checked = record(c).and_then(|(r, n)| {
                rag_core::corpus::check_vector(shared.shape(), Some(&r.id), &r.vector).map_err(from_rag)?;
                Ok((r, n))
            });
            match checked {
                Ok((r, n)) => {
                    bytes += n;
                    records.push(r);
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        if let Err(e) = self.charge(&w, bytes)? {
            return Ok(Err(e));
        }
        if let Ok(b) = self.batch(&w)? {
            b.changes.extend(records.into_iter().map(Change::Upsert));
        }
        Ok(Ok(()))
    }

    async fn remove(&mut self, w: Resource<WriterHandle>, ids: Vec<String>) -> wasmtime::Result<Wit<()>> {
        if let Err(e) = check_ids(&ids) {
            return Ok(Err(e));
        }
        let bytes = ids.iter().map(|i| i.len() as u64 + 24).sum();
        if let Err(e) = self.charge(&w, bytes)? {
            return Ok(Err(e));
        }
        if let Ok(b) = self.batch(&w)? {
            b.changes.extend(ids.into_iter().map(Change::Remove));
        }
        Ok(Ok(()))
    }

    async fn set_notes(&mut self, w: Resource<WriterHandle>, notes: String) -> wasmtime::Result<Wit<()>> {
        if notes.len() > rag_core::corpus::MAX_NOTES_BYTES {
            return Ok(invalid(format!(
                "{} bytes of notes; a corpus's notes hold at most {} bytes: keep a record per document in its chunks' metadata, not in the notes",
                notes.len(),
                rag_core::corpus::MAX_NOTES_BYTES
            )));
        }
        if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&notes).is_err() {
            return Ok(invalid("notes must be a JSON object"));
        }
        if let Err(e) = self.charge(&w, notes.len() as u64)? {
            return Ok(Err(e));
        }
        if let Ok(b) = self.batch(&w)? {
            b.notes = Some(notes);
        }
        Ok(Ok(()))
    }

    async fn commit(&mut self, w: Resource<WriterHandle>) -> wasmtime::Result<Wit<u64>> {
        if let Err(e) = self.batch(&w)? {
            return Ok(Err(e));
        }
        let w = self.state.table.get_mut(&w)?;
        let Some(mut batch) = w.open.take() else { unreachable!("checked above") };
        w.closed = Closed::Committed;
        let (changes, notes, shared) = (std::mem::take(&mut batch.changes), batch.notes.take(), w.shared.clone());
        let name = shared.section.name.clone();
        // The lease (and the batch's charge) go when `batch` does, once the commit is over.
        match (&shared.kept, &batch.lease) {
            (Kept::Local(_), WriteLease::Local(_)) => {
                let committed = tokio::task::spawn_blocking(move || {
                    #[allow(irrefutable_let_patterns, reason = "one backend in a host without Couchbase")]
                    let Kept::Local(corpus) = &shared.kept else { unreachable!("matched above") };
                    let serving = corpus.snapshot().map(|s| s.number()).unwrap_or_default();
                    corpus.commit(changes, notes).map_err(|e| match e {
                        CorpusError::Io { .. } | CorpusError::Store { .. } => WitError::Unavailable(format!(
                            "corpus {name} cannot save ({e}); it keeps serving generation {serving} read-only: free space or raise the quota where it is kept"
                        )),
                        e => from_corpus(&name, e),
                    })
                })
                .await;
                Ok(committed.unwrap_or_else(|e| Err(WitError::Unavailable(format!("the commit failed: {e}")))))
            }
            #[cfg(feature = "couchbase")]
            (Kept::Couchbase(corpus), WriteLease::Couchbase(lease)) => {
                Ok(Box::pin(corpus.commit(lease, changes, notes)).await.map_err(|e| match e {
                    rag_core::corpus::CorpusError::Unavailable(m) => WitError::Unavailable(format!(
                        "{m}; nothing of this commit is served: readers keep the generation before it, and the next commit clears what it wrote"
                    )),
                    e => from_rag(e),
                }))
            }
            #[cfg(feature = "couchbase")]
            _ => unreachable!("a writer's lease is its corpus's kind"),
        }
    }

    async fn drop(&mut self, w: Resource<WriterHandle>) -> wasmtime::Result<()> {
        // The lease goes with it; an uncommitted batch is discarded.
        self.state.table.delete(w)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_own_corpus_keeps_a_bounded_number_of_shapes() {
        let own = tempfile::tempdir().unwrap();
        for shape in ["64-cosine", "384-cosine", "768-cosine"] {
            std::fs::create_dir(own.path().join(shape)).unwrap();
        }
        assert!(room_for_shape(&own.path().join("1024-cosine")).is_ok());
        std::fs::create_dir(own.path().join("1024-cosine")).unwrap();
        // One it keeps opens again; a fifth is refused, naming the four and where they are.
        assert!(room_for_shape(&own.path().join("384-cosine")).is_ok());
        let Err(WitError::Denied(m)) = room_for_shape(&own.path().join("384-dot")) else { panic!("a fifth shape") };
        assert!(m.contains("4 shapes") && m.contains("64-cosine") && m.contains("remove"), "{m}");
        // A corpus never opened yet (no directory at all) has room.
        assert!(room_for_shape(&own.path().join("none/64-cosine")).is_ok());
    }
}
