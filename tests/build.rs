//! Builds the guest fixtures in `components/` (and the real components the tests load) for wasm32-wasip2 and exposes
//! their paths as `QUARRY_FIXTURE_<NAME>` env constants. Guests live in their
//! own target directory, `<target>/guest`, shared with `make components`: the
//! nested cargo must not wait on the outer build's lock, and a component is
//! built once for the demo and the tests.

use std::path::PathBuf;
use std::process::Command;

/// The guests that build to a `.wasm` (kinds `wasm` and `both`) from components/guests.txt, the
/// one list the Makefile reads too.
fn fixtures(root: &std::path::Path) -> Vec<String> {
    let list = root.join("components/guests.txt");
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| panic!("cannot read {}: {e}", list.display()));
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (name, kind) = (words.next()?, words.next()?);
            let is_crate = name.starts_with(|c: char| c.is_ascii_lowercase());
            (is_crate && matches!(kind, "wasm" | "both")).then(|| name.to_string())
        })
        .collect()
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.parent().expect("tests/ is inside the workspace").to_path_buf();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { root.join(d) })
        .unwrap_or_else(|| root.join("target"))
        .join("guest");
    let fixtures = fixtures(&root);
    // Only what a guest is built from: each crate's sources and manifest (not a component's
    // README, its crew's Python or its model scripts), the WIT, the guest list, the workspace's
    // manifest (its profiles) and lock file.
    for dir in [root.join("components"), manifest.join("components")] {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for part in ["src", "Cargo.toml"] {
                let path = entry.path().join(part);
                if path.exists() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
    }
    for path in ["wit", "components/guests.txt", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    // The guests' rustflags (simd128, relaxed-simd) live here.
    println!("cargo:rerun-if-changed={}", root.join(".cargo/config.toml").display());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).args(["build", "--release", "--target", "wasm32-wasip2", "--target-dir"]).arg(&target_dir);
    for f in &fixtures {
        cmd.args(["-p", f]);
    }
    // The outer build's flags and profile settings are for the host, not the guests.
    for var in
        ["CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET"]
    {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("cannot run cargo to build the test components");
    if !status.success() {
        panic!(
            "building the test components for wasm32-wasip2 failed; if the target is missing, run `rustup target add wasm32-wasip2` (`make setup` does)"
        );
    }
    for f in &fixtures {
        let wasm = target_dir.join("wasm32-wasip2").join("release").join(format!("{}.wasm", f.replace('-', "_")));
        assert!(wasm.is_file(), "{} was not built", wasm.display());
        println!("cargo:rustc-env=QUARRY_FIXTURE_{}={}", f.replace('-', "_").to_uppercase(), wasm.display());
    }
}
