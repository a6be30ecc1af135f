//! JSON as Python's `json.dumps(obj, indent=2)` writes it, byte for byte: keys in insertion
//! order, two-space indents, non-ASCII escaped as `\uXXXX`, floats with Python's `repr`.
//! CrewAI's tools print their results that way; writing the same bytes means an agent moved
//! from CrewAI reads the same text.
//!
//! [`Ordered`] keeps an object's keys in the order given, as a Python dict does, and
//! [`parse`] reads JSON text into it without reordering (serde_json's `Value` sorts keys).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON value whose objects keep their keys in the order given (as a Python dict does).
#[derive(Debug, Clone, PartialEq)]
pub enum Ordered {
    /// An object, keys in order.
    Object(Vec<(String, Ordered)>),
    /// A list.
    Array(Vec<Ordered>),
    /// Anything else (objects inside it print with sorted keys).
    Value(Value),
}

/// `json.dumps(v, indent=2)`, byte for byte.
pub fn dumps(v: &Ordered) -> String {
    let mut out = String::new();
    write_ordered(v, 0, &mut out);
    out
}

fn indent(level: usize, out: &mut String) {
    out.push('\n');
    out.push_str(&"  ".repeat(level));
}

fn write_ordered(v: &Ordered, level: usize, out: &mut String) {
    match v {
        Ordered::Value(v) => write_value(v, level, out),
        Ordered::Array(a) if a.is_empty() => out.push_str("[]"),
        Ordered::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(level + 1, out);
                write_ordered(v, level + 1, out);
            }
            indent(level, out);
            out.push(']');
        }
        Ordered::Object(items) if items.is_empty() => out.push_str("{}"),
        Ordered::Object(items) => {
            out.push('{');
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(level + 1, out);
                write_string(k, out);
                out.push_str(": ");
                write_ordered(v, level + 1, out);
            }
            indent(level, out);
            out.push('}');
        }
    }
}

fn write_value(v: &Value, level: usize, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&python_number(n)),
        Value::String(s) => write_string(s, out),
        Value::Array(a) => write_ordered(&Ordered::Array(a.iter().cloned().map(Ordered::Value).collect()), level, out),
        Value::Object(o) => {
            let items: Vec<(String, Ordered)> = o.iter().map(|(k, v)| (k.clone(), Ordered::Value(v.clone()))).collect();
            write_ordered(&Ordered::Object(items), level, out);
        }
    }
}

/// Python's `repr` of a number: integers as they are, floats with a `.0` when integral.
fn python_number(n: &serde_json::Number) -> String {
    if n.is_f64() {
        let f = n.as_f64().unwrap_or(0.0);
        if f.fract() == 0.0 && f.abs() < 1e16 { format!("{f:.1}") } else { format!("{f}") }
    } else {
        n.to_string()
    }
}

/// A JSON string with Python's `ensure_ascii` escapes.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An [`Ordered`] as a plain JSON value (for hits' metadata).
pub fn to_value(v: &Ordered) -> Value {
    match v {
        Ordered::Value(v) => v.clone(),
        Ordered::Array(a) => Value::Array(a.iter().map(to_value).collect()),
        Ordered::Object(items) => {
            Value::Object(items.iter().map(|(k, v)| (k.clone(), to_value(v))).collect::<Map<_, _>>())
        }
    }
}

/// Parses JSON text keeping every object's keys in their order.
pub fn parse(text: &str) -> Result<Ordered, serde_json::Error> {
    serde_json::from_str(text)
}

impl<'de> de::Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::Bool(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::from(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::from(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::from(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::String(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::String(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::Null))
            }
            fn visit_none<E: de::Error>(self) -> Result<Ordered, E> {
                Ok(Ordered::Value(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Ordered::Array(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out: Vec<(String, Ordered)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Ordered>()? {
                    // A repeated key keeps its first place and its last value, as in Python.
                    match out.iter_mut().find(|(key, _)| *key == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                Ok(Ordered::Object(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dumps_matches_python() {
        // json.dumps({"results": [{"content": "caf\u00e9 \"x\"", "score": 1.0, "n": 3}], "e": [], "o": {}}, indent=2)
        let v = Ordered::Object(vec![
            (
                "results".into(),
                Ordered::Array(vec![Ordered::Object(vec![
                    ("content".into(), Ordered::Value(json!("café \"x\""))),
                    ("score".into(), Ordered::Value(json!(1.0))),
                    ("n".into(), Ordered::Value(json!(3))),
                ])]),
            ),
            ("e".into(), Ordered::Value(json!([]))),
            ("o".into(), Ordered::Value(json!({}))),
        ]);
        let python = "{\n  \"results\": [\n    {\n      \"content\": \"caf\\u00e9 \\\"x\\\"\",\n      \"score\": 1.0,\n      \"n\": 3\n    }\n  ],\n  \"e\": [],\n  \"o\": {}\n}";
        assert_eq!(dumps(&v), python);
        assert_eq!(dumps(&Ordered::Value(json!("😀"))), "\"\\ud83d\\ude00\"");
    }

    #[test]
    fn parse_keeps_key_order() {
        let text = r#"{"zeta": 1, "alpha": {"b": [1.5, "é", null], "a": true}, "mid": 2.0}"#;
        let v = parse(text).unwrap();
        assert_eq!(
            dumps(&v),
            "{\n  \"zeta\": 1,\n  \"alpha\": {\n    \"b\": [\n      1.5,\n      \"\\u00e9\",\n      null\n    ],\n    \"a\": true\n  },\n  \"mid\": 2.0\n}"
        );
        assert_eq!(to_value(&v), serde_json::from_str::<Value>(text).unwrap());
        assert!(parse("{").is_err());
    }
}
