//! What the host counts for `/metrics` (served beside the MCP endpoint): each tool's calls,
//! errors by kind and latency (kept by the registry, [`crate::registry::tool_metrics`]); and,
//! read at scrape time, each instance's members and queue, each capability's own figures (the
//! Couchbase calls, the inference threads), and the process's memory. Names follow Prometheus's
//! conventions: a `quarry_` prefix, base units (seconds, bytes), `_total` on counters; a tool
//! instance is labelled `tool_instance`, since Prometheus gives `instance` to the scraped
//! target.

use crate::registry::Registry;
use crate::support::exposition::{Exposition, Kind};

/// Writes everything the registry and its capabilities count into `e`.
pub fn write(registry: &Registry, e: &mut Exposition) {
    registry.metrics().write(e);
    let instances = registry.instances();
    let mut members = e.family("quarry_instance_members", Kind::Gauge, "Pool members of each tool instance.");
    for inst in &instances {
        members.sample(&[("tool_instance", &inst.name)], inst.members() as f64);
    }
    let mut busy =
        e.family("quarry_instance_members_busy", Kind::Gauge, "Members running a call or preparing, by instance.");
    for inst in &instances {
        let (free, _) = inst.load();
        busy.sample(&[("tool_instance", &inst.name)], inst.members().saturating_sub(free) as f64);
    }
    let mut queued = e.family("quarry_instance_queue_depth", Kind::Gauge, "Calls waiting for a member, by instance.");
    for inst in &instances {
        queued.sample(&[("tool_instance", &inst.name)], inst.load().1 as f64);
    }
    let mut ready = e.family(
        "quarry_instance_ready",
        Kind::Gauge,
        "1 when the instance serves calls; 0 while it opens or prepares, or after it failed to load or to prepare. One series per configured tool instance.",
    );
    // Every configured instance, served or not: one that failed to load is 0, not absent, so
    // that one rule (`quarry_instance_ready == 0`) finds it.
    for name in registry.config().tools.keys() {
        let r = registry.instance(name).is_some_and(|i| i.readiness() == crate::registry::instance::Readiness::Ready);
        ready.sample(&[("tool_instance", name)], if r { 1.0 } else { 0.0 });
    }
    let mut info = e.family(
        "quarry_instance_component_info",
        Kind::Gauge,
        "1 for the component version each tool instance serves: its version section (\"\" when it has none) and the first 12 hex digits of its SHA-256.",
    );
    for inst in &instances {
        let sha = hex::encode(&inst.version.hash[..6]);
        let version = inst.version.version.as_deref().unwrap_or("");
        info.sample(&[("tool_instance", &inst.name), ("version", version), ("sha256", &sha)], 1.0);
    }
    e.single(
        "quarry_instances_failed",
        Kind::Gauge,
        "Configured instances and embedders that did not load.",
        registry.failures().len() as f64,
    );
    registry.config().sections.metrics(registry.apps(), e);
    if let Some(rss) = resident_bytes() {
        e.single("process_resident_memory_bytes", Kind::Gauge, "Resident memory of the host process.", rss as f64);
    }
}

/// The process's resident memory, from `/proc/self/statm` (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}
