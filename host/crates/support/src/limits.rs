//! What every instance is limited to, whatever it is granted: memory, time per call and output
//! size, with their defaults; and the one rule that puts a host call inside a call's deadline.

use std::time::Duration;

use crate::values::{HumanDuration, KeyError};

/// Default linear-memory limit for an instance.
pub const DEFAULT_MEMORY: u64 = 256 << 20;
/// The least default deadline of an instance's preparation (an index build, an ingest): the
/// larger of this and the instance's `deadline`, unless `grants.prepare_deadline` says.
pub const MIN_PREPARE_DEADLINE: Duration = Duration::from_secs(600);
/// Default per-call deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Default cap on the size of one call's output.
pub const DEFAULT_MAX_OUTPUT: u64 = 16 << 20;
/// The largest memory limit a grant may ask for (the pooling allocator reserves this per memory).
pub const MAX_MEMORY: u64 = 4 << 30;
/// The largest component file compiled unless `[host] max_component_size` says otherwise:
/// compiling takes time and memory in proportion to the size. The largest of Quarry's own (the
/// ONNX embedder) is about 22 MiB.
pub const DEFAULT_MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// Default `[host] compile_memory`: over 4x what Quarry's largest component (chapter-rag,
/// 5.7 MiB) takes to compile on 2 cores.
pub const DEFAULT_COMPILE_MEMORY: u64 = 1 << 30;
/// Default `[host] compile_timeout`: chapter-rag compiles in about 1.5 s on 2 cores.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(60);

/// The limits of one compilation of a component (`[host] compile_memory`, `compile_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Bytes the compiler may allocate.
    pub memory: u64,
    /// Wall-clock time it may take.
    pub time: Duration,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits { memory: DEFAULT_COMPILE_MEMORY, time: DEFAULT_COMPILE_TIMEOUT }
    }
}

/// How long a host call may take inside a call's `deadline`: a second less, or half of a short
/// one. Time blocked in a host call is not counted by epochs, so a host call still waiting when
/// the deadline passes is abandoned as a fault and its instance recycled: a capability's own
/// timeout must end first.
pub fn deadline_room(deadline: Duration) -> Duration {
    deadline.saturating_sub(Duration::from_secs(1)).max(deadline / 2)
}

/// A capability's timeout under `key`: `asked`, else `default`, either within
/// [`deadline_room`]; a longer `asked` is an error saying how to allow it.
pub fn within_deadline(
    asked: Option<HumanDuration>,
    default: Duration,
    deadline: Duration,
    key: &str,
) -> Result<Duration, KeyError> {
    let room = deadline_room(deadline);
    match asked {
        None => Ok(default.min(room)),
        Some(d) if d.0 <= room => Ok(d.0),
        Some(d) => Err(KeyError::new(
            key,
            format!(
                "{:?} does not fit in the call's grants.deadline of {deadline:?}: at most {room:?}; raise grants.deadline to wait longer",
                d.0
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_calls_fit_inside_the_deadline() {
        assert_eq!(deadline_room(Duration::from_secs(10)), Duration::from_secs(9));
        assert_eq!(deadline_room(Duration::from_millis(1500)), Duration::from_millis(750));
        let d = Duration::from_secs(10);
        assert_eq!(within_deadline(None, Duration::from_secs(30), d, "timeout"), Ok(Duration::from_secs(9)));
        assert_eq!(
            within_deadline(Some(HumanDuration(Duration::from_secs(2))), Duration::ZERO, d, "t"),
            Ok(Duration::from_secs(2))
        );
        let e =
            within_deadline(Some(HumanDuration(Duration::from_secs(30))), Duration::ZERO, d, "timeout").unwrap_err();
        assert_eq!(e.key, "timeout");
        assert!(e.message.contains("does not fit in the call's grants.deadline of 10s: at most 9s"), "{}", e.message);
    }
}
