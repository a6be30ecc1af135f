//! `quarry.lock`, beside the config: the digest each tag resolved to, so that a restart never
//! follows a moved tag silently. `quarry pull` moves them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::OciError;

/// The lock file's name, beside the config.
pub const LOCK_FILE: &str = "quarry.lock";

/// The tags' digests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// `oci://…:TAG` → `sha256:…`.
    #[serde(default)]
    pub components: BTreeMap<String, String>,
}

impl Lock {
    /// The lock beside the config at `config`.
    pub fn path_for(config: &Path) -> PathBuf {
        config.with_file_name(LOCK_FILE)
    }

    /// Reads the lock at `path`; none yet is an empty lock.
    pub fn load(path: &Path) -> Result<Lock, OciError> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .map_err(|e| OciError::Cache(format!("{}: {e}; delete it to resolve the tags again", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lock::default()),
            Err(e) => Err(OciError::Cache(format!("{}: {e}", path.display()))),
        }
    }

    /// Writes the lock at `path`, whole or not at all.
    pub fn save(&self, path: &Path) -> Result<(), OciError> {
        let body = toml::to_string(self).map_err(|e| OciError::Cache(e.to_string()))?;
        let text = format!(
            "# The digests the tags in {} resolved to: what runs. `quarry pull` moves them.\n{body}",
            path.with_file_name("quarry.toml")
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        let tmp = path.with_extension("lock.tmp-new");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| OciError::Cache(format!("{}: {e}", path.display())))
    }
}
