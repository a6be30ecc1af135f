//! The `client` capability (`quarry:retrieval/client`): a tool asks the MCP client behind the
//! call it runs (sampling, elicitation, roots), and tells listening clients that its lists
//! changed.
//!
//! The capability only gates and bounds: the instance's grant (`client = ["sampling",
//! "elicitation", "roots"]`), whether the client declared the capability, how many questions a
//! call asks ([`MAX_QUESTIONS`]), their size ([`MAX_PARAMS_BYTES`]), the answer's (the
//! instance's `max_output`), and their time (what is left of the call's deadline). Who answers
//! is the call's [`Asker`], which the MCP server gives the call: a handshake-era session asks
//! its client at once; a 2026-07-28 call ends its round with the questions (the MCP server's
//! `asking` module). A call with no asker (the CLI) has no client to ask.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::broadcast;
use wasmtime::component::{HasSelf, Linker};

use super::{Capability, CapabilityStore, GrantContext, SandboxError, StoreContext, state_of};
use crate::bindings::quarry::retrieval::client as wit;
use crate::support::values::KeyError;

pub use wit::{AskError, ListKind, RequestKind};

/// Questions one call may ask.
pub const MAX_QUESTIONS: u32 = 16;
/// Largest params of one question, as JSON.
pub const MAX_PARAMS_BYTES: usize = 64 * 1024;
/// Longest a question waits for its answer, whatever is left of the call's deadline.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// Longest key of a question.
const MAX_KEY_BYTES: usize = 64;

impl RequestKind {
    /// The MCP method that asks it.
    pub fn method(self) -> &'static str {
        match self {
            RequestKind::Sampling => "sampling/createMessage",
            RequestKind::Elicitation => "elicitation/create",
            RequestKind::Roots => "roots/list",
        }
    }

    /// Its name in grants and in MCP's client capabilities.
    pub fn capability(self) -> &'static str {
        match self {
            RequestKind::Sampling => "sampling",
            RequestKind::Elicitation => "elicitation",
            RequestKind::Roots => "roots",
        }
    }

    fn all() -> [RequestKind; 3] {
        [RequestKind::Sampling, RequestKind::Elicitation, RequestKind::Roots]
    }
}

/// One question a tool asked.
#[derive(Debug, Clone)]
pub struct Question {
    /// Its name within the call.
    pub key: String,
    /// What it asks.
    pub kind: RequestKind,
    /// The request's params, checked to be a JSON object of at most [`MAX_PARAMS_BYTES`].
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// A boxed future of an answer.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<serde_json::Value, AskError>> + Send + 'a>>;

/// Who answers the questions of one call: the MCP client behind it.
pub trait Asker: Send + Sync {
    /// Whether the client declared it can answer `kind`.
    fn declared(&self, kind: RequestKind) -> bool;
    /// The answer to `question`, within `wait`.
    fn ask<'a>(&'a self, question: Question, wait: Duration) -> Answer<'a>;
    /// A question the call asked that the client cannot answer (it did not declare `kind`):
    /// a call that then fails needed it.
    fn missing(&self, kind: RequestKind);
}

/// A change of one instance's list, for the clients listening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListChange {
    /// The instance.
    pub instance: String,
    /// Which list.
    pub kind: ListKind,
}

/// The capability's state for one app: the bus list changes go out on.
pub struct AppState {
    changes: broadcast::Sender<ListChange>,
}

impl Default for AppState {
    fn default() -> Self {
        AppState { changes: broadcast::channel(64).0 }
    }
}

impl AppState {
    /// Hears every list change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ListChange> {
        self.changes.subscribe()
    }

    /// Tells the listening clients that list `kind` of `instance` changed.
    pub fn announce(&self, instance: &str, kind: ListKind) {
        let _ = self.changes.send(ListChange { instance: instance.to_string(), kind });
    }
}

/// What an instance may ask its clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientGrant {
    /// The kinds it may ask.
    pub kinds: Vec<String>,
}

impl ClientGrant {
    fn allows(&self, kind: RequestKind) -> bool {
        self.kinds.iter().any(|k| k == kind.capability())
    }
}

/// One store's state: its grant, and the call it runs now.
pub struct State {
    instance: String,
    grant: ClientGrant,
    changes: broadcast::Sender<ListChange>,
    max_answer: u64,
    call: Option<Call>,
    changed: BTreeSet<u8>,
}

/// The call a store runs now, as this capability sees it.
struct Call {
    asker: Arc<dyn Asker>,
    deadline: Instant,
    asked: u32,
    /// Told before the call waits for its client: whoever runs the call gives its pool
    /// member back meanwhile.
    waits: Arc<tokio::sync::Notify>,
}

impl State {
    /// The next guest call runs for `asker`, and must end by `deadline`; `waits` is told each
    /// time it waits for its client.
    pub fn begin(&mut self, asker: Option<Arc<dyn Asker>>, deadline: Instant, waits: Arc<tokio::sync::Notify>) {
        self.call = asker.map(|asker| Call { asker, deadline, asked: 0, waits });
        self.changed.clear();
    }

    /// The call ended: which lists it said changed.
    pub fn end(&mut self) -> Vec<ListKind> {
        self.call = None;
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|k| match k {
                0 => ListKind::Tools,
                1 => ListKind::Resources,
                _ => ListKind::Prompts,
            })
            .collect()
    }

    /// Tells the listening clients that `kinds` of this instance changed.
    pub fn announce(&self, kinds: &[ListKind]) {
        for kind in kinds {
            let _ = self.changes.send(ListChange { instance: self.instance.clone(), kind: *kind });
        }
    }

    async fn ask(&mut self, key: String, kind: RequestKind, params: String) -> Result<String, AskError> {
        let name = kind.capability();
        if !self.grant.allows(kind) {
            // Not a sandbox refusal: a tool asks where it can and goes on without (a route by
            // the client's model falls back to embeddings), so the answer says what to grant.
            return Err(AskError::Unsupported(format!(
                "the instance may not ask its client for {name}: add \"{name}\" to `client` in [tools.{}.grants]",
                self.instance
            )));
        }
        let Some(call) = self.call.as_mut() else {
            return Err(AskError::Unsupported(format!(
                "no MCP client made this call, so there is nobody to ask for {name} (the CLI answers none)"
            )));
        };
        if key.is_empty()
            || key.len() > MAX_KEY_BYTES
            || !key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(AskError::Failed(format!(
                "a question's key must be 1 to {MAX_KEY_BYTES} bytes of [a-z0-9_], not {:?}",
                crate::support::text::cut(&key, 80)
            )));
        }
        if params.len() > MAX_PARAMS_BYTES {
            return Err(AskError::Failed(format!(
                "question {key}: its params are {} bytes, over the host's {MAX_PARAMS_BYTES}",
                params.len()
            )));
        }
        let params = match serde_json::from_str::<serde_json::Value>(&params) {
            Ok(serde_json::Value::Object(o)) => o,
            Ok(_) => return Err(AskError::Failed(format!("question {key}: its params must be a JSON object"))),
            Err(e) => return Err(AskError::Failed(format!("question {key}: its params are not JSON: {e}"))),
        };
        if call.asked >= MAX_QUESTIONS {
            return Err(AskError::Failed(format!(
                "a call may ask at most {MAX_QUESTIONS} questions; question {key} is one more"
            )));
        }
        call.asked += 1;
        if !call.asker.declared(kind) {
            call.asker.missing(kind);
            return Err(AskError::Unsupported(format!("the client did not declare the `{name}` capability")));
        }
        // A second short of the deadline, so that the tool can still answer.
        let left = call.deadline.saturating_duration_since(Instant::now()).saturating_sub(Duration::from_secs(1));
        let wait = left.min(MAX_WAIT);
        call.waits.notify_one();
        let answer = call.asker.ask(Question { key: key.clone(), kind, params }, wait).await?;
        let text = answer.to_string();
        if text.len() as u64 > self.max_answer {
            return Err(AskError::Failed(format!(
                "question {key}: the answer is {} bytes, over the instance's max_output of {}",
                text.len(),
                self.max_answer
            )));
        }
        Ok(text)
    }
}

/// The client capability.
pub struct Client;

impl Capability for Client {
    const GRANT_KEYS: &'static [&'static str] = &["client"];

    type RawGrant = Option<Vec<String>>;
    type Grant = ClientGrant;
    type RawSection = ();
    type RawHost = ();
    type Section = ();
    type AppState = AppState;
    type State = State;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Option<Vec<String>>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = Some(map.next_value::<KindList>()?.0);
        Ok(())
    }

    fn grant(raw: Option<Vec<String>>, _: &(), _: &GrantContext<'_>) -> Result<ClientGrant, KeyError> {
        let kinds = raw.unwrap_or_default();
        let known: Vec<&str> = RequestKind::all().iter().map(|k| k.capability()).collect();
        for k in &kinds {
            if !known.contains(&k.as_str()) {
                return Err(KeyError::new(
                    "client",
                    format!("{k:?} is not something a tool may ask its client; expected some of {}", known.join(", ")),
                ));
            }
        }
        Ok(ClientGrant { kinds })
    }

    fn state(grant: &ClientGrant, app: &AppState, cx: &mut StoreContext<'_>) -> Result<State, SandboxError> {
        Ok(State {
            instance: cx.instance.to_string(),
            grant: grant.clone(),
            changes: app.changes.clone(),
            max_answer: cx.max_output,
            call: None,
            changed: BTreeSet::new(),
        })
    }

    fn link<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        wit::add_to_linker::<T, HasSelf<State>>(l, state_of::<Client, T>)
    }
}

/// `client = ["sampling", ...]`, read with a message that says what is expected.
struct KindList(Vec<String>);

impl<'de> Deserialize<'de> for KindList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(KindList).map_err(|_| {
            serde::de::Error::custom(
                "`client` is a list of what the tool may ask, e.g. [\"sampling\", \"elicitation\"]",
            )
        })
    }
}

impl wit::Host for State {
    async fn ask(
        &mut self,
        key: String,
        kind: RequestKind,
        params: String,
    ) -> wasmtime::Result<Result<String, AskError>> {
        Ok(State::ask(self, key, kind, params).await)
    }

    async fn changed(&mut self, what: ListKind) -> wasmtime::Result<()> {
        let code = match what {
            ListKind::Tools => 0,
            ListKind::Resources => 1,
            ListKind::Prompts => 2,
        };
        // Once per call and list: the clients hear it when the call has ended ([`State::end`],
        // then [`State::announce`]).
        self.changed.insert(code);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_names_only_what_a_tool_may_ask() {
        let cx = GrantContext {
            instance: "t",
            base: std::path::Path::new("."),
            deadline: Duration::from_secs(1),
            private_dir: None,
        };
        let g = Client::grant(Some(vec!["sampling".into(), "roots".into()]), &(), &cx).unwrap();
        assert!(g.allows(RequestKind::Sampling) && g.allows(RequestKind::Roots) && !g.allows(RequestKind::Elicitation));
        let e = Client::grant(Some(vec!["shell".into()]), &(), &cx).unwrap_err();
        assert_eq!(e.key, "client");
        assert!(e.message.contains("\"shell\"") && e.message.contains("sampling, elicitation, roots"), "{}", e.message);
        assert_eq!(Client::grant(None, &(), &cx).unwrap(), ClientGrant::default());
    }
}
