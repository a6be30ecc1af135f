//! A tool call: tool `tool` of the instance with `args`, answered by the tool's output (its
//! text, hits, extra data and content blocks).

use rmcp::model::{CallToolResult, ContentBlock as McpBlock};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::content::{block, block_size, qualify_block};
use super::{Ask, RECORD_OVERHEAD, opt, owns, qualify};
use crate::args::Args;
use crate::bindings::quarry::retrieval::types::{Location, Route};
use crate::bindings::{Hit, ToolError, ToolHost, ToolOutput};
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

    fn qualify(out: &mut ToolOutput, instance: &str, schemes: &[String]) {
        out.content.iter_mut().for_each(|b| qualify_block(b, instance));
        // A hit's resource is one a client reads from this instance: one the component does not
        // own (another instance's, a scheme not given it) is dropped, as a listing drops it.
        let mut foreign = 0;
        for h in &mut out.hits {
            match h.resource.take() {
                Some(r) if owns(&r, schemes) => h.resource = Some(qualify(&r, instance)),
                Some(_) => foreign += 1,
                None => {}
            }
        }
        if foreign > 0 {
            tracing::warn!(
                instance,
                "dropped the resource of {foreign} hits its component named outside its own namespace"
            );
        }
    }

    fn size(out: &ToolOutput) -> usize {
        let strings = |v: &[String]| v.iter().map(|s| s.len() + 4).sum::<usize>();
        let location = |l: &Location| RECORD_OVERHEAD + strings(&l.path) + opt(&l.chapter);
        let hit = |h: &Hit| {
            RECORD_OVERHEAD
                + h.content.len()
                + h.metadata.len()
                + opt(&h.source)
                + opt(&h.resource)
                + h.location.as_ref().map_or(0, location)
        };
        let route = |r: &Route| {
            r.chapters.iter().map(|c| RECORD_OVERHEAD + c.chapter.len() + strings(&c.path)).sum::<usize>()
                + strings(&r.ranking)
        };
        out.text.len()
            + opt(&out.extra)
            + out.hits.iter().map(hit).sum::<usize>()
            + out.route.as_ref().map_or(0, route)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(resource: Option<&str>) -> Hit {
        Hit {
            content: String::new(),
            score: None,
            source: None,
            location: None,
            resource: resource.map(str::to_string),
            metadata: "{}".into(),
        }
    }

    #[test]
    fn a_hits_resource_is_listed_under_its_instance_and_one_not_its_own_is_dropped() {
        let mut out = ToolOutput {
            text: String::new(),
            hits: vec![
                hit(Some("quarry://self/chapter/3")),
                hit(Some("quarry://other/chapter/3")),
                hit(Some("test://x")),
                hit(None),
            ],
            route: None,
            extra: None,
            content: Vec::new(),
        };
        Call::qualify(&mut out, "manual", &["test".to_string()]);
        let resources: Vec<Option<&str>> = out.hits.iter().map(|h| h.resource.as_deref()).collect();
        assert_eq!(resources, [Some("quarry://manual/chapter/3"), None, Some("test://x"), None]);
    }
}
