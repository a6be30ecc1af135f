//! The `bedrock` capability: Amazon Bedrock knowledge-base `Retrieve`, called by the host
//! through the official SDK (`aws-sdk-bedrockagentruntime`, `aws-config`).
//!
//! - Credentials come from the standard chain (environment, profile files, web identity,
//!   container and instance metadata, `credential_process`) and never reach a component.
//! - Region: `grants.bedrock.region`, then `AWS_REGION`, then `AWS_DEFAULT_REGION`, then
//!   `us-east-1`; an empty value counts as unset (the SDK would take `""` as a region).
//! - Every call is bounded: attempts, per-attempt and whole-operation timeouts come from the
//!   grant (defaults: 3 attempts, 10 s, 30 s, all within the instance's deadline), and the SDK
//!   retries throttling and 5xx.
//! - The grant lists the knowledge bases an instance may query; anything else is `denied`.
//!
//! Requests and responses cross the WIT boundary as the service's JSON shapes; `json`
//! converts them to and from the SDK's types.
//!
//! Files: `grant` (`grants.bedrock` and its checks), `client` (the SDK client, the call),
//! `json` (service JSON to SDK types and back); here, the per-store [`State`] and the WIT
//! `Host` impl.

#![deny(missing_docs)]

mod client;
mod grant;
mod json;

/// The `quarry:retrieval/bedrock` interface's host bindings, generated here from the project's WIT
/// (a world that imports it alone).
#[expect(missing_docs, reason = "generated code")]
pub mod wit {
    wasmtime::component::bindgen!({
        path: "../../../wit",
        inline: "package quarry:bedrock-host; world host { import quarry:retrieval/bedrock@0.6.0; }",
        world: "quarry:bedrock-host/host",
        imports: { default: async | trappable },
    });
    pub use self::quarry::retrieval::bedrock::*;
}

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use wit::BedrockError;

pub use client::{Client, MAX_REQUEST_BYTES, region};
pub use grant::{BedrockGrant, KbIdentifier, RawGrant, grant};
pub use json::{Request, document, json_of, request, response};

/// One store's Bedrock: the instance's client, when it has a grant.
#[derive(Default)]
pub struct State {
    client: Option<Arc<Client>>,
}

impl State {
    /// The state for an instance granted `grant` (none: every call is `denied`), whose responses
    /// may take at most `max_bytes`.
    pub fn new(grant: Option<&BedrockGrant>, max_bytes: u64) -> State {
        State { client: grant.map(|g| Client::new(g.clone(), max_bytes)) }
    }
}

/// Adds the `bedrock` interface, served by the [`State`] that `get` finds in the store.
pub fn link<T: Send + 'static>(l: &mut Linker<T>, get: fn(&mut T) -> &mut State) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<State>>(l, get)
}

impl wit::Host for State {
    async fn default_knowledge_base(&mut self) -> wasmtime::Result<Option<String>> {
        // Only an instance granted Bedrock may read this one host variable.
        Ok(self.client.as_ref().and_then(|_| std::env::var("BEDROCK_KB_ID").ok()).filter(|v| !v.trim().is_empty()))
    }

    async fn retrieve(&mut self, kb: String, request: String) -> wasmtime::Result<Result<String, BedrockError>> {
        Ok(match &self.client {
            Some(client) => client.clone().retrieve(&kb, &request).await,
            None => Err(BedrockError::Denied(
                "this instance has no Bedrock grant; add [tools.NAME.grants.bedrock] with knowledge_bases = [\"...\"]"
                    .into(),
            )),
        })
    }
}
