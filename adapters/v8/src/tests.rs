use super::*;
use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};

#[test]
fn v8_errors_are_classified() {
    assert_eq!(
        classify("RangeError", "Maximum call stack size exceeded"),
        FaultKind::StackOverflow
    );
    assert_eq!(
        classify("TypeError", "x is not a function"),
        FaultKind::Thrown
    );
}

#[test]
fn scripts_are_strict_without_moving_lines() {
    let body = Body::parse("return 1").unwrap();
    let wrapped = body.wrapped();
    let s = strict_source(wrapped);
    assert!(s.starts_with("'use strict'; (async function"));
    assert_eq!(s.lines().count(), wrapped.lines().count());
}

#[test]
fn isolate_keys_clamp_limits() {
    let l = harness_core::Limits::default()
        .with_memory_bytes(1 << 20)
        .with_stack_bytes(1 << 40);
    let k = IsolateKey::of(&l);
    assert_eq!(k.heap_bytes, MIN_HEAP_BYTES);
    assert!(k.stack_bytes < THREAD_STACK_BYTES as u64);
}

/// The flag, not the prelude: a context V8 makes refuses `eval` and
/// `Function` before any script hardened it.
#[test]
fn code_generation_is_off_without_the_prelude() {
    init_v8();
    let mut slot = IsolateSlot::new(IsolateKey::of(&harness_core::Limits::default()));
    let isolate = &mut slot.isolate;
    v8::scope!(let hs, isolate);
    let context = v8::Context::new(hs, Default::default());
    let cs = &mut v8::ContextScope::new(hs, context);
    v8::tc_scope!(let tc, cs);
    for probe in ["eval('1 + 1')", "Function('return 1')()", "(0, eval)('1')"] {
        let r: Result<v8::Local<v8::Value>, EngineFault> = compile_run!(tc, probe, "probe.js");
        let f = r.expect_err(probe);
        assert_eq!(f.name, "EvalError", "{probe}: {f:?}");
        tc.reset();
    }
}

/// Runs `src` on `thread` as a pool's engine thread would, and returns the
/// report and the context left ready for the next run.
fn run_on(
    thread: &mut V8Thread,
    rt: &tokio::runtime::Runtime,
    src: &str,
) -> (
    harness_core::ExecutionReport,
    Option<v8::Global<v8::Context>>,
) {
    let mut report = None;
    thread.lend(&mut |engine| {
        let mut request = ExecutionRequest::new(src);
        request.limits.timeout_ms = 300;
        let out = harness_core::engine::run_script(
            engine.expect("an engine"),
            ENGINE_NAME,
            request,
            rt.handle(),
        );
        report = Some(out.report);
        out.engine_tainted
    });
    let next = thread.warm.as_ref().map(|w| w.context.clone());
    (report.expect("a report"), next)
}

#[test]
fn a_clean_run_hands_its_context_on_and_a_fault_does_not() {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let mut thread = V8Thread::default();
    let (r, first) = run_on(&mut thread, &rt, "return 1");
    assert!(r.ok, "{r:?}");
    let first = first.expect("a context for the next run");
    // A run that returns, and one that throws, end clean.
    for src in ["return 2", "throw new Error('x')", "await null; return 3"] {
        let (_, next) = run_on(&mut thread, &rt, src);
        assert!(next.as_ref() == Some(&first), "{src}: not reused");
    }
    // A fault drops the isolate (a handle must not outlive it) and
    // hardens a context on a new one before the next run arrives.
    drop(first);
    let (r, next) = run_on(&mut thread, &rt, "while (true) {}");
    assert_eq!(r.code(), Some(harness_core::ErrorCode::ScriptTimeoutError));
    let next = next.expect("a context on a new isolate");
    let (r, again) = run_on(&mut thread, &rt, "return 4");
    assert_eq!(r.value, Some(serde_json::json!(4)), "{r:?}");
    assert!(again.as_ref() == Some(&next));
}

#[test]
fn the_isolate_runs_a_script() {
    let report = tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(V8::new().execute(ExecutionRequest::new("return 1 + 1")));
    assert_eq!(report.value, Some(serde_json::json!(2)), "{report:?}");
}
