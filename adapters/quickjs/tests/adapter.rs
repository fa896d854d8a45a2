//! The QuickJS adapter through the ScriptRuntimeAdapter trait alone.

use harness_core::tool::{FnTool, ToolRegistry};
use harness_core::{ErrorCode, ExecutionRequest, ScriptRuntimeAdapter, ToolSet, Tunable, Tuning};
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

/// Counts QuickJS's warning that a freed runtime kept memory (an engine
/// leak), logged from the engine's threads.
mod leaks {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tracing::{span, Event, Metadata, Subscriber};

    static SEEN: AtomicU64 = AtomicU64::new(0);

    struct Watch;

    impl Subscriber for Watch {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() == tracing::Level::WARN && m.target().starts_with("harness_quickjs")
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, e: &Event<'_>) {
            if self.enabled(e.metadata()) {
                SEEN.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    /// Leak warnings so far (counting from the first call).
    pub fn seen() -> u64 {
        let _ = tracing::subscriber::set_global_default(Watch);
        SEEN.load(Ordering::SeqCst)
    }
}

/// A worker's first run hardens its context on demand, and did so under
/// the run's memory limit. Where that limit ran out while the prelude's
/// freeze walk realised one of quickjs-ng's lazy built-ins written in JS
/// (`Array.fromAsync`, `Iterator.zip`, `Iterator.zipKeyed`), QuickJS
/// leaked: `js_bytecode_eval` returns early without freeing its
/// arguments, one of which holds the iterator-helper prototype and with
/// it much of the context (about 30 KB left when the runtime was freed).
/// Now a context is hardened before the run's limit is armed, as one
/// hardened ahead of time is; the limit still covers the whole heap, so
/// runs under it fail the same way whether their context was hardened
/// ahead of time or not. Every limit from 0 to past a hardened context's
/// size, in 4 KiB steps (before the fix the first leak showed at 270,336).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_limit_runs_out_while_its_context_is_hardened_leaks_nothing() {
    let before = leaks::seen();
    let mut passed = 0;
    for limit in (0..=(768u64 << 10)).step_by(4096) {
        let e = QuickJs::with_max_workers(1);
        let mut r = ExecutionRequest::new("return [1, 2, 3].map(x => x * 2)");
        r.limits.memory_bytes = limit;
        let rep = e.execute(r).await;
        match rep.error.map(|e| e.code) {
            None => {
                assert_eq!(rep.value, Some(json!([2, 4, 6])), "{limit} bytes");
                passed += 1;
            }
            Some(code) => assert_eq!(code, ErrorCode::ScriptMemoryError, "{limit} bytes"),
        }
        // The same worker (one thread), after it tidied up from the run
        // above: freeing a tainted runtime is where a leak is logged.
        let rep = e.execute(ExecutionRequest::new("return 1")).await;
        assert_eq!(rep.value, Some(json!(1)), "{limit} bytes: healthy after");
        assert_eq!(leaks::seen(), before, "{limit} bytes: QuickJS leaked");
    }
    assert!(passed > 0, "the largest limits fit a run");
}

/// The descriptor's one-thread adapter (what the cross-run suite runs its
/// pairs on) runs one script at a time: a second run waits while the
/// first holds the only engine thread, where the default adapter starts
/// another thread for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptors_one_thread_engine_runs_one_script_at_a_time() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;
    let gate = Arc::new(tokio::sync::Notify::new());
    let (held, marked) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let mut reg = ToolRegistry::new();
    let (g, h) = (gate.clone(), held.clone());
    reg.register(FnTool::new(
        "hold",
        "answers when the test says so",
        json!({"type": "object"}),
        move |_, _| {
            let g = g.clone();
            h.fetch_add(1, Ordering::SeqCst);
            async move {
                g.notified().await;
                Ok(json!(null))
            }
        },
    ))
    .unwrap();
    let m = marked.clone();
    reg.register(FnTool::new(
        "mark",
        "counts its calls",
        json!({"type": "object"}),
        move |_, _| {
            m.fetch_add(1, Ordering::SeqCst);
            async move { Ok(json!(null)) }
        },
    ))
    .unwrap();
    let reg = Arc::new(reg);
    let request = |src: &str| {
        let mut r = ExecutionRequest::new(src);
        r.tools = ToolSet::new(reg.clone());
        r
    };
    let until = |counter: &Arc<AtomicU32>, n: u32| {
        let counter = counter.clone();
        async move {
            for _ in 0..1000 {
                if counter.load(Ordering::SeqCst) >= n {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        }
    };
    let descriptor = harness_quickjs::descriptor();
    let one = descriptor
        .in_process_with_threads(1)
        .expect("QuickJS's descriptor sizes its pool");
    for (engine, one_at_a_time) in [(descriptor.in_process(), false), (one, true)] {
        let before = (held.load(Ordering::SeqCst), marked.load(Ordering::SeqCst));
        let first = tokio::spawn({
            let (e, r) = (engine.clone(), request("await tools.hold({}); return 1"));
            async move { e.execute(r).await }
        });
        assert!(
            until(&held, before.0 + 1).await,
            "the first run never called hold"
        );
        let second = tokio::spawn({
            let (e, r) = (engine.clone(), request("await tools.mark({}); return 2"));
            async move { e.execute(r).await }
        });
        if one_at_a_time {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                marked.load(Ordering::SeqCst),
                before.1,
                "the second run started while the first held the only engine thread"
            );
        } else {
            assert!(
                until(&marked, before.1 + 1).await,
                "the default adapter did not start the second run beside the first"
            );
        }
        gate.notify_one();
        let (a, b) = (first.await.unwrap(), second.await.unwrap());
        assert_eq!((a.value, b.value), (Some(json!(1)), Some(json!(2))));
        assert_eq!(marked.load(Ordering::SeqCst), before.1 + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_engine_rehearses_in_its_window_only_and_the_next_run_sees_nothing() {
    use std::time::Duration;
    let e = QuickJs::with_max_workers(1);
    assert!(e.execute(ExecutionRequest::new("return 1")).await.ok);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(e.rehearsals(), 0, "off by default");

    // A window long enough that the engine thread gets a CPU in it on a
    // machine busy with other tests (a 20 ms one, looked at once, could
    // pass without a rehearsal there).
    const WINDOW: Duration = Duration::from_millis(200);
    assert!(e.tune(Tuning::default().with_keep_warm(WINDOW)).keeps_warm);
    // A run that leaves what it can: a global, a registered symbol, a
    // reaction still queued when it returns.
    let _ = e
        .execute(ExecutionRequest::new(
            "try { globalThis.planted = 1 } catch {}\n\
             Symbol.for('planted');\n\
             Promise.resolve().then(() => { try { globalThis.late = 1 } catch {} });\n\
             return 1",
        ))
        .await;
    let window_ends = std::time::Instant::now() + WINDOW;
    while e.rehearsals() == 0 && std::time::Instant::now() < window_ends {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(e.rehearsals() >= 1, "rehearsed in the window after the run");
    // Past the window, and past a rehearsal that was under way at its end.
    tokio::time::sleep_until((window_ends + Duration::from_millis(100)).into()).await;
    let n = e.rehearsals();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(e.rehearsals(), n, "no rehearsal once the window passed");

    let look = e
        .execute(ExecutionRequest::new(
            "return [typeof globalThis.planted, typeof globalThis.late, \
             Object.isFrozen(Array.prototype), Symbol.keyFor(Symbol.for('x'))]",
        ))
        .await;
    assert!(look.ok, "{:?}", look.error);
    assert_eq!(
        look.value,
        Some(json!(["undefined", "undefined", true, "x"])),
        "the run after the rehearsals sees nothing of the run before them"
    );
}

/// A context installed with the same tools, context and limits as its
/// last run keeps what that install made, and is handed only the run's
/// part of the config: every run on the one context still sees its own
/// request's tools, context and limits, however they alternate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_on_a_reused_context_sees_its_own_tools_context_and_limits() {
    let registry = |names: &[&str]| {
        let mut reg = ToolRegistry::new();
        for name in names {
            reg.register(FnTool::new(
                *name,
                "answers null",
                json!({"type": "object"}),
                |_, _| async { Ok(json!(null)) },
            ))
            .unwrap();
        }
        ToolSet::new(Arc::new(reg))
    };
    let (both, one) = (registry(&["a", "b"]), registry(&["a"]));
    let e = QuickJs::with_max_workers(1);
    let script = "return [context.sandbox.timeoutMs, context.extra, Object.keys(tools)]";
    let mut contexts = std::collections::HashSet::new();
    for (i, (timeout, extra, two)) in [
        (5_000, 1, true),
        (5_000, 1, true),
        (6_000, 1, true),
        (6_000, 2, true),
        (6_000, 2, false),
        (6_000, 2, false),
        (5_000, 1, true),
        (5_000, 1, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = ExecutionRequest::new(script);
        r.limits.timeout_ms = timeout;
        r.context.extra = json!({ "n": extra });
        r.tools = if two { both.clone() } else { one.clone() };
        let report = e.execute(r).await;
        let names = if two { json!(["a", "b"]) } else { json!(["a"]) };
        assert_eq!(
            report.value,
            Some(json!([timeout, { "n": extra }, names])),
            "run {i}: {report:?}"
        );
        contexts.insert(report.context_id);
    }
    assert_eq!(
        contexts.len(),
        1,
        "the runs did not share a context: {contexts:?}"
    );
}
