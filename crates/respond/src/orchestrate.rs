//! The orchestrator: detect the script blocks of one model response,
//! prepare them, run them in order (each with its own budget: a run of its
//! own), and turn everything into conversation items, streaming progress
//! events while it works.

use crate::detect::{detect, DetectError, Language, SegmentKind};
use crate::items::{CallStatus, Item};
use crate::prepare::Preparer;
use harness_core::adapter::RunObserver;
use harness_core::{
    CancellationToken, DetachedTask, DetachedTasks, ErrorCode, ExecutionRequest, Limits, Mode,
    ScriptContext, ScriptRuntimeAdapter, ToolSet,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// What happens while a response is processed, in order, for a UI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    ScriptStarted {
        call_id: String,
        index: usize,
        language: Language,
    },
    ToolCallStarted {
        call_id: String,
        tool_call: u64,
        tool: String,
    },
    ToolCallFinished {
        call_id: String,
        tool_call: u64,
        tool: String,
        ok: bool,
        error: Option<ErrorCode>,
    },
    Progress {
        call_id: String,
        message: String,
        data: Option<Value>,
    },
    ScriptFinished {
        call_id: String,
        duration_ms: f64,
    },
    ScriptFailed {
        call_id: String,
        code: ErrorCode,
        message: String,
    },
    /// A detached task a block started with `tools.spawn` ended (possibly
    /// after its block, and after the response's items were returned).
    DetachedTaskFinished {
        call_id: String,
        task: DetachedTask,
    },
    /// A block was not run (mode disabled or dry-run, an earlier failure
    /// without `continue_on_error`, or the response was cancelled).
    ScriptSkipped {
        call_id: String,
        reason: String,
    },
}

/// How a response is processed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Whether blocks run, are only checked (dry run), or are not run.
    pub mode: Mode,
    /// Run the blocks after a failed one (default: stop at the first failure).
    pub continue_on_error: bool,
    /// Limits for each block's run.
    pub limits: Limits,
    /// What each block's script sees as `context`.
    pub context: ScriptContext,
    /// Where `tools.spawn` starts detached tasks; `None` turns it off.
    pub tasks: Option<Arc<DetachedTasks>>,
    /// The caller's W3C `traceparent`, for every block's run.
    pub traceparent: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::Enabled,
            continue_on_error: false,
            limits: Limits::default(),
            context: ScriptContext::default(),
            tasks: None,
            traceparent: None,
        }
    }
}

impl Options {
    /// With `mode` for every block.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Running the blocks after a failed one, or not.
    pub fn with_continue_on_error(mut self, continue_on_error: bool) -> Self {
        self.continue_on_error = continue_on_error;
        self
    }

    /// With `limits` for each block's run.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// With `context` for each block's script.
    pub fn with_context(mut self, context: ScriptContext) -> Self {
        self.context = context;
        self
    }

    /// With detached tasks started in `tasks` (`None`: `tools.spawn` off).
    pub fn with_tasks(mut self, tasks: Option<Arc<DetachedTasks>>) -> Self {
        self.tasks = tasks;
        self
    }

    /// With the caller's W3C `traceparent` for every block's run.
    pub fn with_traceparent(mut self, traceparent: Option<String>) -> Self {
        self.traceparent = traceparent;
        self
    }
}

/// Runs model responses on one engine with one tool set.
#[derive(Clone)]
pub struct Orchestrator {
    adapter: Arc<dyn ScriptRuntimeAdapter>,
    tools: ToolSet,
    preparer: Arc<Preparer>,
    options: Options,
}

impl std::fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orchestrator")
            .field("engine", &self.adapter.info().name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Forwards the run's live events, tagged with the block's call id.
struct Forward {
    call_id: String,
    tx: UnboundedSender<Event>,
}

impl RunObserver for Forward {
    fn tool_call_started(&self, id: u64, tool: &str) {
        let _ = self.tx.send(Event::ToolCallStarted {
            call_id: self.call_id.clone(),
            tool_call: id,
            tool: tool.to_owned(),
        });
    }

    fn tool_call_finished(&self, id: u64, tool: &str, error: Option<ErrorCode>) {
        let _ = self.tx.send(Event::ToolCallFinished {
            call_id: self.call_id.clone(),
            tool_call: id,
            tool: tool.to_owned(),
            ok: error.is_none(),
            error,
        });
    }

    fn progress(&self, message: &str, data: Option<&Value>) {
        let _ = self.tx.send(Event::Progress {
            call_id: self.call_id.clone(),
            message: message.to_owned(),
            data: data.cloned(),
        });
    }

    fn task_finished(&self, task: &DetachedTask) {
        let _ = self.tx.send(Event::DetachedTaskFinished {
            call_id: self.call_id.clone(),
            task: task.clone(),
        });
    }
}

impl Orchestrator {
    pub fn new(adapter: Arc<dyn ScriptRuntimeAdapter>, tools: ToolSet, options: Options) -> Self {
        let preparer = Arc::new(Preparer::new(256, options.limits.max_source_bytes));
        Orchestrator {
            adapter,
            tools,
            preparer,
            options,
        }
    }

    /// The cache of prepared scripts (its hit rate is in [`Preparer::stats`]).
    pub fn preparer(&self) -> &Preparer {
        &self.preparer
    }

    /// Processes one assistant response: every segment becomes an item, in
    /// order; each script block becomes a `script_tool_call` followed by
    /// its `script_tool_call_output`. `events` (if any) receives progress
    /// as it happens; `cancel` stops the whole response (the running block
    /// ends with ScriptCancelledError, later blocks are skipped).
    pub async fn respond(
        &self,
        text: &str,
        events: Option<UnboundedSender<Event>>,
        cancel: CancellationToken,
    ) -> Result<Vec<Item>, DetectError> {
        let segments = detect(text)?;
        let mut items = Vec::with_capacity(segments.len() + 2);
        let mut index = 0usize;
        let mut stop: Option<String> = None;
        let send = |e: Event| {
            if let Some(tx) = &events {
                let _ = tx.send(e);
            }
        };
        for seg in &segments {
            let body = seg.body.clone().map(|b| &text[b]);
            match seg.kind {
                SegmentKind::Text => items.push(Item::Text {
                    text: text[seg.range.clone()].to_owned(),
                }),
                SegmentKind::Thinking => items.push(Item::Thinking {
                    text: body.unwrap_or_default().to_owned(),
                }),
                SegmentKind::Script if self.options.mode == Mode::Disabled => {
                    // Left as text, with a notice.
                    items.push(Item::Text {
                        text: text[seg.range.clone()].to_owned(),
                    });
                    items.push(Item::Notice {
                        text: "script execution is disabled; the block above was not run"
                            .to_owned(),
                    });
                }
                SegmentKind::Script => {
                    index += 1;
                    let language = seg.language.unwrap_or_default();
                    let source = body.unwrap_or_default();
                    let call_id = format!("call_{index}");
                    let (call, output) = self
                        .run_block(
                            index, &call_id, language, source, &stop, &cancel, &send, &events,
                        )
                        .await;
                    if output.failed() && !self.options.continue_on_error && stop.is_none() {
                        stop = Some(format!(
                            "an earlier block ({}) failed and continue_on_error is off",
                            call_id
                        ));
                    }
                    if cancel.is_cancelled() && stop.is_none() {
                        stop = Some("the response was cancelled".to_owned());
                    }
                    items.push(call);
                    items.push(output);
                }
            }
        }
        Ok(items)
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_block(
        &self,
        index: usize,
        call_id: &str,
        language: Language,
        source: &str,
        stop: &Option<String>,
        cancel: &CancellationToken,
        send: &impl Fn(Event),
        events: &Option<UnboundedSender<Event>>,
    ) -> (Item, Item) {
        let id = format!("stc_{index}");
        // Any block may be TypeScript, whatever its fence says: one that
        // does not parse as JavaScript is tried as TypeScript.
        let mut language = language;
        let mut prepared = self.preparer.prepare(source.as_bytes(), language);
        if language == Language::Javascript
            && matches!(&prepared, Err(e) if e.code == ErrorCode::ScriptSyntaxError)
        {
            match self
                .preparer
                .prepare(source.as_bytes(), Language::Typescript)
            {
                Ok(p) => {
                    prepared = Ok(p);
                    language = Language::Typescript;
                }
                // Neither: the parser that got further is the better guide.
                Err(ts) => {
                    if prepared
                        .as_ref()
                        .err()
                        .is_some_and(|js| crate::language::later(&ts, js))
                    {
                        prepared = Err(ts);
                    }
                }
            }
        }
        let sha256 = match &prepared {
            Ok(p) => p.sha256.clone(),
            Err(_) => crate::prepare::sha256_hex(source),
        };
        let call = |status| Item::ScriptToolCall {
            id: id.clone(),
            call_id: call_id.to_owned(),
            language,
            source: source.to_owned(),
            sha256: sha256.clone(),
            status,
        };
        let skipped = |reason: String| {
            send(Event::ScriptSkipped {
                call_id: call_id.to_owned(),
                reason: reason.clone(),
            });
            (
                call(CallStatus::Skipped),
                Item::output_skipped(call_id, &reason),
            )
        };
        if let Some(reason) = stop.clone() {
            return skipped(reason);
        }
        if cancel.is_cancelled() {
            return skipped("the response was cancelled".to_owned());
        }
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                send(Event::ScriptFailed {
                    call_id: call_id.to_owned(),
                    code: e.code,
                    message: e.message.clone(),
                });
                return (
                    call(CallStatus::Failed),
                    Item::output_error(call_id, e, None),
                );
            }
        };
        if self.options.mode == Mode::DryRun {
            // Detect, prepare and check tool names: nothing runs.
            let report = self.dry_run_report(&prepared.tools);
            send(Event::ScriptSkipped {
                call_id: call_id.to_owned(),
                reason: "dry-run".to_owned(),
            });
            let status = if report.get("ok") == Some(&Value::Bool(true)) {
                CallStatus::Validated
            } else {
                CallStatus::Failed
            };
            return (call(status), Item::output_validation(call_id, report));
        }
        send(Event::ScriptStarted {
            call_id: call_id.to_owned(),
            index,
            language,
        });
        let mut request = ExecutionRequest::new(prepared.code.clone());
        // Already JavaScript: its types, if any, were stripped above.
        request.language = harness_core::ScriptLanguage::JavaScript;
        request.tasks = self.options.tasks.clone();
        request.traceparent = self.options.traceparent.clone();
        request.limits = self.options.limits.clone();
        request.context = self.options.context.clone();
        request.mode = self.options.mode;
        request.tools = self.tools.clone();
        request.cancel = cancel.child_token();
        request.observer = events.clone().map(|tx| {
            harness_core::adapter::Observer::new(Arc::new(Forward {
                call_id: call_id.to_owned(),
                tx,
            }))
        });
        let report = self.adapter.execute(request).await;
        match &report.error {
            None => send(Event::ScriptFinished {
                call_id: call_id.to_owned(),
                duration_ms: report.metrics.duration_ms,
            }),
            Some(e) => send(Event::ScriptFailed {
                call_id: call_id.to_owned(),
                code: e.code,
                message: e.message.clone(),
            }),
        }
        let status = if report.ok {
            CallStatus::Completed
        } else if report.suspension.is_some() {
            CallStatus::Suspended
        } else {
            CallStatus::Failed
        };
        let mut output = Item::output_from_report(call_id, &report);
        if let Item::ScriptToolCallOutput { metadata, .. } = &mut output {
            metadata["prepare_cache"] = json!(self.preparer.stats());
        }
        (call(status), output)
    }

    /// What dry-run reports for a block: the tools it names (read from
    /// the AST while preparing), and which of them are not available.
    fn dry_run_report(&self, named: &[String]) -> Value {
        let allowed = self.tools.allow.resolve(&self.tools.registry);
        let unknown: Vec<&String> = named.iter().filter(|n| !allowed.contains(n)).collect();
        json!({
            "ok": unknown.is_empty(),
            "mode": "dry-run",
            "tools": named,
            "unknown_tools": unknown,
            "available_tools": allowed,
        })
    }
}
