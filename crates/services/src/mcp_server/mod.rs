//! The harness as an MCP server ("code mode"), as `harness mcp` serves
//! it. A client sees six tools: `run_script` (whose description carries
//! the TypeScript declarations of every tool a script may call),
//! `check_script`, `search_tools`, `describe_tools`, and `open_session`
//! and `close_session` (harness sessions, whose ids only the connection
//! that opened them may use).
//!
//! The tools are routed by rmcp's typed router: each tool's arguments are
//! a struct whose JSON Schema schemars generates, and a call's arguments
//! arrive deserialised (malformed ones answer a tool error that names the
//! field).
//!
//! # Examples
//! ```no_run
//! # async fn serve() -> Result<(), harness_services::mcp_server::ServeError> {
//! use harness_services::mcp_server::CodeMode;
//! let harness = harness::Harness::builder().build().unwrap();
//! CodeMode::new(harness).serve_stdio().await
//! # }
//! ```

// MCP logging (`logging/setLevel`, `notifications/message`) is what
// today's clients and the official conformance suite use; rmcp marks it
// deprecated after SEP-2577.
#![allow(deprecated)]

use harness::{ConsoleLevel, Harness, RunObserver, ScriptLanguage};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, JsonObject,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router, ErrorData, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::future::Future;
use std::sync::{Arc, Mutex};

mod bridge;
mod catalogue;
mod follow;
mod replay;

use bridge::{AskClient, Forward};
use follow::Shared;
use rmcp::model::LoggingLevel;

/// Above this many bytes of declarations, `run_script`'s description lists
/// names and summaries only, and points at `search_tools`/`describe_tools`.
pub const DEFAULT_MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// The tools in the order `tools/list` gives them: the one a model uses
/// first comes first.
const TOOLS: [&str; 6] = [
    "run_script",
    "check_script",
    "search_tools",
    "describe_tools",
    "open_session",
    "close_session",
];

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The stdio client went away before it finished `initialize`.
    #[error("the client did not initialize: {0}")]
    Initialize(String),
}

/// The server: one harness, shared by every client and run. Cloning it is
/// cheap (the HTTP transport gives each session a clone).
#[derive(Clone)]
pub struct CodeMode {
    /// The harness (replaced when the upstream servers' tools change) and
    /// the client sessions told of that.
    shared: Arc<Shared>,
    router: ToolRouter<CodeMode>,
    /// Ask the client (MCP elicitation) when a call needs approval and the
    /// client can be asked; off when the host answers approvals itself.
    ask_client: bool,
    /// The client's `logging/setLevel` (info until it sets one); each
    /// client session has its own.
    log_level: Arc<Mutex<LoggingLevel>>,
    /// The resources this client session subscribed to.
    subscriptions: follow::Subscriptions,
    /// The harness sessions this client connection opened: the only ids
    /// its runs may name.
    sessions: Arc<ClientSessions>,
    /// On the wasi engine, a run waiting on the client's approval is put
    /// away meanwhile, sealed with a key of this process's own (its
    /// continuations never leave it).
    durable: Option<Arc<harness::durable::DurableRuns>>,
}

/// The harness sessions one client connection opened; closed when the
/// connection's server goes (the client went away).
#[derive(Default)]
struct ClientSessions {
    open: Mutex<Vec<harness::Session>>,
}

impl ClientSessions {
    fn add(&self, session: harness::Session) {
        if let Ok(mut open) = self.open.lock() {
            open.push(session);
        }
    }

    /// This connection's session `id`, or SessionClosedError's reason:
    /// an id another connection opened is unknown here.
    fn find(&self, id: &str) -> Result<harness::Session, harness::SessionError> {
        let open = self.open.lock().map_err(|_| {
            harness::SessionError::Closed("the session table is unusable".to_owned())
        })?;
        match open.iter().find(|s| s.id() == id) {
            Some(s) => Ok(s.clone()),
            None => Err(harness::SessionError::Closed(
                "no such session: it was closed, expired or never opened by this client".to_owned(),
            )),
        }
    }

    fn remove(&self, id: &str) -> Option<harness::Session> {
        let mut open = self.open.lock().ok()?;
        let at = open.iter().position(|s| s.id() == id)?;
        Some(open.swap_remove(at))
    }
}

impl Drop for ClientSessions {
    fn drop(&mut self) {
        if let Ok(open) = self.open.get_mut() {
            for s in open.drain(..) {
                s.close();
            }
        }
    }
}

impl std::fmt::Debug for CodeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeMode")
            .field("tools", &TOOLS)
            .field("ask_client", &self.ask_client)
            .finish_non_exhaustive()
    }
}

/// `run_script` and `check_script`: a script.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct ScriptArgs {
    /// The script.
    code: String,
    /// The script's language (default: JavaScript if it parses, else TypeScript).
    #[serde(default)]
    language: Option<Language>,
    /// A session `open_session` gave this client: the script runs there
    /// and sees what earlier runs of the session declared at their top level.
    #[serde(default)]
    session: Option<String>,
}

/// `close_session`: the session to close.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct SessionArgs {
    /// The id `open_session` gave.
    session: String,
}

/// `open_session`: nothing.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct NoArgs {}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
enum Language {
    #[serde(rename = "js", alias = "javascript")]
    Js,
    #[serde(rename = "ts", alias = "typescript")]
    Ts,
}

impl From<Language> for ScriptLanguage {
    fn from(l: Language) -> ScriptLanguage {
        match l {
            Language::Js => ScriptLanguage::JavaScript,
            Language::Ts => ScriptLanguage::TypeScript,
        }
    }
}

/// `search_tools`: words to rank the tools by.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct SearchArgs {
    /// Words to look for.
    query: String,
    /// At most this many (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

/// `describe_tools`: the tools to declare.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct DescribeArgs {
    #[schemars(length(min = 1))]
    names: Vec<String>,
}

/// The input schema MCP clients are shown for `T`: a plain object schema,
/// no meta-schema or definitions, an optional field described by its
/// value's schema (it may be left out, not sent as null), no numeric
/// formats.
fn input_schema<T: JsonSchema>() -> Arc<JsonObject> {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.meta_schema = None;
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let Value::Object(mut root) = schema.to_value() else {
        return Arc::new(JsonObject::new());
    };
    root.remove("title");
    root.remove("description");
    let required: Vec<Value> = root
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(Value::Object(props)) = root.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if !required.contains(&Value::String(name.clone())) {
                not_nullable(prop);
            }
            strip_formats(prop);
        }
    }
    Arc::new(root)
}

/// An optional field's schema without the `null` schemars adds for `Option`.
fn not_nullable(prop: &mut Value) {
    let Value::Object(p) = prop else { return };
    if p.get("default") == Some(&Value::Null) {
        p.remove("default");
    }
    if let Some(Value::Array(types)) = p.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [one] = kept.as_slice() {
            p.insert("type".into(), one.clone());
        }
    }
    if let Some(Value::Array(list)) = p.get("enum") {
        let kept: Vec<Value> = list.iter().filter(|v| !v.is_null()).cloned().collect();
        p.insert("enum".into(), Value::Array(kept));
    }
    if let Some(Value::Array(any)) = p.remove("anyOf") {
        let mut kept: Vec<Value> = any.into_iter().filter(|s| s["type"] != "null").collect();
        match (kept.len(), kept.pop()) {
            (1, Some(Value::Object(inner))) => {
                for (k, v) in inner {
                    p.entry(k).or_insert(v);
                }
            }
            (_, Some(last)) => {
                kept.push(last);
                p.insert("anyOf".into(), Value::Array(kept));
            }
            _ => {}
        }
    }
}

/// Drops `format` (`uint32` and the like: not JSON Schema vocabulary
/// every client knows).
fn strip_formats(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("format");
            m.values_mut().for_each(strip_formats);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_formats),
        _ => {}
    }
}

/// What a script is and how it calls tools, as `run_script`'s description
/// and the guide both say it.
const SCRIPT_CONTRACT: &str = "The script is the body of an async function: use `await`, and \
     `return` the result (it must be JSON-serialisable). Call tools as `await tools.NAME(args)` \
     (upstream MCP tools as `tools.mcp.SERVER.TOOL(args)`); several calls can run at once with \
     Promise.all.";

/// `run_script`'s description: the contract of a script, its limits, and
/// the declarations of the tools (or, past `max_bytes`, their names).
pub(super) fn run_description(harness: &Harness, max_bytes: usize) -> String {
    let names = harness.tool_names();
    let declarations = harness.typescript();
    let limits = harness.limits();
    let api = if declarations.len() <= max_bytes {
        format!("The globals a script can use:\n\n```ts\n{declarations}```")
    } else {
        let registry = harness.registry();
        let list: Vec<String> = names
            .iter()
            .map(|n| format!("- tools.{n}: {}", summary(registry, n)))
            .collect();
        format!(
            "The tools ({} of them; their TypeScript declarations are too long for this \
             description: call `describe_tools` with the names you need, or `search_tools`):\n{}",
            names.len(),
            list.join("\n")
        )
    };
    format!(
        "Runs a JavaScript or TypeScript script in a sandbox ({engine}) and returns its report \
         (value, console, tool calls, error). {SCRIPT_CONTRACT} Limits: {timeout} ms, {calls} \
         tool calls, {mem} MiB. No network, no filesystem except through tools.\n\n{api}",
        engine = harness.engine().name,
        timeout = limits.timeout_ms,
        calls = limits.max_tool_calls,
        mem = limits.memory_bytes / (1024 * 1024),
    )
}

/// The first line of a tool's description.
fn summary(registry: &harness::ToolRegistry, name: &str) -> String {
    registry
        .get(name)
        .map(|t| t.description().lines().next().unwrap_or("").to_owned())
        .unwrap_or_default()
}

impl CodeMode {
    /// A server over `harness`. Approvals go to the client (MCP
    /// elicitation) when it can answer them; declarations up to
    /// [`DEFAULT_MAX_DESCRIPTION_BYTES`] go into `run_script`'s description.
    pub fn new(harness: Harness) -> CodeMode {
        CodeMode {
            router: Self::tool_router(),
            shared: Arc::new(Shared::new(harness, DEFAULT_MAX_DESCRIPTION_BYTES)),
            ask_client: true,
            log_level: Arc::new(Mutex::new(LoggingLevel::Info)),
            subscriptions: Default::default(),
            sessions: Arc::default(),
            durable: harness::durable::ContinuationKeys::generate()
                .ok()
                .map(|k| Arc::new(harness::durable::DurableRuns::new(k))),
        }
    }

    /// Above `max_bytes` of declarations, `run_script`'s description lists
    /// the tools' names and summaries only.
    pub fn with_max_description_bytes(mut self, max_bytes: usize) -> CodeMode {
        self.shared = Arc::new(Shared::new(self.harness(), max_bytes));
        self
    }

    /// The harness as it is now: the one given to [`CodeMode::new`], or
    /// the same relisted after the upstream servers' tools changed.
    fn harness(&self) -> Harness {
        self.shared.harness()
    }

    /// Whether a call that needs approval is put to the client (when it
    /// supports elicitation); off leaves approvals to the harness's own
    /// bridge (e.g. the CLI's `--approve`).
    pub fn with_ask_client(mut self, ask: bool) -> CodeMode {
        self.ask_client = ask;
        self
    }

    /// The server for one more client session: the same harness and
    /// tools, a log level of its own.
    fn for_session(&self) -> CodeMode {
        CodeMode {
            log_level: Arc::new(Mutex::new(LoggingLevel::Info)),
            subscriptions: Default::default(),
            sessions: Arc::default(),
            ..self.clone()
        }
    }

    /// What `tools/list` answers.
    pub fn tools(&self) -> Vec<Tool> {
        TOOLS.iter().filter_map(|n| self.tool(n)).collect()
    }

    /// One of the tools, `run_script` described with the declarations
    /// of the tools as they are now.
    fn tool(&self, name: &str) -> Option<Tool> {
        let mut tool = self.router.get(name).cloned()?;
        if name == "run_script" {
            tool.description = Some(self.shared.description().to_string().into());
        }
        Some(tool)
    }

    /// Serves one client on stdin/stdout until it disconnects.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        use rmcp::ServiceExt;
        let _follow = self.shared.follow();
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ServeError::Initialize(e.to_string()))?;
        let _ = running.waiting().await;
        Ok(())
    }

    /// Serves streamable HTTP on `listener` (the MCP endpoint is `/mcp`;
    /// any path is accepted) until `shutdown` completes. Each client
    /// session gets its own handler; all share the harness, and runs are
    /// isolated as always. A client whose stream drops resumes it with
    /// `Last-Event-ID`, also after its run ended (for a minute).
    pub async fn serve_http(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        use hyper_util::server::conn::auto::Builder;
        use hyper_util::service::TowerToHyperService;
        use rmcp::transport::streamable_http_server::StreamableHttpService;
        let _follow = self.shared.follow();
        let service = TowerToHyperService::new(StreamableHttpService::new(
            move || Ok(self.for_session()),
            replay::Replaying::default().into(),
            Default::default(),
        ));
        tokio::pin!(shutdown);
        loop {
            let io = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                accept = listener.accept() => match accept {
                    Ok((stream, _)) => TokioIo::new(stream),
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                }
            };
            let service = service.clone();
            tokio::spawn(async move {
                let _ = Builder::new(TokioExecutor::default())
                    .serve_connection(io, service)
                    .await;
            });
        }
    }
}

#[tool_router]
impl CodeMode {
    /// Runs a script (the description is set from the harness in `new`).
    #[tool(
        description = "Runs a JavaScript or TypeScript script in a sandbox and returns its report.",
        input_schema = input_schema::<ScriptArgs>()
    )]
    async fn run_script(
        &self,
        Parameters(args): Parameters<ScriptArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let harness = self.harness();
        let session = match args.session.as_deref().map(|id| self.sessions.find(id)) {
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                let report =
                    harness::ExecutionReport::failed(&harness.engine().name, e.to_script_error());
                return Ok(report_result(&report));
            }
            None => None,
        };
        let mut request = harness.request(&args.code);
        if let Some(language) = args.language {
            request.language = language.into();
        }
        // A client's notifications/cancelled cancels the run.
        request.cancel = ctx.ct.clone();
        // Approvals go to the client where it can answer them.
        let can_elicit = ctx
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.elicitation.is_some());
        // On the wasi engine the run is put away while the client
        // answers, and holds no engine thread meanwhile.
        let suspends = self.ask_client
            && can_elicit
            && session.is_none()
            && harness.engine().name == "wasi"
            && !harness.suspends();
        let durable = self.durable.as_ref().filter(|_| suspends);
        if let Some(d) = durable {
            request.tools.approvals = Arc::new(SuspendForClient);
            request.durable = Some(Arc::new(d.core()));
        } else if self.ask_client && can_elicit {
            request.tools.approvals = Arc::new(AskClient(ctx.peer.clone()));
        }
        // Progress (when the client gave a progress token) and console
        // lines (log messages, at the client's level), sent while the
        // script runs.
        let (forward, task) = Forward::start(
            ctx.peer.clone(),
            ctx.meta.get_progress_token(),
            self.log_level.clone(),
        );
        request.observer = Some(harness::Observer::new(forward.clone()));
        let again = request.clone();
        let mut report = match &session {
            Some(s) => s.execute(request).await,
            None => harness.execute(request).await,
        };
        if let Some(d) = durable {
            let ask = AskClient(ctx.peer.clone());
            while let Some(s) = report.suspension.take() {
                report = match answered(&ask, d, &s, &report.script_id).await {
                    Ok(resume) => {
                        let mut next = again.clone();
                        next.resume = Some(Arc::new(resume));
                        harness.execute(next).await
                    }
                    Err(why) => harness::ExecutionReport::failed(
                        &harness.engine().name,
                        harness::ScriptError::internal(why),
                    ),
                };
            }
        }
        forward.finish();
        let _ = task.await;
        Ok(report_result(&report))
    }

    /// Opens a session for this client.
    #[tool(
        description = "Opens a session: scripts run with its id (`run_script` with `session`) keep what their top level declared (const, let, var, function, class) for the session's later scripts. Returns {session}. Ids work only for this client connection.",
        input_schema = input_schema::<NoArgs>()
    )]
    fn open_session(&self, Parameters(_): Parameters<NoArgs>) -> Result<CallToolResult, ErrorData> {
        match self.harness().open_session() {
            Ok(s) => {
                let id = s.id().to_owned();
                self.sessions.add(s);
                Ok(CallToolResult::structured(json!({ "session": id })))
            }
            Err(e) => Err(ErrorData::invalid_request(e.to_string(), None)),
        }
    }

    /// Closes one of this client's sessions.
    #[tool(
        description = "Closes a session this client opened; its state is gone. Returns {closed}: whether it was open.",
        input_schema = input_schema::<SessionArgs>()
    )]
    fn close_session(
        &self,
        Parameters(args): Parameters<SessionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let closed = self
            .sessions
            .remove(&args.session)
            .is_some_and(|s| s.close());
        Ok(CallToolResult::structured(json!({ "closed": closed })))
    }

    /// Syntax (JavaScript, or TypeScript with types stripped) and banned
    /// identifiers, as the engine would see them; nothing runs.
    #[tool(
        description = "Checks a script without running it: syntax and banned identifiers, with line and column.",
        input_schema = input_schema::<ScriptArgs>()
    )]
    async fn check_script(
        &self,
        Parameters(args): Parameters<ScriptArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let checked = match args.session.as_deref().map(|id| self.sessions.find(id)) {
            Some(Ok(s)) => s.check(&args.code).await,
            Some(Err(e)) => Err(e.to_script_error()),
            None => self.harness().check(&args.code).await,
        };
        Ok(match checked {
            Ok(()) => diagnostics(Vec::new()),
            Err(e) => diagnostics(vec![diagnostic(&e)]),
        })
    }

    #[tool(
        description = "Ranks the tools a script may call by name and description; returns names, scores and summaries.",
        input_schema = input_schema::<SearchArgs>()
    )]
    fn search_tools(
        &self,
        Parameters(args): Parameters<SearchArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let limit = args.limit.unwrap_or(10) as usize;
        let harness = self.harness();
        let registry = harness.registry();
        let found: Vec<Value> =
            harness::declarations::search(registry, &harness.tool_names(), &args.query)
                .into_iter()
                .take(limit)
                .map(|(name, score)| {
                    let summary = summary(registry, &name);
                    json!({"name": name, "score": score, "summary": summary})
                })
                .collect();
        Ok(CallToolResult::structured(json!({ "tools": found })))
    }

    #[tool(
        description = "The TypeScript declarations of the named tools (names as in `tools.NAME`, upstream MCP tools as `mcp.SERVER.TOOL`).",
        input_schema = input_schema::<DescribeArgs>()
    )]
    fn describe_tools(
        &self,
        Parameters(args): Parameters<DescribeArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let harness = self.harness();
        let known = harness.tool_names();
        if let Some(missing) = args.names.iter().find(|n| !known.contains(n)) {
            return Err(ErrorData::invalid_params(
                format!("no tool `{missing}`; search_tools lists them"),
                None,
            ));
        }
        let d = harness::declarations::declarations(harness.registry(), &args.names);
        let mut result = CallToolResult::success(vec![ContentBlock::text(d.clone())]);
        result.structured_content = Some(json!({ "declarations": d }));
        Ok(result)
    }
}

/// Answers every approval a run waits on at once: the run is put away
/// while the client is asked.
struct SuspendForClient;

#[async_trait::async_trait]
impl harness::ApprovalBridge for SuspendForClient {
    async fn request(&self, _: &harness::ApprovalRequest) -> harness::ApprovalDecision {
        harness::ApprovalDecision::Suspend
    }
}

/// Asks the client about each call a suspended run waits on, and opens
/// its continuation with those answers.
async fn answered(
    ask: &AskClient,
    durable: &harness::durable::DurableRuns,
    s: &harness::Suspension,
    script_id: &str,
) -> Result<harness::core::durable::Resume, String> {
    use harness::durable::Answer;
    use harness::ApprovalBridge;
    let mut answers = std::collections::BTreeMap::new();
    for call in &s.pending {
        let answer = match call.kind {
            harness::PendingKind::Approval => {
                let mut req = harness::ApprovalRequest::new(&call.tool, call.args.clone());
                req.call_id = call.call_id;
                req.script_id = script_id.to_owned();
                req.line = call.line;
                match ask.request(&req).await {
                    harness::ApprovalDecision::Approved => Answer::Approve,
                    harness::ApprovalDecision::Denied { reason } => Answer::Deny { reason },
                    _ => Answer::Deny {
                        reason: Some("denied by the MCP client".into()),
                    },
                }
            }
            _ => Answer::Error {
                message: "a deferred call has nobody to answer it over MCP".into(),
            },
        };
        answers.insert(call.call_id, answer);
    }
    let sealed = harness::durable::continuation_bytes(s.continuation.as_bytes());
    let (_, plain) = durable.keys.open(&sealed)?;
    harness::core::durable::Resume::new(&plain, answers)
}

/// A run's report as `run_script` answers it: the report, a summary
/// line, `isError` unless it succeeded (or suspended: not an error).
fn report_result(report: &harness::ExecutionReport) -> CallToolResult {
    let summary = match (&report.value, &report.error) {
        _ if report.suspension.is_some() => "suspended: waiting on answers from outside".into(),
        (_, Some(e)) => format!("error: {}: {}", e.code.as_str(), e.message),
        (Some(v), None) => {
            let mut s = v.to_string();
            if s.len() > 2000 {
                let mut end = 2000;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                s.push('…');
            }
            format!("ok: {s}")
        }
        (None, None) => "ok (no value)".into(),
    };
    let summary = format!(
        "{summary}\n({} tool call(s), {} console line(s), {:.1} ms)",
        report.tool_calls.len(),
        report.console.len(),
        report.metrics.duration_ms
    );
    let value = serde_json::to_value(report).unwrap_or(Value::Null);
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(summary)];
    result.is_error = Some(!report.ok && report.suspension.is_none());
    result
}

fn diagnostic(e: &harness::ScriptError) -> Value {
    let mut d = json!({"code": e.code.as_str(), "message": e.message});
    if let Some(l) = &e.location {
        d["line"] = json!(l.line);
        d["column"] = json!(l.column);
    }
    d
}

fn diagnostics(list: Vec<Value>) -> CallToolResult {
    let ok = list.is_empty();
    let text = if ok {
        "no problems found".to_owned()
    } else {
        list.iter()
            .map(|d| {
                format!(
                    "{}{}: {}",
                    d["code"].as_str().unwrap_or(""),
                    d.get("line")
                        .map(|l| format!(" at line {l}, column {}", d["column"]))
                        .unwrap_or_default(),
                    d["message"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut r = CallToolResult::structured(json!({"ok": ok, "diagnostics": list}));
    r.content = vec![ContentBlock::text(text)];
    r
}

impl ServerHandler for CodeMode {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_prompts()
            .enable_completions()
            .build();
        let mut info = ServerConfig::new(capabilities);
        info.server_info = Implementation::new("harness", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Write one script that calls the tools (see run_script's description) instead of \
             calling tools one by one; return the result."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !TOOLS.contains(&request.name.as_ref()) {
            return Err(ErrorData::invalid_params(
                format!("no tool `{}`: {}", request.name, TOOLS.join(", ")),
                None,
            ));
        }
        self.router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool(name)
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.shared.joined(context.peer, self.subscriptions.clone());
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.add(request.uri)
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(follow::accepted(requested))
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.shared.listen(context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Ok(mut level) = self.log_level.lock() {
            *level = request.level;
        }
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(catalogue::resources()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            catalogue::resource_templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        catalogue::read(&self.harness(), &request.uri).map(Into::into)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(catalogue::prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        catalogue::prompt(&self.harness(), &request).map(Into::into)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        catalogue::complete(&self.harness(), &request)
    }
}
