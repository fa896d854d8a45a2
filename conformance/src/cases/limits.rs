//! Limits: time, memory, stack, return size, source size.

use super::case;
use crate::{ensure, expect_code, expect_value, Case, Counters, Spec};
use harness_core::{ErrorCode, Phase, Realm};
use serde_json::json;

fn oversized() -> String {
    format!(
        "await tools.echo({{}});\n{}",
        "// padding past the 20 KiB source limit\n".repeat(600)
    )
}

pub const CASES: &[Case] = &[
    case!("limits::timeout_accuracy", "a 200 ms limit ends a busy loop within 200-400 ms (figure reported)", Limits, Stop,
        [Spec::new("while (true) {}", |o| {
            expect_code(o, ErrorCode::ScriptTimeoutError)?;
            let ms = o.report.metrics.duration_ms;
            ensure(o, (200.0..400.0).contains(&ms), &format!("ended after {ms} ms"))?;
            Ok(Some(format!("200 ms limit ended after {ms:.1} ms (wall {:.1} ms)", o.wall.as_secs_f64() * 1e3)))
        }).limits(|l| l.timeout_ms = 200)]),
    case!("limits::timeout_calls_at_once", "a loop of tool calls that each finish at once ends at the deadline, also on an engine that cannot be interrupted (past the deadline a call is answered by the loop, which ends the run)", Limits, Nothing,
        [Spec::new("for (;;) { try { await tools.echo({}) } catch (_) {} }", |o| expect_code(o, ErrorCode::ScriptTimeoutError))
            .limits(|l| { l.timeout_ms = 200; l.max_tool_calls = 1_000_000 })]),
    case!("limits::timeout_includes_tools", "waiting on a tool counts against the timeout", Limits, Nothing,
        [Spec::new("await tools.sleep({ms: 10000})", |o| expect_code(o, ErrorCode::ScriptTimeoutError)).limits(|l| l.timeout_ms = 200)]),
 case!("limits::cancellation", "cancelling a run stops a busy loop, a tool wait, and a loop of heavy native calls promptly", Limits, Stop,
        [Spec::new("while (true) {}", |o| { expect_code(o, ErrorCode::ScriptCancelledError)?; ensure(o, o.wall.as_millis() < 2000, "stopped promptly") }).cancel_after(100),
         Spec::new("await tools.sleep({ms: 60000})", |o| { expect_code(o, ErrorCode::ScriptCancelledError)?; ensure(o, o.wall.as_millis() < 2000 && Counters::get(&o.counters.cancelled) == 1, "tool cancelled promptly") }).cancel_in_sleep(100),
         Spec::new("const a = Array.from({length: 2e5}, (_, i) => -i); while (true) a.slice().sort()", |o| { expect_code(o, ErrorCode::ScriptCancelledError)?; ensure(o, o.wall.as_millis() < 2000, "stopped promptly") }).cancel_after(100)]),
    case!("limits::memory", "allocating past the memory limit is ScriptMemoryError, even if caught", Limits, MemoryLimit,
        [Spec::new("const a = []; while (true) a.push('x'.repeat(1000) + a.length)", |o| expect_code(o, ErrorCode::ScriptMemoryError)).limits(|l| l.memory_bytes = 32 << 20),
         Spec::new("const a = []; try { while (true) a.push('y'.repeat(1e4) + a.length) } catch (e) { return 'caught' }", |o| expect_code(o, ErrorCode::ScriptMemoryError)).limits(|l| l.memory_bytes = 32 << 20)]),
    case!("limits::memory_small", "a 2 MiB limit leaves a trivial script room, shared realm and private: the engine's own context is not the script's heap (Boa behind the boundary once charged it on a fresh worker)", Limits, Nothing,
        [Spec::new("return 1 + 1", |o| expect_value(o, json!(2))).limits(|l| l.memory_bytes = 2 << 20),
         Spec::new("return 1 + 1", |o| expect_value(o, json!(2))).limits(|l| { l.memory_bytes = 2 << 20; l.realm = Some(Realm::Private) })]),
    case!("limits::memory_large", "a run allowed a larger heap than the default can use it (300 MiB of buffers under a 512 MiB limit)", Limits, Nothing,
        [Spec::new("const b = []; for (let i = 0; i < 6; i++) b.push(new Uint8Array(50 << 20)); return b.reduce((n, x) => n + x.length, 0)", |o| expect_value(o, json!(300 << 20))).limits(|l| l.memory_bytes = 512 << 20)]),
    case!("limits::stack", "deep recursion is StackOverflowError", Limits, Nothing,
        [Spec::new("function f(n) { return f(n + 1) + 1 } return f(0)", |o| expect_code(o, ErrorCode::StackOverflowError))]),
    case!("limits::return_size", "a return value over 128 KiB of JSON is ReturnValueTooLargeError", Limits, Nothing,
        [Spec::new("return 'x'.repeat(128 * 1024)", |o| {
            expect_code(o, ErrorCode::ReturnValueTooLargeError)?;
            ensure(o, o.report.error.as_ref().is_some_and(|e| e.phase == Phase::Finalizing), "phase finalizing")
        }),
         Spec::new("return 'x'.repeat(128 * 1024 - 2).length", |o| expect_value(o, json!(128 * 1024 - 2)))]),
    case!("limits::source_size", "a source over 20 KiB is ScriptTooLargeError before anything runs", Limits, Nothing,
        [Spec::generated(oversized, |o| {
            expect_code(o, ErrorCode::ScriptTooLargeError)?;
            ensure(o, o.report.error.as_ref().is_some_and(|e| e.phase == Phase::Parsing) && o.report.tool_calls.is_empty(), "phase parsing, nothing ran")
        })]),
    case!("limits::memory_used_reported", "the report carries the run's peak heap", Limits, MemoryLimit,
        [Spec::new("const a = Array.from({length: 100000}, (_, i) => ({i})); return a.length", |o| {
            expect_value(o, json!(100000))?;
            ensure(o, o.report.metrics.memory_used_bytes.is_some_and(|m| m > 800_000), "peak heap above 100,000 objects' size")
        })]),
];
