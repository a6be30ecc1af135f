//! The bytes of requests the server holds at once, all clients together (`[serve]
//! max_request_bytes`): bodies being read, the trees they are parsed into, and the arguments of
//! tool calls waiting or running. What a flood of clients can make the server hold is then
//! bounded by the config, whatever the number of connections, sessions or calls.
//!
//! A charge that does not fit is refused at once, never waited for: a client still sending its
//! body while it waits would hold its bytes, and clients that all wait would hold every byte.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The server-wide budget. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Budget {
    permits: Arc<Semaphore>,
    total: usize,
}

/// Bytes charged to the budget, given back when dropped.
#[derive(Debug)]
pub struct Held(Option<OwnedSemaphorePermit>);

impl Budget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Budget {
        let total = total.min(Semaphore::MAX_PERMITS);
        Budget { permits: Arc::new(Semaphore::new(total)), total }
    }

    /// The budget, in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.total - self.permits.available_permits()
    }

    /// Charges `n` more bytes to `held`, or leaves it as it was and says no.
    pub fn charge(&self, held: &mut Held, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let Ok(n32) = u32::try_from(n) else { return false };
        match self.permits.clone().try_acquire_many_owned(n32) {
            Ok(p) => {
                match &mut held.0 {
                    Some(have) => have.merge(p),
                    none => *none = Some(p),
                }
                true
            }
            Err(_) => false,
        }
    }

    /// A new charge of `n` bytes, if they fit.
    pub fn take(&self, n: usize) -> Option<Held> {
        let mut held = Held::none();
        self.charge(&mut held, n).then_some(held)
    }
}

impl Held {
    /// Nothing charged yet.
    pub fn none() -> Held {
        Held(None)
    }

    /// Bytes charged.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_that_do_not_fit_are_refused_and_drops_give_back() {
        let b = Budget::new(100);
        let mut a = b.take(60).unwrap();
        assert!(b.take(50).is_none());
        assert!(b.charge(&mut a, 30));
        assert_eq!((a.bytes(), b.used()), (90, 90));
        assert!(!b.charge(&mut a, 11));
        assert_eq!(a.bytes(), 90, "a refused charge leaves what was held");
        drop(a);
        assert_eq!(b.used(), 0);
        assert!(b.take(100).is_some());
        assert!(b.take(usize::MAX).is_none());
    }
}
