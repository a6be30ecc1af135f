//! Hot swap: watch the directories holding configured components and models, and reload a
//! component when its file changes, or a model (`[models.NAME]`) when its `model.onnx` or its
//! manifest does.
//!
//! Events are debounced ([`DEBOUNCE`]) so a file written in several chunks is
//! read once it is complete; writers should still prefer write-then-rename. A
//! version that fails to compile or open is logged and the old one keeps
//! serving; the next change is tried again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher as _};

use crate::registry::{Registry, ReloadError};

/// Quiet time after the last event on a file before it is reloaded.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// Stops watching when dropped.
pub struct Watcher {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
    tried: tokio::sync::watch::Receiver<u64>,
}

impl Watcher {
    /// How many reloads the watcher has finished, whatever their outcome (a swap, an unchanged
    /// file, a refused version): what waits for the watcher to have seen a change waits on it.
    pub fn tried(&self) -> tokio::sync::watch::Receiver<u64> {
        self.tried.clone()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `host`'s component directories. Must run inside a tokio runtime.
pub fn watch(registry: Arc<Registry>) -> Result<Watcher, notify::Error> {
    let config = registry.config();
    let components: BTreeSet<PathBuf> =
        config.tools.values().chain(config.embedders.values()).map(|c| c.component.clone()).collect();
    // Files the capabilities' sections read (a model file, its manifest), and what each reloads.
    let sectioned: BTreeMap<PathBuf, PathBuf> = config.sections.watched().into_iter().collect();
    let dirs: BTreeSet<PathBuf> =
        components.iter().chain(sectioned.keys()).filter_map(|c| c.parent().map(PathBuf::from)).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res
            && !ev.kind.is_access()
        {
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
    })?;
    for d in &dirs {
        watcher.watch(d, RecursiveMode::NonRecursive)?;
        tracing::info!(target: "quarry::swap", dir = %d.display(), "watching for new component versions");
    }
    let (tried_tx, tried) = tokio::sync::watch::channel(0u64);
    let task = tokio::spawn(async move {
        let mut pending: BTreeMap<PathBuf, Instant> = BTreeMap::new();
        loop {
            let wait = pending.values().min().map(|t| (*t + DEBOUNCE).saturating_duration_since(Instant::now()));
            let event = match wait {
                Some(w) => tokio::time::timeout(w, rx.recv()).await.ok(),
                None => Some(rx.recv().await),
            };
            match event {
                Some(None) => return,
                Some(Some(path)) if components.contains(&path) => {
                    pending.insert(path, Instant::now());
                }
                Some(Some(path)) if sectioned.contains_key(&path) => {
                    pending.insert(sectioned[&path].clone(), Instant::now());
                }
                Some(Some(_)) | None => {}
            }
            let now = Instant::now();
            let due: Vec<PathBuf> =
                pending.iter().filter(|(_, t)| now >= **t + DEBOUNCE).map(|(p, _)| p.clone()).collect();
            for path in due {
                pending.remove(&path);
                if !path.is_file() {
                    continue;
                }
                match registry.reload(&path).await {
                    Ok(_) | Err(ReloadError::Unchanged(_)) => {}
                    Err(e) => tracing::error!(target: "quarry::swap", "{e}"),
                }
                tried_tx.send_modify(|n| *n += 1);
            }
        }
    });
    Ok(Watcher { _watcher: watcher, task, tried })
}
