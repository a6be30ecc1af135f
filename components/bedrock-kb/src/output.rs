//! A RetrieveResponse, as CrewAI's tool prints it (the text an LLM reads) and as Quarry's hits.
//!
//! CrewAI's text is `json.dumps(obj, indent=2)`: keys in insertion order, two-space indents,
//! non-ASCII escaped as `\uXXXX`. [`dumps`] writes the same bytes, so an agent moved from CrewAI
//! sees the same text.

use serde_json::{Map, Value, json};

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

/// Where a result came from: CrewAI's `(source_type, source_uri)`. The type is the location's
/// own `type` (`S3`, `WEB`, …, and the two CrewAI lacks, `ONEDRIVE` and `GOOGLEDRIVE`); the
/// uri is the field of whichever location is present.
pub fn source(location: &Value) -> (String, Option<String>) {
    const FIELDS: &[(&str, &str, &str)] = &[
        ("s3Location", "uri", "S3"),
        ("confluenceLocation", "url", "Confluence"),
        ("salesforceLocation", "url", "Salesforce"),
        ("sharePointLocation", "url", "SharePoint"),
        ("webLocation", "url", "Web"),
        ("customDocumentLocation", "id", "CustomDocument"),
        ("kendraDocumentLocation", "uri", "KendraDocument"),
        ("sqlLocation", "query", "SQL"),
        // Quarry's addition.
        ("oneDriveLocation", "url", "OneDrive"),
        ("googleDriveLocation", "url", "GoogleDrive"),
    ];
    let mut ty = location.get("type").and_then(Value::as_str).unwrap_or("unknown").to_string();
    for (key, field, name) in FIELDS {
        if let Some(l) = location.get(*key) {
            if ty == "unknown" {
                ty = (*name).to_string();
            }
            return (ty, l.get(*field).and_then(Value::as_str).map(str::to_string));
        }
    }
    (ty, None)
}

/// One result, as CrewAI's `_process_retrieval_result` builds it.
pub fn result(r: &Value) -> Ordered {
    let content = r.get("content").cloned().unwrap_or_else(|| json!({}));
    let (source_type, source_uri) = source(r.get("location").unwrap_or(&json!({})));
    let mut o = vec![
        ("content".to_string(), Ordered::Value(content.get("text").cloned().unwrap_or(json!("")))),
        ("content_type".to_string(), Ordered::Value(content.get("type").cloned().unwrap_or(json!("text")))),
        ("source_type".to_string(), Ordered::Value(json!(source_type))),
        ("source_uri".to_string(), Ordered::Value(json!(source_uri))),
    ];
    for (key, from) in [("score", r.get("score")), ("metadata", r.get("metadata"))] {
        if let Some(v) = from {
            o.push((key.to_string(), Ordered::Value(v.clone())));
        }
    }
    for (key, field) in [("byte_content", "byteContent"), ("row_content", "row")] {
        if let Some(v) = content.get(field) {
            o.push((key.to_string(), Ordered::Value(v.clone())));
        }
    }
    Ordered::Object(o)
}

/// The whole answer: CrewAI's object (`results` or `message`, then `nextToken`,
/// `guardrailAction`).
pub fn answer(response: &Value) -> Ordered {
    let results: Vec<Ordered> = response
        .get("retrievalResults")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(result).collect())
        .unwrap_or_default();
    let mut o = Vec::new();
    if results.is_empty() {
        o.push(("message".to_string(), Ordered::Value(json!("No results found for the given query."))));
    } else {
        o.push(("results".to_string(), Ordered::Array(results)));
    }
    for key in ["nextToken", "guardrailAction"] {
        if let Some(v) = response.get(key) {
            o.push((key.to_string(), Ordered::Value(v.clone())));
        }
    }
    Ordered::Object(o)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_location_type_and_content_type() {
        let cases = [
            (json!({"type": "S3", "s3Location": {"uri": "s3://b/k"}}), "S3", Some("s3://b/k")),
            (json!({"type": "WEB", "webLocation": {"url": "https://w"}}), "WEB", Some("https://w")),
            (json!({"type": "SQL", "sqlLocation": {"query": "SELECT 1"}}), "SQL", Some("SELECT 1")),
            (json!({"type": "ONEDRIVE", "oneDriveLocation": {"url": "https://o"}}), "ONEDRIVE", Some("https://o")),
            (
                json!({"type": "GOOGLEDRIVE", "googleDriveLocation": {"url": "https://g"}}),
                "GOOGLEDRIVE",
                Some("https://g"),
            ),
            (json!({"customDocumentLocation": {"id": "c1"}}), "CustomDocument", Some("c1")),
            (json!({}), "unknown", None),
        ];
        for (loc, ty, uri) in cases {
            assert_eq!(source(&loc), (ty.to_string(), uri.map(str::to_string)), "{loc}");
        }
        let row = json!({"content": {"type": "ROW", "row": [{"columnName": "id", "columnValue": "7", "type": "LONG"}]},
                         "location": {"type": "SQL", "sqlLocation": {"query": "q"}}});
        let v = to_value(&result(&row));
        assert_eq!(v["content"], "");
        assert_eq!(v["content_type"], "ROW");
        assert_eq!(v["row_content"][0]["columnValue"], "7");
        assert!(v.get("score").is_none() && v.get("byte_content").is_none());
        assert_eq!(
            dumps(&answer(&json!({"retrievalResults": []}))),
            "{\n  \"message\": \"No results found for the given query.\"\n}"
        );
    }
}
