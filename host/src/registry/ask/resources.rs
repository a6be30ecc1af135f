//! The resources an instance lists now, and the MCP shapes of listed resources and templates.

use rmcp::model::{Resource, ResourceTemplate as McpTemplate};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::{Ask, RECORD_OVERHEAD, opt, own_only, qualify};
use crate::bindings::quarry::retrieval::types::{ResourceInfo, ResourceTemplate};
use crate::bindings::{ToolError, ToolHost};
use crate::runtime::store::StoreState;

/// The resources an instance lists now.
#[derive(Debug, Clone, Copy)]
pub struct Resources;

impl Ask for Resources {
    type Answer = Vec<ResourceInfo>;

    fn what(&self, instance: &str) -> String {
        format!("{instance} (resources)")
    }

    fn bytes(&self) -> usize {
        0
    }

    async fn invoke(
        &self,
        bindings: &ToolHost,
        store: &mut Store<StoreState>,
        handle: ResourceAny,
    ) -> wasmtime::Result<Result<Vec<ResourceInfo>, ToolError>> {
        bindings.quarry_retrieval_tool().instance().call_resources(store, handle).await
    }

    fn qualify(list: &mut Vec<ResourceInfo>, instance: &str, schemes: &[String]) {
        own_only(list, |r| &r.uri, instance, schemes);
        list.iter_mut().for_each(|r| r.uri = qualify(&r.uri, instance));
    }

    fn size(list: &Vec<ResourceInfo>) -> usize {
        list.iter()
            .map(|r| {
                RECORD_OVERHEAD + r.uri.len() + r.name.len() + opt(&r.title) + opt(&r.description) + opt(&r.mime_type)
            })
            .sum()
    }
}

/// A listed resource as MCP's.
pub fn resource(r: ResourceInfo) -> Resource {
    let mut listed = Resource::new(r.uri, r.name);
    (listed.title, listed.description, listed.mime_type) = (r.title, r.description, r.mime_type);
    listed
}

/// A resource template (its URI as listed) as MCP's.
pub fn template(t: ResourceTemplate) -> McpTemplate {
    let mut listed = McpTemplate::new(t.uri_template, t.name);
    (listed.description, listed.mime_type) = (t.description, t.mime_type);
    listed
}
