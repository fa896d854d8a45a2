//! `harness respond`: a model's response, its tool-call blocks run.

use super::*;

pub(super) async fn respond(args: RespondArgs) -> ExitCode {
    let mode = args.mode.map(|m| match m {
        ModeArg::Enabled => Mode::Enabled,
        ModeArg::DryRun => Mode::DryRun,
        ModeArg::Disabled => Mode::Disabled,
    });
    let harness = match configured_harness(&args.engine, mode, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let bytes = match input(&args.file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let Ok(input) = String::from_utf8(bytes) else {
        return usage_error("the response is not valid UTF-8");
    };
    // JSON in one of the wire shapes, or plain text.
    let text = match serde_json::from_str::<serde_json::Value>(&input) {
        Ok(v) if v.is_object() || v.is_array() => {
            match harness::respond::items::response_text(&v) {
                Some(t) => t,
                None => return usage_error(
                    "JSON input is not an OpenAI Responses, Chat Completions or Anthropic response",
                ),
            }
        }
        _ => input,
    };
    let orchestrator = harness.orchestrator(args.continue_on_error);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let printer = args.events.then(|| {
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if let Ok(line) = serde_json::to_string(&e) {
                    eprintln!("{line}");
                }
            }
        })
    });
    let result = orchestrator
        .respond(
            &text,
            args.events.then_some(tx),
            harness::CancellationToken::new(),
        )
        .await;
    // Detached tasks end (and are reported as events) before the items
    // are printed; those still running after the timeout are cancelled.
    if let Some(tasks) = harness.tasks() {
        let timeout = std::time::Duration::from_millis(args.engine.detached_timeout_ms);
        tasks.wait_idle(timeout).await;
    }
    drop(orchestrator);
    if let Some(p) = printer {
        let _ = p.await;
    }
    let items = match result {
        Ok(items) => items,
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({"ok": false, "error": e.to_string(), "detail": e})
            );
            return ExitCode::from(1);
        }
    };
    use harness::respond::items as wire;
    let out = match args.format {
        ItemFormat::Items => serde_json::to_value(&items).unwrap_or_default(),
        ItemFormat::OpenaiResponses => serde_json::Value::from(wire::to_openai_responses(&items)),
        ItemFormat::Chat => serde_json::Value::from(wire::to_chat(&items)),
        ItemFormat::Anthropic => serde_json::Value::from(wire::to_anthropic(&items)),
    };
    match serde_json::to_string_pretty(&out) {
        Ok(s) => println!("{s}"),
        Err(e) => return usage_error(format!("cannot encode items: {e}")),
    }
    if items.iter().any(|i| i.failed()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
