//! The guest side every tool component shares, so that it is written once: the bindings of
//! Quarry's `types`, `embedder` and `progress` interfaces (components reuse them through
//! wit-bindgen's `with:`), the mapping between them and rag-core's plain Rust types (errors,
//! outputs, specs, the tool-name check), and [`GuestEnv`], rag-core's [`BaseEnv`] over the WIT
//! imports. A component keeps only its bindgen call and the mapping of its own imports.
//! wasm32 only: natively the crate is empty.
//!
//! A component that does not call the embedder or progress (bedrock-kb) does not import them:
//! the component linker keeps only the imports the module uses.
//!
//! [`BaseEnv`]: rag_core::tool::BaseEnv

#[cfg(target_arch = "wasm32")]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "rag-imports",
    });
}

#[cfg(target_arch = "wasm32")]
pub use bindings::quarry::retrieval::{embedder, progress, types};

#[cfg(target_arch = "wasm32")]
mod mapping;
#[cfg(target_arch = "wasm32")]
pub use mapping::{GuestEnv, check_tool, output, specs, to_wit};
