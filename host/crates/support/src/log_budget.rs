//! Rate-limited logging, for events a component or a client can repeat as fast as it likes
//! (a refused request, a refused connection): a burst of lines, then one per interval, each
//! saying how many were held back since the last.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// See the module docs.
pub struct LogBudget {
    burst: u32,
    every: Duration,
    state: Mutex<Option<State>>,
}

struct State {
    tokens: u32,
    since: Instant,
    held: usize,
}

impl LogBudget {
    /// A budget of `burst` lines at once, refilled one per `every`.
    pub const fn new(burst: u32, every: Duration) -> Self {
        LogBudget { burst, every, state: Mutex::new(None) }
    }

    /// `Some(held back)` when a line may be written now, `None` when it must be held back.
    pub fn take(&self) -> Option<usize> {
        let mut guard = self.state.lock();
        let s = guard.get_or_insert_with(|| State { tokens: self.burst, since: Instant::now(), held: 0 });
        let refill = (s.since.elapsed().as_millis() / self.every.as_millis().max(1)) as u32;
        if refill > 0 {
            s.tokens = s.tokens.saturating_add(refill).min(self.burst);
            s.since = Instant::now();
        }
        if s.tokens == 0 {
            s.held += 1;
            return None;
        }
        s.tokens -= 1;
        Some(std::mem::take(&mut s.held))
    }
}

/// What to add to a log line that `held` lines were held back before it: nothing for none.
pub fn held_note(held: usize) -> String {
    if held == 0 { String::new() } else { format!(" ({held} more not logged before this one)") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_held_back() {
        let b = LogBudget::new(3, Duration::from_secs(3600));
        assert_eq!((0..3).map(|_| b.take()).collect::<Vec<_>>(), [Some(0), Some(0), Some(0)]);
        assert!((0..100).all(|_| b.take().is_none()));
        let b = LogBudget::new(1, Duration::from_millis(1));
        assert_eq!(b.take(), Some(0));
        assert_eq!(b.take(), None);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(b.take(), Some(1), "the next line counts the one held back");
    }
}
