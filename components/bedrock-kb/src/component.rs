//! The component: WIT glue around [`crate::tool`], over the host's `bedrock` capability.

wit_bindgen::generate!({
    path: "../../wit",
    world: "bedrock-kb",
    // Quarry's own types are bound once, in tool-guest, for every tool component.
    with: {
        "quarry:retrieval/types@0.6.0": tool_guest::types,
    },
    generate_all,
});

use quarry::retrieval::bedrock::{self, BedrockError};

use crate::tool::{self, Bedrock, Failure, Tool};

/// The host's capability.
struct Host;

impl Bedrock for Host {
    fn default_knowledge_base(&self) -> Option<String> {
        bedrock::default_knowledge_base()
    }

    fn retrieve(&self, kb: &str, request: &str) -> Result<String, Failure> {
        bedrock::retrieve(kb, request).map_err(|e| match e {
            BedrockError::Service(s) => Failure::Service { code: s.code, message: s.message },
            BedrockError::Denied(m) => Failure::Denied(m),
            BedrockError::Unavailable(m) => Failure::Unavailable(m),
            BedrockError::InvalidRequest(m) => Failure::InvalidRequest(m),
        })
    }
}

tool_guest::export_tools!(Tool, one: tool::NAME, host: Host);
