//! MCP over stdio: one client, newline-delimited JSON-RPC on stdin/stdout.
//!
//! rmcp's stdio transport silently drops a line that is not JSON (as the other official
//! SDKs do) and an over-long one. A client that sent either would wait forever for an
//! answer, so a filter sits in front: a line that is not JSON gets a JSON-RPC parse
//! error (-32700), a line over [`MAX_MESSAGE_BYTES`] an invalid-request error (-32600),
//! and the session goes on. A `tools/call` whose arguments are over the limit reaches rmcp
//! with a small stand-in for them ([`crate::mcp::scan::refuse_large_arguments`]), so that no
//! tree of them is built. Everything else reaches rmcp untouched.

use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::mcp::ServeError;
use crate::mcp::call_log::CallLog;
use crate::mcp::handler::QuarryMcp;
use crate::mcp::notify::{Peers, fan_out};
use crate::registry::Registry;

/// The longest message accepted, in bytes (16 MiB, rmcp's own line limit).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Serves `host` on this process's stdin/stdout until the client closes stdin; the client may
/// have `max_calls` tool calls waiting or running.
pub async fn serve_stdio(
    registry: Arc<Registry>,
    max_calls: usize,
    log: Option<Arc<CallLog>>,
) -> Result<(), ServeError> {
    serve(registry, tokio::io::stdin(), tokio::io::stdout(), max_calls, log).await
}

/// Serves `host` over any pair of byte streams (stdio, or a pipe in tests).
pub async fn serve<R, W>(
    registry: Arc<Registry>,
    input: R,
    output: W,
    max_calls: usize,
    log: Option<Arc<CallLog>>,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peers = Arc::new(Peers::default());
    let fan = tokio::spawn(fan_out(registry.clone(), peers.clone()));
    let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (lines_tx, lines_rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(write_lines(lines_rx, output));
    let forward = tokio::spawn(copy_lines(from_rmcp, lines_tx.clone()));
    let filter = tokio::spawn(filter_input(input, to_rmcp, lines_tx));
    let result = async {
        let running = QuarryMcp::new(registry, peers)
            .with_queue_cap(max_calls)
            .with_call_log(log)
            .serve((rmcp_in, rmcp_out))
            .await
            .map_err(|e| ServeError::Stdio(e.to_string()))?;
        running.waiting().await.map_err(|e| ServeError::Stdio(e.to_string()))?;
        Ok(())
    }
    .await;
    fan.abort();
    filter.abort();
    // rmcp has closed its side: let the last lines drain to the client.
    let _ = forward.await;
    let _ = writer.await;
    result
}

/// Reads client lines; passes JSON to rmcp, answers the rest with an error line.
async fn filter_input<R: AsyncRead + Unpin>(
    input: R,
    mut to_rmcp: tokio::io::DuplexStream,
    replies: mpsc::Sender<Vec<u8>>,
) {
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let over = match read_line_bounded(&mut reader, &mut line, MAX_MESSAGE_BYTES).await {
            Ok(None) => return,
            Ok(Some(over)) => over,
            Err(e) => {
                tracing::error!(target: "quarry::mcp", "reading stdin: {e}");
                return;
            }
        };
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        if over {
            let msg = format!("message over {MAX_MESSAGE_BYTES} bytes, discarded; send less");
            let _ = replies.send(error_line(-32600, &msg)).await;
            continue;
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            let msg = format!("parse error: the message is not JSON ({e}); send one JSON-RPC message per line");
            let _ = replies.send(error_line(-32700, &msg)).await;
            continue;
        }
        // Arguments over the limit reach rmcp as a small stand-in, so no tree of them is built
        // (the handler answers it as a tool error).
        let smaller =
            crate::mcp::scan::envelope(body).ok().and_then(|e| crate::mcp::scan::refuse_large_arguments(body, &e));
        let body = smaller.as_deref().unwrap_or(body);
        if to_rmcp.write_all(body).await.is_err() || to_rmcp.write_all(b"\n").await.is_err() {
            return;
        }
    }
}

/// Reads one line into `buf`, keeping at most `max` bytes of it; `Some(true)` when it was
/// longer (the rest is consumed and dropped), `None` at end of input.
async fn read_line_bounded<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    let mut over = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() && !over { None } else { Some(over) });
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !over && buf.len() + take <= max {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            over = true;
            buf.clear();
        }
        reader.consume(take);
        if done {
            return Ok(Some(over));
        }
    }
}

fn error_line(code: i64, message: &str) -> Vec<u8> {
    let v = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Forwards rmcp's output to the writer one whole line at a time, so error replies never
/// land in the middle of a message.
async fn copy_lines(from: tokio::io::DuplexStream, to: mpsc::Sender<Vec<u8>>) {
    let mut reader = BufReader::new(from);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if to.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut lines: mpsc::Receiver<Vec<u8>>, mut out: W) {
    while let Some(line) = lines.recv().await {
        if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}
