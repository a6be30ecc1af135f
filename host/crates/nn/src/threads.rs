//! How many cores one inference may use: the inference threads decide (`inference::InferenceThreads::run`), each
//! backend runs accordingly (`native`, `onnxruntime`). And where the pool's threads run: each
//! on a core of its own where the process owns its cores ([`pin_to`]).

/// How many cores one run may split its work over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// The calling thread alone.
    One,
    /// Every core: tract's matrix products over a process-wide executor, onnxruntime's
    /// session whose intra-op pool spans the cores.
    Every,
}

/// The number of cores this process may use.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Whether the inference threads are pinned: `QUARRY_NN_PIN`, `0` for no, else yes (where
/// [`pin_to`] can).
#[cfg(target_os = "linux")]
fn pinning_wanted() -> bool {
    std::env::var("QUARRY_NN_PIN").map_or(true, |v| v.trim() != "0")
}

#[cfg(target_os = "linux")]
mod affinity {
    /// A set of CPUs.
    pub(super) type Set = libc::cpu_set_t;

    /// The CPUs the calling thread may run on.
    pub(super) fn allowed() -> Option<Set> {
        let mut set = empty();
        // SAFETY: the size passed is the set's own.
        (unsafe { libc::sched_getaffinity(0, std::mem::size_of::<Set>(), &mut set) } == 0).then_some(set)
    }

    /// No CPU.
    pub(super) fn empty() -> Set {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        unsafe { std::mem::zeroed() }
    }

    /// The set of `cpus`.
    pub(super) fn of(cpus: &[usize]) -> Set {
        let mut set = empty();
        for &c in cpus {
            // SAFETY: CPU_SET writes within the set (it ignores CPUs past CPU_SETSIZE).
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        set
    }

    /// The CPUs in `set`, in order.
    pub(super) fn cpus(set: &Set) -> Vec<usize> {
        // SAFETY: CPU_ISSET reads within the set.
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, set) }).collect()
    }

    /// Lets the calling thread run on `set` only.
    pub(super) fn set(set: &Set) -> bool {
        // SAFETY: the size passed is the set's own.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<Set>(), set) == 0 }
    }
}

/// The process's CPUs, when it owns them: the calling thread may run on exactly [`cores`] CPUs
/// (two or more). Under a CPU quota (a container given 2 CPUs' time on a larger machine) the
/// threads see more CPUs than they may use, and other processes share them: no pinning there.
/// First asked by an inference thread before it pins itself, so it sees the process's CPUs.
#[cfg(target_os = "linux")]
fn owned_cpus() -> Option<&'static [usize]> {
    static OWNED: std::sync::OnceLock<Option<Vec<usize>>> = std::sync::OnceLock::new();
    OWNED
        .get_or_init(|| {
            let cpus = affinity::cpus(&affinity::allowed()?);
            (cpus.len() == cores() && cpus.len() > 1).then_some(cpus)
        })
        .as_deref()
}

/// Pins the calling thread (inference thread `slot` of [`cores`]) to a core of its own, where
/// the process owns its cores and `QUARRY_NN_PIN` is not `0`; says whether it did.
///
/// Why: a question's inference is a burst of a few milliseconds after a hand-off from the
/// guest's thread. Left to the scheduler, the two bursts of a pool of two were often queued on
/// one core while the other idled (`perf sched` on `make bench-mcp`'s pool of two, 2 cores:
/// runnable threads waited 0.17 s a second with the other core idle). A core per inference
/// thread keeps them apart.
#[cfg(target_os = "linux")]
pub(crate) fn pin_to(slot: usize) -> bool {
    match owned_cpus().filter(|_| pinning_wanted()) {
        Some(cpus) => affinity::set(&affinity::of(&[cpus[slot % cpus.len()]])),
        None => false,
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn pin_to(_slot: usize) -> bool {
    false
}

/// Runs `f` with the calling thread allowed on every CPU the process owns, then restores its
/// own: threads that `f` starts inherit the CPUs of the thread that starts them, and a pool made
/// on a pinned inference thread (tract's wide executor) must not crowd onto its one core.
#[cfg(target_os = "linux")]
pub(crate) fn unpinned<T>(f: impl FnOnce() -> T) -> T {
    let (Some(cpus), Some(own)) = (owned_cpus(), affinity::allowed()) else { return f() };
    affinity::set(&affinity::of(cpus));
    let out = f();
    affinity::set(&own);
    out
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn unpinned<T>(f: impl FnOnce() -> T) -> T {
    f()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The CPUs the calling thread may run on.
    fn mine() -> Vec<usize> {
        affinity::cpus(&affinity::allowed().expect("sched_getaffinity"))
    }

    /// On a process that owns its cores, a pinned thread runs on one, another slot's on another,
    /// and a thread started inside `unpinned` may use them all again, the pinned thread keeping
    /// its one. Elsewhere (one core, a CPU quota, `QUARRY_NN_PIN=0`) nothing is pinned.
    #[test]
    fn each_slot_pins_to_its_own_core_and_unpinned_threads_see_every_core() {
        let before = mine();
        let run = |slot: usize| {
            std::thread::spawn(move || {
                let pinned = pin_to(slot);
                let own = mine();
                let child = unpinned(|| std::thread::spawn(mine).join().unwrap());
                (pinned, own, child, mine())
            })
            .join()
            .unwrap()
        };
        let (pinned0, own0, child0, after0) = run(0);
        let (pinned1, own1, _, _) = run(1);
        if owned_cpus().is_none() || !pinning_wanted() {
            assert!(!pinned0 && !pinned1, "nothing is pinned where the process does not own its cores");
            assert_eq!(own0, before);
            return;
        }
        assert!(pinned0 && pinned1);
        assert_eq!(own0.len(), 1, "slot 0 runs on one core: {own0:?}");
        assert_eq!(own1.len(), 1, "slot 1 runs on one core: {own1:?}");
        assert_ne!(own0, own1, "two slots, two cores");
        assert_eq!(child0, before, "a thread started in `unpinned` may use every core");
        assert_eq!(after0, own0, "the pinned thread keeps its core afterwards");
        assert_eq!(mine(), before, "the test's own thread was never pinned");
    }
}
