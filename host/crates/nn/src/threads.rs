//! How many cores one inference may use: the inference pool decides (`pool::Pool::run`), each
//! backend runs accordingly (`native`, `onnxruntime`).

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
