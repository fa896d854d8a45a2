//! The native half of the PyPI package `script-harness`: the extension
//! module `script_harness._native`. The Python half
//! (`python/script_harness`) keeps the user's tools, approval callback and
//! event loops, and talks to this side in Python values (a tool's
//! arguments, reports) and JSON strings (results, approval requests):
//!
//! - a tool call becomes `bridge.call_tool(name, args, call)` (the
//!   arguments as Python values) and an
//!   approval request `bridge.approve(request_json, call)`, each made on a
//!   thread of the blocking pool holding the interpreter; the Python side
//!   settles `call` (a `Call`) now or later, from any thread, with
//!   `resolve(json)` or `reject(message)`, and sees `call.cancelled` turn
//!   true (and its `on_cancel` callback run) when the script no longer
//!   needs the answer; a pooled thread whose call was answered at once
//!   (a synchronous tool) waits a few microseconds for the script's next
//!   call and makes it itself (`RELAY`);
//! - scripts run on the harness's engine threads, never on a Python
//!   thread: `run` drives the run's host side on the calling thread with
//!   the interpreter released, and while that run is the only one in
//!   flight it waits awake there for a moment at a time and makes the
//!   run's calls into Python itself (`CALLER`: no thread to wake);
//!   `start` runs on this module's tokio runtime and calls
//!   `done(report)` when the run ends;
//! - a report crosses as a `script_harness.Report`, built here
//!   (`report`), not as JSON.

use harness::wasi::{Sandbox, SandboxError, SandboxPolicy};
use harness::{
    embed, ApprovalBridge, ApprovalDecision, ApprovalRequest, CancellationToken, FnTool, Harness,
    ToolError, ToolRegistry,
};
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;

mod report;

fn invalid(message: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(message.to_string())
}

/// The runtime every run, tool call and approval of the process uses.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("script-harness")
            .enable_all()
            .build()
            .expect("a tokio runtime (threads and a timer) could not be started")
    })
}

type Answer = Result<String, String>;

/// What a pending call shares between Rust and Python.
#[derive(Debug, Default)]
struct Pending {
    tx: Mutex<Option<oneshot::Sender<Answer>>>,
    cancelled: AtomicBool,
    on_cancel: Mutex<Option<Py<PyAny>>>,
}

impl Pending {
    fn settle(&self, answer: Answer) -> bool {
        let tx = self.tx.lock().ok().and_then(|mut t| t.take());
        tx.is_some_and(|tx| tx.send(answer).is_ok())
    }

    /// Marks the call cancelled and runs its `on_cancel` callback, if one
    /// is registered, on the blocking pool.
    fn cancel(self: &Arc<Self>) {
        let callback = match self.on_cancel.lock() {
            Ok(mut cb) => {
                self.cancelled.store(true, Ordering::SeqCst);
                cb.take()
            }
            Err(_) => None,
        };
        if let Some(cb) = callback {
            tokio::task::spawn_blocking(move || {
                Python::attach(|py| {
                    if let Err(e) = cb.call0(py) {
                        e.write_unraisable(py, None);
                    }
                })
            });
        }
    }
}

/// A tool call or approval request the Python side answers.
#[pyclass(frozen, module = "script_harness._native")]
#[derive(Debug)]
struct Call {
    pending: Arc<Pending>,
}

#[pymethods]
impl Call {
    /// Answers with a JSON text; false when the call was already settled
    /// or nobody waits any more.
    fn resolve(&self, json: String) -> bool {
        self.pending.settle(Ok(json))
    }

    /// Fails the call with `message` (a ToolExecutionError for a tool, a
    /// denial for an approval).
    fn reject(&self, message: String) -> bool {
        self.pending.settle(Err(message))
    }

    /// True once the script no longer needs the answer.
    #[getter]
    fn cancelled(&self) -> bool {
        self.pending.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `callback()` once when the call is cancelled (now, if it
    /// already is).
    fn on_cancel(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        let run_now = match self.pending.on_cancel.lock() {
            Ok(mut slot) => {
                if self.pending.cancelled.load(Ordering::SeqCst) {
                    true
                } else {
                    *slot = Some(callback.clone_ref(py));
                    false
                }
            }
            Err(_) => false,
        };
        if run_now {
            callback.call0(py)?;
        }
        Ok(())
    }
}

/// A call into Python, run on a thread of the blocking pool; returns
/// whether the call was answered before it returned (a synchronous tool),
/// when the script's next call is likely to follow at once.
type PyJob = Box<dyn FnOnce() -> bool + Send>;

/// Hands the next call into Python to a pooled thread that has just made
/// one, while it waits for it, instead of waking another pooled thread: on
/// a VM whose idle CPUs halt, that wake-up was about 30 µs of the 80 µs a
/// synchronous Python tool cost a script calling tools one after another
/// (the rest was mostly a new thread state per call; see `run_python`).
static RELAY: embed::Handoff<PyJob> = embed::Handoff::new();

/// How long a pooled thread waits for the script's next call after a
/// call answered at once. The run's thread takes 5–10 µs to settle a call
/// and make the next one; a script that computes longer between calls
/// costs a pooled thread this much CPU per call.
const RELAY_SPIN: Duration = Duration::from_micros(50);

/// Whether this machine has a CPU for a pooled thread to wait on while
/// the run's thread works.
fn may_relay() -> bool {
    static MAY: OnceLock<bool> = OnceLock::new();
    *MAY.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2))
}

/// Hands a call into Python to the thread blocked in `run` while it waits
/// awake for its run (only while that run is the only one in flight): it
/// is a Python thread with nothing else to do, and awake.
static CALLER: embed::Handoff<PyJob> = embed::Handoff::new();

/// How long the thread blocked in `run` waits awake, at a time, for a call
/// into Python or its run's end before it sleeps until woken.
const CALLER_SPIN: Duration = Duration::from_micros(50);

/// Runs of this process in flight (the rule for [`CALLER`]).
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// A `KeyboardInterrupt` that a call into Python raised on this thread
    /// (the main thread, running a tool for its own run): the run is then
    /// cancelled and `run` raises it once the run has ended.
    static INTERRUPTED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// Runs `job`: on the thread blocked in `run` if it waits for one
/// ([`CALLER`]), on the pooled thread waiting in [`RELAY`] if there is
/// one, else on a pooled thread, which then runs the jobs relayed to it
/// for as long as each was answered at once.
fn run_python(job: PyJob) {
    let Some(job) = CALLER.offer(job) else {
        return;
    };
    let Some(job) = RELAY.offer(job) else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        // Attached once for the whole relay (a job's own attach is then
        // nested), detached while it waits: a thread not attached made a
        // new thread state for each job, which cost more than the rest of
        // the call.
        Python::attach(|py| {
            let mut job = job;
            loop {
                let answered = job();
                if !(answered && may_relay()) {
                    return;
                }
                match py.detach(|| RELAY.wait(RELAY_SPIN)) {
                    Some(next) => job = next,
                    None => return,
                }
            }
        })
    });
}

/// What a call into Python asks.
enum Ask {
    /// `bridge.call_tool(name, args, call)`, the arguments as Python
    /// values.
    Tool(String, Value),
    /// `bridge.approve(request_json, call)`.
    Approval(String),
}

/// Calls the bridge for `ask` where a thread is at hand ([`run_python`])
/// and waits for the answer; `cancel` firing first cancels the call.
async fn ask_python(bridge: Arc<Py<PyAny>>, ask: Ask, cancel: Option<CancellationToken>) -> Answer {
    let (tx, rx) = oneshot::channel();
    let pending = Arc::new(Pending {
        tx: Mutex::new(Some(tx)),
        ..Pending::default()
    });
    let shared = pending.clone();
    let (started_tx, started) = oneshot::channel::<Result<(), String>>();
    run_python(Box::new(move || {
        let made = Python::attach(|py| -> PyResult<()> {
            let call = Py::new(
                py,
                Call {
                    pending: shared.clone(),
                },
            )?;
            let made = match ask {
                Ask::Tool(name, args) => match pythonize::pythonize(py, &args) {
                    Ok(args) => {
                        bridge.call_method1(py, intern!(py, "call_tool"), (name, args, call))
                    }
                    Err(e) => Err(PyValueError::new_err(e.to_string())),
                },
                Ask::Approval(text) => {
                    bridge.call_method1(py, intern!(py, "approve"), (text, call))
                }
            };
            match made {
                // Ctrl-C while the main thread ran the tool: the call is
                // settled already (rejected); the run is for `run` to end.
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) => {
                    INTERRUPTED.with(|i| *i.borrow_mut() = Some(e));
                    Ok(())
                }
                made => made.map(drop),
            }
        });
        let answered = shared.tx.lock().map(|t| t.is_none()).unwrap_or(false);
        let _ = started_tx.send(made.map_err(|e| e.to_string()));
        answered
    }));
    let answer = async move {
        match started.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("the Python side failed: the call panicked".into()),
        }
        rx.await
            .unwrap_or_else(|_| Err("the Python side dropped the call without an answer".into()))
    };
    match cancel {
        None => answer.await,
        Some(token) => {
            tokio::select! {
                a = answer => a,
                _ = token.cancelled() => {
                    pending.cancel();
                    Err(String::new())
                }
            }
        }
    }
}

/// A tool whose function lives on the Python side.
fn py_tool(spec: &Value, bridge: Arc<Py<PyAny>>) -> PyResult<FnTool> {
    embed::tool_from_spec(spec, move |name, args, ctx| {
        let bridge = bridge.clone();
        async move {
            let cancel = ctx.cancel.clone();
            let answer = ask_python(bridge, Ask::Tool(name, args), Some(cancel.clone())).await;
            match answer {
                _ if cancel.is_cancelled() => Err(ToolError::cancelled()),
                Ok(json) => serde_json::from_str::<Value>(&json)
                    .map_err(|e| ToolError::new(format!("the tool returned no JSON: {e}"))),
                Err(message) => Err(ToolError::new(message)),
            }
        }
    })
    .map_err(invalid)
}

/// Asks the Python side (the user's `approvals` callable).
struct AskPython(Arc<Py<PyAny>>);

#[async_trait::async_trait]
impl ApprovalBridge for AskPython {
    async fn request(&self, req: &ApprovalRequest) -> ApprovalDecision {
        let text = serde_json::to_string(req).unwrap_or_default();
        match ask_python(self.0.clone(), Ask::Approval(text), None).await {
            Ok(answer) if answer == "true" => ApprovalDecision::Approved,
            Ok(answer) if answer == "suspend" => ApprovalDecision::Suspend,
            Ok(_) => ApprovalDecision::Denied {
                reason: Some("denied by the approvals callback".into()),
            },
            Err(e) => ApprovalDecision::Denied {
                reason: Some(format!("the approvals callback failed: {e}")),
            },
        }
    }
}

/// One harness, shared by every run made through it.
#[pyclass(frozen, module = "script_harness._native")]
struct NativeHarness {
    harness: Mutex<Option<Harness>>,
    runs: Arc<Mutex<HashMap<u64, CancellationToken>>>,
}

impl std::fmt::Debug for NativeHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeHarness").finish_non_exhaustive()
    }
}

impl NativeHarness {
    fn harness(&self) -> PyResult<Harness> {
        self.harness
            .lock()
            .ok()
            .and_then(|h| h.clone())
            .ok_or_else(|| PyRuntimeError::new_err("the harness is closed"))
    }

    /// The request for `code`, registered under `run_id` for `cancel`.
    fn prepare(
        &self,
        code: &str,
        options: &str,
        run_id: u64,
    ) -> PyResult<(Harness, harness::ExecutionRequest, Value)> {
        let h = self.harness()?;
        let options: Value = serde_json::from_str(options).map_err(invalid)?;
        let request = embed::request_from_options(&h, code, &options).map_err(invalid)?;
        if let Ok(mut runs) = self.runs.lock() {
            runs.insert(run_id, request.cancel.clone());
        }
        Ok((h, request, options))
    }
}

/// Wakes the thread blocked in `run` ([`drive`]) for its run's future.
struct Nudge {
    woken: AtomicBool,
    thread: std::thread::Thread,
}

impl Nudge {
    /// A nudge for this thread, woken to start with (the first look polls).
    fn here() -> Arc<Self> {
        Arc::new(Nudge {
            woken: AtomicBool::new(true),
            thread: std::thread::current(),
        })
    }

    /// Polls `run` if it was woken since the last look: its output once
    /// it is ready.
    fn poll<F: std::future::Future + ?Sized>(
        self: &Arc<Self>,
        run: std::pin::Pin<&mut F>,
    ) -> Option<F::Output> {
        if !self.woken.swap(false, Ordering::AcqRel) {
            return None;
        }
        let waker = std::task::Waker::from(self.clone());
        match run.poll(&mut std::task::Context::from_waker(&waker)) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }
}

impl std::task::Wake for Nudge {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// How often a thread blocked in `run` looks for a signal (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Drives `run` to its end on this thread (the interpreter released): the
/// thread polls the run's future itself and, while the run is the only
/// one in flight, waits awake for a while for its end or a call into
/// Python, which it makes here ([`CALLER`]); otherwise it sleeps until
/// woken, looking for Ctrl-C every [`SIGNAL_CHECK`] (which cancels the
/// run; the `KeyboardInterrupt` is returned once the run has ended).
fn drive(
    run: impl std::future::Future<Output = harness::ExecutionReport>,
    token: &CancellationToken,
) -> (harness::ExecutionReport, Option<PyErr>) {
    let _runtime = runtime().enter();
    let nudge = Nudge::here();
    let mut run = std::pin::pin!(run);
    let mut interrupted: Option<PyErr> = None;
    let mut checked = std::time::Instant::now();
    loop {
        if let Some(report) = nudge.poll(run.as_mut()) {
            return (report, interrupted);
        }
        if IN_FLIGHT.load(Ordering::Acquire) == 1 && may_relay() {
            if let Some(job) =
                CALLER.wait_until(CALLER_SPIN, || nudge.woken.load(Ordering::Acquire))
            {
                job();
                if let Some(e) = INTERRUPTED.with(|i| i.borrow_mut().take()) {
                    token.cancel();
                    interrupted.get_or_insert(e);
                }
                continue;
            }
            if nudge.woken.load(Ordering::Acquire) {
                continue;
            }
        }
        if interrupted.is_none() && checked.elapsed() >= SIGNAL_CHECK {
            checked = std::time::Instant::now();
            if let Err(e) = Python::attach(|py| py.check_signals()) {
                token.cancel();
                interrupted = Some(e);
            }
        }
        std::thread::park_timeout(SIGNAL_CHECK);
    }
}

/// A run's host side, as `start` hands it to tokio.
type RunFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = harness::ExecutionReport> + Send>>;

/// How long `start` (an event loop's thread) waits awake for its run.
const START_SPIN: Duration = Duration::from_micros(50);

/// Polls `run` on this thread and waits awake up to [`START_SPIN`] for
/// it to end (only where a CPU is free for it): its output if it did.
fn soon(run: &mut RunFuture) -> Option<harness::ExecutionReport> {
    let _runtime = runtime().enter();
    let nudge = Nudge::here();
    let until = std::time::Instant::now() + START_SPIN;
    loop {
        if let Some(report) = nudge.poll(run.as_mut()) {
            return Some(report);
        }
        if !may_relay() || std::time::Instant::now() >= until {
            return None;
        }
        std::thread::yield_now();
    }
}

/// Removes a run from the table when it ends, however it ends.
struct Registered {
    runs: Arc<Mutex<HashMap<u64, CancellationToken>>>,
    run_id: u64,
}

impl Registered {
    /// Counted in [`IN_FLIGHT`] until dropped.
    fn new(runs: &Arc<Mutex<HashMap<u64, CancellationToken>>>, run_id: u64) -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        Registered {
            runs: runs.clone(),
            run_id,
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
        if let Ok(mut runs) = self.runs.lock() {
            runs.remove(&self.run_id);
        }
    }
}

#[pymethods]
impl NativeHarness {
    /// `options` is JSON (see `script_harness/_harness.py`); `bridge`
    /// answers tool calls and approval requests.
    #[new]
    fn new(options: &str, bridge: Py<PyAny>) -> PyResult<Self> {
        let options: Value = serde_json::from_str(options).map_err(invalid)?;
        let bridge = Arc::new(bridge);
        let builder = embed::builder_from_options(&options).map_err(invalid)?;
        let mut registry = ToolRegistry::new();
        if let Some(Value::Array(tools)) = options.get("tools") {
            for spec in tools {
                match embed::deferred_from_spec(spec).map_err(invalid)? {
                    Some(deferred) => registry.register(deferred),
                    None => registry.register(py_tool(spec, bridge.clone())?),
                }
                .map_err(invalid)?;
            }
        }
        let harness = {
            // Building may start worker processes or load a guest: both
            // want the runtime's context.
            let _guard = runtime().enter();
            builder
                .tools(registry)
                .approvals(Arc::new(AskPython(bridge)) as Arc<dyn ApprovalBridge>)
                .build()
                .map_err(invalid)?
        };
        Ok(NativeHarness {
            harness: Mutex::new(Some(harness)),
            runs: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// Runs `code` and returns its `Report`, the interpreter released
    /// meanwhile. A signal (Ctrl-C) cancels the run; the exception is
    /// raised once the run has ended.
    fn run(&self, py: Python<'_>, code: &str, options: &str, run_id: u64) -> PyResult<Py<PyAny>> {
        let (h, mut request, options) = self.prepare(code, options, run_id)?;
        let _registered = Registered::new(&self.runs, run_id);
        // This thread waits for the answer on its own terms, and makes
        // the run's calls into Python meanwhile: the engine must not wait
        // awake for it here.
        request.caller_polls = true;
        let token = request.cancel.clone();
        let (report, interrupted) =
            py.detach(|| drive(embed::execute(&h, &options, request), &token));
        match interrupted {
            Some(e) => Err(e),
            None => report::report_object(py, report),
        }
    }

    /// The median wall time in µs of `n` runs of `code` made from Rust
    /// on this harness (`Harness::run`, the interpreter released), after
    /// `n / 10` untimed: the figure `benches/bench.py` sets the Python
    /// rows beside, measured in the same process, on the same engine
    /// threads.
    fn bench_rust(&self, py: Python<'_>, code: &str, n: usize) -> PyResult<f64> {
        let h = self.harness()?;
        let n = n.max(1);
        Ok(py.detach(|| {
            let rt = runtime();
            for _ in 0..n / 10 {
                rt.block_on(h.run(code));
            }
            let mut wall: Vec<f64> = (0..n)
                .map(|_| {
                    let t = std::time::Instant::now();
                    rt.block_on(h.run(code));
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            wall.sort_by(f64::total_cmp);
            wall[wall.len() / 2]
        }))
    }

    /// Starts `code`. A run that ends within a brief wait here
    /// ([`START_SPIN`], the interpreter released) returns its `Report`,
    /// and `done` is never called; otherwise this returns `None` and
    /// `done(report)` is called on another thread when the run ends.
    fn start(
        &self,
        py: Python<'_>,
        code: &str,
        options: &str,
        run_id: u64,
        done: Py<PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (h, mut request, options) = self.prepare(code, options, run_id)?;
        let registered = Registered::new(&self.runs, run_id);
        // This thread (an event loop's) waits only briefly, on its own
        // terms: the engine must not wait awake for the answer here.
        request.caller_polls = true;
        let mut run: RunFuture = Box::pin(async move {
            let report = embed::execute(&h, &options, request).await;
            drop(registered);
            report
        });
        // A short run answers here: no wake-up of the event loop for it.
        if let Some(report) = py.detach(|| soon(&mut run)) {
            return report::report_object(py, report).map(Some);
        }
        runtime().spawn(async move {
            let report = run.await;
            // On this worker (its other tasks move elsewhere meanwhile):
            // the callback only hands the result to an event loop.
            tokio::task::block_in_place(|| {
                Python::attach(|py| {
                    let called = report::report_object(py, report)
                        .and_then(|report| done.call1(py, (report,)));
                    if let Err(e) = called {
                        e.write_unraisable(py, None);
                    }
                })
            });
        });
        Ok(None)
    }

    /// Cancels run `run_id` (ScriptCancelledError, partial results kept);
    /// false when no such run is in flight.
    fn cancel(&self, run_id: u64) -> bool {
        self.runs
            .lock()
            .ok()
            .and_then(|r| r.get(&run_id).cloned())
            .map(|t| t.cancel())
            .is_some()
    }

    /// Resumes a suspended run: `continuation` is its report's
    /// `suspension.continuation`, `answers` JSON `{approve?, answers?,
    /// failures?}`; returns the next `Report`, the interpreter released
    /// meanwhile.
    fn resume(&self, py: Python<'_>, continuation: &str, answers: &str) -> PyResult<Py<PyAny>> {
        let h = self.harness()?;
        let answers: Value = serde_json::from_str(answers).map_err(invalid)?;
        let report = py.detach(|| runtime().block_on(embed::resume(&h, continuation, &answers)));
        report::report_object(py, report)
    }

    /// Opens a session and returns its id.
    fn open_session(&self) -> PyResult<String> {
        let h = self.harness()?;
        let _guard = runtime().enter();
        embed::open_session(&h).map_err(invalid)
    }

    /// Closes session `id`; false when it was not open.
    fn close_session(&self, id: &str) -> PyResult<bool> {
        Ok(embed::close_session(&self.harness()?, id))
    }

    /// Syntax and banned identifiers: `None`, or the error as JSON.
    fn check(&self, py: Python<'_>, code: &str) -> PyResult<Option<String>> {
        let h = self.harness()?;
        let result = py.detach(|| runtime().block_on(h.check(code)));
        Ok(match result {
            Ok(()) => None,
            Err(e) => Some(serde_json::to_string(&e).map_err(invalid)?),
        })
    }

    /// The TypeScript declarations of what a script can use.
    fn typescript(&self) -> PyResult<String> {
        Ok(self.harness()?.typescript())
    }

    /// The names of the tools scripts may call.
    fn tool_names(&self) -> PyResult<Vec<String>> {
        Ok(self.harness()?.tool_names())
    }

    /// Runs the script blocks of a model response; the items as JSON in
    /// `format` (`items`, `openai-responses`, `chat`, `anthropic`).
    fn respond(&self, py: Python<'_>, text: &str, format: &str) -> PyResult<String> {
        let h = self.harness()?;
        let out = py.detach(|| {
            runtime().block_on(embed::respond(&h, text, format, CancellationToken::new()))
        });
        Ok(out.map_err(invalid)?.to_string())
    }

    /// Like `respond`, calling `done(items_json, error)` from another
    /// thread instead of waiting.
    fn respond_start(&self, text: String, format: String, done: Py<PyAny>) -> PyResult<()> {
        let h = self.harness()?;
        runtime().spawn(async move {
            let out = embed::respond(&h, &text, &format, CancellationToken::new()).await;
            let (items, error) = match out {
                Ok(v) => (Some(v.to_string()), None),
                Err(e) => (None, Some(e.to_string())),
            };
            // On this worker (its other tasks move elsewhere meanwhile):
            // the callback only hands the result to an event loop.
            tokio::task::block_in_place(|| {
                Python::attach(|py| {
                    if let Err(e) = done.call1(py, (items, error)) {
                        e.write_unraisable(py, None);
                    }
                })
            });
        });
        Ok(())
    }

    /// Cancels every run and releases the engine and the Python
    /// callbacks; later calls fail.
    fn close(&self) {
        if let Ok(runs) = self.runs.lock() {
            for t in runs.values() {
                t.cancel();
            }
        }
        if let Ok(mut h) = self.harness.lock() {
            *h = None;
        }
    }
}

fn sandbox(
    policy: &str,
    session_id: &str,
    workspace_root: PathBuf,
    wasm_binary_path: Option<PathBuf>,
) -> PyResult<Sandbox> {
    let policy: SandboxPolicy = serde_json::from_str(policy).map_err(invalid)?;
    let mut sandbox = Sandbox::new(policy, session_id, workspace_root).map_err(invalid)?;
    if let Some(path) = wasm_binary_path {
        sandbox = sandbox.with_wasm_binary_path(path);
    }
    Ok(sandbox)
}

/// Runs `code` in the workspace sandbox; the `SandboxResult` as JSON.
/// A missing guest binary raises `FileNotFoundError`.
#[pyfunction]
#[pyo3(signature = (policy, session_id, workspace_root, wasm_binary_path, code))]
fn sandbox_execute(
    py: Python<'_>,
    policy: &str,
    session_id: &str,
    workspace_root: PathBuf,
    wasm_binary_path: Option<PathBuf>,
    code: &str,
) -> PyResult<String> {
    let sandbox = sandbox(policy, session_id, workspace_root, wasm_binary_path)?;
    let result = py.detach(|| sandbox.execute(code));
    match result {
        Ok(r) => serde_json::to_string(&r).map_err(invalid),
        Err(SandboxError::Load(e @ harness::wasi::LoadError::Missing { .. })) => {
            Err(PyFileNotFoundError::new_err(e.to_string()))
        }
        Err(e) => Err(PyRuntimeError::new_err(e.to_string())),
    }
}

/// Whether `code` parses as a program; runs nothing, writes nothing.
#[pyfunction]
#[pyo3(signature = (policy, session_id, workspace_root, wasm_binary_path, code))]
fn sandbox_validate(
    py: Python<'_>,
    policy: &str,
    session_id: &str,
    workspace_root: PathBuf,
    wasm_binary_path: Option<PathBuf>,
    code: &str,
) -> PyResult<bool> {
    let sandbox = sandbox(policy, session_id, workspace_root, wasm_binary_path)?;
    Ok(py.detach(|| sandbox.validate_code(code)))
}

/// The default sandbox policy as JSON.
#[pyfunction]
fn sandbox_default_policy() -> String {
    serde_json::to_string(&SandboxPolicy::default()).unwrap_or_default()
}

/// The engines compiled into this module.
#[pyfunction]
fn engines() -> Vec<String> {
    harness::EngineKind::available()
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeHarness>()?;
    m.add_class::<Call>()?;
    m.add_class::<report::NativeReport>()?;
    m.add_function(wrap_pyfunction!(sandbox_execute, m)?)?;
    m.add_function(wrap_pyfunction!(sandbox_validate, m)?)?;
    m.add_function(wrap_pyfunction!(sandbox_default_policy, m)?)?;
    m.add_function(wrap_pyfunction!(engines, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
