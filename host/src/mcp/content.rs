//! What components answer (WIT's content blocks, resources, prompts, completions) as MCP's
//! types. Each is written as the MCP JSON shape and read back into rmcp's type, so the spec's
//! shape is spelled once, here. A shape rmcp would not read is an internal error naming it,
//! never a panic: what goes in is a component's.

use base64::Engine as _;
use rmcp::model::{
    CompletionInfo, ContentBlock as McpBlock, GetPromptResult, Prompt as McpPrompt, Resource, ResourceContents,
    ResourceTemplate as McpTemplate,
};
use serde_json::{Value, json};

use crate::bindings::quarry::retrieval::types::{
    Body, Completion, ContentBlock, Contents, Prompt, PromptSpec, ResourceInfo, ResourceTemplate, Role,
};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// What a conversion gives: rmcp's type, or why it could not be made.
pub type Converted<T> = Result<T, rmcp::ErrorData>;

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Converted<T> {
    serde_json::from_value(v).map_err(|e| {
        rmcp::ErrorData::internal_error(
            format!("a component's answer does not make an MCP {}: {e}", std::any::type_name::<T>()),
            None,
        )
    })
}

/// A resource's contents, as MCP's JSON.
fn contents_json(c: &Contents) -> Value {
    let mut v = json!({ "uri": c.uri });
    if let Some(m) = &c.mime_type {
        v["mimeType"] = json!(m);
    }
    match &c.body {
        Body::Text(t) => v["text"] = json!(t),
        Body::Blob(b) => v["blob"] = json!(b64(b)),
    }
    v
}

/// A content block, as MCP's JSON.
fn block_json(b: &ContentBlock) -> Value {
    match b {
        ContentBlock::Text(t) => json!({ "type": "text", "text": t }),
        ContentBlock::Image(m) => json!({ "type": "image", "data": b64(&m.data), "mimeType": m.mime_type }),
        ContentBlock::Audio(m) => json!({ "type": "audio", "data": b64(&m.data), "mimeType": m.mime_type }),
        ContentBlock::Link(l) => {
            let mut v = json!({ "type": "resource_link", "uri": l.uri, "name": l.name });
            if let Some(d) = &l.description {
                v["description"] = json!(d);
            }
            if let Some(m) = &l.mime_type {
                v["mimeType"] = json!(m);
            }
            v
        }
        ContentBlock::Embedded(c) => json!({ "type": "resource", "resource": contents_json(c) }),
    }
}

/// A content block as MCP's.
pub fn block(b: &ContentBlock) -> Converted<McpBlock> {
    from(block_json(b))
}

/// A resource's contents as MCP's.
pub fn contents(c: &Contents) -> Converted<ResourceContents> {
    from(contents_json(c))
}

/// A listed resource as MCP's.
pub fn resource(r: &ResourceInfo) -> Converted<Resource> {
    let mut v = json!({ "uri": r.uri, "name": r.name });
    for (key, value) in [("title", &r.title), ("description", &r.description), ("mimeType", &r.mime_type)] {
        if let Some(x) = value {
            v[key] = json!(x);
        }
    }
    from(v)
}

/// A resource template as MCP's.
pub fn template(t: &ResourceTemplate) -> Converted<McpTemplate> {
    let mut v = json!({ "uriTemplate": t.uri_template, "name": t.name });
    for (key, value) in [("description", &t.description), ("mimeType", &t.mime_type)] {
        if let Some(x) = value {
            v[key] = json!(x);
        }
    }
    from(v)
}

/// A prompt as MCP lists it, under `listed`.
pub fn prompt_spec(listed: &str, p: &PromptSpec) -> Converted<McpPrompt> {
    let arguments: Vec<Value> = p
        .arguments
        .iter()
        .map(|a| {
            let mut v = json!({ "name": a.name, "required": a.required });
            if let Some(d) = &a.description {
                v["description"] = json!(d);
            }
            v
        })
        .collect();
    from(json!({ "name": listed, "description": p.description, "arguments": arguments }))
}

/// A filled-in prompt as MCP's result.
pub fn prompt(p: &Prompt) -> Converted<GetPromptResult> {
    let messages: Vec<Value> = p
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({ "role": role, "content": block_json(&m.content) })
        })
        .collect();
    let mut v = json!({ "messages": messages });
    if let Some(d) = &p.description {
        v["description"] = json!(d);
    }
    from(v)
}

/// Completion values as MCP's (at most its 100).
pub fn completion(c: &Completion) -> Converted<CompletionInfo> {
    let max = CompletionInfo::MAX_VALUES;
    let more = c.has_more || c.values.len() > max;
    let mut v = json!({ "values": c.values.iter().take(max).collect::<Vec<_>>(), "hasMore": more });
    if let Some(t) = c.total {
        v["total"] = json!(t);
    }
    from(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::quarry::retrieval::types::{Media, ResourceLink};

    #[test]
    fn every_block_is_the_spec_shape() {
        let image = block(&ContentBlock::Image(Media { data: vec![1, 2, 3], mime_type: "image/png".into() })).unwrap();
        assert_eq!(
            serde_json::to_value(&image).unwrap(),
            json!({"type": "image", "data": "AQID", "mimeType": "image/png"})
        );
        let link = block(&ContentBlock::Link(ResourceLink {
            uri: "quarry://m/chapter/3".into(),
            name: "3 Install".into(),
            description: None,
            mime_type: Some("text/markdown".into()),
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&link).unwrap(),
            json!({"type": "resource_link", "uri": "quarry://m/chapter/3", "name": "3 Install", "mimeType": "text/markdown"})
        );
        let embedded = block(&ContentBlock::Embedded(Contents {
            uri: "test://x".into(),
            mime_type: None,
            body: Body::Blob(vec![0xff]),
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&embedded).unwrap(),
            json!({"type": "resource", "resource": {"uri": "test://x", "blob": "/w=="}})
        );
    }
}
