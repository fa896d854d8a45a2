//! Cross-run isolation: each case is a pair of runs on the same engine
//! instance. The first plants state or a callback through one channel
//! (a global, an intrinsic, a pending job, a captured per-run object, the
//! heap, a counter...); the second looks for it or waits for it and must
//! see exactly what a fresh engine shows. Whatever makes runs cheaper
//! (reusing a hardened context, a realm, frozen intrinsics) must keep
//! every case here passing. The channels are listed in docs/security.md.

use super::case;
use crate::{ensure, expect_code, expect_value, Case, Observed, Spec};
use harness_core::ErrorCode;
use serde_json::{json, Value};

/// Run twice: each run finds what its evaluation made untouched, then
/// changes all of it.
const SAME_SCRIPT: &str = "const f = function () {}; const g = () => 1; const re = /a/g; const o = { n: 0 }; \
    const fresh = [f.prototype.planted === undefined, f.planted === undefined, g.planted === undefined, re.lastIndex === 0, o.n === 0, Object.isExtensible(f)]; \
    f.prototype.planted = 1; f.planted = 1; g.planted = 1; re.test('aaa'); o.n = 1; Object.preventExtensions(f); \
    return fresh";

/// A planting run: whatever it did is fine as long as it ended (most
/// plants are refused by hardening and catch the refusal).
fn planted(_: &Observed) -> Result<Option<String>, String> {
    Ok(None)
}

fn all_true(o: &Observed) -> Result<Option<String>, String> {
    match &o.report.value {
        Some(Value::Array(items))
            if !items.is_empty() && items.iter().all(|v| v == &json!(true)) =>
        {
            Ok(None)
        }
        _ => Err(format!(
            "expected every probe to be true, got {}",
            serde_json::to_string(&o.report.value).unwrap_or_default()
        )),
    }
}

/// The probe's console holds only its own lines.
fn quiet_console(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the probe failed")?;
    let foreign: Vec<&str> = o
        .report
        .console
        .iter()
        .map(|c| c.text.as_str())
        .filter(|t| *t != "probe")
        .collect();
    ensure(
        o,
        foreign.is_empty(),
        &format!("the probe's console holds another run's lines: {foreign:?}"),
    )
}

/// The probe made exactly one tool call (its own sleep) and its tools saw
/// no other.
fn own_calls_only(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the probe failed")?;
    ensure(
        o,
        o.report.tool_calls.len() == 1 && o.report.tool_calls[0].tool == "sleep",
        "the probe's report holds another run's tool calls",
    )?;
    let echoes = crate::Counters::get(&o.counters.executed);
    ensure(
        o,
        echoes == 0,
        &format!("{echoes} echo calls reached this run's tools; the probe made none"),
    )
}

fn two(o: &Observed) -> Result<Option<String>, String> {
    expect_value(o, json!(2))
}

fn timeout(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptTimeoutError)
}

fn short(l: &mut harness_core::Limits) {
    l.timeout_ms = 300;
}

fn small_heap(l: &mut harness_core::Limits) {
    l.memory_bytes = 32 << 20;
}

fn few_lines(l: &mut harness_core::Limits) {
    l.max_console_lines = 10;
}

fn few_calls(l: &mut harness_core::Limits) {
    l.max_tool_calls = 3;
}

/// The probe's value differs from the planting run's.
fn differs_from_plant(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the probe failed")?;
    let first = o.earlier.first().and_then(|r| r.value.clone());
    ensure(
        o,
        first.is_some() && first != o.report.value,
        &format!(
            "the second run repeated the first run's value {}",
            serde_json::to_string(&first).unwrap_or_default()
        ),
    )
}

/// None of the probe's eight draws is one of the first run's sixteen (a
/// seed used again, from any offset, would repeat some of them), and no
/// run drew a number twice (a generator reseeded at every draw would).
fn none_drawn_before(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the probe failed")?;
    let first = o.earlier.first().and_then(|r| r.value.clone());
    let drawn = first.as_ref().and_then(Value::as_array);
    let probe = o.report.value.as_ref().and_then(Value::as_array);
    let (Some(drawn), Some(probe)) = (drawn, probe) else {
        return Err("expected arrays of draws".to_owned());
    };
    ensure(
        o,
        drawn.len() == 16 && probe.len() == 8,
        "expected 16 draws, then 8",
    )?;
    let distinct = |xs: &[Value]| xs.iter().enumerate().all(|(i, x)| !xs[..i].contains(x));
    ensure(
        o,
        distinct(drawn) && distinct(probe),
        "a run drew the same number twice",
    )?;
    ensure(
        o,
        probe.iter().all(|x| !drawn.contains(x)),
        "the probe drew a number the first run drew",
    )
}

fn fresh_script_id(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the probe failed")?;
    let first = o.earlier.first().map(|r| r.script_id.clone());
    ensure(
        o,
        first.as_deref() != Some(o.report.script_id.as_str()),
        "both runs have the same script id",
    )
}

fn counters_reset(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the probe failed")?;
    ensure(
        o,
        o.report.console_dropped == 0 && o.report.progress_dropped == 0,
        "the probe's dropped counters carry the planting run's",
    )?;
    ensure(
        o,
        o.report.console.len() == 1,
        "the probe's console cap was used up by the planting run",
    )
}

/// Plants by assignment through every road a script has, each refusal
/// caught, then returns.
macro_rules! plant {
    ($src:literal) => {
        Spec::new(
            concat!("try { ", $src, " } catch (e) {} return 'planted'"),
            planted,
        )
    };
}

/// A source that would close the function it runs in never runs: it is a
/// ScriptSyntaxError and none of it reaches the engine.
fn refused_breakout(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptSyntaxError)?;
    ensure(
        o,
        o.report.console.is_empty() && o.report.tool_calls.is_empty(),
        "part of a refused script ran",
    )
}

/// What a breakout would have declared at the top level of the context
/// (a `planted` binding, a replaced `JSON`) is not there for the next run,
/// and no callback it queued writes to its console.
const BREAKOUT_PROBE: &str = "console.log('probe'); await tools.sleep({ ms: 60 }); \
    return [typeof planted === 'undefined', JSON.stringify({ a: 1 }) === '{\"a\":1}']";

fn breakout_probe(o: &Observed) -> Result<Option<String>, String> {
    quiet_console(o)?;
    all_true(o)
}

/// `case!` for a breakout through `$how`: the first run is refused, the
/// second sees nothing of it.
macro_rules! breakout {
    ($name:literal, $doc:literal, $src:expr) => {
        case!(
            $name,
            $doc,
            Security,
            Nothing,
            [
                Spec::new($src, refused_breakout),
                Spec::new(BREAKOUT_PROBE, breakout_probe)
            ]
        )
    };
}

pub const CASES: &[Case] = &[
    // ---- the wrapper -------------------------------------------------------
    breakout!("cross_run::breakout_plain", "a script that closes its function (`}); let planted …; (async function () {`) is a ScriptSyntaxError and leaves no global binding",
        "}); let planted = 1; const JSON = { stringify() { return 'LEAK' } }; (async function () { return 1"),
    breakout!("cross_run::breakout_stash", "the stash attack: a breakout that shadows a built-in to record the next run's values is refused",
        "}); const stash = []; const structuredClone = (v) => { stash.push(JSON.stringify(v)); return JSON.parse(JSON.stringify(v)) }; var planted = stash; (async function () {"),
    breakout!("cross_run::breakout_line_comment", "a breakout that ends in a line comment (swallowing the wrapper's close) is refused",
        "}); let planted = 1; (async function () { //"),
    breakout!("cross_run::breakout_block_comment", "a breakout inside and after block comments is refused",
        "/* } */ }); /* ) */ let planted = 1; (async function () { /* { */"),
    breakout!("cross_run::breakout_template", "a breakout after a template literal (`${}` holes included) is refused",
        "const t = `${'}'}`; }); let planted = `x`; (async function () { return t"),
    breakout!("cross_run::breakout_regex", "a breakout after a regex literal that holds braces and parens is refused",
        "const r = /[})]/; }); let planted = r; (async function () { return 1"),
    breakout!("cross_run::breakout_html_open_comment", "`<!--` cannot hide a breakout from either reading of HTML-like comments",
        "let a = 1, b = 2; a <!--b + `\n}); let planted = 1; (async function () {\n`"),
    breakout!("cross_run::breakout_html_close_comment", "`-->` at a line's start cannot hide a breakout from either reading",
        "let x = 1\n--> }); let planted = 1; (async function () {"),
    breakout!("cross_run::breakout_line_separator", "U+2028 ends a line comment: the `})` after it closes nothing",
        "// a\u{2028}}); let planted = 1; (async function () {"),
    breakout!("cross_run::breakout_unicode_escape", "unicode escapes in identifiers cannot spell a breakout",
        "let \\u0070lanted = 1; }); let planted = 1; (async function () {"),
    breakout!("cross_run::breakout_timer_planted", "a breakout that queues a job for the next run is refused",
        "}); Promise.resolve().then(() => console.log('LEAK job')); let planted = 1; (async function () {"),
    case!("cross_run::breakout_typescript", "TypeScript whose types strip to a breakout is refused", Security, Nothing,
        [Spec::new("}); let planted: number = 1; (async function (): Promise<void> {", refused_breakout)
            .language(harness_core::ScriptLanguage::TypeScript),
         Spec::new(BREAKOUT_PROBE, breakout_probe)]),


    // ---- the global object and the script's scope -------------------------
    case!("cross_run::global_assignment", "a global assigned by one run is absent in the next", Security, Nothing,
        [plant!("globalThis.plantedGlobal = 1"),
         Spec::new("return [typeof globalThis.plantedGlobal === 'undefined']", all_true)]),
    case!("cross_run::implicit_global", "an undeclared assignment in one run leaves nothing for the next", Security, Nothing,
        [plant!("(0, function () { plantedImplicit = 1 })()"),
         Spec::new("return [typeof plantedImplicit === 'undefined']", all_true)]),
    case!("cross_run::global_define_property", "a global defined with defineProperty does not survive the run", Security, Nothing,
        [plant!("Object.defineProperty(globalThis, 'plantedDefined', { value: 1 })"),
         Spec::new("return [!('plantedDefined' in globalThis)]", all_true)]),
    case!("cross_run::top_level_declarations", "var, let, const, function and class at the top of a run are local to it", Security, Nothing,
        [Spec::new("var plantedVar = 1; let plantedLet = 2; const plantedConst = 3; function plantedFn() {} class PlantedClass {} return 1", planted),
         Spec::new("return [typeof plantedVar, typeof plantedLet, typeof plantedConst, typeof plantedFn, typeof PlantedClass].map(t => t === 'undefined')", all_true)]),
    case!("cross_run::global_delete", "a built-in deleted by one run is present in the next", Security, Nothing,
        [plant!("delete globalThis.JSON; delete globalThis.Math"),
         Spec::new("return [typeof JSON.stringify === 'function', typeof Math.max === 'function']", all_true)]),
    case!("cross_run::global_replacement", "a built-in replaced by one run is the original in the next", Security, Nothing,
        [plant!("globalThis.Array = function () { return 'pwned' }"),
         Spec::new("return [Array.isArray(new Array(2)), new Array(2).length === 2]", all_true)]),

    // ---- intrinsics --------------------------------------------------------
    case!("cross_run::private_realm", "built-ins a run changed in its private realm (a prototype, a method, Math.random, Object.prototype) are as new in the next run, shared or private", Security, Nothing,
        [Spec::new("Array.prototype.planted = 1; Object.prototype.polluted = 'x'; Math.random = () => 4; JSON.stringify = () => 'LEAK'; Promise.prototype.then = function () { console.log('LEAK'); }; return 1", planted).private_realm(),
         Spec::new("return [typeof [].planted === 'undefined', typeof ({}).polluted === 'undefined', Math.random() !== 4, JSON.stringify(1) === '1', Object.isFrozen(Array.prototype)]", all_true).shared_realm(),
         Spec::new("await Promise.resolve(1); return [typeof [].planted === 'undefined', typeof ({}).polluted === 'undefined', Math.random() !== 4, JSON.stringify(1) === '1', !Object.isFrozen(Array.prototype)]", all_true).private_realm()]),
    case!("cross_run::object_prototype_property", "a property added to Object.prototype does not reach the next run", Security, Nothing,
        [plant!("Object.prototype.plantedProto = 'x'"),
         Spec::new("return [({}).plantedProto === undefined, !('plantedProto' in {})]", all_true)]),
    case!("cross_run::object_prototype_setter", "a setter planted on Object.prototype never fires in the next run", Security, Nothing,
        [plant!("Object.defineProperty(Object.prototype, 'secret', { set(v) { console.log('LEAK ' + v) } })"),
         Spec::new("const o = {}; o.secret = 'probe-secret'; console.log('probe'); return 1", quiet_console)]),
    case!("cross_run::nested_intrinsics", "objects a built-in holds (a method's function object, a getter, Array.prototype[Symbol.unscopables], %ThrowTypeError%, the iterator helper prototype) changed by one run are unchanged in the next", Security, Nothing,
        [Spec::new(concat!(
            "const tte = (function () { 'use strict'; return Object.getOwnPropertyDescriptor(arguments, 'callee').get })();\n",
            "const helper = typeof Iterator === 'function' && typeof Iterator.prototype.map === 'function' ? Object.getPrototypeOf([].values().map(x => x)) : {};\n",
            "for (const o of [Array.prototype.map, Math.max, Array.prototype[Symbol.unscopables], Object.getOwnPropertyDescriptor(RegExp.prototype, 'flags').get, tte, helper]) { try { o.plantedNested = 'x' } catch (e) {} }\n",
            "return 'planted'"), planted),
         Spec::new(concat!(
            "const tte = (function () { 'use strict'; return Object.getOwnPropertyDescriptor(arguments, 'callee').get })();\n",
            "const helper = typeof Iterator === 'function' && typeof Iterator.prototype.map === 'function' ? Object.getPrototypeOf([].values().map(x => x)) : {};\n",
            "return [Array.prototype.map, Math.max, Array.prototype[Symbol.unscopables], Object.getOwnPropertyDescriptor(RegExp.prototype, 'flags').get, tte, helper].map(o => o.plantedNested === undefined)"), all_true)]),
    case!("cross_run::object_prototype_chain", "Object.prototype's prototype stays null", Security, Nothing,
        [plant!("Object.setPrototypeOf(Object.prototype, { plantedChain: 1 })"),
         Spec::new("return [Object.getPrototypeOf(Object.prototype) === null, ({}).plantedChain === undefined]", all_true)]),
    case!("cross_run::array_prototype_method", "Array.prototype.map replaced by one run is the original in the next", Security, Nothing,
        [plant!("Array.prototype.map = function () { return 'pwned' }"),
         Spec::new("return [JSON.stringify([1, 2].map(x => x * 2)) === '[2,4]']", all_true)]),
    case!("cross_run::array_species", "Array[Symbol.species] changed by one run does not change the next run's arrays", Security, Nothing,
        [plant!("Object.defineProperty(Array, Symbol.species, { get() { return function () { return { pwned: true } } } })"),
         Spec::new("return [Array.isArray([1].map(x => x)), [1].filter(Boolean).length === 1]", all_true)]),
    case!("cross_run::function_prototype_call", "Function.prototype.call and apply replaced by one run are the originals in the next", Security, Nothing,
        [plant!("Function.prototype.call = () => 'pwned'; Function.prototype.apply = () => 'pwned'"),
         Spec::new("return [Math.max.call(null, 1, 2) === 2, Math.max.apply(null, [1, 3]) === 3]", all_true)]),
    case!("cross_run::json", "JSON.stringify and JSON.parse replaced by one run are the originals in the next", Security, Nothing,
        [plant!("JSON.stringify = () => '\"pwned\"'; JSON.parse = () => 'pwned'"),
         Spec::new("return [JSON.stringify({ a: 1 }) === '{\"a\":1}', JSON.parse('[1]')[0] === 1]", all_true)]),
    case!("cross_run::promise_then", "Promise.prototype.then replaced by one run is the original in the next", Security, Nothing,
        [plant!("Promise.prototype.then = function () { console.log('LEAK then') }"),
         Spec::new("const v = await Promise.resolve(5); console.log('probe'); return v", |o| {
             quiet_console(o)?;
             expect_value(o, json!(5))
         })]),
    case!("cross_run::promise_statics", "Promise.resolve, all and race replaced by one run are the originals in the next", Security, Nothing,
        [plant!("Promise.resolve = () => 'pwned'; Promise.all = () => 'pwned'; Promise.race = () => 'pwned'"),
         Spec::new("const [a] = await Promise.all([Promise.resolve(1)]); const b = await Promise.race([2]); return [a === 1, b === 2]", all_true)]),
    case!("cross_run::error_prototype", "a property added to or changed on Error.prototype does not reach the next run", Security, Nothing,
        [plant!("Error.prototype.plantedErr = 1; Error.prototype.message = 'planted'; Error.prototype.name = 'Planted'"),
         Spec::new("const e = new Error(); return [e.plantedErr === undefined, e.message === '', e.name === 'Error']", all_true)]),
    case!("cross_run::error_stack_knobs", "Error.prepareStackTrace and stackTraceLimit set by one run do not affect the next", Security, Nothing,
        [plant!("Error.prepareStackTrace = () => 'pwned'; Error.stackTraceLimit = 0"),
         Spec::new("const s = String(new Error('x').stack); return [typeof Error.prepareStackTrace !== 'function', Error.stackTraceLimit !== 0, !s.includes('pwned')]", all_true)]),
    case!("cross_run::error_capture", "an error subclass hook planted by one run does not run in the next", Security, Nothing,
        [plant!("TypeError.prototype.toString = function () { console.log('LEAK toString'); return 'x' }"),
         Spec::new("try { null.x } catch (e) { String(e) } console.log('probe'); return 1", quiet_console)]),
    case!("cross_run::iterator_prototype", "the array iterator's next replaced by one run is the original in the next", Security, Nothing,
        [plant!("Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({ done: true })"),
         Spec::new("return [JSON.stringify([...[1, 2]]) === '[1,2]']", all_true)]),
    case!("cross_run::iterator_helpers", "Iterator.prototype changed by one run is unchanged in the next", Security, Nothing,
        [plant!("Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]())).plantedIter = 1"),
         Spec::new("return [[][Symbol.iterator]().plantedIter === undefined]", all_true)]),
    case!("cross_run::generator_prototype", "the generator prototype changed by one run is unchanged in the next", Security, Nothing,
        [plant!("Object.getPrototypeOf(function* () {}).prototype.plantedGen = 1; Object.getPrototypeOf(function* () {}).prototype.next = () => ({ done: true, value: 'pwned' })"),
         Spec::new("function* g() { yield 1 } const it = g(); return [it.plantedGen === undefined, it.next().value === 1]", all_true)]),
    case!("cross_run::async_function_prototype", "the async function and async generator prototypes changed by one run are unchanged in the next", Security, Nothing,
        [plant!("Object.getPrototypeOf(async function () {}).plantedAsync = 1; Object.getPrototypeOf(async function* () {}).prototype.plantedAg = 1"),
         Spec::new("async function* ag() {} return [(async function () {}).plantedAsync === undefined, ag().plantedAg === undefined]", all_true)]),
    case!("cross_run::typed_array_prototype", "%TypedArray%.prototype changed by one run is unchanged in the next", Security, Nothing,
        [plant!("Object.getPrototypeOf(Int8Array.prototype).plantedTa = 1; Object.getPrototypeOf(Int8Array.prototype).fill = () => 'pwned'"),
         Spec::new("const a = new Uint8Array(2); return [a.plantedTa === undefined, a.fill(7)[1] === 7]", all_true)]),
    case!("cross_run::regexp", "RegExp.prototype.exec replaced by one run is the original in the next", Security, Nothing,
        [plant!("RegExp.prototype.exec = () => null"),
         Spec::new("return [/a/.test('a'), 'abc'.replace(/b/, 'x') === 'axc']", all_true)]),
    case!("cross_run::regexp_legacy_statics", "the last match of one run (RegExp.$1, lastMatch) is not visible in the next", Security, Nothing,
        [Spec::new("/(planted-secret)/.exec('planted-secret'); return 1", planted),
         Spec::new("const seen = [RegExp.$1, RegExp.lastMatch, RegExp.input].map(String); return [!seen.some(s => s.includes('planted-secret'))]", all_true)]),
    case!("cross_run::string_prototype", "String.prototype methods replaced by one run are the originals in the next", Security, Nothing,
        [plant!("String.prototype.trim = () => 'pwned'; String.prototype.plantedStr = 1"),
         Spec::new("return [' a '.trim() === 'a', 'x'.plantedStr === undefined]", all_true)]),
    case!("cross_run::number_and_bigint", "Number and BigInt prototypes changed by one run are unchanged in the next", Security, Nothing,
        [plant!("Number.prototype.toFixed = () => 'pwned'; BigInt.prototype.plantedBig = 1"),
         Spec::new("return [(1.25).toFixed(1) === '1.3' || (1.25).toFixed(1) === '1.2', 1n.plantedBig === undefined]", all_true)]),
    case!("cross_run::collections", "Map, Set, WeakMap prototypes changed by one run are unchanged in the next", Security, Nothing,
        [plant!("Map.prototype.get = () => 'pwned'; Set.prototype.has = () => true; WeakMap.prototype.set = () => 'pwned'"),
         Spec::new("const k = {}; const wm = new WeakMap(); wm.set(k, 1); return [new Map([[1, 2]]).get(1) === 2, !new Set().has(1), wm.get(k) === 1]", all_true)]),
    case!("cross_run::object_statics", "Object.freeze and Object.keys replaced by one run are the originals in the next", Security, Nothing,
        [plant!("Object.freeze = x => x; Object.keys = () => ['pwned']"),
         Spec::new("return [Object.isFrozen(Object.freeze({})), Object.keys({ a: 1 })[0] === 'a']", all_true)]),
    case!("cross_run::reflect", "Reflect replaced or changed by one run is the original in the next", Security, Nothing,
        [plant!("Reflect.ownKeys = () => ['pwned']; Reflect.plantedReflect = 1"),
         Spec::new("return [Reflect.ownKeys({ a: 1 })[0] === 'a', Reflect.plantedReflect === undefined]", all_true)]),
    case!("cross_run::math_random_replaced", "Math.random replaced by one run is the original in the next", Security, Nothing,
        [plant!("Math.random = () => 0.5"),
         Spec::new("const xs = [Math.random(), Math.random(), Math.random()]; return [xs.some(x => x !== 0.5), xs.every(x => x >= 0 && x < 1)]", all_true)]),
    case!("cross_run::math_random_sequence", "each run draws a fresh random sequence (reseeded, not continued or repeated)", Security, Nothing,
        [Spec::new("return Array.from({ length: 8 }, () => Math.random())", planted),
         Spec::new("return Array.from({ length: 8 }, () => Math.random())", differs_from_plant)]),
    case!("cross_run::math_random_after_a_quiet_run", "with a run that draws nothing in between, the next run's draws are fresh: none of them is one of the first run's", Security, Nothing,
        [Spec::new("return Array.from({ length: 16 }, () => Math.random())", planted),
         Spec::new("return 1", planted),
         Spec::new("return Array.from({ length: 8 }, () => Math.random())", none_drawn_before)]),
    case!("cross_run::date_now", "Date.now replaced by one run is the original in the next", Security, Nothing,
        [plant!("Date.now = () => 0; Date.prototype.getTime = () => 0"),
         Spec::new("return [Date.now() > 1e12, new Date().getTime() > 1e12]", all_true)]),
    case!("cross_run::symbol_registry", "Symbol.for keys registered by one run carry nothing to the next", Security, Nothing,
        [plant!("const s = Symbol.for('harness.planted'); Symbol.prototype.plantedSym = 1; Object.defineProperty(Symbol, 'planted', { value: s })"),
         Spec::new("const s = Symbol.for('harness.planted'); return [Symbol.keyFor(s) === 'harness.planted', s.plantedSym === undefined, Symbol.planted === undefined]", all_true)]),

    // ---- per-run objects ---------------------------------------------------
    case!("cross_run::tools_object", "tools replaced or extended by one run are the next run's own", Security, Nothing,
        [plant!("tools.echo = () => 'pwned'; tools.planted = () => 'pwned'"),
         Spec::new("const r = await tools.echo({ a: 1 }); let gone; try { await tools.planted(); gone = false } catch (e) { gone = e.code === 'ToolNotFoundError' } return [r.a === 1, gone]", all_true)]),
    case!("cross_run::context_object", "the context changed by one run is the next run's own", Security, Nothing,
        [plant!("context.plantedCtx = 1; context.extra = { pwned: true }"),
         Spec::new("return [context.plantedCtx === undefined, Object.isFrozen(context)]", all_true)]),
    case!("cross_run::console_object", "console replaced by one run writes to the next run's report", Security, Nothing,
        [plant!("console.log = () => {}; console.planted = 1"),
         Spec::new("console.log('probe'); return [console.planted === undefined]", |o| {
             all_true(o)?;
             ensure(o, o.report.console.len() == 1 && o.report.console[0].text == "probe", "the probe's console.log went nowhere")
         })]),
    case!("cross_run::captured_tool_function", "a tool function captured by one run cannot call tools during the next", Security, Nothing,
        [Spec::new("const echo = tools.echo; tools.sleep({ ms: 150 }).then(() => echo({ late: 1 }), () => echo({ late: 2 })); return 1", planted),
         Spec::new("await tools.sleep({ ms: 400 }); return 1", own_calls_only)]),
    case!("cross_run::captured_console", "console captured by one run cannot write into the next run's report", Security, Nothing,
        [Spec::new("const log = console.log; tools.sleep({ ms: 150 }).then(() => log('LEAK late'), () => log('LEAK late')); return 1", planted),
         Spec::new("console.log('probe'); await tools.sleep({ ms: 400 }); return 1", quiet_console)]),
    case!("cross_run::detached_tool_promise", "a tool call one run never awaited is not part of the next run", Security, Nothing,
        [Spec::new("tools.sleep({ ms: 300 }); tools.sleep({ ms: 300 }).then(() => console.log('LEAK')); return 1", planted),
         Spec::new("await tools.sleep({ ms: 500 }); return 1", own_calls_only)]),

    // ---- queued work -------------------------------------------------------
    case!("cross_run::microtask_chain", "a microtask chain one run leaves behind never runs during the next", Security, Nothing,
        [Spec::new("let n = 0; const spin = () => { if (n++ < 1e5) return Promise.resolve().then(spin); console.log('LEAK end') }; spin(); return 1", planted),
         Spec::new("console.log('probe'); await tools.sleep({ ms: 100 }); return 1", quiet_console)]),
    case!("cross_run::queue_microtask", "queueMicrotask callbacks of one run never run during the next", Security, Nothing,
        [Spec::new("queueMicrotask(() => queueMicrotask(() => console.log('LEAK micro'))); return 1", planted),
         Spec::new("console.log('probe'); await Promise.resolve(); return 1", quiet_console)]),
    case!("cross_run::unhandled_rejection", "an unhandled rejection of one run is not reported by the next", Security, Nothing,
        [Spec::new("Promise.reject(new Error('planted rejection')); tools.fail({}).catch(() => { throw new Error('planted late') }); return 1", planted),
         Spec::new("await tools.sleep({ ms: 100 }); return 2", two)]),
    case!("cross_run::finalization_registry", "a FinalizationRegistry callback of one run never runs during the next", Security, Nothing,
        [plant!("const R = globalThis.FinalizationRegistry; const r = new R(() => console.log('LEAK finalizer')); for (let i = 0; i < 1000; i++) r.register({}, i)"),
         Spec::new("const junk = []; for (let i = 0; i < 20000; i++) junk.push({ i }); console.log('probe'); await tools.sleep({ ms: 50 }); return 1", quiet_console)]),
    case!("cross_run::weakref_target", "a WeakRef target of one run is unreachable from the next", Security, Nothing,
        [plant!("const target = { secret: 'planted' }; const refs = []; for (let i = 0; i < 100; i++) refs.push(new WeakRef(target))"),
         Spec::new("const t = { a: 1 }; const r = new WeakRef(t); return [r.deref() === t, !JSON.stringify(r.deref()).includes('planted')]", all_true)]),

    // ---- limits and counters -----------------------------------------------
    case!("cross_run::timeout_then_run", "a run stopped at its deadline leaves the engine ready and correct", Security, Stop,
        [Spec::new("while (true) {}", timeout).limits(short),
         Spec::new("return 1 + 1", two)]),
    case!("cross_run::memory_then_run", "a run over its memory limit leaves the next its full heap", Security, MemoryLimit,
        [Spec::new("const xs = []; while (true) xs.push(new Array(1e5).fill(1))", |o| expect_code(o, ErrorCode::ScriptMemoryError)).limits(small_heap),
         Spec::new("const xs = []; for (let i = 0; i < 8; i++) xs.push(new Array(1e5).fill(1)); return 2", two).limits(small_heap)]),
    case!("cross_run::caught_out_of_memory", "an allocation over the memory limit that the script catches (`new ArrayBuffer(2 ** 30)` under 32 MiB) is ScriptMemoryError, and the next run works", Security, MemoryLimit,
        [Spec::new("try { new ArrayBuffer(2 ** 30) } catch (e) { return e.name }", |o| expect_code(o, ErrorCode::ScriptMemoryError)).limits(small_heap),
         Spec::new("return 1 + 1", two).limits(small_heap)]),
    case!("cross_run::stack_overflow_then_run", "a run that overflowed its stack (caught or not) leaves the next run another context, which works", Security, Nothing,
        [Spec::new("function f(n) { return f(n + 1) + 1 } try { f(0) } catch (e) { throw e }", |o| expect_code(o, ErrorCode::StackOverflowError)),
         Spec::new("return 1 + 1", two)]),
    case!("cross_run::plain_recursion_then_run", "a plain synchronous recursion that overflows is a StackOverflowError while executing (not parsing), and the next run is in another context", Security, Nothing,
        [Spec::new("function f(n) { return f(n + 1) + 1 } return f(0)", |o| {
            expect_code(o, ErrorCode::StackOverflowError)?;
            ensure(o, o.report.error.as_ref().is_some_and(|e| e.phase == harness_core::Phase::Executing), "reported as a parse error")
        }),
         Spec::new("return 1 + 1", two)]),
    case!("cross_run::cancel_then_run", "a run cancelled during a tool call leaves the engine ready", Security, Nothing,
        [Spec::new("await tools.sleep({ ms: 5000 }); return 1", |o| expect_code(o, ErrorCode::ScriptCancelledError)).cancel_after(100),
         Spec::new("return 1 + 1", two)]),
    case!("cross_run::tool_budget", "one run's tool budget is its own", Security, Nothing,
        [Spec::new("for (let i = 0; i < 5; i++) await tools.echo({ i }); return 1", |o| expect_code(o, ErrorCode::ToolBudgetExceededError)).limits(few_calls),
         Spec::new("await tools.echo({}); await tools.echo({}); return 2", two).limits(few_calls)]),
    case!("cross_run::console_cap", "one run's console cap and dropped count are its own", Security, Nothing,
        [Spec::new("for (let i = 0; i < 50; i++) { console.log('flood ' + i); context.emitProgress('flood') } return 1", planted).limits(few_lines),
         Spec::new("console.log('probe'); return 1", counters_reset).limits(few_lines)]),
    case!("cross_run::call_ids", "tool call ids start again in every run", Security, Nothing,
        [Spec::new("for (let i = 0; i < 4; i++) await tools.echo({ i }); return 1", planted),
         Spec::new("await tools.echo({}); return 1", |o| {
             ensure(o, o.report.tool_calls.first().map(|c| c.id) == Some(1), "the probe's first call id is not 1")
         })]),
    case!("cross_run::script_id", "every run has its own script id", Security, Nothing,
        [Spec::new("return 1", planted),
         Spec::new("return 1", fresh_script_id)]),
    case!("cross_run::same_script_again", "a script run again gets its own functions, prototypes, regular expressions and literals, not those of its last run", Security, Nothing,
        [Spec::new(SAME_SCRIPT, all_true),
         Spec::new(SAME_SCRIPT, all_true)]),
    case!("cross_run::heap_growth", "what one run allocated is not held against the next", Security, Nothing,
        [Spec::new("const keep = []; for (let i = 0; i < 200; i++) keep.push('x'.repeat(10000) + i); tools.sleep({ ms: 200 }).then(() => keep.length); return 1", planted),
         Spec::new("const mine = []; for (let i = 0; i < 200; i++) mine.push('y'.repeat(10000) + i); return mine.length === 200 ? 2 : 0", two).limits(small_heap)]),
];
