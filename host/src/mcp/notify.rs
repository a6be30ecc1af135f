//! Telling connected MCP clients that the tools changed.
//!
//! Handshake-era sessions (stdio, or one HTTP session per client) register their
//! peer when the client says `initialized`; [`fan_out`] sends each of them
//! `notifications/tools/list_changed` after every successful swap. 2026-07-28
//! clients hear of swaps through `subscriptions/listen` instead (see the handler).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use rmcp::{Peer, RoleServer};

use crate::registry::Registry;

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
        // Clone the list and release the lock before any await: a slow client must not block
        // a new session from registering.
        let peers: Vec<Peer<RoleServer>> = {
            let mut list = self.list.lock();
            list.retain(|p| !p.is_transport_closed());
            list.clone()
        };
        let mut sent = 0;
        for peer in peers {
            match tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed()).await {
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

/// Forwards every swap of `host` to `peers` until the host goes away. Spawn it once per server.
pub async fn fan_out(registry: Arc<Registry>, peers: Arc<Peers>) {
    let mut swaps = registry.subscribe();
    drop(registry);
    loop {
        match swaps.recv().await {
            Ok(report) => {
                let sent = peers.tools_changed().await;
                tracing::info!(target: "quarry::mcp", instances = ?report.instances, clients = sent, "tools/list_changed sent");
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                peers.tools_changed().await;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}
