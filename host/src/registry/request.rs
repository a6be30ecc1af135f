//! What a tool instance is asked: a tool call, or one of the requests beside it (its resources,
//! a resource read, a prompt, a completion), each run on a member of the instance's pool the
//! way a call is (queued fairly, under the deadline, recycled after a fault), and what each
//! answers. The guest function each request calls, and what its answer costs against
//! `max_output`, are here, once.

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::args::Args;
use crate::bindings::ToolHost;
use crate::bindings::quarry::retrieval::types::{
    Body, Completion, CompletionTarget, ContentBlock, Contents, Prompt, ResourceInfo,
};
use crate::bindings::{ToolError, ToolOutput};
use crate::runtime::store::StoreState;

/// What an instance is asked.
#[derive(Debug, Clone)]
pub enum Request {
    /// Tool `tool` with `args`.
    Call {
        /// The tool's name in the instance.
        tool: String,
        /// Its arguments.
        args: Args,
    },
    /// The resources it lists now.
    Resources,
    /// The resource at this URI.
    Read(String),
    /// Prompt `name` with `args` (a JSON object of strings).
    Prompt {
        /// The prompt's name in the instance.
        name: String,
        /// Its arguments, as JSON.
        args: String,
    },
    /// Values for an argument.
    Complete {
        /// Of what.
        target: CompletionTarget,
        /// The argument's name.
        argument: String,
        /// What the user typed so far.
        value: String,
        /// The arguments already chosen, a JSON object.
        context: String,
    },
}

/// What an instance answered.
#[derive(Debug)]
pub enum Reply {
    /// A tool's output.
    Output(ToolOutput),
    /// Its resources.
    Resources(Vec<ResourceInfo>),
    /// A resource's contents.
    Contents(Vec<Contents>),
    /// A prompt, filled in.
    Prompt(Prompt),
    /// Completion values.
    Completion(Completion),
}

impl Request {
    /// Runs the request's guest function on `handle`.
    pub(crate) async fn invoke(
        &self,
        bindings: &ToolHost,
        store: &mut Store<StoreState>,
        handle: ResourceAny,
    ) -> wasmtime::Result<Result<Reply, ToolError>> {
        let i = bindings.quarry_retrieval_tool().instance();
        Ok(match self {
            Request::Call { tool, args } => i.call_call(store, handle, tool, args.as_str()).await?.map(Reply::Output),
            Request::Resources => i.call_resources(store, handle).await?.map(Reply::Resources),
            Request::Read(uri) => i.call_read(store, handle, uri).await?.map(Reply::Contents),
            Request::Prompt { name, args } => i.call_get_prompt(store, handle, name, args).await?.map(Reply::Prompt),
            Request::Complete { target, argument, value, context } => {
                i.call_complete(store, handle, target, argument, value, context).await?.map(Reply::Completion)
            }
        })
    }
}

impl Request {
    /// The bytes a client sends into the guest with it: bounded as a call's arguments are
    /// ([`crate::args::MAX_ARGS_BYTES`]).
    pub fn bytes(&self) -> usize {
        match self {
            Request::Call { args, .. } => args.len(),
            Request::Resources => 0,
            Request::Read(uri) => uri.len(),
            Request::Prompt { name, args } => name.len() + args.len(),
            Request::Complete { argument, value, context, .. } => argument.len() + value.len() + context.len(),
        }
    }
}

/// How a component names its own resources: `quarry://self/...`, which the host lists as
/// `quarry://INSTANCE/...` (a component does not know the name the operator gave its instance,
/// as it does not know its tools' listed names).
pub const SELF_PREFIX: &str = "quarry://self/";

/// Whether a component of an instance given `schemes` (`resource_schemes`) may name `uri` (or
/// a URI template) as its own: under `quarry://self/`, or in one of those schemes.
pub fn owns(uri: &str, schemes: &[String]) -> bool {
    uri.starts_with(SELF_PREFIX) || uri.split_once("://").is_some_and(|(scheme, _)| schemes.iter().any(|s| s == scheme))
}

/// `uri` as listed for `instance`: `quarry://self/x` becomes `quarry://INSTANCE/x`.
pub fn qualify(uri: &str, instance: &str) -> String {
    match uri.strip_prefix(SELF_PREFIX) {
        Some(rest) => format!("quarry://{instance}/{rest}"),
        None => uri.to_string(),
    }
}

/// `uri` as `instance`'s component names it: `quarry://INSTANCE/x` becomes `quarry://self/x`.
pub fn localize(uri: &str, instance: &str) -> String {
    match uri.strip_prefix("quarry://").and_then(|r| r.strip_prefix(instance)).and_then(|r| r.strip_prefix('/')) {
        Some(rest) => format!("{SELF_PREFIX}{rest}"),
        None => uri.to_string(),
    }
}

/// `text` with every `quarry://self/` in it as listed for `instance`.
fn qualify_text(text: &mut String, instance: &str) {
    if text.contains(SELF_PREFIX) {
        *text = text.replace(SELF_PREFIX, &format!("quarry://{instance}/"));
    }
}

/// Keeps in `list` only what `instance`'s component may name ([`owns`]). What names another
/// instance or scheme is dropped, and said in the log.
fn own_only<T>(list: &mut Vec<T>, uri: impl Fn(&T) -> &String, instance: &str, schemes: &[String]) {
    let before = list.len();
    list.retain(|x| owns(uri(x), schemes));
    if list.len() < before {
        tracing::warn!(
            instance,
            "dropped {} resources its component named outside its own namespace ({SELF_PREFIX}... and its resource_schemes)",
            before - list.len()
        );
    }
}

fn qualify_block(b: &mut ContentBlock, instance: &str) {
    match b {
        ContentBlock::Link(l) => l.uri = qualify(&l.uri, instance),
        ContentBlock::Embedded(c) => c.uri = qualify(&c.uri, instance),
        ContentBlock::Text(_) | ContentBlock::Image(_) | ContentBlock::Audio(_) => {}
    }
}

/// What each record of an answer costs beside its strings (its JSON object for the client).
pub const RECORD_OVERHEAD: usize = 64;

impl Reply {
    /// The answer with `instance`'s own URIs (`quarry://self/...`) as listed, and without the
    /// resources it named outside what it owns (its `schemes` beside `quarry://self/`).
    pub fn qualify(mut self, instance: &str, schemes: &[String]) -> Reply {
        match &mut self {
            Reply::Output(out) => {
                out.content.iter_mut().for_each(|b| qualify_block(b, instance));
                // A hit names its resource in its metadata (chapter-rag's `resource`).
                let own = format!("\"{SELF_PREFIX}");
                for h in out.hits.iter_mut().filter(|h| h.metadata.contains(&own)) {
                    h.metadata = h.metadata.replace(&own, &format!("\"quarry://{instance}/"));
                }
            }
            Reply::Resources(list) => {
                own_only(list, |r| &r.uri, instance, schemes);
                list.iter_mut().for_each(|r| r.uri = qualify(&r.uri, instance));
            }
            Reply::Contents(list) => {
                own_only(list, |c| &c.uri, instance, schemes);
                for c in list.iter_mut() {
                    c.uri = qualify(&c.uri, instance);
                    // The text a client reads names the instance's URIs as listed (a chapter cut
                    // short lists its sections).
                    if let Body::Text(t) = &mut c.body {
                        qualify_text(t, instance);
                    }
                }
            }
            Reply::Prompt(p) => p.messages.iter_mut().for_each(|m| qualify_block(&mut m.content, instance)),
            Reply::Completion(_) => {}
        }
        self
    }

    /// What the answer costs against `max_output`: its strings and bytes, and
    /// [`RECORD_OVERHEAD`] per record (an empty hit is not free: it is a record here and a JSON
    /// object for every client).
    pub fn size(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        match self {
            Reply::Output(out) => {
                out.text.len()
                    + opt(&out.extra)
                    + out
                        .hits
                        .iter()
                        .map(|h| RECORD_OVERHEAD + h.content.len() + h.metadata.len() + opt(&h.source))
                        .sum::<usize>()
                    + out.content.iter().map(block_size).sum::<usize>()
            }
            Reply::Resources(list) => list
                .iter()
                .map(|r| {
                    RECORD_OVERHEAD
                        + r.uri.len()
                        + r.name.len()
                        + opt(&r.title)
                        + opt(&r.description)
                        + opt(&r.mime_type)
                })
                .sum(),
            Reply::Contents(list) => list.iter().map(contents_size).sum(),
            Reply::Prompt(p) => opt(&p.description) + p.messages.iter().map(|m| block_size(&m.content)).sum::<usize>(),
            Reply::Completion(c) => c.values.iter().map(|v| v.len() + 4).sum(),
        }
    }
}

fn contents_size(c: &Contents) -> usize {
    // Bytes travel base64-encoded: 4 characters for every 3.
    let body = match &c.body {
        Body::Text(t) => t.len(),
        Body::Blob(b) => b.len().div_ceil(3) * 4,
    };
    RECORD_OVERHEAD + c.uri.len() + c.mime_type.as_ref().map_or(0, String::len) + body
}

/// What one content block costs.
pub fn block_size(b: &ContentBlock) -> usize {
    RECORD_OVERHEAD
        + match b {
            ContentBlock::Text(t) => t.len(),
            ContentBlock::Image(m) | ContentBlock::Audio(m) => m.data.len().div_ceil(3) * 4 + m.mime_type.len(),
            ContentBlock::Link(l) => {
                l.uri.len()
                    + l.name.len()
                    + l.description.as_ref().map_or(0, String::len)
                    + l.mime_type.as_ref().map_or(0, String::len)
            }
            ContentBlock::Embedded(c) => contents_size(c),
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_components_own_uris_are_listed_under_its_instance_and_back() {
        assert_eq!(qualify("quarry://self/chapter/3.1", "manual"), "quarry://manual/chapter/3.1");
        assert_eq!(qualify("test://static-text", "manual"), "test://static-text");
        assert_eq!(localize("quarry://manual/chapter/3.1", "manual"), "quarry://self/chapter/3.1");
        // Another instance's URI, or one that only starts like this instance's name, stays.
        assert_eq!(localize("quarry://manuals/chapter/3.1", "manual"), "quarry://manuals/chapter/3.1");
        assert_eq!(localize("quarry://other/chapter/3.1", "manual"), "quarry://other/chapter/3.1");
    }
}
