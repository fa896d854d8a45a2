//! Tools: calls, checks, budget, concurrency, approvals, modes, promise
//! lifecycle, truncation.

use super::case;
use crate::{ensure, expect_code, expect_value, Approvals, Case, Counters, Spec};
use harness_core::{ApprovalOutcome, CallStatus, ErrorCode, Mode};
use serde_json::json;

pub const CASES: &[Case] = &[
    case!("tools::sequential", "awaited calls run one after another and are all reported ok", Tools, Nothing,
        [Spec::new("const a = await tools.echo({n: 1}); const b = await tools.echo({n: a.n + 1}); return b.n", |o| {
            expect_value(o, json!(2))?;
            ensure(o, o.report.tool_calls.len() == 2 && o.report.tool_calls.iter().all(|c| c.status == CallStatus::Ok), "two ok calls")
        })]),
    case!("tools::attempts_bounded", "past the budget and 64 refused attempts, calls are refused unrecorded and counted in tool_calls_dropped", Tools, Nothing,
        [Spec::new("let n = 0; for (;;) { try { await tools.echo({}) } catch (e) { if (++n > 500) return e.message } }", |o| {
            let msg = o.report.value.as_ref().and_then(|v| v.as_str()).unwrap_or_default();
            ensure(o, o.report.ok && msg.contains("too many tool call attempts"), "the last refusal names the cap")?;
            let cap = harness_core::Limits::default().max_tool_calls as usize
                + harness_core::event_loop::REFUSED_CALLS_KEPT;
            ensure(o, o.report.tool_calls.len() == cap, &format!("{} records, expected {cap}", o.report.tool_calls.len()))?;
            ensure(o, o.report.tool_calls_dropped > 0, "dropped attempts counted")
        })]),
    case!("tools::answered_at_once", "a call that finishes at once (a tool done on its first poll, a call the checks refuse) settles as any other: its result, or its error with code, tool and call id; calls settle in the order they were made", Tools, Nothing,
        [Spec::new("const r = await tools.echo({n: 1}); let e; try { await tools.strict({n: 0}) } catch (x) { e = x } return [r.n, Object.isFrozen(r), e.code, e.tool, e.callId]", |o| {
            expect_value(o, json!([1, true, "ToolValidationError", "strict", 2]))?;
            ensure(o, o.report.tool_calls.len() == 2 && o.report.tool_calls[1].status == CallStatus::Error, "the refused call recorded as failed")
        }),
         Spec::new("try { await Promise.race([tools.strict({n: 0}), tools.echo({n: 1})]); return 'echo' } catch (e) { return e.code }", |o| expect_value(o, json!("ToolValidationError"))),
         Spec::new("const r = await Promise.all([tools.echo({n: 1}), tools.strict({n: 0}).catch(e => e.code), tools.echo({n: 3})]); return [r[0].n, r[1], r[2].n]", |o| expect_value(o, json!([1, "ToolValidationError", 3])))]),
    case!("tools::parallel", "calls in Promise.all all complete", Tools, Nothing,
        [Spec::new("const r = await Promise.all([1, 2, 3].map(n => tools.echo({n}))); return r.map(x => x.n)", |o| expect_value(o, json!([1, 2, 3])))]),
    case!("tools::composed", "the output of one call feeds the next", Tools, Nothing,
        [Spec::new("const a = await tools.echo({list: [1, 2]}); const b = await tools.echo({sum: a.list[0] + a.list[1]}); return b", |o| expect_value(o, json!({"sum": 3})))]),
    case!("tools::results_are_frozen", "results handed to scripts are deep-frozen", Tools, Nothing,
        [Spec::new("const r = await tools.echo({a: {b: 1}}); return [Object.isFrozen(r), Object.isFrozen(r.a)]", |o| expect_value(o, json!([true, true])))]),
    case!("tools::frozen_write_hint", "an uncaught write to a frozen object (a tool result, `context`, the script's own) says in the report which objects the harness freezes and to change a copy; the script's own `e.message` is the engine's", Tools, Nothing,
        [Spec::new("const r = await tools.echo({a: [1]}); r.a.push(2)", frozen_hint),
         Spec::new("const r = await tools.echo({a: 1}); r.a = 2", frozen_hint),
         Spec::new("context.model = 'x'", frozen_hint),
         Spec::new("delete Object.freeze({a: 1}).a", frozen_hint),
         Spec::new("try { Object.freeze({a: 1}).b = 2 } catch (e) { return [e.name, e.message.includes('copy')] }", |o| expect_value(o, json!(["TypeError", false]))),
         Spec::new("throw new TypeError('x is not a function')", |o| {
             expect_code(o, ErrorCode::ScriptRuntimeError)?;
             ensure(o, o.report.error.as_ref().is_some_and(|e| !e.message.contains("copy")), "a hint on an error that is not a frozen write")
         })]),
    case!("tools::unknown_tool", "an unknown tool throws ToolNotFoundError listing the available tools", Tools, Nothing,
        [Spec::new("try { await tools.serach({}) } catch (e) { return [e.name, e.message] }", |o| {
            expect_value(o, json!(["ToolNotFoundError", "unknown tool 'serach'; available tools: big, count, echo, fail, guarded, mcp.up.echo-x, sleep, strict, stubborn_sleep"]))
        })]),
    case!("tools::bad_arguments", "arguments the schema rejects are ToolValidationError naming each problem", Tools, Nothing,
        [Spec::new("try { await tools.strict({n: 0, extra: 1}) } catch (e) { return [e.name, e.message.includes('/n'), e.message.includes('extra')] }", |o| expect_value(o, json!(["ToolValidationError", true, true]))),
         Spec::new("try { await tools.strict({n: 1n}) } catch (e) { return e.name }", |o| expect_value(o, json!("ToolValidationError")))]),
    case!("tools::budget", "the 33rd call is ToolBudgetExceededError; remaining budget is visible", Tools, Nothing,
        [Spec::new("for (let i = 0; i < 32; i++) await tools.echo({i}); const left = context.budget.remainingToolCalls; try { await tools.echo({}) } catch (e) { return [left, e.name] }", |o| {
            expect_value(o, json!([0, "ToolBudgetExceededError"]))?;
            ensure(o, o.report.tool_calls.len() == 33, "33 calls recorded")
        })]),
    case!("tools::budget_counts_at_call", "a call (or a detached task) counts against context.budget the moment the script makes it, before it awaits: a loop spending the budget ends", Tools, Nothing,
        [Spec::new("const a = context.budget.remainingToolCalls; const p = tools.echo({}); const b = context.budget.remainingToolCalls; await p; return a - b", |o| expect_value(o, json!(1))),
         Spec::new("const ps = []; while (context.budget.remainingToolCalls > 0 && ps.length < 1000) ps.push(tools.echo({})); await Promise.all(ps); return ps.length", |o| {
            expect_value(o, json!(32))?;
            ensure(o, o.report.tool_calls.len() == 32 && o.report.tool_calls.iter().all(|c| c.status == CallStatus::Ok), "32 ok calls")
        }),
         Spec::new("const a = context.budget.remainingToolCalls; const t = tools.spawn.exec('echo', {}); const b = context.budget.remainingToolCalls; await t.done; return a - b", |o| expect_value(o, json!(1))).spawn()]),
    case!("tools::panicking_tool", "a tool that panics (on its first poll or later) ends its call, or its detached task, as a catchable ToolExecutionError; the host stays healthy", Tools, Nothing,
        [Spec::new("const out = []; for (const when of ['now', 'later']) { try { await tools.fail({panic: when}) } catch (e) { out.push(e.name) } } return [out, (await tools.echo({n: 1})).n]", |o| {
            expect_value(o, json!([["ToolExecutionError", "ToolExecutionError"], 1]))?;
            ensure(o, o.report.tool_calls.iter().filter(|c| c.status == CallStatus::Error).count() == 2, "two failed calls recorded")
        }),
         Spec::new("const t = tools.spawn.exec('fail', {panic: 'later'}); try { await t.done } catch (e) { return e.name }", |o| expect_value(o, json!("ToolExecutionError"))).spawn()]),
    case!("tools::concurrency_peak", "10 parallel calls run at most 4 at a time; the rest queue", Tools, Nothing,
        [Spec::new("return (await Promise.all(Array.from({length: 10}, () => tools.count({})))).length", |o| {
            expect_value(o, json!(10))?;
            let peak = Counters::get(&o.counters.peak);
            ensure(o, peak == 4, &format!("peak concurrency was {peak}"))
        })]),
    case!("tools::approval_granted", "an approved call runs, and the approval is recorded", Tools, Nothing,
        [Spec::new("return (await tools.guarded({dangerous: true})).done", |o| {
            expect_value(o, json!({"dangerous": true}))?;
            ensure(o, o.report.approvals.len() == 1 && o.report.approvals[0].outcome == ApprovalOutcome::Approved, "one approved approval")
        }).approvals(Approvals::Approve)]),
    case!("tools::approval_denied", "a denied call rejects with a catchable ApprovalDeniedError", Tools, Nothing,
        [Spec::new("const free = await tools.guarded({dangerous: false}); try { await tools.guarded({dangerous: true}) } catch (e) { return [free.done.dangerous, e.name] }", |o| {
            expect_value(o, json!([false, "ApprovalDeniedError"]))?;
            ensure(o, o.report.approvals.len() == 1 && o.report.approvals[0].outcome == ApprovalOutcome::Denied, "only the dangerous call asked, and was denied")
        })]),
    case!("tools::approval_timeout", "an unanswered approval ends with ApprovalTimeoutError", Tools, Nothing,
        [Spec::new("try { await tools.guarded({dangerous: true}) } catch (e) { return e.name }", |o| {
            expect_value(o, json!("ApprovalTimeoutError"))?;
            ensure(o, o.report.approvals.first().is_some_and(|a| a.outcome == ApprovalOutcome::TimedOut), "recorded as timed out")
        }).approvals(Approvals::Never).limits(|l| l.approval_timeout_ms = 100)]),
    case!("tools::dry_run", "in dry-run mode calls are checked but nothing runs", Tools, Nothing,
        [Spec::new("const r = await tools.echo({x: 1}); try { await tools.strict({}) } catch (e) { return [r, e.name] }", |o| {
            expect_value(o, json!([{"__dryRun": true, "tool": "echo", "args": {"x": 1}}, "ToolValidationError"]))?;
            ensure(o, Counters::get(&o.counters.executed) == 0, "no tool executed")
        }).mode(Mode::DryRun)]),
    case!("tools::disabled", "in disabled mode there are no tools", Tools, Nothing,
        [Spec::new("try { await tools.echo({}) } catch (e) { return [e.name, context.tools.length] }", |o| expect_value(o, json!(["ToolNotFoundError", 0]))).mode(Mode::Disabled)]),
    case!("tools::race_loser_cancelled", "Promise.race cancels the losing call, and that is not an error", Tools, Nothing,
        [Spec::new("return await Promise.race([tools.sleep({ms: 5000}), tools.sleep({ms: 10})])", |o| {
            expect_value(o, json!({"slept": 10}))?;
            ensure(o, o.report.tool_calls[0].status == CallStatus::Cancelled && Counters::get(&o.counters.cancelled) == 1, "loser cancelled")
        })]),
    case!("tools::race_over_a_set_keeps_its_calls", "Promise.race over an iterable that is no array (the Set of a concurrency pool) cancels nothing: the calls go on, and the script may await them", Tools, Nothing,
        [Spec::new("const pool = new Set([tools.sleep({ms: 300}), tools.sleep({ms: 10})]); const first = await Promise.race(pool); const all = await Promise.all(pool); return [first, all]", |o| {
            expect_value(o, json!([{"slept": 10}, [{"slept": 300}, {"slept": 10}]]))?;
            ensure(o, o.report.tool_calls.iter().all(|c| c.status == CallStatus::Ok) && Counters::get(&o.counters.cancelled) == 0, "no call cancelled")
        })]),
    case!("tools::orphan_cancelled", "a call not awaited is cancelled when the script ends: DetachedPromiseError, value kept", Tools, Nothing,
        [Spec::new("tools.sleep({ms: 5000}); return 'done'", |o| {
            expect_code(o, ErrorCode::DetachedPromiseError)?;
            ensure(o, o.report.value == Some(json!("done")) && Counters::get(&o.counters.cancelled) == 1 && o.report.metrics.duration_ms < 2000.0, "value kept, call cancelled promptly")
        }),
         Spec::new("tools.stubborn_sleep({ms: 3000}); return 1", |o| {
            expect_code(o, ErrorCode::DetachedPromiseError)?;
            ensure(o, o.report.tool_calls[0].status == CallStatus::Detached && o.report.metrics.duration_ms < 2000.0, "a tool ignoring cancellation is abandoned after the grace")
        })]),
    case!("tools::partial_results_on_timeout", "on timeout, completed calls are kept and pending ones cancelled", Tools, Stop,
        [Spec::new("await tools.echo({step: 1}); await tools.sleep({ms: 10000}); return 'never'", |o| {
            expect_code(o, ErrorCode::ScriptTimeoutError)?;
            let s: Vec<_> = o.report.tool_calls.iter().map(|c| c.status).collect();
            ensure(o, s == [CallStatus::Ok, CallStatus::Cancelled], "ok then cancelled")
        }).limits(|l| l.timeout_ms = 300)]),
    case!("tools::output_truncation", "strings over 256 KiB in tool output are cut with a marker", Tools, Nothing,
        [Spec::new("const r = await tools.big({n: 300000}); return [r.text.length < 300000, r.text.endsWith('…[truncated 37856 bytes]')]", |o| expect_value(o, json!([true, true])))]),
    case!("tools::allowlist_and_packs", "only allowlisted tools and packs are visible; others are ToolNotFoundError", Tools, Nothing,
        [Spec::new("try { await tools.count({}) } catch (e) { return [context.tools, e.name] }", |o| expect_value(o, json!([["echo", "fail", "sleep"], "ToolNotFoundError"]))).allow(&["basic", "sleep", "nope"])]),
    case!("tools::failure_uncaught", "an uncaught tool failure fails the run with the tool and call id", Tools, Nothing,
        [Spec::new("await tools.echo({}); await tools.fail({})", |o| {
            expect_code(o, ErrorCode::ToolExecutionError)?;
            let e = o.report.error.as_ref().expect("error");
            ensure(o, e.tool.as_deref() == Some("fail") && e.call_id == Some(2), "tool fail, call 2")
        })]),
];

/// An uncaught TypeError whose report message carries the frozen-object
/// hint.
fn frozen_hint(o: &crate::Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptRuntimeError)?;
    let e = o.report.error.as_ref().expect("error");
    ensure(
        o,
        e.name == "TypeError"
            && e.message.contains("a frozen object")
            && e.message.contains("change a copy"),
        "expected a TypeError whose message says the object is frozen and to change a copy",
    )
}
