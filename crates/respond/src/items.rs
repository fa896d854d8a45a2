//! Conversation items, and the three common wire shapes they travel in.
//!
//! A processed response is a list of [`Item`]s in the order of the
//! original text: text, thinking, and for each script block a
//! `script_tool_call` followed by its `script_tool_call_output`. The
//! adapters turn them into OpenAI Responses input items, Chat Completions
//! messages or Anthropic Messages, and back, losing nothing: each
//! `from_*` inverts its `to_*`.
//!
//! In every shape a script call is a function / tool call named
//! [`SCRIPT_TOOL`] whose arguments carry `language`, `source`, `sha256`,
//! `id` and `status`, and its output is a JSON string (or object, for
//! Anthropic's `input`) with `output`, `error`, `summary` and `metadata`.

use crate::detect::Language;
use harness_core::{ErrorCode, ExecutionReport, Phase, ScriptError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The function / tool name script calls have on the wire.
pub const SCRIPT_TOOL: &str = "script_tool_call";

/// Prefix of a notice carried as a user text block (Anthropic has no other
/// place for it).
const NOTICE_PREFIX: &str = "[harness notice] ";

/// How a script call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallStatus {
    Completed,
    Failed,
    /// Not run: an earlier block failed, the response was cancelled.
    Skipped,
    /// Dry-run: prepared and checked, not run.
    Validated,
    /// Put away while it waits on answers from outside; its output's
    /// metadata holds the `suspension` (docs/user-guide.md "Durable runs").
    Suspended,
}

/// One conversation item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Item {
    Text {
        text: String,
    },
    Thinking {
        text: String,
    },
    /// Said by the harness, not the model (e.g. execution disabled).
    Notice {
        text: String,
    },
    ScriptToolCall {
        id: String,
        call_id: String,
        language: Language,
        source: String,
        sha256: String,
        status: CallStatus,
    },
    ScriptToolCallOutput {
        call_id: String,
        /// The script's return value (absent for `undefined` or on error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ScriptError>,
        summary: String,
        /// The rest of the report: metrics, console, tool calls, approvals,
        /// progress (or the dry-run validation).
        metadata: Value,
    },
}

impl Item {
    pub(crate) fn output_from_report(call_id: &str, report: &ExecutionReport) -> Item {
        let mut item = Item::ScriptToolCallOutput {
            call_id: call_id.to_owned(),
            output: report.value.clone(),
            error: report.error.clone(),
            summary: summary(report),
            metadata: json!({
                "metrics": report.metrics,
                "console": report.console,
                "console_dropped": report.console_dropped,
                "tool_calls": report.tool_calls,
                "tool_calls_dropped": report.tool_calls_dropped,
                "approvals": report.approvals,
                "progress": report.progress,
                "progress_dropped": report.progress_dropped,
                "script_id": report.script_id,
                "warnings": report.warnings,
                "detached_tasks": report.detached_tasks,
                "retried": report.retried,
            }),
        };
        if let (Some(s), Item::ScriptToolCallOutput { metadata, .. }) =
            (&report.suspension, &mut item)
        {
            metadata["suspension"] = json!(s);
        }
        item
    }

    pub(crate) fn output_error(call_id: &str, error: ScriptError, metadata: Option<Value>) -> Item {
        Item::ScriptToolCallOutput {
            call_id: call_id.to_owned(),
            output: None,
            summary: format!("failed: {}: {}", error.code, error.message),
            error: Some(error),
            metadata: metadata.unwrap_or_else(|| json!({})),
        }
    }

    pub(crate) fn output_skipped(call_id: &str, reason: &str) -> Item {
        Item::ScriptToolCallOutput {
            call_id: call_id.to_owned(),
            output: None,
            error: Some(not_run(reason)),
            summary: format!("not run: {reason}"),
            metadata: json!({"skipped": true}),
        }
    }

    pub(crate) fn output_validation(call_id: &str, validation: Value) -> Item {
        let ok = validation.get("ok") == Some(&Value::Bool(true));
        Item::ScriptToolCallOutput {
            call_id: call_id.to_owned(),
            output: None,
            error: None,
            summary: if ok {
                "dry-run: prepared and checked, not run".to_owned()
            } else {
                "dry-run: the script names tools that are not available".to_owned()
            },
            metadata: validation,
        }
    }

    /// An output item that carries an error.
    pub fn failed(&self) -> bool {
        matches!(self, Item::ScriptToolCallOutput { error: Some(_), .. })
            || matches!(self, Item::ScriptToolCallOutput { metadata, .. }
                if metadata.get("ok") == Some(&Value::Bool(false)))
    }
}

/// A wire value that is not what an adapter expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("item {index}: {message}")]
#[non_exhaustive]
pub struct WireError {
    pub index: usize,
    pub message: String,
}

fn wire_err(index: usize, message: impl Into<String>) -> WireError {
    WireError {
        index,
        message: message.into(),
    }
}

/// What a script call or its output carries on the wire, as every format
/// writes it: the call's arguments, or the output's body.
fn payload(item: &Item) -> Value {
    match item {
        Item::ScriptToolCall {
            id,
            language,
            source,
            sha256,
            status,
            ..
        } => {
            json!({"id": id, "language": language, "source": source, "sha256": sha256, "status": status})
        }
        Item::ScriptToolCallOutput {
            output,
            error,
            summary,
            metadata,
            ..
        } => json!({"output": output, "error": error, "summary": summary, "metadata": metadata}),
        Item::Text { .. } | Item::Thinking { .. } | Item::Notice { .. } => Value::Null,
    }
}

fn parse_call(index: usize, call_id: &str, args: &Value) -> Result<Item, WireError> {
    let s = |k: &str| {
        args.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| wire_err(index, format!("script call arguments lack {k:?}")))
    };
    let de = |k: &str| -> Result<Value, WireError> {
        args.get(k)
            .cloned()
            .ok_or_else(|| wire_err(index, format!("script call arguments lack {k:?}")))
    };
    Ok(Item::ScriptToolCall {
        id: s("id")?,
        call_id: call_id.to_owned(),
        language: serde_json::from_value(de("language")?)
            .map_err(|e| wire_err(index, e.to_string()))?,
        source: s("source")?,
        sha256: s("sha256")?,
        status: serde_json::from_value(de("status")?)
            .map_err(|e| wire_err(index, e.to_string()))?,
    })
}

fn parse_output(index: usize, call_id: &str, body: &Value) -> Result<Item, WireError> {
    let error = match body.get("error") {
        None | Some(Value::Null) => None,
        Some(e) => {
            Some(serde_json::from_value(e.clone()).map_err(|e| wire_err(index, e.to_string()))?)
        }
    };
    Ok(Item::ScriptToolCallOutput {
        call_id: call_id.to_owned(),
        output: body.get("output").filter(|v| !v.is_null()).cloned(),
        error,
        summary: body
            .get("summary")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        metadata: body.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn json_string(index: usize, v: Option<&Value>) -> Result<Value, WireError> {
    let s = v
        .and_then(Value::as_str)
        .ok_or_else(|| wire_err(index, "expected a JSON string"))?;
    serde_json::from_str(s).map_err(|e| wire_err(index, format!("not JSON: {e}")))
}

fn str_at<'v>(index: usize, v: &'v Value, pointer: &str) -> Result<&'v str, WireError> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .ok_or_else(|| wire_err(index, format!("missing {pointer}")))
}

// ---- OpenAI Responses ------------------------------------------------------

/// Items as OpenAI Responses input items (`message`, `reasoning`,
/// `function_call`, `function_call_output`).
pub fn to_openai_responses(items: &[Item]) -> Vec<Value> {
    items
        .iter()
        .map(|item| match item {
            Item::Text { text } => json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]}),
            Item::Thinking { text } => json!({"type": "reasoning",
                "summary": [{"type": "summary_text", "text": text}]}),
            Item::Notice { text } => json!({"type": "message", "role": "system",
                "content": [{"type": "input_text", "text": text}]}),
            Item::ScriptToolCall {
                id,
                call_id,
                status,
                ..
            } => json!({
                "type": "function_call", "id": id, "call_id": call_id, "name": SCRIPT_TOOL,
                "arguments": payload(item).to_string(),
                "status": if *status == CallStatus::Skipped { "incomplete" } else { "completed" },
            }),
            Item::ScriptToolCallOutput { call_id, .. } => json!({
                "type": "function_call_output", "call_id": call_id,
                "output": payload(item).to_string(),
            }),
        })
        .collect()
}

/// The inverse of [`to_openai_responses`].
pub fn from_openai_responses(values: &[Value]) -> Result<Vec<Item>, WireError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v.get("type").and_then(Value::as_str) {
            Some("message") => {
                let text = str_at(i, v, "/content/0/text")?.to_owned();
                Ok(match v.get("role").and_then(Value::as_str) {
                    Some("system") => Item::Notice { text },
                    _ => Item::Text { text },
                })
            }
            Some("reasoning") => Ok(Item::Thinking {
                text: str_at(i, v, "/summary/0/text")?.to_owned(),
            }),
            Some("function_call") => {
                let args = json_string(i, v.get("arguments"))?;
                parse_call(i, str_at(i, v, "/call_id")?, &args)
            }
            Some("function_call_output") => {
                let body = json_string(i, v.get("output"))?;
                parse_output(i, str_at(i, v, "/call_id")?, &body)
            }
            other => Err(wire_err(i, format!("unknown item type {other:?}"))),
        })
        .collect()
}

// ---- Chat Completions ------------------------------------------------------

/// Items as Chat Completions messages: one assistant message per text,
/// thinking (`reasoning_content`) or script call (`tool_calls`), a `tool`
/// message per output, a `system` message per notice.
pub fn to_chat(items: &[Item]) -> Vec<Value> {
    items
        .iter()
        .map(|item| match item {
            Item::Text { text } => json!({"role": "assistant", "content": text}),
            Item::Thinking { text } => {
                json!({"role": "assistant", "content": null, "reasoning_content": text})
            }
            Item::Notice { text } => json!({"role": "system", "content": text}),
            Item::ScriptToolCall { call_id, .. } => json!({
                "role": "assistant", "content": null,
                "tool_calls": [{"id": call_id, "type": "function", "function": {
                    "name": SCRIPT_TOOL,
                    "arguments": payload(item).to_string(),
                }}],
            }),
            Item::ScriptToolCallOutput { call_id, .. } => json!({
                "role": "tool", "tool_call_id": call_id,
                "content": payload(item).to_string(),
            }),
        })
        .collect()
}

/// The inverse of [`to_chat`].
pub fn from_chat(messages: &[Value]) -> Result<Vec<Item>, WireError> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| match m.get("role").and_then(Value::as_str) {
            Some("system") => Ok(Item::Notice {
                text: str_at(i, m, "/content")?.to_owned(),
            }),
            Some("tool") => {
                let body = json_string(i, m.get("content"))?;
                parse_output(i, str_at(i, m, "/tool_call_id")?, &body)
            }
            Some("assistant") => {
                if let Some(call) = m.pointer("/tool_calls/0") {
                    let args = json_string(i, call.pointer("/function/arguments"))?;
                    parse_call(i, str_at(i, call, "/id")?, &args)
                } else if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
                    Ok(Item::Thinking { text: r.to_owned() })
                } else {
                    Ok(Item::Text {
                        text: str_at(i, m, "/content")?.to_owned(),
                    })
                }
            }
            other => Err(wire_err(i, format!("unexpected role {other:?}"))),
        })
        .collect()
}

// ---- Anthropic Messages ----------------------------------------------------

/// Items as Anthropic Messages: assistant messages of `thinking`, `text`
/// and `tool_use` blocks; each output a `tool_result` block in a user
/// message (consecutive blocks of one role share a message); notices a
/// user text block marked `[harness notice] `.
pub fn to_anthropic(items: &[Item]) -> Vec<Value> {
    let mut messages: Vec<Value> = Vec::new();
    for item in items {
        let (role, block) = match item {
            Item::Text { text } => ("assistant", json!({"type": "text", "text": text})),
            Item::Thinking { text } => (
                "assistant",
                json!({"type": "thinking", "thinking": text, "signature": ""}),
            ),
            Item::Notice { text } => (
                "user",
                json!({"type": "text", "text": format!("{NOTICE_PREFIX}{text}")}),
            ),
            Item::ScriptToolCall { call_id, .. } => (
                "assistant",
                json!({"type": "tool_use", "id": call_id, "name": SCRIPT_TOOL,
                    "input": payload(item)}),
            ),
            Item::ScriptToolCallOutput { call_id, error, .. } => (
                "user",
                json!({"type": "tool_result", "tool_use_id": call_id, "is_error": error.is_some(),
                    "content": payload(item).to_string()}),
            ),
        };
        match messages.last_mut() {
            Some(m) if m["role"] == role => {
                if let Some(c) = m["content"].as_array_mut() {
                    c.push(block);
                }
            }
            _ => messages.push(json!({"role": role, "content": [block]})),
        }
    }
    messages
}

/// The inverse of [`to_anthropic`].
pub fn from_anthropic(messages: &[Value]) -> Result<Vec<Item>, WireError> {
    let mut items = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let blocks = m
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| wire_err(i, "content is not a list of blocks"))?;
        for b in blocks {
            items.push(match b.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = str_at(i, b, "/text")?;
                    match text.strip_prefix(NOTICE_PREFIX) {
                        Some(n) if m["role"] == "user" => Item::Notice { text: n.to_owned() },
                        _ => Item::Text {
                            text: text.to_owned(),
                        },
                    }
                }
                Some("thinking") => Item::Thinking {
                    text: str_at(i, b, "/thinking")?.to_owned(),
                },
                Some("tool_use") => {
                    let input = b.get("input").cloned().unwrap_or(Value::Null);
                    parse_call(i, str_at(i, b, "/id")?, &input)?
                }
                Some("tool_result") => {
                    let body = json_string(i, b.get("content"))?;
                    parse_output(i, str_at(i, b, "/tool_use_id")?, &body)?
                }
                other => return Err(wire_err(i, format!("unknown block type {other:?}"))),
            });
        }
    }
    Ok(items)
}

/// The assistant text of a model response given as JSON in one of the
/// three shapes (an OpenAI Responses response or item list, a Chat
/// Completions response or message, an Anthropic message), with thinking
/// wrapped in `<thinking>` tags so that detection keeps it in place.
/// `None` when `v` is none of them.
pub fn response_text(v: &Value) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let think = |t: &str| format!("<thinking>\n{t}\n</thinking>");
    // OpenAI Responses: {"output": [...]} or a bare list of items.
    let responses = v
        .get("output")
        .and_then(Value::as_array)
        .or_else(|| v.as_array());
    if let Some(list) = responses {
        for it in list {
            match it.get("type").and_then(Value::as_str) {
                Some("message") => {
                    for c in it.get("content").and_then(Value::as_array)? {
                        if let Some(t) = c.get("text").and_then(Value::as_str) {
                            parts.push(t.to_owned());
                        }
                    }
                }
                Some("reasoning") => {
                    for s in it
                        .get("summary")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(t) = s.get("text").and_then(Value::as_str) {
                            parts.push(think(t));
                        }
                    }
                }
                _ => {}
            }
        }
        return Some(parts.join("\n"));
    }
    // Chat Completions: {"choices": [{"message": …}]} or a message.
    let message = v.pointer("/choices/0/message").unwrap_or(v);
    if message.get("role").and_then(Value::as_str) == Some("assistant") {
        // Anthropic: content is a list of blocks.
        if let Some(blocks) = message.get("content").and_then(Value::as_array) {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => parts.push(b.get("text")?.as_str()?.to_owned()),
                    Some("thinking") => parts.push(think(b.get("thinking")?.as_str()?)),
                    _ => {}
                }
            }
            return Some(parts.join("\n"));
        }
        if let Some(r) = message.get("reasoning_content").and_then(Value::as_str) {
            parts.push(think(r));
        }
        if let Some(c) = message.get("content").and_then(Value::as_str) {
            parts.push(c.to_owned());
        }
        return Some(parts.join("\n"));
    }
    None
}

/// A block that never ran: why, as an error.
fn not_run(reason: &str) -> ScriptError {
    ScriptError::new(ErrorCode::ScriptCancelledError, Phase::Parsing, reason)
}

/// The report of a run, for [`Item::output_from_report`].
fn summary(report: &ExecutionReport) -> String {
    let mut s = outcome_summary(report);
    // The model reads the summary: lossy conversions of what it returned
    // must be in it, or it cannot know its Map became {}.
    for w in &report.warnings {
        s.push_str(&format!("\nwarning: {}: {}", w.path, w.message));
    }
    for t in &report.detached_tasks {
        let status = serde_json::to_value(t.status).unwrap_or_default();
        let status = status.as_str().unwrap_or("unknown");
        s.push_str(&format!("\ndetached task {} ({}): {status}", t.id, t.tool));
    }
    s
}

fn outcome_summary(report: &ExecutionReport) -> String {
    if let Some(s) = &report.suspension {
        let waits: Vec<String> = s
            .pending
            .iter()
            .map(|p| format!("{} (call {})", p.tool, p.call_id))
            .collect();
        return format!("suspended: waiting on {}", waits.join(", "));
    }
    match (&report.error, &report.value) {
        (Some(e), _) => format!("failed: {}: {}", e.code, e.message),
        (None, Some(v)) => {
            let s = v.to_string();
            if s.chars().count() > 200 {
                let cut: String = s.chars().take(200).collect();
                format!("returned {cut}…")
            } else {
                format!("returned {s}")
            }
        }
        (None, None) => "completed without a value".to_owned(),
    }
}
