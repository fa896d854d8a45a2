//! Approvals: a tool call that needs consent waits on an [`ApprovalBridge`].

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the bridge is asked to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The call asking, as in the report.
    pub call_id: u64,
    /// The tool.
    pub tool: String,
    /// Its arguments, validated.
    pub args: Value,
}

/// The bridge's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// The call may run.
    Approved,
    /// The call is refused: ApprovalDeniedError, with the reason if given.
    Denied {
        /// Why, to show the script.
        reason: Option<String>,
    },
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
pub struct AutoDeny {
    /// Why every request is denied, if said.
    pub reason: Option<String>,
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
pub struct ApprovalRecord {
    /// The call, as in the report's tool calls.
    pub call_id: u64,
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
