//! The precompiled-component cache: the same bytes are compiled once; a cached
//! entry is loaded, not compiled; a damaged entry is replaced, never trusted.

use std::path::Path;

use quarry::runtime::cache::{CacheOutcome, ComponentCache};
use quarry::runtime::engine::QuarryEngine;
use quarry_tests::{ECHO_V1, ECHO_V2};

#[test]
fn same_bytes_compile_once_then_load_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(ECHO_V1).unwrap();
    let path = Path::new(ECHO_V1);

    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    let first = engine.load_component(path, &bytes).unwrap();
    assert_eq!(first.1, CacheOutcome::Compiled);
    // In memory while an instance holds it...
    let second = engine.load_component(path, &bytes).unwrap();
    assert_eq!(second.1, CacheOutcome::Memory);
    assert_eq!(engine.components_in_memory(), 1);
    // ...and forgotten once none does (a version swapped out is not kept for the process's life).
    drop((first, second));
    assert_eq!(engine.components_in_memory(), 0);
    assert_eq!(engine.load_component(path, &bytes).unwrap().1, CacheOutcome::Disk);
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(entries.len(), 1, "one .cwasm per component");
    let name = entries[0].file_name().into_string().unwrap();
    assert!(name.starts_with(&hex_sha256(&bytes)) && name.ends_with(".cwasm"), "{name}");

    // A new process (engine) finds it on disk.
    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    assert_eq!(engine.load_component(path, &bytes).unwrap().1, CacheOutcome::Disk);

    // Other bytes are another entry.
    let v2 = std::fs::read(ECHO_V2).unwrap();
    assert_eq!(engine.load_component(Path::new(ECHO_V2), &v2).unwrap().1, CacheOutcome::Compiled);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn damaged_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(ECHO_V1).unwrap();
    let path = Path::new(ECHO_V1);
    QuarryEngine::new(dir.path().to_path_buf()).unwrap().load_component(path, &bytes).unwrap();
    let entry = std::fs::read_dir(dir.path()).unwrap().flatten().next().unwrap().path();
    std::fs::write(&entry, b"not machine code").unwrap();

    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    assert_eq!(engine.load_component(path, &bytes).unwrap().1, CacheOutcome::Compiled);
    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    assert_eq!(engine.load_component(path, &bytes).unwrap().1, CacheOutcome::Disk, "the entry was rewritten");
}

#[test]
fn invalid_bytes_are_an_error_not_a_cache_entry() {
    let dir = tempfile::tempdir().unwrap();
    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    let err = engine.load_component(Path::new("bad.wasm"), b"\0asm\x0d\0\x01\0junk").unwrap_err().to_string();
    assert!(err.contains("bad.wasm is not a valid WebAssembly component"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).map(|d| d.count()).unwrap_or(0), 0);
}

fn hex_sha256(bytes: &[u8]) -> String {
    ComponentCache::content_hash(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Cache entries are native code: an entry, or a cache directory, that someone else could have
/// written is not loaded; the component is compiled instead.
#[test]
fn entries_others_could_write_are_compiled_not_loaded() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(ECHO_V1).unwrap();
    let path = Path::new(ECHO_V1);
    let load = || QuarryEngine::new(dir.path().to_path_buf()).unwrap().load_component(path, &bytes).unwrap().1;
    assert_eq!(load(), CacheOutcome::Compiled);
    assert_eq!(load(), CacheOutcome::Disk);
    let entry = std::fs::read_dir(dir.path()).unwrap().flatten().next().unwrap().path();
    let chmod = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();

    // An entry others may write: recompiled, and rewritten private.
    chmod(&entry, 0o666);
    assert_eq!(load(), CacheOutcome::Compiled);
    assert_eq!(std::fs::metadata(&entry).unwrap().mode() & 0o077, 0, "the rewritten entry is private");
    assert_eq!(load(), CacheOutcome::Disk);

    // A directory others may write: nothing in it is trusted, nothing is written to it.
    chmod(dir.path(), 0o777);
    assert_eq!(load(), CacheOutcome::Compiled);
    chmod(dir.path(), 0o700);
    assert_eq!(load(), CacheOutcome::Disk);

    // An entry that is a link to a file elsewhere: not followed.
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("planted.cwasm");
    std::fs::copy(&entry, &target).unwrap();
    std::fs::remove_file(&entry).unwrap();
    std::os::unix::fs::symlink(&target, &entry).unwrap();
    assert_eq!(load(), CacheOutcome::Compiled);
    assert!(!std::fs::symlink_metadata(&entry).unwrap().file_type().is_symlink(), "replaced by a real entry");

    // A directory that belongs to another user (when the tests can give it away: as root).
    let me = std::fs::metadata(dir.path()).unwrap().uid();
    if me == 0 {
        std::os::unix::fs::chown(dir.path(), Some(4242), None).unwrap();
        assert_eq!(load(), CacheOutcome::Compiled);
        std::os::unix::fs::chown(dir.path(), Some(0), None).unwrap();
        assert_eq!(load(), CacheOutcome::Disk);
    } else {
        eprintln!("not root: the other-owner case of this test needs chown, skipped");
    }
}

/// A missing cache directory is created private.
#[test]
fn a_new_cache_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("new/cache");
    let bytes = std::fs::read(ECHO_V1).unwrap();
    QuarryEngine::new(dir.clone()).unwrap().load_component(Path::new(ECHO_V1), &bytes).unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
}

/// A load of other bytes does not wait behind a compilation: while one thread compiles a large
/// component, another loads a component held in memory three times.
#[test]
fn a_compilation_does_not_hold_loads_of_other_components() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    let small = std::fs::read(ECHO_V1).unwrap();
    let held = engine.load_component(Path::new(ECHO_V1), &small).unwrap();
    let big = std::fs::read(quarry_tests::HOSTILE).unwrap();
    let (started, compiling) =
        (std::sync::Arc::new(AtomicBool::new(false)), std::sync::Arc::new(AtomicBool::new(true)));
    let (e2, s2, c2) = (engine.clone(), started.clone(), compiling.clone());
    let compile = std::thread::spawn(move || {
        s2.store(true, Ordering::SeqCst);
        let out = e2.load_component(Path::new("hostile.wasm"), &big).map(|c| c.1);
        c2.store(false, Ordering::SeqCst);
        out
    });
    while !started.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Each load hashes the bytes (slow in a debug build): a few are enough.
    for _ in 0..3 {
        assert_eq!(engine.load_component(Path::new(ECHO_V1), &small).unwrap().1, CacheOutcome::Memory);
    }
    assert!(compiling.load(Ordering::SeqCst), "the loads waited for the compilation to end");
    assert_eq!(compile.join().unwrap().unwrap(), CacheOutcome::Compiled);
    drop(held);
}
