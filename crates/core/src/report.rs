//! The structured result of one script run.

use crate::approval::ApprovalRecord;
use crate::error::{ErrorCode, ScriptError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything a run produced. Serialises to the JSON the CLI prints with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecutionReport {
    /// The script succeeded: `error` is `None`.
    pub ok: bool,
    /// The script's return value; absent when it returned `undefined`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The failure; `null` when `ok`.
    #[serde(default)]
    pub error: Option<ScriptError>,
    /// Console lines kept, in order.
    pub console: Vec<ConsoleEntry>,
    /// Console lines dropped by the line cap or the rate limit.
    #[serde(default)]
    pub console_dropped: u32,
    /// Every tool call, in the order the script made them.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Tool calls refused without a record: a run records its budget plus
    /// 64 refused calls; attempts past that fail with
    /// ToolBudgetExceededError and are only counted here.
    #[serde(default)]
    pub tool_calls_dropped: u32,
    #[serde(default)]
    /// Every approval asked for, and how it ended.
    pub approvals: Vec<ApprovalRecord>,
    /// Progress events kept, in order.
    pub progress: Vec<ProgressEvent>,
    /// Progress events dropped by the rate limit or the cap.
    #[serde(default)]
    pub progress_dropped: u32,
    /// Engine, duration, calls, memory and fuel.
    pub metrics: Metrics,
    /// This run's id (`scr_` + random), as the script saw it in
    /// `context.scriptId`.
    #[serde(default)]
    pub script_id: String,
    /// Detached tasks the script started with `tools.spawn`, as they
    /// stood when the report was made (or later, where the host waited).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detached_tasks: Vec<DetachedTask>,
    /// Lossy conversions of the return value into JSON (a function or
    /// `undefined` dropped, a class instance with nothing to show).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// The run hit HarnessInternalError and was run again once on a fresh
    /// engine; this is the second run's report.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retried: bool,
    /// The engine context the run was in ([`crate::engine::Engine::context_id`]):
    /// two reports with the same id ran in the same context, the second
    /// reusing what the first left. For tests and operators; never
    /// serialised, never shown to scripts.
    #[serde(skip)]
    pub context_id: Option<u64>,
    /// Present only when the run suspended (then `ok` is false and
    /// `error` is null): what it waits on, and the sealed continuation
    /// [`Harness::resume`](crate::durable) takes to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,
    /// The session a resumed session run went on in: a new one, which
    /// now holds what the suspended session held (the old one closed
    /// when its run suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// A run put away while it waits on calls only someone outside can
/// answer (docs/user-guide.md "Durable runs").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Suspension {
    /// The sealed continuation, base64 (standard alphabet, padded).
    pub continuation: String,
    /// The continuation's id (`cnt_` + random hex): it resumes at most once.
    pub id: String,
    /// The calls waiting on an answer, in call order.
    pub pending: Vec<PendingCall>,
    /// When the continuation expires (RFC 3339, UTC).
    pub expires_at: String,
}

/// One call a suspended run waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingCall {
    /// The call's id, as in `tool_calls`.
    pub call_id: u64,
    /// The tool.
    pub tool: String,
    /// Its arguments, validated.
    pub args: Value,
    /// What it waits on.
    pub kind: PendingKind,
    /// The line of the call in the script, where the engine can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// What a pending call of a suspended run waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PendingKind {
    /// An approval: the answer is approve or deny; an approved call runs
    /// when the run resumes.
    Approval,
    /// A deferred tool's result (or error), from outside.
    Deferred,
}

/// A lossy conversion of the return value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Warning {
    /// Where in the value, as a JSON path (`$.a[0]`).
    pub path: String,
    /// What was lost.
    pub message: String,
}

impl ExecutionReport {
    /// A report for a run that failed before anything ran.
    pub fn failed(engine: &str, error: ScriptError) -> Self {
        ExecutionReport {
            ok: false,
            value: None,
            error: Some(error),
            console: Vec::new(),
            console_dropped: 0,
            tool_calls: Vec::new(),
            tool_calls_dropped: 0,
            approvals: Vec::new(),
            progress: Vec::new(),
            progress_dropped: 0,
            metrics: Metrics {
                engine: engine.to_owned(),
                ..Metrics::default()
            },
            script_id: String::new(),
            detached_tasks: Vec::new(),
            warnings: Vec::new(),
            retried: false,
            context_id: None,
            suspension: None,
            session: None,
        }
    }

    /// The error code, if the run failed.
    pub fn code(&self) -> Option<ErrorCode> {
        self.error.as_ref().map(|e| e.code)
    }
}

/// Console severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ConsoleLevel {
    /// `console.log`.
    Log,
    /// `console.info`.
    Info,
    /// `console.warn`.
    Warn,
    /// `console.error`.
    Error,
    /// `console.debug`.
    Debug,
}

impl ConsoleLevel {
    /// The level's name, as in reports: `log`, `info`, `warn`, `error`
    /// or `debug`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleLevel::Log => "log",
            ConsoleLevel::Info => "info",
            ConsoleLevel::Warn => "warn",
            ConsoleLevel::Error => "error",
            ConsoleLevel::Debug => "debug",
        }
    }

    /// The level named `s`; anything unknown is `Log`.
    pub fn parse(s: &str) -> ConsoleLevel {
        match s {
            "info" => ConsoleLevel::Info,
            "warn" => ConsoleLevel::Warn,
            "error" => ConsoleLevel::Error,
            "debug" => ConsoleLevel::Debug,
            _ => ConsoleLevel::Log,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// One console line.
#[non_exhaustive]
pub struct ConsoleEntry {
    /// Which console method wrote it.
    pub level: ConsoleLevel,
    /// The line, formatted as Node would.
    pub text: String,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallStatus {
    /// Still running (only seen while a run is in progress).
    Pending,
    /// Returned a result.
    Ok,
    /// Failed; `error` says why.
    Error,
    /// Stopped by its cancellation token (race lost, script ended, timeout).
    Cancelled,
    /// Still running after the grace period; abandoned.
    Detached,
}

/// One tool call, in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCallRecord {
    /// The call's id (1, 2, … in call order).
    pub id: u64,
    /// The tool's name.
    pub tool: String,
    /// How it ended.
    pub status: CallStatus,
    /// How long it ran.
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Why it failed, if it did.
    pub error: Option<CallError>,
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallError {
    /// The stable error code.
    pub code: ErrorCode,
    /// The message the script saw.
    pub message: String,
    /// What the tool's process wrote to stderr (at most 2 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

/// The kind of a progress event: `emitProgress(message, "warn")`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ProgressKind {
    /// Ordinary progress.
    #[default]
    Info,
    /// Something the user should notice.
    Warn,
}

/// One `context.telemetry.emitProgress` event that passed the rate limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProgressEvent {
    /// The event's message.
    pub message: String,
    /// `info` (the default) or `warn`.
    #[serde(default)]
    pub kind: ProgressKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its data, if any.
    pub data: Option<Value>,
    /// Milliseconds since the run started.
    pub elapsed_ms: f64,
}

/// Numbers about the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Metrics {
    /// The engine's name.
    pub engine: String,
    /// Wall-clock time of the whole run.
    pub duration_ms: f64,
    /// Tool calls recorded.
    pub tool_calls: u32,
    /// Peak engine heap during the run (context included), where the engine can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    /// Fuel the run consumed, for engines that count it (WASI-QuickJS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel_consumed: Option<u64>,
}

/// How a detached task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Still running.
    Running,
    /// The tool returned a result.
    Ok,
    /// The tool (or a check before it) failed.
    Error,
    /// Cancelled by the script, the host, or its deadline's end.
    Cancelled,
}

/// One detached task, as the report and the host see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DetachedTask {
    /// `task_` + a number unique in its registry.
    pub id: String,
    /// The tool it calls.
    pub tool: String,
    /// The run that started it (`context.scriptId`).
    pub script_id: String,
    /// How it stands.
    pub status: TaskStatus,
    /// The tool's result, once `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// How long it ran, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
}
