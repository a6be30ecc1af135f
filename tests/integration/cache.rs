//! The precompiled-component cache: the same bytes are compiled once; a cached
//! entry is loaded, not compiled; a damaged entry is replaced, never trusted.

use std::path::Path;

use quarry::cache::{CacheOutcome, ComponentCache};
use quarry::engine::QuarryEngine;
use quarry_tests::{ECHO_V1, ECHO_V2};

#[test]
fn same_bytes_compile_once_then_load_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(ECHO_V1).unwrap();
    let path = Path::new(ECHO_V1);

    let engine = QuarryEngine::new(dir.path().to_path_buf()).unwrap();
    assert_eq!(engine.load_component(path, &bytes).unwrap().1, CacheOutcome::Compiled);
    assert_eq!(engine.load_component(path, &bytes).unwrap().1, CacheOutcome::Memory);
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
