//! A fair queue for a pool of workers shared by several clients.
//!
//! [`FairQueue::acquire`] hands out one worker (its index) at a time. When every worker is
//! busy, waiters queue per client, and a released worker goes to the clients in turn (round
//! robin), not in arrival order: a client that queued a hundred requests waits behind one
//! request of each other client, not the other way round. Used by the embedder pool, with the
//! calling tool instance as the client; anything that shares a bounded set of workers between
//! tools can use it.
//!
//! Cancellation-safe: a waiter that gives up (its future dropped) leaves the queue, and a
//! worker handed to a waiter that has just given up goes to the next one.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::oneshot;

/// See the module docs. Cheap to share: hold it in an `Arc`.
pub struct FairQueue {
    state: Mutex<State>,
}

struct State {
    /// Workers no one holds.
    free: Vec<usize>,
    /// Waiters by client, each client's in arrival order.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Permit>>>,
    /// Clients with waiters, in the order they are served.
    turn: VecDeque<String>,
}

/// One worker, held until dropped.
pub struct Permit {
    /// `None` once the worker has been handed on without this permit.
    queue: Option<Arc<FairQueue>>,
    worker: usize,
}

impl Permit {
    /// The worker's index.
    pub fn worker(&self) -> usize {
        self.worker
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.release(self.worker);
        }
    }
}

impl FairQueue {
    /// A queue over workers `0..workers`.
    pub fn new(workers: usize) -> Arc<FairQueue> {
        Arc::new(FairQueue {
            state: Mutex::new(State {
                free: (0..workers).rev().collect(),
                waiting: HashMap::new(),
                turn: VecDeque::new(),
            }),
        })
    }

    /// A queue over workers `0..workers` of which none is free yet: each joins with
    /// [`FairQueue::add`] once it can serve (a tool instance once it has prepared).
    pub fn idle(workers: usize) -> Arc<FairQueue> {
        let q = FairQueue::new(workers);
        q.lock().free.clear();
        q
    }

    /// Worker `worker` (of an [`FairQueue::idle`] queue) starts serving: it goes to the first
    /// waiter in turn, or joins the free ones.
    pub fn add(self: &Arc<Self>, worker: usize) {
        self.release(worker);
    }

    /// Waits for a worker for `client`, served in turn with the other clients.
    pub async fn acquire(self: &Arc<Self>, client: &str) -> Permit {
        let rx = {
            let mut s = self.lock();
            // A free worker means no one waits: release hands workers to waiters first.
            if let Some(worker) = s.free.pop() {
                return Permit { queue: Some(self.clone()), worker };
            }
            let (tx, rx) = oneshot::channel();
            let queue = s.waiting.entry(client.to_string()).or_default();
            queue.push_back(tx);
            if queue.len() == 1 {
                s.turn.push_back(client.to_string());
            }
            rx
        };
        // The sender lives in the queue until a worker is handed over, so this only fails if
        // the queue itself is gone, which an `Arc` held by the caller rules out.
        match rx.await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the queue outlives its waiters"),
        }
    }

    /// Workers free now, and clients waiting (for tests and benches).
    pub fn load(&self) -> (usize, usize) {
        let s = self.lock();
        (s.free.len(), s.turn.len())
    }

    fn release(self: &Arc<Self>, worker: usize) {
        let mut s = self.lock();
        while let Some(client) = s.turn.pop_front() {
            let Some(queue) = s.waiting.get_mut(&client) else { continue };
            let Some(tx) = queue.pop_front() else {
                s.waiting.remove(&client);
                continue;
            };
            if queue.is_empty() {
                s.waiting.remove(&client);
            } else {
                s.turn.push_back(client);
            }
            // The permit moves into the channel. If the waiter has just given up it comes back,
            // and the worker goes to the next waiter instead (the lock is released meanwhile:
            // a permit dropped with a closed channel's value would release again).
            drop(s);
            match tx.send(Permit { queue: Some(self.clone()), worker }) {
                Ok(()) => return,
                Err(mut permit) => {
                    permit.queue = None;
                    s = self.lock();
                }
            }
        }
        s.free.push(worker);
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clients_take_turns() {
        let q = FairQueue::new(1);
        let held = q.acquire("a").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // "a" queues three requests before "b" and "c" queue one each.
        for client in ["a", "a", "a", "b", "c"] {
            let (q, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let p = q.acquire(client).await;
                order.lock().push(client);
                tokio::task::yield_now().await;
                drop(p);
            }));
            tokio::task::yield_now().await;
        }
        assert_eq!(q.load(), (0, 3));
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock(), ["a", "b", "c", "a", "a"]);
        assert_eq!(q.load(), (1, 0));
    }

    /// An idle queue hands out nothing until a worker is added, then hands it to the waiter.
    #[tokio::test]
    async fn an_idle_queue_serves_once_a_worker_joins() {
        let q = FairQueue::idle(2);
        assert_eq!(q.load(), (0, 0));
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.acquire("a").await.worker() }
        });
        tokio::task::yield_now().await;
        assert_eq!(q.load(), (0, 1));
        q.add(1);
        assert_eq!(waiting.await.unwrap(), 1);
        assert_eq!(q.load(), (1, 0));
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_does_not_lose_the_worker() {
        let q = FairQueue::new(1);
        let held = q.acquire("a").await;
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(20), q.acquire("b")).await;
        assert!(gave_up.is_err());
        drop(held);
        let again = tokio::time::timeout(std::time::Duration::from_secs(1), q.acquire("c")).await;
        assert!(again.is_ok(), "the worker went to the waiter that left");
    }
}
