//! A prompt: one of the instance's prompts filled in with the client's arguments, and the MCP
//! shapes of a listed prompt and a filled-in one.

use rmcp::model::{GetPromptResult, Prompt as McpPrompt, PromptArgument, PromptMessage};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::content::{block, block_size, qualify_block};
use super::{Ask, opt};
use crate::bindings::quarry::retrieval::types::{Prompt, PromptSpec, Role};
use crate::bindings::{ToolError, ToolHost};
use crate::runtime::store::StoreState;

/// Prompt `name` with `args` (a JSON object of strings).
#[derive(Debug, Clone)]
pub struct GetPrompt {
    /// The prompt's name in the instance.
    pub name: String,
    /// Its name as listed (`instance.prompt`, or bare), for errors.
    pub listed: String,
    /// Its arguments, as JSON.
    pub args: String,
}

impl Ask for GetPrompt {
    type Answer = Prompt;

    fn what(&self, _instance: &str) -> String {
        format!("prompt {}", self.listed)
    }

    fn bytes(&self) -> usize {
        self.name.len() + self.args.len()
    }

    async fn invoke(
        &self,
        bindings: &ToolHost,
        store: &mut Store<StoreState>,
        handle: ResourceAny,
    ) -> wasmtime::Result<Result<Prompt, ToolError>> {
        bindings.quarry_retrieval_tool().instance().call_get_prompt(store, handle, &self.name, &self.args).await
    }

    fn qualify(p: &mut Prompt, instance: &str, _schemes: &[String]) {
        p.messages.iter_mut().for_each(|m| qualify_block(&mut m.content, instance));
    }

    fn size(p: &Prompt) -> usize {
        opt(&p.description) + p.messages.iter().map(|m| block_size(&m.content)).sum::<usize>()
    }
}

/// A prompt as MCP lists it, under `listed`.
pub fn listed(listed: &str, p: &PromptSpec) -> McpPrompt {
    let arguments = p
        .arguments
        .iter()
        .map(|a| {
            let arg = PromptArgument::new(a.name.clone()).with_required(a.required);
            match &a.description {
                Some(d) => arg.with_description(d.clone()),
                None => arg,
            }
        })
        .collect();
    McpPrompt::new(listed, Some(p.description.clone()), Some(arguments))
}

/// A filled-in prompt as MCP's result.
pub fn result(p: Prompt) -> GetPromptResult {
    let messages = p
        .messages
        .into_iter()
        .map(|m| {
            let role = match m.role {
                Role::User => rmcp::model::Role::User,
                Role::Assistant => rmcp::model::Role::Assistant,
            };
            PromptMessage::new(role, block(m.content))
        })
        .collect();
    let r = GetPromptResult::new(messages);
    match p.description {
        Some(d) => r.with_description(d),
        None => r,
    }
}
