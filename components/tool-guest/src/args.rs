//! A tool's arguments as one type: it derives `Deserialize` (the call's parse) and
//! [`JsonSchema`] (the spec's schema), so the two cannot disagree. Doc comments on its fields
//! are the schema's descriptions; `#[schemars(range(min = 1, max = 50))]` and the like its
//! bounds; what depends on the instance (a configured default) is patched into the derived
//! schema ([`Spec::default_of`]). Every tool parses a call's arguments into its type with
//! [`parse`], whose failure comes in parts ([`ArgsError`]: not an object, an unknown or missing
//! argument, a wrong type) that the tool words its own way (CrewAI's wording, where it matches a
//! CrewAI tool); what the type cannot say (a blank query, a range) the tool checks after.
//!
//! The schema is what MCP clients and CrewAI's models read, so it is kept to what they handle:
//! no `$schema`, `title` or root description (the spec's description is the tool's), no `format` annotations, and no nullable types (an optional argument
//! is one that is not `required`; a `null` union breaks some clients' model calls).

use serde_json::{Map, Value};

pub use schemars::JsonSchema;

/// A tool as a component offers it: its name, description and arguments' JSON Schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The tool's name.
    pub name: String,
    /// What it does, for a model.
    pub description: String,
    /// Its arguments' JSON Schema (an object schema).
    pub schema: Value,
}

impl Spec {
    /// The spec of tool `name` whose arguments are `A`.
    pub fn of<A: JsonSchema>(name: impl Into<String>, description: impl Into<String>) -> Spec {
        Spec { name: name.into(), description: description.into(), schema: schema_for::<A>() }
    }

    /// Sets the `default` of argument `arg` (a default that depends on the instance's config).
    pub fn default_of(mut self, arg: &str, value: impl Into<Value>) -> Spec {
        self.property(arg).insert("default".into(), value.into());
        self
    }

    /// Sets the description of argument `arg` (one that names the instance's config).
    pub fn describe(mut self, arg: &str, description: impl Into<String>) -> Spec {
        self.property(arg).insert("description".into(), Value::String(description.into()));
        self
    }

    /// Makes argument `arg` optional (an argument the instance's config supplies).
    pub fn optional(mut self, arg: &str) -> Spec {
        if let Some(Value::Array(required)) = self.schema.get_mut("required") {
            required.retain(|r| r != arg);
        }
        self
    }

    /// Makes argument `arg` required (an argument the instance's config does not supply).
    pub fn require(mut self, arg: &str) -> Spec {
        self.property(arg);
        let required =
            self.schema.as_object_mut().map(|o| o.entry("required").or_insert_with(|| Value::Array(Vec::new())));
        if let Some(Value::Array(required)) = required
            && !required.iter().any(|r| r == arg)
        {
            required.push(Value::String(arg.into()));
            // One order whatever the calls' order: the properties' own.
            required.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
        self
    }

    /// The schema as JSON text, as WIT's `tool-spec` carries it: keys sorted at every level,
    /// so that the text is the same whether or not serde_json keeps insertion order (a feature
    /// another crate of the build may turn on).
    pub fn schema_text(&self) -> String {
        fn sorted(v: &mut Value) {
            match v {
                Value::Object(o) => {
                    o.sort_keys();
                    o.values_mut().for_each(sorted);
                }
                Value::Array(a) => a.iter_mut().for_each(sorted),
                _ => {}
            }
        }
        let mut schema = self.schema.clone();
        sorted(&mut schema);
        schema.to_string()
    }

    fn property(&mut self, arg: &str) -> &mut Map<String, Value> {
        let properties = self.schema.get_mut("properties").and_then(Value::as_object_mut);
        match properties.and_then(|p| p.get_mut(arg)).and_then(Value::as_object_mut) {
            Some(p) => p,
            // A spec names its own type's arguments: a name that is not one is the tool's bug.
            None => panic!("the argument type of tool {:?} has no argument `{arg}`", self.name),
        }
    }
}

/// The JSON Schema of argument type `A`, as a spec gives it (see the module docs).
pub fn schema_for<A: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.meta_schema = None;
        s.inline_subschemas = true;
    });
    let mut schema = settings.into_generator().into_root_schema_for::<A>().to_value();
    if let Some(root) = schema.as_object_mut() {
        // The type's name and doc comment are the code's; the spec has its own description.
        root.remove("title");
        root.remove("description");
    }
    simplify(&mut schema);
    schema
}

/// The names of `A`'s arguments, sorted (one order whether or not serde_json keeps insertion
/// order): for a message that lists what a tool takes.
pub fn names<A: JsonSchema>() -> Vec<String> {
    let schema = schema_for::<A>();
    let mut names: Vec<String> =
        schema.get("properties").and_then(Value::as_object).map(|p| p.keys().cloned().collect()).unwrap_or_default();
    names.sort();
    names
}

/// Why a call's arguments do not parse into the tool's argument type, in parts a tool words its
/// own way (CrewAI's wording, where the tool matches a CrewAI tool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgsError {
    /// The text is not JSON.
    NotJson(String),
    /// The JSON is not an object.
    NotObject,
    /// A key the type does not have; `names` are the ones it has, sorted.
    Unknown {
        /// The key.
        key: String,
        /// The arguments the tool takes.
        names: Vec<String>,
    },
    /// A required argument is missing.
    Missing(String),
    /// An argument of the wrong type or value: which one, what it must be (serde's `expected`
    /// part, its Rust number types said in words: `a number`, `an integer`, `a non-negative
    /// integer`), and what was given (serde's words before it, like ``unknown variant `x` ``).
    Invalid {
        /// The argument (a dotted path for a nested one).
        arg: String,
        /// What it must be, e.g. `a string`.
        expected: String,
        /// What was given, e.g. `invalid type: integer `1``; empty when serde does not say.
        got: String,
    },
}

/// Parses a call's arguments (`args`, a JSON object) into `A`, the type its schema is derived
/// from ([`Spec::of`]): one typed parse, the failure split into what a tool words ([`ArgsError`]).
/// `A` denies unknown fields; its field names are computed only for that error.
pub fn parse<A: serde::de::DeserializeOwned + JsonSchema>(args: &Value) -> Result<A, ArgsError> {
    if !args.is_object() {
        return Err(ArgsError::NotObject);
    }
    serde_path_to_error::deserialize::<_, A>(args).map_err(|e| {
        let arg = e.path().to_string();
        let message = e.into_inner().to_string();
        if let Some(key) = message.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) {
            return ArgsError::Unknown { key: key.to_string(), names: names::<A>() };
        }
        if let Some(field) = message.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
            return ArgsError::Missing(field.to_string());
        }
        let (got, expected) = message.split_once(", expected ").unwrap_or(("", message.as_str()));
        ArgsError::Invalid { arg, expected: in_words(expected).to_string(), got: got.to_string() }
    })
}

/// What serde expects, with Rust's number types said as a user reads them.
fn in_words(expected: &str) -> &str {
    match expected {
        "f32" | "f64" => "a number",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer",
        other => other,
    }
}

/// [`parse`] of JSON text.
pub fn parse_text<A: serde::de::DeserializeOwned + JsonSchema>(args: &str) -> Result<A, ArgsError> {
    let value: Value = serde_json::from_str(args).map_err(|e| ArgsError::NotJson(e.to_string()))?;
    parse(&value)
}

/// Drops `format` annotations, `null` from type unions and enums (an optional argument is
/// left out, not null) and `additionalProperties: true` (the default), all the way down.
fn simplify(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("additionalProperties") == Some(&Value::Bool(true)) {
                o.remove("additionalProperties");
            }
            if o.get("type").is_some_and(Value::is_string) || o.get("type").is_some_and(Value::is_array) {
                o.remove("format");
            }
            if let Some(Value::Array(types)) = o.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    o.insert("type".into(), only);
                }
            }
            if let Some(Value::Array(values)) = o.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            for union in ["anyOf", "oneOf"] {
                if let Some(Value::Array(branches)) = o.get_mut(union) {
                    branches.retain(|b| b.get("type").is_none_or(|t| t != "null"));
                    if branches.len() == 1
                        && let Some(Value::Object(only)) = branches.pop()
                    {
                        o.remove(union);
                        for (k, v) in only {
                            o.entry(k).or_insert(v);
                        }
                    }
                }
            }
            o.values_mut().for_each(simplify);
        }
        Value::Array(a) => a.iter_mut().for_each(simplify),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, JsonSchema, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Args {
        /// The question, in words
        question: String,
        /// Fragments to return
        #[schemars(range(min = 8, max = 12))]
        limit: Option<usize>,
        /// Chapter ids
        #[schemars(length(min = 1))]
        ids: Option<Vec<String>>,
        threshold: Option<f32>,
    }

    #[test]
    fn the_schema_is_the_type_without_nulls_formats_or_titles() {
        let spec = Spec::of::<Args>("search", "Searches").default_of("limit", 10).describe("threshold", "Below this");
        assert_eq!(
            spec.schema,
            json!({
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, in words"},
                    "limit": {"type": "integer", "minimum": 8, "maximum": 12, "default": 10, "description": "Fragments to return"},
                    "ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Chapter ids"},
                    "threshold": {"type": "number", "description": "Below this"}
                },
                "required": ["question"],
                "additionalProperties": false
            })
        );
        assert_eq!(names::<Args>(), ["ids", "limit", "question", "threshold"]);
        let text = spec.schema_text();
        assert!(text.starts_with(r#"{"additionalProperties":false,"properties":{"ids":"#), "{text}");
        assert_eq!(spec.optional("question").schema["required"], json!([]));
    }

    #[test]
    fn arguments_parse_into_the_schema_type_and_failures_come_in_parts() {
        let a: Args = parse(&json!({"question": "q", "limit": 9})).unwrap();
        assert_eq!(a, Args { question: "q".into(), limit: Some(9), ids: None, threshold: None });
        assert_eq!(parse::<Args>(&json!([1])), Err(ArgsError::NotObject));
        assert!(matches!(parse_text::<Args>("{"), Err(ArgsError::NotJson(_))));
        assert_eq!(
            parse::<Args>(&json!({"question": "q", "k": 1})),
            Err(ArgsError::Unknown { key: "k".into(), names: names::<Args>() })
        );
        assert_eq!(parse::<Args>(&json!({})), Err(ArgsError::Missing("question".into())));
        assert_eq!(
            parse::<Args>(&json!({"question": 1})),
            Err(ArgsError::Invalid {
                arg: "question".into(),
                expected: "a string".into(),
                got: "invalid type: integer `1`".into()
            })
        );
        assert!(matches!(
            parse::<Args>(&json!({"question": "q", "ids": [1]})),
            Err(ArgsError::Invalid { arg, expected, .. }) if arg == "ids[0]" && expected == "a string"
        ));
        // Rust's number types are said in words.
        assert!(matches!(
            parse::<Args>(&json!({"question": "q", "limit": -1})),
            Err(ArgsError::Invalid { arg, expected, .. }) if arg == "limit" && expected == "a non-negative integer"
        ));
        assert!(matches!(
            parse::<Args>(&json!({"question": "q", "threshold": "high"})),
            Err(ArgsError::Invalid { arg, expected, .. }) if arg == "threshold" && expected == "a number"
        ));
    }
}
