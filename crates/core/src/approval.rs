//! Approvals: a tool call that needs consent waits on an [`ApprovalBridge`].

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the bridge is asked to decide: the call, and where in which
/// script it was made, so that the person asked sees what they approve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// This request's id (`apr_` + the script id's suffix + a number); the
    /// script sees the latest as `context.approvals.lastRequestId`.
    #[serde(default)]
    pub request_id: String,
    /// The run asking (`context.scriptId`).
    #[serde(default)]
    pub script_id: String,
    /// The call asking, as in the report (0 for a detached task).
    pub call_id: u64,
    /// The detached task asking, for a call started with `tools.spawn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// Its arguments, validated, exactly as the tool will get them.
    pub args: Value,
    /// The line of the call in the script, where the engine can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Its column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// The script's lines around the call (two before and after, each cut
    /// at 200 characters), each prefixed with its line number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
}

impl ApprovalRequest {
    /// A request for `tool` with `args` (call 0, no script context): for
    /// bridges' own tests.
    pub fn new(tool: impl Into<String>, args: Value) -> Self {
        ApprovalRequest {
            request_id: String::new(),
            script_id: String::new(),
            call_id: 0,
            task_id: None,
            tool: tool.into(),
            args,
            line: None,
            column: None,
            snippet: None,
        }
    }
}

/// The lines of `source` around `line` (1-based): two before and two
/// after, each cut at 200 characters and prefixed with its number; the
/// call's line is marked with `>`.
pub fn snippet(source: &str, line: u32) -> Option<String> {
    let line = line as usize;
    let lines: Vec<&str> = source.split('\n').collect();
    if line == 0 || line > lines.len() {
        return None;
    }
    let from = line.saturating_sub(2).max(1);
    let to = (line + 2).min(lines.len());
    let width = to.to_string().len();
    let mut out = String::new();
    for n in from..=to {
        let text: String = lines[n - 1]
            .trim_end_matches('\r')
            .chars()
            .take(200)
            .collect();
        let mark = if n == line { '>' } else { ' ' };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("{mark} {n:>width$} | {text}"));
    }
    Some(out)
}

/// The bridge's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// The call may run.
    Approved,
    /// The call is refused: ApprovalDeniedError, with the reason if given.
    Denied {
        /// Why, to show the script.
        reason: Option<String>,
    },
    /// Nobody answers now: the run is put away until someone does
    /// ([`Harness::resume`](crate::durable)). Only a run that may suspend
    /// (a [`Durable`](crate::durable::Durable) request on the `wasi`
    /// engine) does; any other run's call is denied.
    Suspend,
}

/// Asks someone (a person, a policy engine) whether a tool call may run.
/// The facade bounds every request with the approval timeout.
#[async_trait]
pub trait ApprovalBridge: Send + Sync {
    /// Decides one request. Runs as long as it likes; the run's approval timeout and cancellation bound it.
    async fn request(&self, request: &ApprovalRequest) -> ApprovalDecision;
}

/// Approves everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoApprove;

#[async_trait]
impl ApprovalBridge for AutoApprove {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Approved
    }
}

/// Denies everything, with a fixed reason. The safe default.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AutoDeny {
    /// Why every request is denied, if said.
    pub reason: Option<String>,
}

impl AutoDeny {
    /// Denies everything, telling the script `reason`.
    pub fn with_reason(reason: impl Into<String>) -> Self {
        AutoDeny {
            reason: Some(reason.into()),
        }
    }
}

#[async_trait]
impl ApprovalBridge for AutoDeny {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Denied {
            reason: self.reason.clone(),
        }
    }
}

/// Never answers: approvals end with ApprovalTimeoutError. For tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverAnswer;

#[async_trait]
impl ApprovalBridge for NeverAnswer {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        std::future::pending().await
    }
}

/// How an approval ended, as recorded in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalOutcome {
    /// Approved: the call ran.
    Approved,
    /// Denied: ApprovalDeniedError.
    Denied,
    /// Not answered in time: ApprovalTimeoutError.
    TimedOut,
    /// The run ended (or the call was cancelled) first.
    Cancelled,
}

/// One approval request and its answer, in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalRecord {
    /// The request's id, as the bridge saw it.
    #[serde(default)]
    pub request_id: String,
    /// The call, as in the report's tool calls (0 for a detached task).
    pub call_id: u64,
    /// The detached task, for a call started with `tools.spawn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The line of the call in the script, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: Value,
    /// How it ended.
    pub outcome: ApprovalOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The reason given with a denial.
    pub reason: Option<String>,
    /// How long the answer took.
    pub duration_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::snippet;

    #[test]
    fn snippets_show_two_lines_around_the_call_cut_at_200_characters() {
        let src = format!("a\nb\nc\nawait tools.exec({{}})\nd\ne\n{}", "x".repeat(300));
        assert_eq!(
            snippet(&src, 4).unwrap(),
            "  2 | b\n  3 | c\n> 4 | await tools.exec({})\n  5 | d\n  6 | e"
        );
        assert_eq!(snippet(&src, 1).unwrap(), "> 1 | a\n  2 | b\n  3 | c");
        let last = snippet(&src, 7).unwrap();
        assert!(
            last.ends_with(&format!("> 7 | {}", "x".repeat(200))),
            "{last}"
        );
        assert_eq!(snippet(&src, 0), None);
        assert_eq!(snippet(&src, 99), None);
    }
}
