//! MCP stdio framing: any input is read line by line into messages for rmcp, lines ignored, or
//! error answers that are each one line of JSON; no panic, and reading ends at the input's end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry::mcp::stdio::LineTransport;
use rmcp::transport::Transport;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 16);
        // A small budget, so that the refusal of a message too large once parsed is reached.
        let mut t = LineTransport::new(std::io::Cursor::new(data.to_vec()), tx, 4096);
        while Transport::<rmcp::RoleServer>::receive(&mut t).await.is_some() {}
        drop(t);
        while let Some(line) = rx.recv().await {
            assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
            assert!(line.ends_with(b"\n"));
            assert!(quarry::mcp::scan::envelope(&line[..line.len() - 1]).is_ok());
        }
    });
});
