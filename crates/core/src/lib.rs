//! Engine-neutral core of the script harness.
//!
//! It defines the contract every engine implements
//! ([`ScriptRuntimeAdapter`]), the limits and the stable error taxonomy, the
//! tool registry and facade (allowlist, JSON Schema, budget, concurrency,
//! approvals), promise tracking, and the one event loop
//! ([`engine::run_script`]) that every adapter drives with its own
//! engine primitives.

#![warn(missing_docs, unreachable_pub)]

pub mod adapter;
mod anticipate;
pub mod approval;
pub mod body;
pub mod durable;
pub mod end_check;
pub mod engine;
pub mod error;
pub mod event_loop;
mod facade;
pub mod layer;
pub mod limits;
mod pool;
mod primitives;
pub mod process;
mod process_options;
mod rehearsal;
pub mod report;
pub mod session;
mod sinks;
pub mod source;
mod spin;
pub mod tasks;
pub mod telemetry;
pub mod tool;
mod tracker;
pub mod tuning;
pub mod watchdog;

pub use adapter::{
    Capabilities, EngineInfo, ExecutionRequest, GlobalEval, GlobalEvalOutcome, Mode, Observer,
    RunObserver, ScriptContext, ScriptLanguage, ScriptRuntimeAdapter, ToolSet,
};
pub use approval::{
    ApprovalBridge, ApprovalDecision, ApprovalOutcome, ApprovalRecord, ApprovalRequest,
    AutoApprove, AutoDeny, NeverAnswer,
};
pub use error::{ErrorCode, ErrorMetadata, Location, Phase, ScriptError};
pub use layer::Layer;
pub use limits::{Isolation, Limits, Realm};
pub use report::{
    CallError, CallStatus, ConsoleEntry, ConsoleLevel, ExecutionReport, Metrics, PendingCall,
    PendingKind, ProgressEvent, ProgressKind, Suspension, ToolCallRecord, Warning,
};
pub use tasks::{DetachedTask, DetachedTasks, TaskLimits, TaskStatus};
pub use tool::{
    Allowlist, DeferredTool, FnTool, RegistryError, Tool, ToolContext, ToolError, ToolRegistry,
};
pub use tuning::{Tunable, Tuned, Tuning};

/// Re-exported so tools and hosts use the same token type.
pub use tokio_util::sync::CancellationToken;

/// Declares a binary's `main` so that it can also serve as a worker
/// process: installs the counting [`process::WorkerAllocator`] as the
/// global allocator and, first thing in `main`, serves the engine named on
/// the command line (`PROGRAM --harness-worker ENGINE`) if the host started
/// it as a worker. `engines` is an expression that yields the
/// [`engine::EngineDescriptor`]s the binary can serve.
///
/// ```ignore
/// harness_core::worker_main! {
///     engines = [harness_quickjs::descriptor()];
///     fn main() {
///         // … the binary's own work
///     }
/// }
/// ```
#[macro_export]
macro_rules! worker_main {
    (engines = $engines:expr; $(#[$meta:meta])* fn main() $(-> $ret:ty)? $body:block) => {
        #[global_allocator]
        static HARNESS_WORKER_ALLOCATOR: $crate::process::WorkerAllocator =
            $crate::process::WorkerAllocator;

        $(#[$meta])*
        fn main() $(-> $ret)? {
            $crate::process::serve_if_requested(|name| {
                ::std::iter::IntoIterator::into_iter($engines)
                    .find(|e: &$crate::engine::EngineDescriptor| e.answers_to(name))
            });
            $body
        }
    };
}
