//! The native half of the npm package `script-harness`: a napi-rs addon
//! exposing `NativeHarness`. The JavaScript half (`index.js`) keeps the
//! user's tools, approval callback and AbortSignals, and talks to this
//! side in JSON strings through three thread-safe functions:
//! `dispatch(tool, argsJson, callKey) -> Promise<resultJson>`,
//! `abort(callKey)` and `approve(requestJson) -> Promise<boolean>`.
//! Scripts run on the harness's own threads; Node's event loop only
//! carries tool calls and the final report.

use harness::config::{Config, Overrides};
use harness::{
    Allowlist, ApprovalBridge, ApprovalDecision, ApprovalRequest, CancellationToken, EngineKind,
    Harness, Limits, Mode, ScriptLanguage, ToolError, ToolRegistry,
};
use napi::bindgen_prelude::{FnArgs, Promise};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error, Result, Status};
use napi_derive::napi;
use serde_json::{json, Value};
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
    let mut builder = match options.get("config").and_then(Value::as_str) {
        Some(path) => {
            let mut cfg = Config::load(path).map_err(invalid)?;
            if let Some(p) = options.get("provider").and_then(Value::as_str) {
                cfg = cfg.with_provider(p).map_err(invalid)?;
            }
            if let Some(Value::Object(limits)) = options.get("limits") {
                let mut o = Overrides::new();
                for (k, v) in limits {
                    o = o.set(&format!("limits.{k}"), v.clone()).map_err(invalid)?;
                }
                cfg = cfg.with_overrides(&o).map_err(invalid)?;
            }
            cfg.builder().map_err(invalid)?
        }
        None => {
            let mut b = Harness::builder();
            if let Some(Value::Object(limits)) = options.get("limits") {
                let mut all = serde_json::to_value(Limits::default()).map_err(invalid)?;
                if let Value::Object(m) = &mut all {
                    for (k, v) in limits {
                        if !m.contains_key(k) {
                            return Err(invalid(format!("unknown limit `{k}`")));
                        }
                        m.insert(k.clone(), v.clone());
                    }
                }
                let limits: Limits = serde_json::from_value(all).map_err(invalid)?;
                b = b.limits(limits);
            }
            b
        }
    };
    if let Some(e) = options.get("engine").and_then(Value::as_str) {
        let engine: EngineKind = e.parse().map_err(invalid)?;
        builder = builder.engine(engine);
    }
    if let Some(i) = options.get("isolation") {
        builder = builder.isolation(serde_json::from_value(i.clone()).map_err(invalid)?);
    }
    if let Some(m) = options.get("mode") {
        let mode: Mode = serde_json::from_value(m.clone()).map_err(invalid)?;
        builder = builder.mode(mode);
    }
    if let Some(Value::Array(names)) = options.get("allow") {
        builder = builder.allow(Allowlist::only(
            names.iter().filter_map(|n| n.as_str().map(str::to_owned)),
        ));
    }
    let mut registry = ToolRegistry::new();
    if let Some(Value::Array(tools)) = options.get("tools") {
        for spec in tools {
            registry
                .register(js_tool(spec, dispatch.clone(), abort.clone())?)
                .map_err(invalid)?;
        }
    }
    builder = builder
        .tools(registry)
        .approvals(Arc::new(AskJs(approve)) as Arc<dyn ApprovalBridge>);
    builder.build().map_err(invalid)
}

static CALL_KEYS: AtomicU32 = AtomicU32::new(1);

/// A tool whose `execute` is a JavaScript function (reached through
/// `dispatch`); a cancelled call aborts its `signal` (through `abort`).
fn js_tool(spec: &Value, dispatch: Arc<Dispatch>, abort: Arc<Abort>) -> Result<harness::FnTool> {
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("a tool needs a name"))?
        .to_owned();
    let description = spec
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let schema = spec
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    let approval = spec
        .get("needsApproval")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tool_name = name.clone();
    let tool = harness::FnTool::new(&name, description, schema, move |args, ctx| {
        let dispatch = dispatch.clone();
        let abort = abort.clone();
        let name = tool_name.clone();
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
    });
    Ok(if approval {
        tool.requiring_approval(|_| true)
    } else {
        tool
    })
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
        let mut h = self.harness()?;
        let options: Value = serde_json::from_str(&options).map_err(invalid)?;
        if let Some(ms) = options.get("timeoutMs").and_then(Value::as_u64) {
            h = h.with_limits(h.limits().clone().with_timeout_ms(ms));
        }
        let mut request = h.request(&code);
        if let Some(ctx) = options.get("context").filter(|c| !c.is_null()) {
            request.context = request
                .context
                .clone()
                .merge_script_json(ctx)
                .map_err(invalid)?;
        }
        if let Some(l) = options.get("language").filter(|l| !l.is_null()) {
            let language: ScriptLanguage = serde_json::from_value(l.clone()).map_err(invalid)?;
            request.language = language;
        }
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
        use harness::respond::items as wire;
        let h = self.harness()?;
        let items = h
            .orchestrator(false)
            .respond(&text, None, CancellationToken::new())
            .await
            .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))?;
        let out = match format.as_str() {
            "items" => serde_json::to_value(&items).map_err(invalid)?,
            "openai-responses" => Value::from(wire::to_openai_responses(&items)),
            "chat" => Value::from(wire::to_chat(&items)),
            "anthropic" => Value::from(wire::to_anthropic(&items)),
            other => return Err(invalid(format!("unknown format `{other}`"))),
        };
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
