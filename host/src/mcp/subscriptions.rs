//! The resources a handshake-era session subscribed to (`resources/subscribe`), bounded in
//! count and bytes per session, and in bytes for the whole host: idle sessions that each hold
//! their most cannot make the server hold more than [`HOST_BYTES`], whatever `max_sessions` is.

use std::collections::BTreeMap;

use super::budget::{Budget, Held};

/// Subscriptions one session may hold.
pub const MAX_PER_SESSION: usize = 1024;
/// Bytes of URIs one session may hold subscribed.
pub const SESSION_BYTES: usize = 64 << 10;
/// The longest URI one may subscribe to.
pub const MAX_URI_BYTES: usize = 2048;
/// Bytes of subscribed URIs the host holds, all sessions together.
pub const HOST_BYTES: usize = 16 << 20;
/// What each subscription costs beside its URI (its entry in the session's map).
const ENTRY_BYTES: usize = 64;

/// The host's budget for subscriptions, shared by every session: [`HOST_BYTES`].
pub fn host_budget() -> Budget {
    Budget::new(HOST_BYTES)
}

/// One session's subscriptions, each charged to the host's budget while held.
#[derive(Debug)]
pub struct Subscriptions {
    budget: Budget,
    uris: BTreeMap<String, Held>,
    bytes: usize,
}

impl Subscriptions {
    /// None yet, charged to `budget` (the host's: [`host_budget`]) as they come.
    pub fn new(budget: Budget) -> Subscriptions {
        Subscriptions { budget, uris: BTreeMap::new(), bytes: 0 }
    }

    /// Subscribes to `uri`, or says why not (what the client can do about it).
    pub fn add(&mut self, uri: &str) -> Result<(), String> {
        if self.uris.contains_key(uri) {
            return Ok(());
        }
        if uri.len() > MAX_URI_BYTES {
            return Err(format!("a URI of {} bytes; subscriptions are to URIs of at most {MAX_URI_BYTES}", uri.len()));
        }
        let cost = uri.len() + ENTRY_BYTES;
        if self.uris.len() >= MAX_PER_SESSION || self.bytes + cost > SESSION_BYTES {
            return Err(format!(
                "a session may hold at most {MAX_PER_SESSION} subscriptions of {SESSION_BYTES} bytes in all; unsubscribe from some first"
            ));
        }
        let Some(held) = self.budget.take(cost) else {
            return Err(
                "the server holds as many subscriptions as it may, all sessions together; try again later".into()
            );
        };
        self.bytes += cost;
        self.uris.insert(uri.to_string(), held);
        Ok(())
    }

    /// Bytes held, URIs and entries together.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Unsubscribes from `uri`, giving its bytes back.
    pub fn remove(&mut self, uri: &str) {
        if self.uris.remove(uri).is_some() {
            self.bytes -= uri.len() + ENTRY_BYTES;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each session is bounded in count and bytes, the host in bytes over every session; a
    /// session that ends (dropped) or unsubscribes gives its bytes back.
    #[test]
    fn sessions_and_the_host_are_bounded_in_bytes() {
        let budget = host_budget();
        let mut one = Subscriptions::new(budget.clone());
        let long = "x".repeat(MAX_URI_BYTES + 1);
        assert!(one.add(&long).unwrap_err().contains("at most 2048"));
        // 8 KiB URIs as in the attack: 2 KiB is the most, and 64 KiB a session.
        let uri = |i: usize| format!("quarry://m/{i:0>2030}");
        let mut held = 0;
        while one.add(&uri(held)).is_ok() {
            held += 1;
        }
        assert_eq!(held, SESSION_BYTES / (2041 + ENTRY_BYTES));
        assert!(one.add(&uri(held)).unwrap_err().contains("unsubscribe from some first"));
        assert!(one.add(&uri(0)).is_ok(), "a URI held already is no new charge");
        one.remove(&uri(0));
        assert!(one.add(&uri(held)).is_ok());
        // Sessions each at their most reach the host's bound, and no further.
        let mut sessions = vec![one];
        loop {
            let mut s = Subscriptions::new(budget.clone());
            let mut i = 0;
            let e = loop {
                match s.add(&uri(i)) {
                    Ok(()) => i += 1,
                    Err(e) => break e,
                }
            };
            sessions.push(s);
            if e.contains("all sessions together") {
                break;
            }
            assert!(sessions.len() < 1000, "never refused");
        }
        assert!((HOST_BYTES - SESSION_BYTES..=HOST_BYTES).contains(&budget.used()), "{}", budget.used());
        sessions.clear();
        assert_eq!(budget.used(), 0);
    }
}
