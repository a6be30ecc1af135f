//! What the instances offer beside their tools, host-wide: resources (listed, read, matched by
//! template), prompts (listed under the names tools are, `instance.prompt` or bare) and
//! completions. Each request runs on a member of its instance's pool, as a call does.

use std::sync::Arc;

use super::Registry;
use super::ask::complete::Complete;
use super::ask::prompt::GetPrompt;
use super::ask::read::Read;
use super::ask::resources::Resources;
use super::ask::{localize, qualify};
use super::errors::CallError;
use super::instance::{Caller, ToolInstance};
use crate::bindings::ToolError;
use crate::bindings::quarry::retrieval::types::{
    Completion, CompletionTarget, Contents, Prompt, PromptSpec, ResourceInfo, ResourceTemplate,
};

/// The scheme of the URIs Quarry's components give their resources:
/// `quarry://INSTANCE/...`, which routes a read to its instance without asking the others.
pub const QUARRY_SCHEME: &str = "quarry://";

/// One prompt as listed.
#[derive(Debug, Clone)]
pub struct PromptEntry {
    /// `instance.prompt`, or the prompt's own name for an instance with `bare_names`.
    pub listed: String,
    /// The instance.
    pub instance: String,
    /// The prompt as its component describes it.
    pub spec: PromptSpec,
}

/// Why a resource could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No instance has a resource at this URI.
    #[error("no resource at {0}")]
    NotFound(String),
    /// The instance that has it failed to read it.
    #[error(transparent)]
    Call(#[from] CallError),
}

impl Registry {
    fn instances_sorted(&self) -> Vec<Arc<ToolInstance>> {
        self.tools.read().values().cloned().collect()
    }

    /// Every prompt of every instance, sorted by listed name.
    pub fn prompts(&self) -> Vec<PromptEntry> {
        let mut all: Vec<PromptEntry> = self
            .instances_sorted()
            .iter()
            .flat_map(|inst| {
                inst.catalog.prompts.iter().map(|p| PromptEntry {
                    listed: inst.config.listed_name(&p.name),
                    instance: inst.name.clone(),
                    spec: p.clone(),
                })
            })
            .collect();
        all.sort_by(|a, b| a.listed.cmp(&b.listed));
        all.dedup_by(|b, a| a.listed == b.listed);
        all
    }

    /// Every resource template as listed (its `quarry://self/` qualified), with its instance.
    pub fn templates(&self) -> Vec<(String, ResourceTemplate)> {
        self.instances_sorted()
            .iter()
            .flat_map(|inst| {
                inst.catalog.templates.iter().map(|t| {
                    let listed = ResourceTemplate { uri_template: qualify(&t.uri_template, &inst.name), ..t.clone() };
                    (inst.name.clone(), listed)
                })
            })
            .collect()
    }

    /// Whether any instance offers resources (listed or by template), or prompts.
    pub fn offers(&self) -> (bool, bool) {
        let all = self.instances_sorted();
        let resources = all.iter().any(|i| i.catalog.lists_resources || !i.catalog.templates.is_empty());
        let prompts = all.iter().any(|i| !i.catalog.prompts.is_empty());
        (resources, prompts)
    }

    /// The resources every instance that lists some lists now, in instance order, within
    /// [`super::LIST_WAIT`] in all: an instance still preparing, or whose members are all busy,
    /// is waited for until then and left out after (it tells listening clients by a
    /// `resources/list_changed` when it has prepared); one whose preparation failed is left out,
    /// so that it does not hide the others'. A URI listed twice is kept once (the first
    /// instance's).
    pub async fn resources(&self, caller: Caller<'_>) -> Result<Vec<ResourceInfo>, CallError> {
        let mut all: Vec<ResourceInfo> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let listing = |i: &Arc<ToolInstance>| {
            i.catalog.lists_resources && !matches!(i.readiness(), super::instance::Readiness::Failed(_))
        };
        let until = tokio::time::Instant::now() + super::LIST_WAIT;
        for inst in self.instances_sorted().into_iter().filter(listing) {
            let ready = tokio::time::timeout_at(until, inst.prepared()).await;
            if !matches!(ready, Ok(super::instance::Readiness::Ready)) {
                tracing::info!(target: "quarry::mcp", instance = %inst.name, "resources not listed: still {}", inst.status());
                continue;
            }
            match tokio::time::timeout_at(until, inst.ask(Resources, caller, std::future::pending())).await {
                Ok(Ok(list)) => all.extend(list.into_iter().filter(|r| seen.insert(r.uri.clone()))),
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    tracing::info!(target: "quarry::mcp", instance = %inst.name, "resources not listed: no member was free within {:?}", super::LIST_WAIT);
                }
            }
        }
        Ok(all)
    }

    /// Reads the resource at `uri` from the instance that owns it: the one a
    /// `quarry://INSTANCE/` URI names, or the one given its scheme (`resource_schemes`). A
    /// component names only its own resources, so no other instance is asked about a URI.
    pub async fn read(
        &self,
        uri: &str,
        caller: Caller<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<Vec<Contents>, ReadError> {
        let owner = match uri.strip_prefix(QUARRY_SCHEME) {
            Some(rest) => rest.split_once('/').and_then(|(name, _)| self.instance(name)),
            None => {
                let scheme = uri.split_once("://").map(|(s, _)| s);
                self.instances_sorted()
                    .into_iter()
                    .find(|i| scheme.is_some_and(|s| i.config.resource_schemes.iter().any(|o| o == s)))
            }
        }
        .filter(|i| i.catalog.lists_resources || !i.catalog.templates.is_empty());
        let Some(inst) = owner else {
            return Err(ReadError::NotFound(uri.to_string()));
        };
        let read = Read { uri: localize(uri, &inst.name) };
        match inst.ask(read, caller, cancelled).await {
            Ok(contents) if !contents.is_empty() => return Ok(contents),
            // Empty contents are no resource (the spec forbids answering a read with none).
            Ok(_) | Err(CallError::Tool { error: ToolError::NotFound(_), .. }) => {}
            Err(e) => return Err(e.into()),
        }
        Err(ReadError::NotFound(uri.to_string()))
    }

    /// Prompt `listed` (as [`Registry::prompts`] lists it) filled in with `args` (a JSON
    /// object of strings); `None` when no instance offers it.
    pub async fn get_prompt(
        &self,
        listed: &str,
        args: String,
        caller: Caller<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Option<Result<Prompt, CallError>> {
        let entry = self.prompts().into_iter().find(|p| p.listed == listed)?;
        let inst = self.instance(&entry.instance)?;
        let ask = GetPrompt { name: entry.spec.name, listed: entry.listed, args };
        Some(inst.ask(ask, caller, cancelled).await)
    }

    /// Values for `argument` of a prompt (by listed name) or a resource template (by its URI
    /// template); `None` when no instance offers it.
    pub async fn complete(
        &self,
        target: Target<'_>,
        argument: String,
        value: String,
        context: String,
        caller: Caller<'_>,
    ) -> Option<Result<Completion, CallError>> {
        let (inst, target) = match target {
            Target::Prompt(listed) => {
                let entry = self.prompts().into_iter().find(|p| p.listed == listed)?;
                (self.instance(&entry.instance)?, CompletionTarget::Prompt(entry.spec.name))
            }
            Target::Template(uri_template) => {
                let inst = self
                    .instances_sorted()
                    .into_iter()
                    .find(|i| i.catalog.templates.iter().any(|t| qualify(&t.uri_template, &i.name) == uri_template))?;
                let local = localize(uri_template, &inst.name);
                (inst, CompletionTarget::ResourceTemplate(local))
            }
        };
        let ask = Complete { target, argument, value, context };
        Some(inst.ask(ask, caller, std::future::pending()).await)
    }
}

/// What a completion is asked for.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A prompt, by listed name.
    Prompt(&'a str),
    /// A resource template, by its URI template.
    Template(&'a str),
}
