//! Script semantics: values, language features, strict mode.

use super::case;
use crate::{ensure, expect_code, expect_undefined, expect_value, Case, Spec};
use harness_core::ErrorCode;
use serde_json::json;

pub const CASES: &[Case] = &[
    case!("semantics::return_number", "`return 1.5` gives 1.5", Semantics, Nothing,
        [Spec::new("return 1.5", |o| expect_value(o, json!(1.5)))]),
    case!("semantics::return_string", "strings come back as strings", Semantics, Nothing,
        [Spec::new("return 'text ✓'", |o| expect_value(o, json!("text ✓")))]),
    case!("semantics::return_boolean", "booleans come back as booleans", Semantics, Nothing,
        [Spec::new("return false", |o| expect_value(o, json!(false)))]),
    case!("semantics::return_null", "null is a value, not absence", Semantics, Nothing,
        [Spec::new("return null", |o| expect_value(o, json!(null)))]),
    case!("semantics::return_array", "nested arrays keep their shape", Semantics, Nothing,
        [Spec::new("return [1, [2, [3]], 'x']", |o| expect_value(o, json!([1, [2, [3]], "x"])))]),
    case!("semantics::return_object", "objects keep keys and nesting", Semantics, Nothing,
        [Spec::new("return {a: {b: 'c'}, d: [true]}", |o| expect_value(o, json!({"a": {"b": "c"}, "d": [true]})))]),
    case!("semantics::return_undefined", "`undefined` (or no return) leaves the value absent", Semantics, Nothing,
        [Spec::new("return undefined", expect_undefined), Spec::new("const x = 1", expect_undefined)]),
    case!("semantics::return_json_conversions", "values cross as JSON: NaN is null, functions dropped, Dates are ISO strings", Semantics, Nothing,
        [Spec::new("return {n: NaN, f() {}, u: undefined, d: new Date(0)}", |o| expect_value(o, json!({"n": null, "d": "1970-01-01T00:00:00.000Z"})))]),
    case!("semantics::top_level_await", "top-level await works", Semantics, Nothing,
        [Spec::new("const v = await Promise.resolve(41); return v + 1", |o| expect_value(o, json!(42)))]),
    case!("semantics::helper_functions", "helpers defined in the script can be called, also recursively", Semantics, Nothing,
        [Spec::new("function fact(n) { return n <= 1 ? 1 : n * fact(n - 1) } const sq = x => x * x; return [fact(5), sq(4)]", |o| expect_value(o, json!([120, 16])))]),
    case!("semantics::classes", "classes with private fields, getters, statics and inheritance", Semantics, Nothing,
        [Spec::new("class A { #x; constructor(x) { this.#x = x } get x() { return this.#x } static of(x) { return new this(x) } }
                    class B extends A { get x() { return super.x * 2 } }
                    return [A.of(3).x, B.of(3).x, B.of(1) instanceof A]", |o| expect_value(o, json!([3, 6, true])))]),
    case!("semantics::destructuring", "object and array destructuring with defaults and rest", Semantics, Nothing,
        [Spec::new("const {a, ...rest} = {a: 1, b: 2}; const [x, , z = 9] = [1, 2]; return [a, rest, x, z]", |o| expect_value(o, json!([1, {"b": 2}, 1, 9])))]),
    case!("semantics::spread", "spread in arrays, objects and calls", Semantics, Nothing,
        [Spec::new("const a = [1, 2]; return [[...a, 3], {...{k: 1}, j: 2}, Math.max(...a)]", |o| expect_value(o, json!([[1, 2, 3], {"k": 1, "j": 2}, 2])))]),
    case!("semantics::template_literals", "template literals interpolate and tag", Semantics, Nothing,
        [Spec::new("const t = (s, ...v) => s.raw.join('|') + v.join(','); const n = 2; return [`${n} + ${n} = ${n + n}`, t`a${1}b${2}`]", |o| expect_value(o, json!(["2 + 2 = 4", "a|b|1,2"])))]),
    case!("semantics::map_and_set", "Map and Set keep insertion order and dedupe", Semantics, Nothing,
        [Spec::new("const m = new Map([['b', 1], ['a', 2]]); const s = new Set([3, 1, 3]); return [[...m.keys()], [...s], m.get('a')]", |o| expect_value(o, json!([["b", "a"], [3, 1], 2])))]),
    case!("semantics::json", "JSON.parse and JSON.stringify round-trip", Semantics, Nothing,
        [Spec::new("return JSON.parse(JSON.stringify({a: [1, {b: null}]}, null, 2))", |o| expect_value(o, json!({"a": [1, {"b": null}]})))]),
    case!("semantics::regexp", "regular expressions with groups, flags and replace", Semantics, Nothing,
        [Spec::new("const m = /(?<y>\\d{4})-(?<m>\\d{2})/u.exec('on 2024-05'); return [m.groups.y, 'a1b22'.replace(/\\d+/g, '#'), /x/i.test('X')]", |o| expect_value(o, json!(["2024", "a#b#", true])))]),
    case!("semantics::date", "Date arithmetic in UTC", Semantics, Nothing,
        [Spec::new("const d = new Date(Date.UTC(2020, 0, 31)); d.setUTCDate(d.getUTCDate() + 1); return d.toISOString()", |o| expect_value(o, json!("2020-02-01T00:00:00.000Z")))]),
    case!("semantics::promise_all", "Promise.all resolves in order", Semantics, Nothing,
        [Spec::new("return await Promise.all([Promise.resolve(1), 2, tools.echo({v: 3}).then(r => r.v)])", |o| expect_value(o, json!([1, 2, 3])))]),
    case!("semantics::promise_race", "Promise.race settles with the first", Semantics, Nothing,
        [Spec::new("return await Promise.race([new Promise(() => {}), Promise.resolve('first')])", |o| expect_value(o, json!("first")))]),
    case!("semantics::promise_all_settled", "Promise.allSettled reports each outcome", Semantics, Nothing,
        [Spec::new("const r = await Promise.allSettled([tools.echo({}), tools.fail({})]); return r.map(x => x.status + ':' + (x.reason ? x.reason.name : 'ok'))", |o| expect_value(o, json!(["fulfilled:ok", "rejected:ToolExecutionError"])))]),
    case!("semantics::promise_any", "Promise.any takes the first fulfilment; all rejected gives AggregateError", Semantics, Nothing,
        [Spec::new("const a = await Promise.any([tools.fail({}), tools.echo({v: 1})]); try { await Promise.any([tools.fail({})]) } catch (e) { return [a.v, e.constructor.name, e.errors[0].name] }", |o| expect_value(o, json!([1, "AggregateError", "ToolExecutionError"])))]),
    case!("semantics::catch_tool_errors", "tool errors are Errors named by code, catchable", Semantics, Nothing,
        [Spec::new("try { await tools.fail({}) } catch (e) { return [e instanceof Error, e.name, e.code, e.tool, e.message] }", |o| expect_value(o, json!([true, "ToolExecutionError", "ToolExecutionError", "fail", "fail failed: it broke"])))]),
    case!("semantics::strict_mode", "the script is strict: undeclared assignment throws, `this` is undefined", Semantics, Nothing,
        [Spec::new("return (function () { return this === undefined })()", |o| expect_value(o, json!(true))),
         Spec::new("undeclared = 1", |o| { expect_code(o, ErrorCode::ScriptRuntimeError)?; ensure(o, o.report.error.as_ref().is_some_and(|e| e.name == "ReferenceError"), "expected a ReferenceError") })]),
    case!("semantics::unsettleable_promise", "awaiting a promise nothing can settle fails at once with ScriptRuntimeError, not at the deadline", Semantics, Nothing,
        [Spec::new("await new Promise(() => {})", |o| {
            expect_code(o, ErrorCode::ScriptRuntimeError)?;
            ensure(o, o.report.metrics.duration_ms < 10_000.0, "failed long before the 30 s deadline")
        })]),
    case!("semantics::assign_inherited_names", "own objects may still set name, message, toString, constructor despite frozen prototypes", Semantics, Nothing,
        [Spec::new("class MyError extends Error { constructor(m) { super(m); this.name = 'MyError' } }
                    const o = {}; o.toString = () => 'custom'; function P() {} P.prototype.constructor = P;
                    const e = new MyError('x'); return [e.name, String(o), e instanceof Error, P.prototype.constructor === P]",
            |o| expect_value(o, json!(["MyError", "custom", true, true])))]),
    case!("semantics::uncaught_error", "an uncaught throw is ScriptRuntimeError with the JS name and a script.js stack", Semantics, Nothing,
        [Spec::new("function f() { throw new RangeError('bad') }\nf()", |o| {
            expect_code(o, ErrorCode::ScriptRuntimeError)?;
            let e = o.report.error.as_ref().expect("error");
            ensure(o, e.name == "RangeError" && e.message == "Uncaught RangeError: bad" && e.stack.as_deref().is_some_and(|s| s.contains("at f (script.js:1:")), "wrong name, message or stack")
        })]),
    case!("semantics::syntax_error_location", "syntax errors carry line and column, phase parsing", Semantics, Nothing,
        [Spec::new("let a = 1;\nlet b = ;", |o| {
            expect_code(o, ErrorCode::ScriptSyntaxError)?;
            let e = o.report.error.as_ref().expect("error");
            ensure(o, e.location.map(|l| (l.line, l.column)) == Some((2, 9)) && e.phase == harness_core::Phase::Parsing, "expected 2:9 in phase parsing")
        })]),
];
