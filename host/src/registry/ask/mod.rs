//! What a tool instance can be asked, one kind per file: a tool [`call`], its [`resources`], a
//! resource [`read`], a [`prompt`], a [`complete`]ion. Each kind is one type implementing
//! [`Ask`]: the bytes the client sent with it (bounded once, by
//! `ToolInstance::ask`), the guest function it calls on a member of
//! the instance's pool, how its answer names the instance's resources, what the answer costs
//! against `max_output`, and, beside it in the same file, the answer's MCP shape. A new kind is
//! a new file here and a handler method in `mcp/`.
//!
//! The URIs a component gives its own resources ([`SELF_PREFIX`]) are qualified here, in typed
//! fields: a component does not know the name the operator gave its instance.

pub mod call;
pub mod complete;
pub mod content;
pub mod prompt;
pub mod read;
pub mod resources;

use std::future::Future;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::bindings::{ToolError, ToolHost};
use crate::runtime::store::StoreState;

/// One kind of request to a tool instance, and its answer.
pub trait Ask: Clone + Send + Sync + 'static {
    /// What the guest answers, as the host keeps it.
    type Answer: Send + 'static;

    /// What errors call this request, for `instance`: `instance.tool`, or the resource or
    /// prompt it names.
    fn what(&self, instance: &str) -> String;

    /// The bytes the client sends into the guest with it: bounded as a call's arguments are
    /// ([`crate::args::fits`]).
    fn bytes(&self) -> usize;

    /// Runs the kind's guest function on `handle`.
    fn invoke<'a>(
        &'a self,
        bindings: &'a ToolHost,
        store: &'a mut Store<StoreState>,
        handle: ResourceAny,
    ) -> impl Future<Output = wasmtime::Result<Result<Self::Answer, ToolError>>> + Send + 'a;

    /// `answer` with `instance`'s own URIs (`quarry://self/...`) as listed, and without the
    /// resources it named outside what it owns (its `schemes` beside `quarry://self/`).
    fn qualify(answer: &mut Self::Answer, instance: &str, schemes: &[String]);

    /// What `answer` costs against `max_output`: its strings and bytes, and
    /// [`RECORD_OVERHEAD`] per record.
    fn size(answer: &Self::Answer) -> usize;
}

/// How a component names its own resources: `quarry://self/...`, which the host lists as
/// `quarry://INSTANCE/...` (a component does not know the name the operator gave its instance,
/// as it does not know its tools' listed names).
pub const SELF_PREFIX: &str = "quarry://self/";

/// What each record of an answer costs beside its strings (its JSON object for the client): an
/// empty hit is not free, it is a record here and a JSON object for every client.
pub const RECORD_OVERHEAD: usize = 64;

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

/// The length of an optional string.
fn opt(s: &Option<String>) -> usize {
    s.as_ref().map_or(0, String::len)
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
