//! A completion: values for an argument of a prompt or a resource template, given what the
//! user typed so far.

use rmcp::model::CompletionInfo;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::Ask;
use crate::bindings::quarry::retrieval::types::{Completion, CompletionTarget};
use crate::bindings::{ToolError, ToolHost};
use crate::runtime::store::StoreState;

/// Values for `argument` of `target`.
#[derive(Debug, Clone)]
pub struct Complete {
    /// Of what (as the instance's component names it).
    pub target: CompletionTarget,
    /// The argument's name.
    pub argument: String,
    /// What the user typed so far.
    pub value: String,
    /// The arguments already chosen, a JSON object.
    pub context: String,
}

impl Ask for Complete {
    type Answer = Completion;

    fn what(&self, instance: &str) -> String {
        format!("{instance} (completion)")
    }

    fn bytes(&self) -> usize {
        self.argument.len() + self.value.len() + self.context.len()
    }

    async fn invoke(
        &self,
        bindings: &ToolHost,
        store: &mut Store<StoreState>,
        handle: ResourceAny,
    ) -> wasmtime::Result<Result<Completion, ToolError>> {
        let (target, argument, value, context) = (&self.target, &self.argument, &self.value, &self.context);
        bindings.quarry_retrieval_tool().instance().call_complete(store, handle, target, argument, value, context).await
    }

    fn qualify(_: &mut Completion, _instance: &str, _schemes: &[String]) {}

    fn size(c: &Completion) -> usize {
        c.values.iter().map(|v| v.len() + 4).sum()
    }
}

/// Completion values as MCP's (at most its 100; more says so).
pub fn result(c: Completion) -> CompletionInfo {
    let more = c.has_more || c.values.len() > CompletionInfo::MAX_VALUES;
    let mut info = CompletionInfo::default();
    info.values = c.values.into_iter().take(CompletionInfo::MAX_VALUES).collect();
    (info.total, info.has_more) = (c.total, Some(more));
    info
}
