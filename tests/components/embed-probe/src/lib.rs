//! A tool that imports `embedder`: reports the model and embeds its arguments,
//! so tests can see a tool's import served by an embedder component.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "chapter-rag",
    generate_all,
});

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::embedder::{self, InputKind};
use quarry::retrieval::types::{ToolError, ToolOutput, ToolSpec};

struct Component;
struct Probe;

impl Guest for Component {
    type Instance = Probe;
}

impl GuestInstance for Probe {
    fn open(_config: String) -> Result<Instance, ToolError> {
        // Fail fast, as a real RAG tool would, if the model is unusable.
        if embedder::info().dimension == 0 {
            return Err(ToolError::InvalidConfig("the embedder reports dimension 0".into()));
        }
        Ok(Instance::new(Probe))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "embed".into(),
            description: "Embeds `texts` with the linked embedder.".into(),
            args_schema: r#"{"type":"object","properties":{"texts":{"type":"array","items":{"type":"string"}}},"required":["texts"]}"#.into(),
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

    fn call(&self, _tool: String, args: String) -> Result<ToolOutput, ToolError> {
        let args: serde_json::Value = serde_json::from_str(&args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let texts: Vec<String> = args
            .get("texts")
            .and_then(|t| t.as_array())
            .ok_or_else(|| ToolError::InvalidArgs("`texts` (an array of strings) is required".into()))?
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        let kind = match args.get("kind").and_then(|k| k.as_str()) {
            None | Some("query") => InputKind::Query,
            Some("document") => InputKind::Document,
            Some(other) => {
                return Err(ToolError::InvalidArgs(format!("kind {other:?}: use \"query\" or \"document\"")));
            }
        };
        let info = embedder::info();
        let vectors = embedder::embed(&texts, kind).map_err(|e| ToolError::Upstream(format!("{e:?}")))?;
        let out = serde_json::json!({
            "model": info.id,
            "dimension": info.dimension,
            "vectors": vectors.iter().map(|v| &v.vector).collect::<Vec<_>>(),
            "truncated": vectors.iter().map(|v| v.truncated).collect::<Vec<_>>(),
        });
        Ok(ToolOutput { text: out.to_string(), hits: vec![], route: None, extra: None, content: Vec::new() })
    }
}

export!(Component);
