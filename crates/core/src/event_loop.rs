//! The one event loop every engine runs on.
//!
//! An adapter supplies only engine primitives through [`Engine`]: load the
//! prelude into a fresh context, start the script, drain jobs, settle a tool
//! call, measure memory. [`run_script`] does the rest, the same way for
//! every engine: hand each tool call to the tool facade the moment the
//! script makes it (polled there once, then wherever its waker finds room:
//! see `CallSlot`), block until the next completion or the deadline,
//! settle, repeat; then cancel what is left, wait out the grace period and
//! build the report.

use crate::adapter::{ExecutionRequest, Mode};
use crate::engine::{Engine, EngineFault, EngineSetup, FaultKind, Host, HostHandle, HostOp};
use crate::error::{clamp_location, first_location, sanitize_stack, ErrorCode, Phase, ScriptError};
use crate::error::{ErrorMetadata, Location};
use crate::facade::{CallFailure, CallOutcome, CallSite, ToolFacade};
use crate::limits::Limits;
use crate::report::{CallError, CallStatus, Warning};
use crate::report::{ConsoleLevel, ExecutionReport, Metrics};
use crate::sinks::{ms, ConsoleSink, ProgressSink};
use crate::tasks::{DetachedTasks, TaskStatus};
use crate::tracker::PromiseTracker;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub use harness_abi::{PRELUDE, PRELUDE_FILE};

use crate::body::Body;
/// Lines the wrapper adds before the user's first line.
use crate::body::LINE_OFFSET as WRAPPER_LINE_OFFSET;

/// How the script's own promise ended.
#[derive(Debug, Clone)]
enum Outcome {
    /// Returned; `None` for `undefined`.
    Done(Option<String>),
    /// Rejected or threw; the prelude's description as JSON.
    Failed(String),
}

/// Per-run state the engine's native function talks to.
#[derive(Debug)]
pub struct HostState {
    started: Instant,
    deadline: Instant,
    facade: Arc<ToolFacade>,
    tracker: PromiseTracker,
    console: ConsoleSink,
    progress: ProgressSink,
    /// Starts tool calls as the script makes them.
    starter: Starter,
    /// Calls that finished on their first poll, in the order they were
    /// made, for the loop to settle once the script's jobs have run.
    finished: Vec<(u64, CallOutcome)>,
    outcome: Option<Outcome>,
    observer: Option<crate::adapter::Observer>,
    /// Tool names of dispatched calls, for the observer.
    call_names: std::collections::HashMap<u64, String>,
    /// Calls recorded at most: the budget plus [`REFUSED_CALLS_KEPT`].
    max_attempts: usize,
    /// Calls refused without a record once `max_attempts` was reached.
    calls_dropped: u32,
    /// The run's id, `context.scriptId`.
    script_id: String,
    /// Where `tools.spawn` starts tasks; `None` when it is off.
    tasks: Option<Arc<DetachedTasks>>,
    /// Ids of the tasks this run started, in order.
    run_tasks: Vec<String>,
    /// This run's tasks whose `done` the script may still be waiting on.
    tasks_live: usize,
    /// Lossy conversions of the return value, from the prelude.
    warnings: Vec<Warning>,
}

/// A detached task the script starts.
#[derive(Debug)]
struct NewTask {
    id: String,
    settle: u64,
    tool: String,
    args: String,
    at: Option<Location>,
    cancel: CancellationToken,
}

/// Detached tasks settle their `done` promise under ids from here up, so
/// that they never meet a tool call's id (exact in a JavaScript number).
const TASK_SETTLE_BASE: u64 = 1 << 40;

/// A new run id: `scr_` and 16 random hex digits.
fn new_script_id() -> String {
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
fn random_seed() -> [u32; 4] {
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
    fn op(&mut self, op: HostOp<'_>) -> String {
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
                self.start_call(id, tool, args, at, token);
                id.to_string()
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
    fn record(&mut self, id: u64, outcome: &CallOutcome) -> bool {
        if !self.tracker.complete(id, outcome) {
            return false;
        }
        self.tell_finished(id, outcome.as_ref().err().map(|f| f.code));
        true
    }

    /// Tells the observer that call `id` ended, with `error` if it failed.
    fn tell_finished(&mut self, id: u64, error: Option<ErrorCode>) {
        if let (Some(o), Some(name)) = (self.observer.clone(), self.call_names.remove(&id)) {
            o.0.tool_call_finished(id, &name, error);
        }
    }

    /// Hands a call to the facade the moment the script makes it, so that
    /// it starts (and its budget is counted: `context.budget`) while the
    /// script goes on computing, as a JavaScript tool would. It is polled
    /// once right here, inside the tokio context: most tools (and every
    /// rejection by the facade's checks) finish on that poll, and their
    /// outcome waits in `finished` for the loop to settle after the
    /// script's jobs, so that no promise settles inside the call that made
    /// it. A call still pending goes on in its [`CallSlot`].
    fn start_call(
        &mut self,
        id: u64,
        name: &str,
        args: &str,
        at: Option<Location>,
        token: CancellationToken,
    ) {
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
        let call = Unwound(Box::pin(self.facade.clone().call(
            site,
            name.to_owned(),
            args.to_owned(),
            token,
        )));
        let fut: CallFuture = Box::pin(tracing::Instrument::instrument(
            async move {
                let outcome = call.await;
                let label = match &outcome {
                    Ok(_) => "ok",
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
        match first {
            Some(outcome) => self.finished.push((id, outcome)),
            None => self
                .tracker
                .attach_task(id, crate::tracker::Abort(Box::new(move || slot.abort()))),
        }
    }

    /// Starts a detached task on tokio, under its own deadline and token,
    /// not the run's: it outlives the script. Like a call, it starts the
    /// moment the script asks for it.
    fn start_task(&mut self, t: NewTask, tasks: Arc<DetachedTasks>) {
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
    fn spawn(&mut self, tool: &str, args: &str, at: Option<Location>) -> String {
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

/// A tool call whose panic ends it as a tool failure: a call's in its
/// [`CallSlot`] (its first poll runs inside the script's `call` op), a
/// detached task's instead of leaving the task running and a script
/// awaiting its `done` waiting to its deadline.
struct Unwound<F>(std::pin::Pin<Box<F>>);

impl<F: Future<Output = CallOutcome>> Future for Unwound<F> {
    type Output = CallOutcome;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CallOutcome> {
        let fut = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(p) => p,
            Err(_) => Poll::Ready(Err(CallFailure::new(
                ErrorCode::ToolExecutionError,
                "the tool panicked",
            ))),
        }
    }
}

/// What starting a tool call takes: where its outcome goes, and where it
/// is polled after its first poll ([`CallSlot`]).
#[derive(Debug, Clone)]
struct Starter {
    tx: mpsc::Sender<LoopEvent>,
    /// Set while the run's thread blocks on its event channel.
    loop_waiting: Arc<std::sync::atomic::AtomicBool>,
    tokio: tokio::runtime::Handle,
}

/// Events the worker thread waits on.
#[derive(Debug)]
enum LoopEvent {
    ToolDone(u64, CallOutcome),
    /// A pending tool call was woken while the loop waited: poll it here.
    Poll(Arc<CallSlot>),
    /// A detached task ended: settle its `done` (if the script still runs).
    TaskDone(u64, CallOutcome),
    /// The watchdog saw the deadline pass or the cancel token fire.
    Stop,
}

type CallFuture = std::pin::Pin<Box<dyn Future<Output = CallOutcome> + Send>>;

/// A tool call still pending after its first poll. Its waker hands the
/// next poll to the run's own thread when that thread is waiting for
/// events (one wake-up: the tool's answer reaches the loop directly), and
/// to a tokio worker otherwise, so that a call keeps going while the
/// script computes. Either side polls under the lock; an outcome polled on
/// tokio comes back as [`LoopEvent::ToolDone`].
struct CallSlot {
    id: u64,
    fut: std::sync::Mutex<Option<CallFuture>>,
    /// The run's channel, its waiting flag and tokio.
    to: Starter,
}

impl std::fmt::Debug for CallSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSlot")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl CallSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<CallFuture>> {
        self.fut
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Polls the call once (inside the tokio context the caller entered);
    /// its outcome once it has one, after which the slot is empty. A
    /// tool's panic is its outcome ([`Unwound`]).
    fn poll_once(self: &Arc<Self>) -> Option<CallOutcome> {
        let mut fut = self.lock();
        let f = fut.as_mut()?;
        let waker = Waker::from(self.clone());
        let Poll::Ready(outcome) = f.as_mut().poll(&mut Context::from_waker(&waker)) else {
            return None;
        };
        let done = fut.take();
        drop(fut);
        drop(done);
        Some(outcome)
    }

    /// Drops the call's future: it will not be polled again.
    fn abort(&self) {
        let f = self.lock().take();
        drop(f);
    }
}

impl std::task::Wake for CallSlot {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        // The loop clears the flag before it handles what it received, so
        // a Poll sent while it was set is always read; one spawned while it
        // is clear ends in a ToolDone the loop waits for.
        if self.to.loop_waiting.load(Ordering::Acquire) {
            let _ = self.to.tx.send(LoopEvent::Poll(self.clone()));
            return;
        }
        let armed = Unpolled(Some(self.clone()));
        self.to.tokio.spawn(async move {
            let mut armed = armed;
            let Some(slot) = armed.0.take() else { return };
            if let Some(outcome) = slot.poll_once() {
                let _ = slot.to.tx.send(LoopEvent::ToolDone(slot.id, outcome));
            }
        });
    }
}

/// Ends a call whose poll was spawned on tokio but dropped unrun (the
/// runtime is shutting down), so the loop never waits on a call that can
/// no longer finish.
struct Unpolled(Option<Arc<CallSlot>>);

impl Drop for Unpolled {
    fn drop(&mut self) {
        let Some(slot) = self.0.take() else { return };
        let fut = slot.lock().take();
        if fut.is_some() {
            drop(fut);
            let failure =
                CallFailure::new(ErrorCode::ScriptCancelledError, "the tool call was aborted");
            let _ = slot.to.tx.send(LoopEvent::ToolDone(slot.id, Err(failure)));
        }
    }
}

/// How long a run's thread spins for the next event (a tool's answer)
/// before it blocks. Blocked, it is woken by whoever answers, and on a VM
/// whose idle CPUs halt that wake-up waits 30–40 µs for the CPU
/// (docs/performance.md: a JavaScript tool from Node); spinning keeps the
/// CPU awake for answers that come quickly.
const LOOP_SPIN: Duration = Duration::from_micros(50);

/// Runs inside their main loop in this process.
static DRIVING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The next event within `left`: spun for first, while every run in its
/// loop can have a CPU and another for whoever answers it
/// ([`crate::spin::allowed`], the process boundary's rule too); never
/// under load, where a spin takes the CPU another run needs.
fn recv_spinning(
    rx: &mpsc::Receiver<LoopEvent>,
    left: Duration,
) -> Result<LoopEvent, mpsc::RecvTimeoutError> {
    let start = Instant::now();
    if crate::spin::allowed(&DRIVING) {
        let mut got = None;
        crate::spin::until(LOOP_SPIN.min(left), || match rx.try_recv() {
            Ok(ev) => {
                got = Some(Ok(ev));
                true
            }
            Err(mpsc::TryRecvError::Disconnected) => {
                got = Some(Err(mpsc::RecvTimeoutError::Disconnected));
                true
            }
            Err(mpsc::TryRecvError::Empty) => false,
        });
        if let Some(got) = got {
            return got;
        }
    }
    rx.recv_timeout(left.saturating_sub(start.elapsed()))
}

/// The result of [`run_script`].
#[derive(Debug)]
#[non_exhaustive]
pub struct RunOutput {
    /// The run's report.
    pub report: ExecutionReport,
    /// The engine hit a fault (timeout, memory, stack, internal) and should
    /// not be reused for another run.
    pub engine_tainted: bool,
}

/// The prelude's config for one run: `{"run":"…","static":{…}}`.
///
/// The run's part is one JSON string of fixed length (52 characters):
/// the 128-bit `Math.random` seed as 32 hex digits, then the script id, so
/// that the prelude finds the static part at a fixed offset and reads the
/// run's part with no JSON parse (see prelude.js, `install`). The static
/// part (tools, context, limits) is compared by the prelude as a string
/// and, where it is the last run's, not parsed or built again; here it is
/// serialised again only when its inputs changed ([`StaticConfig`]).
fn prelude_config(request: &ExecutionRequest, facade: &ToolFacade, script_id: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(1024);
    out.push_str(r#"{"run":""#);
    for word in random_seed() {
        for shift in (0..8).rev() {
            out.push(char::from(HEX[(word >> (shift * 4)) as usize & 0xf]));
        }
    }
    // An id of another length would still be read right, through the
    // prelude's JSON path; ids from `new_script_id` are all 20 characters
    // that JSON need not escape.
    debug_assert_eq!(script_id.len(), SCRIPT_ID_LEN);
    if script_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        out.push_str(script_id);
        out.push('"');
    } else {
        let quoted = serde_json::to_string(script_id).unwrap_or_else(|_| "\"\"".to_owned());
        out.push_str(&quoted[1..]);
    }
    out.push_str(r#","static":"#);
    StaticConfig::append(request, facade, &mut out);
    out.push('}');
    out
}

/// Characters in a script id from [`new_script_id`].
const SCRIPT_ID_LEN: usize = 20;

/// The static part of the prelude's config, serialised again only when
/// what it is made of changed.
///
/// Kept per engine thread: the last inputs (visible and sited tools,
/// whether tasks may spawn, the mode, the context and the limits) and
/// their JSON. The JSON is a pure function of those inputs, compared in
/// full, so a run is never shown another request's tools or context; the
/// cache only saves serialising them again (about a tenth of a trivial
/// run's instructions, docs/performance.md). Inputs whose JSON is larger
/// than [`StaticConfig::KEPT_BYTES`] are not kept.
struct StaticConfig {
    tools: Vec<String>,
    sited: Vec<String>,
    spawn: bool,
    mode: Mode,
    context: crate::adapter::ScriptContext,
    limits: Limits,
    json: String,
}

thread_local! {
    static LAST_STATIC: std::cell::RefCell<Option<StaticConfig>> = const { std::cell::RefCell::new(None) };
}

impl StaticConfig {
    const KEPT_BYTES: usize = 16 * 1024;

    fn spawn(request: &ExecutionRequest) -> bool {
        request.tasks.is_some() && request.mode == Mode::Enabled
    }

    fn matches(&self, request: &ExecutionRequest, facade: &ToolFacade) -> bool {
        self.spawn == Self::spawn(request)
            && self.mode == request.mode
            && self.tools == facade.visible_tools()
            && self
                .sited
                .iter()
                .map(String::as_str)
                .eq(facade.sited_tools())
            && self.limits == request.limits
            && self.context == request.context
    }

    /// Appends the static part's JSON for `request` to `out`.
    fn append(request: &ExecutionRequest, facade: &ToolFacade, out: &mut String) {
        let hit = LAST_STATIC.with(|last| {
            let Ok(last) = last.try_borrow() else {
                return false;
            };
            match last.as_ref() {
                Some(last) if last.matches(request, facade) => {
                    out.push_str(&last.json);
                    true
                }
                _ => false,
            }
        });
        if hit {
            return;
        }
        let json = static_json(request, facade);
        out.push_str(&json);
        if json.len() <= Self::KEPT_BYTES {
            let kept = StaticConfig {
                tools: facade.visible_tools().to_vec(),
                sited: facade
                    .sited_tools()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                spawn: Self::spawn(request),
                mode: request.mode,
                context: request.context.clone(),
                limits: request.limits.clone(),
                json,
            };
            LAST_STATIC.with(|last| {
                if let Ok(mut last) = last.try_borrow_mut() {
                    *last = Some(kept);
                }
            });
        }
    }
}

/// Serialises the static part of the prelude's config. Serialised from
/// borrowing structs: building a `json!` tree cost more than the rest of
/// the run's set-up.
fn static_json(request: &ExecutionRequest, facade: &ToolFacade) -> String {
    let l = &request.limits;
    let c = &request.context;
    let mode = match request.mode {
        Mode::Enabled => "enabled",
        Mode::DryRun => "dry-run",
        Mode::Disabled => "disabled",
    };
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Fixed<'a> {
        tools: &'a [String],
        /// The tools whose calls carry a call site.
        sited: Vec<&'a str>,
        spawn: bool,
        line_offset: u32,
        context: Context<'a>,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Context<'a> {
        conversation_id: &'a Option<String>,
        session_id: &'a Option<String>,
        turn_id: &'a Option<String>,
        sandbox: Sandbox<'a>,
        identity: &'a Value,
        working_directory: &'a Option<String>,
        provider: &'a Option<String>,
        model: &'a Option<String>,
        extra: &'a Value,
        approvals_enabled: bool,
        mode: &'a str,
        limits: LimitsView,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sandbox<'a> {
        timeout_ms: u64,
        memory_mb: u64,
        max_concurrent_tool_calls: u32,
        mode: &'a str,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct LimitsView {
        timeout_ms: u64,
        memory_bytes: u64,
        stack_bytes: u64,
        max_source_bytes: u64,
        max_return_bytes: u64,
        max_tool_calls: u32,
        max_concurrent_tool_calls: u32,
        max_console_lines: u32,
        max_progress_events: u32,
    }
    let fixed = Fixed {
        tools: facade.visible_tools(),
        sited: facade.sited_tools(),
        spawn: StaticConfig::spawn(request),
        line_offset: WRAPPER_LINE_OFFSET,
        context: Context {
            conversation_id: &c.conversation_id,
            session_id: &c.session_id,
            turn_id: &c.turn_id,
            sandbox: Sandbox {
                timeout_ms: l.timeout_ms,
                memory_mb: l.memory_bytes / (1024 * 1024),
                max_concurrent_tool_calls: l.max_concurrent_tool_calls,
                mode,
            },
            identity: &c.identity,
            working_directory: &c.working_directory,
            provider: &c.provider,
            model: &c.model,
            extra: &c.extra,
            approvals_enabled: request.mode == Mode::Enabled,
            mode,
            limits: LimitsView {
                timeout_ms: l.timeout_ms,
                memory_bytes: l.memory_bytes,
                stack_bytes: l.stack_bytes,
                max_source_bytes: l.max_source_bytes,
                max_return_bytes: l.max_return_bytes,
                max_tool_calls: l.max_tool_calls,
                max_concurrent_tool_calls: l.max_concurrent_tool_calls,
                max_console_lines: l.max_console_lines,
                max_progress_events: l.max_progress_events,
            },
        },
    };
    serde_json::to_string(&fixed).unwrap_or_default()
}

/// Runs one script on `engine` and reports. `tokio` runs the tool calls.
///
/// The run has four parts, each a function of its own: `new_host` (the
/// per-run state the engine's native function talks to),
/// `LoopControl::drive` (load, start, and the loop of jobs, tool calls and
/// settles until the script settles or is stopped), `wind_down` (cancel
/// what is still pending, give it the grace period) and
/// `LoopControl::conclude` with `final_error` and `build_report` (the
/// report's value, error and records).
pub fn run_script<E: Engine + ?Sized>(
    engine: &mut E,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
) -> RunOutput {
    run(engine, engine_name, request, tokio, Told::Everyone)
}

/// A rehearsal (`Pooled::keep_warm`): the run as any other, to warm the
/// caches, but nobody hears of it: no span, no metrics; the report is
/// dropped. Returns whether the engine is tainted.
pub(crate) fn rehearse<E: Engine + ?Sized>(
    engine: &mut E,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
) -> bool {
    run(engine, engine_name, request, tokio, Told::Nobody).engine_tainted
}

/// Whose business a run is: telemetry's (a script's run) or nobody's (a
/// rehearsal).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Told {
    Everyone,
    Nobody,
}

fn run<E: Engine + ?Sized>(
    engine: &mut E,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
    told: Told,
) -> RunOutput {
    let started = Instant::now();
    let limits = request.limits.clone();
    if let Err(e) = crate::source::check_size(request.source.len(), limits.max_source_bytes) {
        return RunOutput {
            report: ExecutionReport::failed(engine_name, e),
            engine_tainted: false,
        };
    }
    let deadline = started + limits.timeout();
    let cancel = request.cancel.clone();
    let script_id = new_script_id();
    let facade = Arc::new(ToolFacade::new(&request, deadline, &script_id));
    let (tx, rx) = mpsc::channel::<LoopEvent>();
    let starter = Starter {
        tx: tx.clone(),
        loop_waiting: Arc::default(),
        tokio: tokio.clone(),
    };
    let loop_waiting = starter.loop_waiting.clone();
    let host = new_host(
        &request,
        &facade,
        (started, deadline),
        script_id.clone(),
        starter,
    );

    let config = prelude_config(&request, &facade, &script_id);
    // One span per run (no source, no arguments at info level); tool calls
    // are spans inside it. A host's span in the request is the parent.
    let span = match told {
        Told::Nobody => tracing::Span::none(),
        Told::Everyone => tracing::info_span!(
            parent: request.trace.as_ref().and_then(|s| s.id()),
            "script_run",
            script_id = %script_id,
            engine = engine_name,
            isolation = request.limits.isolation.map_or("", |i| i.as_str()),
            provider = request.context.provider.as_deref().unwrap_or(""),
            outcome = tracing::field::Empty,
        ),
    };
    let _entered = span.enter();
    let setup = EngineSetup {
        prelude: PRELUDE,
        config_json: &config,
        limits: &limits,
        deadline,
        cancel: &cancel,
    };

    let mut ctl = LoopControl {
        engine,
        host: host.clone(),
        tx,
        tokio,
        deadline,
        cancel: cancel.clone(),
        watch: None,
        loop_waiting,
    };
    let end = ctl.drive(&setup, &request.source, &rx);
    let memory_used = ctl.engine.memory_used();
    let fuel_consumed = ctl.engine.fuel_consumed();
    let context_id = ctl.engine.context_id();
    let memory_exhausted = ctl.engine.memory_exhausted();
    let pending_at_end = host.borrow().tracker.pending_count() as u32;
    let timed_out = matches!(end, End::Timeout);
    let orphans = wind_down(&host, &rx, &limits, tokio);
    if !orphans.is_empty() {
        tracing::warn!(orphans = orphans.len(), calls = %orphans.join(", "), "tool calls left pending at the end of the script were cancelled");
    }

    // An engine that hit a fault, was stopped, or ran out of memory (even
    // if the script caught it) is not trusted with another run.
    let engine_tainted =
        memory_exhausted || matches!(end, End::Fault(_) | End::Timeout | End::Cancelled);
    let (value, error) = ctl.conclude(end, &limits, memory_exhausted, &request.source);
    ctl.engine.finished();
    let (value, error) = final_error(value, error, memory_exhausted, &orphans, &limits);
    // A stack overflow the script's promise rejected with (caught and
    // rethrown, or uncaught in an async frame) is a fault too: the engine
    // hit its stack limit in this context.
    let engine_tainted = engine_tainted
        || error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::StackOverflowError && e.phase != Phase::Parsing);

    // The engine may keep the host state alive (its native function holds
    // it until the context is collected); the observer must not outlive
    // the run.
    host.borrow_mut().observer = None;
    let error = error.map(|mut e| {
        let records = host.borrow().tracker.records();
        let finished = records
            .iter()
            .filter(|r| matches!(r.status, CallStatus::Ok | CallStatus::Error))
            .count() as u32;
        e.metadata = Some(ErrorMetadata {
            elapsed_ms: ms(started.elapsed()),
            completed_tools: finished,
            pending_tools: pending_at_end,
            partial_results: timed_out && finished > 0,
        });
        e
    });
    let mut report = build_report(
        &host.borrow(),
        &facade,
        engine_name,
        started,
        (value, error),
        (memory_used, fuel_consumed),
    );
    report.context_id = context_id;
    if told == Told::Everyone {
        crate::telemetry::record_run(&report, orphans.len());
    }
    span.record("outcome", crate::telemetry::outcome(report.code()));
    RunOutput {
        report,
        engine_tainted,
    }
}

/// The per-run state the engine's native function talks to.
fn new_host(
    request: &ExecutionRequest,
    facade: &Arc<ToolFacade>,
    (started, deadline): (Instant, Instant),
    script_id: String,
    starter: Starter,
) -> Rc<RefCell<HostState>> {
    let limits = &request.limits;
    Rc::new(RefCell::new(HostState {
        started,
        deadline,
        facade: facade.clone(),
        tracker: PromiseTracker::default(),
        console: ConsoleSink::new(limits),
        progress: ProgressSink::new(limits),
        starter,
        finished: Vec::new(),
        outcome: None,
        observer: request.observer.clone(),
        call_names: std::collections::HashMap::new(),
        max_attempts: (limits.max_tool_calls as usize).saturating_add(REFUSED_CALLS_KEPT),
        calls_dropped: 0,
        script_id,
        tasks: (request.mode == Mode::Enabled)
            .then(|| request.tasks.clone())
            .flatten(),
        run_tasks: Vec::new(),
        tasks_live: 0,
        warnings: Vec::new(),
    }))
}

/// After the loop: cancels the calls still pending, waits out the grace
/// period for them, and abandons the rest. Returns the orphans: calls the
/// script neither awaited nor let go of (`tool#id`).
fn wind_down(
    host: &Rc<RefCell<HostState>>,
    rx: &mpsc::Receiver<LoopEvent>,
    limits: &Limits,
    tokio: &tokio::runtime::Handle,
) -> Vec<String> {
    // Calls that finished on their first poll, inside the op, after the
    // loop last looked (the script faulted, timed out or was cancelled in
    // that job): they ran, so they are recorded as they ended, not as
    // orphans.
    let finished = std::mem::take(&mut host.borrow_mut().finished);
    for (id, o) in finished {
        host.borrow_mut().record(id, &o);
    }
    let orphans = host.borrow().tracker.orphans();
    host.borrow().tracker.cancel_all_pending();
    let grace_end = Instant::now() + limits.orphan_grace();
    while host.borrow().tracker.pending_count() > 0 {
        let left = grace_end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(left) {
            Ok(LoopEvent::ToolDone(id, o)) => {
                host.borrow_mut().record(id, &o);
            }
            // Sent while the main loop still waited.
            Ok(LoopEvent::Poll(slot)) => {
                let outcome = {
                    let _rt = tokio.enter();
                    slot.poll_once()
                };
                if let Some(o) = outcome {
                    host.borrow_mut().record(slot.id, &o);
                }
            }
            Ok(LoopEvent::Stop | LoopEvent::TaskDone(..)) => {}
            Err(_) => break,
        }
    }
    let mut h = host.borrow_mut();
    for id in h.tracker.detach_remaining() {
        h.tell_finished(id, Some(ErrorCode::DetachedPromiseError));
    }
    orphans
}

/// The rules that override how the script itself ended: hitting the
/// memory limit fails the run on every engine (even if the script caught
/// the error and returned), and a script that returned with calls still
/// pending fails with DetachedPromiseError.
fn final_error(
    value: Option<Value>,
    error: Option<ScriptError>,
    memory_exhausted: bool,
    orphans: &[String],
    limits: &Limits,
) -> (Option<Value>, Option<ScriptError>) {
    if memory_exhausted && error.as_ref().map(|e| e.code) != Some(ErrorCode::ScriptMemoryError) {
        let oom = EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory");
        return (None, Some(fault_error(&oom, limits)));
    }
    if error.is_none() && !orphans.is_empty() {
        let error = ScriptError::new(
            ErrorCode::DetachedPromiseError,
            Phase::Finalizing,
            format!(
                "the script finished while {} tool call(s) were still pending and not awaited ({}); \
                 they were cancelled. Await every tool call, e.g. with Promise.all",
                orphans.len(),
                orphans.join(", ")
            ),
        );
        return (value, Some(error));
    }
    (value, error)
}

/// The report of a finished run.
fn build_report(
    h: &HostState,
    facade: &ToolFacade,
    engine_name: &str,
    started: Instant,
    (value, error): (Option<Value>, Option<ScriptError>),
    (memory_used, fuel_consumed): (Option<u64>, Option<u64>),
) -> ExecutionReport {
    let tool_calls = h.tracker.records();
    ExecutionReport {
        ok: error.is_none(),
        value,
        error,
        console: h.console.entries.clone(),
        console_dropped: h.console.dropped,
        tool_calls_dropped: h.calls_dropped,
        approvals: facade.approval_records(),
        progress: h.progress.events.clone(),
        progress_dropped: h.progress.dropped,
        script_id: h.script_id.clone(),
        detached_tasks: match &h.tasks {
            Some(t) => h.run_tasks.iter().filter_map(|id| t.get(id)).collect(),
            None => Vec::new(),
        },
        warnings: h.warnings.clone(),
        retried: false,
        context_id: None,
        metrics: Metrics {
            engine: engine_name.to_owned(),
            duration_ms: ms(started.elapsed()),
            tool_calls: tool_calls.len() as u32,
            memory_used_bytes: memory_used,
            fuel_consumed,
        },
        tool_calls,
    }
}

/// Runs `request` on an engine an adapter lent for one run (or reports
/// why there is none), hands the report to `respond` at once, and returns
/// whether the engine is tainted: the body of every in-process adapter's
/// per-run job.
pub fn run_lent<E: Engine + ?Sized>(
    engine: Result<&mut E, EngineFault>,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
    respond: impl FnOnce(ExecutionReport),
) -> bool {
    match engine {
        Ok(engine) => {
            let out = run_script(engine, engine_name, request, tokio);
            respond(out.report);
            out.engine_tainted
        }
        Err(f) => {
            respond(ExecutionReport::failed(
                engine_name,
                ScriptError::internal(f.message),
            ));
            false
        }
    }
}

/// The prelude's description of a failed run (the JSON of its `fail`
/// notice), read in one place for the event loop
/// (`LoopControl::described_error`) and the process worker, which
/// classifies ahead the pairs the host will ask about. A field that is
/// missing or not of its type reads as empty.
pub(crate) struct Failure(Value);

impl Failure {
    /// Not JSON reads as a description with every field empty.
    pub(crate) fn parse(description: &str) -> Failure {
        Failure(serde_json::from_str(description).unwrap_or(Value::Null))
    }

    fn text(&self, key: &str) -> &str {
        self.0.get(key).and_then(Value::as_str).unwrap_or("")
    }

    fn flag(&self, key: &str) -> bool {
        self.0.get(key).and_then(Value::as_bool) == Some(true)
    }

    /// The thrown error's name and message.
    fn error(&self) -> (&str, &str) {
        (self.text("name"), self.text("message"))
    }

    /// For a return value that could not be serialised, the error that
    /// stopped it (its name and message).
    fn serialization_error(&self) -> Option<(&str, &str)> {
        self.flag("serialization")
            .then(|| (self.text("error_name"), self.text("error_message")))
    }

    /// Every name and message pair `LoopControl::described_error` may ask
    /// the engine to classify; none where the description is not JSON.
    pub(crate) fn classified_pairs(&self) -> Vec<(String, String)> {
        if self.0.is_null() {
            return Vec::new();
        }
        let pair = |(n, m): (&str, &str)| (n.to_owned(), m.to_owned());
        std::iter::once(self.error())
            .chain(self.serialization_error())
            .map(pair)
            .collect()
    }
}

/// Whether a fault from [`Engine::start`] only says that the script did
/// not compile (a syntax error, or nesting deeper than the parser's stack;
/// script code runs inside the prelude's async wrapper, so a stack
/// overflow escaping `start` happened while parsing): nothing of the
/// script ran, and the engine may serve the next run. The one rule for
/// the in-process pool and for worker processes
/// ([`crate::process`]), which must agree on when an engine is tainted.
pub(crate) fn is_parse_failure(f: &EngineFault) -> bool {
    matches!(f.kind, FaultKind::Syntax | FaultKind::StackOverflow)
}

/// How the main loop ended.
#[derive(Debug)]
enum End {
    Settled,
    Fault(EngineFault),
    /// Compiling the script failed (syntax, or nesting too deep).
    ParseFailed(EngineFault),
    /// The source is not one function body ([`Body::parse`]); no engine saw it.
    Refused(ScriptError),
    Timeout,
    Cancelled,
    Deadlock,
}

struct LoopControl<'a, E: Engine + ?Sized> {
    engine: &'a mut E,
    host: Rc<RefCell<HostState>>,
    tx: mpsc::Sender<LoopEvent>,
    tokio: &'a tokio::runtime::Handle,
    deadline: Instant,
    cancel: CancellationToken,
    /// Registered with the watchdog for the whole run.
    watch: Option<crate::watchdog::Watch>,
    /// Set while the loop blocks on its event channel ([`CallSlot`]).
    loop_waiting: Arc<std::sync::atomic::AtomicBool>,
}

impl<E: Engine + ?Sized> LoopControl<'_, E> {
    fn drive(
        &mut self,
        setup: &EngineSetup<'_>,
        source: &str,
        rx: &mpsc::Receiver<LoopEvent>,
    ) -> End {
        let _driving = crate::spin::Counted::begin(&DRIVING);
        // Nothing reaches an engine but a source parsed as one function
        // body: a source that would close its wrapper never runs.
        let body = match Body::parse(source) {
            Ok(body) => body,
            Err(e) => return End::Refused(e),
        };
        if let Err(f) = self.engine.load(setup, self.host.clone() as HostHandle) {
            return self.fault_end(f);
        }
        let stopper = self.engine.stopper();
        let tx = self.tx.clone();
        let at_deadline = crate::pool::take_at_deadline();
        self.watch = Some(crate::watchdog::watch(
            self.deadline,
            self.cancel.clone(),
            move || {
                if let Some(stop) = stopper {
                    stop();
                }
                let _ = tx.send(LoopEvent::Stop);
                if let Some(f) = at_deadline {
                    f();
                }
            },
        ));
        if let Err(f) = self.engine.start(&body) {
            // Script code runs inside the prelude's async wrapper, so a
            // stack overflow escaping `start` happened while parsing.
            return if is_parse_failure(&f) {
                End::ParseFailed(f)
            } else {
                self.fault_end(f)
            };
        }
        loop {
            if let Err(f) = self.engine.run_jobs() {
                return self.fault_end(f);
            }
            let finished = self.finished_calls();
            if !finished.is_empty() {
                for (id, outcome) in finished {
                    if let Err(f) = self.complete(id, outcome) {
                        return self.fault_end(f);
                    }
                }
                // A script looping over calls that finish inline never
                // waits below, so check the deadline and cancel here too.
                if self.cancel.is_cancelled() {
                    return End::Cancelled;
                }
                if Instant::now() >= self.deadline {
                    return End::Timeout;
                }
                // Their promises settled: let the script react first.
                continue;
            }
            let (settled, pending) = {
                let h = self.host.borrow();
                (
                    h.outcome.is_some(),
                    h.tracker.pending_count() + h.tasks_live,
                )
            };
            if settled {
                return End::Settled;
            }
            if pending == 0 {
                return self.stalled();
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return End::Timeout;
            }
            self.loop_waiting
                .store(true, std::sync::atomic::Ordering::Release);
            let received = recv_spinning(rx, left);
            self.loop_waiting
                .store(false, std::sync::atomic::Ordering::Release);
            let first = match received {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => return End::Timeout,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return End::Fault(EngineFault::new(
                        FaultKind::Internal,
                        "Error",
                        "event channel closed",
                    ))
                }
            };
            // Take everything that is ready before running jobs again.
            let mut next = Some(first);
            while let Some(ev) = next.take().or_else(|| rx.try_recv().ok()) {
                match ev {
                    LoopEvent::Stop => {
                        if self.cancel.is_cancelled() {
                            return End::Cancelled;
                        }
                        if Instant::now() >= self.deadline {
                            return End::Timeout;
                        }
                    }
                    LoopEvent::ToolDone(id, outcome) => {
                        if let Err(f) = self.complete(id, outcome) {
                            return self.fault_end(f);
                        }
                    }
                    LoopEvent::Poll(slot) => {
                        let outcome = {
                            let _rt = self.tokio.enter();
                            slot.poll_once()
                        };
                        if let Some(outcome) = outcome {
                            if let Err(f) = self.complete(slot.id, outcome) {
                                return self.fault_end(f);
                            }
                        }
                    }
                    LoopEvent::TaskDone(settle, outcome) => {
                        {
                            let mut h = self.host.borrow_mut();
                            h.tasks_live = h.tasks_live.saturating_sub(1);
                        }
                        if let Err(f) = self.settle(settle, &outcome) {
                            return self.fault_end(f);
                        }
                    }
                }
            }
        }
    }

    /// Nothing is pending and the script has not settled. Usually the
    /// script awaits a promise nothing can settle; but an engine may also
    /// swallow its own interrupt or out-of-memory error into an unobserved
    /// promise (quickjs-ng does, inside promise reaction jobs), so look at
    /// why the engine stopped first.
    fn stalled(&mut self) -> End {
        if self.engine.memory_exhausted() {
            return End::Fault(EngineFault::new(
                FaultKind::OutOfMemory,
                "InternalError",
                "out of memory",
            ));
        }
        if self.cancel.is_cancelled() {
            return End::Cancelled;
        }
        if Instant::now() >= self.deadline {
            return End::Timeout;
        }
        End::Deadlock
    }

    fn fault_end(&mut self, mut f: EngineFault) -> End {
        // Whatever the engine threw once its heap is exhausted (often a bare
        // value, or an interrupt the engine uses to stop the script) is an
        // out-of-memory.
        if matches!(
            f.kind,
            FaultKind::Interrupted | FaultKind::Thrown | FaultKind::Internal
        ) && self.engine.memory_exhausted()
        {
            f.kind = FaultKind::OutOfMemory;
        }
        if f.kind == FaultKind::Interrupted {
            if self.cancel.is_cancelled() {
                return End::Cancelled;
            }
            if Instant::now() >= self.deadline {
                return End::Timeout;
            }
        }
        End::Fault(f)
    }

    /// The calls that finished on their first poll since the last look
    /// (they were started as the script made them: [`HostState::start_call`]).
    fn finished_calls(&mut self) -> Vec<(u64, CallOutcome)> {
        std::mem::take(&mut self.host.borrow_mut().finished)
    }

    fn settle(&mut self, id: u64, outcome: &CallOutcome) -> Result<(), EngineFault> {
        match outcome {
            Ok(json) => self.engine.settle(id, true, json),
            Err(f) => self.engine.settle(id, false, &f.payload()),
        }
    }

    /// Records a finished call and settles its promise in the engine.
    fn complete(&mut self, id: u64, outcome: CallOutcome) -> Result<(), EngineFault> {
        if !self.host.borrow_mut().record(id, &outcome) {
            return Ok(());
        }
        self.settle(id, &outcome)
    }

    /// Turns how the loop ended into the report's value and error.
    fn conclude(
        &self,
        end: End,
        limits: &Limits,
        memory_exhausted: bool,
        source: &str,
    ) -> (Option<Value>, Option<ScriptError>) {
        match end {
            End::Timeout => (None, Some(timeout_error(limits))),
            End::Cancelled => (None, Some(cancelled_error())),
            End::Deadlock => (
                None,
                Some(ScriptError::new(
                    ErrorCode::ScriptRuntimeError,
                    Phase::Executing,
                    "the script is waiting on a promise that nothing can settle \
                     (no tool call is pending and there are no timers)",
                )),
            ),
            End::ParseFailed(f) => (None, Some(parse_error(&f, source))),
            End::Refused(e) => (None, Some(e)),
            End::Fault(f) => (None, Some(fault_error(&f, limits))),
            End::Settled => {
                let outcome = self.host.borrow().outcome.clone();
                match outcome {
                    Some(Outcome::Done(None)) => (None, None),
                    Some(Outcome::Done(Some(json))) => parse_return(&json, limits),
                    Some(Outcome::Failed(desc)) => (
                        None,
                        Some(self.described_error(&desc, limits, memory_exhausted)),
                    ),
                    None => (
                        None,
                        Some(ScriptError::internal("script settled without an outcome")),
                    ),
                }
            }
        }
    }

    fn described_error(&self, desc: &str, limits: &Limits, memory_exhausted: bool) -> ScriptError {
        let failure = Failure::parse(desc);
        let d = &failure.0;
        let s = |k: &str| failure.text(k).to_owned();
        let non_error = failure.flag("non_error");
        if memory_exhausted {
            return self.kind_error(
                FaultKind::OutOfMemory,
                "InternalError",
                "out of memory",
                limits,
            );
        }
        let stack = sanitize_stack(&s("stack"), WRAPPER_LINE_OFFSET);
        if let Some((error_name, error_message)) = failure.serialization_error() {
            match self.engine.classify(error_name, error_message) {
                FaultKind::Thrown | FaultKind::Syntax => {
                    return ScriptError::new(
                        ErrorCode::SerializationError,
                        Phase::Finalizing,
                        s("message"),
                    )
                }
                kind => return self.kind_error(kind, error_name, error_message, limits),
            }
        }
        if failure.flag("host") {
            if let Some(code) = ErrorCode::parse(&s("code")) {
                let mut e =
                    ScriptError::new(code, Phase::Executing, s("message")).with_stack(stack);
                if let Some(tool) = d.get("tool").and_then(Value::as_str) {
                    e = e.with_tool(tool, d.get("call_id").and_then(Value::as_u64));
                }
                e.stderr = d.get("stderr").and_then(Value::as_str).map(str::to_owned);
                return e;
            }
        }
        let (name, message) = failure.error();
        let (name, message) = (name.to_owned(), message.to_owned());
        let kind = match self.engine.classify(&name, &message) {
            // Only the host knows whether it stopped the run: a script's
            // own `throw new InternalError('interrupted')` is its error.
            FaultKind::Interrupted
                if !self.cancel.is_cancelled() && Instant::now() < self.deadline =>
            {
                FaultKind::Thrown
            }
            kind => kind,
        };
        match kind {
            FaultKind::Thrown | FaultKind::Syntax => {
                let message = if non_error {
                    message
                } else {
                    uncaught(&name, &message)
                };
                ScriptError::new(ErrorCode::ScriptRuntimeError, Phase::Executing, message)
                    .with_name(name)
                    .with_stack(stack)
            }
            kind => self
                .kind_error(kind, &name, &message, limits)
                .with_stack(stack),
        }
    }

    fn kind_error(
        &self,
        kind: FaultKind,
        name: &str,
        message: &str,
        limits: &Limits,
    ) -> ScriptError {
        if kind == FaultKind::Interrupted {
            if self.cancel.is_cancelled() {
                return cancelled_error();
            }
            return timeout_error(limits);
        }
        fault_error(
            &EngineFault {
                kind,
                name: name.to_owned(),
                message: message.to_owned(),
                stack: None,
            },
            limits,
        )
    }
}

/// The error for a script that did not compile: nesting too deep for the
/// parser is StackOverflowError, running out of memory ScriptMemoryError,
/// anything else a [`syntax_error`]; all in phase `parsing`.
pub fn parse_error(f: &EngineFault, source: &str) -> ScriptError {
    match f.kind {
        FaultKind::StackOverflow => ScriptError::new(
            ErrorCode::StackOverflowError,
            Phase::Parsing,
            "the script is nested too deeply to parse",
        ),
        FaultKind::OutOfMemory => ScriptError::new(
            ErrorCode::ScriptMemoryError,
            Phase::Parsing,
            "out of memory while parsing the script",
        ),
        _ => syntax_error(f, source),
    }
}

/// A ScriptSyntaxError from an engine's compile fault: the location comes
/// from the engine's stack, shifted past the wrapper and kept inside the
/// user's source.
pub fn syntax_error(f: &EngineFault, source: &str) -> ScriptError {
    let raw = f
        .stack
        .as_deref()
        .and_then(|s| first_location(s, WRAPPER_LINE_OFFSET));
    let loc = raw.map(|l| clamp_location(l, source));
    // Past the user's last line the engine is complaining about the
    // wrapper's closing `})`: the script itself ended too early.
    let detail = if raw != loc {
        format!(
            "unexpected end of script: something is not closed or finished ({})",
            f.message
        )
    } else {
        f.message.clone()
    };
    let message = match loc {
        Some(l) => format!("{detail} (script.js:{}:{})", l.line, l.column),
        None => detail,
    };
    ScriptError::new(ErrorCode::ScriptSyntaxError, Phase::Parsing, message)
        .with_name("SyntaxError")
        .with_location(loc)
}

fn timeout_error(limits: &Limits) -> ScriptError {
    ScriptError::new(
        ErrorCode::ScriptTimeoutError,
        Phase::Executing,
        format!("script exceeded its time limit of {} ms", limits.timeout_ms),
    )
}

fn cancelled_error() -> ScriptError {
    ScriptError::new(
        ErrorCode::ScriptCancelledError,
        Phase::Executing,
        "the run was cancelled",
    )
}

/// What the report adds to an uncaught write to a frozen object, for the
/// model that reads it: which objects the harness freezes, and the fix.
/// The script's own `e.message` is unchanged.
const FROZEN_HINT: &str = " (a frozen object: tool results, `context`, `globalThis` and the \
     shared realm's built-ins are frozen; change a copy, e.g. `{ ...obj }` or `[...arr]`)";

/// Whether an uncaught error is a write to a frozen (non-extensible,
/// read-only or non-configurable) object, as each engine words it:
/// QuickJS `object is not extensible`, `'a' is read-only`, `could not
/// delete property`; Boa `cannot set non-writable property: a`, `cannot
/// redefine property: a`, `Cannot delete property`, `can't set prototype
/// of this object`; V8 `Cannot add property a, object is not extensible`,
/// `Cannot assign to read only property 'a' of object`.
fn frozen_write(name: &str, message: &str) -> bool {
    const WORDINGS: &[&str] = &[
        "object is not extensible",
        "is read-only",
        "read only property",
        "could not delete property",
        "cannot delete property",
        "cannot set non-writable property",
        "cannot redefine property",
        "can't set prototype of this object",
    ];
    if name != "TypeError" || message.len() > 500 {
        return false;
    }
    let message = message.to_ascii_lowercase();
    WORDINGS.iter().any(|w| message.contains(w))
}

/// The report's message for an uncaught error: `Uncaught TypeError: …`,
/// with [`FROZEN_HINT`] after a write to a frozen object.
fn uncaught(name: &str, message: &str) -> String {
    let hint = if frozen_write(name, message) {
        FROZEN_HINT
    } else {
        ""
    };
    format!("Uncaught {name}: {message}{hint}")
}

fn fault_error(f: &EngineFault, limits: &Limits) -> ScriptError {
    let stack = f
        .stack
        .as_deref()
        .and_then(|s| sanitize_stack(s, WRAPPER_LINE_OFFSET));
    match f.kind {
        FaultKind::OutOfMemory => ScriptError::new(
            ErrorCode::ScriptMemoryError,
            Phase::Executing,
            format!(
                "script exceeded its memory limit of {} bytes",
                limits.memory_bytes
            ),
        ),
        FaultKind::StackOverflow => ScriptError::new(
            ErrorCode::StackOverflowError,
            Phase::Executing,
            format!(
                "maximum call stack size exceeded (stack limit {} bytes)",
                limits.stack_bytes
            ),
        )
        .with_stack(stack),
        FaultKind::Interrupted => {
            ScriptError::internal("the engine was interrupted for no known reason")
        }
        FaultKind::OutOfFuel => ScriptError::new(
            ErrorCode::ScriptTimeoutError,
            Phase::Executing,
            match limits.fuel {
                Some(n) => format!("script ran out of fuel (its compute budget of {n} units)"),
                None => "script ran out of fuel".to_owned(),
            },
        ),
        FaultKind::Syntax => ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            f.message.clone(),
        )
        .with_name("SyntaxError"),
        FaultKind::Thrown => ScriptError::new(
            ErrorCode::ScriptRuntimeError,
            Phase::Executing,
            uncaught(&f.name, &f.message),
        )
        .with_name(f.name.clone())
        .with_stack(stack),
        FaultKind::Internal => ScriptError::internal(format!("engine failure: {}", f.message)),
    }
}

fn parse_return(json: &str, limits: &Limits) -> (Option<Value>, Option<ScriptError>) {
    if json.len() as u64 > limits.max_return_bytes {
        return (
            None,
            Some(ScriptError::new(
                ErrorCode::ReturnValueTooLargeError,
                Phase::Finalizing,
                format!(
                    "the return value is {} bytes as JSON; the limit is {} bytes",
                    json.len(),
                    limits.max_return_bytes
                ),
            )),
        );
    }
    match serde_json::from_str::<Value>(json) {
        Ok(v) => (Some(v), None),
        Err(e) => (
            None,
            Some(ScriptError::new(
                ErrorCode::SerializationError,
                Phase::Finalizing,
                format!("the return value could not be read back as JSON: {e}"),
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(
        tokio: &tokio::runtime::Runtime,
        waiting: bool,
    ) -> (Arc<CallSlot>, mpsc::Receiver<LoopEvent>) {
        let (tx, rx) = mpsc::channel();
        let fut: CallFuture = Box::pin(async { Ok("1".to_owned()) });
        let slot = Arc::new(CallSlot {
            id: 7,
            fut: std::sync::Mutex::new(Some(fut)),
            to: Starter {
                tx,
                loop_waiting: Arc::new(std::sync::atomic::AtomicBool::new(waiting)),
                tokio: tokio.handle().clone(),
            },
        });
        (slot, rx)
    }

    /// A woken call goes to the loop while it waits, to tokio otherwise;
    /// either way exactly one outcome comes back.
    #[test]
    fn a_woken_call_is_polled_by_whoever_is_free() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let (s, rx) = slot(&rt, true);
        Waker::from(s.clone()).wake_by_ref();
        let Ok(LoopEvent::Poll(p)) = rx.recv_timeout(Duration::from_secs(5)) else {
            panic!("the waiting loop gets the poll");
        };
        assert_eq!(p.poll_once().map(|o| o.ok()), Some(Some("1".to_owned())));
        assert!(p.poll_once().is_none(), "the slot is empty once answered");

        let (s, rx) = slot(&rt, false);
        Waker::from(s).wake();
        let Ok(LoopEvent::ToolDone(7, Ok(v))) = rx.recv_timeout(Duration::from_secs(5)) else {
            panic!("tokio polls it and sends the outcome");
        };
        assert_eq!(v, "1");
    }

    /// A poll spawned on a runtime that has shut down is never run: the
    /// call ends as aborted instead of leaving the loop to its deadline.
    #[test]
    fn a_poll_dropped_unrun_ends_the_call() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let (s, rx) = slot(&rt, false);
        rt.shutdown_background();
        Waker::from(s.clone()).wake();
        let Ok(LoopEvent::ToolDone(7, Err(f))) = rx.recv_timeout(Duration::from_secs(5)) else {
            panic!("the call ends");
        };
        assert_eq!(f.code, ErrorCode::ScriptCancelledError);
        assert!(s.poll_once().is_none(), "its future is gone");
    }

    /// The static part of the prelude's config is the same JSON, served
    /// from the thread's cache or serialised again, for any sequence of
    /// requests: one that differs in a tool, the allowlist, a context
    /// field, a limit or the mode is never shown the last one's. The run's
    /// part is the seed's 32 hex digits and the id, at fixed offsets.
    #[test]
    fn the_prelude_config_is_the_requests_own_whatever_ran_before() {
        use crate::tool::{Allowlist, FnTool, ToolRegistry};
        let mut registry = ToolRegistry::new();
        for name in ["alpha", "beta"] {
            registry
                .register(FnTool::new(
                    name,
                    "t",
                    json!({"type": "object"}),
                    |a, _| async move { Ok(a) },
                ))
                .unwrap();
        }
        let registry = Arc::new(registry);
        let base = || {
            let mut r = ExecutionRequest::new("return 1");
            r.tools.registry = registry.clone();
            r
        };
        let mut only_alpha = base();
        only_alpha.tools.allow = Allowlist::Only(["alpha".to_owned()].into());
        let mut other_model = base();
        other_model.context.model = Some("m2".to_owned());
        let mut other_extra = base();
        other_extra.context.extra = json!({"k": [1, 2]});
        let mut other_limit = base();
        other_limit.limits.max_tool_calls += 1;
        let mut dry = base();
        dry.mode = Mode::DryRun;
        let mut dry_again = base();
        dry_again.mode = Mode::DryRun;
        let mut unregistered = ExecutionRequest::new("return 1");
        unregistered.context.model = Some("m2".to_owned());
        let requests = [
            base(),
            base(),
            only_alpha,
            base(),
            other_model,
            other_extra,
            base(),
            other_limit,
            dry,
            dry_again,
            unregistered,
            base(),
        ];
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = std::collections::HashSet::new();
        for (i, request) in requests.iter().enumerate() {
            let facade = ToolFacade::new(request, deadline, "scr_0123456789abcdef");
            let config = prelude_config(request, &facade, "scr_0123456789abcdef");
            let head = r#"{"run":""#;
            let mark = r#"","static":"#;
            assert!(config.starts_with(head), "{config}");
            assert_eq!(
                &config[head.len() + 52..head.len() + 52 + mark.len()],
                mark,
                "{config}"
            );
            let parsed: Value = serde_json::from_str(&config).expect("the config is JSON");
            let run = parsed["run"].as_str().unwrap();
            assert!(run[..32].bytes().all(|b| b.is_ascii_hexdigit()), "{run}");
            assert_eq!(&run[32..], "scr_0123456789abcdef");
            assert!(seen.insert(run[..32].to_owned()), "a seed repeated: {run}");
            let fixed = &config[head.len() + 52 + mark.len()..config.len() - 1];
            assert_eq!(fixed, static_json(request, &facade), "request {i}");
        }
        let tools = |i: usize| {
            let f = ToolFacade::new(&requests[i], deadline, "scr_0123456789abcdef");
            serde_json::from_str::<Value>(&prelude_config(&requests[i], &f, "scr_0123456789abcdef"))
                .unwrap()["static"]["tools"]
                .clone()
        };
        assert_eq!(tools(0), json!(["alpha", "beta"]));
        assert_eq!(tools(2), json!(["alpha"]));
        assert_eq!(tools(0), json!(["alpha", "beta"]));
        assert_eq!(tools(10), json!([]));
        // The cache is in use: it holds the last request's inputs.
        let kept = LAST_STATIC.with(|l| l.borrow().as_ref().map(|c| c.tools.clone()));
        assert_eq!(kept, Some(Vec::new()), "the unregistered request's tools");
    }

    /// Each engine's words for a write to a frozen object get the hint;
    /// other errors, and other names, do not.
    #[test]
    fn frozen_writes_get_a_hint() {
        for message in [
            "object is not extensible",
            "'a' is read-only",
            "could not delete property",
            "cannot set non-writable property: a",
            "cannot redefine property: c",
            "Cannot delete property",
            "can't set prototype of this object",
            "Cannot add property a, object is not extensible",
            "Cannot assign to read only property 'a' of object '#<Object>'",
        ] {
            let m = uncaught("TypeError", message);
            assert_eq!(m, format!("Uncaught TypeError: {message}{FROZEN_HINT}"));
        }
        assert_eq!(
            uncaught("TypeError", "x is not a function"),
            "Uncaught TypeError: x is not a function"
        );
        assert_eq!(
            uncaught("Error", "object is not extensible"),
            "Uncaught Error: object is not extensible"
        );
    }
}
