//! The native half of the npm package `script-harness`: a napi-rs addon
//! exposing `NativeHarness`. The JavaScript half (`index.js`) keeps the
//! user's tools, approval callback and AbortSignals, and talks to this
//! side in JSON strings.
//!
//! A run is started by `runNow` on Node's thread, which also takes the
//! run's first steps there: the run's future is polled on Node's thread,
//! and while that thread waits awake for a moment (only while nothing
//! else of this harness is in flight) the run's answer or its first tool
//! call is handed straight back as a [`Step`]. A tool's answer goes in by
//! `complete(callKey, resultJson, errorMessage)`, which waits the same way
//! for the script's next call or the run's end. What comes later, when
//! Node's thread does not wait, reaches it through three thread-safe
//! functions: `dispatch(tool, argsJson, callKey)`, `abort(callKey)` and
//! `finished(runId, reportJson)`; approvals go through a fourth,
//! `approve(requestJson) -> Promise<'true' | 'false' | 'suspend'>`. A
//! thread-safe function wakes Node's event loop (15–20 µs on a VM whose
//! idle CPUs halt); a script that never waits long on the host needs
//! none.
//!
//! Scripts run on the harness's own threads; Node's thread only polls a
//! run's future (the host side: the facade, the report) and carries the
//! JavaScript tools, and waits awake for 50 µs at most at a time.

use harness::{
    embed, ApprovalBridge, ApprovalDecision, ApprovalRequest, CancellationToken, Harness,
    ToolError, ToolRegistry,
};
use napi::bindgen_prelude::{FnArgs, Promise};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error, Result, Status};
use napi_derive::napi;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

type Dispatch = ThreadsafeFunction<
    FnArgs<(String, String, u32)>,
    (),
    FnArgs<(String, String, u32)>,
    Status,
    false,
    true,
>;
type Finished =
    ThreadsafeFunction<FnArgs<(u32, String)>, (), FnArgs<(u32, String)>, Status, false, true>;
type Abort = ThreadsafeFunction<u32, (), u32, Status, false, true>;
type Approve = ThreadsafeFunction<String, Promise<String>, String, Status, false, true>;

/// What a JavaScript tool answers: its result as JSON, or its error's message.
type Answer = std::result::Result<String, String>;

/// The dispatched calls waiting for `complete`, by call key.
type Waiting = Arc<Mutex<HashMap<u32, tokio::sync::oneshot::Sender<Answer>>>>;

/// Forgets a call's entry in [`Waiting`] when its future ends or is
/// dropped (cancelled, timed out), so that no entry outlives its call.
struct Forget<'a>(&'a Waiting, u32);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut w) = self.0.lock() {
            w.remove(&self.1);
        }
    }
}

/// A tool call for Node's thread to make.
#[napi(object)]
#[derive(Debug)]
pub struct NextCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments as JSON.
    pub args: String,
    /// The call key to answer with `complete`.
    pub key: u32,
}

/// A run that ended, handed to Node's thread.
#[napi(object)]
#[derive(Debug)]
pub struct Done {
    /// The run's id (`runNow`'s `run_id`).
    pub run_id: u32,
    /// Its report as JSON.
    pub report: String,
}

/// What `runNow` and `complete` hand back: a tool call to make now, a run
/// that ended, or neither (what comes later comes through `dispatch` and
/// `finished`).
#[napi(object)]
#[derive(Debug, Default)]
pub struct Step {
    /// A call to make as if `dispatch` had delivered it.
    pub call: Option<NextCall>,
    /// A run that ended, as if `finished` had delivered it.
    pub done: Option<Done>,
}

/// How long Node's thread waits awake, at a time, for a run's answer or
/// its next tool call. The run's thread takes 5–10 µs to settle a call and
/// reach the next one, and a trivial run answers within about as long; a
/// run that takes longer costs Node's thread this much once, and then
/// answers through a thread-safe function.
const WAIT_AWAKE: std::time::Duration = std::time::Duration::from_micros(50);

/// Scripts longer than this are not polled on Node's thread: preparing
/// one (parsing it for its realm, TypeScript) takes long enough to be
/// felt by the event loop.
const POLL_HERE_MAX_BYTES: usize = 64 * 1024;

/// A call handed straight to Node's thread while it waits awake, instead
/// of through `dispatch`.
type Handoff = embed::Handoff<NextCall>;

type RunFuture = Pin<Box<dyn Future<Output = String> + Send>>;

/// One run's future, polled by whichever thread is at hand when it is
/// woken: Node's thread while it waits awake ([`Board`]), else a tokio
/// worker, which hands the report to `finished`.
struct Task {
    run_id: u32,
    future: Mutex<Option<RunFuture>>,
    /// The future has returned its report: later wake-ups (a run's end
    /// drops more than one sender it was waiting on) need no poll.
    ended: std::sync::atomic::AtomicBool,
    board: Arc<Board>,
    finished: Arc<Finished>,
}

impl Task {
    /// Polls the run once on this thread: its report when it is done.
    fn poll(self: &Arc<Self>) -> Option<String> {
        let mut slot = self.future.lock().ok()?;
        let future = slot.as_mut()?;
        let waker = Waker::from(self.clone());
        match future.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(report) => {
                *slot = None;
                self.ended.store(true, Ordering::Release);
                Some(report)
            }
            Poll::Pending => None,
        }
    }

    /// Polls the run on a tokio worker; a report goes to `finished`. A
    /// run that has ended needs none: it was woken while its last poll
    /// dropped what it waited on, and waking a worker for it took a CPU
    /// from the next run.
    fn poll_on_tokio(self: Arc<Self>) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        napi::bindgen_prelude::spawn(async move {
            if let Some(report) = self.poll() {
                self.finished.call(
                    (self.run_id, report).into(),
                    ThreadsafeFunctionCallMode::NonBlocking,
                );
            }
        });
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        if let Some(task) = self.board.post(self.clone()) {
            task.poll_on_tokio();
        }
    }
}

/// The runs woken while Node's thread waits awake, for it to poll. One
/// lock holds the flag and the list, so that no wake-up is lost between
/// them: a run woken after the wait ended goes to tokio.
#[derive(Default)]
struct Board {
    state: Mutex<BoardState>,
}

#[derive(Default)]
struct BoardState {
    waiting: bool,
    woken: Vec<Arc<Task>>,
}

impl Board {
    /// Keeps `task` for Node's thread if it waits; back if not.
    fn post(&self, task: Arc<Task>) -> Option<Arc<Task>> {
        match self.state.lock() {
            Ok(mut s) if s.waiting => {
                s.woken.push(task);
                None
            }
            _ => Some(task),
        }
    }

    fn has_woken(&self) -> bool {
        self.state.lock().is_ok_and(|s| !s.woken.is_empty())
    }

    fn take_woken(&self) -> Vec<Arc<Task>> {
        self.state
            .lock()
            .map(|mut s| std::mem::take(&mut s.woken))
            .unwrap_or_default()
    }

    fn set_waiting(&self, waiting: bool) -> Vec<Arc<Task>> {
        self.state
            .lock()
            .map(|mut s| {
                s.waiting = waiting;
                if waiting {
                    Vec::new()
                } else {
                    std::mem::take(&mut s.woken)
                }
            })
            .unwrap_or_default()
    }
}

fn invalid(message: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArg, message.to_string())
}

/// One harness, shared by every run made through it.
#[napi]
pub struct NativeHarness {
    harness: Mutex<Option<Harness>>,
    runs: Arc<Mutex<HashMap<u32, CancellationToken>>>,
    waiting: Waiting,
    handoff: Arc<Handoff>,
    board: Arc<Board>,
    finished: Arc<Finished>,
    /// Whether this machine has a CPU for Node's thread to wait on while
    /// the run's thread works.
    may_wait: bool,
}

impl std::fmt::Debug for NativeHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeHarness").finish_non_exhaustive()
    }
}

/// Asks the JavaScript side (which consults `needsApproval` and the
/// user's `approvals` callback).
struct AskJs(Arc<Approve>);

#[async_trait::async_trait]
impl ApprovalBridge for AskJs {
    async fn request(&self, req: &ApprovalRequest) -> ApprovalDecision {
        let json = serde_json::to_string(req).unwrap_or_default();
        let answer = match self.0.call_async(json).await {
            Ok(p) => p.await,
            Err(e) => Err(e),
        };
        match answer.as_deref() {
            Ok("true") => ApprovalDecision::Approved,
            Ok("suspend") => ApprovalDecision::Suspend,
            Ok(_) => ApprovalDecision::Denied {
                reason: Some("denied by the approvals callback".into()),
            },
            Err(e) => ApprovalDecision::Denied {
                reason: Some(format!("the approvals callback failed: {}", e.reason)),
            },
        }
    }
}

/// The options of `new Harness(...)` after the JavaScript side checked
/// and converted them (snake_case limits, tool specs without functions).
fn build(
    options: &Value,
    dispatch: Arc<Dispatch>,
    abort: Arc<Abort>,
    approve: Arc<Approve>,
    (waiting, handoff): (&Waiting, &Arc<Handoff>),
) -> Result<Harness> {
    let builder = embed::builder_from_options(options).map_err(invalid)?;
    let mut registry = ToolRegistry::new();
    if let Some(Value::Array(tools)) = options.get("tools") {
        for spec in tools {
            match embed::deferred_from_spec(spec).map_err(invalid)? {
                Some(deferred) => registry.register(deferred),
                None => registry.register(js_tool(
                    spec,
                    dispatch.clone(),
                    abort.clone(),
                    (waiting.clone(), handoff.clone()),
                )?),
            }
            .map_err(invalid)?;
        }
    }
    builder
        .tools(registry)
        .approvals(Arc::new(AskJs(approve)) as Arc<dyn ApprovalBridge>)
        .build()
        .map_err(invalid)
}

static CALL_KEYS: AtomicU32 = AtomicU32::new(1);

/// A tool whose `execute` is a JavaScript function (reached through Node's
/// thread waiting awake or `dispatch`, answered through `complete`); a
/// cancelled call aborts its `signal` (through `abort`).
fn js_tool(
    spec: &Value,
    dispatch: Arc<Dispatch>,
    abort: Arc<Abort>,
    (waiting, handoff): (Waiting, Arc<Handoff>),
) -> Result<harness::FnTool> {
    embed::tool_from_spec(spec, move |name, args, ctx| {
        let dispatch = dispatch.clone();
        let abort = abort.clone();
        let waiting = waiting.clone();
        let handoff = handoff.clone();
        async move {
            let key = CALL_KEYS.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = tokio::sync::oneshot::channel();
            if let Ok(mut w) = waiting.lock() {
                w.insert(key, tx);
            }
            let _forget = Forget(&waiting, key);
            let call = NextCall {
                tool: name,
                args: args.to_string(),
                key,
            };
            let status = match handoff.offer(call) {
                None => Status::Ok,
                Some(c) => dispatch.call(
                    (c.tool, c.args, c.key).into(),
                    ThreadsafeFunctionCallMode::NonBlocking,
                ),
            };
            if status != Status::Ok {
                return Err(ToolError::new(format!(
                    "the JavaScript tool cannot be called: {status}"
                )));
            }
            let answer = async {
                match rx.await {
                    Ok(Ok(out)) => serde_json::from_str::<Value>(&out)
                        .map_err(|e| ToolError::new(format!("the tool returned no JSON: {e}"))),
                    Ok(Err(message)) => Err(ToolError::new(message)),
                    Err(_) => Err(ToolError::new(
                        "the JavaScript tool was released unanswered",
                    )),
                }
            };
            tokio::select! {
                r = answer => r,
                _ = ctx.cancel.cancelled() => {
                    abort.call(key, ThreadsafeFunctionCallMode::NonBlocking);
                    Err(ToolError::cancelled())
                }
            }
        }
    })
    .map_err(invalid)
}

/// Removes a run from the table of runs when its future ends or is
/// dropped.
struct Registered {
    runs: Arc<Mutex<HashMap<u32, CancellationToken>>>,
    run_id: u32,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.remove(&self.run_id);
        }
    }
}

impl NativeHarness {
    fn harness(&self) -> Result<Harness> {
        self.harness
            .lock()
            .ok()
            .and_then(|h| h.clone())
            .ok_or_else(|| Error::new(Status::GenericFailure, "the harness is closed"))
    }

    /// Whether nothing of this harness but one run is in flight: then
    /// Node's thread has nothing else to do, and may wait awake for it.
    fn alone(&self) -> bool {
        self.may_wait
            && self.runs.lock().is_ok_and(|r| r.len() <= 1)
            && self.waiting.lock().is_ok_and(|w| w.is_empty())
    }

    /// Waits awake, up to [`WAIT_AWAKE`], for a tool call handed over or a
    /// run woken on this thread, polling woken runs here: the first call
    /// or ended run. Runs woken but not polled when the wait ends go on
    /// on tokio.
    fn wait_awake(&self) -> Step {
        self.board.set_waiting(true);
        let until = std::time::Instant::now() + WAIT_AWAKE;
        let mut step = Step::default();
        while step.call.is_none() && step.done.is_none() {
            let left = until.saturating_duration_since(std::time::Instant::now());
            step.call = self.handoff.wait_until(left, || self.board.has_woken());
            for task in self.board.take_woken() {
                if step.done.is_some() {
                    task.poll_on_tokio();
                } else if let Some(report) =
                    napi::bindgen_prelude::within_runtime_if_available(|| task.poll())
                {
                    step.done = Some(Done {
                        run_id: task.run_id,
                        report,
                    });
                }
            }
            if left.is_zero() {
                break;
            }
        }
        for task in self.board.set_waiting(false) {
            task.poll_on_tokio();
        }
        step
    }
}

#[napi]
impl NativeHarness {
    /// `options` is JSON (see `index.js`); the four functions are the
    /// JavaScript side's tool dispatcher, call aborter, approver and the
    /// receiver of reports that come after `runNow` returned.
    #[napi(constructor)]
    pub fn new(
        options: String,
        dispatch: Dispatch,
        abort: Abort,
        approve: Approve,
        finished: Finished,
    ) -> Result<Self> {
        let options: Value = serde_json::from_str(&options).map_err(invalid)?;
        let waiting = Waiting::default();
        let handoff = Arc::new(Handoff::default());
        let harness = build(
            &options,
            Arc::new(dispatch),
            Arc::new(abort),
            Arc::new(approve),
            (&waiting, &handoff),
        )?;
        Ok(NativeHarness {
            harness: Mutex::new(Some(harness)),
            runs: Arc::new(Mutex::new(HashMap::new())),
            waiting,
            handoff,
            board: Arc::default(),
            finished: Arc::new(finished),
            may_wait: std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2),
        })
    }

    /// Answers dispatched call `key`: `result_json` when the tool returned,
    /// `error` (its message) when it threw. If nothing else of this
    /// harness is in flight but its one run, waits awake for the script's
    /// next call or the run's end and returns it, for the caller to take
    /// as if `dispatch` or `finished` had delivered it. With other calls in
    /// flight the script is likely waiting for them, and Node's thread has
    /// them to run.
    #[napi]
    pub fn complete(&self, key: u32, result_json: Option<String>, error: Option<String>) -> Step {
        let Some(tx) = self.waiting.lock().ok().and_then(|mut w| w.remove(&key)) else {
            return Step::default();
        };
        let answer = match (result_json, error) {
            (Some(json), None) => Ok(json),
            (_, Some(message)) => Err(message),
            (None, None) => Err("the tool answered neither a result nor an error".to_owned()),
        };
        if tx.send(answer).is_ok() && self.alone() {
            self.wait_awake()
        } else {
            Step::default()
        }
    }

    /// Starts `code` (`options` is JSON `{context?, timeoutMs?, language?,
    /// session?}`) and takes its first steps on this thread: the returned
    /// [`Step`] may be this run's end, another run's, or its first tool
    /// call; what comes later comes through `dispatch` and `finished`.
    /// `cancel(runId)` stops it.
    #[napi]
    pub fn run_now(&self, code: String, run_id: u32, options: String) -> Result<Step> {
        let h = self.harness()?;
        let options: Value = serde_json::from_str(&options).map_err(invalid)?;
        let mut request = embed::request_from_options(&h, &code, &options).map_err(invalid)?;
        let token = CancellationToken::new();
        request.cancel = token.clone();
        // This thread polls for the answer itself: the engine must not
        // wait awake for it here, where the run's tool calls are made.
        request.caller_polls = true;
        if let Ok(mut runs) = self.runs.lock() {
            runs.insert(run_id, token);
        }
        let registered = Registered {
            runs: self.runs.clone(),
            run_id,
        };
        let run: RunFuture = Box::pin(async move {
            let _registered = registered;
            embed::report_json(&embed::execute(&h, &options, request).await)
        });
        let task = Arc::new(Task {
            run_id,
            future: Mutex::new(Some(run)),
            ended: std::sync::atomic::AtomicBool::new(false),
            board: self.board.clone(),
            finished: self.finished.clone(),
        });
        if code.len() > POLL_HERE_MAX_BYTES {
            task.poll_on_tokio();
            return Ok(Step::default());
        }
        // Waiting from before the first poll: an answer that comes while
        // it polls is this thread's to take.
        let alone = self.alone();
        if alone {
            self.board.set_waiting(true);
        }
        let first = napi::bindgen_prelude::within_runtime_if_available(|| task.poll());
        match first {
            Some(report) => {
                for other in self.board.set_waiting(false) {
                    other.poll_on_tokio();
                }
                Ok(Step {
                    call: None,
                    done: Some(Done { run_id, report }),
                })
            }
            None if alone => Ok(self.wait_awake()),
            None => Ok(Step::default()),
        }
    }

    /// Cancels run `run_id` (ScriptCancelledError, partial results kept).
    #[napi]
    pub fn cancel(&self, run_id: u32) -> bool {
        self.runs
            .lock()
            .ok()
            .and_then(|r| r.get(&run_id).cloned())
            .map(|t| t.cancel())
            .is_some()
    }

    /// Resumes a suspended run: `continuation` is its report's
    /// `suspension.continuation`, `answers` JSON `{approve?, answers?,
    /// failures?}`; resolves to the next report as JSON.
    #[napi]
    pub async fn resume(&self, continuation: String, answers: String) -> Result<String> {
        let h = self.harness()?;
        let answers: Value = serde_json::from_str(&answers).map_err(invalid)?;
        let report = embed::resume(&h, &continuation, &answers).await;
        serde_json::to_string(&report).map_err(invalid)
    }

    /// Opens a session and returns its id.
    #[napi]
    pub fn open_session(&self) -> Result<String> {
        embed::open_session(&self.harness()?).map_err(invalid)
    }

    /// Closes session `id`; false when it was not open.
    #[napi]
    pub fn close_session(&self, id: String) -> Result<bool> {
        Ok(embed::close_session(&self.harness()?, &id))
    }

    /// Syntax and banned identifiers; resolves to `null` or the error as JSON.
    #[napi]
    pub async fn check(&self, code: String) -> Result<Option<String>> {
        let h = self.harness()?;
        Ok(match h.check(&code).await {
            Ok(()) => None,
            Err(e) => Some(serde_json::to_string(&e).map_err(invalid)?),
        })
    }

    /// The TypeScript declarations of what a script can use.
    #[napi]
    pub fn typescript(&self) -> Result<String> {
        Ok(self.harness()?.typescript())
    }

    /// Runs the script blocks of a model response; resolves to the items
    /// as JSON in `format` (`items`, `openai-responses`, `chat`, `anthropic`).
    #[napi]
    pub async fn respond(&self, text: String, format: String) -> Result<String> {
        let h = self.harness()?;
        let out = embed::respond(&h, &text, &format, CancellationToken::new())
            .await
            .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))?;
        Ok(out.to_string())
    }

    /// Cancels every run and releases the engine and the JavaScript
    /// callbacks; later calls fail.
    #[napi]
    pub fn close(&self) {
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
