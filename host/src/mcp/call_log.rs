//! The opt-in call log of `quarry serve --call-log FILE`: one JSON line per MCP tool call, for
//! operators' audits (who called what, with which arguments, how it ended, how long it took).
//!
//! Everything in a line except the time and the duration comes from a client or a tool, so
//! each field is bounded: a tool name to [`MAX_NAME`] bytes, the arguments to [`MAX_ARGS`] bytes
//! (longer ones are logged as a cut string with `arguments_cut: true`), an error message to
//! [`MAX_ERROR`] bytes. A line is written with one `write` on a file opened for appending, so
//! lines of concurrent sessions do not interleave. A log that cannot be written is reported
//! once and never fails a call.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

/// Longest tool name logged, in bytes.
pub const MAX_NAME: usize = 256;
/// Longest arguments logged whole, in bytes of JSON.
pub const MAX_ARGS: usize = 16 * 1024;
/// Longest error message logged, in bytes.
pub const MAX_ERROR: usize = 2048;
/// Longest client name logged, in bytes.
const MAX_CLIENT: usize = 128;

/// Why the call log cannot be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the call log {}: {source}; give --call-log a file in a directory you can write", path.display())]
pub struct CallLogError {
    /// The file asked for.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// An append-only JSON-lines file of tool calls, shared by every session of a server.
#[derive(Debug)]
pub struct CallLog {
    path: PathBuf,
    file: Mutex<File>,
    sessions: AtomicU64,
    failed: AtomicBool,
}

/// How one call ended, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The tool answered.
    Ok,
    /// The tool or the host answered with an error (`isError: true`), of this kind.
    Error(&'a str),
    /// The request could not be routed (an unknown tool): a protocol error.
    Rejected,
}

/// One finished call.
#[derive(Debug)]
pub struct Entry<'a> {
    /// The session's number in this server's log ([`CallLog::session`]).
    pub session: u64,
    /// The client's name and version from its `initialize`, if it sent one.
    pub client: Option<String>,
    /// The MCP tool name the client asked for.
    pub tool: &'a str,
    /// The arguments as the client sent them, as JSON text.
    pub arguments: &'a str,
    /// How it ended.
    pub outcome: Outcome<'a>,
    /// The error message, when it failed.
    pub error: Option<&'a str>,
    /// From the request's arrival to its answer.
    pub duration: Duration,
}

impl CallLog {
    /// Opens (creating, appending to) the log at `path`.
    pub fn open(path: &Path) -> Result<CallLog, CallLogError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| CallLogError { path: path.to_path_buf(), source })?;
        Ok(CallLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            sessions: AtomicU64::new(0),
            failed: false.into(),
        })
    }

    /// A number for a new client session, unique within this server's run.
    pub fn session(&self) -> u64 {
        self.sessions.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Appends one call.
    pub fn record(&self, entry: &Entry<'_>) {
        let mut line = entry.to_json(SystemTime::now()).to_string();
        line.push('\n');
        let written = match self.file.lock() {
            Ok(mut f) => f.write_all(line.as_bytes()),
            Err(_) => return,
        };
        if let Err(e) = written
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(target: "quarry::mcp", "cannot write the call log {}: {e}; calls go on unlogged", self.path.display());
        }
    }
}

impl Entry<'_> {
    /// The log line (without its newline) for a call that ended at `now`.
    pub fn to_json(&self, now: SystemTime) -> Value {
        // RFC 3339 in UTC, with a fraction only when there is one.
        let time = humantime::format_rfc3339(now).to_string();
        let mut v = json!({
            "time": time,
            "session": self.session,
            "client": self.client.as_deref().map(|c| crate::support::text::cut(c, MAX_CLIENT)),
            "tool": crate::support::text::cut(self.tool, MAX_NAME),
            "outcome": match self.outcome {
                Outcome::Ok => "ok",
                Outcome::Error(_) => "error",
                Outcome::Rejected => "rejected",
            },
            "duration_ms": (self.duration.as_secs_f64() * 1e6).round() / 1e3,
        });
        // The arguments arrive as their JSON text: a tree of them is built only when it is small.
        let args = self.arguments;
        match (args.len() <= MAX_ARGS).then(|| serde_json::from_str::<Value>(args)) {
            Some(Ok(tree)) => v["arguments"] = tree,
            _ => {
                v["arguments"] = Value::String(crate::support::text::cut(args, MAX_ARGS));
                // Too long, or not whole: the head of arguments refused for their size.
                v["arguments_cut"] = Value::Bool(true);
            }
        }
        if let Outcome::Error(kind) = self.outcome {
            v["error_kind"] = Value::String(kind.to_string());
        }
        if let Some(e) = self.error {
            v["error"] = Value::String(crate::support::text::cut(e, MAX_ERROR));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(args: &'a str, tool: &'a str) -> Entry<'a> {
        Entry {
            session: 3,
            client: Some("crewai 1.0".into()),
            tool,
            arguments: args,
            outcome: Outcome::Ok,
            error: None,
            duration: Duration::from_micros(12_345),
        }
    }

    #[test]
    fn a_line_has_the_call_and_nothing_unbounded() {
        let args = json!({"question": "how?"}).to_string();
        let v = entry(&args, "manual.search").to_json(SystemTime::UNIX_EPOCH);
        assert_eq!(v["time"], "1970-01-01T00:00:00Z");
        assert_eq!(v["session"], 3);
        assert_eq!(v["tool"], "manual.search");
        assert_eq!(v["arguments"], json!({ "question": "how?" }));
        assert_eq!(v["outcome"], "ok");
        assert_eq!(v["duration_ms"], 12.345);
        assert!(v.get("arguments_cut").is_none() && v.get("error").is_none());

        // A hostile client's megabyte of arguments and name are cut, and the line stays JSON.
        let big = json!({"question": "x".repeat(1 << 20)}).to_string();
        let name = "n".repeat(1 << 16);
        let line = entry(&big, &name).to_json(SystemTime::UNIX_EPOCH).to_string();
        assert!(line.len() < MAX_ARGS + MAX_NAME + 512, "{} bytes", line.len());
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["arguments_cut"], true);
        assert!(v["arguments"].as_str().unwrap().starts_with("{\"question\":\"xxx"));
    }

    #[test]
    fn lines_append_and_sessions_are_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.jsonl");
        std::fs::write(&path, "{\"earlier\":true}\n").unwrap();
        let log = CallLog::open(&path).unwrap();
        assert_eq!((log.session(), log.session()), (1, 2));
        let args = "{}";
        let mut e = entry(args, "a.b");
        e.outcome = Outcome::Error("invalid-args");
        e.error = Some("bad \"question\"\nline");
        log.record(&e);
        log.record(&entry(args, "a.c"));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1]["error_kind"], "invalid-args");
        assert_eq!(lines[1]["error"], "bad \"question\"\nline");
        assert_eq!(lines[2]["tool"], "a.c");

        let err = CallLog::open(&dir.path().join("no/such/dir/calls.jsonl")).unwrap_err();
        assert!(err.to_string().contains("--call-log"), "{err}");
    }
}
