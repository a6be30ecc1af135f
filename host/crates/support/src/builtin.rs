//! `builtin:NAME`: the components and models an installed quarry carries, named without a path.
//!
//! The wheel (`make wheel`) installs `quarry` into `<prefix>/bin/` and its components and model
//! into `<prefix>/share/quarry/{components,models}/`, so they are found from the running
//! executable, wherever the environment is. A source build finds its own: the guests that
//! `make components` builds beside the host (`target/guest/wasm32-wasip2/release`), the models
//! that `make models` converts (`~/.cache/quarry/models`). `$QUARRY_COMPONENTS` and
//! `$QUARRY_MODELS` come first when set.

use std::path::{Path, PathBuf};

/// The prefix of a built-in name in the config (`component = "builtin:chapter-rag"`).
pub const PREFIX: &str = "builtin:";

/// What a built-in name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A component file, `NAME.wasm`.
    Component,
    /// A model directory (`model.onnx`, `tokenizer.json`, `quarry-model.json`).
    Model,
}

/// `NAME` of `builtin:NAME`, when `value` is one.
pub fn name_of(value: &Path) -> Option<&str> {
    value.to_str()?.strip_prefix(PREFIX)
}

/// Where `builtin:NAME` may be, in the order they are tried.
pub fn candidates(kind: Kind, name: &str) -> Vec<PathBuf> {
    let var = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    // <prefix>/bin/quarry -> <prefix>; target/<profile>/quarry -> target.
    let exe = std::env::current_exe().ok().and_then(|e| e.canonicalize().ok());
    let up = exe.as_deref().and_then(Path::parent).and_then(Path::parent);
    let mut out = Vec::new();
    match kind {
        Kind::Component => {
            let file = format!("{name}.wasm");
            // Cargo names a guest's file after its crate, with underscores.
            let cargo_file = format!("{}.wasm", name.replace('-', "_"));
            if let Some(d) = var("QUARRY_COMPONENTS") {
                out.push(d.join(&file));
                out.push(d.join(&cargo_file));
            }
            if let Some(up) = up {
                out.push(up.join("share/quarry/components").join(&file));
                out.push(up.join("guest/wasm32-wasip2/release").join(&cargo_file));
            }
        }
        Kind::Model => {
            if let Some(d) = var("QUARRY_MODELS") {
                out.push(d.join(name));
            }
            if let Some(up) = up {
                out.push(up.join("share/quarry/models").join(name));
            }
            if let Some(home) = var("HOME") {
                out.push(home.join(".cache/quarry/models").join(name));
            }
        }
    }
    out
}

/// The first place `builtin:NAME` is, or why it is nowhere: the places looked in, and how to
/// get it.
pub fn resolve(kind: Kind, name: &str) -> Result<PathBuf, String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!(
            "{PREFIX}{name:?} is not a built-in name: use letters, digits, `-` and `_` (builtin:chapter-rag), or a path"
        ));
    }
    let places = candidates(kind, name);
    let found = places.iter().find(|p| match kind {
        Kind::Component => p.is_file(),
        Kind::Model => p.join("model.onnx").is_file(),
    });
    if let Some(p) = found {
        return Ok(p.clone());
    }
    let looked: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    // What works: the wheels are not on PyPI, and a quarry copied out of its build tree finds
    // nothing beside it.
    let how = match kind {
        Kind::Component => {
            "an installed quarry carries chapter-rag, docx-search, embedder-onnx, bedrock-kb and couchbase-search in <prefix>/share/quarry/components (the quarry-wasm wheel `make wheel` builds, or `make install PREFIX=DIR` from source); one run where it was built finds what `make components` built (`make demo` builds chapter-rag and embedder-onnx only); a quarry copied elsewhere finds none: install it with `make install`, set $QUARRY_COMPONENTS to the folder of the .wasm files, or give the component's path"
        }
        Kind::Model => {
            "from source, `make models` converts the models into ~/.cache/quarry/models (`make install` copies them beside an installed quarry); the quarry-wasm-minilm wheel `make wheel` builds carries all-minilm-l6-v2 (the wheels are not on PyPI); or set $QUARRY_MODELS to a folder of models, or give the model's path"
        }
    };
    Err(format!("no built-in {name:?} (looked in {}); {how}", looked.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_a_path_in_it_is_refused() {
        for bad in ["", "../x", "a/b", "x.wasm"] {
            let e = resolve(Kind::Component, bad).unwrap_err();
            assert!(e.contains("not a built-in name"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_missing_name_says_where_it_looked_and_how_to_get_it() {
        let e = resolve(Kind::Model, "no-such-model").unwrap_err();
        assert!(e.contains("no built-in \"no-such-model\"") && e.contains("make models"), "{e}");
        assert!(e.contains("share/quarry/models/no-such-model"), "{e}");
        assert!(!e.contains("pip install"), "the wheels are not on PyPI: {e}");
        let e = resolve(Kind::Component, "no-such-tool").unwrap_err();
        assert!(e.contains("share/quarry/components/no-such-tool.wasm") && e.contains("make install"), "{e}");
        assert!(e.contains("$QUARRY_COMPONENTS"), "{e}");
    }

    #[test]
    fn names_resolve_from_the_installed_layout() {
        assert_eq!(name_of(Path::new("builtin:chapter-rag")), Some("chapter-rag"));
        assert_eq!(name_of(Path::new("plugins/x.wasm")), None);
        // The test binary is target/<profile>/deps/NAME: its installed layout is target/<profile>.
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        let want = exe.parent().unwrap().parent().unwrap().join("share/quarry/components/x.wasm");
        assert!(candidates(Kind::Component, "x").contains(&want));
    }
}
