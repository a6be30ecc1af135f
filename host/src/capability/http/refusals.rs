//! The sandbox's refusals of one instance, kept so that a call's error can say which grant
//! would have allowed what it tried, and logged.
//!
//! A guest chooses how many requests it makes and how long their host names are, so both the
//! record and the log are bounded: each message is cut to [`MAX_REFUSAL_BYTES`], at most
//! [`MAX_KEPT`] are kept per call (the rest are counted), and log lines are rate-limited to a
//! burst of [`LOG_BURST`], then one per [`LOG_EVERY`], with a count of what was left out.

use parking_lot::Mutex;
use std::time::Duration;

use crate::support::log_budget::LogBudget;

/// The longest refusal message kept or logged.
pub const MAX_REFUSAL_BYTES: usize = 512;
/// Refusals kept per call; later ones are only counted.
pub const MAX_KEPT: usize = 8;
/// Log lines an instance may write at once.
pub const LOG_BURST: u32 = 10;
/// Then one log line per this interval.
pub const LOG_EVERY: Duration = Duration::from_secs(1);

/// See the module docs.
pub struct Refusals {
    state: Mutex<State>,
    log: LogBudget,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals { state: Mutex::default(), log: LogBudget::new(LOG_BURST, LOG_EVERY) }
    }
}

#[derive(Default)]
struct State {
    kept: Vec<String>,
    more: usize,
}

impl Refusals {
    /// Records a refusal and logs it (rate-limited), tagged with `instance`.
    pub fn record(&self, instance: &str, message: &str) {
        let message = crate::support::text::cut(message, MAX_REFUSAL_BYTES);
        match self.log.take() {
            Some(0) => tracing::warn!(target: "quarry::sandbox", instance, "{message}"),
            Some(held) => {
                tracing::warn!(target: "quarry::sandbox", instance, "{message} ({held} more refusals not logged)")
            }
            None => {}
        }
        let mut s = self.state.lock();
        if s.kept.len() < MAX_KEPT {
            s.kept.push(message);
        } else {
            s.more += 1;
        }
    }

    /// Takes the refusals recorded since the last call: at most [`MAX_KEPT`] messages, and a
    /// last line counting the others.
    pub fn take(&self) -> Vec<String> {
        let mut s = self.state.lock();
        let mut kept = std::mem::take(&mut s.kept);
        let more = std::mem::take(&mut s.more);
        if more > 0 {
            kept.push(format!("and {more} more refusals"));
        }
        kept
    }

    /// How many refusals are held now (for tests and benches).
    pub fn held(&self) -> usize {
        self.state.lock().kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_few_and_short() {
        let r = Refusals::default();
        let huge = format!("HTTP to http://{}.x:80 refused", "a".repeat(1 << 20));
        for _ in 0..1000 {
            r.record("t", &huge);
        }
        assert_eq!(r.held(), MAX_KEPT);
        let taken = r.take();
        assert_eq!(taken.len(), MAX_KEPT + 1);
        assert!(taken.iter().all(|m| m.len() < MAX_REFUSAL_BYTES + 64), "{}", taken[0].len());
        assert_eq!(taken.last().map(String::as_str), Some("and 992 more refusals"));
        assert!(r.take().is_empty(), "taking drains");
    }
}
