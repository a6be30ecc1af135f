//! Every tool's calls, errors by kind and latency, and the hot swaps, counted as the registry
//! serves them, for `/metrics`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::support::exposition::{CALL_SECONDS, Exposition, Histogram, Kind};

/// Every tool's calls, errors and latency since the host started.
#[derive(Default)]
pub struct ToolMetrics {
    tools: Mutex<BTreeMap<String, Arc<ToolStats>>>,
    /// Calls naming no loaded tool: counted apart, since the name is the caller's (a label per
    /// name would let a client grow the exposition without bound).
    unknown: AtomicU64,
    /// Hot swaps that put a new version in service, and those refused (the old one serving on).
    swaps: AtomicU64,
    swaps_failed: AtomicU64,
}

/// One tool's figures.
struct ToolStats {
    calls: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    seconds: Histogram,
}

impl ToolMetrics {
    /// Counts a call of `tool` (`instance.tool`, a configured name) that took `elapsed` and
    /// failed with an error of `error_kind`, if it failed.
    pub fn record(&self, tool: &str, elapsed: Duration, error_kind: Option<&'static str>) {
        let stats = {
            let mut tools = self.tools.lock();
            let stats = tools.entry(tool.to_string()).or_insert_with(|| {
                Arc::new(ToolStats {
                    calls: AtomicU64::new(0),
                    errors: Mutex::default(),
                    seconds: Histogram::new(CALL_SECONDS),
                })
            });
            stats.clone()
        };
        stats.calls.fetch_add(1, Ordering::Relaxed);
        stats.seconds.observe(elapsed);
        if let Some(kind) = error_kind {
            *stats.errors.lock().entry(kind).or_default() += 1;
        }
    }

    /// Counts a call that named no loaded tool.
    pub fn unknown_tool(&self) {
        self.unknown.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a hot swap: `swapped`, a new version serves; else it was refused.
    pub fn swap(&self, swapped: bool) {
        if swapped { &self.swaps } else { &self.swaps_failed }.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the figures into `e`.
    pub fn write(&self, e: &mut Exposition) {
        let tools: Vec<(String, Arc<ToolStats>)> =
            self.tools.lock().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut f = e.family("quarry_tool_calls_total", Kind::Counter, "Tool calls, finished or failed, by tool.");
        for (tool, s) in &tools {
            f.sample(&[("tool", tool)], s.calls.load(Ordering::Relaxed) as f64);
        }
        let mut f = e.family(
            "quarry_tool_errors_total",
            Kind::Counter,
            "Tool calls that failed, by tool and kind (tool_error, fault, not_ready, cancelled, ...).",
        );
        for (tool, s) in &tools {
            for (kind, n) in s.errors.lock().iter() {
                f.sample(&[("tool", tool), ("kind", kind)], *n as f64);
            }
        }
        let mut f = e.family(
            "quarry_tool_call_duration_seconds",
            Kind::Histogram,
            "Tool call latency, waiting for a member included.",
        );
        for (tool, s) in &tools {
            f.histogram(&[("tool", tool)], &s.seconds);
        }
        e.single(
            "quarry_unknown_tool_calls_total",
            Kind::Counter,
            "Calls that named no loaded tool.",
            self.unknown.load(Ordering::Relaxed) as f64,
        );
        let mut f = e.family(
            "quarry_swaps_total",
            Kind::Counter,
            "Hot swaps of a changed component or model: swapped (the new version serves) or failed (refused; the old one serves on).",
        );
        f.sample(&[("outcome", "swapped")], self.swaps.load(Ordering::Relaxed) as f64);
        f.sample(&[("outcome", "failed")], self.swaps_failed.load(Ordering::Relaxed) as f64);
    }
}
