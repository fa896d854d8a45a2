//! The native half of the npm package `script-harness`: a napi-rs addon
//! exposing `NativeHarness`. The JavaScript half (`index.js`) keeps the
//! user's tools, approval callback and AbortSignals, and talks to this
//! side in JSON strings through three thread-safe functions:
//! `dispatch(tool, argsJson, callKey) -> Promise<resultJson>`,
//! `abort(callKey)` and `approve(requestJson) -> Promise<boolean>`.
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
    Promise<String>,
    FnArgs<(String, String, u32)>,
    Status,
    false,
    true,
>;
type Abort = ThreadsafeFunction<u32, (), u32, Status, false, true>;
type Approve = ThreadsafeFunction<String, Promise<bool>, String, Status, false, true>;

fn invalid(message: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArg, message.to_string())
}

/// One harness, shared by every run made through it.
#[napi]
pub struct NativeHarness {
    harness: Mutex<Option<Harness>>,
    runs: Arc<Mutex<HashMap<u32, CancellationToken>>>,
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
        match answer {
            Ok(true) => ApprovalDecision::Approved,
            Ok(false) => ApprovalDecision::Denied {
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
) -> Result<Harness> {
    let builder = embed::builder_from_options(options).map_err(invalid)?;
    let mut registry = ToolRegistry::new();
    if let Some(Value::Array(tools)) = options.get("tools") {
        for spec in tools {
            registry
                .register(js_tool(spec, dispatch.clone(), abort.clone())?)
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

/// A tool whose `execute` is a JavaScript function (reached through
/// `dispatch`); a cancelled call aborts its `signal` (through `abort`).
fn js_tool(spec: &Value, dispatch: Arc<Dispatch>, abort: Arc<Abort>) -> Result<harness::FnTool> {
    embed::tool_from_spec(spec, move |name, args, ctx| {
        let dispatch = dispatch.clone();
        let abort = abort.clone();
        async move {
            let key = CALL_KEYS.fetch_add(1, Ordering::Relaxed);
            let call = async {
                let promise = dispatch
                    .call_async((name, args.to_string(), key).into())
                    .await
                    .map_err(|e| ToolError::new(e.reason))?;
                let out = promise.await.map_err(|e| ToolError::new(e.reason))?;
                serde_json::from_str::<Value>(&out)
                    .map_err(|e| ToolError::new(format!("the tool returned no JSON: {e}")))
            };
            tokio::select! {
                r = call => r,
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
        let harness = build(
            &options,
            Arc::new(dispatch),
            Arc::new(abort),
            Arc::new(approve),
        )?;
        Ok(NativeHarness {
            harness: Mutex::new(Some(harness)),
            runs: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    fn harness(&self) -> Result<Harness> {
        self.harness
            .lock()
            .ok()
            .and_then(|h| h.clone())
            .ok_or_else(|| Error::new(Status::GenericFailure, "the harness is closed"))
    }

    /// Runs `code`; `options` is JSON `{context?, timeoutMs?, language?}`;
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
        let report = h.execute(request).await;
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
