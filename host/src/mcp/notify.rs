//! Telling connected MCP clients that the tools, resources or prompts changed.
//!
//! Two things change them: a swap (a new component version: any of the three), and a call that
//! says one of its instance's lists changed (`quarry:retrieval/client`'s `changed`).
//! [`Changes`] hears both. Handshake-era sessions (stdio, or one HTTP session per client)
//! register their peer when the client says `initialized`; [`fan_out`] sends each of them the
//! `notifications/*/list_changed` of every change. 2026-07-28 clients hear of them through
//! `subscriptions/listen` instead (see the handler), filtered as they asked.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use rmcp::{Peer, RoleServer};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use crate::capability::client::{ListChange, ListKind};
use crate::registry::{Registry, SwapReport};

/// Every list a swap may change.
const ALL: [ListKind; 3] = [ListKind::Tools, ListKind::Resources, ListKind::Prompts];

/// The changes of one registry, as they come.
pub struct Changes {
    swaps: Receiver<SwapReport>,
    lists: Receiver<ListChange>,
}

impl Changes {
    /// Hears `registry`'s changes from now on.
    pub fn of(registry: &Registry) -> Changes {
        Changes { swaps: registry.subscribe(), lists: registry.apps().client.subscribe() }
    }

    /// The lists the next change changed; `None` once the registry is gone. A receiver that
    /// lagged behind says all of them changed.
    pub async fn next(&mut self) -> Option<Vec<ListKind>> {
        tokio::select! {
            swap = self.swaps.recv() => match swap {
                Ok(_) | Err(RecvError::Lagged(_)) => Some(ALL.to_vec()),
                Err(RecvError::Closed) => None,
            },
            change = self.lists.recv() => match change {
                Ok(c) => Some(vec![c.kind]),
                Err(RecvError::Lagged(_)) => Some(ALL.to_vec()),
                Err(RecvError::Closed) => None,
            },
        }
    }
}

/// How long one client may take to accept a notification before it is skipped: a stuck
/// client must not hold up the others.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The connected handshake-era clients.
#[derive(Default)]
pub struct Peers {
    list: Mutex<Vec<Peer<RoleServer>>>,
}

impl Peers {
    /// Registers a client that finished its handshake.
    pub fn add(&self, peer: Peer<RoleServer>) {
        let mut list = self.list.lock();
        list.retain(|p| !p.is_transport_closed());
        list.push(peer);
    }

    /// Sends `tools/list_changed` to every connected client; returns how many took it.
    pub async fn tools_changed(&self) -> usize {
        self.changed(&[ListKind::Tools]).await
    }

    /// Sends the `list_changed` of each of `kinds` to every connected client; returns how many
    /// took them.
    pub async fn changed(&self, kinds: &[ListKind]) -> usize {
        // Clone the list and release the lock before any await: a slow client must not block
        // a new session from registering.
        let peers: Vec<Peer<RoleServer>> = {
            let mut list = self.list.lock();
            list.retain(|p| !p.is_transport_closed());
            list.clone()
        };
        let mut sent = 0;
        for peer in peers {
            let send = async {
                for kind in kinds {
                    match kind {
                        ListKind::Tools => peer.notify_tool_list_changed().await?,
                        ListKind::Resources => peer.notify_resource_list_changed().await?,
                        ListKind::Prompts => peer.notify_prompt_list_changed().await?,
                    }
                }
                Ok::<(), rmcp::service::ServiceError>(())
            };
            match tokio::time::timeout(NOTIFY_TIMEOUT, send).await {
                Ok(Ok(())) => sent += 1,
                Ok(Err(e)) => tracing::debug!(target: "quarry::mcp", "client gone, not notified: {e}"),
                Err(_) => {
                    tracing::warn!(target: "quarry::mcp", "a client took over {NOTIFY_TIMEOUT:?} to take a notification; skipped")
                }
            }
        }
        sent
    }
}

/// Forwards every change of `host` to `peers` until the host goes away. Spawn it once per
/// server.
pub async fn fan_out(registry: Arc<Registry>, peers: Arc<Peers>) {
    let mut changes = Changes::of(&registry);
    drop(registry);
    while let Some(kinds) = changes.next().await {
        let sent = peers.changed(&kinds).await;
        tracing::info!(target: "quarry::mcp", lists = ?kinds, clients = sent, "list_changed sent");
    }
}
