//! A pool of guest stores: the one place that owns what a tool instance and an embedder both
//! are, `pool` members of one component version serving calls in parallel.
//!
//! [`StorePool`] holds the members (a slot each, holding a started store or nothing: not yet
//! started, or dropped after a fault), hands them out through a [`FairQueue`] (callers queue in
//! turn between clients), and keeps the rules every user of a pool follows:
//! - a [`Lease`] holds one member for one call; the call takes the store *out* of its slot while
//!   the guest runs ([`Lease::take_or_start`]), so that a call future dropped part-way (a
//!   timeout, a cancelled caller) drops the store with it, and the next lease starts a fresh one;
//! - a call that left the store sound puts it back ([`Lease::put_back`]); one that faulted does
//!   not, and says so ([`Lease::faulted`]): the member restarts at its next lease, and the fault
//!   line is written within one budget for every pool (a hostile component can fault on every
//!   call);
//! - a call that waits for someone outside the host (its MCP client's answer) gives its member
//!   back meanwhile ([`Lease::release`]): it keeps its store, out of the pool, and the next
//!   lease of that member starts a fresh one; at its end the store goes back only into an
//!   empty, free slot, and is dropped otherwise. At most as many calls as the pool has members
//!   are released at once (so a pool holds at most twice its stores); past that a waiting call
//!   keeps its member, as any call does. A client that never answers then holds its calls'
//!   stores, not the pool;
//! - a pool either serves at once ([`StorePool::ready`]) or from each member's
//!   [`StorePool::join`] (a tool instance's member joins once it has prepared).
//!
//! What a member's store is, how one starts, and what a call runs are the user's: the
//! registry's tool instances and embedders.

use std::sync::Arc;
use std::time::Instant;

use crate::support::fair::{FairQueue, Permit};
use crate::support::log_budget::{LogBudget, held_note};

/// Fault lines of every pool together: a hostile component can fault on every call.
static FAULTS_LOG: LogBudget = LogBudget::new(10, std::time::Duration::from_secs(1));

/// `n` members holding stores of type `L`, shared fairly between clients (see the module docs).
pub struct StorePool<L> {
    members: Vec<tokio::sync::Mutex<Option<L>>>,
    queue: Arc<FairQueue>,
    /// Leases released now ([`Lease::release`]): at most one per member.
    released: std::sync::atomic::AtomicUsize,
}

/// One member of a [`StorePool`], held for one call: released (to the next caller in turn)
/// when dropped.
pub struct Lease<'a, L> {
    // Dropped before the permit (fields drop in order): the member is unlocked before the next
    // caller is handed it. Both `None` once released.
    slot: Option<tokio::sync::MutexGuard<'a, Option<L>>>,
    permit: Option<Permit>,
    member: usize,
    home: &'a tokio::sync::Mutex<Option<L>>,
    /// The pool's count of released leases, and its bound.
    released: (&'a std::sync::atomic::AtomicUsize, usize),
}

impl<L> Drop for Lease<'_, L> {
    fn drop(&mut self) {
        if self.permit.is_none() {
            self.released.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

impl<L> StorePool<L> {
    /// A pool of the members in `stores`, every one serving at once.
    pub fn ready(stores: Vec<L>) -> StorePool<L> {
        let queue = FairQueue::new(stores.len());
        StorePool {
            members: stores.into_iter().map(|s| tokio::sync::Mutex::new(Some(s))).collect(),
            queue,
            released: Default::default(),
        }
    }

    /// A pool of the members in `slots` (a store, or `None` for a member that starts later), none
    /// serving until it [joins](StorePool::join).
    pub fn idle(slots: Vec<Option<L>>) -> StorePool<L> {
        let queue = FairQueue::idle(slots.len());
        StorePool {
            members: slots.into_iter().map(tokio::sync::Mutex::new).collect(),
            queue,
            released: Default::default(),
        }
    }

    /// Member `member` of an [`idle`](StorePool::idle) pool starts serving.
    pub fn join(&self, member: usize) {
        self.queue.add(member);
    }

    /// How many members the pool has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the pool has no member (never, for a pool built from a config: `pool` is at least 1).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members free now, and clients waiting for one (for tests and benches).
    pub fn load(&self) -> (usize, usize) {
        self.queue.load()
    }

    /// The slot of member `member`, outside the queue: to start or prepare a member that has
    /// not joined yet.
    pub async fn slot(&self, member: usize) -> tokio::sync::MutexGuard<'_, Option<L>> {
        self.members[member].lock().await
    }

    /// Waits for the first free member, served in turn with the other clients.
    pub async fn lease(&self, client: &str) -> Lease<'_, L> {
        let permit = self.queue.acquire(client).await;
        let member = permit.worker();
        let home = &self.members[member];
        let slot = home.lock().await;
        Lease { slot: Some(slot), permit: Some(permit), member, home, released: (&self.released, self.members.len()) }
    }

    /// [`StorePool::lease`], given up at `deadline` (`None`: no deadline).
    pub async fn lease_until(&self, client: &str, deadline: Option<Instant>) -> Option<Lease<'_, L>> {
        match deadline {
            None => Some(self.lease(client).await),
            Some(d) => tokio::time::timeout_at(d.into(), self.lease(client)).await.ok(),
        }
    }
}

impl<L> Lease<'_, L> {
    /// The member's index in its pool.
    pub fn member(&self) -> usize {
        self.member
    }

    /// Takes the member's store out of its slot for a call, or starts a fresh one with `start`
    /// when the slot is empty (a fault dropped it, or the member never started). Out of the slot
    /// while the guest runs: a call dropped part-way drops its store.
    pub async fn take_or_start<E>(&mut self, start: impl std::future::Future<Output = Result<L, E>>) -> Result<L, E> {
        match self.slot.as_deref_mut().and_then(Option::take) {
            Some(store) => Ok(store),
            None => start.await,
        }
    }

    /// Gives the member back to the pool while the call goes on with the store it took: the
    /// next lease of the member starts a fresh store. For a call that waits for someone
    /// outside the host. Refused (the lease kept) when as many leases of the pool as it has
    /// members are released already; whether it was released.
    pub fn release(&mut self) -> bool {
        if self.permit.is_none() {
            return true;
        }
        let (count, bound) = self.released;
        let taken = count
            .fetch_update(std::sync::atomic::Ordering::AcqRel, std::sync::atomic::Ordering::Acquire, |n| {
                (n < bound).then_some(n + 1)
            })
            .is_ok();
        if taken {
            self.slot = None;
            self.permit = None;
        }
        taken
    }

    /// Whether the member was given back ([`Lease::release`]).
    pub fn released(&self) -> bool {
        self.permit.is_none()
    }

    /// Puts the store back after a call that left it sound: the next lease reuses it. After
    /// [`Lease::release`], only into the member's slot when it is free and empty; else the
    /// store is dropped.
    pub fn put_back(&mut self, store: L) {
        match &mut self.slot {
            Some(slot) => **slot = Some(store),
            None => {
                if let Ok(mut slot) = self.home.try_lock()
                    && slot.is_none()
                {
                    *slot = Some(store);
                }
            }
        }
    }

    /// A call on this member faulted, and its store was dropped (not put back): the member
    /// restarts at its next lease. `what` names the instance or tool, for the log line.
    pub fn faulted(&self, what: &str, fault: &dyn std::fmt::Display) {
        if let Some(held) = FAULTS_LOG.take() {
            tracing::warn!(target: "quarry::pool", member = self.member(), "{what}: {fault}; recycling the instance{}", held_note(held));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store put back is reused; one not put back (a fault, or a call dropped part-way) is
    /// started afresh by the next lease.
    #[tokio::test]
    async fn a_store_not_put_back_is_started_afresh() {
        let pool = StorePool::ready(vec![1u32]);
        let start = |n| async move { Ok::<u32, ()>(n) };
        let mut lease = pool.lease("a").await;
        let store = lease.take_or_start(start(2)).await.unwrap();
        assert_eq!(store, 1, "the store the pool was built with");
        lease.put_back(store);
        drop(lease);
        let mut lease = pool.lease("a").await;
        let store = lease.take_or_start(start(2)).await.unwrap();
        assert_eq!(store, 1, "put back, so reused");
        lease.faulted("test", &"a fault");
        drop(lease);
        let mut lease = pool.lease("a").await;
        assert_eq!(lease.take_or_start(start(3)).await.unwrap(), 3, "not put back, so started");
        drop(lease);
        // A call whose future is dropped while it holds the store out of the slot.
        let call = async {
            let mut lease = pool.lease("a").await;
            let _store = lease.take_or_start(start(4)).await.unwrap();
            std::future::pending::<()>().await;
        };
        assert!(tokio::time::timeout(std::time::Duration::from_millis(10), call).await.is_err());
        assert_eq!(pool.load(), (1, 0), "the member went back to the queue");
        let mut lease = pool.lease("a").await;
        assert_eq!(lease.take_or_start(start(5)).await.unwrap(), 5, "the dropped call's store went with it");
    }

    /// A released member serves the next caller while the call that released it goes on with
    /// its store; that store goes back only into an empty slot.
    #[tokio::test]
    async fn a_released_member_serves_others_meanwhile() {
        let pool = StorePool::ready(vec![1u32]);
        let start = |n| async move { Ok::<u32, ()>(n) };
        let mut waiting = pool.lease("a").await;
        let kept = waiting.take_or_start(start(9)).await.unwrap();
        assert!(waiting.release());
        assert!(waiting.released());
        assert_eq!(pool.load(), (1, 0), "the member is free again");
        let mut other = pool.lease("b").await;
        assert_eq!(other.take_or_start(start(2)).await.unwrap(), 2, "a fresh store: the first is out");
        assert!(!other.release(), "one released lease per member at most");
        assert!(!other.released());
        other.put_back(2);
        drop(other);
        waiting.put_back(kept);
        drop(waiting);
        let mut next = pool.lease("a").await;
        assert_eq!(next.take_or_start(start(3)).await.unwrap(), 2, "the slot kept the fresh store");
        drop(next);
        // With the slot empty, the waiting call's store goes back.
        let mut waiting = pool.lease("a").await;
        assert!(waiting.release(), "the first released lease has ended");
        waiting.put_back(7);
        drop(waiting);
        assert_eq!(pool.lease("a").await.take_or_start(start(3)).await.unwrap(), 7);
    }

    /// An idle pool serves a member only once it joins; a lease with a deadline gives up at it.
    #[tokio::test]
    async fn an_idle_pool_serves_joined_members() {
        let pool = StorePool::idle(vec![Some('a'), None]);
        let soon = Instant::now() + std::time::Duration::from_millis(10);
        assert!(pool.lease_until("c", Some(soon)).await.is_none(), "no member has joined");
        *pool.slot(1).await = Some('b');
        pool.join(1);
        let lease = pool.lease_until("c", None).await.unwrap();
        assert_eq!(lease.member(), 1);
        assert_eq!(pool.load(), (0, 0));
        drop(lease);
        assert_eq!(pool.load(), (1, 0));
        assert_eq!(pool.len(), 2);
    }
}
