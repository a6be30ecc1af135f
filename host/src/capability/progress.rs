//! The `progress` capability: tools report long work (ingesting a document) while it runs,
//! and whoever drives the host (the CLI's progress bar, later MCP progress notifications)
//! subscribes.
//!
//! Reports go onto one process-wide broadcast bus, tagged with the reporting instance's name,
//! because a report can come from any store (a tool opening during load, a call, a recycled
//! instance) and subscribers want them all. A lagging or absent subscriber loses reports,
//! never blocks a tool.

use std::sync::OnceLock;

use tokio::sync::broadcast;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::quarry::retrieval::progress as wit;

/// One report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The tool instance that sent it.
    pub instance: String,
    /// What is being done, in the tool's words.
    pub task: String,
    /// Units done.
    pub done: u64,
    /// Units in all; 0 when unknown.
    pub total: u64,
    /// The unit, e.g. "chunks".
    pub unit: String,
}

fn bus() -> &'static broadcast::Sender<Progress> {
    static BUS: OnceLock<broadcast::Sender<Progress>> = OnceLock::new();
    BUS.get_or_init(|| broadcast::channel(256).0)
}

/// Receives every report sent from now on.
pub fn subscribe() -> broadcast::Receiver<Progress> {
    bus().subscribe()
}

/// One store's progress reporting: the name its reports carry.
pub struct State {
    instance: String,
}

impl State {
    /// The state of instance `instance`.
    pub fn new(instance: &str) -> State {
        State { instance: instance.to_string() }
    }
}

/// Adds the `progress` interface, served by the [`State`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> &mut State) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<State>>(l, get)
}

impl wit::Host for State {
    async fn report(&mut self, task: String, done: u64, total: u64, unit: String) -> wasmtime::Result<()> {
        // Bounded, so a hostile guest cannot push megabytes through every subscriber.
        let cut = |mut s: String| {
            if s.len() > 200 {
                let mut end = 200;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
            }
            s
        };
        let _ = bus().send(Progress { instance: self.instance.clone(), task: cut(task), done, total, unit: cut(unit) });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit::Host;

    /// Reports carry the instance's name, and a guest's strings are cut on a char boundary.
    #[tokio::test]
    async fn reports_are_tagged_and_bounded() {
        let mut rx = subscribe();
        let mut s = State::new("docs");
        s.report("é".repeat(300), 1, 2, "chunks".into()).await.unwrap();
        let p = loop {
            let p = rx.recv().await.unwrap();
            if p.instance == "docs" {
                break p;
            }
        };
        assert_eq!((p.done, p.total, p.unit.as_str()), (1, 2, "chunks"));
        assert_eq!(p.task, "é".repeat(100));
    }
}
