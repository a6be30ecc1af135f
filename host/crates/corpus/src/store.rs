//! The database a local corpus lives in: `corpus.sqlite` in its directory, and what a commit
//! does to it.
//!
//! Tables: `meta` (the shape, the generation, the notes, running totals), `chunks` (id, text,
//! metadata, fields as JSON, its BM25 length and its bytes; `n` is the order it was first added
//! in), `vectors` (`n`, f32 LE), `fields` (one row a field value, for filters) and `postings`
//! (FTS5 over each chunk's BM25 terms, for the keyword leg's postings and document
//! frequencies). A commit is one transaction touching only the rows of the chunks it changes,
//! so it costs what the change costs; WAL mode lets readers keep the state they started with
//! while it runs, and a commit killed half-way is rolled back at the next open.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, params};

use rag_core::corpus::{Change, Fields, Metric, Record, Shape, check_vector};

use crate::error::CorpusError;

/// The database's file name in the corpus's directory.
pub const DATABASE: &str = "corpus.sqlite";
/// The schema this build reads and writes.
pub const SCHEMA: i64 = 1;
/// How long a writer waits for another process's commit before it gives up (commits take
/// milliseconds; this is a stuck process's bound, not a queue).
const BUSY_WAIT: Duration = Duration::from_secs(30);

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks(
    n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, metadata TEXT NOT NULL,
    fields TEXT NOT NULL, terms INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(n INTEGER PRIMARY KEY, v BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS fields(field TEXT NOT NULL, value TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY(field, value, n)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS restated(n INTEGER PRIMARY KEY, generation INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS postings USING fts5(terms, tokenize = 'ascii', detail = full);
CREATE VIRTUAL TABLE IF NOT EXISTS postings_row USING fts5vocab(postings, row);
CREATE VIRTUAL TABLE IF NOT EXISTS postings_at USING fts5vocab(postings, instance);
";

/// The database of the corpus in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(DATABASE)
}

/// A connection to `path`, set up for this store: WAL, full sync at commit, the WAL file kept
/// between connections (so that a restart on a full disk can still read), no checkpoint at
/// close, a bounded wait for another writer.
pub fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // The last connection of a process to close would otherwise take an exclusive lock on the
    // file and checkpoint under it, fsync included: on a contended disk that took over
    // BUSY_WAIT, and another process opening the corpus then failed as busy (CI, 2026-12-07).
    // Every commit checkpoints already (passively, holding nobody up).
    c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    c.busy_timeout(BUSY_WAIT)?;
    let mode: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("journal mode {mode}, not WAL (a file system without shared memory?)")),
        ));
    }
    // 256 MiB of the file mapped: scans read pages in place rather than copying them.
    c.execute_batch("PRAGMA synchronous = FULL; PRAGMA mmap_size = 268435456; PRAGMA journal_size_limit = 4194304;")?;
    let mut persist: std::ffi::c_int = 1;
    // SAFETY: a file control on this connection's main database, given a pointer to an int
    // that outlives the call, as SQLITE_FCNTL_PERSIST_WAL asks.
    unsafe {
        rusqlite::ffi::sqlite3_file_control(
            c.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut persist).cast(),
        );
    }
    Ok(c)
}

/// A read-only connection to `path` (`/metrics`, a test's look at the generation): it makes,
/// locks and changes nothing, and, like [`connect`]'s, does not checkpoint when it closes.
pub fn connect_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let c = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    Ok(c)
}

/// Whether `e` says the file is not a database this build can read (a damaged file).
pub fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt))
}

/// The corpus's error for a failed database call: a full disk or another I/O failure as
/// [`CorpusError::Io`] (the last commit keeps serving), the rest as [`CorpusError::Store`].
pub fn error(dir: &Path, e: rusqlite::Error) -> CorpusError {
    let io = |source| CorpusError::Io { dir: dir.to_path_buf(), source };
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull) => io(std::io::Error::from_raw_os_error(libc::ENOSPC)),
        Some(rusqlite::ErrorCode::SystemIoFailure | rusqlite::ErrorCode::CannotOpen) => {
            io(std::io::Error::other(e.to_string()))
        }
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            CorpusError::Busy { dir: dir.to_path_buf(), waited: BUSY_WAIT }
        }
        _ => CorpusError::Store { dir: dir.to_path_buf(), source: e },
    }
}

/// What `meta` holds besides the notes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// The committed generation.
    pub generation: u64,
    /// Chunks held.
    pub chunks: u64,
    /// BM25 terms over every chunk (their lengths' sum).
    pub terms: u64,
    /// The chunks' bytes (ids, texts, metadata, fields, vectors), the notes not counted.
    pub bytes: u64,
    /// The database's own number, drawn when it was made: a nearest-neighbour graph built from it
    /// names its chunks, never those of a database made again in the same directory.
    pub epoch: u64,
    /// When the last commit was made (seconds since the Unix epoch); 0 before the first, or for
    /// a corpus whose last commit an earlier version made.
    pub committed_at: u64,
}

fn meta_u64(c: &Connection, key: &str) -> rusqlite::Result<u64> {
    let v: Option<i64> = c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()?;
    Ok(v.unwrap_or(0).max(0) as u64)
}

fn set_meta(c: &Connection, key: &str, value: impl rusqlite::ToSql) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
}

/// The totals as of the transaction `c` is in.
pub fn totals(c: &Connection) -> rusqlite::Result<Totals> {
    Ok(Totals {
        generation: meta_u64(c, "generation")?,
        chunks: meta_u64(c, "chunks")?,
        terms: meta_u64(c, "terms")?,
        bytes: meta_u64(c, "bytes")?,
        epoch: meta_u64(c, "epoch")?,
        committed_at: meta_u64(c, "committed_at")?,
    })
}

/// The notes as of the transaction `c` is in.
pub fn notes(c: &Connection) -> rusqlite::Result<String> {
    Ok(c.query_row("SELECT value FROM meta WHERE key = 'notes'", [], |r| r.get(0))
        .optional()?
        .unwrap_or_else(|| "{}".into()))
}

/// The stored shape, if the database has one yet.
pub fn stored_shape(c: &Connection) -> rusqlite::Result<Option<Shape>> {
    let has_meta: bool =
        c.query_row("SELECT count(*) FROM sqlite_master WHERE name = 'meta'", [], |r| r.get::<_, i64>(0))? > 0;
    if !has_meta {
        return Ok(None);
    }
    let dimension: Option<i64> =
        c.query_row("SELECT value FROM meta WHERE key = 'dimension'", [], |r| r.get(0)).optional()?;
    let metric: Option<String> =
        c.query_row("SELECT value FROM meta WHERE key = 'metric'", [], |r| r.get(0)).optional()?;
    Ok(match (dimension, metric.as_deref()) {
        (Some(d), Some("cosine")) => Some(Shape { dimension: d as usize, metric: Metric::Cosine }),
        (Some(d), Some("dot")) => Some(Shape { dimension: d as usize, metric: Metric::Dot }),
        _ => None,
    })
}

/// Makes the tables and stores `shape` (a new corpus): in the caller's transaction.
pub fn create(tx: &Transaction<'_>, shape: Shape) -> rusqlite::Result<()> {
    tx.execute_batch(TABLES)?;
    set_meta(tx, "schema", SCHEMA)?;
    set_meta(tx, "dimension", shape.dimension as i64)?;
    set_meta(
        tx,
        "metric",
        match shape.metric {
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
        },
    )?;
    ensure_epoch(tx)
}

/// Brings a database made before the nearest-neighbour graph (no epoch) up to this build's
/// tables: its epoch drawn, `restated` made. Schema 1 still: a build before reads it as it was.
pub fn upgrade(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch("CREATE TABLE IF NOT EXISTS restated(n INTEGER PRIMARY KEY, generation INTEGER NOT NULL);")?;
    ensure_epoch(c)
}

/// Draws the database's epoch ([`Totals::epoch`]) if it has none (made before there was one).
fn ensure_epoch(c: &Connection) -> rusqlite::Result<()> {
    use sha2::Digest;
    if meta_u64(c, "epoch")? != 0 {
        return Ok(());
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seed = format!("{}:{}:{:p}", now.as_nanos(), std::process::id(), c);
    let h = sha2::Sha256::digest(seed.as_bytes());
    // Positive as an SQLite integer, never 0 (which reads as "none").
    let epoch = (u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) >> 2).max(1);
    set_meta(c, "epoch", epoch as i64)
}

/// The schema version a database says it has (0 before [`create`]).
pub fn schema(c: &Connection) -> rusqlite::Result<i64> {
    Ok(meta_u64(c, "schema")? as i64)
}

/// A term as the `postings` table's `ascii` tokenizer keeps it whole: ASCII letters and digits
/// are its token characters and every other ASCII character a separator, so an ASCII mark
/// inside a term (`don't`, `3.14`) is moved to the private-use area; other characters are
/// token characters already. One term is one token, so FTS5's counts are BM25's.
pub fn token(term: &str) -> String {
    term.chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_alphanumeric() { char::from_u32(0xE000 + c as u32).unwrap_or(c) } else { c }
        })
        .collect()
}

/// The bytes a chunk counts for against `max_bytes`: id, text, metadata, fields and vector.
pub fn record_bytes(r: &Record) -> u64 {
    let fields: usize = r.fields.iter().map(|(k, v)| k.len() + v.iter().map(String::len).sum::<usize>()).sum();
    (r.id.len() + r.text.len() + r.metadata.len() + fields + r.vector.len() * 4) as u64
}

/// A batch as its final state per id, in the order the ids were first upserted (an id only
/// removed comes where it was first named): applying changes one after another and applying
/// this give the same corpus.
fn collapse(changes: Vec<Change>) -> Vec<(String, Option<Record>)> {
    let mut order: HashMap<String, (usize, usize)> = HashMap::new();
    let mut last: Vec<Option<Change>> = Vec::with_capacity(changes.len());
    for (i, c) in changes.into_iter().enumerate() {
        let (id, upsert) = match &c {
            Change::Upsert(r) => (r.id.clone(), true),
            Change::Remove(id) => (id.clone(), false),
        };
        let e = order.entry(id).or_insert((usize::MAX, i));
        if upsert && e.0 == usize::MAX {
            e.0 = i;
        }
        if let Some(prev) = last.get_mut(e.1) {
            *prev = None;
        }
        e.1 = i;
        last.push(Some(c));
    }
    let mut out: Vec<(usize, String, Option<Record>)> = order
        .into_iter()
        .filter_map(|(id, (first_upsert, at))| {
            let c = last.get_mut(at)?.take()?;
            let rank = if first_upsert == usize::MAX { at } else { first_upsert };
            Some((
                rank,
                id,
                match c {
                    Change::Upsert(r) => Some(r),
                    Change::Remove(_) => None,
                },
            ))
        })
        .collect();
    out.sort_by_key(|(rank, _, _)| *rank);
    out.into_iter().map(|(_, id, r)| (id, r)).collect()
}

/// A stored chunk's row, as a change needs it.
struct Stored {
    n: i64,
    fields: Fields,
    terms: u64,
    bytes: u64,
}

fn stored(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<Option<Stored>> {
    tx.prepare_cached("SELECT n, fields, terms, bytes FROM chunks WHERE id = ?1")?
        .query_row([id], |r| {
            let fields: String = r.get(1)?;
            Ok(Stored {
                n: r.get(0)?,
                fields: serde_json::from_str(&fields).unwrap_or_default(),
                terms: r.get::<_, i64>(2)? as u64,
                bytes: r.get::<_, i64>(3)? as u64,
            })
        })
        .optional()
}

fn forget(tx: &Transaction<'_>, s: &Stored, keep_row: bool) -> rusqlite::Result<()> {
    let mut field = tx.prepare_cached("DELETE FROM fields WHERE field = ?1 AND value = ?2 AND n = ?3")?;
    for (k, values) in &s.fields {
        for v in values {
            field.execute(params![k, v, s.n])?;
        }
    }
    tx.prepare_cached("DELETE FROM postings WHERE rowid = ?1")?.execute([s.n])?;
    if !keep_row {
        tx.prepare_cached("DELETE FROM vectors WHERE n = ?1")?.execute([s.n])?;
        tx.prepare_cached("DELETE FROM chunks WHERE n = ?1")?.execute([s.n])?;
        tx.prepare_cached("DELETE FROM restated WHERE n = ?1")?.execute([s.n])?;
    }
    Ok(())
}

/// A stored vector's floats (f32 LE), into `into`.
pub fn read_vector(bytes: &[u8], into: &mut Vec<f32>) {
    into.clear();
    into.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
}

/// The vector as stored: f32 LE, normalised first for a cosine corpus.
pub fn vector_bytes(shape: Shape, v: Vec<f32>) -> Vec<u8> {
    shape.comparable(v).iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Where [`put`] writes a chunk.
enum Row {
    /// A new row, numbered.
    New(i64),
    /// The row of the chunk it replaces (its number, so its place in the order chunks were
    /// first added, is kept), in the generation being made.
    Replacing(i64, u64),
}

/// Writes `r` at `row`; returns its BM25 length.
fn put(tx: &Transaction<'_>, shape: Shape, r: Record, row: Row, bytes: u64) -> rusqlite::Result<u64> {
    let terms = rag_core::bm25::terms(&r.text);
    let tokens = terms.iter().map(|t| token(t)).collect::<Vec<_>>().join(" ");
    let fields = serde_json::to_string(&r.fields).expect("strings serialise");
    let len = terms.len() as i64;
    let v = vector_bytes(shape, r.vector);
    let n = match row {
        Row::Replacing(n, generation) => {
            tx.prepare_cached(
                "UPDATE chunks SET text = ?2, metadata = ?3, fields = ?4, terms = ?5, bytes = ?6 WHERE n = ?1",
            )?
            .execute(params![n, r.text, r.metadata, fields, len, bytes as i64])?;
            let old: Vec<u8> = tx.prepare_cached("SELECT v FROM vectors WHERE n = ?1")?.query_row([n], |r| r.get(0))?;
            if old != v {
                tx.prepare_cached("UPDATE vectors SET v = ?2 WHERE n = ?1")?.execute(params![n, v])?;
                // A graph built before holds the old vector under this number: searches score
                // it from the table until the next graph has it (the graph's module, `ann`).
                tx.prepare_cached("INSERT OR REPLACE INTO restated(n, generation) VALUES (?1, ?2)")?
                    .execute(params![n, generation as i64])?;
            }
            n
        }
        Row::New(n) => {
            tx.prepare_cached(
                "INSERT INTO chunks(n, id, text, metadata, fields, terms, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![n, r.id, r.text, r.metadata, fields, len, bytes as i64])?;
            tx.prepare_cached("INSERT INTO vectors(n, v) VALUES (?1, ?2)")?.execute(params![n, v])?;
            n
        }
    };
    tx.prepare_cached("INSERT INTO postings(rowid, terms) VALUES (?1, ?2)")?.execute(params![n, tokens])?;
    let mut field = tx.prepare_cached("INSERT OR IGNORE INTO fields(field, value, n) VALUES (?1, ?2, ?3)")?;
    for (k, values) in &r.fields {
        for v in values {
            field.execute(params![k, v, n])?;
        }
    }
    Ok(terms.len() as u64)
}

/// The number the next new chunk gets: past every number ever given (`meta`'s `next`), not
/// only past those still stored, so that a number is never given twice.
fn next_number(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    let stored: i64 = tx.query_row("SELECT coalesce(max(n), 0) + 1 FROM chunks", [], |r| r.get(0))?;
    Ok((meta_u64(tx, "next")? as i64).max(stored))
}

/// What [`apply`] leaves for the caller to check before it commits.
pub struct Applied {
    /// The totals after the batch, the generation one more.
    pub totals: Totals,
    /// The notes' bytes after the batch.
    pub notes_bytes: u64,
}

/// Applies `changes` and `notes` in transaction `tx` (vectors checked against `shape` first,
/// before anything is written), one generation on.
pub fn apply(
    tx: &Transaction<'_>,
    shape: Shape,
    changes: Vec<Change>,
    notes: Option<String>,
) -> Result<Applied, ApplyError> {
    for c in &changes {
        if let Change::Upsert(r) = c {
            check_vector(shape, Some(&r.id), &r.vector).map_err(ApplyError::Batch)?;
        }
    }
    let mut t = totals(tx)?;
    let mut next = next_number(tx)?;
    for (id, change) in collapse(changes) {
        let old = stored(tx, &id)?;
        if let Some(s) = &old {
            forget(tx, s, change.is_some())?;
            t.chunks -= 1;
            t.terms -= s.terms;
            t.bytes -= s.bytes;
        }
        if let Some(r) = change {
            let bytes = record_bytes(&r);
            let row = match &old {
                Some(s) => Row::Replacing(s.n, t.generation + 1),
                None => {
                    next += 1;
                    Row::New(next - 1)
                }
            };
            t.terms += put(tx, shape, r, row, bytes)?;
            t.chunks += 1;
            t.bytes += bytes;
        }
    }
    if let Some(notes) = &notes {
        set_meta(tx, "notes", notes)?;
    }
    t.generation += 1;
    set_meta(tx, "next", next)?;
    set_meta(tx, "generation", t.generation as i64)?;
    set_meta(tx, "chunks", t.chunks as i64)?;
    set_meta(tx, "terms", t.terms as i64)?;
    set_meta(tx, "bytes", t.bytes as i64)?;
    // For operators (`/metrics`): how long ago this corpus last changed.
    t.committed_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    set_meta(tx, "committed_at", t.committed_at as i64)?;
    let notes_bytes = match notes {
        Some(n) => n.len() as u64,
        None => self::notes(tx)?.len() as u64,
    };
    Ok(Applied { totals: t, notes_bytes })
}

/// Why [`apply`] failed.
pub enum ApplyError {
    /// A chunk the corpus cannot take.
    Batch(rag_core::corpus::CorpusError),
    /// The database failed.
    Store(rusqlite::Error),
}

impl From<rusqlite::Error> for ApplyError {
    fn from(e: rusqlite::Error) -> Self {
        ApplyError::Store(e)
    }
}

/// Sets the generation (an import keeps the number the corpus had).
pub fn set_generation(tx: &Transaction<'_>, generation: u64) -> rusqlite::Result<()> {
    set_meta(tx, "generation", generation as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: &str, text: &str) -> Change {
        Change::Upsert(Record {
            id: id.into(),
            text: text.into(),
            vector: vec![1.0],
            metadata: "{}".into(),
            fields: Fields::new(),
        })
    }

    #[test]
    fn a_batch_collapses_to_each_ids_last_change_in_first_upsert_order() {
        let c = collapse(vec![
            Change::Remove("x".into()),
            up("y", "1"),
            up("x", "2"),
            up("y", "3"),
            up("z", "4"),
            Change::Remove("z".into()),
        ]);
        let got: Vec<(String, Option<String>)> = c.into_iter().map(|(id, r)| (id, r.map(|r| r.text))).collect();
        assert_eq!(
            got,
            [
                ("y".to_string(), Some("3".to_string())),
                ("x".to_string(), Some("2".to_string())),
                ("z".to_string(), None)
            ]
        );
    }

    /// A connection closing leaves the WAL as it is (PERSIST_WAL and journal_size_limit would
    /// truncate it at a checkpoint at close): the close took no exclusive lock that another
    /// process's open would wait on.
    #[test]
    fn a_closing_connection_does_not_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let db = path(dir.path());
        let c = connect(&db).unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
        drop(c);
        let wal = std::fs::metadata(dir.path().join(format!("{DATABASE}-wal"))).unwrap().len();
        assert!(wal > 0, "the WAL was checkpointed and truncated at close");
        let c = connect(&db).unwrap();
        assert_eq!(c.query_row("SELECT x FROM t", [], |r| r.get::<_, i64>(0)).unwrap(), 1);
    }

    #[test]
    fn a_term_is_one_ascii_token() {
        assert_eq!(token("rclone"), "rclone");
        assert!(token("don't").chars().all(|c| c.is_ascii_alphanumeric() || !c.is_ascii()));
        assert_eq!(token("数据").chars().count(), 2);
    }
}
