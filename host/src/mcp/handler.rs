//! The MCP handler: tools, resources, prompts and completions over the host's registry.
//!
//! - Every tool of every loaded instance is one MCP tool named
//!   [`mcp_name`]; the list is sorted by name, so it is the same on every call.
//! - A result's first content block is the whole text the tool produced (CrewAI's
//!   adapter reads only that), then the blocks the tool added (images, resource links);
//!   `structuredContent` mirrors the hits and extra data.
//! - A tool that runs and fails answers `isError: true` with the tool's own words;
//!   a request that cannot be routed (an unknown tool) is a JSON-RPC error.
//! - Resources, templates and prompts are the instances' ([`crate::registry`]'s catalog);
//!   list and read results carry caching hints ([`LIST_TTL_MS`], private).
//! - A tool or prompt that asks its client (sampling, elicitation, roots) is answered through
//!   [`crate::mcp::asking`]: at once on a handshake-era session, by an input-required result for
//!   a 2026-07-28 client.

use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, CompleteRequestParams,
    CompleteResult, ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, InputResponses,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, Reference, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::args::Args;
use crate::bindings::ToolOutput;
use crate::capability::client::{Asker, RequestKind};
use crate::mcp::asking::{RoundAsker, SessionAsker, StateSeal};
use crate::mcp::budget::Budget;
use crate::mcp::call_log::{self, CallLog};
use crate::mcp::listen::{CallListener, LogLevel};
use crate::mcp::notify::Peers;
use crate::mcp::subscriptions::Subscriptions;
use crate::registry::ask;
use crate::registry::errors::CallError;
use crate::registry::instance::Caller;
use crate::registry::{ReadError, Registry, Target, ToolEntry};

/// How long a client may keep a list (tools, prompts, resources, templates) or a resource it
/// read: a minute. A change within it reaches listening clients as a `list_changed`.
pub const LIST_TTL_MS: u64 = 60_000;

/// Lines for failed calls: a client can send failing calls as fast as it likes.
static FAILURES_LOG: crate::support::log_budget::LogBudget =
    crate::support::log_budget::LogBudget::new(20, std::time::Duration::from_millis(100));

/// Serves one host's tools. Cheap to clone: the HTTP transport makes one per session
/// ([`QuarryMcp::for_session`]).
#[derive(Clone)]
pub struct QuarryMcp {
    registry: Arc<Registry>,
    peers: Arc<Peers>,
    /// Calls of this session waiting or running, and how many it may have.
    calls: Arc<std::sync::atomic::AtomicUsize>,
    max_calls: usize,
    /// The call log (`--call-log`), if any, and this session's number in it.
    log: Option<Arc<CallLog>>,
    session: u64,
    /// What the server holds of requests, all clients together: a call's arguments are
    /// charged while it waits and runs.
    budget: Budget,
    /// This session's key in the tool pools' fair queues.
    client: Arc<str>,
    /// The level this session asked for with `logging/setLevel`.
    log_level: LogLevel,
    /// Seals the request state of 2026-07-28 calls that ask their client; why not, if the
    /// configured key is unusable.
    seal: Arc<Result<StateSeal, String>>,
    /// The resources this session subscribed to (handshake era).
    subscribed: Arc<parking_lot::Mutex<Subscriptions>>,
    /// What every session's subscriptions may hold together.
    subscription_budget: Budget,
    /// This session's questions waiting for its client's answers.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

/// Session keys for the fair queues: unique in this process.
static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn session_key() -> Arc<str> {
    format!("mcp-{}", SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)).into()
}

/// Cancelled when the connection a request came on closes before its answer was sent. The
/// HTTP transport puts it in the request's extensions; rmcp hands the request's
/// `http::request::Parts` to the handler.
#[derive(Clone, Debug)]
pub struct ClientGone(pub tokio_util::sync::CancellationToken);

/// Counts one call of a session while it lives.
struct CallSlot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for CallSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl QuarryMcp {
    /// A handler for `host`; handshake-era sessions register in `peers` to hear of swaps.
    pub fn new(registry: Arc<Registry>, peers: Arc<Peers>) -> Self {
        let limits = crate::config::ServeConfig::default();
        let subscription_budget = super::subscriptions::host_budget();
        QuarryMcp {
            registry,
            peers,
            calls: Arc::default(),
            max_calls: limits.max_queued_calls,
            log: None,
            session: 0,
            budget: Budget::new(limits.max_request_bytes),
            client: session_key(),
            log_level: LogLevel::default(),
            seal: Arc::new(StateSeal::from_env().inspect_err(|e| {
                tracing::error!(target: "quarry::mcp", "tools cannot ask 2026-07-28 clients: {e}");
            })),
            subscribed: Arc::new(parking_lot::Mutex::new(Subscriptions::new(subscription_budget.clone()))),
            subscription_budget,
            waiting: Arc::default(),
        }
    }

    /// The same, charging calls' arguments to `budget` (shared with the transport).
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The same, writing every call to `log`.
    pub fn with_call_log(mut self, log: Option<Arc<CallLog>>) -> Self {
        self.session = log.as_ref().map_or(0, |l| l.session());
        self.log = log;
        self
    }

    /// The same, allowing each session `max` calls waiting or running.
    pub fn with_queue_cap(mut self, max: usize) -> Self {
        self.max_calls = max;
        self
    }

    /// A handler for a new session: the same host, its own count of calls.
    pub fn for_session(&self) -> Self {
        let session = self.log.as_ref().map_or(0, |l| l.session());
        QuarryMcp {
            calls: Arc::default(),
            session,
            client: session_key(),
            log_level: LogLevel::default(),
            subscribed: Arc::new(parking_lot::Mutex::new(Subscriptions::new(self.subscription_budget.clone()))),
            waiting: Arc::default(),
            ..self.clone()
        }
    }

    /// The asker of a request that runs guest code (`call`: its listed name, `args`: its
    /// arguments' JSON), for this request's era; an error for a 2026-07-28 request state that
    /// this host did not seal for this call.
    fn asker(
        &self,
        context: &RequestContext<RoleServer>,
        call: &str,
        args: &str,
        responses: Option<InputResponses>,
        state: Option<&str>,
    ) -> Result<CallAsker, ErrorData> {
        let modern = context.protocol_version().is_some_and(|v| v.as_str() >= "2026-07-28");
        if !modern {
            return Ok(CallAsker::Session(Arc::new(SessionAsker::new(context.peer.clone(), self.waiting.clone()))));
        }
        let seal = self.seal.as_ref().as_ref().map_err(|e| ErrorData::internal_error(e.clone(), None))?;
        let caps: Option<ClientCapabilities> = context.client_capabilities();
        // A state carries the caller's answers: it is bound to the credentials the request came
        // with (over HTTP, its Authorization header), so another caller cannot bring it back.
        let caller = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|p| p.headers.get(hyper::http::header::AUTHORIZATION))
            .map_or(&[][..], |v| v.as_bytes());
        RoundAsker::new(seal, (call, args, caller), caps, responses, state).map(|a| CallAsker::Round(Arc::new(a)))
    }

    /// Who answers the questions of a request that runs guest code (see [`QuarryMcp::asker`]),
    /// once the instances are listed. Made before the request waits: it reads what it needs of
    /// the request (its era, the client's capabilities, its credentials).
    async fn asking(&self, context: &RequestContext<RoleServer>, asked: Asked<'_>) -> Result<CallAsker, ErrorData> {
        self.registry.loaded().await;
        self.asker(context, asked.name, asked.args, asked.responses, asked.state)
    }

    /// Runs `run` for this session's caller, `asker` answering its questions; then `asker`
    /// says whether the client is to answer an input round instead, and what the request asked
    /// that the client did not declare.
    async fn run_asking<T>(&self, asker: &CallAsker, run: impl AsyncFnOnce(Caller<'_>) -> T) -> T {
        let shared = asker.shared();
        run(Caller { asker: Some(&shared), ..self.caller() }).await
    }

    /// This session as a caller that asks its client nothing and hears nothing.
    fn caller(&self) -> Caller<'_> {
        Caller { client: &self.client, listener: None, asker: None }
    }

    /// The MCP tools, sorted by name.
    pub fn tools(&self) -> Vec<Tool> {
        self.registry.tools().iter().map(to_mcp_tool).collect()
    }
}

/// The MCP name of a tool: `instance.tool`, as the CLI writes it. Unique because instance names
/// are unique and tool names are unique within an instance; stable because both come from the
/// config and the component, not from load order.
pub fn mcp_name(entry: &ToolEntry) -> String {
    entry.qualified.clone()
}

fn to_mcp_tool(entry: &ToolEntry) -> Tool {
    Tool::new(mcp_name(entry), entry.spec.description.clone(), entry.schema.clone())
}

/// A request that may ask its client, as it came: its name (a tool's, a prompt's, a URI) and
/// arguments' JSON, which a sealed request state is bound to, and the client's answers so far.
struct Asked<'a> {
    name: &'a str,
    args: &'a str,
    responses: Option<InputResponses>,
    state: Option<&'a str>,
}

/// Who answers the questions of one request.
enum CallAsker {
    /// A handshake-era session's client.
    Session(Arc<SessionAsker>),
    /// A 2026-07-28 client, across rounds.
    Round(Arc<RoundAsker>),
}

impl CallAsker {
    fn shared(&self) -> Arc<dyn Asker> {
        match self {
            CallAsker::Session(a) => a.clone(),
            CallAsker::Round(a) => a.clone(),
        }
    }

    /// The capabilities the request asked for that the client did not declare.
    fn missing(&self) -> Vec<RequestKind> {
        match self {
            CallAsker::Session(a) => a.take_missing(),
            CallAsker::Round(a) => a.take_missing(),
        }
    }

    /// A failed request beside a call, as a JSON-RPC error: -32021 naming what it asked for that
    /// the client did not declare, else [`request_failed`].
    fn failed(&self, e: &CallError) -> ErrorData {
        let missing = self.missing();
        if missing.is_empty() { request_failed(e) } else { crate::mcp::asking::missing_error(&missing) }
    }

    /// The input-required result, when a 2026-07-28 request asked what it has no answer to.
    fn input_required(&self, seal: &Result<StateSeal, String>) -> Option<rmcp::model::InputRequiredResult> {
        match (self, seal) {
            (CallAsker::Round(a), Ok(seal)) => a.input_required(seal),
            _ => None,
        }
    }
}

/// A tool-level failure: the tool's own message as the text (CrewAI's wording where the tool
/// matches a CrewAI tool), the error kind beside it for programs.
fn tool_error(kind: &str, message: String) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
    r.structured_content = Some(serde_json::json!({ "error": { "kind": kind, "message": message } }));
    r
}

/// How a call ended, typed until it is answered and logged.
enum Answer {
    /// Refused before it was queued: the session's or the server's limit.
    Busy(String),
    /// The registry's outcome.
    Call(Result<ToolOutput, CallError>),
}

/// A failed call as its client is told.
enum Failure<'a> {
    /// An unknown tool: the one protocol error.
    UnknownTool(ErrorData),
    /// A tool-level error: its kind, and the message (the tool's own words for a tool's error).
    Tool(&'static str, std::borrow::Cow<'a, str>),
}

fn failure(e: &CallError) -> Failure<'_> {
    let kind = match e {
        CallError::UnknownTool { name, hint } => {
            return Failure::UnknownTool(ErrorData::invalid_params(format!("Unknown tool: {name:?}; {hint}"), None));
        }
        CallError::Tool { error, .. } => {
            let (kind, message) = error.parts();
            return Failure::Tool(kind, message.into());
        }
        CallError::BadArgs { .. } | CallError::ArgsTooLarge { .. } => "invalid-args",
        CallError::OutputTooLarge { .. } => "output-too-large",
        CallError::Fault { .. } | CallError::Restart { .. } => "fault",
        CallError::Cancelled { .. } => "cancelled",
        CallError::NotReady { .. } | CallError::Unprepared { .. } => "not-ready",
    };
    Failure::Tool(kind, e.to_string().into())
}

/// A failed request beside a tool call (a read, a prompt, a listing): a JSON-RPC error, since
/// those results have no error flag; invalid params when the component says the request was.
fn request_failed(e: &CallError) -> ErrorData {
    let message = crate::support::text::cut(&e.to_string(), 4096);
    match e {
        CallError::Tool {
            error: crate::bindings::ToolError::InvalidArgs(_) | crate::bindings::ToolError::NotFound(_),
            ..
        } => ErrorData::invalid_params(message, None),
        _ => ErrorData::internal_error(message, None),
    }
}

/// A call's arguments as the JSON text they wait and run as (what the guest receives); a tree
/// of them costs many times their size, and is dropped here. Refused ones (over 1 MiB) were
/// taken out where the message was read, their size and head put in the request's extensions
/// (see `scan`): over stdio the request's own, over HTTP the HTTP request's, which rmcp passes on.
fn arguments_of(
    arguments: Option<rmcp::model::JsonObject>,
    context: &RequestContext<RoleServer>,
) -> Result<Args, (usize, String)> {
    let parts = context.extensions.get::<hyper::http::request::Parts>();
    let refused = context
        .extensions
        .get::<crate::mcp::scan::RefusedArguments>()
        .or_else(|| parts.and_then(|p| p.extensions.get::<crate::mcp::scan::RefusedArguments>()));
    match refused {
        Some(r) => Err((r.bytes, r.head.clone())),
        None => Ok(Args::from_object(&arguments.unwrap_or_default())),
    }
}

/// Maps a call's outcome to MCP. Only an unknown tool is a protocol error.
fn to_response(outcome: Result<ToolOutput, CallError>) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(out) => Ok(ask::call::result(out)),
        Err(e) => match failure(&e) {
            Failure::UnknownTool(e) => Err(e),
            Failure::Tool(kind, message) => Ok(tool_error(kind, message.into_owned())),
        },
    }
}

impl QuarryMcp {
    /// Runs an admitted call of tool `asked.name` with `args`: makes its asker, drops the rest of
    /// the request's `_meta` (a tree the client sized, not kept across the wait), and runs it
    /// with this session's progress listener. A `notifications/cancelled` for this request
    /// cancels `context.ct`, and a closed connection the HTTP request's `ClientGone`: a call
    /// still waiting for its instance is dropped from the queue; one already running finishes
    /// (its answer is then ignored), since stopping it would cost the instance a restart.
    async fn run_call(
        &self,
        context: &mut RequestContext<RoleServer>,
        args: &Args,
        asked: Asked<'_>,
    ) -> Result<(Result<ToolOutput, CallError>, CallAsker), ErrorData> {
        let name = asked.name;
        let token = crate::mcp::listen::progress_token(&context.meta);
        let asker = self.asking(context, asked).await?;
        context.meta = Default::default();
        let parts = context.extensions.get::<hyper::http::request::Parts>();
        let gone = parts.and_then(|p| p.extensions.get::<ClientGone>()).map(|g| g.0.clone()).unwrap_or_default();
        let cancelled = async {
            tokio::select! {
                () = context.ct.cancelled() => {}
                () = gone.cancelled() => {}
            }
        };
        let outcome = self
            .run_asking(&asker, async |caller| {
                let listener = CallListener::new(context.peer.clone(), token, &self.log_level);
                let listening = listener.as_ref().map(|l| l as &dyn crate::registry::instance::Listener);
                let outcome = self
                    .registry
                    .call_cancellable(name, args, Caller { listener: listening, ..caller }, cancelled)
                    .await;
                if let Some(l) = listener {
                    l.finish().await;
                }
                outcome
            })
            .await;
        if let Err(e) = &outcome
            && let Some(held) = FAILURES_LOG.take()
        {
            let e = crate::support::text::cut(&e.to_string(), 1024);
            let tool = crate::support::text::cut(name, 256);
            tracing::info!(target: "quarry::mcp", %tool, "call failed: {e}{}", crate::support::log_budget::held_note(held));
        }
        Ok((outcome, asker))
    }

    /// A call's answer as MCP's: an input round when a 2026-07-28 call asked what its client has
    /// not answered yet; -32021 for a failed call that asked for a capability the client did not
    /// declare; else the result (only an unknown tool is a protocol error).
    fn call_response(&self, answer: Answer, asker: Option<&CallAsker>) -> Result<CallToolResponse, ErrorData> {
        if let Some(round) = asker.and_then(|a| a.input_required(&self.seal)) {
            return Ok(CallToolResponse::InputRequired(round));
        }
        let missing = asker.map(CallAsker::missing).unwrap_or_default();
        if matches!(answer, Answer::Call(Err(_))) && !missing.is_empty() {
            return Err(crate::mcp::asking::missing_error(&missing));
        }
        let response = match answer {
            Answer::Busy(message) => Ok(tool_error("busy", message)),
            Answer::Call(outcome) => to_response(outcome),
        };
        response.map(Into::into)
    }

    /// Writes a call to the call log (`--call-log`), if there is one.
    fn log_call(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        arguments: &str,
        answer: &Answer,
        duration: std::time::Duration,
    ) {
        let Some(log) = &self.log else { return };
        let client = context.peer.peer_info().map(|i| format!("{} {}", i.client_info.name, i.client_info.version));
        let failed = match answer {
            Answer::Call(Err(e)) => Some(failure(e)),
            _ => None,
        };
        let (outcome, error) = match (answer, &failed) {
            (Answer::Busy(message), _) => (call_log::Outcome::Error("busy"), Some(message.as_str())),
            (_, Some(Failure::Tool(kind, message))) => (call_log::Outcome::Error(kind), Some(message.as_ref())),
            (_, Some(Failure::UnknownTool(e))) => (call_log::Outcome::Rejected, Some(e.message.as_ref())),
            (_, None) => (call_log::Outcome::Ok, None),
        };
        log.record(&call_log::Entry { session: self.session, client, tool, arguments, outcome, error, duration });
    }
}

impl ServerHandler for QuarryMcp {
    #[allow(deprecated, reason = "rmcp marks MCP logging deprecated (SEP-2577); 2025-11-25 clients use it")]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_completions()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("quarry", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Retrieval tools, each sandboxed in WebAssembly. Tool names are `instance.tool`; \
                 results carry the full answer as text and the hits as structured content.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The tools are known once every instance has opened (cheap); their preparation (an
        // index build) goes on in the background, and calls wait for it.
        self.registry.loaded().await;
        let mut r = ListToolsResult::with_all_items(self.tools());
        (r.ttl_ms, r.cache_scope) = (Some(LIST_TTL_MS), Some(CacheScope::Private));
        Ok(r)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.registry.loaded().await;
        let prompts = self.registry.prompts().iter().map(|p| ask::prompt::listed(&p.listed, &p.spec)).collect();
        let mut r = ListPromptsResult::with_all_items(prompts);
        (r.ttl_ms, r.cache_scope) = (Some(LIST_TTL_MS), Some(CacheScope::Private));
        Ok(r)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let GetPromptRequestParams { name, arguments, input_responses, request_state, .. } = request;
        let args = serde_json::Value::Object(arguments.unwrap_or_default()).to_string();
        let asked = Asked { name: &name, args: &args, responses: input_responses, state: request_state.as_deref() };
        let asker = self.asking(&context, asked).await?;
        let outcome = self
            .run_asking(&asker, async |caller| {
                self.registry.get_prompt(&name, args.clone(), caller, context.ct.cancelled()).await
            })
            .await;
        if let Some(round) = asker.input_required(&self.seal) {
            return Ok(GetPromptResponse::InputRequired(round));
        }
        match outcome {
            None => Err(ErrorData::invalid_params(
                format!("no prompt named {:?}; prompts/list lists them", crate::support::text::cut(&name, 256)),
                None,
            )),
            Some(Ok(prompt)) => Ok(GetPromptResponse::Complete(ask::prompt::result(prompt))),
            Some(Err(e)) => Err(asker.failed(&e)),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.registry.loaded().await;
        let listed = self.registry.resources(self.caller()).await.map_err(|e| request_failed(&e))?;
        let mut r = ListResourcesResult::with_all_items(listed.into_iter().map(ask::resources::resource).collect());
        (r.ttl_ms, r.cache_scope) = (Some(LIST_TTL_MS), Some(CacheScope::Private));
        Ok(r)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.registry.loaded().await;
        let templates = self.registry.templates().into_iter().map(|(_, t)| ask::resources::template(t)).collect();
        let mut r = ListResourceTemplatesResult::with_all_items(templates);
        (r.ttl_ms, r.cache_scope) = (Some(LIST_TTL_MS), Some(CacheScope::Private));
        Ok(r)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let ReadResourceRequestParams { uri, input_responses, request_state, .. } = request;
        let asked = Asked { name: &uri, args: "", responses: input_responses, state: request_state.as_deref() };
        let asker = self.asking(&context, asked).await?;
        let outcome = self
            .run_asking(&asker, async |caller| self.registry.read(&uri, caller, context.ct.cancelled()).await)
            .await;
        if let Some(round) = asker.input_required(&self.seal) {
            return Ok(ReadResourceResponse::InputRequired(round));
        }
        match outcome {
            Ok(contents) => {
                let mut r = ask::read::result(contents);
                (r.ttl_ms, r.cache_scope) = (Some(LIST_TTL_MS), Some(CacheScope::Private));
                Ok(ReadResourceResponse::Complete(r))
            }
            // As SEP-2164 asks: invalid params, naming the URI.
            Err(ReadError::NotFound(_)) => Err(ErrorData::invalid_params(
                "Resource not found: resources/list and resources/templates/list say what there is",
                Some(serde_json::json!({ "uri": uri })),
            )),
            Err(ReadError::Call(e)) => Err(asker.failed(&e)),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Bounded per session and for the host (see `subscriptions`).
        self.subscribed.lock().add(&request.uri).map_err(|m| ErrorData::invalid_params(m, None))
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed.lock().remove(&request.uri);
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.registry.loaded().await;
        let CompleteRequestParams { r#ref, argument, context, .. } = request;
        let chosen = context.and_then(|c| c.arguments).unwrap_or_default();
        let chosen = serde_json::to_string(&chosen).unwrap_or_else(|_| "{}".into());
        let target = match &r#ref {
            Reference::Prompt(p) => Target::Prompt(&p.name),
            Reference::Resource(r) => Target::Template(&r.uri),
            _ => return Err(ErrorData::invalid_params("completion refers to a prompt or a resource template", None)),
        };
        match self.registry.complete(target, argument.name, argument.value, chosen, self.caller()).await {
            // Nothing to complete: no values, as the spec allows.
            None => Ok(CompleteResult::new(rmcp::model::CompletionInfo::default())),
            Some(Ok(c)) => Ok(CompleteResult::new(ask::complete::result(c))),
            Some(Err(e)) => Err(request_failed(&e)),
        }
    }

    #[allow(deprecated, reason = "rmcp marks MCP logging deprecated (SEP-2577); 2025-11-25 clients use it")]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        Ok(())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.registry.tool(name).as_ref().map(to_mcp_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let start = std::time::Instant::now();
        let CallToolRequestParams { name, arguments, input_responses, request_state, .. } = request;
        let args = arguments_of(arguments, &context);
        // What the call log shows of them: the head of refused ones, all of the others.
        let logged = match &args {
            Ok(a) => a.as_str(),
            Err((_, head)) => head.as_str(),
        };
        let waiting = self.calls.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _slot = CallSlot(self.calls.clone());
        let held = self.budget.take(logged.len());
        let (answer, asker) = match &args {
            _ if waiting >= self.max_calls => (
                Answer::Busy(format!(
                    "this session already has {waiting} tool calls waiting or running, its maximum ([serve] max_queued_calls); wait for their answers"
                )),
                None,
            ),
            Err((size, _)) => {
                let tool = crate::support::text::cut(&name, 256);
                let too_large = CallError::ArgsTooLarge { tool, size: *size, limit: crate::args::MAX_ARGS_BYTES };
                (Answer::Call(Err(too_large)), None)
            }
            Ok(_) if held.is_none() => (
                Answer::Busy(format!(
                    "the server holds its maximum of {} bytes of requests from all clients ([serve] max_request_bytes); try again when earlier calls have answered",
                    self.budget.total()
                )),
                None,
            ),
            Ok(args) => {
                let asked =
                    Asked { name: &name, args: logged, responses: input_responses, state: request_state.as_deref() };
                let (outcome, asker) = self.run_call(&mut context, args, asked).await?;
                (Answer::Call(outcome), Some(asker))
            }
        };
        drop(held);
        self.log_call(&context, &name, logged, &answer, start.elapsed());
        self.call_response(answer, asker.as_ref())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.peers.add(context.peer);
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    /// A 2026-07-28 client's `subscriptions/listen`: the `list_changed` of each change it
    /// asked to hear of, until it cancels (the sink drops what its filter leaves out).
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        use crate::capability::client::ListKind;
        let mut changes = crate::mcp::notify::Changes::of(&self.registry);
        loop {
            let kinds = tokio::select! {
                () = context.cancelled() => return Ok(()),
                kinds = changes.next() => match kinds {
                    Some(k) => k,
                    None => return Ok(()),
                },
            };
            let sink = context.sink();
            let accepted = context.accepted();
            for kind in kinds {
                let sent = match kind {
                    ListKind::Tools if accepted.tools_list_changed == Some(true) => {
                        sink.notify_tool_list_changed().await
                    }
                    ListKind::Prompts if accepted.prompts_list_changed == Some(true) => {
                        sink.notify_prompt_list_changed().await
                    }
                    ListKind::Resources if accepted.resources_list_changed == Some(true) => {
                        sink.notify_resource_list_changed().await
                    }
                    _ => Ok(()),
                };
                if sent.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::quarry::retrieval::types::{LineRange, Location, Route, RoutedChapter};
    use crate::bindings::{Hit, ToolError};

    #[test]
    fn output_is_one_text_block_mirrored_in_structured_content() {
        let out = ToolOutput {
            text: "[1] Install > Linux\nuse apt".into(),
            hits: vec![Hit {
                content: "use apt".into(),
                score: Some(0.5),
                source: Some("/m.md".into()),
                location: Some(Location {
                    path: vec!["Install".into(), "Linux".into()],
                    lines: Some(LineRange { first: 3, last: 9 }),
                    chapter: Some("1.1".into()),
                }),
                resource: Some("quarry://m/chapter/1.1".into()),
                metadata: r#"{"chunk_index":0}"#.into(),
            }],
            route: Some(Route {
                chapters: vec![RoutedChapter {
                    chapter: "1".into(),
                    path: vec!["Install".into()],
                    confidence: Some(0.9),
                }],
                ranking: vec!["Install".into(), "Usage".into()],
            }),
            extra: Some(r#"{"route":{"reason":"r"}}"#.into()),
            content: Vec::new(),
        };
        let r = to_response(Ok(out)).unwrap();
        assert_eq!(r.is_error, Some(false));
        assert_eq!(r.content.len(), 1);
        assert_eq!(r.content[0].as_text().map(|t| t.text.as_str()), Some("[1] Install > Linux\nuse apt"));
        assert_eq!(
            r.structured_content,
            Some(serde_json::json!({
                "hits": [{
                    "content": "use apt", "score": 0.5, "source": "/m.md",
                    "location": {"path": ["Install", "Linux"], "lines": [3, 9], "chapter": "1.1"},
                    "resource": "quarry://m/chapter/1.1",
                    "metadata": {"chunk_index": 0},
                }],
                "route": {"chapters": [{"chapter": "1", "path": ["Install"], "confidence": 0.9}], "ranking": ["Install", "Usage"]},
                "extra": {"route": {"reason": "r"}},
            }))
        );
    }

    #[test]
    fn tool_errors_keep_the_tools_words_and_unknown_tools_are_protocol_errors() {
        let e = CallError::Tool {
            tool: "cb.search".into(),
            error: ToolError::Upstream("Search failed with error: timeout".into()),
        };
        let r = to_response(Err(e)).unwrap();
        assert_eq!(r.is_error, Some(true));
        assert_eq!(r.content[0].as_text().map(|t| t.text.as_str()), Some("Search failed with error: timeout"));
        assert_eq!(r.structured_content.unwrap()["error"]["kind"], "upstream");

        let e = CallError::UnknownTool { name: "x.y".into(), hint: "run `quarry list`".into() };
        let err = to_response(Err(e)).unwrap_err();
        assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(err.message.contains("Unknown tool"), "{}", err.message);
    }
}
