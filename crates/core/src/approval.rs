//! Approvals: a tool call that needs consent waits on an [`ApprovalBridge`].

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the bridge is asked to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub call_id: u64,
    pub tool: String,
    pub args: Value,
}

/// The bridge's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    Approved,
    Denied { reason: Option<String> },
}

/// Asks someone (a person, a policy engine) whether a tool call may run.
/// The facade bounds every request with the approval timeout.
#[async_trait]
pub trait ApprovalBridge: Send + Sync {
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
    Approved,
    Denied,
    TimedOut,
    Cancelled,
}

/// One approval request and its answer, in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub call_id: u64,
    pub tool: String,
    pub args: Value,
    pub outcome: ApprovalOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub duration_ms: f64,
}
