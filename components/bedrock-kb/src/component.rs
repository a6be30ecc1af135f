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

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::bedrock::{self, BedrockError};
use tool_guest::types::{ToolError, ToolOutput, ToolSpec};
use tool_guest::{check_tool, output, specs, to_wit};

use crate::tool::{self, Bedrock, Failure, Tool};

struct Component;

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

impl Guest for Component {
    type Instance = Tool;
}

impl GuestInstance for Tool {
    fn open(config: String) -> Result<Instance, ToolError> {
        Tool::open(&config, &Host).map(Instance::new).map_err(to_wit)
    }

    /// Nothing heavy to do: the service holds the index.
    fn prepare(&self) -> Result<(), ToolError> {
        Ok(())
    }

    fn specs(&self) -> Vec<ToolSpec> {
        specs([self.spec()])
    }

    fn call(&self, tool: String, args: String) -> Result<ToolOutput, ToolError> {
        check_tool(&tool, tool::NAME)?;
        Tool::call(self, &args, &Host).map(output).map_err(to_wit)
    }
}

export!(Component);
