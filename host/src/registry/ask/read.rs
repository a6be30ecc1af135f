//! A resource read: the resource at a URI (as the instance's component names it), answered by
//! its contents.

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::content::contents_size;
use super::{Ask, SELF_PREFIX, own_only, qualify};
use crate::bindings::quarry::retrieval::types::{Body, Contents};
use crate::bindings::{ToolError, ToolHost};
use crate::runtime::store::StoreState;

/// The resource at `uri`, as the instance's component names it (`quarry://self/...`, or a URI
/// of one of its schemes).
#[derive(Debug, Clone)]
pub struct Read {
    /// The URI.
    pub uri: String,
}

impl Ask for Read {
    type Answer = Vec<Contents>;

    fn what(&self, instance: &str) -> String {
        format!("{instance} (reading {})", crate::support::text::cut(&self.uri, 200))
    }

    fn bytes(&self) -> usize {
        self.uri.len()
    }

    async fn invoke(
        &self,
        bindings: &ToolHost,
        store: &mut Store<StoreState>,
        handle: ResourceAny,
    ) -> wasmtime::Result<Result<Vec<Contents>, ToolError>> {
        bindings.quarry_retrieval_tool().instance().call_read(store, handle, &self.uri).await
    }

    fn qualify(list: &mut Vec<Contents>, instance: &str, schemes: &[String]) {
        own_only(list, |c| &c.uri, instance, schemes);
        for c in list.iter_mut() {
            c.uri = qualify(&c.uri, instance);
            // The text a client reads names the instance's URIs as listed (a chapter cut short
            // lists its sections): a resource's text is for people, and has no typed fields.
            if let Body::Text(t) = &mut c.body
                && t.contains(SELF_PREFIX)
            {
                *t = t.replace(SELF_PREFIX, &format!("quarry://{instance}/"));
            }
        }
    }

    fn size(list: &Vec<Contents>) -> usize {
        list.iter().map(contents_size).sum()
    }
}

/// A read's contents as MCP's result.
pub fn result(list: Vec<Contents>) -> rmcp::model::ReadResourceResult {
    rmcp::model::ReadResourceResult::new(list.into_iter().map(super::content::contents).collect())
}
