//! Where onnxruntime's shared library is, for `[models.NAME] backend = "onnxruntime"`: the one
//! the operator names (`[host] onnxruntime = { library = "…" }`, else `$QUARRY_ONNXRUNTIME`),
//! else an onnxruntime wheel in the venv quarry itself is installed in (`pip install
//! quarry-wasm onnxruntime`), else the pinned onnxruntime wheel that `make models` installs
//! beside the models (`${QUARRY_MODELS:-~/.cache/quarry/models}/.venv`). Nothing is downloaded, at build time or
//! at run time. Which version it is, is checked when a model first loads (`onnxruntime.rs`).

use std::path::{Path, PathBuf};

/// The environment variable that names the library.
pub const ENV: &str = "QUARRY_ONNXRUNTIME";

/// What to do when no library is found.
pub const INSTALL: &str = "`pip install onnxruntime` into quarry's venv, or run `make models` (it installs the pinned onnxruntime wheel beside the models), or name the library: [host] onnxruntime = { library = \"/path/to/libonnxruntime.so\" }, or QUARRY_ONNXRUNTIME=/path/to/libonnxruntime.so";

/// The library to load: `configured` (the `[host]` entry, resolved), else `$QUARRY_ONNXRUNTIME`,
/// else the models' venv; or where it looked and what to do.
pub fn locate(configured: Option<PathBuf>) -> Result<PathBuf, String> {
    let named = |path: PathBuf, by: &str| {
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("onnxruntime's library {} (named by {by}) does not exist; {INSTALL}", path.display()))
        }
    };
    if let Some(path) = configured {
        return named(path, "[host] onnxruntime.library");
    }
    if let Some(path) = std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        return named(PathBuf::from(path), ENV);
    }
    // Installed from a wheel: `pip install onnxruntime` beside quarry puts the library in the
    // same venv (<venv>/bin/quarry, <venv>/lib/python3.*/site-packages/onnxruntime/capi).
    if let Some(path) =
        std::env::current_exe().ok().as_deref().and_then(Path::parent).and_then(Path::parent).and_then(in_venv)
    {
        return Ok(path);
    }
    let models = std::env::var_os("QUARRY_MODELS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/quarry/models")));
    let venv = models.map(|m| m.join(".venv"));
    match venv.as_deref().and_then(in_venv) {
        Some(path) => Ok(path),
        None => Err(format!(
            "onnxruntime's library was not found ([host] onnxruntime.library and {ENV} are unset, and neither quarry's venv nor {} holds an onnxruntime wheel); {INSTALL}",
            venv.map_or_else(|| "the models' venv".to_string(), |v| v.display().to_string())
        )),
    }
}

/// `libonnxruntime.so.X.Y.Z` in a venv's onnxruntime wheel (`lib/python3.*/site-packages/
/// onnxruntime/capi/`), the highest version when there are several.
fn in_venv(venv: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|py| py.path().join("site-packages/onnxruntime/capi"))
        .filter_map(|capi| std::fs::read_dir(capi).ok())
        .flat_map(|d| d.flatten().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libonnxruntime.so.")))
        .collect();
    found.sort_by_key(|p| version_of(p));
    found.pop()
}

/// The version numbers in a library's file name (`libonnxruntime.so.1.32.0` → [1, 32, 0]).
fn version_of(path: &Path) -> Vec<u32> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.trim_start_matches("libonnxruntime.so.").split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_library_of_a_venv_wheel() {
        let venv = tempfile::tempdir().unwrap();
        assert_eq!(in_venv(venv.path()), None);
        let capi = venv.path().join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        for v in ["1.9.0", "1.32.0", "1.20.1"] {
            std::fs::write(capi.join(format!("libonnxruntime.so.{v}")), b"").unwrap();
        }
        std::fs::write(capi.join("libonnxruntime_providers_shared.so"), b"").unwrap();
        assert_eq!(in_venv(venv.path()), Some(capi.join("libonnxruntime.so.1.32.0")));
    }

    #[test]
    fn a_named_library_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libonnxruntime.so");
        let e = locate(Some(lib.clone())).unwrap_err();
        assert!(
            e.contains("libonnxruntime.so") && e.contains("[host] onnxruntime.library") && e.contains("make models"),
            "{e}"
        );
        std::fs::write(&lib, b"").unwrap();
        assert_eq!(locate(Some(lib.clone())), Ok(lib));
    }
}
