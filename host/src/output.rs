//! A call's output as JSON, in the two shapes its readers take: the whole output for
//! `quarry call --json`, and the typed mirror of the text for MCP's `structuredContent`.

use serde_json::{Value, json};

use crate::bindings::ToolOutput;

/// A JSON document a component returned as a string, parsed; kept as a string if it is not JSON.
fn document(s: &str) -> Value {
    serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

/// A score as the component wrote it (`0.8`, not the `0.800000011920929` of the f32 widened to
/// f64 that serde_json would print).
fn score(x: Option<f32>) -> Value {
    x.and_then(|x| x.to_string().parse::<f64>().ok()).map_or(Value::Null, Value::from)
}

/// The hits as `[{content, score, source, metadata}]`.
fn hits(out: &ToolOutput) -> Vec<Value> {
    out.hits
        .iter()
        .map(|h| json!({"content": h.content, "score": score(h.score), "source": h.source, "metadata": document(&h.metadata)}))
        .collect()
}

/// The whole output as pretty JSON: `{text, hits: [{content, score, source, metadata}], extra}`.
pub fn output_json(out: &ToolOutput) -> String {
    let v = json!({"text": out.text, "hits": hits(out), "extra": out.extra.as_deref().map(document)});
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// `{hits: [{content, score, source, metadata}], extra}`: the typed mirror of the text (no
/// `extra` when the tool gave none).
pub fn structured(out: &ToolOutput) -> Value {
    let mut v = json!({ "hits": hits(out) });
    if let Some(extra) = out.extra.as_deref() {
        v["extra"] = document(extra);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_print_as_written() {
        assert_eq!(score(Some(0.8)).to_string(), "0.8");
        assert_eq!(score(Some(f32::NAN)), Value::Null);
        assert_eq!(score(None), Value::Null);
    }
}
