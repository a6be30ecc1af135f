//! The `progress` capability: tools report long work (ingesting a document) while it runs,
//! and whoever drives the host (the CLI's progress bar, later MCP progress notifications)
//! subscribes.
//!
//! Every report goes to two places, the same events for both:
//! - the app's broadcast bus ([`AppState`]), tagged with the reporting instance's name, for the CLI's
//!   progress bars, which want every store's reports (a tool preparing, a call, a recycled
//!   instance). A lagging or absent subscriber loses reports, never blocks a tool.
//! - the store's own [`Sink`], when its owner gave it one: the latest [`Report`] of that
//!   instance, which a call waiting on its preparation, or running on it, forwards to its MCP
//!   client as `notifications/progress`, and which a "not ready" error quotes.

use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The latest report of one store, with when its task began: enough to say how far along the
/// work is and how long it has left.
#[derive(Clone, Debug)]
pub struct Report {
    /// The report.
    pub progress: Progress,
    /// When the first report of this task arrived.
    pub since: Instant,
    /// When this one arrived.
    pub at: Instant,
}

impl Report {
    /// Time left at the rate so far, once a tenth of a second of work and one unit are done.
    pub fn eta(&self) -> Option<Duration> {
        let p = &self.progress;
        let spent = self.at.saturating_duration_since(self.since);
        if p.total == 0 || p.done == 0 || p.done >= p.total || spent < Duration::from_millis(100) {
            return None;
        }
        Some(spent.mul_f64((p.total - p.done) as f64 / p.done as f64))
    }

    /// "indexing MANUAL.md: 1,380 of 3,259 chunks, about 60 s left", for people and LLMs.
    pub fn status(&self) -> String {
        let p = &self.progress;
        let mut s = if p.total > 0 {
            format!("{}: {} of {} {}", p.task, thousands(p.done), thousands(p.total), p.unit)
        } else {
            format!("{}: {} {}", p.task, thousands(p.done), p.unit)
        };
        if let Some(eta) = self.eta() {
            s += &format!(", about {} s left", eta.as_secs().max(1));
        }
        s
    }
}

/// `1380` as `1,380`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Where a store's latest [`Report`] is kept for its owner (see the module docs).
pub type Sink = tokio::sync::watch::Sender<Option<Report>>;

/// Progress's state for one app: the bus every store of it reports to (the CLI's bars).
#[derive(Clone)]
pub struct AppState {
    bus: broadcast::Sender<Progress>,
}

impl Default for AppState {
    fn default() -> Self {
        AppState { bus: broadcast::channel(256).0 }
    }
}

impl AppState {
    /// Receives every report the app's stores send from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Progress> {
        self.bus.subscribe()
    }
}

/// One store's progress reporting: the name its reports carry, the app's bus, and its owner's
/// sink.
pub struct State {
    instance: String,
    bus: broadcast::Sender<Progress>,
    sink: Option<Arc<Sink>>,
}

impl State {
    /// The state of instance `instance`, reporting to `app`'s bus.
    pub fn new(instance: &str, app: &AppState) -> State {
        State { instance: instance.to_string(), bus: app.bus.clone(), sink: None }
    }

    /// Keeps this store's latest report in `sink` too.
    pub fn set_sink(&mut self, sink: Arc<Sink>) {
        self.sink = Some(sink);
    }
}

/// The progress capability: every store may report; nothing to grant.
pub struct Reporting;

impl super::Capability for Reporting {
    type RawGrant = ();
    type Grant = ();
    type RawSection = ();
    type RawHost = ();
    type Section = ();
    type AppState = AppState;
    type State = State;

    fn grant(_: (), _: &(), _: &super::GrantContext<'_>) -> Result<(), crate::support::values::KeyError> {
        Ok(())
    }

    fn state(_: &(), app: &AppState, cx: &mut super::StoreContext<'_>) -> Result<State, super::SandboxError> {
        Ok(State::new(cx.instance, app))
    }

    fn link<T: super::CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        link(l, super::state_of::<Reporting, T>)
    }
}

/// Adds the `progress` interface, served by the [`State`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> &mut State) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<State>>(l, get)
}

impl wit::Host for State {
    async fn report(&mut self, task: String, done: u64, total: u64, unit: String) -> wasmtime::Result<()> {
        self.link().deliver(task, done, total, unit);
        Ok(())
    }
}

impl State {
    /// Where this store's reports go, for the host's own code to report through (a corpus
    /// relaying another host's progress) and to read the latest from.
    pub fn link(&self) -> Link {
        Link { instance: self.instance.clone(), bus: self.bus.clone(), sink: self.sink.clone() }
    }
}

/// A store's reporting, apart from the store: its instance's name, the app's bus and its sink.
#[derive(Clone)]
pub struct Link {
    instance: String,
    bus: broadcast::Sender<Progress>,
    sink: Option<Arc<Sink>>,
}

impl Link {
    /// Sends one report to the sink and the bus, its strings cut short.
    fn deliver(&self, task: String, done: u64, total: u64, unit: String) {
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
        let progress = Progress { instance: self.instance.clone(), task: cut(task), done, total, unit: cut(unit) };
        if let Some(sink) = &self.sink {
            let now = Instant::now();
            sink.send_modify(|latest| {
                // A task goes on while its name stays and its count does not go back.
                let since = match latest {
                    Some(r) if r.progress.task == progress.task && r.progress.done <= done => r.since,
                    _ => now,
                };
                *latest = Some(Report { progress: progress.clone(), since, at: now });
            });
        }
        let _ = self.bus.send(progress);
    }
}

impl quarry_corpus::progress::ProgressLink for Link {
    fn latest(&self) -> Option<quarry_corpus::progress::LeaseProgress> {
        let sink = self.sink.as_ref()?;
        let latest = sink.borrow();
        let p = &latest.as_ref()?.progress;
        Some(quarry_corpus::progress::LeaseProgress {
            task: p.task.clone(),
            done: p.done,
            total: p.total,
            unit: p.unit.clone(),
        })
    }

    fn report(&self, p: &quarry_corpus::progress::LeaseProgress) {
        self.deliver(p.task.clone(), p.done, p.total, p.unit.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit::Host;

    /// Reports carry the instance's name, and a guest's strings are cut on a char boundary.
    #[tokio::test]
    async fn reports_are_tagged_and_bounded() {
        let app = AppState::default();
        let mut rx = app.subscribe();
        let mut s = State::new("docs", &app);
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

    /// The sink keeps the latest report and when its task began; a new task starts the clock again.
    #[tokio::test]
    async fn the_sink_keeps_the_latest_report_of_a_task() {
        let sink = Arc::new(tokio::sync::watch::channel(None).0);
        let mut s = State::new("docs", &AppState::default());
        s.set_sink(sink.clone());
        s.report("indexing m.md".into(), 0, 3259, "chunks".into()).await.unwrap();
        let first = sink.borrow().clone().unwrap();
        s.report("indexing m.md".into(), 1380, 3259, "chunks".into()).await.unwrap();
        let r = sink.borrow().clone().unwrap();
        assert_eq!((r.progress.done, r.since), (1380, first.since));
        s.report("other".into(), 1, 2, "files".into()).await.unwrap();
        assert_eq!(sink.borrow().as_ref().unwrap().progress.task, "other");
    }

    #[test]
    fn status_says_how_far_along_and_how_long_is_left() {
        let t = Instant::now();
        let progress = Progress {
            instance: "m".into(),
            task: "indexing the manual".into(),
            done: 1380,
            total: 3259,
            unit: "chunks".into(),
        };
        let r = Report { progress, since: t, at: t + Duration::from_secs(44) };
        assert_eq!(r.status(), "indexing the manual: 1,380 of 3,259 chunks, about 59 s left");
        let early = Report { at: t, ..r.clone() };
        assert_eq!(early.status(), "indexing the manual: 1,380 of 3,259 chunks");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }
}
