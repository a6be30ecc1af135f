//! What `quarry --version` prints besides the crate's version: the WIT package version (read
//! from wit/retrieval.wit) and the git commit the host was built from (`unknown` outside a git
//! checkout, unless `QUARRY_GIT_COMMIT` says it, as a build from a source archive may).

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

fn main() {
    // Read when the script runs, not baked in when it is compiled: cargo reuses a compiled build
    // script for a checkout at another path (its artifacts are keyed relative to the workspace),
    // and the baked path would name the other checkout's WIT file and commit.
    let here = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let here = here.as_path();
    let wit = here.join("../wit/retrieval.wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    let text = std::fs::read_to_string(&wit).expect("wit/retrieval.wit");
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package quarry:retrieval@")?.strip_suffix(';').map(str::to_string))
        .expect("wit/retrieval.wit starts with `package quarry:retrieval@VERSION;`");
    println!("cargo:rustc-env=QUARRY_WIT_VERSION={version}");

    println!("cargo:rerun-if-env-changed=QUARRY_GIT_COMMIT");
    let commit = std::env::var("QUARRY_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        // Rerun when HEAD moves: HEAD itself (a checkout) and the branch it points to (a commit).
        if let Some(git_dir) = git(here, &["rev-parse", "--absolute-git-dir"]) {
            let git_dir = Path::new(&git_dir);
            println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
            if let Some(branch) = git(here, &["symbolic-ref", "-q", "HEAD"]) {
                println!("cargo:rerun-if-changed={}", git_dir.join(branch).display());
            }
            // Only if it is there: a missing file makes cargo run this script at every build.
            let packed = git_dir.join("packed-refs");
            if packed.exists() {
                println!("cargo:rerun-if-changed={}", packed.display());
            }
        }
        git(here, &["rev-parse", "--short=12", "HEAD"])
    });
    println!("cargo:rustc-env=QUARRY_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
