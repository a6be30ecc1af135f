//! The reference tools of the official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! server mode), as a Quarry tool component: the suite calls them by name, so the fixture config
//! (tests/mcp/conformance/quarry.toml) makes one instance per tool, named after it, and the
//! config's `tool` key says which this instance is.
//!
//! Progress and log lines go through the host as any tool's do: progress through the `progress`
//! capability, log lines through stderr, which the host passes on to a client that asked for
//! them with `logging/setLevel`.

wit_bindgen::generate!({
    path: "../../../wit",
    inline: "
        package quarry:conformance;
        world conformance {
            include quarry:retrieval/plain-tool@0.4.0;
            import quarry:retrieval/progress@0.4.0;
        }
    ",
    world: "quarry:conformance/conformance",
    generate_all,
});

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::types::{ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};

struct Component;

/// (name, description, args schema) of every reference tool this fixture implements.
const TOOLS: [(&str, &str); 5] = [
    ("test_simple_text", "Returns a simple text answer."),
    ("test_error_handling", "Always fails, with an error the client can read."),
    ("test_tool_with_logging", "Writes three log lines while it runs."),
    ("test_tool_with_progress", "Reports progress three times while it runs."),
    ("json_schema_2020_12_tool", "Takes arguments described with JSON Schema 2020-12 keywords."),
];

struct Reference {
    tool: &'static str,
}

impl Guest for Component {
    type Instance = Reference;
}

fn sleep_ms(ms: u64) {
    wasi::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

fn text(s: &str) -> ToolOutput {
    ToolOutput { text: s.to_string(), hits: Vec::new(), extra: None }
}

impl GuestInstance for Reference {
    fn open(config: String) -> Result<Instance, ToolError> {
        let cfg: Value =
            serde_json::from_str(&config).map_err(|e| ToolError::InvalidConfig(format!("config is not JSON: {e}")))?;
        let asked = cfg.get("tool").and_then(Value::as_str).unwrap_or_default();
        let tool = TOOLS.iter().map(|(n, _)| *n).find(|n| *n == asked).ok_or_else(|| {
            let names: Vec<&str> = TOOLS.iter().map(|(n, _)| *n).collect();
            ToolError::InvalidConfig(format!("config `tool` must be one of {}", names.join(", ")))
        })?;
        Ok(Instance::new(Reference { tool }))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        let description = TOOLS.iter().find(|(n, _)| *n == self.tool).map_or("", |(_, d)| *d);
        let schema = if self.tool == "json_schema_2020_12_tool" {
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"type": "object", "properties": {
                    "street": {"type": "string"}, "city": {"type": "string"}
                }}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                "additionalProperties": false
            })
        } else {
            json!({"type": "object", "properties": {}})
        };
        vec![ToolSpec { name: self.tool.into(), description: description.into(), args_schema: schema.to_string() }]
    }

    fn prepare(&self) -> Result<(), ToolError> {
        Ok(())
    }

    fn call(&self, _tool: String, _args: String) -> Result<ToolOutput, ToolError> {
        match self.tool {
            "test_error_handling" => {
                Err(ToolError::Internal("This tool intentionally returns an error for testing".into()))
            }
            "test_tool_with_logging" => {
                for line in ["Tool execution started", "Tool processing data", "Tool execution completed"] {
                    eprintln!("{line}");
                }
                Ok(text("Logged three lines"))
            }
            "test_tool_with_progress" => {
                // Further apart than the host's pace for progress notifications (4 a second).
                for done in 0..=3 {
                    quarry::retrieval::progress::report("reference work", done, 3, "steps");
                    sleep_ms(300);
                }
                Ok(text("Progress reported"))
            }
            "json_schema_2020_12_tool" => Ok(text("Schema tool called")),
            _ => Ok(text("This is a simple text response for testing.")),
        }
    }
}

export!(Component);
