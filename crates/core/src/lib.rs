//! Engine-neutral core of the script harness.
//!
//! It defines the contract every engine implements
//! ([`ScriptRuntimeAdapter`]), the limits and the stable error taxonomy, the
//! tool registry and facade (allowlist, JSON Schema, budget, concurrency,
//! approvals), promise tracking, and the one event loop
//! ([`event_loop::run_script`]) that every adapter drives with its own
//! engine primitives.

pub mod adapter;
pub mod approval;
pub mod error;
pub mod event_loop;
pub mod facade;
pub mod limits;
pub mod pool;
pub mod process;
pub mod report;
pub mod sinks;
pub mod source;
pub mod tool;
pub mod tracker;
pub mod watchdog;

pub use adapter::{
    Capabilities, EngineInfo, ExecutionRequest, GlobalEval, GlobalEvalOutcome, Mode, Observer,
    RunObserver, ScriptContext, ScriptRuntimeAdapter, ToolSet,
};
pub use approval::{
    ApprovalBridge, ApprovalDecision, ApprovalOutcome, ApprovalRecord, ApprovalRequest,
    AutoApprove, AutoDeny, NeverAnswer,
};
pub use error::{ErrorCode, Location, Phase, ScriptError};
pub use limits::{Isolation, Limits};
pub use report::{
    CallError, CallStatus, ConsoleEntry, ConsoleLevel, ExecutionReport, Metrics, ProgressEvent,
    ToolCallRecord,
};
pub use tool::{Allowlist, FnTool, RegistryError, Tool, ToolContext, ToolError, ToolRegistry};

/// Re-exported so tools and hosts use the same token type.
pub use tokio_util::sync::CancellationToken;
