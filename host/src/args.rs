//! A tool call's arguments, typed where they enter the host and serialised once.
//!
//! The guest receives its arguments as JSON text (WIT `call: func(tool, args: string)`). An
//! [`Args`] is that text, known to be a JSON object: built from an object the MCP server has
//! already parsed ([`Args::from_object`], one serialisation), or from text a user typed
//! ([`Args::parse`], one parse to check it, the text kept as it is). Nothing between the edge
//! and the guest parses or serialises it again.

use serde_json::{Map, Value};

/// The largest arguments object a call accepts (1 MiB). Retrieval arguments are a question
/// and a few options; anything this size is a mistake, and copying it into a sandbox and
/// parsing it there would only waste the instance's time.
pub const MAX_ARGS_BYTES: usize = 1 << 20;

/// Whether a request's client-sent bytes (a call's arguments, a read's URI, a prompt's
/// arguments) are within [`MAX_ARGS_BYTES`]: the one rule, applied where bytes would become a
/// tree (the MCP edge, [`Args::parse`]) and where they reach an instance.
pub fn fits(len: usize) -> bool {
    len <= MAX_ARGS_BYTES
}

/// A JSON object of arguments, as the JSON text the guest receives; cloned by reference, as a
/// call hands it to the future that runs the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args(std::sync::Arc<str>);

/// Why text is not an arguments object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// It is not one JSON object; the message is the one the user sees after the tool's name
    /// (see [`crate::CallError::BadArgs`]).
    #[error("{0}")]
    NotAnObject(String),
    /// It is over [`MAX_ARGS_BYTES`] (see [`fits`]), so it was not parsed.
    #[error("{0} bytes, over the limit of {MAX_ARGS_BYTES}")]
    TooLarge(usize),
}

impl Args {
    /// The arguments of an already parsed object.
    pub fn from_object(object: &Map<String, Value>) -> Args {
        // A map of JSON values always serialises.
        Args(serde_json::to_string(object).unwrap_or_else(|_| "{}".into()).into())
    }

    /// Checks that `text` is one JSON object within the bound and keeps it as it is.
    pub fn parse(text: &str) -> Result<Args, ArgsError> {
        if !fits(text.len()) {
            return Err(ArgsError::TooLarge(text.len()));
        }
        // Parsed to check, into a tree that is dropped: the guest parses the text itself.
        let parsed: Value = serde_json::from_str(text).map_err(|e| ArgsError::NotAnObject(e.to_string()))?;
        match parsed {
            Value::Object(_) => Ok(Args(text.into())),
            other => Err(ArgsError::NotAnObject(format!("got {}", kind(&other)))),
        }
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the text is empty (never, for a parsed object; for clippy's pairing with `len`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An arguments object for a tool of argument schema `schema`, to show in an error: its
/// required arguments (else its first), each with a placeholder of its type, so that the
/// example names the tool's own keys.
pub fn example(schema: &Map<String, Value>) -> String {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let keys: Vec<&str> = if required.is_empty() {
        properties.and_then(|p| p.keys().next()).map(String::as_str).into_iter().collect()
    } else {
        required
    };
    let mut out = Map::new();
    for k in keys {
        let p = properties.and_then(|p| p.get(k));
        let placeholder = match p.and_then(|p| p.get("type")).and_then(Value::as_str) {
            _ if p.and_then(|p| p.get("enum")).is_some() => {
                p.and_then(|p| p["enum"].get(0)).cloned().unwrap_or_default()
            }
            Some("integer" | "number") => {
                p.and_then(|p| p.get("default").or_else(|| p.get("minimum"))).cloned().unwrap_or(Value::from(1))
            }
            Some("boolean") => Value::Bool(true),
            Some("array") => Value::Array(Vec::new()),
            Some("object") => Value::Object(Map::new()),
            _ => Value::from("..."),
        };
        out.insert(k.to_string(), placeholder);
    }
    Value::Object(out).to_string()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_pass_as_written_and_anything_else_says_what_it_is() {
        let a = Args::parse(r#"{ "q": "x" }"#).unwrap();
        assert_eq!(a.as_str(), r#"{ "q": "x" }"#, "the text is kept, not re-serialised");
        assert_eq!(Args::parse("[1]").unwrap_err().to_string(), "got an array");
        assert_eq!(Args::parse("\"s\"").unwrap_err().to_string(), "got a string");
        assert!(Args::parse("{").is_err());
        let big = format!(r#"{{"q":"{}"}}"#, "x".repeat(MAX_ARGS_BYTES));
        assert_eq!(Args::parse(&big), Err(ArgsError::TooLarge(big.len())));
        let mut m = Map::new();
        m.insert("q".into(), "x".into());
        assert_eq!(Args::from_object(&m).as_str(), r#"{"q":"x"}"#);
    }

    #[test]
    fn an_example_names_the_tools_own_keys() {
        let schema = |v: Value| v.as_object().unwrap().clone();
        let search = schema(serde_json::json!({"type": "object", "properties": {
            "question": {"type": "string"}, "limit": {"type": "integer", "minimum": 8}
        }, "required": ["question"]}));
        assert_eq!(example(&search), r#"{"question":"..."}"#);
        let docx = schema(serde_json::json!({"properties": {
            "docx": {"type": "string"}, "search_query": {"type": "string"}
        }, "required": ["docx", "search_query"]}));
        assert_eq!(example(&docx), r#"{"docx":"...","search_query":"..."}"#);
        let optional = schema(serde_json::json!({"properties": {"level": {"type": "integer", "minimum": 1}}}));
        assert_eq!(example(&optional), r#"{"level":1}"#);
        assert_eq!(example(&Map::new()), "{}");
    }
}
