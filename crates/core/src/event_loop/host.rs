//! The state of one run that the engine's native function talks to
//! ([`HostState`]): tool calls, detached tasks, console and progress.

use super::*;

/// How the script's own promise ended.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    /// Returned; `None` for `undefined`.
    Done(Option<String>),
    /// Rejected or threw; the prelude's description as JSON.
    Failed(String),
}

/// Per-run state the engine's native function talks to.
#[derive(Debug)]
pub struct HostState {
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    pub(super) facade: Arc<ToolFacade>,
    pub(super) tracker: PromiseTracker,
    pub(super) console: ConsoleSink,
    pub(super) progress: ProgressSink,
    /// Starts tool calls as the script makes them.
    pub(super) starter: Starter,
    /// The run's cancel token: a cancelled run's calls are no longer
    /// answered inside the op.
    pub(super) cancel: CancellationToken,
    /// Calls that finished on their first poll but are settled by the loop
    /// once the script's jobs have run: those a resume started, and those
    /// [`HostState::answer`] did not answer inside the op.
    pub(super) finished: Vec<(u64, CallOutcome)>,
    pub(super) outcome: Option<Outcome>,
    pub(super) observer: Option<crate::adapter::Observer>,
    /// Tool names of dispatched calls, for the observer.
    pub(super) call_names: std::collections::HashMap<u64, String>,
    /// Calls recorded at most: the budget plus [`REFUSED_CALLS_KEPT`].
    pub(super) max_attempts: usize,
    /// Calls refused without a record once `max_attempts` was reached.
    pub(super) calls_dropped: u32,
    /// The run's id, `context.scriptId`.
    pub(super) script_id: String,
    /// Where `tools.spawn` starts tasks; `None` when it is off.
    pub(super) tasks: Option<Arc<DetachedTasks>>,
    /// Ids of the tasks this run started, in order.
    pub(super) run_tasks: Vec<String>,
    /// This run's tasks whose `done` the script may still be waiting on.
    pub(super) tasks_live: usize,
    /// Lossy conversions of the return value, from the prelude.
    pub(super) warnings: Vec<Warning>,
    /// Calls waiting on an answer from outside ([`crate::durable`]), in
    /// the order they came to wait.
    pub(super) waiting: Vec<Waiting>,
}

/// A detached task the script starts.
#[derive(Debug)]
pub(super) struct NewTask {
    pub(super) id: String,
    pub(super) settle: u64,
    pub(super) tool: String,
    pub(super) args: String,
    pub(super) at: Option<Location>,
    pub(super) cancel: CancellationToken,
}

/// Detached tasks settle their `done` promise under ids from here up, so
/// that they never meet a tool call's id (exact in a JavaScript number).
pub(super) const TASK_SETTLE_BASE: u64 = 1 << 40;

/// A new run id: `scr_` and 16 random hex digits.
pub(super) fn new_script_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // RandomState is seeded from the OS once per thread and stepped for
    // each new state: random per process, distinct per call.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("scr_{:016x}", h.finish())
}

/// 128 fresh bits for the run's `Math.random` (the prelude reseeds it per
/// run), as four 32-bit words. RandomState's keys come from the OS.
pub(super) fn random_seed() -> [u32; 4] {
    use std::hash::{BuildHasher, Hasher};
    let mut words = [0u32; 4];
    for pair in words.chunks_mut(2) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        let x = h.finish();
        pair[0] = x as u32;
        pair[1] = (x >> 32) as u32;
    }
    words
}

/// Refused tool calls (unknown tool, bad arguments, over budget) a run
/// records beyond its budget; later attempts are refused unrecorded and
/// counted in `tool_calls_dropped`.
pub const REFUSED_CALLS_KEPT: usize = 64;

impl HostState {
    pub(super) fn op(&mut self, op: HostOp<'_>) -> String {
        match op {
            HostOp::Call { .. } | HostOp::Unknown { .. }
                if self.tracker.len() >= self.max_attempts =>
            {
                // A script that keeps calling after its budget (or keeps
                // calling unknown tools) would grow the host's records
                // without bound; past the cap, calls are refused unrecorded.
                self.calls_dropped = self.calls_dropped.saturating_add(1);
                "0".to_owned()
            }
            HostOp::Call { tool, args, at } => {
                let (id, token) = self.tracker.register(tool);
                match self.start_call(id, tool, args, at, token) {
                    Some(outcome) => self.answer(id, outcome),
                    None => id.to_string(),
                }
            }
            HostOp::Spawn { tool, args, at } => self.spawn(tool, args, at),
            HostOp::CancelTask { id } => {
                let was = self
                    .tasks
                    .as_ref()
                    .is_some_and(|t| self.run_tasks.iter().any(|r| r == id) && t.cancel(id));
                if was { "1" } else { "0" }.to_owned()
            }
            HostOp::ApprovalId => self.facade.last_request_id().unwrap_or_default(),
            HostOp::Warnings { json } => {
                if let Ok(w) = serde_json::from_str::<Vec<Warning>>(json) {
                    self.warnings = w;
                }
                String::new()
            }
            HostOp::Unknown { tool } => {
                let msg = self.facade.unknown_tool_message(tool);
                let id =
                    self.tracker
                        .register_failed(tool, ErrorCode::ToolNotFoundError, msg.clone());
                format!("{id}\n{msg}")
            }
            HostOp::Cancel { id } => {
                if let Ok(id) = id.parse() {
                    self.tracker.release(id);
                }
                String::new()
            }
            HostOp::Console { level, text } => {
                let level = ConsoleLevel::parse(level);
                if self.console.push(level, text, Instant::now()) {
                    if let Some(o) = &self.observer {
                        o.0.console(level, text);
                    }
                }
                String::new()
            }
            HostOp::Progress {
                message,
                data,
                kind,
            } => {
                let data = (!data.is_empty())
                    .then(|| serde_json::from_str::<Value>(data).ok())
                    .flatten();
                let kept =
                    self.progress
                        .push(message, (data.clone(), kind), Instant::now(), self.started);
                if kept {
                    if let Some(o) = &self.observer {
                        o.0.progress(message, data.as_ref());
                    }
                }
                if kept { "1" } else { "0" }.to_owned()
            }
            HostOp::Budget => self.facade.remaining_budget().to_string(),
            HostOp::RemainingMs => self
                .deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .to_string(),
            HostOp::Done { has_value, json } => {
                if self.outcome.is_none() {
                    self.outcome = Some(Outcome::Done(has_value.then(|| json.to_owned())));
                }
                String::new()
            }
            HostOp::Fail { description } => {
                if self.outcome.is_none() {
                    self.outcome = Some(Outcome::Failed(description.to_owned()));
                }
                String::new()
            }
            HostOp::Other(_) => String::new(),
        }
    }
}

impl HostState {
    /// Records how a call ended and tells the observer, once per call:
    /// whether the call was still pending (a second outcome is ignored).
    /// Every call the observer saw start is finished through here or
    /// [`HostState::tell_finished`], however the run ended.
    pub(super) fn record(&mut self, id: u64, outcome: &CallOutcome) -> bool {
        if !self.tracker.complete(id, outcome) {
            return false;
        }
        self.tell_finished(id, outcome.as_ref().err().map(|f| f.code));
        true
    }

    /// Tells the observer that call `id` ended, with `error` if it failed.
    pub(super) fn tell_finished(&mut self, id: u64, error: Option<ErrorCode>) {
        if let (Some(o), Some(name)) = (self.observer.clone(), self.call_names.remove(&id)) {
            o.0.tool_call_finished(id, &name, error);
        }
    }

    /// Hands a call to the facade the moment the script makes it, so that
    /// it starts (and its budget is counted: `context.budget`) while the
    /// script goes on computing, as a JavaScript tool would. It is polled
    /// once right here, inside the tokio context: most tools (and every
    /// rejection by the facade's checks) finish on that poll, and their
    /// outcome is returned. A call still pending goes on in its
    /// [`CallSlot`].
    pub(super) fn start_call(
        &mut self,
        id: u64,
        name: &str,
        args: &str,
        at: Option<Location>,
        token: CancellationToken,
    ) -> Option<CallOutcome> {
        self.start_admitted(id, name, args, at, token, Admission::Fresh)
    }

    /// The `call` op's answer for a call that finished on its first poll:
    /// its outcome, which the prelude settles the call's promise with as
    /// the op returns (nothing of the script runs inside the op). A space
    /// and the result's JSON, or `!`, the call id, a newline and the
    /// failure's payload. A call that waits on an answer from outside, or
    /// one of a run past its deadline or cancelled, is answered with its
    /// id and settled by the loop, which then ends the run: an engine that
    /// cannot be interrupted (Boa in process) still returns to the loop
    /// from a script looping over calls.
    pub(super) fn answer(&mut self, id: u64, outcome: CallOutcome) -> String {
        let stopping = self.cancel.is_cancelled() || Instant::now() >= self.deadline;
        let waits = matches!(
            &outcome,
            Err(CallFailure {
                waiting: Some(_),
                ..
            })
        );
        if stopping || waits {
            self.finished.push((id, outcome));
            return id.to_string();
        }
        if !self.record(id, &outcome) {
            return id.to_string();
        }
        match outcome {
            Ok(json) => {
                let mut answer = String::with_capacity(json.len() + 1);
                answer.push(' ');
                answer.push_str(&json);
                answer
            }
            Err(f) => format!("!{id}\n{}", f.payload()),
        }
    }

    /// [`start_call`](HostState::start_call) for a call at `admission`
    /// (one a resume approved skips its budget and approval).
    pub(super) fn start_admitted(
        &mut self,
        id: u64,
        name: &str,
        args: &str,
        at: Option<Location>,
        token: CancellationToken,
        admission: Admission,
    ) -> Option<CallOutcome> {
        if let Some(o) = self.observer.clone() {
            o.0.tool_call_started(id, name);
            self.call_names.insert(id, name.to_owned());
        }
        let site = CallSite {
            call_id: id,
            task_id: None,
            line: at.map(|l| l.line),
            column: at.map(|l| l.column),
        };
        let span = tracing::info_span!(
            "tool_call",
            tool = %name,
            call_id = id,
            outcome = tracing::field::Empty,
        );
        let (facade, name_owned, args_owned) =
            (self.facade.clone(), name.to_owned(), args.to_owned());
        let call = Unwound(Box::pin(async move {
            match admission {
                Admission::Fresh => facade.call(site, name_owned, args_owned, token).await,
                Admission::Approved => {
                    facade
                        .call_approved(site, name_owned, args_owned, token)
                        .await
                }
            }
        }));
        let fut: CallFuture = Box::pin(tracing::Instrument::instrument(
            async move {
                let outcome = call.await;
                let label = match &outcome {
                    Ok(_) => "ok",
                    Err(f) if f.waiting.is_some() => "suspended",
                    Err(f) => f.code.as_str(),
                };
                tracing::Span::current().record("outcome", label);
                outcome
            },
            span,
        ));
        let slot = Arc::new(CallSlot {
            id,
            fut: std::sync::Mutex::new(Some(fut)),
            to: self.starter.clone(),
        });
        let first = {
            let _rt = self.starter.tokio.enter();
            slot.poll_once()
        };
        if first.is_none() {
            self.tracker
                .attach_task(id, crate::tracker::Abort(Box::new(move || slot.abort())));
        }
        first
    }

    /// Starts a detached task on tokio, under its own deadline and token,
    /// not the run's: it outlives the script. Like a call, it starts the
    /// moment the script asks for it.
    pub(super) fn start_task(&mut self, t: NewTask, tasks: Arc<DetachedTasks>) {
        self.tasks_live += 1;
        let facade = self.facade.clone();
        let tx = self.starter.tx.clone();
        let observer = self.observer.clone();
        let limit = Duration::from_millis(tasks.limits().timeout_ms);
        let deadline = Instant::now() + limit;
        let site = CallSite {
            call_id: 0,
            task_id: Some(t.id.clone()),
            line: t.at.map(|l| l.line),
            column: t.at.map(|l| l.column),
        };
        let tool_name = t.tool.clone();
        let task = Box::pin(async move {
            let started = Instant::now();
            let call = Unwound(Box::pin(facade.call_until(
                site,
                t.tool,
                t.args,
                t.cancel.clone(),
                deadline,
            )));
            let outcome = tokio::select! {
                o = call => o,
                _ = tokio::time::sleep_until(deadline.into()) => Err(CallFailure::new(
                    ErrorCode::ScriptCancelledError,
                    format!("the detached task ran past its limit of {} ms", limit.as_millis()),
                )),
            };
            let outcome = match outcome {
                Err(f) if t.cancel.is_cancelled() && f.code != ErrorCode::ScriptCancelledError => {
                    Err(CallFailure::new(
                        ErrorCode::ScriptCancelledError,
                        "the detached task was cancelled",
                    ))
                }
                o => o,
            };
            let (status, result, error) = match &outcome {
                Ok(json) => (TaskStatus::Ok, serde_json::from_str(json).ok(), None),
                Err(f) => (
                    if f.code == ErrorCode::ScriptCancelledError {
                        TaskStatus::Cancelled
                    } else {
                        TaskStatus::Error
                    },
                    None,
                    Some(CallError {
                        code: f.code,
                        message: f.message.clone(),
                        stderr: f.stderr.clone(),
                    }),
                ),
            };
            let took = ms(started.elapsed());
            let label = match &outcome {
                Ok(_) => "ok",
                Err(f) if f.code == ErrorCode::ScriptCancelledError => "cancelled",
                Err(f) => f.code.as_str(),
            };
            crate::telemetry::record_tool_call(&tool_name, label, took);
            tasks.finish(&t.id, status, result, error, took);
            if let (Some(o), Some(task)) = (observer, tasks.get(&t.id)) {
                o.0.task_finished(&task);
            }
            // The run may be over; then nobody listens, and that is fine.
            let _ = tx.send(LoopEvent::TaskDone(t.settle, outcome));
        });
        // Polled once here, as a call is, so that the facade's checks and
        // the budget count happen before `tools.spawn.exec` returns; the
        // rest runs on tokio, whose first poll registers its own waker.
        let mut task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = task;
        let _rt = self.starter.tokio.enter();
        let first = catch_unwind(AssertUnwindSafe(|| {
            task.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        }));
        if matches!(first, Ok(Poll::Pending)) {
            self.starter.tokio.spawn(task);
        }
    }

    /// `tools.spawn.exec`: registers and starts a detached task, or says
    /// why not (as JSON the prelude throws from).
    pub(super) fn spawn(&mut self, tool: &str, args: &str, at: Option<Location>) -> String {
        let refuse = |code: ErrorCode, message: String| {
            json!({"error": {"code": code.as_str(), "message": message}}).to_string()
        };
        let Some(tasks) = self.tasks.clone() else {
            return refuse(
                ErrorCode::ToolNotFoundError,
                "detached tasks are not enabled for this run".to_owned(),
            );
        };
        if !self.facade.is_visible(tool) {
            return refuse(
                ErrorCode::ToolNotFoundError,
                self.facade.unknown_tool_message(tool),
            );
        }
        match tasks.register(tool, &self.script_id, self.run_tasks.len() as u32) {
            Err(r) => refuse(ErrorCode::ConcurrencyLimitError, r.0),
            Ok((id, cancel)) => {
                let settle = TASK_SETTLE_BASE + self.run_tasks.len() as u64 + 1;
                self.run_tasks.push(id.clone());
                let task = NewTask {
                    id: id.clone(),
                    settle,
                    tool: tool.to_owned(),
                    args: args.to_owned(),
                    at,
                    cancel,
                };
                self.start_task(task, tasks);
                json!({"id": id, "settle": settle}).to_string()
            }
        }
    }
}

impl Host for RefCell<HostState> {
    fn call(&self, op: &str, a: &str, b: &str) -> String {
        let answer = self.borrow_mut().op(HostOp::decode(op, a, b));
        // A worker process does not wait for a notice's answer.
        debug_assert!(
            answer.is_empty() || !HostOp::NOTICES.contains(&op),
            "notice {op} was answered {answer:?}"
        );
        answer
    }
}
