//! What the language bindings (the npm and PyPI packages `script-harness`)
//! share: their options arrive as JSON objects and become a
//! [`HarnessBuilder`], their tool specs [`FnTool`]s calling back into the
//! binding, a run's options an [`ExecutionRequest`], and `respond` answers
//! in one of the wire formats. Any other embedder that
//! speaks JSON to the harness may use them too.
//!
//! ```
//! use serde_json::json;
//! let builder = harness::embed::builder_from_options(&json!({
//!     "limits": {"timeout_ms": 2000},
//!     "mode": "enabled",
//! })).unwrap();
//! let h = builder.build().unwrap();
//! let request = harness::embed::request_from_options(&h, "return 1", &json!({"timeout_ms": 500})).unwrap();
//! assert_eq!(request.limits.timeout_ms, 500);
//! ```

use crate::config::{Config, Overrides};
use crate::{
    Allowlist, CancellationToken, EngineKind, ExecutionRequest, FnTool, Harness, HarnessBuilder,
    Limits, Mode, ScriptLanguage, ToolContext, ToolError,
};
use serde_json::{json, Value};
use std::future::Future;

/// Why options were refused; the message names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
#[non_exhaustive]
pub struct OptionsError(pub String);

fn bad(message: impl std::fmt::Display) -> OptionsError {
    OptionsError(message.to_string())
}

/// A builder from the options object of `new Harness(...)` /
/// `Harness(...)`: `config` (a harness.toml path) with `provider`,
/// `limits` (snake_case names; on top of the file's when both are given),
/// `engine`, `isolation` (`in_process` or `process`), `mode`, `allow`
/// (tool names), and `keep_warm_ms` (also `keepWarmMs`: milliseconds to
/// keep the engine warm after each run, 0 for off, over the file's
/// `[workers] keep_warm_ms`; [`HarnessBuilder::keep_warm`]) with
/// `keep_warm_awake` (also `keepWarmAwake`: a boolean, over the file's
/// `[workers] keep_warm_awake`; [`HarnessBuilder::keep_warm_awake`]), and
/// `anticipate` (a boolean, over the file's `[workers] anticipate`;
/// [`HarnessBuilder::anticipate`]).
/// Tools and approvals are the caller's to add.
pub fn builder_from_options(options: &Value) -> Result<HarnessBuilder, OptionsError> {
    let limits = match options.get("limits") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(bad("`limits` must be an object")),
    };
    let mut builder = match options.get("config").and_then(Value::as_str) {
        Some(path) => {
            let mut cfg = Config::load(path).map_err(bad)?;
            if let Some(p) = options.get("provider").and_then(Value::as_str) {
                cfg = cfg.with_provider(p).map_err(bad)?;
            }
            if let Some(limits) = limits {
                let mut o = Overrides::new();
                for (k, v) in limits {
                    o = o.set(&format!("limits.{k}"), v.clone()).map_err(bad)?;
                }
                cfg = cfg.with_overrides(&o).map_err(bad)?;
            }
            cfg.builder().map_err(bad)?
        }
        None => {
            let mut b = Harness::builder();
            if let Some(limits) = limits {
                let mut all = serde_json::to_value(Limits::default()).map_err(bad)?;
                if let Value::Object(m) = &mut all {
                    for (k, v) in limits {
                        if !m.contains_key(k) {
                            return Err(bad(format!("unknown limit `{k}`")));
                        }
                        m.insert(k.clone(), v.clone());
                    }
                }
                let limits: Limits =
                    serde_json::from_value(all).map_err(|e| bad(format!("limits: {e}")))?;
                b = b.limits(limits);
            }
            b
        }
    };
    if let Some(e) = options.get("engine").and_then(Value::as_str) {
        let engine: EngineKind = e.parse().map_err(bad)?;
        builder = builder.engine(engine);
    }
    if let Some(i) = options.get("isolation").filter(|i| !i.is_null()) {
        builder = builder.isolation(
            serde_json::from_value(i.clone()).map_err(|e| bad(format!("isolation: {e}")))?,
        );
    }
    if let Some(m) = options.get("mode").filter(|m| !m.is_null()) {
        let mode: Mode =
            serde_json::from_value(m.clone()).map_err(|e| bad(format!("mode: {e}")))?;
        builder = builder.mode(mode);
    }
    match options.get("allow") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) => {
            let mut only = Vec::with_capacity(names.len());
            for n in names {
                only.push(
                    n.as_str()
                        .ok_or_else(|| bad("`allow` must be a list of tool names"))?
                        .to_owned(),
                );
            }
            builder = builder.allow(Allowlist::only(only));
        }
        Some(_) => return Err(bad("`allow` must be a list of tool names")),
    }
    if let Some(ms) = milliseconds(options, "keep_warm_ms", "keepWarmMs")? {
        builder = builder.keep_warm(std::time::Duration::from_millis(ms));
    }
    if let Some(awake) = boolean(options, "keep_warm_awake", "keepWarmAwake")? {
        builder = builder.keep_warm_awake(awake);
    }
    if let Some(on) = boolean(options, "anticipate", "anticipate")? {
        builder = builder.anticipate(on);
    }
    if let Some(runs) = durable_runs(options)? {
        builder = builder.suspend(runs);
    }
    Ok(builder)
}

/// `suspend`: `true` (the keys of `config`'s `[durable]`, or the user's
/// key file in the state directory) or `{keys: [KEY, …],
/// max_suspended_ms?}` (32-byte keys as base64 or hex; the first seals).
fn durable_runs(options: &Value) -> Result<Option<crate::durable::DurableRuns>, OptionsError> {
    use crate::durable::{ContinuationKeys, DurableRuns};
    match options.get("suspend") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => {
            let cfg = match options.get("config").and_then(Value::as_str) {
                Some(path) => Config::load(path).map_err(bad)?,
                None => Config::defaults(),
            };
            cfg.durable_runs().map(Some).map_err(bad)
        }
        Some(Value::Object(m)) => {
            let keys = match m.get("keys") {
                Some(Value::Array(k)) if !k.is_empty() => k,
                _ => {
                    return Err(bad(
                        "`suspend.keys` must be a list of keys (32 bytes, base64 or hex)",
                    ))
                }
            };
            let mut parsed = Vec::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                let text = k
                    .as_str()
                    .ok_or_else(|| bad("`suspend.keys` must be strings"))?;
                parsed.push(
                    crate::durable::parse_key(text, &format!("suspend.keys[{i}]")).map_err(bad)?,
                );
            }
            let mut all = ContinuationKeys::new(parsed[0]);
            for k in &parsed[1..] {
                all = all.also_opening(*k);
            }
            let mut runs = DurableRuns::new(all);
            if let Some(ms) = m.get("max_suspended_ms").filter(|v| !v.is_null()) {
                let ms = ms
                    .as_u64()
                    .ok_or_else(|| bad("`suspend.max_suspended_ms` must be a whole number"))?;
                runs = runs.with_max_suspended_ms(ms);
            }
            Ok(Some(runs))
        }
        Some(_) => Err(bad("`suspend` must be true or {keys: [...]}")),
    }
}

/// A deferred tool ([`crate::DeferredTool`]) from a tool spec with
/// `deferred: true`: its results arrive at `resume`; `None` for any other
/// spec.
pub fn deferred_from_spec(spec: &Value) -> Result<Option<crate::DeferredTool>, OptionsError> {
    if spec.get("deferred").and_then(Value::as_bool) != Some(true) {
        return Ok(None);
    }
    let (name, description, schema) = spec_parts(spec)?;
    Ok(Some(crate::DeferredTool::new(name, description, schema)))
}

/// A tool spec's `name`, `description` (default empty) and `parameters`
/// (a missing or null one is any object).
fn spec_parts(spec: &Value) -> Result<(&str, &str, Value), OptionsError> {
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("a tool needs a name"))?;
    let description = spec
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let schema = spec
        .get("parameters")
        .filter(|s| !s.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    Ok((name, description, schema))
}

/// Resumes a suspended run: `continuation` is its report's
/// `suspension.continuation`, `answers` a [`crate::durable::Answers`] as
/// JSON (`{approve?, answers?: {ID: value}, failures?: {ID: message}}`).
/// Answers that do not fit are a report with ContinuationInvalidError.
pub async fn resume(h: &Harness, continuation: &str, answers: &Value) -> crate::ExecutionReport {
    let invalid = |why: String| {
        crate::ExecutionReport::failed(
            &h.engine().name,
            crate::ScriptError::new(
                crate::ErrorCode::ContinuationInvalidError,
                crate::Phase::Parsing,
                why,
            )
            .with_name("ContinuationInvalidError"),
        )
    };
    let given: crate::durable::Answers = match serde_json::from_value(answers.clone()) {
        Ok(a) => a,
        Err(e) => return invalid(format!("the answers: {e}")),
    };
    h.resume_answering(h.request(""), continuation, |p| given.for_calls(p))
        .await
}

/// A boolean under `name` (or its camelCase `camel`); `None` when absent
/// or null.
fn boolean(options: &Value, name: &str, camel: &str) -> Result<Option<bool>, OptionsError> {
    typed(options, name, camel, Value::as_bool, "true or false")
}

/// A whole number of milliseconds under `name` (or its camelCase
/// `camel`); `None` when absent or null.
fn milliseconds(options: &Value, name: &str, camel: &str) -> Result<Option<u64>, OptionsError> {
    typed(
        options,
        name,
        camel,
        Value::as_u64,
        "a whole number of milliseconds",
    )
}

/// The option under `name` (or its camelCase `camel`) as `read` takes it;
/// `None` when absent or null, an error saying it must be `what` when
/// `read` refuses it.
fn typed<T>(
    options: &Value,
    name: &str,
    camel: &str,
    read: impl FnOnce(&Value) -> Option<T>,
    what: &str,
) -> Result<Option<T>, OptionsError> {
    match options
        .get(name)
        .or_else(|| options.get(camel))
        .filter(|v| !v.is_null())
    {
        None => Ok(None),
        Some(v) => read(v)
            .map(Some)
            .ok_or_else(|| bad(format!("`{name}` must be {what}"))),
    }
}

/// A tool from a binding's tool spec, `{name, description?, parameters?,
/// needsApproval?}` (a missing or null `parameters` is any object), whose
/// calls go to `call(name, args, ctx)`: the binding's bridge to its own
/// language.
pub fn tool_from_spec<F, Fut>(spec: &Value, call: F) -> Result<FnTool, OptionsError>
where
    F: Fn(String, Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    let (name, description, schema) = spec_parts(spec)?;
    let name = name.to_owned();
    let approval = spec
        .get("needsApproval")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tool_name = name.clone();
    let tool = FnTool::new(&name, description, schema, move |args, ctx| {
        call(tool_name.clone(), args, ctx)
    });
    Ok(if approval {
        tool.requiring_approval(|_| true)
    } else {
        tool
    })
}

/// A request for `code` from a run's options: `context` (the object
/// scripts see, camelCase keys), `timeout_ms` (also `timeoutMs`) and
/// `language` (`js`, `ts`, `auto`). Its cancellation token is fresh.
pub fn request_from_options(
    h: &Harness,
    code: &str,
    options: &Value,
) -> Result<ExecutionRequest, OptionsError> {
    let mut request = h.request(code);
    if let Some(ms) = milliseconds(options, "timeout_ms", "timeoutMs")? {
        request.limits = request.limits.clone().with_timeout_ms(ms);
    }
    if let Some(ctx) = options.get("context").filter(|c| !c.is_null()) {
        request.context = request
            .context
            .clone()
            .merge_script_json(ctx)
            .map_err(bad)?;
    }
    if let Some(l) = options.get("language").filter(|l| !l.is_null()) {
        let language: ScriptLanguage =
            serde_json::from_value(l.clone()).map_err(|e| bad(format!("language: {e}")))?;
        request.language = language;
    }
    request.cancel = CancellationToken::new();
    Ok(request)
}

/// A report as the bindings hand it over: its JSON, or, where it cannot
/// be serialised, a `HarnessInternalError` report saying why.
pub fn report_json(report: &crate::ExecutionReport) -> String {
    serde_json::to_string(report).unwrap_or_else(|e| {
        serde_json::json!({"ok": false, "error": {"code": "HarnessInternalError", "message": format!("the report could not be serialised: {e}"), "phase": "finalizing"}}).to_string()
    })
}

/// Runs `request` where `options` says: in the session its `session`
/// names (a string `open_session` gave; a closed or unknown one is a
/// report with `SessionClosedError`), or on its own.
pub async fn execute(
    h: &Harness,
    options: &Value,
    request: ExecutionRequest,
) -> crate::ExecutionReport {
    match options.get("session").and_then(Value::as_str) {
        Some(id) => match h.session(id) {
            Ok(s) => s.execute(request).await,
            Err(e) => crate::ExecutionReport::failed(&h.engine().name, e.to_script_error()),
        },
        None => h.execute(request).await,
    }
}

/// Opens a session ([`Harness::open_session`]) and returns its id.
pub fn open_session(h: &Harness) -> Result<String, OptionsError> {
    h.open_session().map(|s| s.id().to_owned()).map_err(bad)
}

/// Closes session `id`; false when it was not live.
pub fn close_session(h: &Harness, id: &str) -> bool {
    h.session(id).is_ok_and(|s| s.close())
}

/// Runs the script blocks of a model response and returns the items in
/// `format`: `items` (the harness's own), `openai-responses`, `chat`
/// (OpenAI Chat Completions) or `anthropic`.
pub async fn respond(
    h: &Harness,
    text: &str,
    format: &str,
    cancel: CancellationToken,
) -> Result<Value, OptionsError> {
    use crate::respond::items as wire;
    if !matches!(format, "items" | "openai-responses" | "chat" | "anthropic") {
        return Err(bad(format!(
            "unknown format `{format}` (items, openai-responses, chat, anthropic)"
        )));
    }
    let items = h
        .orchestrator(false)
        .respond(text, None, cancel)
        .await
        .map_err(bad)?;
    Ok(match format {
        "items" => serde_json::to_value(&items).map_err(bad)?,
        "openai-responses" => Value::from(wire::to_openai_responses(&items)),
        "chat" => Value::from(wire::to_chat(&items)),
        _ => Value::from(wire::to_anthropic(&items)),
    })
}

/// Hands one value (a binding's next tool call) from the thread that makes
/// it to a thread that spins for it, instead of waking a sleeping one: on a
/// VM whose idle CPUs halt, that wake-up was most of what a binding's tool
/// call cost a script calling tools one after another.
/// At most one thread waits at a time; a value offered while none waits
/// comes back to its caller, to deliver the usual way.
///
/// ```
/// let h = harness::embed::Handoff::new();
/// assert_eq!(h.offer(1), Some(1)); // nobody waits
/// assert_eq!(h.wait(std::time::Duration::from_micros(10)), None);
/// ```
#[derive(Debug)]
pub struct Handoff<T> {
    /// Idle, waiting (a thread spins), filling (a value is being stored),
    /// filled (stored, not yet taken).
    state: std::sync::atomic::AtomicU8,
    value: std::sync::Mutex<Option<T>>,
}

const IDLE: u8 = 0;
const WAITING: u8 = 1;
const FILLING: u8 = 2;
const FILLED: u8 = 3;

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Handoff<T> {
    /// Nobody waiting, nothing offered (usable in a `static`).
    pub const fn new() -> Self {
        Handoff {
            state: std::sync::atomic::AtomicU8::new(IDLE),
            value: std::sync::Mutex::new(None),
        }
    }

    /// Gives `value` to the waiting thread; back if none waits.
    pub fn offer(&self, value: T) -> Option<T> {
        use std::sync::atomic::Ordering;
        if self
            .state
            .compare_exchange(WAITING, FILLING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Some(value);
        }
        if let Ok(mut slot) = self.value.lock() {
            *slot = Some(value);
        }
        self.state.store(FILLED, Ordering::Release);
        None
    }

    /// Waits up to `spin` for a value, yielding the CPU between looks, and
    /// takes it; `None` at once if another thread is waiting already, and
    /// when [`Handoff::stop`] ends the wait.
    pub fn wait(&self, spin: std::time::Duration) -> Option<T> {
        self.wait_until(spin, || false)
    }

    /// [`Handoff::wait`], ending the wait early (without a value, unless
    /// one is being stored) as soon as `stop` says true: something else
    /// the waiting thread should see to came first. `stop` is asked
    /// between looks.
    pub fn wait_until(
        &self,
        spin: std::time::Duration,
        mut stop: impl FnMut() -> bool,
    ) -> Option<T> {
        use std::sync::atomic::Ordering;
        if self
            .state
            .compare_exchange(IDLE, WAITING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        let until = std::time::Instant::now() + spin;
        loop {
            match self.state.load(Ordering::Acquire) {
                FILLED => {
                    let value = self.value.lock().ok().and_then(|mut v| v.take());
                    self.state.store(IDLE, Ordering::Release);
                    return value;
                }
                // Stopped.
                IDLE => return None,
                // Given up; unless a value is being stored, then take it.
                WAITING
                    if (stop() || std::time::Instant::now() >= until)
                        && self
                            .state
                            .compare_exchange(WAITING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok() =>
                {
                    return None;
                }
                _ => {}
            }
            std::thread::yield_now();
        }
    }

    /// Ends a wait without a value (a value being stored is still taken).
    pub fn stop(&self) {
        use std::sync::atomic::Ordering;
        let _ = self
            .state
            .compare_exchange(WAITING, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }
}
