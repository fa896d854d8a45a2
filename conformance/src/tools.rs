//! Test tools for the suite: echo, a sleep that honours cancellation, a
//! sleep that ignores it, fail, a counter that records peak concurrency, a
//! tool that requires approval, a tool with a strict schema, and one with
//! a long output, and one named as an upstream MCP tool (`mcp.up.echo-x`).

use harness_core::tool::{FnTool, ToolError, ToolRegistry};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the test tools observed during one case.
#[derive(Debug, Default)]
pub struct Counters {
    pub running: AtomicUsize,
    pub peak: AtomicUsize,
    pub cancelled: AtomicUsize,
    pub finished: AtomicUsize,
    pub executed: AtomicUsize,
    /// `sleep` calls that began sleeping.
    pub sleeping: AtomicUsize,
}

impl Counters {
    pub fn get(c: &AtomicUsize) -> usize {
        c.load(Ordering::SeqCst)
    }
}

/// Builds the registry, with packs `basic` (echo, fail) and `slow`.
pub fn registry(c: Arc<Counters>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    let add = |r: &mut ToolRegistry, t: FnTool| {
        r.register(t).expect("test tool registers");
    };
    let c0 = c.clone();
    add(
        &mut r,
        FnTool::new(
            "echo",
            "returns its arguments",
            json!({"type": "object"}),
            move |a, _| {
                c0.executed.fetch_add(1, Ordering::SeqCst);
                async move { Ok(a) }
            },
        ),
    );
    let c1 = c.clone();
    add(
        &mut r,
        FnTool::new(
            "sleep",
            "sleeps ms, honours cancellation",
            json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}),
            move |a, ctx| {
                let c = c1.clone();
                async move {
                    let ms = a["ms"].as_u64().unwrap_or(0);
                    c.sleeping.fetch_add(1, Ordering::SeqCst);
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
            },
        ),
    );
    add(
        &mut r,
        FnTool::new(
            "stubborn_sleep",
            "sleeps ms, ignores cancellation",
            json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
            |a, _| async move {
                tokio::time::sleep(Duration::from_millis(a["ms"].as_u64().unwrap_or(0))).await;
                Ok(json!(true))
            },
        ),
    );
    add(
        &mut r,
        FnTool::new(
            "fail",
            "always fails; with {stderr: N} as a process would, with N bytes of stderr; \
             with {panic: \"now\"} it panics on its first poll, with {panic: \"later\"} after it",
            json!({"type": "object"}),
            |a, _| async move {
                match a.get("panic").and_then(Value::as_str) {
                    Some("now") => panic!("the fail tool panics, as asked"),
                    Some(_) => {
                        tokio::task::yield_now().await;
                        panic!("the fail tool panics, as asked, after a first poll");
                    }
                    None => {}
                }
                match a.get("stderr").and_then(Value::as_u64) {
                    Some(n) => Err(ToolError::new("it broke").with_stderr("e".repeat(n as usize))),
                    None => Err(ToolError::new("it broke")),
                }
            },
        ),
    );
    let c2 = c.clone();
    add(
        &mut r,
        FnTool::new(
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
        ),
    );
    add(
        &mut r,
        FnTool::new(
            "guarded",
            "needs approval when dangerous",
            json!({"type": "object"}),
            |a, _| async move { Ok(json!({"done": a})) },
        )
        .requiring_approval(|a| a.get("dangerous") == Some(&Value::Bool(true))),
    );
    add(
        &mut r,
        FnTool::new(
            "strict",
            "strict schema",
            json!({"type": "object",
               "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
               "required": ["n"], "additionalProperties": false}),
            |a, _| async move { Ok(a) },
        ),
    );
    add(
        &mut r,
        FnTool::new(
            "big",
            "returns a string of n bytes",
            json!({"type": "object"}),
            |a, _| async move { Ok(json!({"text": "x".repeat(a["n"].as_u64().unwrap_or(0) as usize)})) },
        ),
    );
    // As an upstream MCP server's tool is registered: `tools.mcp.up["echo-x"]`.
    r.register_harness_tool(Arc::new(FnTool::new(
        "mcp.up.echo-x",
        "an upstream MCP tool's shape: returns its arguments",
        json!({"type": "object"}),
        |a, _| async move { Ok(a) },
    )))
    .expect("mcp-named tool registers");
    r.define_pack("basic", ["echo", "fail"]).expect("pack");
    r.define_pack("slow", ["sleep", "stubborn_sleep"])
        .expect("pack");
    r
}
