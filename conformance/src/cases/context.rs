//! The `context` object and `console`.

use super::case;
use crate::{ensure, expect_code, expect_value, Case, Spec};
use harness_core::{ConsoleLevel, ErrorCode};
use serde_json::json;

pub const CASES: &[Case] = &[
    case!("context::fields", "context exposes limits, tool names, mode and live budget", Context, Nothing,
        [Spec::new("await tools.echo({}); return [context.limits.timeoutMs, context.limits.maxToolCalls, context.tools.includes('echo'), context.mode, context.budget.remainingToolCalls, context.budget.remainingMs > 0]",
            |o| expect_value(o, json!([30000, 32, true, "enabled", 31, true])))]),
    case!("context::frozen", "context is deep-frozen: writes throw", Context, Nothing,
        [Spec::new("return [Object.isFrozen(context), Object.isFrozen(context.limits), Object.isFrozen(context.tools)]", |o| expect_value(o, json!([true, true, true]))),
         Spec::new("context.limits.timeoutMs = 1", |o| expect_code(o, ErrorCode::ScriptRuntimeError))]),
    case!("context::progress_rate_limit", "emitProgress keeps one event per 500 ms and reports what it dropped", Context, Nothing,
        [Spec::new("const kept = []; for (let i = 0; i < 5; i++) kept.push(context.telemetry.emitProgress('step ' + i, {i})); await tools.sleep({ms: 550}); kept.push(context.telemetry.emitProgress('later')); return kept", |o| {
            expect_value(o, json!([true, false, false, false, false, true]))?;
            ensure(o, o.report.progress.len() == 2 && o.report.progress_dropped == 4 && o.report.progress[0].data == Some(json!({"i": 0})), "2 kept, 4 dropped")
        })]),
    case!("context::progress_cap", "at most 50 progress events per run", Context, Nothing,
        [Spec::new("for (let i = 0; i < 60; i++) context.telemetry.emitProgress('x'); return 1", |o| {
            ensure(o, o.report.progress.len() == 50 && o.report.progress_dropped == 10, "50 kept")
        }).limits(|l| l.progress_interval_ms = 0)]),
    case!("context::console_levels", "console log/info/warn/error/debug are kept with their level", Context, Nothing,
        [Spec::new("console.log('a', 1, {b: 2}); console.info('i'); console.warn('w'); console.error(new TypeError('e')); console.debug(1n); return 1", |o| {
            let got: Vec<_> = o.report.console.iter().map(|c| (c.level, c.text.as_str())).collect();
            ensure(o, got == [(ConsoleLevel::Log, "a 1 {\"b\":2}"), (ConsoleLevel::Info, "i"), (ConsoleLevel::Warn, "w"), (ConsoleLevel::Error, "TypeError: e"), (ConsoleLevel::Debug, "1n")], "levels and texts")
        })]),
    case!("context::console_limits", "console keeps 20 lines per second, 200 per run, and cuts long lines", Context, Nothing,
        [Spec::new("for (let i = 0; i < 1000; i++) console.log(i); return 1", |o| ensure(o, o.report.console.len() == 20 && o.report.console_dropped == 980, "20 kept")),
         Spec::new("for (let i = 0; i < 1000; i++) console.log(i); return 1", |o| ensure(o, o.report.console.len() == 200, "200 kept")).limits(|l| l.console_lines_per_second = 10_000),
         Spec::new("console.log('x'.repeat(100000)); return 1", |o| ensure(o, o.report.console[0].text.len() < 9000 && o.report.console[0].text.contains("[truncated"), "cut with a marker"))]),
];
