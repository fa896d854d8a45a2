//! The script contract of the TypeScript harnesses this project replaces:
//! TypeScript everywhere, a sealed global object, the documented `context`,
//! detached tasks (`tools.spawn`), errors with metadata and suggestions,
//! approvals that say where, and return values JSON would mangle.

use super::case;
use crate::{ensure, expect_code, expect_value, Approvals, Case, Spec};
use harness_core::{
    ApprovalOutcome, ErrorCode, ProgressKind, ScriptContext, ScriptLanguage, TaskStatus,
};
use serde_json::json;

fn documented_context() -> ScriptContext {
    ScriptContext::default()
        .with_model("gpt-test")
        .with_provider("openai")
        .with_conversation_id("conv_1")
        .with_session_id("sess_1")
        .with_turn_id("turn_3")
}

pub const CASES: &[Case] = &[
    case!("contract::typescript", "a script that is not JavaScript runs as TypeScript, types stripped; JavaScript-only rejects it", Semantics, Nothing,
        [Spec::new("const xs: number[] = [1, 2, 3];\ninterface A { a: number }\nconst a: A = {a: xs.length};\nfunction id<T>(v: T): T { return v }\nreturn id<number>(a.a as number)", |o| expect_value(o, json!(3))),
         Spec::new("type N = number;\nconst n: N = 2;\nreturn n", |o| expect_value(o, json!(2))).language(ScriptLanguage::TypeScript),
         Spec::new("return [1, 2].map((x) => x * 2)", |o| expect_value(o, json!([2, 4]))).language(ScriptLanguage::TypeScript),
         Spec::new("const xs: number[] = [1]; return xs", |o| expect_code(o, ErrorCode::ScriptSyntaxError)).language(ScriptLanguage::JavaScript)]),
    case!("contract::typescript_namespace_values", "a TypeScript namespace with values (`namespace N { export const x = 1 }`) and an ambient `declare module` run; module syntax stays refused", Semantics, Nothing,
        [Spec::new("namespace N { export const x = 1; export function twice(n: number) { return 2 * n } }\nreturn N.twice(N.x)", |o| expect_value(o, json!(2))).language(ScriptLanguage::TypeScript),
         Spec::new("declare module \"m\" { export function g(): void }\nreturn 3", |o| expect_value(o, json!(3))).language(ScriptLanguage::TypeScript),
         Spec::new("export const x: number = 1", |o| expect_code(o, ErrorCode::BannedIdentifierError)).language(ScriptLanguage::TypeScript)]),
    case!("contract::typescript_positions", "stripped TypeScript keeps every line and column: stacks and syntax errors point into the original", Semantics, Nothing,
        [Spec::new("const label: string = 'x';\nfunction f(a: string): never {\n  throw new RangeError(a);\n}\nf(label)", |o| {
            expect_code(o, ErrorCode::ScriptRuntimeError)?;
            let stack = o.report.error.as_ref().and_then(|e| e.stack.clone()).unwrap_or_default();
            ensure(o, stack.contains("script.js:3:"), "the throw is on line 3 of the TypeScript")
         }),
         Spec::new("const a: number = 1;\nconst b = ;", |o| {
            expect_code(o, ErrorCode::ScriptSyntaxError)?;
            let loc = o.report.error.as_ref().and_then(|e| e.location);
            ensure(o, loc.is_some_and(|l| l.line == 2), "the error is on line 2")
         })]),
    case!("contract::sealed_globals", "globalThis is frozen after the prelude: creating or assigning a global throws a catchable TypeError", Security, Nothing,
        [Spec::new("const r = [Object.isFrozen(globalThis)];\nfor (const f of [() => Object.defineProperty(globalThis, 'leak', {value: 1}), () => { globalThis.leak = 1 }, () => { globalThis.JSON = null }]) { try { f(); r.push('no error') } catch (e) { r.push(e.name) } }\nreturn [r, typeof globalThis.leak]", |o| {
            expect_value(o, json!([[true, "TypeError", "TypeError", "TypeError"], "undefined"]))
         })]),
    case!("contract::frozen_intrinsics", "every object a script can reach from globalThis or from syntax (prototypes, methods, getters, hidden intrinsics, tools, context, console) is frozen", Security, Nothing,
        [Spec::new(concat!(
            "const roots = [[globalThis, 'globalThis'], [Object.getPrototypeOf(async function () {}), '%AsyncFunction.prototype%'],\n",
            "  [Object.getPrototypeOf(function* () {}), '%GeneratorFunction.prototype%'], [Object.getPrototypeOf(async function* () {}), '%AsyncGeneratorFunction.prototype%'],\n",
            "  [Object.getPrototypeOf([][Symbol.iterator]()), '%ArrayIteratorPrototype%'], [Object.getPrototypeOf(new Map().entries()), '%MapIteratorPrototype%'],\n",
            "  [Object.getPrototypeOf(new Set().values()), '%SetIteratorPrototype%'], [Object.getPrototypeOf(''[Symbol.iterator]()), '%StringIteratorPrototype%'],\n",
            "  [Object.getPrototypeOf(/x/[Symbol.matchAll]('')), '%RegExpStringIteratorPrototype%'],\n",
            "  [(function () { 'use strict'; return Object.getOwnPropertyDescriptor(arguments, 'callee').get })(), '%ThrowTypeError%'],\n",
            "  [tools, 'tools'], [tools.echo, 'tools.echo'], [context, 'context'], [console, 'console']];\n",
            "if (typeof Iterator === 'function' && typeof Iterator.prototype.map === 'function') roots.push([Object.getPrototypeOf([].values().map(x => x)), '%IteratorHelperPrototype%']);\n",
            "if (typeof Iterator === 'function' && typeof Iterator.from === 'function') roots.push([Object.getPrototypeOf(Iterator.from({ next() { return { done: true } } })), '%WrapForValidIteratorPrototype%']);\n",
            "const seen = new Set(); const open = [];\n",
            "while (roots.length > 0) {\n",
            "  const [v, path] = roots.pop();\n",
            "  if (v === null || (typeof v !== 'object' && typeof v !== 'function') || seen.has(v)) continue;\n",
            "  seen.add(v);\n",
            "  if (!Object.isFrozen(v)) open.push(path);\n",
            "  roots.push([Object.getPrototypeOf(v), path + '.__proto__']);\n",
            "  for (const k of Reflect.ownKeys(v)) {\n",
            "    const d = Object.getOwnPropertyDescriptor(v, k); const p = path + '.' + String(k);\n",
            "    if ('value' in d) roots.push([d.value, p]); else roots.push([d.get, p + '.get'], [d.set, p + '.set']);\n",
            "  }\n",
            "}\n",
            "return [seen.size > 200, open.slice(0, 10)]"), |o| expect_value(o, json!([true, []])))]),
    case!("contract::replaced_builtins_behave", "the built-ins the prelude replaces (Math.random, Promise.race, Promise.any) are no constructors, as the originals; Promise.any(null) rejects rather than throws; a subclass, another iterable and an array with a poisoned iterator behave as the language says", Semantics, Nothing,
        [Spec::new(concat!(
            "const isCtor = (f) => { try { Reflect.construct(String, [], f); return true } catch { return false } };\n",
            "const r = [isCtor(Math.random), isCtor(Promise.race), isCtor(Promise.any), 'prototype' in Math.random, Promise.race.name, Promise.any.length];\n",
            "let p; try { p = Promise.any(null) } catch { return 'threw' }\n",
            "try { await p; r.push('resolved') } catch (e) { r.push(e instanceof TypeError) }\n",
            "class P extends Promise {}\n",
            "const s = P.race([1]); r.push(s instanceof P, await s);\n",
            "r.push(await Promise.race(new Set([Promise.resolve(7)])));\n",
            "const poisoned = [1]; Object.defineProperty(poisoned, Symbol.iterator, { get() { throw new RangeError('poison') } });\n",
            "try { await Promise.race(poisoned); r.push('resolved') } catch (e) { r.push(e.name) }\n",
            "return r"),
            |o| expect_value(o, json!([false, false, false, false, "race", 1, true, true, 1, 7, "RangeError"])))]),
    case!("contract::no_override_mistake", "in the shared realm, assigning to a property that a frozen built-in prototype holds creates an own property on the receiver, for every prototype a walk from globalThis reaches; the prototypes themselves stay read-only", Security, Nothing,
        [Spec::new(concat!(
            "const protos = new Set(); const seen = new Set(); const queue = [globalThis, Object.getPrototypeOf(async function () {}), Object.getPrototypeOf(function* () {}),\n",
            "  Object.getPrototypeOf(async function* () {}), [][Symbol.iterator](), new Map().entries(), new Set().values(), ''[Symbol.iterator](), /x/[Symbol.matchAll]('')];\n",
            "while (queue.length > 0) {\n",
            "  const v = queue.pop();\n",
            "  if (v === null || (typeof v !== 'object' && typeof v !== 'function') || seen.has(v)) continue;\n",
            "  seen.add(v); const p = Object.getPrototypeOf(v); if (p !== null) { protos.add(p); queue.push(p); }\n",
            "  for (const k of Reflect.ownKeys(v)) {\n",
            "    const d = Object.getOwnPropertyDescriptor(v, k);\n",
            "    if ('value' in d) { queue.push(d.value); if (k === 'prototype' && typeof v === 'function' && d.value !== null && typeof d.value === 'object') protos.add(d.value); }\n",
            "    else queue.push(d.get, d.set);\n",
            "  }\n",
            "}\n",
            // Data properties that are read-only in a fresh engine too, and
            // the stack knobs the prelude pins on `Error` (docs/security.md);
            // below, accessors that throw there too: %ThrowTypeError% pairs.
            // The mark is a string: QuickJS's own `stack` setter takes one.
            "const readOnly = new Set(['length', 'name', 'prototype', 'BYTES_PER_ELEMENT', 'stackTraceLimit', 'prepareStackTrace', Symbol.toStringTag, Symbol.hasInstance, Symbol.unscopables, Symbol.toPrimitive]);\n",
            "const failed = []; const stillData = []; let tried = 0;\n",
            "for (const p of protos) {\n",
            "  for (const k of Reflect.ownKeys(p)) {\n",
            "    const d = Object.getOwnPropertyDescriptor(p, k);\n",
            "    if ('value' in d) { if (!readOnly.has(k)) stillData.push(String(k)); continue; }\n",
            "    if (d.set === undefined || k === '__proto__' || k === 'caller' || k === 'arguments') continue;\n",
            "    const o = Object.create(p); const mark = 'mark' + tried; tried++;\n",
            "    try { o[k] = mark; if (!Object.prototype.hasOwnProperty.call(o, k) || o[k] !== mark || p[k] === mark) failed.push(String(k)); }\n",
            "    catch (e) { failed.push(String(k) + ': ' + e.message); }\n",
            "  }\n",
            "}\n",
            "const instances = []; instances.push([].constructor === Array);\n",
            "const a = []; a.constructor = 1; const e = new TypeError('m'); e.name = 'Mine'; e.message = 'changed';\n",
            "const m = new Map(); m.get = () => 'own'; const it = [1][Symbol.iterator](); it.next = () => ({ done: true });\n",
            "class MyArray extends Array {} const ma = new MyArray(); ma.map = 'shadowed';\n",
            "let refused = 0; for (const f of [() => { Array.prototype.constructor = 1 }, () => { Map.prototype.get = 1 }, () => { Math.toString = 1 }]) { try { f() } catch (_) { refused++ } }\n",
            "return [tried > 300, failed.slice(0, 10), stillData.slice(0, 10), a.constructor, String(e), m.get(), [...it].length, ma.map, [].map === Array.prototype.map, refused]"),
            |o| expect_value(o, json!([true, [], [], 1, "Mine: changed", "own", 0, "shadowed", true, 3]))).shared_realm()]),
    case!("contract::private_realm", "a run in a private realm may change built-ins (a polyfill, a patched prototype) and is hardened otherwise: eval blocked, globals sealed, tools and context frozen", Security, Nothing,
        [Spec::new(concat!(
            "Array.prototype.last = function () { return this[this.length - 1]; };\n",
            "String.prototype.shout = function () { return this.toUpperCase() + '!'; };\n",
            "let blocked = 'ran'; try { eval('1'); } catch (e) { blocked = e.name; }\n",
            "let sealed = 'no error'; try { globalThis.planted = 1; } catch (e) { sealed = e.name; }\n",
            "return [[1, 2, 3].last(), 'hi'.shout(), Object.isFrozen(Array.prototype), blocked, sealed, typeof tools, Object.isFrozen(context)]"),
            |o| expect_value(o, json!([3, "HI!", false, "BannedIdentifierError", "TypeError", "object", true]))).private_realm()]),
    case!("contract::typescript_polyfill", "a TypeScript script that patches a built-in gets the private realm the facade picks, whether it is declared TypeScript or found to be", Semantics, Nothing,
        [Spec::new("(Array.prototype as any).last = function (this: number[]): number { return this[this.length - 1]; };\nconst xs: number[] = [1, 2, 3];\nreturn (xs as any).last() as number", |o| expect_value(o, json!(3))),
         Spec::new("(Array.prototype as any).last = function (this: number[]): number { return this[this.length - 1]; };\nconst xs: number[] = [1, 2, 3];\nreturn (xs as any).last() as number", |o| expect_value(o, json!(3))).language(ScriptLanguage::TypeScript)]),
    case!("contract::context_shape", "context has the documented ids, sandbox, capabilities and approvals; scriptId is new per run and in the report", Context, Nothing,
        [Spec::new("return [context.model, context.provider, context.conversationId, context.sessionId, context.turnId, context.scriptId, context.sandbox.timeoutMs, context.sandbox.memoryMb, context.sandbox.maxConcurrentToolCalls, context.sandbox.mode, context.capabilities.tools.includes('echo'), context.approvals.required, context.approvals.lastRequestId, Object.isFrozen(context.sandbox) && Object.isFrozen(context.capabilities) && Object.isFrozen(context.approvals)]", |o| {
            let v = o.report.value.clone().unwrap_or_default();
            let id = v[5].as_str().unwrap_or_default();
            ensure(o, id.starts_with("scr_") && id.len() > 8 && id == o.report.script_id, "scriptId is scr_… and in the report")?;
            let mut v = v;
            v[5] = json!("id");
            ensure(o, v == json!(["gpt-test", "openai", "conv_1", "sess_1", "turn_3", "id", 30000, 96, 4, "enabled", true, true, null, true]), "documented values")
         }).context(documented_context),
         Spec::new("return [context.conversationId, context.sessionId, context.turnId]", |o| expect_value(o, json!([null, null, null]))),
         Spec::new("await tools.echo({}); await tools.echo({}); return context.sandbox.remainingToolBudget", |o| expect_value(o, json!(30)))]),
    case!("contract::progress_kind", "emitProgress(message, kind, data) keeps the kind; context.emitProgress is the same function", Context, Nothing,
        [Spec::new("const same = context.emitProgress === context.telemetry.emitProgress; context.emitProgress('careful', 'warn', {x: 1}); return same", |o| {
            expect_value(o, json!(true))?;
            let p = o.report.progress.first();
            ensure(o, p.is_some_and(|p| p.kind == ProgressKind::Warn && p.data == Some(json!({"x": 1})) && p.message == "careful"), "one warn event with its data")
         }),
         Spec::new("context.telemetry.emitProgress('Starting analysis...'); return 1", |o| {
            expect_value(o, json!(1))?;
            ensure(o, o.report.progress.first().is_some_and(|p| p.kind == ProgressKind::Info && p.data.is_none()), "an info event")
         })]),
    case!("contract::spawn_off", "without spawn enabled, tools.spawn is undefined; spawn, http and mcp are the harness's names", Tools, Nothing,
        [Spec::new("return [typeof tools.spawn, 'spawn' in tools, typeof tools.http, 'http' in tools, typeof tools.echo]", |o| expect_value(o, json!(["undefined", false, "undefined", false, "function"])))]),
    case!("contract::mcp_tools", "upstream MCP tools (mcp.SERVER.TOOL) are tools.mcp.SERVER.TOOL: frozen, named as upstream, unknown names throw ToolNotFoundError", Tools, Nothing,
        [Spec::new("const f = tools.mcp.up['echo-x']; let a, b; try { tools.mcp.up.nope() } catch (e) { a = [e.name, e.tool] } try { tools.mcp.down.x() } catch (e) { b = e.name } return ['mcp' in tools, Object.isFrozen(tools.mcp), Object.isFrozen(tools.mcp.up), f.name, (await f({v: 1})).v, a, b, context.capabilities.tools.includes('mcp.up.echo-x')]", |o| {
            expect_value(o, json!([true, true, true, "echo-x", 1, ["ToolNotFoundError", "mcp.up.nope"], "TypeError", true]))?;
            ensure(o, o.report.tool_calls.iter().any(|c| c.tool == "mcp.up.echo-x"), "the report names the call mcp.up.echo-x")
         })]),
    case!("contract::spawn_detached", "tools.spawn.exec returns a frozen handle at once; the task outlives the script, is no DetachedPromiseError, and is reported", Tools, Nothing,
        [Spec::new("const t = tools.spawn.exec('sleep', {ms: 1500}); return [t.id, Object.isFrozen(t), typeof t.done.then, typeof t.cancel, 'spawn' in tools]", |o| {
            expect_value(o, json!(["task_1", true, "function", "function", true]))?;
            // A state, not a time: the run returned while its task was running.
            ensure(o, o.tasks_at_return.first().is_some_and(|t| t.status == TaskStatus::Running), "the run returned with its task still running")?;
            let t = o.report.detached_tasks.first();
            ensure(o, t.is_some_and(|t| t.status == TaskStatus::Ok && t.tool == "sleep" && t.result == Some(json!({"slept": 1500})) && t.script_id == o.report.script_id), "the task ended ok, with its result")
         }).spawn(),
         Spec::new("const t = tools.spawn.exec('echo', {a: 1}); return await t.done", |o| expect_value(o, json!({"a": 1}))).spawn(),
         Spec::new("try { tools.spawn.exec({command: ['true']}) } catch (e) { return [e.name, e.tool] }", |o| {
            // The test tools have no `exec`: the shorthand names it.
            expect_value(o, json!(["ToolNotFoundError", "exec"]))
         }).spawn()]),
    case!("contract::spawn_cancel", "a detached task can be cancelled by its handle or by id", Tools, Nothing,
        [Spec::new("const t = tools.spawn.exec('sleep', {ms: 5000}); const c = await t.cancel(); try { await t.done } catch (e) { return [c, e.name, await tools.spawn.cancel(t.id)] }", |o| {
            expect_value(o, json!([true, "ScriptCancelledError", false]))?;
            ensure(o, o.report.detached_tasks.first().is_some_and(|t| t.status == TaskStatus::Cancelled), "reported cancelled")
         }).spawn()]),
    case!("contract::spawn_checks", "spawned calls pass the facade: unknown tools throw at once, schemas and budget apply, tasks per run are capped", Tools, Nothing,
        [Spec::new("try { tools.spawn.exec('ech', {}) } catch (e) { return [e.name, e.message.includes('did you mean \"echo\"')] }", |o| expect_value(o, json!(["ToolNotFoundError", true]))).spawn(),
         Spec::new("try { await tools.spawn.exec('strict', {}).done } catch (e) { return e.name }", |o| expect_value(o, json!("ToolValidationError"))).spawn(),
         Spec::new("await tools.spawn.exec('echo', {}).done; return context.budget.remainingToolCalls", |o| expect_value(o, json!(31))).spawn(),
         Spec::new("const ids = []; try { for (let i = 0; i < 20; i++) ids.push(tools.spawn.exec('echo', {i}).id) } catch (e) { return [ids.length, e.name] }", |o| {
            expect_value(o, json!([8, "ConcurrencyLimitError"]))?;
            ensure(o, o.report.detached_tasks.len() == 8 && o.report.detached_tasks.iter().all(|t| t.status == TaskStatus::Ok), "8 tasks, all ok")
         }).spawn()]),
    case!("contract::tool_not_found_suggests", "ToolNotFoundError suggests the closest allowed name and still lists them all", Tools, Nothing,
        [Spec::new("try { await tools.ech({}) } catch (e) { return e.message }", |o| {
            expect_value(o, json!("unknown tool 'ech'; did you mean \"echo\"? available tools: big, count, echo, fail, guarded, mcp.up.echo-x, sleep, strict, stubborn_sleep"))
         }),
         Spec::new("try { await tools.zzzzzz({}) } catch (e) { return e.message.includes('did you mean') }", |o| expect_value(o, json!(false)))]),
    case!("contract::error_metadata", "every error has metadata (elapsedMs, completedTools, pendingTools); tool errors name tool and call", Tools, Nothing,
        [Spec::new("await tools.echo({}); await tools.fail({})", |o| {
            expect_code(o, ErrorCode::ToolExecutionError)?;
            let e = o.report.error.as_ref().expect("error");
            let m = e.metadata.clone().unwrap_or_default();
            ensure(o, e.tool.as_deref() == Some("fail") && e.call_id == Some(2) && m.completed_tools == 2 && m.pending_tools == 0 && m.elapsed_ms > 0.0, "tool, call and counts")
         }),
         Spec::new("null.x", |o| {
            expect_code(o, ErrorCode::ScriptRuntimeError)?;
            ensure(o, o.report.error.as_ref().is_some_and(|e| e.metadata.is_some()), "metadata on a script error too")
         })]),
    case!("contract::timeout_metadata", "a timeout keeps completed results and says so in metadata", Tools, Stop,
        [Spec::new("await tools.echo({step: 1}); await tools.sleep({ms: 10000})", |o| {
            expect_code(o, ErrorCode::ScriptTimeoutError)?;
            let m = o.report.error.as_ref().and_then(|e| e.metadata.clone()).unwrap_or_default();
            ensure(o, m.partial_results && m.completed_tools == 1 && m.pending_tools == 1, "partial results, 1 done, 1 pending")
         }).limits(|l| l.timeout_ms = 300)]),
    case!("contract::tool_stderr", "a ToolExecutionError from a process carries its stderr, cut to 2 KiB", Tools, Nothing,
        [Spec::new("try { await tools.fail({stderr: 5000}) } catch (e) { return [e.name, e.stderr.length < 2200, e.stderr.startsWith('eee')] }", |o| expect_value(o, json!(["ToolExecutionError", true, true]))),
         Spec::new("await tools.fail({stderr: 10})", |o| {
            expect_code(o, ErrorCode::ToolExecutionError)?;
            ensure(o, o.report.error.as_ref().and_then(|e| e.stderr.as_deref()) == Some("eeeeeeeeee"), "stderr in the report")
         })]),
    case!("contract::approval_context", "an approval request carries its id, the script id and the call's line; the script sees the id", Tools, Nothing,
        [Spec::new("const before = context.approvals.lastRequestId;\n\nawait tools.guarded({dangerous: true});\nreturn [before, context.approvals.lastRequestId]", |o| {
            let v = o.report.value.clone().unwrap_or_default();
            let id = v[1].as_str().unwrap_or_default().to_owned();
            ensure(o, o.report.ok && v[0].is_null() && id.starts_with("apr_"), "null before, an apr_ id after")?;
            let a = o.report.approvals.first();
            ensure(o, a.is_some_and(|a| a.request_id == id && a.outcome == ApprovalOutcome::Approved), "the record has the id the script saw")?;
            // Engines whose errors carry no stack cannot say where.
            ensure(o, a.is_some_and(|a| a.line.is_none_or(|l| l == 3)), "the call is on line 3")
         }).approvals(Approvals::Approve)]),
    case!("contract::return_values", "settled promises, Maps, Sets and typed arrays in a return value convert; lossy conversions are warnings", Semantics, Nothing,
        [Spec::new("return {p: Promise.resolve(1), m: new Map([[1, 2]]), o: new Map([[{}, 1]]), s: new Set(['a']), t: new Uint8Array([1, 2]), n: [Promise.resolve(Promise.resolve(2))]}", |o| {
            expect_value(o, json!({"p": 1, "m": {"1": 2}, "o": [[{}, 1]], "s": ["a"], "t": [1, 2], "n": [2]}))?;
            ensure(o, o.report.warnings.is_empty(), "no warnings")
         }),
         Spec::new("class Foo {}\nreturn {f: () => 1, u: undefined, c: new Foo(), a: [undefined], d: new Date(0)}", |o| {
            expect_value(o, json!({"c": {}, "a": [null], "d": "1970-01-01T00:00:00.000Z"}))?;
            let paths: Vec<&str> = o.report.warnings.iter().map(|w| w.path.as_str()).collect();
            ensure(o, paths == ["$.f", "$.u", "$.c", "$.a[0]"], "four warnings with their paths")
         }),
         Spec::new("return {'d e': [undefined], x: {y: {z: undefined}}, o: new Map([[{}, undefined]])}", |o| {
            expect_value(o, json!({"d e": [null], "x": {"y": {}}, "o": [[{}, null]]}))?;
            let paths: Vec<&str> = o.report.warnings.iter().map(|w| w.path.as_str()).collect();
            ensure(o, paths == ["$[\"d e\"][0]", "$.x.y.z"], "a quoted key's path and a nested one")
         }),
         Spec::new("return new Map([['a', 1]])", |o| expect_value(o, json!({"a": 1})))]),
    case!("contract::return_pending_promise", "a pending or rejected promise in the return value is a SerializationError naming its path", Semantics, Nothing,
        [Spec::new("return {p: new Promise(() => {})}", |o| {
            expect_code(o, ErrorCode::SerializationError)?;
            let m = o.report.error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
            ensure(o, m.contains("$.p") && m.contains("await"), "names $.p and asks about await")
         }),
         Spec::new("const r = Promise.reject(new Error('x')); r.catch(() => {}); return [r]", |o| {
            expect_code(o, ErrorCode::SerializationError)?;
            ensure(o, o.report.error.as_ref().is_some_and(|e| e.message.contains("$[0]") && e.message.contains("rejected")), "names $[0]")
         })]),
];
