//! A call's output as JSON, in the two shapes its readers take: the whole output for
//! `quarry call --json`, and the typed mirror of the text for MCP's `structuredContent`.
//! Quarry's own fields (a hit's location and resource, the route) come from WIT's typed records;
//! only a component's own keys (`metadata`, `extra`) are JSON text it wrote, parsed here once.

use serde_json::{Map, Value, json};

use crate::bindings::quarry::retrieval::types::{Location, Route};
use crate::bindings::{Hit, ToolOutput};

/// A JSON document a component returned as a string, parsed; kept as a string if it is not JSON.
fn document(s: &str) -> Value {
    serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

/// A score as the component wrote it (`0.8`, not the `0.800000011920929` of the f32 widened to
/// f64 that serde_json would print).
fn score(x: Option<f32>) -> Value {
    x.and_then(|x| x.to_string().parse::<f64>().ok()).map_or(Value::Null, Value::from)
}

/// A location as `{path, lines: [first, last], chapter}` (the last two only when known).
fn location(l: &Location) -> Value {
    let mut v = Map::new();
    v.insert("path".into(), json!(l.path));
    if let Some(r) = &l.lines {
        v.insert("lines".into(), json!([r.first, r.last]));
    }
    if let Some(c) = &l.chapter {
        v.insert("chapter".into(), json!(c));
    }
    Value::Object(v)
}

/// A route as `{chapters: [{chapter, path, confidence}], ranking}`.
fn route(r: &Route) -> Value {
    let chapters: Vec<Value> = r
        .chapters
        .iter()
        .map(|c| json!({"chapter": c.chapter, "path": c.path, "confidence": score(c.confidence)}))
        .collect();
    json!({"chapters": chapters, "ranking": r.ranking})
}

fn hit(h: &Hit) -> Value {
    json!({
        "content": h.content,
        "score": score(h.score),
        "source": h.source,
        "location": h.location.as_ref().map(location),
        "resource": h.resource,
        "metadata": document(&h.metadata),
    })
}

/// The whole output as pretty JSON: `{text, hits: [{content, score, source, location,
/// resource, metadata}], route, extra}`.
pub fn output_json(out: &ToolOutput) -> String {
    let v = json!({
        "text": out.text,
        "hits": out.hits.iter().map(hit).collect::<Vec<_>>(),
        "route": out.route.as_ref().map(route),
        "extra": out.extra.as_deref().map(document),
    });
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// `{hits: [{content, score, source, location, resource, metadata}], route, extra}`: the typed
/// mirror of the text (no `route` or `extra` when the tool gave none).
pub fn structured(out: &ToolOutput) -> Value {
    let mut v = json!({ "hits": out.hits.iter().map(hit).collect::<Vec<_>>() });
    if let Some(r) = &out.route {
        v["route"] = route(r);
    }
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
