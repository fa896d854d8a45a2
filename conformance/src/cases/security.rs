//! Escape and denial-of-service payloads. Never gated by capability; after
//! each case the runner checks that the host still runs a trivial script.

use super::case;
use crate::{ensure, expect_code, expect_undefined, expect_value, Case, Observed, Spec};
use harness_core::ErrorCode;
use serde_json::json;

fn banned(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::BannedIdentifierError)
}

fn type_error(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptRuntimeError)?;
    ensure(
        o,
        o.report
            .error
            .as_ref()
            .is_some_and(|e| e.name == "TypeError"),
        "expected a TypeError",
    )
}

fn timeout(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptTimeoutError)
}

fn memory(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptMemoryError)
}

fn serialization(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::SerializationError)
}

fn undefined_string(o: &Observed) -> Result<Option<String>, String> {
    expect_value(o, json!("undefined"))
}

fn deep_nesting() -> String {
    format!("return {}", "[".repeat(1_000_000))
}

fn short(l: &mut harness_core::Limits) {
    l.timeout_ms = 300;
}

fn small_heap(l: &mut harness_core::Limits) {
    l.memory_bytes = 32 << 20;
}

/// The harness's own error, rethrown after the script rewrote its `code`,
/// `name`, `tool` and `callId`, is reported as the harness made it.
fn genuine_not_found(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ToolNotFoundError)?;
    let e = o.report.error.as_ref();
    ensure(
        o,
        e.is_some_and(|e| e.tool.as_deref() == Some("nope") && e.call_id != Some(99)),
        "the report took the tool or call id the script wrote",
    )?;
    ensure(o, !o.report.retried, "the run was retried")
}

/// A script's own error that names a harness code is the script's error.
fn forged_is_runtime_error(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::ScriptRuntimeError)?;
    ensure(o, !o.report.retried, "the run was retried")
}

fn replacement_character(o: &Observed) -> Result<Option<String>, String> {
    ensure(o, o.report.ok, "the run failed")?;
    let texts: Vec<&str> = o.report.console.iter().map(|c| c.text.as_str()).collect();
    ensure(
        o,
        texts == ["a\u{FFFD}b", "\u{FFFD}"]
            && o.report.progress.len() == 1
            && o.report.progress[0].message == "p\u{FFFD}",
        &format!("expected lone surrogates as U+FFFD, got {texts:?}"),
    )
}

fn serialization_at_p(o: &Observed) -> Result<Option<String>, String> {
    expect_code(o, ErrorCode::SerializationError)?;
    ensure(
        o,
        o.report
            .error
            .as_ref()
            .is_some_and(|e| e.message.contains("$.p")),
        "the error does not name the path $.p",
    )
}

/// Room for a 65 MiB string and its copies on the way out (Boa's worker
/// counts them all).
fn big_heap(l: &mut harness_core::Limits) {
    l.memory_bytes = 1 << 30;
}

/// A console line over the process boundary's frame limit (64 MiB, as
/// JSON) is cut as in process.
fn huge_line_cut(o: &Observed) -> Result<Option<String>, String> {
    expect_value(o, json!(1))?;
    let line = o.report.console.first().map_or("", |c| c.text.as_str());
    ensure(
        o,
        line.len() < (1 << 20) && line.contains("truncated"),
        &format!(
            "expected the line cut with a marker, got {} bytes",
            line.len()
        ),
    )
}

pub const CASES: &[Case] = &[
    // Output larger than a frame of the process boundary meets the
    // limits it meets in process, not a dead worker.
    case!("security::output_over_the_frame_limit", "a console line and a return value over the boundary's 64 MiB frame as JSON (12 Mi control characters, 6 bytes each escaped) are cut and ReturnValueTooLargeError, in process and behind the boundary alike", Security, Nothing,
        [Spec::new("console.log('\\x01'.repeat(12 * 1048576)); return 1", huge_line_cut).limits(big_heap),
         Spec::new("return ['\\x01'.repeat(12 * 1048576)]", |o| expect_code(o, ErrorCode::ReturnValueTooLargeError)).limits(big_heap)]),

    // Codes come from what the host knows, never from the thrown value.
    case!("security::forged_code_on_a_host_error", "a harness error whose code the script rewrote to HarnessInternalError keeps its own code (BannedIdentifierError), and the run is not retried", Security, Nothing,
        [Spec::new("try { eval('1') } catch (e) { e.code = 'HarnessInternalError'; e.name = 'HarnessInternalError'; throw e }", |o| {
            expect_code(o, ErrorCode::BannedIdentifierError)?;
            ensure(o, !o.report.retried, "the run was retried")
        })]),
    case!("security::forged_tool_and_call_id", "a ToolNotFoundError rethrown with another code, tool and call id is reported with the harness's", Security, Nothing,
        [Spec::new("try { await tools.nope({}) } catch (e) { e.code = 'ApprovalDeniedError'; e.tool = 'exec'; e.callId = 99; throw e }", genuine_not_found)]),
    case!("security::forged_code_on_a_script_error", "a script's own error named ScriptTimeoutError or carrying a code is ScriptRuntimeError", Security, Nothing,
        [Spec::new("throw Object.assign(new Error('fake'), { name: 'ScriptTimeoutError', code: 'ScriptTimeoutError' })", forged_is_runtime_error),
         Spec::new("throw Object.assign(new Error('interrupted'), { name: 'InternalError', code: 'HarnessInternalError' })", forged_is_runtime_error),
         Spec::new("const e = new Error('x'); e.name = 'ApprovalDeniedError'; e.code = 'ApprovalDeniedError'; e.tool = 'exec'; e.callId = 1; throw e", forged_is_runtime_error)]),
    // Source text the language allows, the same on every engine.
    case!("security::nul_in_source", "a NUL byte in a string literal, a template or a comment is JavaScript", Security, Nothing,
        [Spec::new("// a \0 comment\nreturn ['a\0b'.length, `\0`.length, /* \0 */ 1]", |o| expect_value(o, json!([3, 1, 1])))]),
    case!("security::lone_surrogates_reach_the_host", "console lines and progress messages with lone surrogates are logged with U+FFFD", Security, Nothing,
        [Spec::new("console.log('a\\uD800b'); console.log('\\uDC00'); context.emitProgress('p\\uD83D'); return 1", replacement_character)]),
    case!("security::unsettleable_promise_in_value", "a returned fake promise (`Object.create(Promise.prototype)`) or one whose species throws is SerializationError naming its path", Security, Nothing,
        [Spec::new("return { p: Object.create(Promise.prototype) }", serialization_at_p),
         Spec::new("const q = Promise.resolve(1); Object.defineProperty(q, 'constructor', { get() { throw new Error('species') } }); return { p: q }", serialization_at_p)]),

    // Code generation from strings, by every road.
    case!("security::eval_direct", "direct eval is BannedIdentifierError", Security, Nothing,
        [Spec::new("return eval('1 + 1')", banned)]),
    case!("security::eval_indirect", "indirect eval is BannedIdentifierError", Security, Nothing,
        [Spec::new("return (0, globalThis.eval)('1')", banned)]),
    case!("security::function_constructor", "new Function is BannedIdentifierError", Security, Nothing,
        [Spec::new("return new Function('return 1')()", banned)]),
    case!("security::ctor_plain", "(function(){}).constructor is the blocked Function constructor", Security, Nothing,
        [Spec::new("return (function () {}).constructor('return globalThis')()", banned)]),
    case!("security::ctor_arrow", "an arrow function's constructor is blocked", Security, Nothing,
        [Spec::new("return (() => 1).constructor('return 1')()", banned)]),
    case!("security::ctor_async", "the AsyncFunction constructor is blocked", Security, Nothing,
        [Spec::new("return await (async () => 1).constructor('return 1')()", banned)]),
    case!("security::ctor_generator", "the GeneratorFunction constructor is blocked", Security, Nothing,
        [Spec::new("return (function* () {}).constructor('yield 1')().next()", banned)]),
    case!("security::ctor_async_generator", "the AsyncGeneratorFunction constructor is blocked", Security, Nothing,
        [Spec::new("return (async function* () {}).constructor('yield 1')", banned)]),
    case!("security::ctor_via_reflect", "Reflect.construct(Function, …) is blocked", Security, Nothing,
        [Spec::new("return Reflect.construct(Function, ['return 1'])()", banned)]),
    case!("security::ctor_via_class", "a class's constructor chain is blocked", Security, Nothing,
        [Spec::new("class A {}; return A.constructor('return 1')()", banned)]),
    case!("security::tools_constructor_walk", "tools.constructor.constructor is blocked", Security, Nothing,
        [Spec::new("return tools.constructor.constructor('return this')()", banned)]),
    case!("security::tool_function_constructor", "a tool function's constructor is blocked", Security, Nothing,
        [Spec::new("return tools.echo.constructor('return process')()", banned)]),
    case!("security::context_constructor_walk", "context.constructor.constructor is blocked", Security, Nothing,
        [Spec::new("return context.constructor.constructor('return this')()", banned)]),
    case!("security::context_lookup_getter", "__lookupGetter__ on context leads only to blocked constructors", Security, Nothing,
        [Spec::new("const g = context.budget.__lookupGetter__('remainingToolCalls'); return g.constructor('return 1')()", banned)]),
    case!("security::tool_result_constructor_walk", "a tool result's constructor chain is blocked", Security, Nothing,
        [Spec::new("const r = await tools.echo({}); return r.constructor.constructor('return this')()", banned)]),
    case!("security::host_error_constructor_walk", "an error thrown by the host leads only to blocked constructors", Security, Nothing,
        [Spec::new("try { await tools.fail({}) } catch (e) { return e.constructor.constructor('return this')() }", banned)]),
    case!("security::species_constructor", "Symbol.species returning the Function constructor is blocked", Security, Nothing,
        [Spec::new("class A extends Array { static get [Symbol.species]() { return Object.getPrototypeOf(function () {}).constructor } } return new A(1, 2).map(x => x)", banned)]),
    // Prototypes and the harness's own objects.
    case!("security::tools_proto", "tools has no prototype to walk", Security, Nothing,
        [Spec::new("return Object.getPrototypeOf(tools)", |o| expect_value(o, json!(null)))]),
    case!("security::proto_pollution_fails", "Object.prototype cannot be polluted in the shared realm", Security, Nothing,
        [Spec::new("({}).__proto__.polluted = 1", type_error).shared_realm()]),
    case!("security::proto_pollution_no_leak", "pollution attempts and new globals never reach the next run", Security, Nothing,
        [Spec::new("try { Object.prototype.leak = 1 } catch (e) {} try { globalThis.leak2 = 2 } catch (e) {} return 1", |o| expect_value(o, json!(1))),
         Spec::new("return [typeof ({}).leak, typeof leak2]", |o| expect_value(o, json!(["undefined", "undefined"])))]),
    case!("security::builtin_override", "built-in methods cannot be replaced in the shared realm", Security, Nothing,
        [Spec::new("JSON.stringify = () => '{}'", type_error).shared_realm(), Spec::new("Promise.prototype.then = null", type_error).shared_realm()]),
    case!("security::mutate_tools", "tools cannot be replaced, added or deleted", Security, Nothing,
        [Spec::new("tools.echo = () => 1", type_error), Spec::new("delete tools.echo", type_error), Spec::new("tools = {}", type_error)]),
    case!("security::mutate_context", "context cannot be changed", Security, Nothing,
        [Spec::new("context.model = 'x'", type_error), Spec::new("context.tools.push('x')", type_error)]),
    case!("security::forged_error_code", "a script cannot forge a harness error code", Security, Nothing,
        [Spec::new("throw Object.assign(new Error('x'), {name: 'ApprovalDeniedError', code: 'ApprovalDeniedError'})", |o| expect_code(o, ErrorCode::ScriptRuntimeError))]),
    case!("security::prepare_stack_trace", "Error.prepareStackTrace cannot be installed", Security, Nothing,
        [Spec::new("Error.prepareStackTrace = (e, frames) => frames", type_error)]),
    // Returned values that fight back.
    case!("security::getter_loop_on_return", "a getter that loops on the returned value times out", Security, Stop,
        [Spec::new("return {get x() { while (true) {} }}", timeout).limits(short)]),
    case!("security::tojson_loop", "a looping toJSON times out", Security, Stop,
        [Spec::new("return {toJSON() { while (true) {} }}", timeout).limits(short)]),
    case!("security::to_primitive_loop", "valueOf / Symbol.toPrimitive that loop time out", Security, Stop,
        [Spec::new("return {[Symbol.toPrimitive]() { while (true) {} }} + 1", timeout).limits(short)]),
    case!("security::getter_throws_on_return", "a throwing getter on the returned value is SerializationError", Security, Nothing,
        [Spec::new("return {get x() { throw new Error('no') }}", serialization)]),
    case!("security::tojson_throws", "a throwing toJSON is SerializationError", Security, Nothing,
        [Spec::new("return {toJSON() { throw new Error('no') }}", serialization)]),
    case!("security::bigint_and_cycles", "BigInt and cyclic return values are SerializationError", Security, Nothing,
        [Spec::new("return {n: 1n}", serialization), Spec::new("const a = []; a.push(a); return a", serialization)]),
    // Proxies.
    case!("security::proxy_huge_own_keys", "a Proxy with huge ownKeys exhausts memory, not the host", Security, MemoryLimit,
        [Spec::new("return new Proxy({}, {ownKeys() { return Array.from({length: 1e7}, (_, i) => 'k' + i) }})", memory).limits(small_heap)]),
    case!("security::proxy_revoked", "a revoked Proxy in the return value is SerializationError", Security, Nothing,
        [Spec::new("const r = Proxy.revocable({}, {}); r.revoke(); return [r.proxy]", serialization)]),
    case!("security::proxy_deep_chain", "a deep chain of Proxies is StackOverflowError (or walked in full), never the host's end", Security, StackGuard,
        [Spec::new("let p = {}; for (let i = 0; i < 1e5; i++) p = new Proxy(p, {}); return p.x", |o| {
            // An engine with a deep enough native stack may walk the whole chain.
            if o.report.ok && o.report.value.is_none() {
                return Ok(Some("walked the whole chain".to_owned()));
            }
            expect_code(o, ErrorCode::StackOverflowError)
        })]),
    // Stack exhaustion.
    case!("security::parse_nesting_too_large", "'['.repeat(1e6) is refused by the source cap", Security, Nothing,
        [Spec::new("return [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", |o| expect_code(o, ErrorCode::ScriptSyntaxError)),
         Spec::generated(deep_nesting, |o| expect_code(o, ErrorCode::ScriptTooLargeError))]),
    case!("security::parse_stack_exhaustion", "deep nesting at parse time is StackOverflowError, phase parsing", Security, Nothing,
        [Spec::generated(deep_nesting, |o| {
            expect_code(o, ErrorCode::StackOverflowError)?;
            ensure(o, o.report.error.as_ref().is_some_and(|e| e.phase == harness_core::Phase::Parsing), "phase parsing")
        }).limits(|l| l.max_source_bytes = 4 << 20)]),
    // A fresh object at each level: Boa cuts `${this}` cycles short (to ""),
    // so the recursion must not revisit an object.
    case!("security::runtime_stack_exhaustion", "runaway recursion through toString is StackOverflowError", Security, Nothing,
        [Spec::new("const o = {toString() { return `${{toString: this.toString}}` }}; return `${o}`", |o| expect_code(o, ErrorCode::StackOverflowError))]),
    // CPU and memory bombs.
    case!("security::native_loop_deadline", "a native loop the engine never interrupts (`Array(2**32 - 1).join('x')` under 32 MiB) still ends at its deadline, as ScriptTimeoutError or ScriptMemoryError", Security, Stop,
        [Spec::new("return Array(2 ** 32 - 1).join('x').length", |o| {
            let code = o.report.code();
            ensure(o, matches!(code, Some(ErrorCode::ScriptTimeoutError | ErrorCode::ScriptMemoryError)), "expected a timeout or the memory limit")?;
            ensure(o, o.wall < std::time::Duration::from_millis(3000), &format!("answered after {:?}, deadline 1 s", o.wall))
        }).limits(|l| { l.timeout_ms = 1000; l.memory_bytes = 32 << 20; })]),
    case!("security::infinite_loop", "while(true){} times out", Security, Stop,
        [Spec::new("while (true) {}", timeout).limits(short)]),
    case!("security::catch_all_loop", "a loop that catches every error still stops at the deadline, also when heavy native work makes interrupt checks rare", Security, Stop,
        [Spec::new("for (;;) { try { for (;;) {} } catch (e) {} }", timeout).limits(short),
         Spec::new("const big = Array.from({length: 1e5}, (_, i) => i); for (;;) { try { for (;;) JSON.stringify(big) } catch (e) {} }", timeout).limits(short)]),
    case!("security::regex_backtracking", "catastrophic regex backtracking times out", Security, Stop,
        [Spec::new("return /(a+)+b/.test('a'.repeat(40))", timeout).limits(short)]),
    case!("security::native_call_loop", "a loop over heavy native calls stops at the deadline", Security, Stop,
        [Spec::new("const a = Array.from({length: 2e5}, (_, i) => -i); while (true) a.slice().sort()", |o| {
            timeout(o)?;
            ensure(o, o.report.metrics.duration_ms < 2000.0, "stopped near the deadline")
        }).limits(short)]),
    // `indexOf` reads every character: V8 builds `repeat`'s result as a
    // rope of a few dozen cells and only lays it out flat when read.
    case!("security::string_bomb", "a huge string is ScriptMemoryError", Security, MemoryLimit,
        [Spec::new("return 'x'.repeat(2 ** 28).indexOf('y')", memory)]),
    case!("security::array_buffer_bomb", "a huge ArrayBuffer, or many, is ScriptMemoryError", Security, MemoryLimit,
        [Spec::new("return new ArrayBuffer(2 ** 30).byteLength", memory), Spec::new("const b = []; while (true) b.push(new ArrayBuffer(1 << 20))", memory)]),
    case!("security::catching_oom_does_not_help", "catching the out-of-memory error still ends the run", Security, MemoryLimit,
        [Spec::new("const a = []; while (true) { try { a.push(new Array(1e6).fill(1)) } catch (e) {} }", memory).limits(small_heap)]),
    case!("security::microtask_flood", "an endless microtask chain times out", Security, Stop,
        [Spec::new("(function f() { Promise.resolve().then(f) })(); await new Promise(() => {})", timeout).limits(short)]),
    // Larger than the 96 MiB default heap once serialised: 60e6 fitted
    // V8's heap, where `repeat` makes a rope and only the JSON is flat.
    case!("security::tool_args_bomb", "huge tool arguments exhaust the script's memory, not the host's", Security, MemoryLimit,
        [Spec::new("await tools.echo({a: 'x'.repeat(100e6)})", memory)]),
    case!("security::tool_args_too_deep", "tool arguments nested too deeply are ToolValidationError", Security, Nothing,
        [Spec::new("let o = {}; for (let i = 0; i < 10000; i++) o = {o}; try { await tools.echo(o) } catch (e) { return e.name }", |o| expect_value(o, json!("ToolValidationError")))]),
    // Concurrency primitives and finalizers.
    case!("security::no_shared_array_buffer", "SharedArrayBuffer is absent", Security, Nothing,
        [Spec::new("return typeof SharedArrayBuffer", undefined_string)]),
    case!("security::no_atomics", "Atomics is absent", Security, Nothing,
        [Spec::new("return typeof Atomics", undefined_string)]),
    case!("security::weakref_after_deadline", "WeakRef work and a runaway loop end at the deadline; nothing runs after", Security, Stop,
        [Spec::new("const refs = []; for (let i = 0; i < 1000; i++) refs.push(new WeakRef({i})); while (true) {}", timeout).limits(short)]),
    case!("security::no_finalization_registry", "FinalizationRegistry is absent, so no callback can outlive the run", Security, Nothing,
        [Spec::new("return typeof FinalizationRegistry", undefined_string)]),
    // Stacks and host paths.
    case!("security::stack_names_no_host_paths", "stacks the script sees and reports name only script.js", Security, Nothing,
        [Spec::new("try { await tools.fail({}) } catch (e) { return [String(e.stack).includes('.rs'), String(new Error('x').stack).includes('/')] }", |o| expect_value(o, json!([false, false]))),
         Spec::new("function deep() { throw new Error('x') }\ndeep()", |o| {
            let s = o.report.error.as_ref().and_then(|e| e.stack.clone()).unwrap_or_default();
            ensure(o, !s.is_empty() && s.lines().all(|l| l.contains("script.js:")) && !s.contains("prelude"), "only script.js frames")
        })]),
    // Probing the global object.
    case!("security::probe_process", "globalThis.process is absent", Security, Nothing, [Spec::new("return typeof process", undefined_string)]),
    case!("security::probe_require", "require is absent", Security, Nothing, [Spec::new("return typeof require", undefined_string)]),
    case!("security::probe_deno", "Deno is absent", Security, Nothing, [Spec::new("return typeof Deno", undefined_string)]),
    case!("security::probe_std", "quickjs-libc std is absent", Security, Nothing, [Spec::new("return typeof std", undefined_string)]),
    case!("security::probe_os", "quickjs-libc os is absent", Security, Nothing, [Spec::new("return typeof os", undefined_string)]),
    case!("security::probe_print", "print is absent", Security, Nothing, [Spec::new("return typeof print", undefined_string)]),
    case!("security::probe_script_args", "scriptArgs is absent", Security, Nothing, [Spec::new("return typeof scriptArgs", undefined_string)]),
    case!("security::probe_timers_and_network", "timers, fetch and WebAssembly are absent", Security, Nothing,
        [Spec::new("return [typeof setTimeout, typeof setInterval, typeof fetch, typeof WebAssembly, typeof XMLHttpRequest].join()", |o| expect_value(o, json!("undefined,undefined,undefined,undefined,undefined")))]),
    case!("security::static_import", "a static import is a syntax error", Security, Nothing,
        [Spec::new("import fs from 'fs'", |o| expect_code(o, ErrorCode::ScriptSyntaxError))]),
    case!("security::dynamic_import", "import() never loads a module", Security, Nothing,
        [Spec::new("try { await import('fs'); return 'loaded' } catch (e) { return 'refused' }", |o| expect_value(o, json!("refused")))]),
    case!("security::wrapper_escape", "a script that closes its wrapper early is a ScriptSyntaxError: none of it runs", Security, Nothing,
        [Spec::new("}); console.log('ran'); const escaped = [typeof process]; (async function () { return escaped", |o| {
            expect_code(o, ErrorCode::ScriptSyntaxError)?;
            ensure(o, o.report.console.is_empty(), "part of the script ran")
        })]),
    case!("security::undefined_result_of_probe", "reading unknown tools neither throws nor yields a thenable", Security, Nothing,
        [Spec::new("const t = tools.then; const s = tools[Symbol.toPrimitive]; return void [t, s]", expect_undefined)]),
];
