//! A tool call: tool `tool` of the instance with `args`, answered by the tool's output (its
//! text, hits, extra data and content blocks).

use rmcp::model::{CallToolResult, ContentBlock as McpBlock};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::content::{block, block_size, qualify_block};
use super::{Ask, RECORD_OVERHEAD, SELF_PREFIX, opt};
use crate::args::Args;
use crate::bindings::{ToolError, ToolHost, ToolOutput};
use crate::runtime::store::StoreState;

/// Tool `tool` with `args`.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool's name in the instance.
    pub tool: String,
    /// Its arguments.
    pub args: Args,
}

impl Ask for Call {
    type Answer = ToolOutput;

    fn what(&self, instance: &str) -> String {
        format!("{instance}.{}", self.tool)
    }

    fn bytes(&self) -> usize {
        self.args.len()
    }

    async fn invoke(
        &self,
        bindings: &ToolHost,
        store: &mut Store<StoreState>,
        handle: ResourceAny,
    ) -> wasmtime::Result<Result<ToolOutput, ToolError>> {
        bindings.quarry_retrieval_tool().instance().call_call(store, handle, &self.tool, self.args.as_str()).await
    }

    fn qualify(out: &mut ToolOutput, instance: &str, _schemes: &[String]) {
        out.content.iter_mut().for_each(|b| qualify_block(b, instance));
        // A hit names its resource in its metadata (chapter-rag's `resource`), which WIT 0.5
        // carries as JSON text: the URI is qualified where it stands as a JSON string.
        let own = format!("\"{SELF_PREFIX}");
        for h in out.hits.iter_mut().filter(|h| h.metadata.contains(&own)) {
            h.metadata = h.metadata.replace(&own, &format!("\"quarry://{instance}/"));
        }
    }

    fn size(out: &ToolOutput) -> usize {
        out.text.len()
            + opt(&out.extra)
            + out
                .hits
                .iter()
                .map(|h| RECORD_OVERHEAD + h.content.len() + h.metadata.len() + opt(&h.source))
                .sum::<usize>()
            + out.content.iter().map(block_size).sum::<usize>()
    }
}

/// A call's output as MCP's result: the whole text first (CrewAI's adapter reads only that),
/// then the blocks the tool added; `structuredContent` mirrors the hits and extra data.
pub fn result(out: ToolOutput) -> CallToolResult {
    let structured = crate::output::structured(&out);
    let mut blocks = Vec::with_capacity(1 + out.content.len());
    blocks.push(McpBlock::text(out.text));
    blocks.extend(out.content.into_iter().map(block));
    let mut r = CallToolResult::success(blocks);
    r.structured_content = Some(structured);
    r
}
