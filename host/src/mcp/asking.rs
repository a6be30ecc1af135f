//! Who answers a tool's questions to its client ([`crate::capability::client`]), in each era:
//!
//! - [`SessionAsker`]: a handshake-era session asks its client at once, with a server-to-client
//!   request (`sampling/createMessage`, `elicitation/create`, `roots/list`) on the session, and
//!   waits for the answer within the time the capability allows.
//! - [`RoundAsker`]: a 2026-07-28 client cannot be asked mid-call. The call runs with the
//!   answers it has (those the client sent in `inputResponses`, and those of earlier rounds,
//!   carried in `requestState`); a question with no answer yet is `pending`, and when the call
//!   has run the host answers with an input-required result: the pending questions under their
//!   keys, and a sealed `requestState` holding every answer the call used. The client makes the
//!   call again with its answers, and the tool, run again from the start, finds them.
//!
//! The request state is sealed (HMAC, by rmcp's `RequestStateCodec`) with the tool's name and
//! a hash of its arguments as associated data, and expires after [`STATE_TTL`]: a client cannot
//! change the answers it gave in an earlier round, nor carry them to another call. The key is
//! `QUARRY_REQUEST_STATE_KEY` (at least 32 bytes; the same on every host of a fleet), else
//! random for this process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{
    ClientCapabilities, InputRequest, InputRequests, InputRequiredResult, InputResponses, RequestStateCodec,
    SealOptions, ServerRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::Value;

use crate::capability::client::{Answer, AskError, Asker, Question, RequestKind};

/// How long a sealed request state may be brought back.
pub const STATE_TTL: Duration = Duration::from_secs(3600);
/// The variable a fleet sets to one secret, so that any host opens another's request state.
pub const STATE_KEY_VAR: &str = "QUARRY_REQUEST_STATE_KEY";

/// Whether `caps` declares `kind`.
fn declares(caps: Option<&ClientCapabilities>, kind: RequestKind) -> bool {
    caps.is_some_and(|c| match kind {
        RequestKind::Sampling => c.sampling.is_some(),
        RequestKind::Elicitation => c.elicitation.is_some(),
        RequestKind::Roots => c.roots.is_some(),
    })
}

/// The JSON-RPC request a question is (`{"method", "params"}`).
fn request_json(q: &Question) -> Value {
    serde_json::json!({ "method": q.kind.method(), "params": q.params })
}

/// The capabilities of the kinds a call missed, as a -32021 error names them.
pub fn missing_error(kinds: &[RequestKind]) -> ErrorData {
    let mut caps = serde_json::Map::new();
    for k in kinds {
        caps.insert(k.capability().to_string(), serde_json::json!({}));
    }
    let caps: ClientCapabilities = serde_json::from_value(Value::Object(caps)).unwrap_or_default();
    let mut e = ErrorData::missing_required_client_capability(caps);
    let names: Vec<&str> = kinds.iter().map(|k| k.capability()).collect();
    e.message =
        format!("this call needs the client's {} capability, which it did not declare", names.join(", ")).into();
    e
}

/// The kinds a call asked for that its client did not declare.
#[derive(Default)]
struct Missing(Mutex<Vec<RequestKind>>);

impl Missing {
    fn add(&self, kind: RequestKind) {
        let mut m = self.0.lock();
        if !m.contains(&kind) {
            m.push(kind);
        }
    }

    fn take(&self) -> Vec<RequestKind> {
        std::mem::take(&mut self.0.lock())
    }
}

/// Questions one handshake-era session may leave waiting for its client's answers at once,
/// all its calls together: each holds a call's store until it is answered or its deadline.
pub const MAX_WAITING_PER_SESSION: usize = 4;

/// A handshake-era session's client, asked at once.
pub struct SessionAsker {
    peer: Peer<RoleServer>,
    caps: Option<ClientCapabilities>,
    missing: Missing,
    /// The session's questions waiting now.
    waiting: Arc<AtomicUsize>,
}

/// One question counted as waiting while it lives.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn enter(count: &Arc<AtomicUsize>) -> Option<Waiting> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_WAITING_PER_SESSION).then_some(n + 1))
            .ok()
            .map(|_| Waiting(count.clone()))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SessionAsker {
    /// Asks through `peer`, whose client declared `caps` at `initialize`; `waiting` counts the
    /// session's questions waiting for an answer.
    pub fn new(peer: Peer<RoleServer>, waiting: Arc<AtomicUsize>) -> SessionAsker {
        let caps = peer.peer_info().map(|i| i.capabilities.clone());
        SessionAsker { peer, caps, missing: Missing::default(), waiting }
    }

    /// The kinds the call asked for that the client did not declare.
    pub fn take_missing(&self) -> Vec<RequestKind> {
        self.missing.take()
    }
}

impl Asker for SessionAsker {
    fn declared(&self, kind: RequestKind) -> bool {
        declares(self.caps.as_ref(), kind)
    }

    fn ask<'a>(&'a self, question: Question, wait: Duration) -> Answer<'a> {
        Box::pin(async move {
            let key = question.key.clone();
            let Some(_waiting) = Waiting::enter(&self.waiting) else {
                return Err(AskError::Failed(format!(
                    "question {key}: this session has {MAX_WAITING_PER_SESSION} questions waiting for its answers already; answer them first"
                )));
            };
            let request: ServerRequest = serde_json::from_value(request_json(&question)).map_err(|e| {
                AskError::Failed(format!("question {key}: not a valid {}: {e}", question.kind.method()))
            })?;
            let mut options = PeerRequestOptions::no_options();
            options.timeout = Some(wait);
            let handle = self
                .peer
                .send_request_with_option(request, options)
                .await
                .map_err(|e| AskError::Failed(format!("question {key}: cannot ask the client: {e}")))?;
            let answer = handle
                .await_response()
                .await
                .map_err(|e| AskError::Failed(format!("question {key}: the client did not answer: {e}")))?;
            serde_json::to_value(answer).map_err(|e| AskError::Failed(format!("question {key}: {e}")))
        })
    }

    fn missing(&self, kind: RequestKind) {
        self.missing.add(kind);
    }
}

/// What a sealed request state holds: the answers the call used, by key.
#[derive(serde::Serialize, serde::Deserialize)]
struct Sealed {
    answers: BTreeMap<String, Value>,
}

/// Seals and opens request states, with the process's (or the fleet's) key.
pub struct StateSeal(RequestStateCodec);

impl StateSeal {
    /// The seal of `QUARRY_REQUEST_STATE_KEY`, else of a random key for this process.
    pub fn from_env() -> Result<StateSeal, String> {
        let key = match std::env::var(STATE_KEY_VAR) {
            Ok(k) if !k.is_empty() => k.into_bytes(),
            _ => {
                use std::io::Read as _;
                let mut k = vec![0u8; 32];
                std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut k)).map_err(|e| {
                    format!("no random key for request states (/dev/urandom: {e}); set {STATE_KEY_VAR}")
                })?;
                k
            }
        };
        RequestStateCodec::try_new(key)
            .map(StateSeal)
            .map_err(|e| format!("{STATE_KEY_VAR} is not a usable key ({e}); give at least 32 bytes"))
    }

    /// What a state of `call` is bound to: the tool's name, a hash of its arguments and who
    /// asked (`caller`: the credentials the request came with, empty where it came with none).
    fn bound_to(call: &str, args: &str, caller: &[u8]) -> Vec<u8> {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for part in [call.as_bytes(), args.as_bytes(), caller] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize().to_vec()
    }
}

/// A 2026-07-28 call's answers, and the questions it has no answer to yet.
pub struct RoundAsker {
    caps: Option<ClientCapabilities>,
    /// The answers of earlier rounds, then this round's (which win).
    answers: BTreeMap<String, Value>,
    used: Mutex<BTreeMap<String, Value>>,
    pending: Mutex<BTreeMap<String, Question>>,
    missing: Missing,
    /// What its states are bound to ([`StateSeal::bound_to`]).
    bound: Vec<u8>,
}

impl RoundAsker {
    /// The asker of call `call` (a tool's or a prompt's listed name) with `args` (its arguments'
    /// JSON) for `caller` (the credentials its request came with), from the client's
    /// `responses` and the `state` it brought back: refused (-32602) when the state is not one
    /// this host sealed for this call of this caller.
    pub fn new(
        seal: &StateSeal,
        (call, args, caller): (&str, &str, &[u8]),
        caps: Option<ClientCapabilities>,
        responses: Option<InputResponses>,
        state: Option<&str>,
    ) -> Result<RoundAsker, ErrorData> {
        let bound = StateSeal::bound_to(call, args, caller);
        let mut answers = match state {
            Some(s) => {
                let bytes = seal.0.open_with(s, &bound).map_err(|e| {
                    ErrorData::invalid_params(
                        format!("requestState was not accepted ({e}): make the call again without it, and answer its questions anew"),
                        None,
                    )
                })?;
                serde_json::from_slice::<Sealed>(&bytes)
                    .map_err(|e| ErrorData::invalid_params(format!("requestState cannot be read: {e}"), None))?
                    .answers
            }
            None => BTreeMap::new(),
        };
        answers.extend(responses.unwrap_or_default());
        Ok(RoundAsker {
            caps,
            answers,
            used: Mutex::default(),
            pending: Mutex::default(),
            missing: Missing::default(),
            bound,
        })
    }

    /// The kinds the call asked for that the client did not declare.
    pub fn take_missing(&self) -> Vec<RequestKind> {
        self.missing.take()
    }

    /// The input-required result of a call that asked questions it has no answers to; `None`
    /// when it has every answer it asked for.
    pub fn input_required(&self, seal: &StateSeal) -> Option<InputRequiredResult> {
        let pending = std::mem::take(&mut *self.pending.lock());
        if pending.is_empty() {
            return None;
        }
        let mut requests = InputRequests::new();
        for (key, q) in pending {
            // Checked when asked: the params parse as the request.
            if let Ok(r) = serde_json::from_value::<InputRequest>(request_json(&q)) {
                requests.insert(key, r);
            }
        }
        let sealed = Sealed { answers: self.used.lock().clone() };
        let bytes = serde_json::to_vec(&sealed).unwrap_or_default();
        let options = SealOptions::new().associated_data(&self.bound).ttl(STATE_TTL);
        let state = seal.0.seal_with(&bytes, &options);
        Some(InputRequiredResult::new(Some(requests), Some(state)))
    }
}

impl Asker for RoundAsker {
    fn declared(&self, kind: RequestKind) -> bool {
        declares(self.caps.as_ref(), kind)
    }

    fn ask<'a>(&'a self, question: Question, _wait: Duration) -> Answer<'a> {
        Box::pin(async move {
            if let Err(e) = serde_json::from_value::<InputRequest>(request_json(&question)) {
                return Err(AskError::Failed(format!(
                    "question {}: not a valid {}: {e}",
                    question.key,
                    question.kind.method()
                )));
            }
            // An answer that is not the result the question asks for is no answer: the question
            // is asked again.
            match self.answers.get(&question.key).filter(|a| answers(question.kind, a)) {
                Some(answer) => {
                    self.used.lock().insert(question.key.clone(), answer.clone());
                    Ok(answer.clone())
                }
                None => {
                    self.pending.lock().insert(question.key.clone(), question);
                    Err(AskError::Pending)
                }
            }
        })
    }

    fn missing(&self, kind: RequestKind) {
        self.missing.add(kind);
    }
}

/// Whether `answer` is a result of the request `kind` names.
#[allow(deprecated, reason = "rmcp marks sampling and roots deprecated (SEP-2577); 2026-07-28 clients use them")]
fn answers(kind: RequestKind, answer: &Value) -> bool {
    use rmcp::model::{CreateMessageResult, ElicitResult, ListRootsResult};
    let a = answer.clone();
    match kind {
        RequestKind::Sampling => serde_json::from_value::<CreateMessageResult>(a).is_ok(),
        RequestKind::Elicitation => serde_json::from_value::<ElicitResult>(a).is_ok(),
        RequestKind::Roots => serde_json::from_value::<ListRootsResult>(a).is_ok(),
    }
}

/// Either asker, as the call's [`Asker`].
pub fn shared<A: Asker + 'static>(a: &Arc<A>) -> Arc<dyn Asker> {
    a.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> StateSeal {
        StateSeal(RequestStateCodec::try_new(b"a test key of thirty-two bytes or more!!".to_vec()).unwrap())
    }

    fn question(key: &str) -> Question {
        let params = serde_json::json!({
            "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        });
        Question { key: key.into(), kind: RequestKind::Elicitation, params: params.as_object().unwrap().clone() }
    }

    fn all_caps() -> Option<ClientCapabilities> {
        serde_json::from_value(serde_json::json!({"sampling": {}, "elicitation": {}, "roots": {}})).ok()
    }

    fn accept(name: &str) -> Value {
        serde_json::json!({"action": "accept", "content": {"name": name}})
    }

    #[tokio::test]
    async fn questions_wait_for_the_next_round_which_finds_their_answers_and_earlier_ones() {
        let seal = seal();
        let (call, args) = ("t.ask", r#"{"x":1}"#);
        // Round 1: nothing answered; the question is pending and becomes the result's request.
        let r1 = RoundAsker::new(&seal, (call, args, b""), all_caps(), None, None).unwrap();
        assert!(matches!(r1.ask(question("step1"), Duration::ZERO).await, Err(AskError::Pending)));
        let ir = r1.input_required(&seal).expect("input required");
        assert_eq!(ir.input_requests.as_ref().unwrap().keys().collect::<Vec<_>>(), ["step1"]);
        let state = ir.request_state.clone().unwrap();
        // Round 2: step1 answered in inputResponses; step2 pending; the new state carries step1.
        let answers: InputResponses = [("step1".to_string(), accept("Ada"))].into();
        let r2 = RoundAsker::new(&seal, (call, args, b""), all_caps(), Some(answers), Some(&state)).unwrap();
        assert_eq!(r2.ask(question("step1"), Duration::ZERO).await.unwrap(), accept("Ada"));
        assert!(matches!(r2.ask(question("step2"), Duration::ZERO).await, Err(AskError::Pending)));
        let state2 = r2.input_required(&seal).unwrap().request_state.unwrap();
        // Round 3: only step2 sent; step1 comes from the state.
        let answers: InputResponses = [("step2".to_string(), accept("blue"))].into();
        let r3 = RoundAsker::new(&seal, (call, args, b""), all_caps(), Some(answers), Some(&state2)).unwrap();
        assert_eq!(r3.ask(question("step1"), Duration::ZERO).await.unwrap(), accept("Ada"));
        assert_eq!(r3.ask(question("step2"), Duration::ZERO).await.unwrap(), accept("blue"));
        assert!(r3.input_required(&seal).is_none());
    }

    #[tokio::test]
    async fn a_state_changed_or_brought_to_another_call_is_refused() {
        let seal = seal();
        let r1 = RoundAsker::new(&seal, ("t.ask", "{}", b""), all_caps(), None, None).unwrap();
        let _ = r1.ask(question("q"), Duration::ZERO).await;
        let state = r1.input_required(&seal).unwrap().request_state.unwrap();
        // Sealed for the caller of credentials "Bearer a": another's, or none, is refused too.
        let r1 = RoundAsker::new(&seal, ("t.ask", "{}", b"Bearer a"), all_caps(), None, None).unwrap();
        let _ = r1.ask(question("q"), Duration::ZERO).await;
        let theirs = r1.input_required(&seal).unwrap().request_state.unwrap();
        assert!(RoundAsker::new(&seal, ("t.ask", "{}", b"Bearer a"), all_caps(), None, Some(&theirs)).is_ok());
        for (call, args, caller, state) in [
            ("t.ask", "{}", &b""[..], format!("{state}-TAMPERED")),
            ("t.other", "{}", b"", state.clone()),
            ("t.ask", r#"{"x":2}"#, b"", state.clone()),
            ("t.ask", "{}", b"Bearer b", theirs.clone()),
            ("t.ask", "{}", b"", theirs.clone()),
        ] {
            let e =
                RoundAsker::new(&seal, (call, args, caller), all_caps(), None, Some(&state)).err().expect("refused");
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{call} {args}");
            assert!(e.message.contains("requestState was not accepted"), "{}", e.message);
        }
        let other = StateSeal(RequestStateCodec::try_new(b"another key, thirty-two bytes long!!!!".to_vec()).unwrap());
        assert!(RoundAsker::new(&other, ("t.ask", "{}", b""), all_caps(), None, Some(&state)).is_err());
    }

    #[tokio::test]
    async fn an_answer_of_the_wrong_shape_is_asked_again() {
        let seal = seal();
        let answers: InputResponses = [("q".to_string(), serde_json::json!(42))].into();
        let r = RoundAsker::new(&seal, ("t", "{}", b""), all_caps(), Some(answers), None).unwrap();
        assert!(matches!(r.ask(question("q"), Duration::ZERO).await, Err(AskError::Pending)));
        // And a malformed question is the tool's failure, never sent.
        let bad = Question { key: "b".into(), kind: RequestKind::Sampling, params: serde_json::Map::new() };
        assert!(
            matches!(r.ask(bad, Duration::ZERO).await, Err(AskError::Failed(m)) if m.contains("sampling/createMessage"))
        );
    }

    #[test]
    fn a_missing_capability_is_named_as_the_spec_shapes_it() {
        let e = missing_error(&[RequestKind::Sampling]);
        assert_eq!(e.code, rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
        assert_eq!(e.data.unwrap()["requiredCapabilities"], serde_json::json!({"sampling": {}}));
    }
}
