//! Generation files: `gen-NNNNNNNNNNNNNNNNNNNN.qcorpus` in the corpus's directory.
//!
//! Format, version [`VERSION`]: the magic `QCORPUS\0`, the version (u32 LE), the header length
//! (u64 LE), the header (JSON: the generation's number, the shape, the writers' notes, the chunks
//! without their vectors), the vectors (f32 LE, one per chunk, in order), then the SHA-256 of everything
//! before it. A file is written under a temporary name, synced, renamed into place, and the
//! directory synced; the generation before it is kept, older ones removed.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use rag_core::corpus::{Collection, Entry, Shape};

use crate::CorpusError;

const MAGIC: &[u8; 8] = b"QCORPUS\0";
/// The format this build reads and writes.
pub const VERSION: u32 = 1;
const PREFIX: &str = "gen-";
const SUFFIX: &str = ".qcorpus";

#[derive(Serialize, Deserialize)]
struct Header {
    number: u64,
    shape: Shape,
    notes: String,
    chunks: Vec<Entry>,
}

fn io(dir: &Path) -> impl Fn(std::io::Error) -> CorpusError + '_ {
    move |source| CorpusError::Io { dir: dir.to_path_buf(), source }
}

fn name(number: u64) -> String {
    format!("{PREFIX}{number:020}{SUFFIX}")
}

fn number_of(file: &str) -> Option<u64> {
    file.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// The generation numbers on disk, newest first.
pub fn numbers(dir: &Path) -> Result<Vec<u64>, CorpusError> {
    let mut out: Vec<u64> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(Result::ok)
        .filter_map(|e| number_of(&e.file_name().to_string_lossy()))
        .collect();
    out.sort_unstable_by(|a, b| b.cmp(a));
    Ok(out)
}

/// The newest generation in `dir` that checks out, and why each newer one did not.
pub fn latest(dir: &Path) -> Result<(Option<Collection>, Vec<String>), CorpusError> {
    let mut warnings = Vec::new();
    for n in numbers(dir)? {
        let path = dir.join(name(n));
        match std::fs::read(&path) {
            Ok(bytes) => match decode(&bytes) {
                Ok(stored) if stored.number() == n => return Ok((Some(stored), warnings)),
                Ok(stored) => {
                    warnings.push(format!("{}: says it is generation {}; skipped", path.display(), stored.number()))
                }
                Err(why) => warnings.push(format!("{}: {why}; skipped", path.display())),
            },
            // Removed by a writer since the listing: an older one follows.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(dir)(e)),
        }
    }
    Ok((None, warnings))
}

/// The bytes of `stored`.
pub fn encode(stored: &Collection) -> Vec<u8> {
    let header = Header {
        number: stored.number(),
        shape: stored.shape(),
        notes: stored.notes().to_string(),
        chunks: stored.entries().to_vec(),
    };
    let header = serde_json::to_vec(&header).expect("a header of strings and numbers serialises");
    let mut bytes = Vec::with_capacity(20 + header.len() + stored.vectors().len() * 4 + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&header);
    for x in stored.vectors() {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    bytes
}

/// `bytes` as a generation (its kNN index built), or what is wrong with them.
pub fn decode(bytes: &[u8]) -> Result<Collection, String> {
    if bytes.len() < 20 + 32 || &bytes[..8] != MAGIC {
        return Err("not a Quarry corpus generation".into());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("format version {version}, this build reads {VERSION}"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != sum {
        return Err("checksum mismatch (damaged or truncated)".into());
    }
    let header_len = usize::try_from(u64::from_le_bytes(body[12..20].try_into().expect("8 bytes")))
        .map_err(|_| "header length past the end".to_string())?;
    let header_end =
        20usize.checked_add(header_len).filter(|&e| e <= body.len()).ok_or("header length past the end")?;
    let header: Header = serde_json::from_slice(&body[20..header_end]).map_err(|e| format!("header: {e}"))?;
    let raw = &body[header_end..];
    let want = header.chunks.len().checked_mul(header.shape.dimension).and_then(|n| n.checked_mul(4));
    if want != Some(raw.len()) {
        return Err(format!("{} bytes of vectors for {} chunks", raw.len(), header.chunks.len()));
    }
    let vectors = raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
    if !(1..=rag_core::corpus::MAX_DIMENSION).contains(&header.shape.dimension) {
        return Err(format!("{} dimensions", header.shape.dimension));
    }
    Collection::from_parts(header.number, header.shape, header.notes, header.chunks, vectors).map_err(|e| e.to_string())
}

/// Writes `stored` as its generation's file (see the module docs), then removes generations
/// older than the one before it. Call it holding the [`WriteLock`].
pub fn write(dir: &Path, stored: &Collection) -> Result<(), CorpusError> {
    // Called under the write lock: a temporary file here is a killed writer's, never committed.
    for e in std::fs::read_dir(dir).map_err(io(dir))?.filter_map(Result::ok) {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with(&format!(".{PREFIX}")) && n.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let target = dir.join(name(stored.number()));
    let tmp = dir.join(format!(".{}.{}.tmp", name(stored.number()), std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&encode(stored))?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &target)?;
        // The rename is durable once the directory is.
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(dir)(e));
    }
    for n in numbers(dir)?.into_iter().skip(2) {
        let _ = std::fs::remove_file(dir.join(name(n)));
    }
    Ok(())
}

/// An exclusive `flock` on the directory's lock file, held until dropped: writers of one corpus,
/// in this process or another, take turns.
pub struct WriteLock {
    _file: std::fs::File,
}

impl WriteLock {
    /// Waits for the lock.
    pub fn take(dir: &Path) -> Result<WriteLock, CorpusError> {
        let path: PathBuf = dir.join(".lock");
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io(dir))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(WriteLock { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(io(dir)(e));
            }
        }
    }
}

/// The build lease across processes: an exclusive `flock` on the directory's `.lease` file,
/// held by the writer that builds (in-process writers take turns before it).
pub struct LeaseFile {
    _file: std::fs::File,
}

impl LeaseFile {
    /// Takes the lease if no other process holds it; `None` if one does.
    pub fn try_take(dir: &Path) -> Result<Option<LeaseFile>, CorpusError> {
        let path: PathBuf = dir.join(".lease");
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io(dir))?;
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Some(LeaseFile { _file: file }));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
            _ => Err(io(dir)(e)),
        }
    }
}
