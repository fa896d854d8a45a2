//! Hostile scripts: each ends with the error code DESIGN.md names, and the
//! host keeps working for the next run.

mod common;

use common::*;
use harness::{ErrorCode, Limits, Mode};
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_times_out() {
    let (h, _) = harness_with(
        short(200),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    for src in [
        "while (true) {}",
        "for (;;) { try { while(true){} } catch (e) {} }",
        "while(true){ try { throw 1 } finally { continue } }",
    ] {
        let t = std::time::Instant::now();
        let r = h.run(src).await;
        expect_code(&r, ErrorCode::ScriptTimeoutError);
        assert!(t.elapsed().as_millis() < 5_000, "took {:?}", t.elapsed());
        assert_eq!(r.error.as_ref().unwrap().phase, harness::Phase::Executing);
    }
    assert_healthy(&h).await;
}

/// A script that catches everything must still stop when the watchdog
/// halts the allocator before the interrupt check sees the deadline (the
/// `execute_quickjs` fuzz target hung on this race). Heavy native work
/// between the loop's jumps makes interrupt checks rare, so the watchdog
/// always wins here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_all_loops_stop_whoever_sees_the_deadline_first() {
    let (h, _) = harness_with(
        short(100),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    for src in [
        "const big = Array.from({length: 1e5}, (_, i) => i); for(;;){ try { for(;;){ JSON.stringify(big) } } catch(e) {} }",
        "for(;;){ try { for(;;){} } catch(e) {} }",
    ] {
        let t = std::time::Instant::now();
        let run = h.run(src);
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), run)
            .await
            .expect("the run ended");
        expect_code(&r, ErrorCode::ScriptTimeoutError);
        assert!(t.elapsed().as_millis() < 5_000, "took {:?}", t.elapsed());
    }
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bombs_hit_the_memory_limit() {
    let limits = Limits::default()
        .with_memory_bytes(32 << 20)
        .with_timeout_ms(2_000);
    let (h, _) = harness_with(
        limits,
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    for src in [
        "const a = []; while (true) a.push('x'.repeat(1000) + a.length);",
        "return 'x'.repeat(2 ** 28).length",
        "const parts = []; const s = 'x'.repeat(1 << 20); while (true) parts.push(s + parts.length);",
        "const b = []; while (true) b.push(new ArrayBuffer(1 << 20));",
        "const m = new Map(); for (let i = 0; ; i++) m.set(i, {i});",
        // Catching the out-of-memory error does not escape the limit.
        "const a = []; while (true) { try { a.push(new Array(1e6).fill(1)); } catch (e) {} }",
    ] {
        let r = h.run(src).await;
        let code = r.error.as_ref().map(|e| e.code);
        // The last bomb may also spin until the deadline once memory is full.
        assert!(
            matches!(code, Some(ErrorCode::ScriptMemoryError) | Some(ErrorCode::ScriptTimeoutError)),
            "{src}: {:?}", r.error
        );
        if !src.contains("catch") {
            assert_eq!(code, Some(ErrorCode::ScriptMemoryError), "{src}");
        }
        assert_healthy(&h).await;
    }
    // A limit is a limit, down to zero bytes.
    let (h0, _) = harness_with(
        Limits::default().with_memory_bytes(0),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    expect_code(&h0.run("return 1").await, ErrorCode::ScriptMemoryError);
    let (h1, _) = harness_with(
        Limits::default().with_memory_bytes(1 << 20),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    expect_code(
        &h1.run("return 'x'.repeat(2 << 20).length").await,
        ErrorCode::ScriptMemoryError,
    );
    expect_value(
        &h1.run("return 'x'.repeat(1000).length").await,
        serde_json::json!(1000),
    );
    // Doubling a string reaches QuickJS's string length cap (ropes make it
    // cheap) before the memory limit: an ordinary, catchable engine error.
    let r = h.run("let s = 'x'; while (true) s = s + s;").await;
    let code = r.error.as_ref().map(|e| e.code);
    assert!(
        matches!(
            code,
            Some(ErrorCode::ScriptRuntimeError) | Some(ErrorCode::ScriptMemoryError)
        ),
        "{:?}",
        r.error
    );
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_is_a_stack_overflow() {
    let (h, _) = harness();
    for src in [
        "function f(n) { return f(n + 1) + 1 } return f(0)",
        "const o = {}; o.toString = function () { return `${this}` }; return `${o}`",
        "async function g() { return await g() } return await g()",
        "function h(){ return [h()] } return h()",
    ] {
        let r = h.run(src).await;
        expect_code(&r, ErrorCode::StackOverflowError);
    }
    // Deep nesting at parse time (with the source cap raised for it).
    let limits = Limits::default().with_max_source_bytes(4 << 20);
    let (h2, _) = harness_with(
        limits,
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let r = h2.run(&format!("return {}", "[".repeat(1_000_000))).await;
    let code = r.error.as_ref().map(|e| e.code);
    assert!(
        matches!(
            code,
            Some(ErrorCode::StackOverflowError) | Some(ErrorCode::ScriptSyntaxError)
        ),
        "{:?}",
        r.error
    );
    assert_healthy(&h).await;
    assert_healthy(&h2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_generation_from_strings_is_blocked() {
    let (h, _) = harness();
    for src in [
        "return eval('1 + 1')",
        "return (0, eval)('1')",
        "return globalThis.eval('1')",
        "return new Function('return 1')()",
        "return Function('return 1')()",
        "return (function(){}).constructor('return 1')()",
        "return (() => 1).constructor('return 1')()",
        "return (async function(){}).constructor('return 1')()",
        "return (function*(){}).constructor('yield 1')().next()",
        "return (async function*(){}).constructor('yield 1')",
        "return Object.getPrototypeOf(async () => {}).constructor('return 1')",
        "return tools.echo.constructor('return process')()",
        "return tools.constructor.constructor('return this')()",
        "return context.constructor.constructor('return this')()",
        "return context.telemetry.emitProgress.constructor('return 1')()",
        "return console.log.constructor('return 1')()",
        "return Reflect.construct(Function, ['return 1'])()",
        "class A {}; return A.constructor('return 1')()",
        "return [].map.constructor('return 1')()",
        "try { await tools.fail({}) } catch (e) { return e.constructor.constructor('return this')() }",
        "const r = await tools.echo({a: 1}); return r.constructor.constructor('return this')()",
    ] {
        let r = h.run(src).await;
        expect_code(&r, ErrorCode::BannedIdentifierError);
        let e = r.error.unwrap();
        assert!(e.message.contains("code generation"), "{src}: {}", e.message);
    }
    // Caught, the script goes on.
    let r = h.run("try { eval('1') } catch (e) { return e.name }").await;
    expect_value(&r, json!("BannedIdentifierError"));
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prototype_pollution_fails_shared_and_never_leaks() {
    let (h, _) = harness();
    for src in [
        "Object.prototype.polluted = 1",
        "Array.prototype.push = function () {}",
        "({}).__proto__.polluted = 1",
        "Object.defineProperty(Object.prototype, 'polluted', {value: 1})",
        "Object.setPrototypeOf(Array.prototype, {})",
        "JSON.parse = () => 1",
        "Promise.prototype.then = () => 1",
        "Math.random = () => 4",
        "Function.prototype.call = null",
        "Object.getPrototypeOf(async function(){}).constructor = 1",
        "Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({done: true})",
    ] {
        // In the shared realm the write is refused.
        let mut shared = h.request(src);
        shared.limits = shared.limits.with_realm(Some(harness::Realm::Shared));
        let r = h.execute(shared).await;
        expect_code(&r, ErrorCode::ScriptRuntimeError);
        assert_eq!(r.error.unwrap().name, "TypeError", "{src}");
        // Left to the facade, the script gets a private realm: the write
        // works there, and goes with it.
        let r = h.run(src).await;
        assert!(r.ok, "{src}: {:?}", r.error);
        expect_value(
            &run_shared(
                &h,
                "return [typeof ({}).polluted, Math.random() !== 4, JSON.parse('1'), \
                 Object.isFrozen(Object.prototype), typeof [].push.call]",
            )
            .await,
            json!(["undefined", true, 1, true, "function"]),
        );
    }
    // The global object is sealed, and nothing reaches the next run
    // (fresh context).
    expect_value(
        &h.run("try { globalThis.leak = 42; return 'set' } catch (e) { return e.name }")
            .await,
        json!("TypeError"),
    );
    expect_value(&h.run("return typeof leak").await, json!("undefined"));
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overriding_inherited_builtins_on_own_objects_still_works() {
    // Frozen intrinsics must not break ordinary code (the override mistake).
    let (h, _) = harness();
    let r = h
        .run(
            "class MyError extends Error { constructor(m) { super(m); this.name = 'MyError'; } }
             const o = { a: 1 }; o.toString = () => 'custom';
             function P() {} P.prototype.constructor = P;
             const e = new MyError('x');
             return [e.name, String(o), e instanceof Error, e.message, P.prototype.constructor === P]",
        )
        .await;
    expect_value(&r, json!(["MyError", "custom", true, "x", true]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_and_tools_are_read_only() {
    let (h, _) = harness();
    for src in [
        "context.model = 'x'",
        "context.limits.timeoutMs = 1",
        "context.tools.push('evil')",
        "context.identity = {}",
        "delete context.model",
        "tools.echo = () => 1",
        "tools.newTool = () => 1",
        "delete tools.echo",
        "Object.setPrototypeOf(tools, {})",
        "tools = {}",
        "context = {}",
        "console = {}",
        "console.log = () => 1",
        "context.telemetry.emitProgress = null",
        "undeclaredVariable = 1",
    ] {
        let r = h.run(src).await;
        expect_code(&r, ErrorCode::ScriptRuntimeError);
        let name = r.error.unwrap().name;
        assert!(
            name == "TypeError" || name == "ReferenceError",
            "{src}: {name}"
        );
    }
    // Results handed to scripts are frozen.
    let r = h
        .run("const r = await tools.echo({a: {b: 1}}); r.a.b = 2")
        .await;
    expect_code(&r, ErrorCode::ScriptRuntimeError);
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn globals_offer_no_host_access() {
    let (h, _) = harness();
    let r = h
        .run(
            "return ['process','require','Deno','Bun','std','os','print','scriptArgs','module',
                     'SharedArrayBuffer','Atomics','FinalizationRegistry','WebAssembly','setTimeout',
                     'fetch','performance','__harness_host'].filter(n => typeof globalThis[n] !== 'undefined')",
        )
        .await;
    expect_value(&r, json!([]));
    let r = h.run("return import('fs')").await;
    assert!(!r.ok);
    let r = h.run("import fs from 'fs'").await;
    expect_code(&r, ErrorCode::ScriptSyntaxError);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_budget_of_32_calls() {
    let (h, _) = harness();
    let r = h
        .run(
            "for (let i = 0; i < 32; i++) await tools.echo({i});
             const left = context.budget.remainingToolCalls;
             try { await tools.echo({i: 32}); } catch (e) { return [left, e.name, e.message]; }",
        )
        .await;
    assert!(r.ok, "{:?}", r.error);
    let v = r.value.unwrap();
    assert_eq!(v[0], json!(0));
    assert_eq!(v[1], json!("ToolBudgetExceededError"));
    assert_eq!(r.tool_calls.len(), 33);
    assert_eq!(
        r.tool_calls[32].error.as_ref().unwrap().code,
        ErrorCode::ToolBudgetExceededError
    );
    // Uncaught, it fails the run with the tool named.
    let r = h
        .run("for (let i = 0; i < 33; i++) await tools.echo({i});")
        .await;
    expect_code(&r, ErrorCode::ToolBudgetExceededError);
    let e = r.error.unwrap();
    assert_eq!((e.tool.as_deref(), e.call_id), (Some("echo"), Some(33)));
}

/// Found by the fuzz smoke test: a script that keeps calling after its
/// budget (or keeps calling unknown tools) must not grow the host's
/// records without bound. Past the budget plus 64 refusals, calls are
/// refused unrecorded and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_tool_calls_keep_host_records_bounded() {
    let (h, _) = harness_with(
        short(300),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let cap = 32 + harness::core::event_loop::REFUSED_CALLS_KEPT;
    for src in [
        "for (;;) { tools.echo({}).catch(() => {}) }",
        "for (;;) { try { tools.nope() } catch (e) {} }",
        "let n = 0; for (;;) { try { await tools.echo({}) } catch (e) { if (++n > 5000) return e.message } }",
    ] {
        let r = h.run(src).await;
        assert!(r.tool_calls.len() <= cap, "{src}: {} records", r.tool_calls.len());
        assert!(r.tool_calls_dropped > 0, "{src}: nothing dropped");
        if r.ok {
            let msg = r.value.unwrap();
            assert!(msg.as_str().unwrap().contains("too many tool call attempts"), "{msg}");
        }
    }
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_parallel_calls_run_four_at_a_time() {
    let (h, c) = harness();
    let r = h.run("const r = await Promise.all(Array.from({length: 10}, () => tools.count({}))); return r.length").await;
    expect_value(&r, json!(10));
    assert_eq!(c.peak.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert!(r
        .tool_calls
        .iter()
        .all(|c| c.status == harness::core::CallStatus::Ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_denied_is_catchable_and_recorded() {
    let (h, _) = harness();
    let r = h
        .run(
            "const ok = await tools.guarded({dangerous: false});
             try { await tools.guarded({dangerous: true}); return 'ran'; }
             catch (e) { return [ok.done.dangerous, e.name, e.tool]; }",
        )
        .await;
    expect_value(&r, json!([false, "ApprovalDeniedError", "guarded"]));
    assert_eq!(r.approvals.len(), 1);
    assert_eq!(
        r.approvals[0].outcome,
        harness::core::ApprovalOutcome::Denied
    );
    assert_eq!(r.approvals[0].args, json!({"dangerous": true}));
    // The request says where: the call on the script's second line.
    assert_eq!(r.approvals[0].line, Some(2));

    let (h, _) = harness_with(
        Limits::default(),
        Mode::Enabled,
        Arc::new(harness::AutoApprove),
    );
    let r = h
        .run("return (await tools.guarded({dangerous: true})).done")
        .await;
    expect_value(&r, json!({"dangerous": true}));
    assert_eq!(
        r.approvals[0].outcome,
        harness::core::ApprovalOutcome::Approved
    );

    let limits = Limits::default().with_approval_timeout_ms(100);
    let (h, _) = harness_with(limits, Mode::Enabled, Arc::new(harness::core::NeverAnswer));
    let r = h
        .run("try { await tools.guarded({dangerous: true}) } catch (e) { return e.name }")
        .await;
    expect_value(&r, json!("ApprovalTimeoutError"));
    assert_eq!(
        r.approvals[0].outcome,
        harness::core::ApprovalOutcome::TimedOut
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_is_not_awaited_is_cancelled_and_reported() {
    let (h, c) = harness();
    let r = h.run("tools.sleep({ms: 5000}); return 'done'").await;
    expect_code(&r, ErrorCode::DetachedPromiseError);
    assert_eq!(r.error.as_ref().unwrap().phase, harness::Phase::Finalizing);
    assert_eq!(r.value, Some(json!("done")), "the value is kept");
    assert_eq!(r.tool_calls[0].status, harness::core::CallStatus::Cancelled);
    assert!(r.metrics.duration_ms < 2_000.0);
    assert_eq!(c.cancelled.load(std::sync::atomic::Ordering::SeqCst), 1);

    // A tool that ignores cancellation is abandoned after the grace period.
    let r = h.run("tools.stubborn_sleep({ms: 3000}); return 1").await;
    expect_code(&r, ErrorCode::DetachedPromiseError);
    assert_eq!(r.tool_calls[0].status, harness::core::CallStatus::Detached);
    assert!(r.metrics.duration_ms < 2_000.0, "{}", r.metrics.duration_ms);
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_losers_are_cancelled_without_error() {
    let (h, c) = harness();
    let r = h
        .run("return await Promise.race([tools.sleep({ms: 5000}), tools.sleep({ms: 10})])")
        .await;
    expect_value(&r, json!({"slept": 10}));
    assert_eq!(r.tool_calls[0].status, harness::core::CallStatus::Cancelled);
    assert_eq!(c.cancelled.load(std::sync::atomic::Ordering::SeqCst), 1);
    let r = h.run("return await Promise.any([tools.fail({}), tools.sleep({ms: 10}), tools.sleep({ms: 5000})])").await;
    expect_value(&r, json!({"slept": 10}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_unserialisable_return_values() {
    let (h, _) = harness();
    let r = h.run("return 'x'.repeat(128 * 1024 + 1)").await;
    expect_code(&r, ErrorCode::ReturnValueTooLargeError);
    expect_value(
        &h.run("return 'x'.repeat(128 * 1024 - 2)").await,
        json!("x".repeat(128 * 1024 - 2)),
    );
    for src in [
        "return 10n",
        "return {big: 1n}",
        "const a = {}; a.self = a; return a",
        "return {toJSON() { throw new Error('nope') }}",
        "return {get x() { throw new Error('getter') }}",
        "return () => 1",
        "return Symbol('s')",
    ] {
        let r = h.run(src).await;
        expect_code(&r, ErrorCode::SerializationError);
        assert_eq!(
            r.error.as_ref().unwrap().phase,
            harness::Phase::Finalizing,
            "{src}"
        );
    }
    // Resolving the script's promise with a revoked proxy throws inside the
    // script, as in any engine: a runtime error, not a serialisation one.
    let r = h
        .run("const r = Proxy.revocable({}, {}); r.revoke(); return r.proxy")
        .await;
    expect_code(&r, ErrorCode::ScriptRuntimeError);
    let r = h
        .run("const r = Proxy.revocable({}, {}); r.revoke(); return [r.proxy]")
        .await;
    expect_code(&r, ErrorCode::SerializationError);
    let (h2, _) = harness_with(
        short(300),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let r = h2.run("return {toJSON() { while (true) {} }}").await;
    expect_code(&r, ErrorCode::ScriptTimeoutError);
    let r = h2
        .run("return {valueOf() { while (true) {} }, [Symbol.toPrimitive]() { while(true){} }} + 1")
        .await;
    expect_code(&r, ErrorCode::ScriptTimeoutError);
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_survives_a_mixed_barrage() {
    let (h, _) = harness_with(
        short(300),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let scripts = [
        "while(true){}",
        "let a=[]; while(true) a.push('y'.repeat(4096))",
        "function f(){f()} f()",
        "eval('1')",
        "return 1n",
        "(function f(){ Promise.resolve().then(f) })()",
        "return 1",
    ];
    let mut handles = Vec::new();
    for i in 0..28 {
        let h = h.clone();
        let src = scripts[i % scripts.len()];
        handles.push(tokio::spawn(async move { h.run(src).await }));
    }
    for j in handles {
        let r = j.await.unwrap();
        assert!(
            r.error.as_ref().map(|e| e.code) != Some(ErrorCode::HarnessInternalError),
            "{:?}",
            r.error
        );
    }
    assert_healthy(&h).await;
}
