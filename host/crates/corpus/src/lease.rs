//! The build lease across processes: an exclusive `flock` on the corpus directory's `.lease`
//! file, held by the writer that builds (in-process writers take turns before it).

use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::CorpusError;

/// The lease, held until dropped.
pub struct LeaseFile {
    _file: std::fs::File,
}

impl LeaseFile {
    /// Takes the lease if no other process holds it; `None` if one does.
    pub fn try_take(dir: &Path) -> Result<Option<LeaseFile>, CorpusError> {
        let io = |source| CorpusError::Io { dir: dir.to_path_buf(), source };
        let path = dir.join(".lease");
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Some(LeaseFile { _file: file }));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
            _ => Err(io(e)),
        }
    }
}
