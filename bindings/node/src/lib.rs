//! The native half of the npm package `script-harness`: a napi-rs addon
//! exposing `NativeHarness`. The JavaScript half (`index.js`) keeps the
//! user's tools, approval callback and AbortSignals, and talks to this
//! side in JSON strings through three thread-safe functions:
//! `dispatch(tool, argsJson, callKey)`, `abort(callKey)` and
//! `approve(requestJson) -> Promise<'true' | 'false' | 'suspend'>`. A dispatched call is
//! answered by `complete(callKey, resultJson, errorMessage)`, called by
//! the JavaScript side when the tool settles: one hop from Node's thread
//! back to the run, where awaiting the Promise `dispatch` could return
//! took two (its return value, then its settlement). And where the call
//! was the only one in flight, `complete` waits a few microseconds for
//! the script's next call and returns it (`Handoff`), so that a script
//! calling tools one after another does not wait for Node's event loop to
//! wake up for each call.
//! Scripts run on the harness's own threads; Node's event loop only
//! carries tool calls and the final report.

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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

type Dispatch = ThreadsafeFunction<
    FnArgs<(String, String, u32)>,
    (),
    FnArgs<(String, String, u32)>,
    Status,
    false,
    true,
>;

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

/// The script's next call, handed to Node's thread by `complete`.
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

/// How long `complete` waits for the script's next call. The run's
/// thread takes 5–10 µs to settle a call and reach the next one; a
/// script that computes for longer between calls costs Node's thread
/// this much per call, and a run that ends stops the wait at once
/// (`Handoff::stop`).
const HANDOFF_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// A call handed straight to Node's thread while it waits in `complete`,
/// instead of through `dispatch` (a thread-safe function: a wake-up of
/// Node's event loop, 15–20 µs on a VM whose idle CPUs halt).
type Handoff = embed::Handoff<NextCall>;

type Abort = ThreadsafeFunction<u32, (), u32, Status, false, true>;
type Approve = ThreadsafeFunction<String, Promise<String>, String, Status, false, true>;

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

/// A tool whose `execute` is a JavaScript function (reached through a
/// waiting `complete` or `dispatch`, answered through `complete`); a
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

#[napi]
impl NativeHarness {
    /// `options` is JSON (see `index.js`); the three functions are the
    /// JavaScript side's tool dispatcher, call aborter and approver.
    #[napi(constructor)]
    pub fn new(
        options: String,
        dispatch: Dispatch,
        abort: Abort,
        approve: Approve,
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
            may_wait: std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2),
        })
    }

    /// Answers dispatched call `key`: `result_json` when the tool returned,
    /// `error` (its message) when it threw. If no other call of this
    /// harness is in flight (dispatched and not answered), waits up to
    /// `HANDOFF_SPIN` (50 µs) for the script's next call and returns it, for the
    /// caller to run as if `dispatch` had delivered it; a run that ends
    /// meanwhile ends the wait. With other calls in flight the script is
    /// likely waiting for them, and Node's thread has them to run.
    #[napi]
    pub fn complete(
        &self,
        key: u32,
        result_json: Option<String>,
        error: Option<String>,
    ) -> Option<NextCall> {
        let (tx, alone) = {
            let mut w = self.waiting.lock().ok()?;
            let tx = w.remove(&key)?;
            (tx, w.is_empty())
        };
        let answer = match (result_json, error) {
            (Some(json), None) => Ok(json),
            (_, Some(message)) => Err(message),
            (None, None) => Err("the tool answered neither a result nor an error".to_owned()),
        };
        let delivered = tx.send(answer).is_ok();
        if delivered && alone && self.may_wait {
            self.handoff.wait(HANDOFF_SPIN)
        } else {
            None
        }
    }

    fn harness(&self) -> Result<Harness> {
        self.harness
            .lock()
            .ok()
            .and_then(|h| h.clone())
            .ok_or_else(|| Error::new(Status::GenericFailure, "the harness is closed"))
    }

    /// Runs `code`; `options` is JSON `{context?, timeoutMs?, language?,
    /// session?}`;
    /// resolves to the report as JSON. `cancel(runId)` stops it.
    #[napi]
    pub async fn run(&self, code: String, run_id: u32, options: String) -> Result<String> {
        let h = self.harness()?;
        let options: Value = serde_json::from_str(&options).map_err(invalid)?;
        let mut request = embed::request_from_options(&h, &code, &options).map_err(invalid)?;
        let token = CancellationToken::new();
        request.cancel = token.clone();
        if let Ok(mut runs) = self.runs.lock() {
            runs.insert(run_id, token);
        }
        let report = embed::execute(&h, &options, request).await;
        self.handoff.stop();
        if let Ok(mut runs) = self.runs.lock() {
            runs.remove(&run_id);
        }
        serde_json::to_string(&report).map_err(invalid)
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
