//! Why an instance could not open ([`OpenError`]) or a request failed ([`CallError`]), and the
//! bounds on what a component's own error messages may carry into them.

use std::path::PathBuf;

use crate::bindings::ToolError;
use crate::capability::embedder::EMBEDDER_IMPORT;
use crate::runtime::engine::EngineError;
use crate::runtime::guarded::Fault;

/// The longest tool error message passed on (it is also cut to `max_output`).
pub const MAX_ERROR_BYTES: usize = 64 << 10;
/// The longest message of a component that rejected its config, kept for later hints.
pub const MAX_REJECTION_BYTES: usize = 4 << 10;
/// Why a component could not be loaded or an instance opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading or compiling the component failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// It does not fit the host: a missing export, an import no capability provides.
    #[error("{path} cannot be linked: {message}")]
    Link {
        /// The component file.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
    /// The component needs an embedder and the config names none.
    #[error(
        "tool instance {instance:?} imports `{EMBEDDER_IMPORT}` but its config names no embedder; add `embedder = \"NAME\"` naming an [embedders.NAME] entry"
    )]
    NoEmbedder {
        /// The instance.
        instance: String,
    },
    /// The embedder this tool names did not load.
    #[error("tool instance {instance:?} needs embedder {embedder:?}, which did not load: {reason}")]
    EmbedderUnavailable {
        /// The instance.
        instance: String,
        /// The embedder it names.
        embedder: String,
        /// Why the embedder failed.
        reason: String,
    },
    /// An embedder component's `load` returned an error.
    #[error("embedder {instance:?} could not load its model: {reason}")]
    ModelRejected {
        /// The embedder instance.
        instance: String,
        /// The component's reason.
        reason: String,
    },
    /// The grants could not be applied.
    #[error("tool instance {instance:?}: {source}")]
    Sandbox {
        /// The instance.
        instance: String,
        /// Why.
        source: crate::capability::SandboxError,
    },
    /// `open` returned an error.
    #[error("tool instance {instance:?} rejected its config: {}", error.describe())]
    Rejected {
        /// The instance.
        instance: String,
        /// The component's reason.
        error: ToolError,
    },
    /// `prepare` returned an error.
    #[error("tool instance {instance:?} could not prepare: {}", error.describe())]
    Unprepared {
        /// The instance.
        instance: String,
        /// The component's reason.
        error: ToolError,
    },
    /// The component faulted while starting.
    #[error("tool instance {instance:?} failed while starting: {fault}")]
    Fault {
        /// The instance.
        instance: String,
        /// What happened.
        fault: Fault,
    },
    /// With `bare_names`, it lists a tool under a name another instance answers to.
    #[error(
        "tool instance {instance:?} lists tool {name:?} by its bare name (bare_names), which instance {other:?} {how}; a name two instances claim is refused: rename one instance, or drop bare_names"
    )]
    NameClaimed {
        /// The instance refused.
        instance: String,
        /// The name.
        name: String,
        /// The instance that answers to it too.
        other: String,
        /// How the other answers to it.
        how: &'static str,
    },
    /// `specs` returned something unusable.
    #[error("tool instance {instance:?} describes its tools wrongly: {message}")]
    BadSpec {
        /// The instance.
        instance: String,
        /// What is wrong.
        message: String,
    },
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No such tool.
    #[error("no tool named {name:?}; {hint}")]
    UnknownTool {
        /// What was asked for.
        name: String,
        /// The nearest names, or how to list them.
        hint: String,
    },
    /// The arguments are not a JSON object.
    #[error("{tool}: arguments must be a JSON object, like '{example}': {message}")]
    BadArgs {
        /// The tool.
        tool: String,
        /// Arguments of the tool's schema ([`crate::args::example`]).
        example: String,
        /// The parser's reason.
        message: String,
    },
    /// The arguments are over [`crate::args::MAX_ARGS_BYTES`].
    #[error("{tool}: the arguments are {size} bytes, over the limit of {limit} bytes; pass less text")]
    ArgsTooLarge {
        /// The tool.
        tool: String,
        /// Their size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The tool returned an error.
    #[error("{tool}: {}", error.describe())]
    Tool {
        /// The tool.
        tool: String,
        /// The tool's error, with the host's note appended when the sandbox refused something.
        error: ToolError,
    },
    /// The tool faulted; its instance was recycled.
    #[error("{tool}: {fault}; the instance was recycled and the next call gets a fresh one")]
    Fault {
        /// The tool.
        tool: String,
        /// What happened.
        fault: Fault,
    },
    /// The output is over the grant.
    #[error(
        "{tool}: its output of {size} bytes exceeds grants.max_output ({limit} bytes); ask for less (a smaller limit) or raise the grant"
    )]
    OutputTooLarge {
        /// The tool.
        tool: String,
        /// Bytes produced.
        size: usize,
        /// The grant.
        limit: u64,
    },
    /// The instance was still preparing when the call had waited its deadline.
    #[error(
        "{tool}: not ready yet: after waiting {}s the instance is still {status}; try again later",
        waited.as_secs()
    )]
    NotReady {
        /// The tool.
        tool: String,
        /// How long the call waited.
        waited: std::time::Duration,
        /// How far along the preparation is.
        status: String,
    },
    /// The caller gave up while the call waited for its instance; it never ran.
    #[error("{tool}: cancelled before it started")]
    Cancelled {
        /// The tool.
        tool: String,
    },
    /// Its instance could not prepare (build its index, say) for this call.
    #[error("{tool}: its instance could not prepare (each call tries again): {}", error.describe())]
    Unprepared {
        /// The tool.
        tool: String,
        /// The component's reason.
        error: ToolError,
    },
    /// Recycling the instance failed.
    #[error("{tool}: cannot restart its instance: {source}")]
    Restart {
        /// The tool.
        tool: String,
        /// Why.
        source: Box<OpenError>,
    },
}

impl CallError {
    /// The kind of failure, as `/metrics` counts it: one short name per variant, but a tool's
    /// `invalid-args` counts as `bad_args`.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "unknown_tool",
            // The client's arguments, whoever found them wrong: the host (not an object) or
            // the tool (a wrong type, a missing or unknown key, a value out of range).
            CallError::BadArgs { .. } | CallError::Tool { error: ToolError::InvalidArgs(_), .. } => "bad_args",
            CallError::ArgsTooLarge { .. } => "args_too_large",
            CallError::Tool { .. } => "tool_error",
            CallError::Fault { .. } => "fault",
            CallError::OutputTooLarge { .. } => "output_too_large",
            CallError::NotReady { .. } => "not_ready",
            CallError::Cancelled { .. } => "cancelled",
            CallError::Unprepared { .. } => "unprepared",
            CallError::Restart { .. } => "restart",
        }
    }
}

/// Appends the sandbox's refusals to a tool error so the user sees which grant would help; an
/// upstream failure the sandbox caused becomes `denied`.
pub(super) fn with_denials(error: ToolError, refusals: &[String]) -> ToolError {
    if refusals.is_empty() {
        return error;
    }
    let note = format!(" [host: {}]", refusals.join("; "));
    match map_message(error, |m| m + &note) {
        ToolError::Upstream(m) => ToolError::Denied(m),
        other => other,
    }
}

/// A tool error with its message cut to `max` bytes: the guest chooses its length.
pub(super) fn bounded(error: ToolError, max: usize) -> ToolError {
    map_message(error, |m| if m.len() > max { crate::support::text::cut(&m, max) } else { m })
}

/// `error` of the same kind with its message mapped by `f`.
fn map_message(error: ToolError, f: impl FnOnce(String) -> String) -> ToolError {
    match error {
        ToolError::InvalidArgs(m) => ToolError::InvalidArgs(f(m)),
        ToolError::InvalidConfig(m) => ToolError::InvalidConfig(f(m)),
        ToolError::NotFound(m) => ToolError::NotFound(f(m)),
        ToolError::Upstream(m) => ToolError::Upstream(f(m)),
        ToolError::Denied(m) => ToolError::Denied(f(m)),
        ToolError::Internal(m) => ToolError::Internal(f(m)),
    }
}
