//! The component: WIT glue around [`crate::tool`], over the host's `bedrock` capability.

wit_bindgen::generate!({
    path: "../../wit",
    world: "bedrock-kb",
    generate_all,
});

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::bedrock::{self, BedrockError};
use quarry::retrieval::types::{Hit, ToolError, ToolOutput, ToolSpec};

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

fn to_wit(e: tool::ToolError) -> ToolError {
    match e {
        tool::ToolError::InvalidArgs(m) => ToolError::InvalidArgs(m),
        tool::ToolError::InvalidConfig(m) => ToolError::InvalidConfig(m),
        tool::ToolError::Upstream(m) => ToolError::Upstream(m),
        tool::ToolError::Denied(m) => ToolError::Denied(m),
    }
}

impl Guest for Component {
    type Instance = Tool;
}

impl GuestInstance for Tool {
    fn open(config: String) -> Result<Instance, ToolError> {
        Tool::open(&config, &Host).map(Instance::new).map_err(to_wit)
    }

    fn specs(&self) -> Vec<ToolSpec> {
        let (name, description, args_schema) = self.spec();
        vec![ToolSpec { name, description, args_schema }]
    }

    fn call(&self, tool: String, args: String) -> Result<ToolOutput, ToolError> {
        if tool != tool::NAME {
            return Err(ToolError::NotFound(format!("no tool `{tool}`; this component offers `{}`", tool::NAME)));
        }
        let out = Tool::call(self, &args, &Host).map_err(to_wit)?;
        Ok(ToolOutput {
            text: out.text,
            hits: out
                .hits
                .into_iter()
                .map(|h| Hit { content: h.content, score: h.score, source: h.source, metadata: h.metadata.to_string() })
                .collect(),
            extra: Some(out.extra.to_string()),
        })
    }
}

export!(Component);
