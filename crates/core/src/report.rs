//! The structured result of one script run.

use crate::approval::ApprovalRecord;
use crate::error::{ErrorCode, ScriptError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything a run produced. Serialises to the JSON the CLI prints with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecutionReport {
    pub ok: bool,
    /// The script's return value; absent when it returned `undefined`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The failure; `null` when `ok`.
    #[serde(default)]
    pub error: Option<ScriptError>,
    pub console: Vec<ConsoleEntry>,
    /// Console lines dropped by the line cap or the rate limit.
    #[serde(default)]
    pub console_dropped: u32,
    pub tool_calls: Vec<ToolCallRecord>,
    /// Tool calls refused without a record: a run records its budget plus
    /// 64 refused calls; attempts past that fail with
    /// ToolBudgetExceededError and are only counted here.
    #[serde(default)]
    pub tool_calls_dropped: u32,
    #[serde(default)]
    pub approvals: Vec<ApprovalRecord>,
    pub progress: Vec<ProgressEvent>,
    /// Progress events dropped by the rate limit or the cap.
    #[serde(default)]
    pub progress_dropped: u32,
    pub metrics: Metrics,
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
pub enum ConsoleLevel {
    Log,
    Info,
    Warn,
    Error,
    Debug,
}

impl ConsoleLevel {
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
pub struct ConsoleEntry {
    pub level: ConsoleLevel,
    pub text: String,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Still running (only seen while a run is in progress).
    Pending,
    Ok,
    Error,
    /// Stopped by its cancellation token (race lost, script ended, timeout).
    Cancelled,
    /// Still running after the grace period; abandoned.
    Detached,
}

/// One tool call, in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub id: u64,
    pub tool: String,
    pub status: CallStatus,
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallError {
    pub code: ErrorCode,
    pub message: String,
}

/// One `context.telemetry.emitProgress` event that passed the rate limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    pub elapsed_ms: f64,
}

/// Numbers about the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Metrics {
    pub engine: String,
    pub duration_ms: f64,
    pub tool_calls: u32,
    /// Peak engine heap during the run (context included), where the engine can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    /// Fuel the run consumed, for engines that count it (WASI-QuickJS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel_consumed: Option<u64>,
}
