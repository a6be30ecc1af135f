//! What the host holds for one store, counted against the store's one memory grant beside its
//! linear memory: a capability that keeps bytes for a guest (a corpus writer's pending batch)
//! charges them here, and the memory limiter adds them in before it lets linear memory grow.
//!
//! One counter per store, shared by every capability and every handle of it: a guest that opens
//! eight corpora and keeps a writer on each holds the sum of their batches, against one grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes a store's capabilities hold for its guest now (cheap to clone: one counter).
#[derive(Debug, Clone, Default)]
pub struct HostHeld(Arc<AtomicUsize>);

/// A charge that does not fit: what the store would hold with it, and its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverGrant {
    /// Bytes the host would hold for the store with this charge.
    pub held: usize,
    /// Bytes of the store's linear memory now.
    pub linear: usize,
    /// The store's memory grant.
    pub limit: usize,
}

impl HostHeld {
    /// Bytes held now, all capabilities and handles together.
    pub fn bytes(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// An empty charge on this counter, to grow with [`Charge::add`].
    pub fn charge(&self) -> Charge {
        Charge { held: self.clone(), bytes: 0 }
    }
}

/// Bytes held for a guest by one handle; given back when it is dropped.
#[derive(Debug)]
pub struct Charge {
    held: HostHeld,
    bytes: usize,
}

impl Charge {
    /// Adds `bytes` to this charge if everything the store's host holds, with them, plus its
    /// `linear` bytes of linear memory, stays within `limit`.
    pub fn add(&mut self, bytes: usize, linear: usize, limit: usize) -> Result<(), OverGrant> {
        let counter = &self.held.0;
        let mut now = counter.load(Ordering::Relaxed);
        loop {
            let held = now.saturating_add(bytes);
            if held.saturating_add(linear) > limit {
                return Err(OverGrant { held, linear, limit });
            }
            match counter.compare_exchange_weak(now, held, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => now = actual,
            }
        }
        self.bytes += bytes;
        Ok(())
    }

    /// Bytes of this charge.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.held.0.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Charges of several handles share the one grant; a dropped one gives its bytes back.
    #[test]
    fn charges_of_every_handle_share_one_grant() {
        let held = HostHeld::default();
        let (mut a, mut b) = (held.charge(), held.charge());
        a.add(40, 10, 100).unwrap();
        let e = b.add(40, 30, 100).unwrap_err();
        assert_eq!(e, OverGrant { held: 80, linear: 30, limit: 100 });
        b.add(40, 10, 100).unwrap();
        assert_eq!(held.bytes(), 80);
        drop(a);
        assert_eq!(held.bytes(), 40);
        b.add(50, 10, 100).unwrap();
        drop(b);
        assert_eq!(held.bytes(), 0);
    }
}
