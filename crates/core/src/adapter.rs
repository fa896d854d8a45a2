//! The engine contract: [`ScriptRuntimeAdapter`] and the types it takes and returns.

use crate::approval::{ApprovalBridge, AutoDeny};
use crate::error::{ErrorCode, ScriptError};
use crate::limits::{Isolation, Limits};
use crate::report::ExecutionReport;
use crate::tool::{Allowlist, ToolRegistry};
use crate::tuning::Tunable;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What an engine can enforce. The conformance suite reads these to mark
/// cases as unsupported instead of silently passing them. Built with
/// `Capabilities::NONE.with_interrupt()…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Stops a running script cooperatively (deadline, cancel).
    pub interrupt: bool,
    /// Enforces the memory limit inside the engine.
    pub memory_limit: bool,
    /// Counts instructions (fuel).
    pub fuel: bool,
    /// Can kill a script that ignores interrupts (process or instance boundary).
    pub hard_kill: bool,
    /// Offers a filesystem to scripts.
    pub filesystem: bool,
    /// Turns native stack exhaustion (deep parser nesting, native
    /// recursion such as long Proxy chains) into StackOverflowError instead
    /// of overflowing the thread, which would end the process.
    #[serde(default)]
    pub stack_guard: bool,
}

impl Capabilities {
    /// An engine that enforces nothing by itself.
    pub const NONE: Capabilities = Capabilities {
        interrupt: false,
        memory_limit: false,
        fuel: false,
        hard_kill: false,
        filesystem: false,
        stack_guard: false,
    };

    /// It stops a running script cooperatively.
    pub const fn with_interrupt(mut self) -> Self {
        self.interrupt = true;
        self
    }

    /// It enforces the memory limit inside the engine.
    pub const fn with_memory_limit(mut self) -> Self {
        self.memory_limit = true;
        self
    }

    /// It counts instructions (fuel).
    pub const fn with_fuel(mut self) -> Self {
        self.fuel = true;
        self
    }

    /// It can kill a script that ignores interrupts.
    pub const fn with_hard_kill(mut self) -> Self {
        self.hard_kill = true;
        self
    }

    /// It offers a filesystem to scripts.
    pub const fn with_filesystem(mut self) -> Self {
        self.filesystem = true;
        self
    }

    /// It turns native stack exhaustion into StackOverflowError.
    pub const fn with_stack_guard(mut self) -> Self {
        self.stack_guard = true;
        self
    }
}

/// Who the engine is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EngineInfo {
    /// Stable engine name, as in `--engine` (`quickjs`, `boa`, …).
    pub name: String,
    /// The engine's version, as it reports it.
    pub engine_version: String,
    /// What the engine enforces where it runs.
    pub capabilities: Capabilities,
    /// Where scripts run: in the host process, or in a worker process.
    #[serde(default)]
    pub isolation: Isolation,
}

/// How tools behave for a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Mode {
    /// Tools run.
    #[default]
    Enabled,
    /// Calls are checked (name, schema, budget) but nothing runs; each call
    /// returns `{"__dryRun": true, "tool": NAME, "args": ARGS}`.
    DryRun,
    /// The script runs without tools: every call is ToolNotFoundError.
    Disabled,
}

/// The language a script is written in. Every entry accepts both: with
/// `Auto` (the default) JavaScript that parses runs as it is, and a script
/// that does not parse as JavaScript is parsed as TypeScript and its types
/// are stripped. Adapters run JavaScript; the harness strips types before
/// the adapter sees the script.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ScriptLanguage {
    /// JavaScript if it parses, else TypeScript.
    #[default]
    Auto,
    /// JavaScript only: a TypeScript annotation is a ScriptSyntaxError.
    #[serde(alias = "js")]
    JavaScript,
    /// TypeScript: types are stripped before the script runs.
    #[serde(alias = "ts")]
    TypeScript,
}

impl ScriptLanguage {
    /// The language a file name implies: `.ts`, `.mts`, `.cts` are
    /// TypeScript, anything else `Auto`.
    pub fn from_file_name(name: &str) -> ScriptLanguage {
        let lower = name.to_ascii_lowercase();
        if [".ts", ".mts", ".cts"].iter().any(|e| lower.ends_with(e)) {
            ScriptLanguage::TypeScript
        } else {
            ScriptLanguage::Auto
        }
    }
}

impl std::str::FromStr for ScriptLanguage {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ScriptLanguage::Auto),
            "js" | "javascript" => Ok(ScriptLanguage::JavaScript),
            "ts" | "typescript" => Ok(ScriptLanguage::TypeScript),
            other => Err(format!(
                "unknown language '{other}' (expected js, ts or auto)"
            )),
        }
    }
}

/// The frozen `context` object a script sees, in host terms. Built with
/// `ScriptContext::default().with_model(…)…`, or by setting its fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ScriptContext {
    /// Free-form identity (session, user, agent ids); shown as `context.identity`.
    pub identity: Value,
    /// The working directory the host works in, as `context.workingDirectory`.
    pub working_directory: Option<String>,
    /// The model provider, as `context.provider`.
    pub provider: Option<String>,
    /// The model, as `context.model`.
    pub model: Option<String>,
    /// Extra data the host wants the script to see, as `context.extra`.
    pub extra: Value,
    /// The conversation this run belongs to, as `context.conversationId`.
    pub conversation_id: Option<String>,
    /// The session, as `context.sessionId`.
    pub session_id: Option<String>,
    /// The turn of the conversation, as `context.turnId`.
    pub turn_id: Option<String>,
}

impl ScriptContext {
    /// With `context.identity`.
    pub fn with_identity(mut self, identity: Value) -> Self {
        self.identity = identity;
        self
    }
    /// With `context.workingDirectory`.
    pub fn with_working_directory(mut self, dir: impl Into<String>) -> Self {
        self.working_directory = Some(dir.into());
        self
    }
    /// With `context.provider`.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }
    /// With `context.model`.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
    /// With `context.extra`.
    pub fn with_extra(mut self, extra: Value) -> Self {
        self.extra = extra;
        self
    }
    /// With `context.conversationId`.
    pub fn with_conversation_id(mut self, id: impl Into<String>) -> Self {
        self.conversation_id = Some(id.into());
        self
    }
    /// With `context.sessionId`.
    pub fn with_session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }
    /// With `context.turnId`.
    pub fn with_turn_id(mut self, id: impl Into<String>) -> Self {
        self.turn_id = Some(id.into());
        self
    }

    /// `self` with the fields of `value`, a context object in the
    /// camelCase keys scripts see (`conversationId`, `sessionId`,
    /// `turnId`, `provider`, `model`, `workingDirectory`, `identity`,
    /// `extra`), as hosts receive it over a wire (the CLI's `--context`,
    /// fleet requests, the Node package). Keys it lacks keep `self`'s
    /// values; an unknown key is an error naming it.
    ///
    /// ```
    /// use harness_core::ScriptContext;
    /// let c = ScriptContext::default()
    ///     .merge_script_json(&serde_json::json!({"turnId": "t1", "model": "m"}))
    ///     .unwrap();
    /// assert_eq!(c.turn_id.as_deref(), Some("t1"));
    /// assert!(ScriptContext::default().merge_script_json(&serde_json::json!({"nope": 1})).is_err());
    /// ```
    pub fn merge_script_json(mut self, value: &Value) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Wire {
            conversation_id: Option<String>,
            session_id: Option<String>,
            turn_id: Option<String>,
            provider: Option<String>,
            model: Option<String>,
            working_directory: Option<String>,
            #[serde(default)]
            identity: Value,
            #[serde(default)]
            extra: Value,
        }
        let w: Wire = serde_json::from_value(value.clone())
            .map_err(|e| format!("not a valid context object: {e}"))?;
        self.conversation_id = w.conversation_id.or(self.conversation_id);
        self.session_id = w.session_id.or(self.session_id);
        self.turn_id = w.turn_id.or(self.turn_id);
        self.provider = w.provider.or(self.provider);
        self.model = w.model.or(self.model);
        self.working_directory = w.working_directory.or(self.working_directory);
        if !w.identity.is_null() {
            self.identity = w.identity;
        }
        if !w.extra.is_null() {
            self.extra = w.extra;
        }
        Ok(self)
    }
}

/// The tools a run may use: the registry, the allowlist and who approves.
#[derive(Clone)]
#[non_exhaustive]
pub struct ToolSet {
    /// Every tool the host offers.
    pub registry: Arc<ToolRegistry>,
    /// Which of them this run may call.
    pub allow: Allowlist,
    /// Who answers approval requests.
    pub approvals: Arc<dyn ApprovalBridge>,
}

impl Default for ToolSet {
    fn default() -> Self {
        ToolSet {
            registry: Arc::new(ToolRegistry::new()),
            allow: Allowlist::All,
            approvals: Arc::new(AutoDeny::default()),
        }
    }
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSet")
            .field("registry", &self.registry)
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl ToolSet {
    /// Every tool in `registry`, approvals denied.
    pub fn new(registry: Arc<ToolRegistry>) -> Self {
        ToolSet {
            registry,
            ..ToolSet::default()
        }
    }

    /// Lets the run call only what `allow` names (default: every tool).
    pub fn with_allow(mut self, allow: Allowlist) -> Self {
        self.allow = allow;
        self
    }

    /// Asks `approvals` before a call that needs approval (default: denied).
    pub fn with_approvals(mut self, approvals: Arc<dyn ApprovalBridge>) -> Self {
        self.approvals = approvals;
        self
    }
}

/// One script to run. The serialisable part (source, limits, context, mode)
/// can cross a process boundary; tools and the cancel token stay on the host.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecutionRequest {
    /// The script: the body of an async function, in `language`.
    pub source: String,
    /// JavaScript, TypeScript, or either (the default). Honoured by
    /// `harness::Harness` and `harness_respond::language::TypeScriptAware`,
    /// which strip the types; an engine's adapter called directly runs
    /// `source` as JavaScript whatever this says (a type annotation is then
    /// a ScriptSyntaxError).
    #[serde(default)]
    pub language: ScriptLanguage,
    /// The run's limits.
    pub limits: Limits,
    /// What the script sees as `context`.
    pub context: ScriptContext,
    /// Whether tools run, are only checked, or are off.
    pub mode: Mode,
    #[serde(skip)]
    /// The tools the run may use.
    pub tools: ToolSet,
    #[serde(skip)]
    /// Cancelling it stops the run with ScriptCancelledError.
    pub cancel: CancellationToken,
    /// Told of tool calls and progress as they happen (for live UIs).
    #[serde(skip)]
    pub observer: Option<Observer>,
    /// Where `tools.spawn` starts detached tasks; `None` (the default)
    /// turns `tools.spawn` off: it is `undefined` to the script.
    #[serde(skip)]
    pub tasks: Option<Arc<crate::tasks::DetachedTasks>>,
    /// The host's span this run's `script_run` span belongs under (the
    /// run happens on another thread, where the current span is not the
    /// host's).
    #[serde(skip)]
    pub trace: Option<tracing::Span>,
    /// The caller's W3C `traceparent`: the `harness` facade makes the
    /// run's spans part of that trace.
    #[serde(skip)]
    pub traceparent: Option<String>,
    /// Set, the run may suspend ([`crate::durable`]): it starts in a
    /// fresh instance, and an approval answered `Suspend` or a deferred
    /// tool's call puts it away once nothing else is in flight. Only the
    /// `wasi` engine suspends; any other refuses such a run with
    /// UnsupportedError.
    #[serde(skip)]
    pub durable: Option<Arc<crate::durable::Durable>>,
    /// Set, the run goes on from a continuation (with `durable` set too,
    /// so that it may suspend again); `source` is not run.
    #[serde(skip)]
    pub resume: Option<Arc<crate::durable::Resume>>,
    /// Set, the caller polls for the answer on its own terms (Node's
    /// thread, which also makes the run's JavaScript tool calls, waits
    /// awake for either): the engine never waits awake for the answer on
    /// the caller's thread.
    #[serde(skip)]
    pub caller_polls: bool,
}

/// Live events of one run, called on the run's host thread as they happen
/// (also behind the process boundary: they are host-side). Keep them
/// quick; every method defaults to doing nothing.
pub trait RunObserver: Send + Sync {
    /// The run has its script id (the id its report, spans and tool
    /// contexts carry), before any of the script runs.
    fn started(&self, script_id: &str) {
        let _ = script_id;
    }
    /// A tool call passed to the facade (it may still be refused there).
    fn tool_call_started(&self, call_id: u64, tool: &str) {
        let _ = (call_id, tool);
    }
    /// A tool call finished; `error` is its code if it failed. Called
    /// once for every call whose start was told, however the run ended: a
    /// call still pending at the end is cancelled (ScriptCancelledError,
    /// or its own outcome if it ends first) or, if it ignores that for the
    /// grace period, abandoned (DetachedPromiseError).
    fn tool_call_finished(&self, call_id: u64, tool: &str, error: Option<ErrorCode>) {
        let _ = (call_id, tool, error);
    }
    /// The script reported progress (only events kept by the rate limit).
    fn progress(&self, message: &str, data: Option<&Value>) {
        let _ = (message, data);
    }
    /// The script wrote a console line (only lines kept by the caps), as
    /// it happens: hosts stream it (MCP log messages, a UI), in process
    /// and behind the process boundary alike.
    fn console(&self, level: crate::report::ConsoleLevel, text: &str) {
        let _ = (level, text);
    }
    /// A detached task this run started has ended (the run may be over).
    fn task_finished(&self, task: &crate::tasks::DetachedTask) {
        let _ = task;
    }
}

/// A shared [`RunObserver`].
#[derive(Clone)]
pub struct Observer(pub Arc<dyn RunObserver>);

impl Observer {
    /// Shares `observer` with the runs it is given to.
    pub fn new(observer: Arc<dyn RunObserver>) -> Self {
        Observer(observer)
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observer")
    }
}

impl ExecutionRequest {
    /// A request for `source` with default limits, no tools and no context.
    pub fn new(source: impl Into<String>) -> Self {
        ExecutionRequest {
            source: source.into(),
            ..ExecutionRequest::default()
        }
    }
}

/// A standalone script run as global code, for conformance suites such as
/// test262 (not for model-written scripts: no tools, no report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GlobalEval {
    /// Global code; strictness comes from a `"use strict"` directive.
    pub source: String,
    /// Apply the hardening prelude first (frozen intrinsics, no eval).
    pub hardened: bool,
    /// With `hardened`: leave the intrinsics unfrozen (no pinned globals,
    /// no taming, no freezing) and harden everything else, so that a test
    /// lost when hardened can be told apart as lost to frozen intrinsics
    /// or to something else. Ignored without `hardened`.
    #[serde(default)]
    pub unfrozen: bool,
    /// Wall-clock limit for the whole evaluation.
    pub timeout_ms: u64,
}

impl GlobalEval {
    /// `source` as global code, hardened or raw, within `timeout_ms`.
    pub fn new(source: impl Into<String>, hardened: bool, timeout_ms: u64) -> Self {
        GlobalEval {
            source: source.into(),
            hardened,
            unfrozen: false,
            timeout_ms,
        }
    }

    /// Sets [`GlobalEval::unfrozen`].
    pub fn unfrozen(mut self, unfrozen: bool) -> Self {
        self.unfrozen = unfrozen;
        self
    }
}

/// How a [`GlobalEval`] ended. `prints` holds every `print(...)` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum GlobalEvalOutcome {
    /// Ran to the end, jobs drained.
    Completed {
        /// Every `print(...)` call, in order.
        prints: Vec<String>,
    },
    /// Did not compile.
    ParseError {
        /// The error's name (`SyntaxError`, …).
        name: String,
        /// The error's message.
        message: String,
    },
    /// Threw (at top level or in a job).
    Threw {
        /// The error's name.
        name: String,
        /// The error's message.
        message: String,
        /// Every `print(...)` call before it threw.
        prints: Vec<String>,
    },
    /// Ran past its deadline.
    TimedOut {
        /// Every `print(...)` call before the deadline.
        prints: Vec<String>,
    },
    /// The engine cannot run global code this way.
    Unsupported(String),
}

/// A JavaScript engine the harness can run scripts on.
///
/// An adapter must never panic or abort the host on any script: every
/// failure is a [`ScriptError`] in the report.
///
/// The contract says what an engine is and does; how its scheduler spends
/// idle CPU is [`Tunable`] (an engine that schedules nothing writes
/// `impl Tunable for MyEngine {}`), and a wrapper around another engine
/// is a [`Layer`](crate::layer::Layer).
#[async_trait]
pub trait ScriptRuntimeAdapter: Tunable + Send + Sync {
    /// Who the engine is and what it enforces.
    fn info(&self) -> EngineInfo;
    /// Parses `source` as a script body without running any of it.
    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError>;
    /// Runs one script to completion (or failure) and reports.
    async fn execute(&self, request: ExecutionRequest) -> ExecutionReport;
    /// Runs standalone global code (test262). Engines that cannot say so.
    async fn eval_global(&self, eval: GlobalEval) -> GlobalEvalOutcome {
        let _ = eval;
        GlobalEvalOutcome::Unsupported(format!("{} cannot run global code", self.info().name))
    }
}

/// Cancels a run if the caller stops waiting for it (drops the future
/// that awaits the report). Adapters hold one while a run is in flight.
#[derive(Debug)]
pub struct CancelOnDrop(Option<CancellationToken>);

impl CancelOnDrop {
    /// Cancels `token` when dropped, unless disarmed.
    pub fn new(token: CancellationToken) -> Self {
        CancelOnDrop(Some(token))
    }

    /// The run finished: dropping the guard no longer cancels it.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.cancel();
        }
    }
}
