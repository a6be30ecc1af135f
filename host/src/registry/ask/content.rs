//! What several kinds answer with: content blocks (a call's, a prompt message's) and a
//! resource's contents (a read's, an embedded block's). Their cost, their URIs as listed, and
//! their MCP shape, made from the WIT types directly.

use base64::Engine as _;
use rmcp::model::{ContentBlock as McpBlock, Resource, ResourceContents};

use super::{RECORD_OVERHEAD, opt, qualify};
use crate::bindings::quarry::retrieval::types::{Body, ContentBlock, Contents};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// What a resource's contents cost. Bytes travel base64-encoded: 4 characters for every 3.
pub fn contents_size(c: &Contents) -> usize {
    let body = match &c.body {
        Body::Text(t) => t.len(),
        Body::Blob(b) => b.len().div_ceil(3) * 4,
    };
    RECORD_OVERHEAD + c.uri.len() + opt(&c.mime_type) + body
}

/// What one content block costs.
pub fn block_size(b: &ContentBlock) -> usize {
    RECORD_OVERHEAD
        + match b {
            ContentBlock::Text(t) => t.len(),
            ContentBlock::Image(m) | ContentBlock::Audio(m) => m.data.len().div_ceil(3) * 4 + m.mime_type.len(),
            ContentBlock::Link(l) => l.uri.len() + l.name.len() + opt(&l.description) + opt(&l.mime_type),
            ContentBlock::Embedded(c) => contents_size(c),
        }
}

/// `b` with its URI as listed for `instance`.
pub fn qualify_block(b: &mut ContentBlock, instance: &str) {
    match b {
        ContentBlock::Link(l) => l.uri = qualify(&l.uri, instance),
        ContentBlock::Embedded(c) => c.uri = qualify(&c.uri, instance),
        ContentBlock::Text(_) | ContentBlock::Image(_) | ContentBlock::Audio(_) => {}
    }
}

/// A resource's contents as MCP's.
pub fn contents(c: Contents) -> ResourceContents {
    let Contents { uri, mime_type, body } = c;
    let mcp = match body {
        Body::Text(text) => ResourceContents::TextResourceContents { uri, mime_type: None, text, meta: None },
        Body::Blob(b) => ResourceContents::BlobResourceContents { uri, mime_type: None, blob: b64(&b), meta: None },
    };
    match mime_type {
        Some(m) => mcp.with_mime_type(m),
        None => mcp,
    }
}

/// A content block as MCP's.
pub fn block(b: ContentBlock) -> McpBlock {
    match b {
        ContentBlock::Text(t) => McpBlock::text(t),
        ContentBlock::Image(m) => McpBlock::image(b64(&m.data), m.mime_type),
        ContentBlock::Audio(m) => McpBlock::audio(b64(&m.data), m.mime_type),
        ContentBlock::Link(l) => {
            let mut link = Resource::new(l.uri, l.name);
            (link.description, link.mime_type) = (l.description, l.mime_type);
            McpBlock::resource_link(link)
        }
        ContentBlock::Embedded(c) => McpBlock::resource(contents(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::quarry::retrieval::types::{Media, ResourceLink};
    use serde_json::json;

    #[test]
    fn every_block_is_the_spec_shape() {
        let image = block(ContentBlock::Image(Media { data: vec![1, 2, 3], mime_type: "image/png".into() }));
        assert_eq!(
            serde_json::to_value(&image).unwrap(),
            json!({"type": "image", "data": "AQID", "mimeType": "image/png"})
        );
        let link = block(ContentBlock::Link(ResourceLink {
            uri: "quarry://m/chapter/3".into(),
            name: "3 Install".into(),
            description: None,
            mime_type: Some("text/markdown".into()),
        }));
        assert_eq!(
            serde_json::to_value(&link).unwrap(),
            json!({"type": "resource_link", "uri": "quarry://m/chapter/3", "name": "3 Install", "mimeType": "text/markdown"})
        );
        let embedded = block(ContentBlock::Embedded(Contents {
            uri: "test://x".into(),
            mime_type: None,
            body: Body::Blob(vec![0xff]),
        }));
        assert_eq!(
            serde_json::to_value(&embedded).unwrap(),
            json!({"type": "resource", "resource": {"uri": "test://x", "blob": "/w=="}})
        );
        let text = block(ContentBlock::Embedded(Contents {
            uri: "test://t".into(),
            mime_type: Some("text/markdown".into()),
            body: Body::Text("# T".into()),
        }));
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            json!({"type": "resource", "resource": {"uri": "test://t", "mimeType": "text/markdown", "text": "# T"}})
        );
    }
}
