//! MCP over stdio: one client, newline-delimited JSON-RPC on stdin/stdout.
//!
//! rmcp's own stdio transport silently drops a line that is not JSON (as the other official
//! SDKs do), an over-long one, and one that is JSON but not a message rmcp can read (invalid
//! UTF-8 in a string, a lone surrogate, nesting past serde's limit, `1e400` as an id). A client
//! that sent one would wait forever for an answer. So this module is the transport itself
//! ([`LineTransport`], rmcp's `Transport`): it reads each line bounded, answers what it cannot
//! pass on with a JSON-RPC error line, parses the rest once into rmcp's message type and hands
//! that over. No other parse or copy of a line is made:
//! - a line over [`MAX_MESSAGE_BYTES`]: invalid request (-32600), its bytes dropped as they
//!   arrive;
//! - not JSON: parse error (-32700); JSON that is not a JSON-RPC message: invalid request
//!   (-32600), with the message's `id` when it can be read;
//! - a line whose JSON tree would take more than `[serve] max_request_bytes` (counted from its
//!   bytes, [`crate::mcp::scan::NODE_BYTES`] a value, before any tree is built): invalid request
//!   (-32600), as HTTP refuses it with 413;
//! - a `tools/call` whose arguments are over the limit reaches rmcp with `{}` in their place and
//!   what was refused in the request's extensions ([`crate::mcp::scan::RefusedArguments`]), so
//!   that no tree of them is built and the handler answers it as a tool error;
//! - a notification of a method MCP does not have is ignored, as rmcp ignores it.
//!
//! Answers and error lines go out whole, in order, through one writer task.

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::mcp::ServeError;
use crate::mcp::call_log::CallLog;
use crate::mcp::handler::QuarryMcp;
use crate::mcp::notify::{Peers, fan_out};
use crate::mcp::scan::{self, Admitted, Edge, Refusal};
use crate::registry::Registry;

/// The longest message accepted, in bytes (16 MiB, rmcp's own line limit).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Lines waiting for the writer: past this, reading waits for the client to read its answers.
const QUEUED_LINES: usize = 64;

/// What a stdio session may cost.
#[derive(Debug, Clone, Copy)]
pub struct StdioLimits {
    /// Tool calls the client may have waiting or running.
    pub max_calls: usize,
    /// The most one message may take once parsed: its bytes and its tree (`[serve]
    /// max_request_bytes`).
    pub max_request_bytes: usize,
}

/// Serves `registry` on this process's stdin/stdout until the client closes stdin.
pub async fn serve_stdio(
    registry: Arc<Registry>,
    limits: StdioLimits,
    log: Option<Arc<CallLog>>,
) -> Result<(), ServeError> {
    serve(registry, tokio::io::stdin(), tokio::io::stdout(), limits, log).await
}

/// Serves `registry` over any pair of byte streams (stdio, or a pipe in tests).
pub async fn serve<R, W>(
    registry: Arc<Registry>,
    input: R,
    output: W,
    limits: StdioLimits,
    log: Option<Arc<CallLog>>,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peers = Arc::new(Peers::default());
    let fan = tokio::spawn(fan_out(registry.clone(), peers.clone()));
    let (lines, queued) = mpsc::channel::<Vec<u8>>(QUEUED_LINES);
    let writer = tokio::spawn(write_lines(queued, output));
    let transport = LineTransport::new(input, lines, limits.max_request_bytes);
    let result = async {
        let running = QuarryMcp::new(registry, peers)
            .with_queue_cap(limits.max_calls)
            .with_call_log(log)
            .serve(transport)
            .await
            .map_err(|e| ServeError::Stdio(e.to_string()))?;
        running.waiting().await.map_err(|e| ServeError::Stdio(e.to_string()))?;
        Ok(())
    }
    .await;
    fan.abort();
    // The transport, and with it the last sender, is gone: the last lines drain to the client.
    let _ = writer.await;
    result
}

/// rmcp's `Transport` over newline-delimited JSON (see the module docs). Cancellation-safe: a
/// `receive` dropped part-way leaves the partial line (or the state of a line being dropped) for
/// the next one.
pub struct LineTransport<R> {
    input: BufReader<R>,
    /// The line read so far.
    line: Vec<u8>,
    /// Whether the line being read is over [`MAX_MESSAGE_BYTES`] (its bytes are dropped).
    over: bool,
    /// Whole lines for the writer.
    lines: mpsc::Sender<Vec<u8>>,
    max_tree_bytes: usize,
}

impl<R: AsyncRead + Unpin> LineTransport<R> {
    /// A transport reading `input`, writing whole lines to `lines`; one message may take at most
    /// `max_tree_bytes` once parsed.
    pub fn new(input: R, lines: mpsc::Sender<Vec<u8>>, max_tree_bytes: usize) -> Self {
        LineTransport { input: BufReader::new(input), line: Vec::new(), over: false, lines, max_tree_bytes }
    }

    /// Reads the rest of a line into `self.line`, at most [`MAX_MESSAGE_BYTES`] of it;
    /// `Ok(false)` at the end of input.
    async fn read_line(&mut self) -> std::io::Result<bool> {
        loop {
            let chunk = self.input.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(!self.line.is_empty() || self.over);
            }
            let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            // No await between the copy and the consume: a cancelled read loses nothing.
            if !self.over && self.line.len() + take <= MAX_MESSAGE_BYTES {
                self.line.extend_from_slice(&chunk[..take]);
            } else {
                self.over = true;
                self.line.clear();
            }
            self.input.consume(take);
            if done {
                return Ok(true);
            }
        }
    }

    /// What to do with the line in `self.line`: a message for rmcp, nothing (a blank line, an
    /// ignored notification), or an error answer.
    fn decide(&self) -> Result<Option<RxJsonRpcMessage<RoleServer>>, Refusal> {
        let refuse = |code, message: String, id| Refusal { code, message, id };
        if self.over {
            let msg = format!("message over {MAX_MESSAGE_BYTES} bytes, discarded; send less");
            return Err(refuse(-32600, msg, serde_json::Value::Null));
        }
        let body = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        // RFC 8259 lets a parser skip a byte order mark; rmcp does.
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let Admitted { smaller, id, refused, tree, .. } = scan::admit(body, Edge::Stdio)?;
        let body = smaller.as_deref().unwrap_or(body);
        let needed = body.len().saturating_add(tree);
        if needed > self.max_tree_bytes {
            let msg = format!(
                "this message would take {needed} bytes of the server's memory (its text, and {} bytes a JSON value once parsed), more than [serve] max_request_bytes allows ({}); send less, or raise the limit",
                scan::NODE_BYTES,
                self.max_tree_bytes
            );
            return Err(refuse(-32600, msg, id));
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(body) {
            Ok(mut message) => {
                if let (Some(refused), rmcp::model::JsonRpcMessage::Request(r)) = (refused, &mut message) {
                    use rmcp::model::GetExtensions as _;
                    r.request.extensions_mut().insert(refused);
                }
                Ok(Some(message))
            }
            Err(_) if ignored_notification(body) => Ok(None),
            Err(e) => Err(Refusal::malformed(e.into(), id, Edge::Stdio)),
        }
    }
}

/// A notification (no `id`) of a method MCP does not define, which rmcp ignores rather than
/// answers (an LSP message, say): `notifications/…` that MCP lacks, or any method without an id.
fn ignored_notification(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        id: Option<&'a serde_json::value::RawValue>,
    }
    let Ok(head) = serde_json::from_slice::<Head<'_>>(body) else { return false };
    let Some(method) = head.method else { return false };
    const NOTIFICATIONS: &[&str] = &[
        "notifications/cancelled",
        "notifications/initialized",
        "notifications/message",
        "notifications/progress",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/roots/list_changed",
        "notifications/tools/list_changed",
        "notifications/elicitation/complete",
        "notifications/tasks/status",
    ];
    head.id.is_none() && !NOTIFICATIONS.contains(&method.as_ref())
}

impl<R: AsyncRead + Unpin + Send + 'static> rmcp::transport::Transport<RoleServer> for LineTransport<R> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let lines = self.lines.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            lines.send(line).await.map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::error!(target: "quarry::mcp", "reading stdin: {e}");
                    return None;
                }
            }
            let decided = self.decide();
            self.line.clear();
            self.over = false;
            match decided {
                Ok(Some(message)) => return Some(message),
                Ok(None) => {}
                Err(refusal) => {
                    // Queued whole: if this future is dropped while it waits, the answer is lost
                    // but never half-written.
                    if self.lines.send(error_line(&refusal)).await.is_err() {
                        return None;
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn error_line(refusal: &Refusal) -> Vec<u8> {
    let v = serde_json::json!({"jsonrpc": "2.0", "id": refusal.id, "error": {"code": refusal.code, "message": refusal.message}});
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Writes each line whole, flushing after each, until every sender is gone or the client stops
/// reading.
async fn write_lines<W: AsyncWrite + Unpin>(mut lines: mpsc::Receiver<Vec<u8>>, mut out: W) {
    while let Some(line) = lines.recv().await {
        if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the transport makes of `input`: each message's method or the error answered.
    async fn decide_all(input: &[u8], max_tree: usize) -> Vec<String> {
        let (tx, mut rx) = mpsc::channel(64);
        let mut t = LineTransport::new(std::io::Cursor::new(input.to_vec()), tx, max_tree);
        let mut seen = Vec::new();
        while t.read_line().await.unwrap() {
            match t.decide() {
                Ok(Some(m)) => seen.push(format!("message {}", serde_json::to_value(&m).unwrap()["method"])),
                Ok(None) => seen.push("ignored".into()),
                Err(r) => seen.push(format!("{} {}", r.code, r.id)),
            }
            t.line.clear();
            t.over = false;
        }
        drop(t);
        assert!(rx.try_recv().is_err());
        seen
    }

    /// Every line that is not a message rmcp can read gets an answer (with its id where it can
    /// be read); what is one is passed on, a notification rmcp cannot read is ignored as rmcp
    /// ignores it.
    #[tokio::test]
    async fn every_line_is_answered_or_passed_on() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"a","arguments":{{"a":{}{}}}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let mut input = Vec::new();
        for line in [
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.as_slice(),
            b"   ",
            b"{not json",
            br#"{"jsonrpc":"2.0","id":3,"method":42}"#,
            deep.as_bytes(),
            b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"a\":\"\xff\"}}}",
            br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"a","arguments":{"a":"\ud800"}}}"#,
            br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{}}"#,
            br#"{"jsonrpc":"2.0","method":"$/setTrace","params":5}"#,
            b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}",
        ] {
            input.extend_from_slice(line);
            input.push(b'\n');
        }
        let seen = decide_all(&input, 1 << 20).await;
        assert_eq!(
            seen,
            [
                "message \"ping\"",
                "ignored",
                "-32700 null",
                "-32600 3",
                "-32700 2",
                "-32700 4",
                "-32700 5",
                "-32700 null",
                "message \"textDocument/didOpen\"",
                "ignored",
                "message \"ping\"",
            ]
        );
    }

    /// A dense line whose tree would not fit is answered before any tree is built; an over-long
    /// line is dropped as it arrives, and the next line is read whole.
    #[tokio::test]
    async fn dense_and_long_lines_are_refused() {
        let dense =
            format!(r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{{"pad":[{}0]}}}}"#, "0,".repeat(10_000));
        let mut input = dense.into_bytes();
        input.push(b'\n');
        input.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10));
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}\n");
        let seen = decide_all(&input, 1 << 20).await;
        assert_eq!(seen, ["-32600 8", "-32600 null", "message \"ping\""]);
    }
}
