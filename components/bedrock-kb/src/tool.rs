//! The tool: one instance per configured knowledge base, one tool, `retrieve`.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tool_guest::args::{self, ArgsError, JsonSchema, Spec};

use crate::config::{self, Config};
use crate::output;

/// Why a call or an open failed: rag-core's, which tool-guest maps to WIT's `tool-error`.
pub use tool_guest::tool::ToolError;

/// A call's arguments: the type the spec's schema is derived from and the call parses into.
/// Missing and blank values, and the ranges, are checked after the parse, in boto3's and
/// CrewAI's words (see [`Tool::request`]).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The query to retrieve information from the knowledge base
    #[schemars(required)]
    query: Option<String>,
    /// How many results to return (default: the instance's)
    #[schemars(range(min = 1, max = 100))]
    number_of_results: Option<i64>,
    /// The nextToken of a previous answer, for the next page
    #[schemars(length(min = 1, max = 2048))]
    next_token: Option<String>,
    /// A Bedrock metadata filter, e.g. {"equals": {"key": "year", "value": 2024}} or {"andAll": [...]}
    filter: Option<Map<String, Value>>,
}

/// A parse failure in this tool's words.
fn bad_args(e: ArgsError) -> ToolError {
    ToolError::InvalidArgs(match e {
        ArgsError::NotJson(e) => format!("arguments are not JSON: {e}"),
        ArgsError::NotObject => "arguments must be an object".into(),
        ArgsError::Unknown { key, names } => format!("unknown argument `{key}`; this tool takes {}", names.join(", ")),
        ArgsError::Missing(arg) => format!("`{arg}` is required"),
        ArgsError::Invalid { arg, .. } if arg == "number_of_results" => config::not_an_integer(),
        ArgsError::Invalid { arg, .. } if arg == "filter" => {
            "`filter` must be an object, like {\"equals\": {\"key\": \"k\", \"value\": \"v\"}}".into()
        }
        ArgsError::Invalid { arg, expected, .. } => format!("`{arg}` must be {expected}"),
    })
}

/// How the host's `bedrock` capability failed (see the WIT `bedrock-error`).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The service's error code and message.
    Service {
        /// e.g. `ValidationException`.
        code: String,
        /// The service's message.
        message: String,
    },
    /// Not granted.
    Denied(String),
    /// No answer (connection, timeout, credentials).
    Unavailable(String),
    /// The request body was refused before sending.
    InvalidRequest(String),
}

/// The host's `bedrock` capability, as the tool sees it.
pub trait Bedrock {
    /// `BEDROCK_KB_ID` from the host's environment.
    fn default_knowledge_base(&self) -> Option<String>;
    /// `Retrieve`: JSON request body in, JSON response body out.
    fn retrieve(&self, kb: &str, request: &str) -> Result<String, Failure>;
}

/// A call's result: CrewAI's JSON text; one hit per result (a row's columns as `name: value`
/// lines; metadata `{content_type, source_type, metadata, row_content, byte_content}` where
/// present); extra `{nextToken, guardrailAction, knowledge_base_id}`.
pub use tool_guest::tool::{Hit, Output};

/// A configured instance.
#[derive(Debug)]
pub struct Tool {
    config: Config,
}

/// The tool's name.
pub const NAME: &str = "retrieve";

impl Tool {
    /// Validates the config (CrewAI's rules); `BEDROCK_KB_ID` comes from the host.
    pub fn open(config: &str, env: &dyn Bedrock) -> Result<Tool, ToolError> {
        let config = config::parse(config, env.default_knowledge_base()).map_err(ToolError::InvalidConfig)?;
        Ok(Tool { config })
    }

    /// The tool's spec.
    pub fn spec(&self) -> Spec {
        let description = format!(
            "Retrieves information from Amazon Bedrock Knowledge Base '{}' given a query",
            self.config.knowledge_base_id
        );
        Spec::of::<Args>(NAME, description)
    }

    /// The RetrieveRequest body for a call.
    pub fn request(&self, args: &Value) -> Result<Value, ToolError> {
        let a: Args = args::parse(args).map_err(bad_args)?;
        let query = match a.query {
            Some(q) if !q.trim().is_empty() => q,
            _ => {
                return Err(ToolError::InvalidArgs(
                    "`query` is required: the text to search the knowledge base for".into(),
                ));
            }
        };
        let per_call_n = a.number_of_results.map(config::check_count).transpose().map_err(ToolError::InvalidArgs)?;
        let filter = a.filter.map(Value::Object);
        let mut configuration = self.config.retrieval_configuration.clone();
        if per_call_n.is_some() || filter.is_some() {
            let vs = configuration
                .as_object_mut()
                .map(|c| c.entry("vectorSearchConfiguration").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
                .ok_or_else(|| {
                    ToolError::InvalidConfig("retrieval_configuration.vectorSearchConfiguration must be a table".into())
                })?;
            if let Some(n) = per_call_n {
                vs.insert("numberOfResults".into(), json!(n));
            }
            if let Some(f) = filter {
                vs.insert("filter".into(), f);
            }
        }
        let next_token = match a.next_token {
            None => self.config.next_token.clone(),
            Some(t) => {
                config::check_next_token(&t).map_err(ToolError::InvalidArgs)?;
                Some(t)
            }
        };
        let mut body = Map::new();
        body.insert("retrievalQuery".into(), json!({ "text": query }));
        if configuration.as_object().is_some_and(|o| !o.is_empty()) {
            body.insert("retrievalConfiguration".into(), configuration);
        }
        if let Some(g) = &self.config.guardrail_configuration {
            body.insert("guardrailConfiguration".into(), g.clone());
        }
        if let Some(t) = next_token {
            body.insert("nextToken".into(), json!(t));
        }
        Ok(Value::Object(body))
    }

    /// Runs `retrieve` with `args` (a JSON object).
    pub fn call(&self, args: &str, env: &dyn Bedrock) -> Result<Output, ToolError> {
        let args: Value = serde_json::from_str(args).map_err(|e| bad_args(ArgsError::NotJson(e.to_string())))?;
        let request = self.request(&args)?;
        let kb = &self.config.knowledge_base_id;
        let body = env.retrieve(kb, &request.to_string()).map_err(|f| match f {
            // CrewAI's wording: `Error ({code}): {message}` for the service, `Unexpected error: …` otherwise.
            Failure::Service { code, message } => ToolError::Upstream(format!("Error ({code}): {message}")),
            Failure::Unavailable(m) => ToolError::Upstream(format!("Unexpected error: {m}")),
            Failure::Denied(m) => ToolError::Denied(m),
            Failure::InvalidRequest(m) => ToolError::InvalidArgs(format!("Unexpected error: {m}")),
        })?;
        let response: Value = serde_json::from_str(&body)
            .map_err(|e| ToolError::Upstream(format!("Unexpected error: Bedrock's answer is not JSON: {e}")))?;
        let answer = output::answer(&response);
        let hits = response
            .get("retrievalResults")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(hit).collect())
            .unwrap_or_default();
        let mut extra = json!({ "knowledge_base_id": kb });
        for key in ["nextToken", "guardrailAction"] {
            if let Some(v) = response.get(key) {
                extra[key] = v.clone();
            }
        }
        Ok(Output { text: output::dumps(&answer), hits, route: None, extra, content: Vec::new() })
    }
}

fn hit(r: &Value) -> Hit {
    let o = output::to_value(&output::result(r));
    let content = match o.get("row_content").and_then(Value::as_array) {
        Some(row) if o["content"].as_str().is_none_or(str::is_empty) => row
            .iter()
            .map(|c| {
                format!("{}: {}", c["columnName"].as_str().unwrap_or("?"), c["columnValue"].as_str().unwrap_or(""))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => o["content"].as_str().unwrap_or_default().to_string(),
    };
    let mut metadata = Map::new();
    for key in ["content_type", "source_type", "metadata", "row_content", "byte_content"] {
        if let Some(v) = o.get(key) {
            metadata.insert(key.into(), v.clone());
        }
    }
    if let Some(d) = r.get("documentId") {
        metadata.insert("document_id".into(), d.clone());
    }
    Hit {
        content,
        score: r.get("score").and_then(Value::as_f64).map(|s| s as f32),
        source: o["source_uri"].as_str().map(str::to_string),
        location: None,
        resource: None,
        metadata: Value::Object(metadata),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    struct Fake {
        sent: RefCell<Vec<(String, Value)>>,
        answer: Result<String, Failure>,
    }

    impl Bedrock for Fake {
        fn default_knowledge_base(&self) -> Option<String> {
            None
        }
        fn retrieve(&self, kb: &str, request: &str) -> Result<String, Failure> {
            self.sent.borrow_mut().push((kb.to_string(), serde_json::from_str(request).unwrap()));
            self.answer.clone()
        }
    }

    fn fake(answer: Result<String, Failure>) -> Fake {
        Fake { sent: RefCell::default(), answer }
    }

    #[test]
    fn request_body_field_names() {
        let env = fake(Ok(r#"{"retrievalResults": []}"#.into()));
        let t = Tool::open(r#"{"knowledge_base_id": "KB00000001", "guardrail_configuration": {"guardrailId": "g1", "guardrailVersion": "1"}}"#, &env).unwrap();
        let out = t.call(r#"{"query": "q", "number_of_results": 3, "next_token": "p2", "filter": {"equals": {"key": "a", "value": 1}}}"#, &env).unwrap();
        assert_eq!(out.text, "{\n  \"message\": \"No results found for the given query.\"\n}");
        let (kb, body) = env.sent.borrow()[0].clone();
        assert_eq!(kb, "KB00000001");
        assert_eq!(
            body,
            json!({
                "retrievalQuery": {"text": "q"},
                "retrievalConfiguration": {"vectorSearchConfiguration": {"numberOfResults": 3, "filter": {"equals": {"key": "a", "value": 1}}}},
                "guardrailConfiguration": {"guardrailId": "g1", "guardrailVersion": "1"},
                "nextToken": "p2"
            })
        );
        assert_eq!(
            t.spec().description,
            "Retrieves information from Amazon Bedrock Knowledge Base 'KB00000001' given a query"
        );
    }

    #[test]
    fn errors_keep_crewais_wording() {
        let env = fake(Err(Failure::Service { code: "ValidationException".into(), message: "bad".into() }));
        let t = Tool::open(r#"{"knowledge_base_id": "KB00000001"}"#, &env).unwrap();
        assert_eq!(
            t.call(r#"{"query": "q"}"#, &env),
            Err(ToolError::Upstream("Error (ValidationException): bad".into()))
        );
        let env = fake(Err(Failure::Unavailable("timed out".into())));
        assert_eq!(t.call(r#"{"query": "q"}"#, &env), Err(ToolError::Upstream("Unexpected error: timed out".into())));
        assert!(matches!(t.call(r#"{"query": " "}"#, &env), Err(ToolError::InvalidArgs(_))));
        assert!(
            matches!(t.call(r#"{"query": "q", "next_token": "a b"}"#, &env), Err(ToolError::InvalidArgs(m)) if m.contains("cannot contain spaces"))
        );
        assert!(
            matches!(t.call(r#"{"query": "q", "k": 1}"#, &env), Err(ToolError::InvalidArgs(m)) if m.contains("unknown argument `k`"))
        );
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    /// The derived schema is the one written by hand before (as of c8d5fbc).
    #[test]
    fn the_derived_schema_is_the_hand_written_one() {
        assert_eq!(
            tool_guest::args::schema_for::<Args>(),
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The query to retrieve information from the knowledge base"},
                    "number_of_results": {"type": "integer", "minimum": 1, "maximum": 100, "description": "How many results to return (default: the instance's)"},
                    "next_token": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "The nextToken of a previous answer, for the next page"},
                    "filter": {"type": "object", "description": "A Bedrock metadata filter, e.g. {\"equals\": {\"key\": \"year\", \"value\": 2024}} or {\"andAll\": [...]}"}
                },
                "required": ["query"],
                "additionalProperties": false
            })
        );
    }
}
