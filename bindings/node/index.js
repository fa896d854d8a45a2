'use strict';
// script-harness: run model-written JavaScript/TypeScript in a native
// sandboxed engine (QuickJS, on the harness's own threads) with tools
// written in JavaScript. See README.md.

const { existsSync } = require('node:fs');
const { join } = require('node:path');

function loadNative() {
  const path = process.env.SCRIPT_HARNESS_NATIVE || join(__dirname, 'native', 'script-harness.node');
  try {
    return require(path);
  } catch (e) {
    const err = new Error(
      `script-harness: cannot load the native addon at ${path} (${e.message}). ` +
        'Build it with `npm run build` in the package directory (needs Rust).',
    );
    err.cause = e;
    throw err;
  }
}

const native = loadNative();

/** The error codes of a report's `error.code`. */
const ErrorCode = Object.freeze({
  ScriptSyntaxError: 'ScriptSyntaxError',
  BannedIdentifierError: 'BannedIdentifierError',
  ScriptTooLargeError: 'ScriptTooLargeError',
  ScriptRuntimeError: 'ScriptRuntimeError',
  ScriptTimeoutError: 'ScriptTimeoutError',
  ScriptMemoryError: 'ScriptMemoryError',
  StackOverflowError: 'StackOverflowError',
  ScriptCancelledError: 'ScriptCancelledError',
  ToolNotFoundError: 'ToolNotFoundError',
  ToolValidationError: 'ToolValidationError',
  ToolBudgetExceededError: 'ToolBudgetExceededError',
  ConcurrencyLimitError: 'ConcurrencyLimitError',
  ApprovalDeniedError: 'ApprovalDeniedError',
  ApprovalTimeoutError: 'ApprovalTimeoutError',
  ToolExecutionError: 'ToolExecutionError',
  DetachedPromiseError: 'DetachedPromiseError',
  SerializationError: 'SerializationError',
  ReturnValueTooLargeError: 'ReturnValueTooLargeError',
  HarnessInternalError: 'HarnessInternalError',
  SessionClosedError: 'SessionClosedError',
  ContinuationInvalidError: 'ContinuationInvalidError',
  UnsupportedError: 'UnsupportedError',
});

/** `timeoutMs` → `timeout_ms`: limits may be written either way. */
function snake(key) {
  return key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
}

function limitsToSnake(limits) {
  if (limits == null) return undefined;
  const out = {};
  for (const [k, v] of Object.entries(limits)) out[snake(k)] = v;
  return out;
}

let nextRunId = 1;

/** What an `approvals` callback returns to put the run away (see `suspend`). */
const SUSPEND = 'suspend';

/** `suspend: true | {keys, maxSuspendedMs?}` as the native side takes it. */
function suspendOption(s) {
  if (s == null || typeof s === 'boolean') return s;
  if (typeof s !== 'object') throw new TypeError('suspend must be true or {keys: [...]}');
  return { keys: s.keys, max_suspended_ms: s.maxSuspendedMs ?? s.max_suspended_ms };
}

/**
 * Aborts a dispatched call (`{controller, reason}`, see `_dispatch`): its
 * signal now if the tool has read it, else the moment it does.
 */
function abortCall(call, why) {
  if (call == null || call.reason != null) return;
  call.reason = new Error(why);
  if (call.controller != null) call.controller.abort(call.reason);
}

class Harness {
  /**
   * @param {object} [options] engine, isolation, limits, tools, allow,
   *   approvals, mode, config, provider, keepWarmMs (see index.d.ts)
   */
  constructor(options = {}) {
    // The wasi engine's guest, shipped in the package.
    if (options.engine === 'wasi' && !process.env.HARNESS_QUICKJS_WASM) {
      const guest = join(__dirname, 'native', 'quickjs.wasm');
      if (existsSync(guest)) process.env.HARNESS_QUICKJS_WASM = guest;
    }
    const tools = options.tools ?? {};
    if (typeof tools !== 'object') throw new TypeError('tools must be an object of {name: tool}');
    const specs = [];
    this._tools = new Map();
    for (const [name, tool] of Object.entries(tools)) {
      const deferred = tool != null && tool.deferred === true;
      if (tool == null || (!deferred && typeof tool.execute !== 'function')) {
        throw new TypeError(`tool ${name}: execute must be a function (or deferred: true)`);
      }
      if (tool.needsApproval != null && typeof tool.needsApproval !== 'boolean' && typeof tool.needsApproval !== 'function') {
        throw new TypeError(`tool ${name}: needsApproval must be a boolean or a function`);
      }
      this._tools.set(name, tool);
      specs.push({
        name,
        description: tool.description ?? '',
        parameters: tool.parameters ?? { type: 'object' },
        // A function is asked first, on this side (see approve below).
        needsApproval: tool.needsApproval === true || typeof tool.needsApproval === 'function',
        deferred,
      });
    }
    if (options.approvals != null && typeof options.approvals !== 'function') {
      throw new TypeError('approvals must be a function (request) => boolean | Promise<boolean>');
    }
    this._approvals = options.approvals;
    this._calls = new Map();
    const opts = {
      engine: options.engine,
      isolation: options.isolation,
      limits: limitsToSnake(options.limits),
      tools: specs,
      allow: options.allow,
      mode: options.mode,
      config: options.config,
      provider: options.provider,
      keep_warm_ms: options.keepWarmMs,
      keep_warm_awake: options.keepWarmAwake,
      anticipate: options.anticipate,
      suspend: suspendOption(options.suspend),
    };
    // A call is answered through `complete`, when the tool settles; only
    // strings cross (a throwing conversion here would be an unhandled
    // rejection, which ends a Node process). `runNow` and `complete` may
    // hand back a step at once (the script's next call, a run's report)
    // while nothing else is in flight: take it as if it had come through
    // `dispatch` or `finished`.
    const complete = (key, json, message) => {
      this._step(this._native.complete(key, json, message));
    };
    const dispatch = (name, argsJson, key) => {
      this._dispatch(name, argsJson, key).then(
        (json) => complete(key, typeof json === 'string' ? json : null, null),
        (e) => complete(key, null, String(e instanceof Error ? e.message : e)));
    };
    this._callStep = dispatch;
    const abort = (key) => abortCall(this._calls.get(key), 'the script no longer needs this call');
    const approve = (requestJson) => this._approve(requestJson);
    const finished = (runId, reportJson) => this._finish(runId, reportJson);
    /** Runs in flight: their id to the function that takes the report. */
    this._runs = new Map();
    this._keepAlive = null;
    this._native = new native.NativeHarness(JSON.stringify(opts), dispatch, abort, approve, finished);
    this._closed = false;
  }

  /** Takes a step `runNow` or `complete` handed back. */
  _step(step) {
    if (step == null) return;
    if (step.call != null) this._callStep(step.call.tool, step.call.args, step.call.key);
    if (step.done != null) this._finish(step.done.runId, step.done.report);
  }

  _finish(runId, reportJson) {
    const take = this._runs.get(runId);
    if (take) {
      this._runs.delete(runId);
      take(reportJson);
    }
    if (this._runs.size === 0 && this._keepAlive != null) {
      clearInterval(this._keepAlive);
      this._keepAlive = null;
    }
  }

  async _dispatch(name, argsJson, key) {
    const tool = this._tools.get(name);
    // The call's AbortController is made when the tool first reads
    // `signal` (already aborted if the call was): most tools never do,
    // and making one costs more than the rest of a call's dispatch.
    const call = { controller: null, reason: null };
    const context = {
      get signal() {
        if (call.controller == null) {
          call.controller = new AbortController();
          if (call.reason != null) call.controller.abort(call.reason);
        }
        return call.controller.signal;
      },
    };
    this._calls.set(key, call);
    try {
      const result = await tool.execute(JSON.parse(argsJson), context);
      return JSON.stringify(result === undefined ? null : result);
    } catch (e) {
      // The harness reports it as ToolExecutionError with this message.
      throw e instanceof Error ? e : new Error(String(e));
    } finally {
      this._calls.delete(key);
    }
  }

  async _approve(requestJson) {
    const request = JSON.parse(requestJson);
    const tool = this._tools.get(request.tool);
    if (tool && typeof tool.needsApproval === 'function') {
      let needed;
      try {
        needed = await tool.needsApproval(request.args);
      } catch {
        needed = true;
      }
      if (!needed) return 'true';
    }
    if (!this._approvals) return 'false';
    try {
      const answer = await this._approvals(request);
      if (answer === SUSPEND) return 'suspend';
      return answer === true ? 'true' : 'false';
    } catch {
      return 'false';
    }
  }

  /**
   * Resumes a suspended run (`report.suspension.continuation`) and
   * resolves to its next report: completed, failed or suspended again.
   * `approve` answers every approval it waits on; `answers` and
   * `failures` give deferred calls their result or error, by call id.
   */
  async resume(continuation, { approve, answers, failures } = {}) {
    if (typeof continuation !== 'string') {
      throw new TypeError('resume takes the continuation string of a report');
    }
    const given = {};
    if (approve != null) given.approve = approve === true;
    if (answers != null) given.answers = answers;
    if (failures != null) given.failures = failures;
    const json = await this._live().resume(continuation, JSON.stringify(given));
    return JSON.parse(json);
  }

  _live() {
    if (this._closed) throw new Error('script-harness: the harness is closed');
    return this._native;
  }

  /**
   * Runs a script (the body of an async function). Resolves to the report
   * (`ok`, `value`, `error`, `console`, `tool_calls`, …); never rejects for
   * a script's own failure.
   */
  async run(code, options = {}) {
    const n = this._live();
    if (typeof code !== 'string') throw new TypeError('code must be a string');
    const runId = nextRunId++;
    const { signal } = options;
    const onAbort = () => n.cancel(runId);
    if (signal) {
      if (signal.aborted) queueMicrotask(onAbort);
      else signal.addEventListener('abort', onAbort, { once: true });
    }
    const report = new Promise((resolve) => this._runs.set(runId, resolve));
    try {
      try {
        this._step(n.runNow(code, runId, JSON.stringify({
          context: options.context,
          timeoutMs: options.timeoutMs,
          language: options.language,
          session: options.session,
        })));
      } catch (e) {
        this._finish(runId, null);
        throw e;
      }
      // Still running: its report comes through `finished`, a thread-safe
      // function that does not keep Node's event loop alive; this does.
      if (this._runs.has(runId) && this._keepAlive == null) {
        this._keepAlive = setInterval(() => {}, 1 << 30);
      }
      return JSON.parse(await report);
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Opens a session: its runs keep what their top level declared (`const`,
   * `let`, `var`, `function`, `class`) for the session's later runs, and no
   * other run sees any of it. Runs of a closed or expired session report
   * `SessionClosedError`.
   */
  openSession() {
    return new Session(this, this._live().openSession());
  }

  /** Checks syntax and banned identifiers; resolves to null or the error. */
  async check(code) {
    const r = await this._live().check(code);
    return r == null ? null : JSON.parse(r);
  }

  /** The TypeScript declarations of `tools`, `context` and `console`. */
  typescript() {
    return this._live().typescript();
  }

  /** Runs the `<tool-calls>` blocks of a model response; resolves to the items. */
  async respond(text, options = {}) {
    return JSON.parse(await this._live().respond(text, options.format ?? 'items'));
  }

  /** Cancels every run and releases the engine and the callbacks. */
  close() {
    if (this._closed) return;
    this._closed = true;
    this._native.close();
    for (const c of this._calls.values()) abortCall(c, 'the harness was closed');
    this._calls.clear();
  }

  async [Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose')]() {
    this.close();
  }
}

/** A session of a Harness (`harness.openSession()`). */
class Session {
  constructor(harness, id) {
    this._harness = harness;
    /** The id the harness drew: 32 hex digits. */
    this.id = id;
  }

  /** `harness.run` in this session. */
  run(code, options = {}) {
    return this._harness.run(code, { ...options, session: this.id });
  }

  /** Closes the session (its state is gone); false if it was not open. */
  close() {
    return this._harness._live().closeSession(this.id);
  }

  [Symbol.dispose ?? Symbol.for('Symbol.dispose')]() {
    this.close();
  }
}

module.exports = { Harness, Session, ErrorCode, SUSPEND };
