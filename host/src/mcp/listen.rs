//! What an MCP client hears while its call waits and runs: `notifications/progress` for a call
//! that carries `_meta.progressToken`, and `notifications/message` at the level the session
//! asked for with `logging/setLevel` (nothing until it asks).
//!
//! The call's [`Listener`] is synchronous and must never hold the call up: it puts notes on a
//! small bounded queue, which a task of its own sends to the client. A full queue drops the
//! note; the log lines are also under a per-call budget, as the host's own log is.
#![allow(deprecated, reason = "rmcp marks MCP logging deprecated (SEP-2577); clients of 2025-11-25 use it")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rmcp::RoleServer;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, NumberOrString, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::Peer;

use crate::capability::progress::Report;
use crate::registry::instance::Listener;
use crate::support::log_budget::LogBudget;

/// The longest progress token followed: a client chooses it, and it is echoed in every note.
pub const MAX_TOKEN_BYTES: usize = 256;
/// Notes waiting to be sent for one call; more are dropped.
const QUEUE: usize = 16;
/// The longest log line sent.
const MAX_LINE_BYTES: usize = 1024;

/// A session's logging: its level, 0 until the client sets one (nothing is sent), else
/// [`rank`] of the least severe level it wants; and its budget of lines, all its calls together
/// (16 at once, then 4 a second).
#[derive(Clone)]
pub struct LogLevel(Arc<AtomicU8>, Arc<LogBudget>);

impl Default for LogLevel {
    fn default() -> Self {
        LogLevel(Arc::default(), Arc::new(LogBudget::new(16, std::time::Duration::from_millis(250))))
    }
}

impl LogLevel {
    /// The client asked for `level` and above.
    pub fn set(&self, level: LoggingLevel) {
        self.0.store(rank(level), Ordering::Relaxed);
    }

    fn wants(&self, level: LoggingLevel) -> bool {
        let min = self.0.load(Ordering::Relaxed);
        min != 0 && rank(level) >= min
    }
}

/// 1 for `debug` up to 8 for `emergency` (RFC 5424's order).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 1,
        LoggingLevel::Info => 2,
        LoggingLevel::Notice => 3,
        LoggingLevel::Warning => 4,
        LoggingLevel::Error => 5,
        LoggingLevel::Critical => 6,
        LoggingLevel::Alert => 7,
        LoggingLevel::Emergency => 8,
    }
}

fn from_tracing(level: tracing::Level) -> LoggingLevel {
    match level {
        tracing::Level::ERROR => LoggingLevel::Error,
        tracing::Level::WARN => LoggingLevel::Warning,
        tracing::Level::INFO => LoggingLevel::Info,
        _ => LoggingLevel::Debug,
    }
}

/// The progress token of a call, if it has one that is not too long to echo.
pub fn progress_token(meta: &rmcp::model::RequestMetaObject) -> Option<ProgressToken> {
    let token = meta.get_progress_token()?;
    match &token.0 {
        NumberOrString::String(s) if s.len() > MAX_TOKEN_BYTES => None,
        _ => Some(token),
    }
}

enum Note {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// One call's listener (see the module docs). [`CallListener::finish`] sends what is queued;
/// dropping it ends its sending task once the queue has drained.
pub struct CallListener {
    token: Option<ProgressToken>,
    level: LogLevel,
    tx: tokio::sync::mpsc::Sender<Note>,
    sender: tokio::task::JoinHandle<()>,
    /// The last progress value sent: MCP wants each to be larger than the one before.
    last: parking_lot::Mutex<f64>,
}

impl CallListener {
    /// A listener sending to `peer`: progress under `token` (none without one), log lines at
    /// `level`. `None` when there is nothing the client could hear.
    pub fn new(peer: Peer<RoleServer>, token: Option<ProgressToken>, level: &LogLevel) -> Option<CallListener> {
        if token.is_none() && level.0.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel(QUEUE);
        let sender = tokio::spawn(async move {
            while let Some(note) = rx.recv().await {
                let sent = match note {
                    Note::Progress(p) => peer.notify_progress(p).await,
                    Note::Log(m) => peer.notify_logging_message(m).await,
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        Some(CallListener { token, level: level.clone(), tx, sender, last: parking_lot::Mutex::new(-1.0) })
    }
}

impl CallListener {
    /// Sends what is still queued (within a second), so that the call's notes reach the client
    /// before its result.
    pub async fn finish(self) {
        let CallListener { tx, sender, .. } = self;
        drop(tx);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sender).await;
    }
}

impl Listener for CallListener {
    fn progress(&self, report: &Report) {
        let Some(token) = &self.token else { return };
        let p = &report.progress;
        let progress = p.done as f64;
        {
            let mut last = self.last.lock();
            if progress <= *last {
                return;
            }
            *last = progress;
        }
        let mut note = ProgressNotificationParam::new(token.clone(), progress);
        if p.total > 0 {
            note = note.with_total(p.total as f64);
        }
        note.message = Some(format!("{}: {}", p.instance, report.status()));
        let _ = self.tx.try_send(Note::Progress(note));
    }

    fn log(&self, level: tracing::Level, line: &str) {
        let level = from_tracing(level);
        if !self.level.wants(level) || self.level.1.take().is_none() {
            return;
        }
        let mut note = LoggingMessageNotificationParam::new(
            level,
            serde_json::Value::String(crate::support::text::cut(line, MAX_LINE_BYTES)),
        );
        note.logger = Some("quarry".into());
        let _ = self.tx.try_send(Note::Log(note));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_filter_from_the_one_asked_for() {
        let l = LogLevel::default();
        assert!(!l.wants(LoggingLevel::Emergency), "nothing before setLevel");
        l.set(LoggingLevel::Warning);
        assert!(l.wants(LoggingLevel::Error) && l.wants(LoggingLevel::Warning));
        assert!(!l.wants(LoggingLevel::Info));
    }

    #[test]
    fn long_tokens_are_not_followed() {
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.set_progress_token(ProgressToken(NumberOrString::String("t".repeat(MAX_TOKEN_BYTES + 1).into())));
        assert!(progress_token(&meta).is_none());
        meta.set_progress_token(ProgressToken(NumberOrString::Number(7)));
        assert_eq!(progress_token(&meta), Some(ProgressToken(NumberOrString::Number(7))));
    }
}
