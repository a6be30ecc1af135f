//! The component: WIT glue around [`crate::tool`], over the host's `bedrock` capability.

wit_bindgen::generate!({
    path: "../../wit",
    world: "bedrock-kb",
    // Quarry's own types are bound once, in tool-guest, for every tool component.
    with: {
        "quarry:retrieval/types@0.3.0": tool_guest::types,
    },
    generate_all,
});

use quarry::retrieval::bedrock::{self, BedrockError};
use tool_guest::tool::{Output, Spec, ToolError, check_tool};

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

impl tool_guest::Tools for Tool {
    fn open(config: &str) -> Result<Tool, ToolError> {
        Tool::open(config, &Host)
    }

    fn specs(&self) -> Vec<Spec> {
        vec![self.spec()]
    }

    fn call(&self, name: &str, args: &str) -> Result<Output, ToolError> {
        check_tool(name, tool::NAME)?;
        Tool::call(self, args, &Host)
    }
}

// Nothing to prepare: the service holds the index.
tool_guest::export_tools!(Tool);
