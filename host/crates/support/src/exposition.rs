//! The Prometheus text exposition format (version 0.0.4), written at scrape time, and the one
//! kind of metric the host keeps that is more than a counter: a latency [`Histogram`].
//!
//! Written here rather than through a client library: every value is read at scrape time from
//! counters the host keeps anyway (an instance's queue, the inference threads' slots, the
//! Couchbase capability's calls), and the format is a handful of rules (`# HELP`, `# TYPE`,
//! samples with escaped label values, cumulative histogram buckets). A real Prometheus server
//! scrapes it in the tests (the host's `tests/integration/operations.rs`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a family's samples are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the host restarts); its name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, a sum and a count.
    Histogram,
}

/// An exposition being written: families one after another, each with its samples.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts family `name` of `kind`, described by `help` (one line).
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> Family<'_> {
        let kind_name = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        // HELP text escapes only backslashes and line breaks.
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = write!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind_name}\n");
        Family { text: &mut self.text, name: name.to_string() }
    }

    /// A family with one sample and no labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help).sample(&[], value);
    }

    /// The exposition's text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// One family's samples.
pub struct Family<'a> {
    text: &'a mut String,
    name: String,
}

impl Family<'_> {
    /// A sample of this family with `labels`.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.line("", labels, None, value);
    }

    /// The samples of histogram `h` with `labels`: its cumulative buckets, sum and count.
    pub fn histogram(&mut self, labels: &[(&str, &str)], h: &Histogram) {
        let (counts, sum) = h.snapshot();
        let mut cumulative = 0u64;
        for (bound, n) in h.bounds.iter().zip(&counts) {
            cumulative += n;
            self.line("_bucket", labels, Some(&format_value(*bound)), cumulative as f64);
        }
        let total = cumulative + counts.last().copied().unwrap_or(0);
        self.line("_bucket", labels, Some("+Inf"), total as f64);
        self.line("_sum", labels, None, sum);
        self.line("_count", labels, None, total as f64);
    }

    fn line(&mut self, suffix: &str, labels: &[(&str, &str)], le: Option<&str>, value: f64) {
        let t = &mut *self.text;
        t.push_str(&self.name);
        t.push_str(suffix);
        let all = labels.iter().map(|&(k, v)| (k, v)).chain(le.map(|le| ("le", le)));
        let mut first = true;
        for (k, v) in all {
            t.push(if first { '{' } else { ',' });
            first = false;
            let _ = write!(t, "{k}=\"{}\"", escape_label(v));
        }
        if !first {
            t.push('}');
        }
        t.push(' ');
        t.push_str(&format_value(value));
        t.push('\n');
    }
}

/// A label value as the format quotes it: backslash, double quote and line feed escaped.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A value as the format writes it (Go's float syntax: `+Inf`, `NaN`, integers without a point).
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// Bucket bounds for the latency of a tool call, in seconds: from a cached search (milliseconds)
/// to a call that waited for an index build (minutes).
pub const CALL_SECONDS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Durations counted into fixed buckets, lock-free.
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then the overflow (above the last bound).
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// An empty histogram with upper bounds `bounds` (seconds, ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Counts one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self.bounds.iter().position(|b| secs <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The count in each bucket (not cumulative; the overflow last) and the sum in seconds.
    fn snapshot(&self) -> (Vec<u64>, f64) {
        let counts = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        (counts, self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_histograms_as_the_format_writes_them() {
        let h = Histogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_millis(500));
        h.observe(Duration::from_secs(3));
        let mut e = Exposition::default();
        e.single("quarry_up", Kind::Gauge, "Whether the host runs.", 1.0);
        let mut f = e.family("quarry_calls_total", Kind::Counter, "Calls,\nby tool.");
        f.sample(&[("tool", "a\"b\\c\nd")], 3.0);
        e.family("quarry_call_seconds", Kind::Histogram, "Latency.").histogram(&[("tool", "t")], &h);
        assert_eq!(
            e.finish(),
            "# HELP quarry_up Whether the host runs.\n# TYPE quarry_up gauge\nquarry_up 1\n\
             # HELP quarry_calls_total Calls,\\nby tool.\n# TYPE quarry_calls_total counter\n\
             quarry_calls_total{tool=\"a\\\"b\\\\c\\nd\"} 3\n\
             # HELP quarry_call_seconds Latency.\n# TYPE quarry_call_seconds histogram\n\
             quarry_call_seconds_bucket{tool=\"t\",le=\"0.1\"} 1\n\
             quarry_call_seconds_bucket{tool=\"t\",le=\"1\"} 2\n\
             quarry_call_seconds_bucket{tool=\"t\",le=\"+Inf\"} 3\n\
             quarry_call_seconds_sum{tool=\"t\"} 3.55\n\
             quarry_call_seconds_count{tool=\"t\"} 3\n"
        );
    }

    #[test]
    fn values_in_go_float_syntax() {
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(12.0), "12");
    }
}
