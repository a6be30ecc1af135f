//! What the tool needs from outside, beyond rag-core's: the index and the tool take it, the
//! component implements it on the guest's WASI, tests natively.

use tool_guest::tool::BaseEnv;

/// What the tool needs from outside beyond rag-core's [`BaseEnv`].
pub trait Env: BaseEnv {
    /// Size and modification time of a file, to notice edits; `None` when it cannot be read.
    fn stamp(&self, path: &str) -> Option<(u64, u128)>;
}
