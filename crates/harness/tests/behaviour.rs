//! The script and tool contract of DESIGN.md, on the default engine.

mod common;

use common::*;
use harness::core::{CallStatus, ConsoleLevel};
use harness::{CancellationToken, ErrorCode, Harness, Limits, Mode, Phase, ScriptContext};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_values_of_every_json_type() {
    let (h, _) = harness();
    for (src, v) in [
        ("return 1.5", json!(1.5)),
        ("return 'text'", json!("text")),
        ("return true", json!(true)),
        ("return null", json!(null)),
        ("return [1, [2]]", json!([1, [2]])),
        ("return {a: {b: 'c'}}", json!({"a": {"b": "c"}})),
        ("return NaN", json!(null)),
        ("return {f() {}, u: undefined, n: 1}", json!({"n": 1})),
        ("return new Date(0)", json!("1970-01-01T00:00:00.000Z")),
        // Converted, not mangled into `{}` (the script contract).
        ("return new Map([[1, 2]])", json!({"1": 2})),
    ] {
        expect_value(&h.run(src).await, v);
    }
    let r = h.run("return undefined").await;
    assert!(r.ok && r.value.is_none());
    let r = h.run("const x = 1").await;
    assert!(r.ok && r.value.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn language_features_work() {
    let (h, _) = harness();
    let r = h
        .run(
            r##"
            class Point { #x; constructor(x) { this.#x = x; } get x() { return this.#x; } static of(x) { return new Point(x); } }
            const { a, ...rest } = { a: 1, b: 2, c: 3 };
            const [first, , third = 9] = [1, 2];
            const m = new Map([["k", 1]]); const s = new Set([1, 1, 2]);
            function* gen() { yield 1; yield 2; }
            async function twice(v) { return (await Promise.resolve(v)) * 2; }
            const settled = await Promise.allSettled([Promise.resolve(1), Promise.reject(new Error("no"))]);
            return {
              cls: Point.of(3).x, a, rest, first, third, spread: [...s, ...gen()],
              tpl: `${a}-${first}`, map: m.get("k"), re: "a1b22".replace(/\d+/g, "#"),
              json: JSON.parse(JSON.stringify({z: [1]})), date: new Date(Date.UTC(2020, 0, 2)).toISOString(),
              twice: await twice(21), settled: settled.map(s => s.status), opt: rest?.zz ?? "default",
              strict: (function () { return this === undefined })(),
              bigint: (2n ** 64n).toString(), sorted: [3, 1, 2].toSorted(),
            };
            "##,
        )
        .await;
    expect_value(
        &r,
        json!({"cls": 3, "a": 1, "rest": {"b": 2, "c": 3}, "first": 1, "third": 9, "spread": [1, 2, 1, 2],
               "tpl": "1-1", "map": 1, "re": "a#b#", "json": {"z": [1]}, "date": "2020-01-02T00:00:00.000Z",
               "twice": 42, "settled": ["fulfilled", "rejected"], "opt": "default", "strict": true,
               "bigint": "18446744073709551616", "sorted": [1, 2, 3]}),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_sequential_parallel_and_composed() {
    let (h, _) = harness();
    let r = h
        .run(
            "const a = await tools.echo({n: 1});
             const [b, c] = await Promise.all([tools.echo({n: 2}), tools.echo({n: 3})]);
             const d = await tools.echo({n: a.n + b.n + c.n});
             return d.n",
        )
        .await;
    expect_value(&r, json!(6));
    assert_eq!(r.tool_calls.len(), 4);
    assert_eq!(r.metrics.tool_calls, 4);
    assert!(r.tool_calls.iter().all(|c| c.status == CallStatus::Ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tool_lists_available_tools() {
    let (h, _) = harness();
    let r = h
        .run("try { await tools.nope({}) } catch (e) { return [e.name, e.message, e.tool] }")
        .await;
    let v = r.value.clone().unwrap();
    assert_eq!(v[0], "ToolNotFoundError");
    assert!(
        v[1].as_str()
            .unwrap()
            .contains("available tools: big, count, echo, fail"),
        "{v}"
    );
    assert_eq!(v[2], "nope");
    assert_eq!(
        r.tool_calls[0].error.as_ref().unwrap().code,
        ErrorCode::ToolNotFoundError
    );
    // Probing is harmless: no thenable, no symbols.
    expect_value(
        &h.run("return [typeof tools.then, typeof tools[Symbol.iterator], 'echo' in tools]")
            .await,
        json!(["undefined", "undefined", true]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_validated_against_the_schema() {
    let (h, _) = harness();
    for (args, needle) in [
        ("{}", "\"n\" is a required property"),
        ("{n: 0}", "/n"),
        ("{n: 1, extra: true}", "extra"),
        ("{n: 'x'}", "/n"),
        ("[1]", "object"),
    ] {
        let r = h
            .run(&format!(
                "try {{ await tools.strict({args}) }} catch (e) {{ return [e.name, e.message] }}"
            ))
            .await;
        let v = r.value.unwrap();
        assert_eq!(v[0], "ToolValidationError", "{args}");
        assert!(v[1].as_str().unwrap().contains(needle), "{args}: {}", v[1]);
    }
    let r = h
        .run("const a = {}; a.a = a; try { await tools.strict(a) } catch (e) { return e.name }")
        .await;
    expect_value(&r, json!("ToolValidationError"));
    let r = h
        .run("try { await tools.strict({n: 1n}) } catch (e) { return e.name }")
        .await;
    expect_value(&r, json!("ToolValidationError"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_failures_are_catchable_errors_named_by_code() {
    let (h, _) = harness();
    let r = h.run("try { await tools.fail({}) } catch (e) { return [e.name, e.code, e.message, e instanceof Error, e.tool] }").await;
    expect_value(
        &r,
        json!([
            "ToolExecutionError",
            "ToolExecutionError",
            "fail failed: it broke",
            true,
            "fail"
        ]),
    );
    let r = h.run("await tools.fail({})").await;
    expect_code(&r, ErrorCode::ToolExecutionError);
    let e = r.error.unwrap();
    assert_eq!(
        (e.tool.as_deref(), e.call_id, e.phase),
        (Some("fail"), Some(1), Phase::Executing)
    );
    // A script cannot forge a harness error code by naming its own error.
    let r = h
        .run("const e = new Error('x'); e.name = 'ToolBudgetExceededError'; throw e")
        .await;
    expect_code(&r, ErrorCode::ScriptRuntimeError);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_checks_calls_without_running_tools() {
    let (h, c) = harness_with(
        Limits::default(),
        Mode::DryRun,
        Arc::new(harness::AutoDeny::default()),
    );
    let r = h.run("const r = await tools.count({x: 1}); try { await tools.strict({}) } catch (e) { return [r, e.name] }").await;
    expect_value(
        &r,
        json!([{"__dryRun": true, "tool": "count", "args": {"x": 1}}, "ToolValidationError"]),
    );
    assert_eq!(
        c.peak.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing ran"
    );
    let r = h.run("return context.mode").await;
    expect_value(&r, json!("dry-run"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_mode_offers_no_tools() {
    let (h, _) = harness_with(
        Limits::default(),
        Mode::Disabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let r = h
        .run("try { await tools.echo({}) } catch (e) { return [e.name, context.tools.length] }")
        .await;
    expect_value(&r, json!(["ToolNotFoundError", 0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_and_packs_limit_what_scripts_see() {
    let c = Arc::new(Counters::default());
    let mut reg = registry(c);
    reg.define_pack("basic", ["echo", "fail"]).unwrap();
    let h = Harness::builder()
        .tools(reg)
        .allow(harness::Allowlist::only(["basic", "count"]))
        .build()
        .unwrap();
    let r = h
        .run("try { await tools.sleep({ms: 1}) } catch (e) { return [context.tools, e.name] }")
        .await;
    expect_value(&r, json!([["count", "echo", "fail"], "ToolNotFoundError"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_tool_output_strings_are_truncated_with_a_marker() {
    let (h, _) = harness();
    let r = h
        .run("const r = await tools.big({n: 300000}); return [r.text.length, r.text.slice(-40)]")
        .await;
    let v = r.value.unwrap();
    assert!(v[0].as_u64().unwrap() < 300_000);
    assert!(
        v[1].as_str().unwrap().contains("[truncated 37856 bytes]"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_keeps_partial_results() {
    let (h, c) = harness_with(
        short(300),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let t = Instant::now();
    let r = h
        .run("await tools.echo({step: 1}); await tools.sleep({ms: 10000}); return 'never'")
        .await;
    let took = t.elapsed();
    expect_code(&r, ErrorCode::ScriptTimeoutError);
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(r.tool_calls[0].status, CallStatus::Ok);
    assert_eq!(r.tool_calls[1].status, CallStatus::Cancelled);
    assert_eq!(c.cancelled.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_accuracy_for_a_200ms_limit() {
    let (h, _) = harness_with(
        short(200),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let t = Instant::now();
    let r = h.run("while (true) {}").await;
    let took = t.elapsed();
    expect_code(&r, ErrorCode::ScriptTimeoutError);
    // Not a timing assertion on speed: only that the limit is enforced at
    // all within a wide margin even on a loaded CI machine.
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "{took:?}"
    );
    println!("200 ms limit ended after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_stops_a_running_script() {
    let (h, _) = harness();
    for src in [
        "while (true) {}",
        "await tools.sleep({ms: 60000})",
        // Heavy native calls check for interrupts rarely; the watchdog
        // halts the allocator on cancel so this stops promptly too.
        "const a = Array.from({length: 2e5}, (_, i) => -i); while (true) a.slice().sort()",
    ] {
        let token = CancellationToken::new();
        let t2 = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t2.cancel();
        });
        let t = Instant::now();
        let r = h.run_with_cancel(src, token).await;
        expect_code(&r, ErrorCode::ScriptCancelledError);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
    assert_healthy(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_levels_and_limits() {
    let (h, _) = harness();
    let r = h.run("console.log('a', 1, {b: 2}); console.info('i'); console.warn('w'); console.error(new TypeError('e')); console.debug(1n, [2n]); return 1").await;
    let lines: Vec<_> = r
        .console
        .iter()
        .map(|c| (c.level, c.text.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (ConsoleLevel::Log, "a 1 {\"b\":2}"),
            (ConsoleLevel::Info, "i"),
            (ConsoleLevel::Warn, "w"),
            (ConsoleLevel::Error, "TypeError: e"),
            (ConsoleLevel::Debug, "1n [\"2n\"]"),
        ]
    );
    let r = h
        .run("for (let i = 0; i < 1000; i++) console.log(i); return 1")
        .await;
    assert_eq!(r.console.len(), 20, "20 lines per second");
    assert_eq!(r.console_dropped, 980);
    let r = h.run("console.log('x'.repeat(100000)); return 1").await;
    assert!(r.console[0].text.len() < 9000 && r.console[0].text.contains("[truncated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_rate_limited() {
    let (h, _) = harness();
    let r = h
        .run("const kept = []; for (let i = 0; i < 5; i++) kept.push(context.telemetry.emitProgress('step ' + i, {i})); await tools.sleep({ms: 550}); kept.push(context.telemetry.emitProgress('later')); return kept")
        .await;
    expect_value(&r, json!([true, false, false, false, false, true]));
    assert_eq!(r.progress.len(), 2);
    assert_eq!(r.progress[0].message, "step 0");
    assert_eq!(r.progress[0].data, Some(json!({"i": 0})));
    assert_eq!(r.progress_dropped, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_is_populated_and_frozen() {
    let c = Arc::new(Counters::default());
    let h = Harness::builder()
        .tools(registry(c))
        .context(
            ScriptContext::default()
                .with_identity(json!({"sessionId": "s1", "user": "ana"}))
                .with_working_directory("/work")
                .with_provider("acme")
                .with_model("m-1")
                .with_extra(json!({"k": [1]})),
        )
        .build()
        .unwrap();
    let r = h
        .run("await tools.echo({}); return [context.identity.user, context.workingDirectory, context.provider, context.model, context.extra.k, context.limits.timeoutMs, context.limits.maxToolCalls, context.budget.remainingToolCalls, context.tools.includes('echo'), context.approvalsEnabled, Object.isFrozen(context), Object.isFrozen(context.identity), context.budget.remainingMs > 0]")
        .await;
    expect_value(
        &r,
        json!([
            "ana",
            "/work",
            "acme",
            "m-1",
            [1],
            30000,
            32,
            31,
            true,
            true,
            true,
            true,
            true
        ]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_checks_happen_before_anything_runs() {
    let (h, _) = harness();
    let r = h.run(&"x".repeat(20 * 1024 + 1)).await;
    expect_code(&r, ErrorCode::ScriptTooLargeError);
    assert_eq!(r.error.unwrap().phase, Phase::Parsing);
    let r = h.run_bytes(b"return '\xff'").await;
    expect_code(&r, ErrorCode::ScriptSyntaxError);
    assert!(r.error.unwrap().message.contains("UTF-8"));
    expect_value(
        &h.run_bytes(b"\xEF\xBB\xBFreturn 'bom'").await,
        json!("bom"),
    );
    let r = h.run("let a = 1;\nlet b = ;\nreturn a").await;
    expect_code(&r, ErrorCode::ScriptSyntaxError);
    let e = r.error.unwrap();
    assert_eq!(e.location.map(|l| (l.line, l.column)), Some((2, 9)));
    assert_eq!(e.phase, Phase::Parsing);
    // check() runs nothing, and agrees on the location.
    let err = h
        .check("let a = 1;\nlet b = ;\nreturn a")
        .await
        .unwrap_err();
    assert_eq!(err.location.map(|l| (l.line, l.column)), Some((2, 9)));
    assert!(
        h.check("while (true) {}").await.is_ok(),
        "check must not run the script"
    );
    // A script that would close its function early is not a function
    // body: refused by check and by run alike, before anything runs.
    let escape = "}); const escaped = [typeof process, typeof require, Object.isFrozen(Object.prototype)]; (async function () { return escaped";
    let err = h.check(escape).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::ScriptSyntaxError);
    assert_eq!(err.location.map(|l| (l.line, l.column)), Some((1, 1)));
    let r = h.run(escape).await;
    expect_code(&r, ErrorCode::ScriptSyntaxError);
    assert!(r.console.is_empty() && r.tool_calls.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stacks_name_only_script_locations() {
    let (h, _) = harness();
    let r = h.run("function inner() { throw new RangeError('deep') }\nfunction outer() { inner() }\nouter()").await;
    expect_code(&r, ErrorCode::ScriptRuntimeError);
    let e = r.error.unwrap();
    assert_eq!(e.name, "RangeError");
    assert_eq!(e.message, "Uncaught RangeError: deep");
    let stack = e.stack.unwrap();
    assert!(stack.contains("at inner (script.js:1:"), "{stack}");
    assert!(stack.contains("at outer (script.js:2:"), "{stack}");
    for line in stack.lines() {
        assert!(line.contains("script.js:"), "{stack}");
    }
    assert!(
        !stack.contains("prelude") && !stack.contains('/'),
        "{stack}"
    );
    // The stack a script sees of host errors names no host internals either.
    let r = h
        .run("try { await tools.fail({}) } catch (e) { return String(e.stack) }")
        .await;
    let s = r.value.unwrap();
    assert!(!s.as_str().unwrap().contains(".rs"), "{s}");
    let r = h.run("throw 'plain string'").await;
    expect_code(&r, ErrorCode::ScriptRuntimeError);
    assert_eq!(r.error.unwrap().message, "Uncaught plain string");
}

/// A tool call starts the moment the script makes it, and keeps going
/// while the script computes: its first poll happens inside the call
/// (event_loop's `HostState::start_call`), its later polls on tokio, not
/// only when the run's thread next waits for events (`CallSlot`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_call_progresses_while_the_script_computes() {
    use harness::{FnTool, ToolRegistry};
    let finished: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let mut tools = ToolRegistry::new();
    let at = finished.clone();
    tools
        .register(FnTool::new(
            "nap",
            "sleeps 10 ms, then notes when it got past the sleep",
            json!({"type": "object"}),
            move |_, _| {
                let at = at.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    *at.lock().unwrap() = Some(Instant::now());
                    Ok(json!("rested"))
                }
            },
        ))
        .unwrap();
    let h = Harness::builder().tools(tools).build().unwrap();
    let started = Instant::now();
    // A call starts the moment the script makes it; the script then
    // computes for 1.5 s, never yielding, before it awaits `nap`.
    let r = h
        .run("const p = tools.nap({}); const t = Date.now(); while (Date.now() - t < 1500) {} return await p")
        .await;
    expect_value(&r, json!("rested"));
    let past_sleep = finished.lock().unwrap().expect("the tool ran") - started;
    assert!(
        past_sleep < Duration::from_millis(1000),
        "the call got past its 10 ms sleep only after {past_sleep:?}, when the script awaited it"
    );
}

/// A call that ran to its end inside the op that made it is reported as
/// it ended, even when the run then times out in that same job, before
/// the loop looked at it: it is neither an orphan nor cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_finished_in_its_op_is_recorded_when_the_run_then_times_out() {
    let (h, counters) = harness_with(
        short(200),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    let r = h.run("tools.echo({n: 1}); while (true) {}").await;
    expect_code(&r, ErrorCode::ScriptTimeoutError);
    assert_eq!(
        counters.executed.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].status, CallStatus::Ok, "{:?}", r.tool_calls);
}

/// Every call the observer saw start, it sees finish once, however the
/// run ended: a call that finished inside its op before a timeout, an
/// orphan cancelled after the script returned, and a call that ignored
/// its cancellation and was abandoned after the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_sees_every_started_call_finish_once() {
    use harness::{Observer, RunObserver};
    use std::sync::Mutex;
    #[derive(Default)]
    struct Seen(Mutex<Vec<(u64, String, Option<ErrorCode>)>>);
    impl RunObserver for Seen {
        fn tool_call_started(&self, id: u64, tool: &str) {
            self.0
                .lock()
                .unwrap()
                .push((id, format!("start {tool}"), None));
        }
        fn tool_call_finished(&self, id: u64, tool: &str, error: Option<ErrorCode>) {
            self.0
                .lock()
                .unwrap()
                .push((id, format!("end {tool}"), error));
        }
    }
    let (h, _) = harness_with(
        short(300),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    );
    for (source, expect) in [
        ("tools.echo({n: 1}); while (true) {}", vec![("echo", None)]),
        (
            "tools.sleep({ms: 5000}); return 1",
            vec![("sleep", Some(ErrorCode::ScriptCancelledError))],
        ),
        (
            "tools.stubborn_sleep({ms: 2000}); return 1",
            vec![("stubborn_sleep", Some(ErrorCode::DetachedPromiseError))],
        ),
    ] {
        let seen = Arc::new(Seen::default());
        let mut request = h.request(source);
        request.observer = Some(Observer::new(seen.clone()));
        let r = h.execute(request).await;
        assert!(!r.ok, "{source}");
        let events = seen.0.lock().unwrap().clone();
        let want: Vec<_> = expect
            .iter()
            .enumerate()
            .flat_map(|(i, (tool, error))| {
                let id = i as u64 + 1;
                [
                    (id, format!("start {tool}"), None),
                    (id, format!("end {tool}"), *error),
                ]
            })
            .collect();
        assert_eq!(events, want, "{source}");
    }
}

/// A tool that panics ends its call as a ToolExecutionError, whether it
/// panics on its first poll (inside the script's `call` op) or later; and
/// inside a detached task it ends the task the same way: its `done`
/// rejects at once, instead of the task staying "running" while the
/// script waits for it to its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_panics_ends_its_call_or_task_as_a_tool_error() {
    use harness::{FnTool, TaskLimits, ToolRegistry};
    let mut tools = ToolRegistry::new();
    tools
        .register(FnTool::new(
            "bang",
            "panics on its first poll",
            json!({"type": "object"}),
            |_, _| async move {
                panic!("bang");
                #[allow(unreachable_code)]
                Ok(json!(null))
            },
        ))
        .unwrap();
    tools
        .register(FnTool::new(
            "boom",
            "panics, after a first poll that waits",
            json!({"type": "object"}),
            |_, _| async move {
                tokio::task::yield_now().await;
                panic!("boom");
                #[allow(unreachable_code)]
                Ok(json!(null))
            },
        ))
        .unwrap();
    let h = Harness::builder()
        .tools(tools)
        .limits(short(5_000))
        .enable_spawn(TaskLimits::default())
        .build()
        .unwrap();
    let r = h
        .run("const out = []; for (const f of [tools.bang, tools.boom]) { try { await f({}) } catch (e) { out.push(e.name) } } return out")
        .await;
    expect_value(&r, json!(["ToolExecutionError", "ToolExecutionError"]));
    let started = Instant::now();
    let r = h
        .run("const t = tools.spawn.exec('boom', {}); try { await t.done } catch (e) { return e.name }")
        .await;
    expect_value(&r, json!("ToolExecutionError"));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the script waited for the deadline"
    );
}

/// A script that patches a built-in (a polyfill) gets a private realm
/// from the facade: its patch works, the next run (shared, frozen) never
/// sees it, and a caller who pins the shared realm gets the TypeError.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polyfill_runs_in_a_private_realm_and_leaves_nothing_behind() {
    let (h, _) = harness();
    let polyfill = "Array.prototype.last = function () { return this[this.length - 1]; };\n\
                    return [[1, 2, 3].last(), Object.isFrozen(Array.prototype)]";
    expect_value(&h.run(polyfill).await, json!([3, false]));
    let after = "return [typeof [].last, Object.isFrozen(Array.prototype)]";
    expect_value(&run_shared(&h, after).await, json!(["undefined", true]));
    // Aliased past the check: the shared realm refuses, as it always did.
    let hidden = "const a = [[]].map((x) => Object.getPrototypeOf(x))[0]; a.last = 1;";
    let r = h.run(hidden).await;
    assert_eq!(r.error.map(|e| e.code), Some(ErrorCode::ScriptRuntimeError));
    let mut request = h.request(polyfill);
    request.limits = request.limits.with_realm(Some(harness::Realm::Shared));
    let pinned = h.execute(request).await;
    let e = pinned.error.expect("the shared realm refuses the write");
    assert!(e.message.contains("TypeError"), "{e:?}");
    expect_value(&run_shared(&h, after).await, json!(["undefined", true]));
    // Asking whether a built-in is frozen is a private realm's question
    // too: it answers as an unhardened engine would.
    expect_value(&h.run(after).await, json!(["undefined", false]));
}
