//! The tool facade: every call a script makes passes allowlist, schema,
//! budget, concurrency and approval checks, in that order, then runs with a
//! cancellation token. One facade serves one script run.

use crate::adapter::{ExecutionRequest, Mode, ToolSet};
use crate::approval::{ApprovalDecision, ApprovalOutcome, ApprovalRecord, ApprovalRequest};
use crate::durable::Waiting;
use crate::error::ErrorCode;
use crate::limits::Limits;
use crate::report::{PendingCall, PendingKind};
use crate::sinks::{ms, truncate_strings, truncate_with_marker};
use crate::tool::ToolContext;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Why a call failed, as the script sees it (`err.name` is the code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallFailure {
    pub code: ErrorCode,
    pub message: String,
    /// The tool's process's stderr, cut to [`MAX_STDERR_BYTES`].
    pub stderr: Option<String>,
    /// Not a failure: the call waits on an answer from outside, and the
    /// run may suspend ([`crate::durable`]). `code` and `message` say
    /// what the call ends in if the run ends otherwise.
    pub waiting: Option<Box<Waiting>>,
}

/// Stderr a ToolExecutionError carries, at most.
pub(crate) const MAX_STDERR_BYTES: usize = 2048;

impl CallFailure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CallFailure {
            code,
            message: message.into(),
            stderr: None,
            waiting: None,
        }
    }

    fn waiting(code: ErrorCode, message: String, waiting: Waiting) -> Self {
        CallFailure {
            waiting: Some(Box::new(waiting)),
            ..CallFailure::new(code, message)
        }
    }

    /// The JSON the prelude's `settle` reads for a failed call.
    pub(crate) fn payload(&self) -> String {
        json!({"code": self.code.as_str(), "message": self.message, "stderr": self.stderr})
            .to_string()
    }
}

/// Where in the script a call was made, and which call or task it is.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallSite {
    pub call_id: u64,
    pub task_id: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// A call's result: the output as JSON text, or a failure.
pub(crate) type CallOutcome = Result<String, CallFailure>;

/// Per-run tool gatekeeper.
#[derive(Debug)]
pub(crate) struct ToolFacade {
    tools: ToolSet,
    mode: Mode,
    limits: Limits,
    visible: Vec<String>,
    visible_set: BTreeSet<String>,
    budget_used: AtomicU32,
    queued: AtomicU32,
    semaphore: Semaphore,
    deadline: Instant,
    approvals: Mutex<Vec<ApprovalRecord>>,
    /// The run's id, for approval requests.
    script_id: String,
    /// The script's source, for the snippets approval requests show.
    source: String,
    approvals_asked: AtomicU32,
    last_request_id: Mutex<Option<String>>,
    /// The run may suspend: an approval answered `Suspend` and a deferred
    /// tool's call wait instead of failing.
    durable: bool,
}

/// How far a call has come before it reaches the facade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A new call: every check.
    Fresh,
    /// A call whose approval was given at a resume: its budget was
    /// counted and its approval asked before the run suspended.
    Approved,
}

impl ToolFacade {
    pub(crate) fn new(request: &ExecutionRequest, deadline: Instant, script_id: &str) -> Self {
        let visible = match request.mode {
            Mode::Disabled => Vec::new(),
            _ => request.tools.allow.resolve(&request.tools.registry),
        };
        ToolFacade {
            tools: request.tools.clone(),
            mode: request.mode,
            limits: request.limits.clone(),
            visible_set: visible.iter().cloned().collect(),
            visible,
            budget_used: AtomicU32::new(0),
            queued: AtomicU32::new(0),
            semaphore: Semaphore::new(request.limits.max_concurrent_tool_calls.max(1) as usize),
            deadline,
            approvals: Mutex::new(Vec::new()),
            script_id: script_id.to_owned(),
            source: request.source.clone(),
            approvals_asked: AtomicU32::new(0),
            last_request_id: Mutex::new(None),
            durable: request.durable.is_some(),
        }
    }

    /// Calls counted against the budget so far.
    pub(crate) fn budget_used(&self) -> u32 {
        self.budget_used.load(Ordering::Relaxed)
    }

    /// Approval requests made so far.
    pub(crate) fn approvals_asked(&self) -> u32 {
        self.approvals_asked.load(Ordering::Relaxed)
    }

    /// A resumed run's facade: what the run had used and been asked
    /// before it suspended.
    pub(crate) fn restore(
        &self,
        budget_used: u32,
        approvals_asked: u32,
        approvals: Vec<ApprovalRecord>,
    ) {
        self.budget_used.store(budget_used, Ordering::Relaxed);
        self.approvals_asked
            .store(approvals_asked, Ordering::Relaxed);
        if let Some(last) = approvals.last() {
            if let Ok(mut l) = self.last_request_id.lock() {
                *l = Some(last.request_id.clone());
            }
        }
        if let Ok(mut a) = self.approvals.lock() {
            *a = approvals;
        }
    }

    /// Records the answer a resume gave to an approval the run waited on.
    pub(crate) fn record_answer(
        &self,
        w: &Waiting,
        outcome: ApprovalOutcome,
        reason: Option<String>,
    ) {
        if let Ok(mut l) = self.last_request_id.lock() {
            *l = Some(w.request_id.clone());
        }
        if let Ok(mut a) = self.approvals.lock() {
            a.push(ApprovalRecord {
                request_id: w.request_id.clone(),
                call_id: w.call.call_id,
                task_id: None,
                line: w.line,
                tool: w.call.tool.clone(),
                args: w.call.args.clone(),
                outcome,
                reason,
                duration_ms: 0.0,
            });
        }
    }

    /// The id of the run's latest approval request.
    pub(crate) fn last_request_id(&self) -> Option<String> {
        self.last_request_id.lock().ok().and_then(|l| l.clone())
    }

    /// Whether the script may call `name`.
    pub(crate) fn is_visible(&self, name: &str) -> bool {
        self.visible_set.contains(name)
    }

    /// Tool names the script may call, sorted.
    pub(crate) fn visible_tools(&self) -> &[String] {
        &self.visible
    }

    /// The visible tools whose calls may need approval, in
    /// [`visible_tools`](Self::visible_tools)' order: only their calls
    /// carry a call site (the prelude's stack capture), the approval
    /// request's `line`.
    pub(crate) fn sited_tools(&self) -> Vec<&str> {
        self.visible
            .iter()
            .filter(|n| {
                self.tools
                    .registry
                    .get(n)
                    .is_none_or(|t| t.may_require_approval())
            })
            .map(String::as_str)
            .collect()
    }

    /// Calls left in the budget.
    pub(crate) fn remaining_budget(&self) -> u32 {
        self.limits
            .max_tool_calls
            .saturating_sub(self.budget_used.load(Ordering::Relaxed))
    }

    /// Every approval asked for so far.
    pub(crate) fn approval_records(&self) -> Vec<ApprovalRecord> {
        self.approvals.lock().map(|a| a.clone()).unwrap_or_default()
    }

    pub(crate) fn unknown_tool_message(&self, name: &str) -> String {
        let list = if self.visible.is_empty() {
            "(none)".to_owned()
        } else {
            self.visible.join(", ")
        };
        if self.mode == Mode::Disabled {
            return format!("unknown tool '{name}': tools are disabled for this run");
        }
        match crate::tool::closest_name(name, &self.visible) {
            Some(near) => {
                format!("unknown tool '{name}'; did you mean \"{near}\"? available tools: {list}")
            }
            None => format!("unknown tool '{name}'; available tools: {list}"),
        }
    }

    /// Runs one call through every check and the tool itself, under the
    /// run's deadline.
    pub(crate) async fn call(
        self: Arc<Self>,
        site: CallSite,
        name: String,
        args_json: String,
        cancel: CancellationToken,
    ) -> CallOutcome {
        let deadline = self.deadline;
        self.call_until(site, name, args_json, cancel, deadline)
            .await
    }

    /// Runs a call whose approval a resume gave: the checks again, but
    /// neither the budget (counted before the run suspended) nor the
    /// approval.
    pub(crate) async fn call_approved(
        self: Arc<Self>,
        site: CallSite,
        name: String,
        args_json: String,
        cancel: CancellationToken,
    ) -> CallOutcome {
        let deadline = self.deadline;
        self.admit(site, name, args_json, cancel, deadline, Admission::Approved)
            .await
    }

    /// Runs one call through every check and the tool itself, under
    /// `deadline` (a detached task's own).
    pub(crate) async fn call_until(
        self: Arc<Self>,
        site: CallSite,
        name: String,
        args_json: String,
        cancel: CancellationToken,
        deadline: Instant,
    ) -> CallOutcome {
        self.admit(site, name, args_json, cancel, deadline, Admission::Fresh)
            .await
    }

    async fn admit(
        self: Arc<Self>,
        site: CallSite,
        name: String,
        args_json: String,
        cancel: CancellationToken,
        deadline: Instant,
        admission: Admission,
    ) -> CallOutcome {
        use ErrorCode::*;
        if !self.visible_set.contains(&name) {
            return Err(CallFailure::new(
                ToolNotFoundError,
                self.unknown_tool_message(&name),
            ));
        }
        let Some(entry) = self.tools.registry.entry(&name) else {
            return Err(CallFailure::new(
                ToolNotFoundError,
                self.unknown_tool_message(&name),
            ));
        };
        let args: Value = serde_json::from_str(&args_json).map_err(|e| {
            CallFailure::new(
                ToolValidationError,
                format!("arguments for {name} are not valid JSON: {e}"),
            )
        })?;
        entry.check(&args).map_err(|problems| {
            CallFailure::new(
                ToolValidationError,
                format!("invalid arguments for {name}: {problems}"),
            )
        })?;
        let used = match admission {
            Admission::Fresh => self.budget_used.fetch_add(1, Ordering::Relaxed) + 1,
            Admission::Approved => 0,
        };
        if used > self.limits.max_tool_calls {
            return Err(CallFailure::new(
                ToolBudgetExceededError,
                format!(
                    "tool call budget exhausted: this script may make at most {} tool calls",
                    self.limits.max_tool_calls
                ),
            ));
        }
        if self.mode == Mode::DryRun {
            let out = json!({"__dryRun": true, "tool": name, "args": args});
            return Ok(out.to_string());
        }

        // Concurrency: take a slot or queue for one.
        let _permit = match self.semaphore.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                let q = self.queued.fetch_add(1, Ordering::Relaxed);
                if q >= self.limits.max_queued_tool_calls {
                    self.queued.fetch_sub(1, Ordering::Relaxed);
                    return Err(CallFailure::new(
                        ConcurrencyLimitError,
                        format!(
                            "too many tool calls in flight: {} running and {} queued",
                            self.limits.max_concurrent_tool_calls, q
                        ),
                    ));
                }
                let p = tokio::select! {
                    p = self.semaphore.acquire() => p,
                    _ = cancel.cancelled() => {
                        self.queued.fetch_sub(1, Ordering::Relaxed);
                        return Err(cancelled(&name));
                    }
                };
                self.queued.fetch_sub(1, Ordering::Relaxed);
                p.map_err(|_| CallFailure::new(HarnessInternalError, "tool semaphore closed"))?
            }
        };

        let tool = entry.tool.clone();
        if admission == Admission::Fresh && tool.requires_approval(&args) {
            self.approve(&site, &name, &args, &cancel, true).await?;
        }
        if tool.deferred() {
            return Err(self.deferred(&site, &name, args));
        }
        let approver = {
            let (facade, site, cancel) = (self.clone(), site.clone(), cancel.clone());
            crate::tool::Approver::new(move |what: String, details: Value| {
                let (facade, site, cancel) = (facade.clone(), site.clone(), cancel.clone());
                async move {
                    facade
                        .approve(&site, &what, &details, &cancel, false)
                        .await
                        .map_err(|e| e.message)
                }
            })
        };
        let ctx = ToolContext::new(site.call_id, deadline)
            .with_cancel(cancel.clone())
            .with_approver(approver);
        match tool.execute(args, ctx).await {
            Ok(mut v) => {
                truncate_strings(&mut v, self.limits.max_tool_output_string_bytes as usize);
                serde_json::to_string(&v).map_err(|e| {
                    CallFailure::new(
                        ToolExecutionError,
                        format!("tool {name} returned unserialisable output: {e}"),
                    )
                })
            }
            Err(e) if e.cancelled || cancel.is_cancelled() => Err(cancelled(&name)),
            Err(e) => Err(CallFailure {
                stderr: e
                    .stderr
                    .as_deref()
                    .map(|s| truncate_with_marker(s, MAX_STDERR_BYTES)),
                ..CallFailure::new(ToolExecutionError, format!("{name} failed: {}", e.message))
            }),
        }
    }

    /// A deferred tool's call: it waits for its answer where the run may
    /// suspend, and fails in any other.
    fn deferred(&self, site: &CallSite, name: &str, args: Value) -> CallFailure {
        let message = format!(
            "{name} is deferred: its result arrives from outside, and this run cannot suspend"
        );
        if !self.durable || site.task_id.is_some() {
            return CallFailure::new(ErrorCode::ToolExecutionError, message);
        }
        let call = PendingCall {
            call_id: site.call_id,
            tool: name.to_owned(),
            args,
            kind: PendingKind::Deferred,
            line: site.line,
        };
        let waiting = Waiting {
            call,
            request_id: String::new(),
            line: site.line,
        };
        CallFailure::waiting(ErrorCode::ToolExecutionError, message, waiting)
    }

    /// Asks the bridge about one call (`may_suspend`: the call has not
    /// started, so that the run may wait for the answer outside).
    async fn approve(
        &self,
        site: &CallSite,
        name: &str,
        args: &Value,
        cancel: &CancellationToken,
        may_suspend: bool,
    ) -> Result<(), CallFailure> {
        let n = self.approvals_asked.fetch_add(1, Ordering::Relaxed) + 1;
        let suffix = self
            .script_id
            .strip_prefix("scr_")
            .unwrap_or(&self.script_id);
        let mut req = ApprovalRequest::new(name, args.clone());
        req.request_id = format!("apr_{suffix}_{n}");
        req.script_id = self.script_id.clone();
        req.call_id = site.call_id;
        req.task_id = site.task_id.clone();
        req.line = site.line;
        req.column = site.column;
        req.snippet = site
            .line
            .and_then(|l| crate::approval::snippet(&self.source, l));
        if let Ok(mut last) = self.last_request_id.lock() {
            *last = Some(req.request_id.clone());
        }
        metrics::counter!("approval_request_count", "tool" => name.to_owned()).increment(1);
        tracing::info!(
            request_id = %req.request_id,
            script_id = %req.script_id,
            tool = name,
            line = req.line,
            "approval requested"
        );
        let started = Instant::now();
        let answer = tokio::select! {
            a = tokio::time::timeout(self.limits.approval_timeout(), self.tools.approvals.request(&req)) => Some(a),
            _ = cancel.cancelled() => None,
        };
        let may_suspend = may_suspend && self.durable && site.task_id.is_none();
        let deny = |reason: Option<String>| {
            let msg = match &reason {
                Some(r) => format!("approval denied for {name}: {r}"),
                None => format!("approval denied for {name}"),
            };
            (
                ApprovalOutcome::Denied,
                reason,
                Err(CallFailure::new(ErrorCode::ApprovalDeniedError, msg)),
            )
        };
        let (outcome, reason, result) = match answer {
            Some(Ok(ApprovalDecision::Suspend)) if may_suspend => {
                tracing::info!(request_id = %req.request_id, tool = name, "approval suspends the run");
                let waiting = Waiting {
                    call: PendingCall {
                        call_id: site.call_id,
                        tool: name.to_owned(),
                        args: req.args,
                        kind: PendingKind::Approval,
                        line: site.line,
                    },
                    request_id: req.request_id,
                    line: site.line,
                };
                let message = format!("approval for {name} was not answered before the run ended");
                return Err(CallFailure::waiting(
                    ErrorCode::ApprovalDeniedError,
                    message,
                    waiting,
                ));
            }
            Some(Ok(ApprovalDecision::Approved)) => (ApprovalOutcome::Approved, None, Ok(())),
            Some(Ok(ApprovalDecision::Denied { reason })) => deny(reason),
            Some(Ok(ApprovalDecision::Suspend)) => deny(Some(
                "the approval would suspend the run, and this run cannot suspend".to_owned(),
            )),
            Some(Err(_)) => (
                ApprovalOutcome::TimedOut,
                None,
                Err(CallFailure::new(
                    ErrorCode::ApprovalTimeoutError,
                    format!(
                        "no approval answer for {name} within {} ms",
                        self.limits.approval_timeout_ms
                    ),
                )),
            ),
            None => (ApprovalOutcome::Cancelled, None, Err(cancelled(name))),
        };
        let refused = match outcome {
            ApprovalOutcome::Approved => None,
            ApprovalOutcome::Denied => Some("denied"),
            ApprovalOutcome::TimedOut => Some("timed_out"),
            _ => Some("cancelled"),
        };
        if let Some(how) = refused {
            metrics::counter!("approval_denial_count", "tool" => name.to_owned(), "outcome" => how)
                .increment(1);
        }
        tracing::info!(request_id = %req.request_id, tool = name, outcome = ?outcome, "approval answered");
        if let Ok(mut a) = self.approvals.lock() {
            a.push(ApprovalRecord {
                request_id: req.request_id.clone(),
                call_id: site.call_id,
                task_id: site.task_id.clone(),
                line: site.line,
                tool: name.to_owned(),
                args: req.args,
                outcome,
                reason,
                duration_ms: ms(started.elapsed()),
            });
        }
        result
    }
}

fn cancelled(name: &str) -> CallFailure {
    CallFailure::new(
        ErrorCode::ScriptCancelledError,
        format!("call to {name} was cancelled"),
    )
}

#[cfg(test)]
mod tests {
    use crate::tool::closest_name as closest;

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        let tools: Vec<String> = ["exec", "list_dir", "read_file", "write_file"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(closest("read_fil", &tools), Some("read_file"));
        assert_eq!(closest("raed_file", &tools), Some("read_file"));
        assert_eq!(closest("exce", &tools), Some("exec"));
        assert_eq!(closest("search", &tools), None);
        assert_eq!(closest("x", &tools), None);
    }

    /// Only tools that may ask for approval get a call site: a tool that
    /// says it never does (an `FnTool` without a rule) does not; one that
    /// has a rule, or does not say (the trait's default), does.
    #[test]
    fn only_tools_that_may_need_approval_are_sited() {
        use crate::adapter::{ExecutionRequest, ToolSet};
        use crate::tool::{FnTool, Tool, ToolContext, ToolError, ToolRegistry};
        use serde_json::{json, Value};
        use std::sync::Arc;

        struct Silent(Value);
        #[async_trait::async_trait]
        impl Tool for Silent {
            fn name(&self) -> &str {
                "silent"
            }
            fn description(&self) -> &str {
                "says nothing about approval"
            }
            fn schema(&self) -> &Value {
                &self.0
            }
            async fn execute(&self, args: Value, _: ToolContext) -> Result<Value, ToolError> {
                Ok(args)
            }
        }
        let fn_tool = |name: &str| {
            FnTool::new(
                name,
                "",
                json!({"type": "object"}),
                |a, _| async move { Ok(a) },
            )
        };
        let mut registry = ToolRegistry::new();
        registry.register(fn_tool("echo")).unwrap();
        registry
            .register(fn_tool("guarded").requiring_approval(|_| false))
            .unwrap();
        registry
            .register(Silent(json!({"type": "object"})))
            .unwrap();
        let mut request = ExecutionRequest::new("");
        request.tools = ToolSet::new(Arc::new(registry));
        let facade = super::ToolFacade::new(&request, std::time::Instant::now(), "scr_0");
        assert_eq!(facade.visible_tools(), ["echo", "guarded", "silent"]);
        assert_eq!(facade.sited_tools(), ["guarded", "silent"]);
    }
}
