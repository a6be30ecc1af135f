//! Host bindings for the `quarry:retrieval` package, generated once here.
//!
//! `tool-host` and `embedder-host` are host-only worlds: everything a component
//! may import from Quarry plus its export. Components that import less still match.

#![expect(missing_docs, reason = "generated code")]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-host",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::quarry::retrieval::embedder::{EmbedError, Embedding, InputKind, ModelInfo, TokenSpan};
pub use self::quarry::retrieval::types::{Hit, ToolError, ToolOutput, ToolSpec};

/// Bindings for embedder components (`model` + `embedder` exports).
pub mod embedder_world {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "embedder-host",
        exports: { default: async },
    });
}

impl ToolError {
    /// The variant's name as WIT spells it, and its message.
    pub fn parts(&self) -> (&'static str, &str) {
        match self {
            ToolError::InvalidArgs(m) => ("invalid-args", m),
            ToolError::InvalidConfig(m) => ("invalid-config", m),
            ToolError::NotFound(m) => ("not-found", m),
            ToolError::Upstream(m) => ("upstream", m),
            ToolError::Denied(m) => ("denied", m),
            ToolError::Internal(m) => ("internal", m),
        }
    }

    /// `kind: message`, for people.
    pub fn describe(&self) -> String {
        let (kind, msg) = self.parts();
        format!("{kind}: {msg}")
    }
}

impl EmbedError {
    /// `kind: message`, for people.
    pub fn describe(&self) -> String {
        match self {
            EmbedError::InvalidInput(m) => format!("invalid-input: {m}"),
            EmbedError::Unavailable(m) => format!("unavailable: {m}"),
            EmbedError::Internal(m) => format!("internal: {m}"),
        }
    }
}
