//! The guest SDK every tool component is written on, so that what they share is written once:
//!
//! - [`tool`] (native and wasm32): what a tool has in common with its host, as plain Rust: the
//!   error kinds of WIT's `tool-error`, the shape of a call's output, the embedding model's
//!   identity, and what a RAG tool asks of its environment ([`tool::BaseEnv`]); a tool's logic
//!   is written against these and tested natively; [`index_home`], where a RAG tool keeps its
//!   index (always a corpus);
//! - on wasm32: the bindings of Quarry's `types`, `embedder` and `progress` interfaces
//!   (components reuse them through wit-bindgen's `with:`), the mapping between them and
//!   [`tool`] (errors, outputs, specs, the tool-name check), `GuestEnv` ([`tool::BaseEnv`] over
//!   the WIT imports), and [`export_tools!`], the `open`/`prepare`/`specs`/`call` glue of the
//!   `tool` export over a [`Tools`] type. A component keeps only its bindgen call, the mapping
//!   of its own imports, and its [`Tools`] impl.
//!
//! A component that does not call the embedder or progress (bedrock-kb) does not import them:
//! the component linker keeps only the imports the module uses.

pub mod args;
pub mod catalog;
pub mod index_home;
pub mod tool;

/// A component's tools, as the `tool` export serves them: an instance opened from its config,
/// prepared once, offering its specs and answering calls. [`export_tools!`] turns it into the
/// WIT export.
pub trait Tools: Sized + 'static {
    /// Validates `config` (cheap: the host lists the tools as soon as it returns).
    fn open(config: &str) -> Result<Self, tool::ToolError>;
    /// The heavy half of opening (an index build); nothing by default.
    fn prepare(&self) -> Result<(), tool::ToolError> {
        Ok(())
    }
    /// The tools it offers, as `(name, description, args JSON Schema)`.
    fn specs(&self) -> Vec<tool::Spec>;
    /// Runs tool `tool` on `args`; a tool it does not offer is `not-found`
    /// ([`tool::check_tool`] for a single-tool component).
    fn call(&self, tool: &str, args: &str) -> Result<tool::Output, tool::ToolError>;
    /// Its resource templates and prompts, and whether it lists resources; none by default.
    fn catalog(&self) -> catalog::Catalog {
        catalog::Catalog::default()
    }
    /// The resources it lists now; none by default.
    fn resources(&self) -> Result<Vec<catalog::Resource>, tool::ToolError> {
        Ok(Vec::new())
    }
    /// The resource at `uri`; `not-found` by default.
    fn read(&self, uri: &str) -> Result<Vec<catalog::Contents>, tool::ToolError> {
        Err(tool::ToolError::NotFound(format!("no resource at {uri}")))
    }
    /// Prompt `name` filled in with `args` (a JSON object of strings); `not-found` by default.
    fn get_prompt(&self, name: &str, args: &str) -> Result<catalog::Prompt, tool::ToolError> {
        let _ = args;
        Err(tool::ToolError::NotFound(format!("no prompt named {name:?}")))
    }
    /// Values for `argument` of `target` matching `value` (`context`: the arguments already
    /// chosen, a JSON object); none by default.
    fn complete(
        &self,
        target: catalog::Target,
        argument: &str,
        value: &str,
        context: &str,
    ) -> Result<catalog::Completion, tool::ToolError> {
        let _ = (target, argument, value, context);
        Ok(catalog::Completion::default())
    }
}

#[cfg(target_arch = "wasm32")]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "rag-imports",
    });
}

#[cfg(target_arch = "wasm32")]
pub use bindings::quarry::retrieval::{client, corpus, embedder, progress, types};

/// The host's corpora (WIT's `corpus` import) as rag-core's `Corpus`.
#[cfg(target_arch = "wasm32")]
pub mod host_corpus;

#[cfg(target_arch = "wasm32")]
mod mapping;
#[cfg(target_arch = "wasm32")]
pub use mapping::{
    GuestEnv, catalog_to_wit, completion_to_wit, contents_to_wit, output, prompt_to_wit, resource_to_wit, specs,
    target_from_wit, to_wit,
};

/// The name of the custom section that carries a component's version, as `wasm-tools metadata
/// add --version` writes it (wasm-metadata's OCI annotations: `quarry push` passes it on as
/// `org.opencontainers.image.version`).
pub const VERSION_SECTION: &str = "version";

/// Writes the invoking crate's `CARGO_PKG_VERSION` into the component as the custom section
/// [`VERSION_SECTION`], which the host reads (`quarry list`) without running the component.
/// [`export_tools!`] calls it; a component that exports something else calls it once itself.
#[macro_export]
macro_rules! component_version {
    () => {
        // `used`: nothing references it, and the linker would drop it.
        #[used]
        #[unsafe(link_section = "version")]
        static COMPONENT_VERSION: [u8; env!("CARGO_PKG_VERSION").len()] = {
            let (text, mut out) = (env!("CARGO_PKG_VERSION").as_bytes(), [0u8; env!("CARGO_PKG_VERSION").len()]);
            let mut i = 0;
            while i < out.len() {
                out[i] = text[i];
                i += 1;
            }
            out
        };
    };
}

/// Exports `$instance` (a [`Tools`]) as the component's `tool` interface: `open`, `prepare`,
/// `specs` and `call`, its errors and outputs mapped once here. Expands in the component,
/// beside its `wit_bindgen::generate!` (whose `exports` module it implements).
#[cfg(target_arch = "wasm32")]
#[macro_export]
macro_rules! export_tools {
    // A single-tool component over a host service (bedrock-kb, couchbase-search): `$tool` has
    // `open(config, &host)`, `spec()` and `call(&self, args, &host)`, and nothing to prepare
    // (the service holds the index).
    ($tool:ty, one: $name:expr, host: $host:expr) => {
        impl $crate::Tools for $tool {
            fn open(config: &str) -> Result<Self, $crate::tool::ToolError> {
                <$tool>::open(config, &$host)
            }

            fn specs(&self) -> Vec<$crate::tool::Spec> {
                vec![self.spec()]
            }

            fn call(&self, name: &str, args: &str) -> Result<$crate::tool::Output, $crate::tool::ToolError> {
                $crate::tool::check_tool(name, $name)?;
                <$tool>::call(self, args, &$host)
            }
        }

        $crate::export_tools!($tool);
    };
    ($instance:ty) => {
        struct ToolsComponent;

        impl exports::quarry::retrieval::tool::Guest for ToolsComponent {
            type Instance = $instance;
        }

        impl exports::quarry::retrieval::tool::GuestInstance for $instance {
            fn open(config: String) -> Result<exports::quarry::retrieval::tool::Instance, $crate::types::ToolError> {
                <$instance as $crate::Tools>::open(&config)
                    .map(exports::quarry::retrieval::tool::Instance::new)
                    .map_err($crate::to_wit)
            }

            fn prepare(&self) -> Result<(), $crate::types::ToolError> {
                <$instance as $crate::Tools>::prepare(self).map_err($crate::to_wit)
            }

            fn specs(&self) -> Vec<$crate::types::ToolSpec> {
                $crate::specs(<$instance as $crate::Tools>::specs(self))
            }

            fn call(&self, tool: String, args: String) -> Result<$crate::types::ToolOutput, $crate::types::ToolError> {
                <$instance as $crate::Tools>::call(self, &tool, &args).map($crate::output).map_err($crate::to_wit)
            }

            fn catalog(&self) -> $crate::types::Catalog {
                $crate::catalog_to_wit(<$instance as $crate::Tools>::catalog(self))
            }

            fn resources(&self) -> Result<Vec<$crate::types::ResourceInfo>, $crate::types::ToolError> {
                <$instance as $crate::Tools>::resources(self)
                    .map(|list| list.into_iter().map($crate::resource_to_wit).collect())
                    .map_err($crate::to_wit)
            }

            fn read(&self, uri: String) -> Result<Vec<$crate::types::Contents>, $crate::types::ToolError> {
                <$instance as $crate::Tools>::read(self, &uri)
                    .map(|list| list.into_iter().map($crate::contents_to_wit).collect())
                    .map_err($crate::to_wit)
            }

            fn get_prompt(
                &self,
                name: String,
                args: String,
            ) -> Result<$crate::types::Prompt, $crate::types::ToolError> {
                <$instance as $crate::Tools>::get_prompt(self, &name, &args)
                    .map($crate::prompt_to_wit)
                    .map_err($crate::to_wit)
            }

            fn complete(
                &self,
                target: $crate::types::CompletionTarget,
                argument: String,
                value: String,
                context: String,
            ) -> Result<$crate::types::Completion, $crate::types::ToolError> {
                <$instance as $crate::Tools>::complete(
                    self,
                    $crate::target_from_wit(target),
                    &argument,
                    &value,
                    &context,
                )
                .map($crate::completion_to_wit)
                .map_err($crate::to_wit)
            }
        }

        export!(ToolsComponent);
        $crate::component_version!();
    };
}
