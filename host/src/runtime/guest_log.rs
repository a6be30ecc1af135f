//! A guest's stderr, captured (capped) and written to the log after each call.

use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How much of a guest's stderr is kept per call.
pub const STDERR_CAP: usize = 64 << 10;

/// Captures a guest's stderr, keeping at most [`STDERR_CAP`] bytes between drains.
#[derive(Clone, Default)]
pub struct GuestLog(Arc<Mutex<Vec<u8>>>);

impl GuestLog {
    /// Takes what was written since the last call.
    pub fn take(&self) -> String {
        let bytes = std::mem::take(&mut *self.0.lock());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    // Synchronous, so a panic message written just before the trap is kept.
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

impl GuestLog {
    fn append(&self, buf: &[u8]) {
        let mut log = self.0.lock();
        let room = STDERR_CAP.saturating_sub(log.len());
        log.extend_from_slice(&buf[..buf.len().min(room)]);
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestLog {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always room: a chatty guest loses its excess output, not its progress.
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestLog {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestLog {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
