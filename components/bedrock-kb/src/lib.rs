//! Amazon Bedrock knowledge-base retrieval: CrewAI's BedrockKBRetrieverTool, rebuilt as a
//! sandboxed component over the host's `bedrock` capability (the host holds the AWS
//! credentials, region, retries and timeouts; the component never sees them).
//!
//! - [`config`] validates the instance config with CrewAI's rules and messages;
//! - [`output`] turns a RetrieveResponse into CrewAI's JSON text and Quarry's hits;
//! - [`tool`] is the tool: its spec, the per-call arguments, the request it sends;
//! - the component glue (wasm only) connects [`tool`] to WIT.
//!
//! All but the glue is plain Rust, tested natively.

pub mod config;
pub mod output;
pub mod tool;

#[cfg(target_arch = "wasm32")]
mod component;
