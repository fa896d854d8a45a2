//! Run JavaScript written by a language model inside a sandboxed engine,
//! let it call host tools, and get back one structured report.
//!
//! Engines are chosen by Cargo feature (`quickjs`, on by default) and at run
//! time with [`EngineKind`]. The types a user needs (limits, reports,
//! errors, tools, approvals) are re-exported at this crate's root from
//! `harness_core`; engine authors use `harness_core::engine`.
//!
//! # Examples
//! ```
//! use harness::{Harness, FnTool, ToolRegistry};
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let mut tools = ToolRegistry::new();
//! tools.register(FnTool::new("add", "Adds two numbers",
//!     json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
//!            "required": ["a", "b"]}),
//!     |args, _ctx| async move {
//!         Ok(json!(args["a"].as_f64().unwrap() + args["b"].as_f64().unwrap()))
//!     })).unwrap();
//!
//! let harness = Harness::builder().tools(tools).build().unwrap();
//! let report = harness.run("const s = await tools.add({a: 1, b: 2}); return s * 10").await;
//! assert!(report.ok);
//! assert_eq!(report.value, Some(json!(30)));
//! # });
//! ```

#![warn(missing_docs, unreachable_pub)]

pub mod audit;
#[cfg(feature = "builtin-tools")]
pub use harness_tools::builtin;
#[cfg(feature = "builtin-tools")]
pub use harness_tools::coding;
pub mod config;
pub mod declarations;
pub mod durable;
pub mod embed;
mod engine;
pub mod session;
#[cfg(feature = "http")]
pub use harness_tools::http;
#[cfg(feature = "mcp")]
pub use harness_tools::mcp;
#[cfg(feature = "otlp")]
mod traceparent;
pub use harness_tools::typed;

pub use engine::{engines, serve_worker_if_requested, EngineKind, UnknownEngine};
/// The engine-neutral core crate. Everything a user of the harness needs is
/// re-exported at this crate's root; engine authors use
/// `harness_core::engine` (documented as less stable). Kept so that
/// `harness::core::…` paths and [`main!`] keep working.
#[doc(hidden)]
pub use harness_core as core;
pub use harness_core::process::ProcessOptions;
pub use harness_core::{
    Allowlist, ApprovalBridge, ApprovalDecision, ApprovalOutcome, ApprovalRecord, ApprovalRequest,
    AutoApprove, AutoDeny, CallError, CallStatus, CancellationToken, Capabilities, ConsoleEntry,
    ConsoleLevel, DetachedTask, DetachedTasks, EngineInfo, ErrorCode, ErrorMetadata,
    ExecutionReport, ExecutionRequest, FnTool, Isolation, Layer, Limits, Location, Metrics, Mode,
    NeverAnswer, Observer, Phase, ProgressEvent, ProgressKind, Realm, RegistryError, RunObserver,
    ScriptContext, ScriptError, ScriptLanguage, ScriptRuntimeAdapter, TaskLimits, TaskStatus, Tool,
    ToolCallRecord, ToolContext, ToolError, ToolRegistry, ToolSet, Tunable, Tuned, Tuning, Warning,
};
pub use harness_core::{DeferredTool, PendingCall, PendingKind, Suspension};
/// Model responses to conversation items: detect, prepare, orchestrate, serialise.
pub use harness_respond as respond;
/// The WASI engine's crate: the workspace sandbox ([`wasi::Sandbox`]) and
/// the guest's loading options.
#[cfg(feature = "wasi")]
pub use harness_wasi as wasi;
pub use session::{Session, SessionError, SessionLimits};

use std::fmt;
use std::sync::Arc;

/// Why a [`Harness`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error(transparent)]
    /// The engine is unknown, or known but not built in.
    UnknownEngine(#[from] UnknownEngine),
    /// The worker binary for the process boundary could not be found.
    #[error("cannot locate the worker binary: {0}")]
    Worker(std::io::Error),
    /// The configuration does not fit the tools (a `[tools.NAME]` for a
    /// tool that does not exist).
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A harness tool (`tools.http`) could not join the registry.
    #[error("cannot add the harness's own tool: {0}")]
    Registry(RegistryError),
}

/// A configured harness: one engine, one tool set, limits, mode and context.
/// Cheap to clone; runs may happen concurrently.
#[derive(Clone)]
pub struct Harness {
    adapter: Arc<dyn ScriptRuntimeAdapter>,
    tools: ToolSet,
    limits: Limits,
    mode: Mode,
    context: ScriptContext,
    language: ScriptLanguage,
    tasks: Option<Arc<DetachedTasks>>,
    retry_internal: bool,
    /// Asked to keep warm and awake, and the engine does.
    awake: bool,
    /// The engine anticipates runs at a steady pace.
    anticipates: bool,
    audit: Option<Arc<audit::AuditLog>>,
    traceparent: Option<String>,
    sessions: Arc<session::Sessions>,
    /// Set by [`HarnessBuilder::suspend`]: runs may suspend.
    durable: Option<(
        Arc<durable::DurableRuns>,
        Arc<harness_core::durable::Durable>,
    )>,
    #[cfg(feature = "mcp")]
    mcp: Option<Arc<McpPart>>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("engine", &self.adapter.info().name)
            .field("tools", &self.tools)
            .field("limits", &self.limits)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Harness {
    /// Starts a builder with the default engine, no tools, default limits.
    pub fn builder() -> HarnessBuilder {
        HarnessBuilder::default()
    }

    /// The engine in use.
    pub fn engine(&self) -> harness_core::EngineInfo {
        self.adapter.info()
    }

    /// The limits runs get.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same harness (engine and its workers, tools, mode, context)
    /// with other limits for its runs. The isolation stays the one the
    /// harness was built with.
    pub fn with_limits(&self, limits: Limits) -> Harness {
        let isolation = self.limits.isolation;
        Harness {
            limits: limits.with_isolation(isolation),
            ..self.clone()
        }
    }

    /// Runs a script (the body of an async function) and reports.
    ///
    /// # Examples
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let h = harness::Harness::builder().build().unwrap();
    /// let r = h.run("return [1, 2, 3].map(x => x * 2)").await;
    /// assert_eq!(r.value, Some(serde_json::json!([2, 4, 6])));
    /// let r = h.run("null.x").await;
    /// assert_eq!(r.error.unwrap().code, harness::ErrorCode::ScriptRuntimeError);
    /// # });
    /// ```
    pub async fn run(&self, source: &str) -> ExecutionReport {
        self.run_with_cancel(source, CancellationToken::new()).await
    }

    /// Like [`Harness::run`], stopping with ScriptCancelledError when
    /// `cancel` fires.
    pub async fn run_with_cancel(
        &self,
        source: &str,
        cancel: CancellationToken,
    ) -> ExecutionReport {
        let mut request = self.request(source);
        request.cancel = cancel;
        self.execute(request).await
    }

    /// The request [`Harness::run`] would make for `source`, to adjust
    /// (an observer, a cancellation token, the language) before
    /// [`Harness::execute`].
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let h = harness::Harness::builder().build().unwrap();
    /// let mut req = h.request("return 1");
    /// req.language = harness::ScriptLanguage::JavaScript;
    /// assert_eq!(h.execute(req).await.value, Some(serde_json::json!(1)));
    /// # });
    /// ```
    pub fn request(&self, source: &str) -> ExecutionRequest {
        let mut r = ExecutionRequest::new(source);
        r.language = self.language;
        r.limits = self.limits.clone();
        r.context = self.context.clone();
        r.mode = self.mode;
        r.tools = self.tools.clone();
        r.tasks = self.tasks.clone();
        r.trace = Some(tracing::Span::current());
        r.traceparent = self.traceparent.clone();
        r.durable = self.durable.as_ref().map(|(_, core)| core.clone());
        r
    }

    /// Resumes a suspended run (docs/user-guide.md "Durable runs"):
    /// `continuation` is the report's `suspension.continuation` (its
    /// base64 text or the bytes it decodes to), `answers` one per call it
    /// waits on, by call id. The run goes on in a fresh instance, here or
    /// in another process or machine with the same guest build, and this
    /// is its next report: completed, failed, or suspended again. A
    /// continuation that is tampered with, sealed with a key this harness
    /// lacks, made by another guest build, for other tools or limits,
    /// expired, or resumed before, fails with ContinuationInvalidError and
    /// nothing runs.
    pub async fn resume(
        &self,
        continuation: impl AsRef<[u8]>,
        answers: std::collections::BTreeMap<u64, durable::Answer>,
    ) -> ExecutionReport {
        self.resume_with(self.request(""), continuation, answers)
            .await
    }

    /// [`Harness::resume`] under `request`'s limits, tools, context and
    /// observer (the ones the suspended run had: a continuation made for
    /// other tools or limits is refused); its source is not run.
    pub async fn resume_with(
        &self,
        request: ExecutionRequest,
        continuation: impl AsRef<[u8]>,
        answers: std::collections::BTreeMap<u64, durable::Answer>,
    ) -> ExecutionReport {
        self.resume_answering(request, continuation, move |_| Ok(answers))
            .await
    }

    /// [`Harness::resume_with`], the answers made by `answer` from the
    /// calls the continuation waits on (it is opened once); its error is
    /// the report's ContinuationInvalidError, and the continuation stays
    /// unused.
    pub async fn resume_answering(
        &self,
        mut request: ExecutionRequest,
        continuation: impl AsRef<[u8]>,
        answer: impl FnOnce(
            &[PendingCall],
        ) -> Result<std::collections::BTreeMap<u64, durable::Answer>, String>,
    ) -> ExecutionReport {
        let engine = self.adapter.info().name;
        let invalid = |why: String| {
            ExecutionReport::failed(
                &engine,
                ScriptError::new(ErrorCode::ContinuationInvalidError, Phase::Parsing, why)
                    .with_name("ContinuationInvalidError"),
            )
        };
        let Some((runs, _)) = &self.durable else {
            return invalid(
                "this harness does not suspend runs (HarnessBuilder::suspend, --suspend-to), so it has no keys to open a continuation"
                    .to_owned(),
            );
        };
        let sealed = durable::continuation_bytes(continuation.as_ref());
        let (id, plain) = match runs.keys.open(&sealed) {
            Ok(opened) => opened,
            Err(why) => return invalid(why),
        };
        let answers = match durable::pending_calls(&plain).and_then(|p| answer(&p)) {
            Ok(a) => a,
            Err(why) => return invalid(why),
        };
        let resume = match harness_core::durable::Resume::new(&plain, answers) {
            Ok(r) if r.id() == id => r,
            Ok(_) => return invalid("the continuation's id does not match its seal".to_owned()),
            Err(why) => return invalid(why),
        };
        match runs.ledger.claim(&id, resume.expires_at_ms()) {
            Ok(true) => {}
            Ok(false) => return invalid(format!("continuation {id} was resumed already")),
            Err(why) => return invalid(format!("cannot record that {id} resumes: {why}")),
        }
        request.source = String::new();
        request.durable = self.durable.as_ref().map(|(_, core)| core.clone());
        let in_session = resume.in_session();
        request.resume = Some(Arc::new(resume));
        let report = if in_session {
            // A session's run goes on as the first run of a new session.
            match self.sessions.open() {
                Ok(id) => {
                    let mut r = self.sessions.execute(&id, request).await;
                    r.session = Some(id);
                    r
                }
                Err(e) => ExecutionReport::failed(&engine, e.to_script_error()),
            }
        } else {
            self.adapter.execute(request).await
        };
        if let Some(audit) = &self.audit {
            audit.record("", report_provider(&self.context), &report);
        }
        report
    }

    /// The calls a suspended run waits on, read from its continuation
    /// (which this harness's keys must open), to ask about before
    /// [`Harness::resume`].
    pub fn pending(&self, continuation: impl AsRef<[u8]>) -> Result<Vec<PendingCall>, ScriptError> {
        let invalid = |why: String| {
            ScriptError::new(ErrorCode::ContinuationInvalidError, Phase::Parsing, why)
                .with_name("ContinuationInvalidError")
        };
        let Some((runs, _)) = &self.durable else {
            return Err(invalid("this harness does not suspend runs".to_owned()));
        };
        let sealed = durable::continuation_bytes(continuation.as_ref());
        let (_, plain) = runs.keys.open(&sealed).map_err(invalid)?;
        durable::pending_calls(&plain).map_err(invalid)
    }

    /// Whether runs of this harness may suspend ([`HarnessBuilder::suspend`]).
    pub fn suspends(&self) -> bool {
        self.durable.is_some()
    }

    /// Runs a request you built (its engine is this harness's), retrying
    /// once on HarnessInternalError when that is safe (see
    /// [`HarnessBuilder::retry_internal_errors`]).
    pub async fn execute(&self, mut request: ExecutionRequest) -> ExecutionReport {
        // A caller's W3C traceparent: the run's spans join its trace.
        if let Some(tp) = request.traceparent.as_deref() {
            #[cfg(feature = "otlp")]
            {
                request.trace = Some(traceparent::span_from_traceparent(tp));
            }
            #[cfg(not(feature = "otlp"))]
            {
                request.trace = Some(tracing::info_span!("harness_run", traceparent = tp));
            }
        }
        let Some(audit) = &self.audit else {
            return self.execute_with_retry(request).await;
        };
        let source = request.source.clone();
        let provider = request.context.provider.clone();
        let report = self.execute_with_retry(request).await;
        audit.record(&source, provider.as_deref(), &report);
        report
    }

    async fn execute_with_retry(&self, request: ExecutionRequest) -> ExecutionReport {
        if !self.retry_internal {
            return self.adapter.execute(request).await;
        }
        let again = request.clone();
        let report = self.adapter.execute(request).await;
        if !safe_to_retry(&report) || again.cancel.is_cancelled() {
            return report;
        }
        tracing::warn!(
            script_id = %report.script_id,
            "the run ended in HarnessInternalError with no effects; running it once more on a fresh engine"
        );
        let mut second = self.adapter.execute(again).await;
        second.retried = true;
        second
    }

    /// Opens a session: runs in it keep what their top level declared,
    /// for the session's later runs only ([`session`]). Its id is drawn
    /// here at random; opening one more than `[sessions] max` closes the
    /// least recently used. `Unsupported` where the engine (or its
    /// isolation) has no sessions.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let h = harness::Harness::builder().build().unwrap();
    /// let s = h.open_session().unwrap();
    /// s.run("const data = [1, 2, 3]; return data.length").await;
    /// let r = s.run("return data.map(x => x * 2)").await;
    /// assert_eq!(r.value, Some(serde_json::json!([2, 4, 6])));
    /// assert_eq!(h.run("return typeof data").await.value, Some(serde_json::json!("undefined")));
    /// # });
    /// ```
    pub fn open_session(&self) -> Result<Session, SessionError> {
        let id = self.sessions.open()?;
        Ok(Session::new(id, self.clone()))
    }

    /// Session `id`, opened earlier by this harness (or a clone of it),
    /// if it is still live; `Closed` with the reason otherwise.
    pub fn session(&self, id: &str) -> Result<Session, SessionError> {
        self.sessions.find(id)?;
        Ok(Session::new(id.to_owned(), self.clone()))
    }

    /// Live sessions, and the heap their realms hold together (what the
    /// `sessions_live` and `session_memory_bytes` gauges say).
    pub fn session_stats(&self) -> (usize, u64) {
        self.sessions.stats()
    }

    pub(crate) async fn execute_in_session(
        &self,
        id: &str,
        mut request: ExecutionRequest,
    ) -> ExecutionReport {
        if let Some(tp) = request.traceparent.as_deref() {
            request.trace = Some(tracing::info_span!("harness_run", traceparent = tp));
        }
        let source = request.source.clone();
        let provider = request.context.provider.clone();
        let report = self.sessions.execute(id, request).await;
        if let Some(audit) = &self.audit {
            audit.record(&source, provider.as_deref(), &report);
        }
        report
    }

    pub(crate) fn find_session(&self, id: &str) -> Result<(), SessionError> {
        self.sessions.find(id)
    }

    pub(crate) fn close_session(&self, id: &str) -> bool {
        self.sessions.close(id)
    }

    /// The same harness, its runs part of the caller's trace: `traceparent`
    /// is a W3C trace context header (`00-<trace id>-<span id>-<flags>`).
    /// With the `otlp` feature the runs' spans are exported under it.
    pub fn with_traceparent(&self, traceparent: impl Into<String>) -> Harness {
        Harness {
            traceparent: Some(traceparent.into()),
            ..self.clone()
        }
    }

    /// The tools a script of this harness may call (the allowlist applied;
    /// none in `disabled` mode), sorted.
    pub fn tool_names(&self) -> Vec<String> {
        if self.mode == Mode::Disabled {
            return Vec::new();
        }
        self.tools.allow.resolve(&self.tools.registry)
    }

    /// Whether this harness's engine stays awake in its keep-warm window
    /// between rehearsals: asked for with [`HarnessBuilder::keep_warm_awake`]
    /// (or `[workers] keep_warm_awake`) while kept warm, and done by the
    /// engine (QuickJS and Boa) where the machine has the CPUs for it: 2
    /// or more, in process and behind the process boundary, where the
    /// worker process polls (and the host thread too on 3 or more, since
    /// a run there keeps two CPUs busy).
    pub fn keeps_warm_awake(&self) -> bool {
        self.awake
    }

    /// Whether this harness's engine anticipates runs that come at a
    /// steady pace (on unless turned off with
    /// [`HarnessBuilder::anticipate`] or `[workers] anticipate = false`):
    /// every pooled engine does, in process and behind the process
    /// boundary.
    pub fn anticipates(&self) -> bool {
        self.anticipates
    }

    /// Rehearsals this harness's engine has run to keep warm
    /// ([`HarnessBuilder::keep_warm`]; zero when it does not): each costs
    /// about one trivial run of CPU.
    pub fn rehearsals(&self) -> u64 {
        self.adapter.rehearsals()
    }

    /// Says when the upstream MCP servers' tools changed (a server started
    /// again with other tools, or one that said so): then
    /// [`Harness::relisted`] has them. `None` without upstream servers.
    #[cfg(feature = "mcp")]
    pub fn catalogue_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.mcp.as_ref().map(|m| m.upstreams.changes())
    }

    /// This harness with the upstream MCP servers' tools as they list them
    /// now (the same engine, allowlist, approvals and settings; a
    /// `[tools.NAME]` setting for a tool that went away is left out), or
    /// `None` when nothing changed since this harness was built.
    #[cfg(feature = "mcp")]
    pub fn relisted(&self) -> Result<Option<Harness>, BuildError> {
        let Some(part) = &self.mcp else {
            return Ok(None);
        };
        let generation = part.upstreams.generation();
        if generation == part.generation {
            return Ok(None);
        }
        let part = Arc::new(McpPart {
            upstreams: part.upstreams.clone(),
            base: part.base.clone(),
            settings: part.settings.clone(),
            generation,
        });
        let mut tools = self.tools.clone();
        tools.registry = part.registry(false)?;
        Ok(Some(Harness {
            tools,
            mcp: Some(part),
            ..self.clone()
        }))
    }

    /// The tool registry.
    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.tools.registry
    }

    /// TypeScript declarations of what this harness's scripts may call
    /// (see [`declarations`]).
    pub fn typescript(&self) -> String {
        declarations::declarations(&self.tools.registry, &self.tool_names())
    }

    /// The detached tasks runs start with `tools.spawn`, when enabled.
    pub fn tasks(&self) -> Option<&Arc<DetachedTasks>> {
        self.tasks.as_ref()
    }

    /// Detached task `id` as it stands now.
    pub fn task(&self, id: &str) -> Option<DetachedTask> {
        self.tasks.as_ref()?.get(id)
    }

    /// Waits for detached task `id` to end.
    pub async fn wait_task(&self, id: &str) -> Option<DetachedTask> {
        self.tasks.as_ref()?.wait(id).await
    }

    /// Cancels detached task `id`; returns whether it was running.
    pub fn cancel_task(&self, id: &str) -> bool {
        self.tasks.as_ref().is_some_and(|t| t.cancel(id))
    }

    /// Runs raw bytes: strips a BOM, checks UTF-8 and the size cap first.
    pub async fn run_bytes(&self, source: &[u8]) -> ExecutionReport {
        match harness_core::source::decode_source(source, self.limits.max_source_bytes) {
            Ok(s) => self.run(&s).await,
            Err(e) => ExecutionReport::failed(&self.adapter.info().name, e),
        }
    }

    /// An orchestrator for whole model responses (script blocks in text)
    /// with this harness's engine, tools, limits, mode and context.
    ///
    /// # Examples
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let h = harness::Harness::builder().build().unwrap();
    /// let items = h
    ///     .orchestrator(false)
    ///     .respond("Sum:\n<tool-calls>\nreturn 1 + 2\n</tool-calls>", None, Default::default())
    ///     .await
    ///     .unwrap();
    /// assert_eq!(items.len(), 3);
    /// # });
    /// ```
    pub fn orchestrator(&self, continue_on_error: bool) -> harness_respond::Orchestrator {
        harness_respond::Orchestrator::new(
            // Blocks run as `Harness::execute` runs them: retried and audited.
            Arc::new(Runs(self.clone())),
            self.tools.clone(),
            harness_respond::Options::default()
                .with_mode(self.mode)
                .with_continue_on_error(continue_on_error)
                .with_limits(self.limits.clone())
                .with_context(self.context.clone())
                .with_tasks(self.tasks.clone())
                .with_traceparent(self.traceparent.clone()),
        )
    }

    /// Parses a script without running any of it.
    ///
    /// # Examples
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let h = harness::Harness::builder().build().unwrap();
    /// let err = h.check("return 1 +").await.unwrap_err();
    /// assert_eq!(err.code, harness::ErrorCode::ScriptSyntaxError);
    /// assert_eq!(err.location.unwrap().line, 1);
    /// # });
    /// ```
    pub async fn check(&self, source: &str) -> Result<(), ScriptError> {
        harness_core::source::check_size(source.len(), self.limits.max_source_bytes)?;
        self.adapter.check_syntax(source).await
    }
}

/// Builds a [`Harness`].
///
/// # Examples
/// ```
/// use harness::{Harness, EngineKind, Limits, Mode};
/// let h = Harness::builder()
///     .engine(EngineKind::default())
///     .limits(Limits::default().with_timeout_ms(5_000))
///     .mode(Mode::DryRun)
///     .build()
///     .unwrap();
/// assert_eq!(h.limits().timeout_ms, 5_000);
/// ```
#[derive(Default)]
pub struct HarnessBuilder {
    engine: Option<EngineKind>,
    adapter: Option<Arc<dyn ScriptRuntimeAdapter>>,
    registry: Option<Arc<ToolRegistry>>,
    allow: Allowlist,
    approvals: Option<Arc<dyn ApprovalBridge>>,
    limits: Limits,
    mode: Mode,
    context: ScriptContext,
    language: ScriptLanguage,
    tasks: Option<Arc<DetachedTasks>>,
    no_retry: bool,
    worker: Option<ProcessOptions>,
    pool: Option<(usize, u32)>,
    threads: Option<usize>,
    keep_warm: Option<std::time::Duration>,
    keep_awake: bool,
    no_anticipate: bool,
    tool_settings: std::collections::BTreeMap<String, config::ToolSettings>,
    audit: Option<Arc<audit::AuditLog>>,
    session_limits: SessionLimits,
    durable: Option<durable::DurableRuns>,
    #[cfg(feature = "http")]
    http: Option<http::HttpPolicy>,
    #[cfg(feature = "mcp")]
    mcp: Option<mcp::Upstreams>,
}

impl fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("engine", &self.engine)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl HarnessBuilder {
    /// Chooses a built-in engine.
    pub fn engine(mut self, engine: EngineKind) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Uses an adapter you built yourself (overrides [`HarnessBuilder::engine`]).
    pub fn adapter(mut self, adapter: Arc<dyn ScriptRuntimeAdapter>) -> Self {
        self.adapter = Some(adapter);
        self
    }

    /// The tools runs may call.
    pub fn tools(mut self, registry: ToolRegistry) -> Self {
        self.registry = Some(Arc::new(registry));
        self
    }

    /// The tools runs may call, shared with other harnesses.
    pub fn shared_tools(mut self, registry: Arc<ToolRegistry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Restricts the tools a script sees (names of tools or packs).
    pub fn allow(mut self, allow: Allowlist) -> Self {
        self.allow = allow;
        self
    }

    /// Who answers approval requests. Default: deny everything.
    pub fn approvals(mut self, bridge: Arc<dyn ApprovalBridge>) -> Self {
        self.approvals = Some(bridge);
        self
    }

    /// The limits runs get (the isolation in them picks where the engine runs).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Whether tools run, are only checked, or are off.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// What scripts see as `context`.
    pub fn context(mut self, context: ScriptContext) -> Self {
        self.context = context;
        self
    }

    /// The language scripts are written in. Default: [`ScriptLanguage::Auto`]
    /// (JavaScript that parses runs as it is; anything else is tried as
    /// TypeScript).
    pub fn language(mut self, language: ScriptLanguage) -> Self {
        self.language = language;
        self
    }

    /// Turns `tools.spawn` on: scripts may start detached tasks, which
    /// outlive the run, under these caps (off by default: `tools.spawn`
    /// is `undefined`).
    pub fn enable_spawn(mut self, limits: TaskLimits) -> Self {
        self.tasks = Some(Arc::new(DetachedTasks::new(limits)));
        self
    }

    /// Turns `tools.spawn` on with a registry shared with other harnesses.
    pub fn detached_tasks(mut self, tasks: Arc<DetachedTasks>) -> Self {
        self.tasks = Some(tasks);
        self
    }

    /// Whether a run that ends in HarnessInternalError (a worker died, an
    /// engine panicked) is run once more on a fresh engine. On by default;
    /// a run is retried only if none of its tool calls started, no
    /// approval was asked and no detached task was started, so nothing it
    /// did can have had an effect.
    pub fn retry_internal_errors(mut self, retry: bool) -> Self {
        self.no_retry = !retry;
        self
    }

    /// Where scripts run (overrides `Limits::isolation`; the default is
    /// the engine's, see [`EngineKind::default_isolation`]).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.limits.isolation = Some(isolation);
        self
    }

    /// How worker processes are started for `isolation = process`.
    /// Default: this binary (`$HARNESS_WORKER_BIN` when set), which must call
    /// be declared with [`main!`].
    pub fn worker(mut self, opts: ProcessOptions) -> Self {
        self.worker = Some(opts);
        self
    }

    /// Appends one line per run to `log` (see [`audit::AuditLog`]).
    pub fn audit_log(mut self, log: Arc<audit::AuditLog>) -> Self {
        self.audit = Some(log);
        self
    }

    /// The worker-process pool of `isolation = process`: at most
    /// `max_workers` processes, each replaced after `max_runs_per_worker`
    /// runs (0: never).
    pub fn workers(mut self, max_workers: usize, max_runs_per_worker: u32) -> Self {
        self.pool = Some((max_workers, max_runs_per_worker));
        self
    }

    /// The engine threads of `isolation = in_process`: at most
    /// `max_threads` runs in flight in this process, each on a thread of
    /// its own with its engine state; more runs queue. Default
    /// [`harness_core::engine::DEFAULT_MAX_THREADS`] (64); threads start
    /// when runs need them. (`[workers] max_threads` in the configuration
    /// file; [`HarnessBuilder::workers`] is the process pool's; an adapter
    /// given to [`HarnessBuilder::adapter`] keeps its own.)
    pub fn threads(mut self, max_threads: usize) -> Self {
        self.threads = Some(max_threads.max(1));
        self
    }

    /// Keeps the engine warm for `window` after each run (default: off):
    /// while it waits for the next run, the engine thread that ran one
    /// rehearses a trivial run about every 0.8 ms, with the same tools,
    /// context and limits and a fixed script that nobody hears of (no
    /// report, span or metric), so that a run arriving within the window
    /// does not pay for caches the idle CPU lost. For runs a few
    /// milliseconds apart; it costs a few per cent of a CPU per engine
    /// thread during each window, and longer windows than a minute are cut
    /// to one. Behind the process boundary the host thread rehearses
    /// through its worker process, so both stay warm. (`[workers]
    /// keep_warm_ms` in the configuration file.)
    pub fn keep_warm(mut self, window: std::time::Duration) -> Self {
        self.keep_warm = Some(window);
        self
    }

    /// With [`HarnessBuilder::keep_warm`]: whether the engine thread in
    /// its window also stays awake between rehearsals (default: no),
    /// polling for the next run instead of sleeping, so that its CPU does
    /// not halt; a caller then waits awake for its answer too. One engine
    /// thread at a time, and only while the machine has CPUs for the busy
    /// runs, the next one and a caller (2 or more; behind the process
    /// boundary the worker process is what polls, and its host thread
    /// too on 3 or more; [`Harness::keeps_warm_awake`]). On a VM whose
    /// idle CPUs halt, a run a few milliseconds after the last one then
    /// spends in the engine about what one back to back
    /// does (its caller's side stays as cold as the caller), for most
    /// of a CPU through each window: for latency first, on a machine with
    /// a CPU to spare. (`[workers] keep_warm_awake` in the configuration
    /// file.)
    pub fn keep_warm_awake(mut self, awake: bool) -> Self {
        self.keep_awake = awake;
        self
    }

    /// Whether the engine anticipates runs that come at a steady pace (on
    /// by default): when the last 8 runs each followed the same pause,
    /// give or take a little, the engine thread that will take the next
    /// one wakes shortly before it is due, rehearses once and waits for it
    /// awake until shortly after, instead of halting its CPU until the
    /// run's own wake-up. On a VM whose idle CPUs halt, a run 2 ms after
    /// the last then takes about half the time, for about a tenth of a
    /// core while runs keep coming at that pace; lone runs and
    /// irregular traffic cost nothing. It waits awake only where the CPUs
    /// allow, as [`HarnessBuilder::keep_warm_awake`] does (behind the
    /// process boundary the worker process polls); on one CPU it only
    /// rehearses ahead of the run. ([`Harness::anticipates`];
    /// `[workers] anticipate` in the configuration file.)
    pub fn anticipate(mut self, on: bool) -> Self {
        self.no_anticipate = !on;
        self
    }

    /// Turns `tools.http` on under `policy` (off by default: `tools.http`
    /// is `undefined`). The tool joins the registry under its reserved
    /// name and the allowlist, so `[tools.http]` settings and approvals
    /// apply to it like to any tool. See [`http`].
    #[cfg(feature = "http")]
    pub fn http(mut self, policy: http::HttpPolicy) -> Self {
        self.http = Some(policy);
        self
    }

    /// Adds the tools of connected upstream MCP servers
    /// (`tools.mcp.SERVER.TOOL`) and the resource tools; see [`mcp`].
    #[cfg(feature = "mcp")]
    pub fn mcp(mut self, upstreams: mcp::Upstreams) -> Self {
        self.mcp = Some(upstreams);
        self
    }

    /// Per-tool settings (`[tools.NAME]` of the configuration file): each
    /// named tool of the registry gets its own timeout, approval rule and
    /// output cap when the harness is built.
    pub fn tool_settings(
        mut self,
        settings: std::collections::BTreeMap<String, config::ToolSettings>,
    ) -> Self {
        self.tool_settings = settings;
        self
    }

    /// How many sessions the harness keeps and how much they may hold
    /// (`[sessions]`; see [`Harness::open_session`]).
    pub fn sessions(mut self, limits: SessionLimits) -> Self {
        self.session_limits = limits;
        self
    }

    /// Lets runs suspend while they wait on an approval the bridge answers
    /// [`ApprovalDecision::Suspend`] or on a deferred tool, sealed with
    /// `runs`' keys ([`Harness::resume`]). Only the `wasi` engine
    /// suspends; on any other, every run fails with UnsupportedError.
    /// Each run then starts in a fresh instance.
    pub fn suspend(mut self, runs: durable::DurableRuns) -> Self {
        self.durable = Some(runs);
        self
    }

    /// Builds the harness: picks and starts the engine (worker processes for `isolation = process`).
    pub fn build(self) -> Result<Harness, BuildError> {
        let mut session_engine: Option<session::SessionEngine> = None;
        let engine_name;
        let adapter = match self.adapter {
            Some(a) => {
                engine_name = format!(
                    "an adapter given to HarnessBuilder::adapter ({})",
                    a.info().name
                );
                a
            }
            None => {
                let engine = self.engine.unwrap_or_default();
                let isolation = self
                    .limits
                    .isolation
                    .unwrap_or_else(|| engine.default_isolation());
                engine_name = format!("{} with isolation {}", engine.name(), isolation.as_str());
                if isolation == Isolation::InProcess {
                    let d = engine.descriptor()?;
                    session_engine = Some(Arc::new(move |spec| d.in_process_session(spec)));
                }
                let worker = self.worker;
                let pool = self.pool;
                let threads = match (isolation, self.threads) {
                    (Isolation::InProcess, Some(n)) => {
                        engine.descriptor()?.in_process_with_threads(n)
                    }
                    _ => None,
                };
                let mut session_opts: Option<ProcessOptions> = None;
                let adapter = if let Some(adapter) = threads {
                    adapter
                } else {
                    engine.adapter_with(isolation, |name| {
                        let mut w = match worker {
                            Some(mut w) => {
                                w.engine = name.to_owned();
                                w
                            }
                            None => ProcessOptions::current_exe(name)?,
                        };
                        if let Some((max, runs)) = pool {
                            w.max_workers = max.max(1);
                            w.max_runs_per_worker = (runs > 0).then_some(runs);
                        }
                        session_opts = Some(w.clone());
                        Ok(w)
                    })?
                };
                if let Some(opts) = session_opts {
                    let d = engine.descriptor()?;
                    session_engine = Some(Arc::new(move |spec| {
                        harness_core::process::ProcessAdapter::for_session(&d, opts.clone(), spec)
                            .map(|a| Arc::new(a) as Arc<dyn ScriptRuntimeAdapter>)
                    }));
                }
                adapter
            }
        };
        let tuned = adapter.tune(
            Tuning::default()
                .with_keep_warm(self.keep_warm.unwrap_or_default())
                .with_keep_awake(self.keep_awake)
                .with_anticipate(!self.no_anticipate),
        );
        let registry = self.registry.unwrap_or_default();
        #[allow(unused_mut)]
        let mut allow = self.allow;
        #[cfg(feature = "http")]
        let registry = match self.http {
            Some(policy) => {
                let mut r = config::apply_tool_settings(&registry, &Default::default())
                    .map_err(BuildError::Registry)?;
                r.register_harness_tool(Arc::new(http::tool(policy)))
                    .map_err(BuildError::Registry)?;
                if let Allowlist::Only(names) = &mut allow {
                    names.insert("http".into());
                }
                Arc::new(r)
            }
            None => registry,
        };
        #[cfg(feature = "mcp")]
        let mcp = self.mcp.filter(|u| !u.is_empty()).map(|upstreams| {
            Arc::new(McpPart {
                generation: upstreams.generation(),
                upstreams,
                base: registry.clone(),
                settings: self.tool_settings.clone(),
            })
        });
        #[cfg(feature = "mcp")]
        let registry = match &mcp {
            Some(part) => part.registry(true)?,
            None => with_tool_settings(registry, &self.tool_settings, true)?,
        };
        #[cfg(not(feature = "mcp"))]
        let registry = with_tool_settings(registry, &self.tool_settings, true)?;
        let mut tools = ToolSet::new(registry).with_allow(allow);
        if let Some(approvals) = self.approvals {
            tools = tools.with_approvals(approvals);
        }
        // TypeScript on every engine: types are stripped before the
        // engine sees a script (free for JavaScript that parses).
        let adapter: Arc<dyn ScriptRuntimeAdapter> =
            Arc::new(harness_respond::language::TypeScriptAware::new(adapter));
        Ok(Harness {
            adapter,
            language: self.language,
            tasks: self.tasks,
            retry_internal: !self.no_retry,
            awake: tuned.keeps_awake,
            anticipates: tuned.anticipates,
            audit: self.audit,
            traceparent: None,
            sessions: Arc::new(session::Sessions::new(
                self.session_limits,
                session_engine,
                &engine_name,
            )),
            tools,
            limits: self.limits,
            mode: self.mode,
            context: self.context,
            durable: self.durable.map(|d| {
                let core = Arc::new(d.core());
                (Arc::new(d), core)
            }),
            #[cfg(feature = "mcp")]
            mcp,
        })
    }
}

fn report_provider(context: &ScriptContext) -> Option<&str> {
    context.provider.as_deref()
}

/// `registry` with the configuration's `[tools.NAME]` settings applied.
/// `strict`: a setting for a tool the registry lacks is an error (else it
/// is left out: an upstream tool that went away).
fn with_tool_settings(
    registry: Arc<ToolRegistry>,
    settings: &std::collections::BTreeMap<String, config::ToolSettings>,
    strict: bool,
) -> Result<Arc<ToolRegistry>, BuildError> {
    let unknown = |n: &String| registry.get(n).is_none();
    if strict {
        if let Some(unknown) = settings.keys().find(|n| unknown(n)) {
            return Err(BuildError::Config(config::ConfigError::Invalid {
                key: format!("tools.{unknown}"),
                source_name: "the configuration".into(),
                message: format!("there is no tool named `{unknown}`"),
            }));
        }
    }
    let known: std::collections::BTreeMap<_, _> = settings
        .iter()
        .filter(|(n, _)| !unknown(n))
        .map(|(n, s)| (n.clone(), s.clone()))
        .collect();
    if known.is_empty() {
        return Ok(registry);
    }
    config::apply_tool_settings(&registry, &known)
        .map(Arc::new)
        .map_err(|e| {
            BuildError::Config(config::ConfigError::Invalid {
                key: "tools".into(),
                source_name: "the configuration".into(),
                message: e.to_string(),
            })
        })
}

/// What a harness with upstream MCP servers needs to list their tools
/// again: the registry without them, the settings, the servers.
#[cfg(feature = "mcp")]
#[derive(Debug)]
struct McpPart {
    upstreams: mcp::Upstreams,
    base: Arc<ToolRegistry>,
    settings: std::collections::BTreeMap<String, config::ToolSettings>,
    /// The upstreams' generation this registry was built from.
    generation: u64,
}

#[cfg(feature = "mcp")]
impl McpPart {
    fn registry(&self, strict: bool) -> Result<Arc<ToolRegistry>, BuildError> {
        let mut r = config::apply_tool_settings(&self.base, &Default::default())
            .map_err(BuildError::Registry)?;
        self.upstreams
            .register(&mut r)
            .map_err(BuildError::Registry)?;
        with_tool_settings(Arc::new(r), &self.settings, strict)
    }
}

/// A harness as an adapter: every run goes through [`Harness::execute`].
struct Runs(Harness);

#[async_trait::async_trait]
impl Layer for Runs {
    fn inner(&self) -> &dyn ScriptRuntimeAdapter {
        &*self.0.adapter
    }
    async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
        self.0.execute(request).await
    }
    /// Global code is not a run: a harness does not run it.
    async fn eval_global(&self, _: harness_core::GlobalEval) -> harness_core::GlobalEvalOutcome {
        harness_core::GlobalEvalOutcome::Unsupported(format!(
            "{} cannot run global code",
            self.0.adapter.info().name
        ))
    }
}

/// A run that failed inside the harness may run again only if nothing it
/// did can have had an effect outside the engine: no tool call was
/// dispatched (a refused one counts too: it may have reached the facade),
/// no approval was asked, no detached task started.
fn safe_to_retry(r: &ExecutionReport) -> bool {
    r.code() == Some(ErrorCode::HarnessInternalError)
        && r.tool_calls.is_empty()
        && r.tool_calls_dropped == 0
        && r.approvals.is_empty()
        && r.detached_tasks.is_empty()
}

/// Declares a binary's `main` so that the harness can also start it as a
/// worker process (`--isolation process`, and the engines that run behind
/// the process boundary by default): installs the counting allocator that
/// holds worker runs to their memory limit and, first thing in `main`,
/// serves any engine built into this crate if the binary was started as a
/// worker. A worker whose binary was not declared this way refuses to
/// serve, with a clear error.
///
/// ```ignore
/// harness::main! {
///     fn main() -> std::process::ExitCode {
///         // … the binary's own work
///         std::process::ExitCode::SUCCESS
///     }
/// }
/// ```
#[macro_export]
macro_rules! main {
    ($($main:tt)*) => {
        $crate::core::worker_main! {
            engines = $crate::engines();
            $($main)*
        }
    };
}
