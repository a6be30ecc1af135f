//! The MCP envelope scan (what is read of a message before any tree of it is built): any bytes
//! are an envelope or an error with a JSON-RPC code; taking large arguments out leaves JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry::mcp::scan;

fuzz_target!(|data: &[u8]| {
    let _ = scan::id_of(data);
    let _ = scan::nodes(data);
    match scan::envelope(data) {
        Ok(env) => {
            let _ = (env.id_value(), env.is_initialize(), env.tree_bytes(), env.arguments_len());
            if let Some((smaller, _)) = scan::refuse_large_arguments(data, &env) {
                assert!(scans(&smaller), "{}", String::from_utf8_lossy(&smaller));
            }
        }
        Err(e) => assert!([-32700, -32600].contains(&e.code()), "{}", e.code()),
    }
});

fn scans(bytes: &[u8]) -> bool {
    scan::envelope(bytes).is_ok()
}
