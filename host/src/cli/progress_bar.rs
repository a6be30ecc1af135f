//! Progress bars on stderr for long work that tools report (ingesting a document).

/// The most progress bars shown at once.
const MAX_BARS: usize = 16;

/// Draws one progress bar per (instance, task) on stderr with the rate and an ETA, and leaves a
/// one-line summary when a task finishes; nothing when stderr is not a terminal. Runs until
/// aborted.
pub(super) async fn show_progress(mut rx: tokio::sync::broadcast::Receiver<crate::capability::progress::Progress>) {
    use std::collections::HashMap;

    use indicatif::{MultiProgress, ProgressBar, ProgressState, ProgressStyle};

    let multi = MultiProgress::new();
    let rate = |state: &ProgressState, w: &mut dyn std::fmt::Write| {
        let _ = write!(w, "{:.1}/s", state.per_sec());
    };
    let style = ProgressStyle::with_template("{prefix} {wide_bar} {pos}/{len} {msg} ({rate}, eta {eta})")
        .map(|s| s.with_key("rate", rate))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let mut bars: HashMap<(String, String), ProgressBar> = HashMap::new();
    loop {
        let mut p = match rx.recv().await {
            Ok(p) => p,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        // A tool names its tasks: they reach the terminal escaped.
        p.task = crate::support::text::for_terminal(&p.task);
        p.unit = crate::support::text::for_terminal(&p.unit);
        let key = (p.instance.clone(), p.task.clone());
        if !bars.contains_key(&key) && bars.len() >= MAX_BARS {
            // Reports that never finish must not grow the screen or the map without end.
            continue;
        }
        let bar = bars.entry(key.clone()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new(p.total));
            bar.set_style(style.clone());
            bar.set_prefix(format!("{}: {}", p.instance, p.task));
            bar.set_message(p.unit.clone());
            bar
        });
        bar.set_length(p.total.max(p.done));
        bar.set_position(p.done);
        if p.total > 0 && p.done >= p.total {
            let secs = bar.elapsed().as_secs_f64();
            let _ = multi.println(format!(
                "{}: {}: {} {} in {secs:.1} s ({:.1}/s)",
                p.instance,
                p.task,
                p.done,
                p.unit,
                p.done as f64 / secs.max(1e-3)
            ));
            bar.finish_and_clear();
            bars.remove(&key);
        }
    }
}
