//! Sessions: every step of a case runs in one fresh session (a realm
//! that outlives its runs, `EngineThread::begin_session`), in order.
//! What a session keeps, the REPL rules of its declarations, and the
//! faults that end it. What a session must never reach (another session,
//! an unscoped run) is the cross-run cases' replay
//! (`run_case_in_sessions`).

use super::case;
use crate::{ensure, expect_code, expect_value, Case, Spec};
use harness_core::ErrorCode;
use serde_json::json;

/// The run after a fault: the session is over, and says so.
fn session_ended(o: &crate::Observed) -> Result<Option<String>, String> {
    ensure(o, !o.report.ok, "a run after the fault ran")?;
    let e = o
        .report
        .error
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or("");
    ensure(
        o,
        e.contains("session ended"),
        &format!("the next run should say the session ended, not {e:?}"),
    )
}

pub const CASES: &[Case] = &[
    case!("session::persistence", "top-level const, let, function and their live values stay for the session's next runs", Semantics, Nothing,
        [Spec::new("const data = [1, 2, 3]; return data.length", |o| expect_value(o, json!(3))),
         Spec::new("return data.map(x => x * 2)", |o| expect_value(o, json!([2, 4, 6]))),
         Spec::new("let n = 0; const seen = new Map(); function inc(k) { seen.set(k, (seen.get(k) ?? 0) + 1); return ++n } inc('a'); return inc('a')", |o| expect_value(o, json!(2))),
         Spec::new("inc('b'); return [n, seen.get('a'), seen.get('b')]", |o| expect_value(o, json!([3, 2, 1])))]),
    case!("session::class_var_destructuring", "class, var and destructuring declarations stay too; a function is hoisted within its run", Semantics, Nothing,
        [Spec::new("class Box { constructor(v) { this.v = v } } var total = 10; const {a, b: [c]} = {a: 1, b: [2]}; return later(); function later() { return 'hoisted' }", |o| expect_value(o, json!("hoisted"))),
         Spec::new("return [new Box(a + c).v, total, later()]", |o| expect_value(o, json!([3, 10, "hoisted"])))]),
    case!("session::redeclare", "a later run may declare a name again: the new binding replaces the old", Semantics, Nothing,
        [Spec::new("const k = 1; return k", |o| expect_value(o, json!(1))),
         Spec::new("const k = 2; return k", |o| expect_value(o, json!(2))),
         Spec::new("let k = 3; k++; return k", |o| expect_value(o, json!(4)))]),
    case!("session::const_is_constant", "assigning a const throws, in its run and later, until it is declared again", Semantics, Nothing,
        [Spec::new("const c = 1; c = 2", |o| expect_code(o, ErrorCode::ScriptRuntimeError)),
         Spec::new("c = 3", |o| expect_code(o, ErrorCode::ScriptRuntimeError)),
         Spec::new("return c", |o| expect_value(o, json!(1)))]),
    case!("session::initialiser_threw", "a binding whose initialiser threw is absent afterwards, never stuck in its dead zone; one assigned before the throw is kept", Semantics, Nothing,
        [Spec::new("let kept = 'yes'; let broken = (() => { throw new Error('no') })()", |o| expect_code(o, ErrorCode::ScriptRuntimeError)),
         Spec::new("return [typeof broken, kept]", |o| expect_value(o, json!(["undefined", "yes"]))),
         Spec::new("let broken = 5; return broken", |o| expect_value(o, json!(5)))]),
    case!("session::dead_zone", "a name read before its declaration runs is a ReferenceError", Semantics, Nothing,
        [Spec::new("const early = late; let late = 1", |o| expect_code(o, ErrorCode::ScriptRuntimeError)),
         Spec::new("return [typeof early, typeof late]", |o| expect_value(o, json!(["undefined", "undefined"])))]),
    case!("session::blocks_stay_local", "declarations inside a block or a loop head stay the run's own", Semantics, Nothing,
        [Spec::new("{ let inner = 1 } for (let i = 0; i < 2; i++) {} if (true) { const deep = 1 } return 1", |o| expect_value(o, json!(1))),
         Spec::new("return [typeof inner, typeof i, typeof deep]", |o| expect_value(o, json!(["undefined", "undefined", "undefined"])))]),
    case!("session::own_built_ins", "a session's built-ins and global object are its own: a polyfill and a global stay for its runs", Semantics, Nothing,
        [Spec::new("Array.prototype.total = function () { return this.reduce((a, b) => a + b, 0) }; globalThis.flag = 'set'; return [1, 2].total()", |o| expect_value(o, json!(3))),
         Spec::new("return [[1, 2, 3].total(), flag]", |o| expect_value(o, json!([6, "set"])))]),
    case!("session::scope_name_refused", "a script that names the session's scope is a ScriptSyntaxError", Semantics, Nothing,
        [Spec::new("return typeof __harness_session", |o| expect_code(o, ErrorCode::ScriptSyntaxError)),
         Spec::new("return 1", |o| expect_value(o, json!(1)))]),
    case!("session::timeout_ends_it", "a run that times out ends its session: the next run is refused and says so", Limits, Stop,
        [Spec::new("const x = 1; return x", |o| expect_value(o, json!(1))),
         Spec::new("while (true) {}", |o| expect_code(o, ErrorCode::ScriptTimeoutError)).limits(|l| l.timeout_ms = 200),
         Spec::new("return x", session_ended)]),
    case!("session::memory_ends_it", "a run past its memory limit ends its session", Limits, MemoryLimit,
        [Spec::new("const small = 'x'.repeat(1000); return small.length", |o| expect_value(o, json!(1000))),
         Spec::new("const a = []; while (true) a.push('x'.repeat(1000) + a.length)", |o| expect_code(o, ErrorCode::ScriptMemoryError)).limits(|l| l.memory_bytes = 32 << 20),
         Spec::new("return small.length", session_ended)]),
];
