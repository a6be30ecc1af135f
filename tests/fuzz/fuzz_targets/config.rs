//! The config loader: any text is a config or an error that names a key or a line; no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // A directory that does not exist: relative paths resolve against it, and nothing is read.
    let _ = quarry::Config::parse(std::path::Path::new("/nonexistent/quarry-fuzz/quarry.toml"), text);
});
