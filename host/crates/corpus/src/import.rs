//! Corpora written before the SQLite store (cbf06d5 and earlier): generation files
//! `gen-NNNNNNNNNNNNNNNNNNNN.qcorpus`, read once when such a directory is opened, imported into
//! the database, then removed. Nothing here writes that format any more.
//!
//! Format version 1: the magic `QCORPUS\0`, the version (u32 LE), the header length (u64 LE),
//! the header (JSON: the generation's number, the shape, the writers' notes, the chunks without
//! their vectors), the vectors (f32 LE, one per chunk, in order), then the SHA-256 of everything
//! before it.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use rag_core::corpus::{Entry, Shape};

use crate::error::CorpusError;

const MAGIC: &[u8; 8] = b"QCORPUS\0";
const VERSION: u32 = 1;
const PREFIX: &str = "gen-";
const SUFFIX: &str = ".qcorpus";

/// One generation of the earlier format, as read.
#[derive(Deserialize)]
pub struct Generation {
    /// Its number.
    pub number: u64,
    /// Its vectors' shape.
    pub shape: Shape,
    /// Its writers' notes.
    pub notes: String,
    /// Its chunks, in order.
    pub chunks: Vec<Entry>,
    /// Their vectors, one after the other (normalised already for a cosine corpus).
    #[serde(skip)]
    pub vectors: Vec<f32>,
}

fn number_of(file: &str) -> Option<u64> {
    file.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// The earlier format's files in `dir` (generations and a killed writer's temporary files).
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, CorpusError> {
    let entries = std::fs::read_dir(dir).map_err(|source| CorpusError::Io { dir: dir.to_path_buf(), source })?;
    Ok(entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            number_of(&n).is_some() || (n.starts_with(&format!(".{PREFIX}")) && n.ends_with(".tmp"))
        })
        .map(|e| e.path())
        .collect())
}

/// What [`latest`] found: the newest generation that checks out and its file, and why each
/// newer file did not.
pub type Found = (Option<(Generation, PathBuf)>, Vec<String>);

/// The newest generation file in `dir` that checks out (and its name), and why each newer one
/// did not.
pub fn latest(dir: &Path) -> Result<Found, CorpusError> {
    let mut numbered: Vec<(u64, PathBuf)> =
        files(dir)?.into_iter().filter_map(|p| Some((number_of(&p.file_name()?.to_string_lossy())?, p))).collect();
    numbered.sort_unstable_by_key(|n| std::cmp::Reverse(n.0));
    let mut warnings = Vec::new();
    for (n, path) in numbered {
        let bytes = std::fs::read(&path).map_err(|source| CorpusError::Io { dir: dir.to_path_buf(), source })?;
        match decode(&bytes) {
            Ok(g) if g.number == n => return Ok((Some((g, path)), warnings)),
            Ok(g) => warnings.push(format!("{}: says it is generation {}; skipped", path.display(), g.number)),
            Err(why) => warnings.push(format!("{}: {why}; skipped", path.display())),
        }
    }
    Ok((None, warnings))
}

/// `bytes` as a generation, or what is wrong with them.
fn decode(bytes: &[u8]) -> Result<Generation, String> {
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
    let mut g: Generation = serde_json::from_slice(&body[20..header_end]).map_err(|e| format!("header: {e}"))?;
    if !(1..=rag_core::corpus::MAX_DIMENSION).contains(&g.shape.dimension) {
        return Err(format!("{} dimensions", g.shape.dimension));
    }
    let raw = &body[header_end..];
    let want = g.chunks.len().checked_mul(g.shape.dimension).and_then(|n| n.checked_mul(4));
    if want != Some(raw.len()) {
        return Err(format!("{} bytes of vectors for {} chunks", raw.len(), g.chunks.len()));
    }
    g.vectors = raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
    Ok(g)
}
