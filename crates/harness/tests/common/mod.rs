//! Test tools shared by the integration tests.
#![allow(dead_code)]

use harness::core::ApprovalBridge;
use harness::{ExecutionReport, FnTool, Harness, Limits, Mode, ToolError, ToolRegistry};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Default, Debug)]
pub struct Counters {
    pub running: AtomicUsize,
    pub peak: AtomicUsize,
    pub cancelled: AtomicUsize,
    pub finished: AtomicUsize,
}

/// echo, sleep (honours cancellation), stubborn_sleep (ignores it), fail,
/// count (records peak concurrency), guarded (needs approval), strict
/// (strict schema), big (large string output).
pub fn registry(c: Arc<Counters>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(FnTool::new(
        "echo",
        "returns its arguments",
        json!({"type": "object"}),
        |a, _| async move { Ok(a) },
    ))
    .unwrap();
    let c1 = c.clone();
    r.register(FnTool::new("sleep", "sleeps ms, honours cancellation",
        json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}),
        move |a, ctx| {
            let c = c1.clone();
            async move {
                let ms = a["ms"].as_u64().unwrap_or(0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                        c.finished.fetch_add(1, Ordering::SeqCst);
                        Ok(json!({"slept": ms}))
                    }
                    _ = ctx.cancel.cancelled() => {
                        c.cancelled.fetch_add(1, Ordering::SeqCst);
                        Err(ToolError::cancelled())
                    }
                }
            }
        })).unwrap();
    r.register(FnTool::new(
        "stubborn_sleep",
        "sleeps ms, ignores cancellation",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
        |a, _| async move {
            tokio::time::sleep(Duration::from_millis(a["ms"].as_u64().unwrap_or(0))).await;
            Ok(json!(true))
        },
    ))
    .unwrap();
    r.register(FnTool::new(
        "fail",
        "always fails",
        json!({"type": "object"}),
        |_, _| async move { Err(ToolError::new("it broke")) },
    ))
    .unwrap();
    let c2 = c.clone();
    r.register(FnTool::new(
        "count",
        "records peak concurrency",
        json!({"type": "object"}),
        move |_, _| {
            let c = c2.clone();
            async move {
                let now = c.running.fetch_add(1, Ordering::SeqCst) + 1;
                c.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                c.running.fetch_sub(1, Ordering::SeqCst);
                Ok(json!(now))
            }
        },
    ))
    .unwrap();
    r.register(
        FnTool::new(
            "guarded",
            "needs approval when dangerous",
            json!({"type": "object"}),
            |a, _| async move { Ok(json!({"done": a})) },
        )
        .requiring_approval(|a| a.get("dangerous") == Some(&Value::Bool(true))),
    )
    .unwrap();
    r.register(FnTool::new("strict", "strict schema",
        json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
               "required": ["n"], "additionalProperties": false}),
        |a, _| async move { Ok(a) })).unwrap();
    r.register(FnTool::new("big", "returns a long string", json!({"type": "object"}),
        |a, _| async move { Ok(json!({"text": "x".repeat(a["n"].as_u64().unwrap_or(0) as usize)})) })).unwrap();
    r
}

pub fn harness_with(
    limits: Limits,
    mode: Mode,
    approvals: Arc<dyn ApprovalBridge>,
) -> (Harness, Arc<Counters>) {
    let c = Arc::new(Counters::default());
    let h = Harness::builder()
        .tools(registry(c.clone()))
        .limits(limits)
        .mode(mode)
        .approvals(approvals)
        .build()
        .unwrap();
    (h, c)
}

pub fn harness() -> (Harness, Arc<Counters>) {
    harness_with(
        Limits::default(),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    )
}

pub fn short(ms: u64) -> Limits {
    Limits {
        timeout_ms: ms,
        ..Limits::default()
    }
}

/// Asserts the run failed with `code` and returns the report.
#[track_caller]
pub fn expect_code(r: &ExecutionReport, code: harness::ErrorCode) {
    let got = r.error.as_ref().map(|e| e.code);
    assert_eq!(
        got,
        Some(code),
        "report: {}",
        serde_json::to_string_pretty(r).unwrap()
    );
    assert!(!r.ok);
}

#[track_caller]
pub fn expect_value(r: &ExecutionReport, v: Value) {
    assert!(r.ok, "report: {}", serde_json::to_string_pretty(r).unwrap());
    assert_eq!(r.value, Some(v));
}

/// The host still works after whatever ran before.
pub async fn assert_healthy(h: &Harness) {
    let r = h
        .run("return [1 + 1, typeof Object.prototype.polluted, Object.isFrozen(Array.prototype)]")
        .await;
    expect_value(&r, json!([2, "undefined", true]));
}
