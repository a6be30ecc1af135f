//! A tool's arguments as one type: it derives `Deserialize` (the call's parse) and
//! [`JsonSchema`] (the spec's schema), so the two cannot disagree. Doc comments on its fields
//! are the schema's descriptions; `#[schemars(range(min = 1, max = 50))]` and the like its
//! bounds; what depends on the instance (a configured default) is patched into the derived
//! schema ([`Spec::default_of`]). Validation that CrewAI words its own way stays in the tool:
//! the type says what is accepted, the tool says what is wrong.
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

/// The first key of `args` that is not an argument of `A` (a tool accepts what its schema
/// offers, nothing more): for a tool that checks its arguments by hand, in its own words,
/// against the one list its type keeps.
pub fn unknown_key<A: JsonSchema>(args: &Map<String, Value>) -> Option<&str> {
    let names = names::<A>();
    args.keys().map(String::as_str).find(|k| !names.iter().any(|n| n == k))
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

    #[derive(serde::Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
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
}
