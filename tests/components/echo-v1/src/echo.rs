// Shared by echo-v1 and echo-v2, which differ only in `VERSION`: the pair lets
// the hot-swap tests tell which build answered.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "plain-tool",
    generate_all,
});

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::types::{Hit, ToolError, ToolOutput, ToolSpec};

struct Component;

struct Echo {
    greeting: String,
}

impl Guest for Component {
    type Instance = Echo;
}

impl GuestInstance for Echo {
    fn open(config: String) -> Result<Instance, ToolError> {
        let cfg: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| ToolError::InvalidConfig(format!("config is not JSON: {e}")))?;
        let greeting = match cfg.get("greeting") {
            None => "hello".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(ToolError::InvalidConfig(format!(
                    "`greeting` must be a string, got {other}"
                )));
            }
        };
        Ok(Instance::new(Echo { greeting }))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: format!("Echoes `text` back with a greeting ({VERSION})."),
            args_schema: r#"{"type":"object","properties":{"text":{"type":"string","description":"Text to echo"}},"required":["text"]}"#.into(),
        }]
    }

    fn prepare(&self) -> Result<(), ToolError> {
        Ok(())
    }

    fn catalog(&self) -> quarry::retrieval::types::Catalog {
        quarry::retrieval::types::Catalog { lists_resources: false, templates: Vec::new(), prompts: Vec::new() }
    }

    fn resources(&self) -> Result<Vec<quarry::retrieval::types::ResourceInfo>, ToolError> {
        Ok(Vec::new())
    }

    fn read(&self, uri: String) -> Result<Vec<quarry::retrieval::types::Contents>, ToolError> {
        Err(ToolError::NotFound(uri))
    }

    fn get_prompt(&self, name: String, _args: String) -> Result<quarry::retrieval::types::Prompt, ToolError> {
        Err(ToolError::NotFound(name))
    }

    fn complete(
        &self,
        _target: quarry::retrieval::types::CompletionTarget,
        _argument: String,
        _value: String,
        _context: String,
    ) -> Result<quarry::retrieval::types::Completion, ToolError> {
        Ok(quarry::retrieval::types::Completion { values: Vec::new(), total: None, has_more: false })
    }

    fn call(&self, tool: String, args: String) -> Result<ToolOutput, ToolError> {
        if tool != "echo" {
            return Err(ToolError::NotFound(format!("no tool `{tool}`; this component offers `echo`")));
        }
        let args: serde_json::Value = serde_json::from_str(&args)
            .map_err(|e| ToolError::InvalidArgs(format!("args are not JSON: {e}")))?;
        let text = args
            .get("text")
            .and_then(|t| t.as_str())
            .ok_or_else(|| ToolError::InvalidArgs("`text` (a string) is required".into()))?;
        let answer = format!("{} {text} [{VERSION}]", self.greeting);
        Ok(ToolOutput {
            text: answer.clone(),
            hits: vec![Hit {
                content: answer,
                score: Some(1.0),
                source: Some(format!("echo-{VERSION}")),
                location: None,
                resource: None,
                metadata: format!(r#"{{"version":"{VERSION}"}}"#),
            }],
            route: None,
            extra: None,
            content: Vec::new(),
        })
    }
}

export!(Component);
