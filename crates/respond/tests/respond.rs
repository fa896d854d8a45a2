//! The orchestrator end to end on QuickJS, and the wire shapes' round trips.

use harness_core::CancellationToken;
use harness_core::{FnTool, Mode, ToolRegistry, ToolSet};
use harness_respond::items::{
    from_anthropic, from_chat, from_openai_responses, response_text, to_anthropic, to_chat,
    to_openai_responses,
};
use harness_respond::{CallStatus, Item, Options, Orchestrator};
use serde_json::{json, Value};
use std::sync::Arc;

const RESPONSE: &str = "I'll look up the weather first.\n\
<thinking>\nTwo calls: weather, then a TypeScript summary.\n</thinking>\n\
<tool-calls>\nconst w = await tools.weather({city: 'Oslo'});\nconsole.log('got', w.temp);\nreturn w;\n</tool-calls>\n\
Now the summary:\n\
```ts tool-calls\ninterface W { temp: number }\nconst w: W = await tools.weather({city: 'Bergen'});\nreturn `Bergen: ${w.temp} C`;\n```\n\
That's all.";

fn tools() -> ToolSet {
    let mut reg = ToolRegistry::new();
    reg.register(FnTool::new(
        "weather",
        "Weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _| async move {
            let temp = if args["city"] == "Oslo" { 4 } else { 9 };
            Ok(json!({"city": args["city"], "temp": temp}))
        },
    ))
    .unwrap();
    ToolSet::new(Arc::new(reg))
}

fn orchestrator(options: Options) -> Orchestrator {
    Orchestrator::new(Arc::new(harness_quickjs::QuickJs::new()), tools(), options)
}

fn kinds(items: &[Item]) -> Vec<&'static str> {
    items
        .iter()
        .map(|i| match i {
            Item::Text { .. } => "text",
            Item::Thinking { .. } => "thinking",
            Item::Notice { .. } => "notice",
            Item::ScriptToolCall { .. } => "call",
            Item::ScriptToolCallOutput { .. } => "output",
            _ => "other",
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_with_text_thinking_and_two_scripts_becomes_items_in_order() {
    let o = orchestrator(Options::default());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let items = o
        .respond(RESPONSE, Some(tx), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        kinds(&items),
        ["text", "thinking", "text", "call", "output", "text", "call", "output", "text"]
    );
    let outputs: Vec<&Item> = items
        .iter()
        .filter(|i| matches!(i, Item::ScriptToolCallOutput { .. }))
        .collect();
    match outputs[0] {
        Item::ScriptToolCallOutput {
            output,
            error,
            metadata,
            ..
        } => {
            assert_eq!(output, &Some(json!({"city": "Oslo", "temp": 4})));
            assert!(error.is_none());
            assert_eq!(metadata["console"][0]["text"], "got 4");
        }
        _ => unreachable!(),
    }
    match outputs[1] {
        Item::ScriptToolCallOutput { output, .. } => {
            assert_eq!(output, &Some(json!("Bergen: 9 C")))
        }
        _ => unreachable!(),
    }
    match &items[6] {
        Item::ScriptToolCall {
            language,
            status,
            sha256,
            source,
            ..
        } => {
            assert_eq!(*language, harness_respond::Language::Typescript);
            assert_eq!(*status, CallStatus::Completed);
            assert_eq!(sha256, &harness_respond::prepare::sha256_hex(source));
        }
        other => panic!("{other:?}"),
    }
    // The text around the blocks is kept byte for byte.
    match (&items[0], &items[8]) {
        (Item::Text { text: a }, Item::Text { text: b }) => {
            assert_eq!(a, "I'll look up the weather first.\n");
            assert_eq!(b, "That's all.");
        }
        other => panic!("{other:?}"),
    }
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let names: Vec<String> = events
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "script_started",
            "tool_call_started",
            "tool_call_finished",
            "script_finished",
            "script_started",
            "tool_call_started",
            "tool_call_finished",
            "script_finished"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_stops_later_blocks_unless_continue_on_error() {
    let text =
        "<tool-calls>\nthrow new Error('no')\n</tool-calls>\n<tool-calls>\nreturn 2\n</tool-calls>";
    let items = orchestrator(Options::default())
        .respond(text, None, CancellationToken::new())
        .await
        .unwrap();
    let statuses: Vec<CallStatus> = items
        .iter()
        .filter_map(|i| match i {
            Item::ScriptToolCall { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [CallStatus::Failed, CallStatus::Skipped]);
    let o = orchestrator(Options::default().with_continue_on_error(true));
    let items = o
        .respond(text, None, CancellationToken::new())
        .await
        .unwrap();
    match items.last().unwrap() {
        Item::ScriptToolCallOutput { output, .. } => assert_eq!(output, &Some(json!(2))),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_and_dry_run_modes_run_nothing() {
    let o = orchestrator(Options::default().with_mode(Mode::Disabled));
    let items = o
        .respond(RESPONSE, None, CancellationToken::new())
        .await
        .unwrap();
    assert!(items.iter().any(|i| matches!(i, Item::Notice { .. })));
    assert!(!items
        .iter()
        .any(|i| matches!(i, Item::ScriptToolCall { .. })));
    let rejoined: String = items
        .iter()
        .filter_map(|i| match i {
            Item::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(rejoined.contains("<tool-calls>"));

    let o = orchestrator(Options::default().with_mode(Mode::DryRun));
    let text =
        "<tool-calls>\nawait tools.weather({city: 'x'}); await tools.nope({})\n</tool-calls>";
    let items = o
        .respond(text, None, CancellationToken::new())
        .await
        .unwrap();
    match &items[..] {
        [Item::ScriptToolCall { status, .. }, Item::ScriptToolCallOutput { metadata, .. }] => {
            assert_eq!(*status, CallStatus::Failed);
            assert_eq!(metadata["unknown_tools"], json!(["nope"]));
            assert_eq!(metadata["tools"], json!(["weather", "nope"]));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_response_stops_the_running_block_and_skips_the_rest() {
    let o = orchestrator(Options::default());
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        c.cancel();
    });
    let text =
        "<tool-calls>\nwhile (true) {}\n</tool-calls>\n<tool-calls>\nreturn 1\n</tool-calls>";
    let items = o.respond(text, None, cancel).await.unwrap();
    let errors: Vec<Option<harness_core::ErrorCode>> = items
        .iter()
        .filter_map(|i| match i {
            Item::ScriptToolCallOutput { error, .. } => Some(error.as_ref().map(|e| e.code)),
            _ => None,
        })
        .collect();
    assert_eq!(
        errors,
        [
            Some(harness_core::ErrorCode::ScriptCancelledError),
            Some(harness_core::ErrorCode::ScriptCancelledError)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_blocks_are_an_error_not_a_guess() {
    let e = orchestrator(Options::default())
        .respond("<tool-calls>\nreturn 1", None, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("never closed"), "{e}");
}

/// A realistic processed response, fixed (no engine needed).
fn fixture() -> Vec<Item> {
    let text = r#"[
      {"type": "text", "text": "Checking the repository.\n"},
      {"type": "thinking", "text": "List files, then read the README."},
      {"type": "script_tool_call", "id": "stc_1", "call_id": "call_1", "language": "typescript",
       "source": "const r: any = await tools.list_dir({path: '.'});\nreturn r.entries.length", "sha256": "5a1e", "status": "completed"},
      {"type": "script_tool_call_output", "call_id": "call_1", "output": 7, "summary": "returned 7",
       "metadata": {"metrics": {"engine": "quickjs", "duration_ms": 3.1, "tool_calls": 1}, "console": []}},
      {"type": "script_tool_call", "id": "stc_2", "call_id": "call_2", "language": "javascript",
       "source": "return eval('1')", "sha256": "9f00", "status": "failed"},
      {"type": "script_tool_call_output", "call_id": "call_2",
       "error": {"code": "BannedIdentifierError", "message": "`eval` is not allowed in scripts (script.js:1:8)", "phase": "parsing", "name": "BannedIdentifierError", "location": {"line": 1, "column": 8}},
       "summary": "failed: BannedIdentifierError: `eval` is not allowed in scripts (script.js:1:8)", "metadata": {}},
      {"type": "notice", "text": "script execution is disabled; the block above was not run"},
      {"type": "text", "text": "\nThere are 7 entries."}
    ]"#;
    serde_json::from_str(text).unwrap()
}

#[test]
fn openai_responses_round_trip() {
    let items = fixture();
    let wire = to_openai_responses(&items);
    assert_eq!(wire[0]["type"], "message");
    assert_eq!(wire[0]["content"][0]["type"], "output_text");
    assert_eq!(wire[1]["type"], "reasoning");
    assert_eq!(wire[2]["type"], "function_call");
    assert_eq!(wire[2]["name"], "script_tool_call");
    assert!(wire[2]["arguments"].is_string());
    assert_eq!(wire[3]["type"], "function_call_output");
    assert_eq!(wire[3]["call_id"], "call_1");
    assert_eq!(from_openai_responses(&wire).unwrap(), items);
}

#[test]
fn chat_completions_round_trip() {
    let items = fixture();
    let wire = to_chat(&items);
    assert_eq!(wire[2]["tool_calls"][0]["type"], "function");
    assert_eq!(wire[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(wire[3]["role"], "tool");
    assert_eq!(wire[3]["tool_call_id"], "call_1");
    assert_eq!(
        wire[1]["reasoning_content"],
        "List files, then read the README."
    );
    assert_eq!(from_chat(&wire).unwrap(), items);
}

#[test]
fn anthropic_messages_round_trip() {
    let items = fixture();
    let wire = to_anthropic(&items);
    // Roles alternate: assistant (text, thinking, tool_use), user (tool_result), …
    let roles: Vec<&str> = wire.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["assistant", "user", "assistant", "user", "assistant"]
    );
    assert_eq!(wire[0]["content"][2]["type"], "tool_use");
    assert_eq!(wire[0]["content"][2]["input"]["language"], "typescript");
    assert_eq!(wire[1]["content"][0]["type"], "tool_result");
    assert_eq!(wire[3]["content"][0]["is_error"], true);
    assert_eq!(from_anthropic(&wire).unwrap(), items);
}

#[test]
fn model_responses_in_each_shape_yield_their_text() {
    let openai = json!({"output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "<tool-calls>\nreturn 1\n</tool-calls>"}]}
    ]});
    let chat = json!({"choices": [{"message": {"role": "assistant", "reasoning_content": "plan", "content": "<tool-calls>\nreturn 1\n</tool-calls>"}}]});
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "plan", "signature": "x"},
        {"type": "text", "text": "<tool-calls>\nreturn 1\n</tool-calls>"}
    ]});
    for v in [openai, chat, anthropic] {
        let text = response_text(&v).unwrap();
        let segs = harness_respond::detect(&text).unwrap();
        let kinds: Vec<_> = segs.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [
                harness_respond::SegmentKind::Thinking,
                harness_respond::SegmentKind::Text,
                harness_respond::SegmentKind::Script
            ],
            "{v}"
        );
    }
    assert_eq!(response_text(&Value::String("x".into())), None);
}
