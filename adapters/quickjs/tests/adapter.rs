//! The QuickJS adapter through the ScriptRuntimeAdapter trait alone.

use harness_core::tool::{FnTool, ToolRegistry};
use harness_core::{ErrorCode, ExecutionRequest, ScriptRuntimeAdapter, ToolSet};
use harness_quickjs::QuickJs;
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_names_the_engine_and_its_capabilities() {
    let e = QuickJs::new();
    let info = e.info();
    assert_eq!(info.name, "quickjs");
    assert!(info.engine_version.contains("quickjs-ng"));
    assert!(info.capabilities.interrupt && info.capabilities.memory_limit);
    assert!(!info.capabilities.hard_kill && !info.capabilities.filesystem);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_are_reused_after_clean_runs_and_rebuilt_after_faults() {
    let e = QuickJs::with_max_workers(1);
    for src in [
        "return 1",
        "while(true){}",
        "return 2",
        "function f(){f()} f()",
        "return 3",
    ] {
        let mut r = ExecutionRequest::new(src);
        r.limits.timeout_ms = 200;
        let rep = e.execute(r).await;
        if src.starts_with("return") {
            assert!(rep.ok, "{src}: {:?}", rep.error);
        } else {
            assert!(!rep.ok);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_is_a_tool_error_not_a_host_crash() {
    let mut reg = ToolRegistry::new();
    reg.register(FnTool::new(
        "boom",
        "panics",
        json!({"type": "object"}),
        |_, _| async move { panic!("tool bug") },
    ))
    .unwrap();
    let e = QuickJs::new();
    let mut r = ExecutionRequest::new(
        "try { await tools.boom({}) } catch (err) { return [err.name, err.message] }",
    );
    r.tools = ToolSet::new(Arc::new(reg));
    let rep = e.execute(r).await;
    assert_eq!(
        rep.value,
        Some(json!(["ToolExecutionError", "the tool panicked"]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_syntax_parses_only() {
    let e = QuickJs::new();
    assert!(e.check_syntax("return await tools.x()").await.is_ok());
    let err = e.check_syntax("return )").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::ScriptSyntaxError);
    assert_eq!(err.location.map(|l| l.line), Some(1));
}

#[test]
fn execute_outside_tokio_is_a_clear_error() {
    let e = QuickJs::new();
    let rep = futures_lite_block_on(e.execute(ExecutionRequest::new("return 1")));
    assert_eq!(rep.code(), Some(ErrorCode::HarnessInternalError));
    assert!(rep.error.unwrap().message.contains("tokio"));
}

/// Polls a future to completion without any runtime.
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// When a runtime is freed, QuickJS asserts that no object outlived its
/// contexts. An engine bug that leaks one (quickjs-ng and QuickJS have
/// had several on out-of-memory paths; the `cross_run` fuzzer hit one
/// here) must not abort the host process with every run in it: QuickJS is
/// built with `NDEBUG` (rquickjs's `disable-assertions`), and the leaked
/// object's memory is lost instead.
#[test]
fn freeing_a_runtime_that_quickjs_leaked_an_object_in_does_not_abort() {
    let rt = rquickjs::Runtime::new().unwrap();
    let ctx = rquickjs::Context::full(&rt).unwrap();
    ctx.with(|ctx| {
        let obj = rquickjs::Object::new(ctx.clone()).unwrap();
        // A reference nobody will release: what such a bug leaves.
        std::mem::forget(rquickjs::Persistent::save(&ctx, obj));
    });
    drop(ctx);
    drop(rt);
}
