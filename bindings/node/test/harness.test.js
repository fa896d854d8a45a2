'use strict';
// node --test bindings/node/test/ — the package against its native addon.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Harness, Session, ErrorCode } = require('..');

const add = {
  description: 'Adds two numbers',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'], additionalProperties: false },
  execute: async ({ a, b }) => ({ sum: a + b }),
};

test('runs a script with JavaScript tools, many calls at once', async () => {
  const h = new Harness({ tools: { add } });
  const r = await h.run('const rs = await Promise.all([1, 2, 3, 4].map(i => tools.add({a: i, b: 10}))); return rs.map(r => r.sum)');
  assert.equal(r.ok, true, JSON.stringify(r.error));
  assert.deepEqual(r.value, [11, 12, 13, 14]);
  assert.equal(r.tool_calls.length, 4);
  const bad = await h.run('try { await tools.add({a: 1}) } catch (e) { return e.code }');
  assert.equal(bad.value, ErrorCode.ToolValidationError);
  h.close();
});

test('a tool that throws is a ToolExecutionError with its message', async () => {
  const h = new Harness({ tools: { boom: { execute: () => { throw new Error('disk on fire'); } } } });
  const r = await h.run('try { await tools.boom({}) } catch (e) { return [e.code, e.message] }');
  assert.equal(r.value[0], 'ToolExecutionError');
  assert.match(r.value[1], /disk on fire/);
  const uncaught = await h.run('await tools.boom({})');
  assert.equal(uncaught.ok, false);
  assert.equal(uncaught.error.code, 'ToolExecutionError');
  h.close();
});

test('approvals: the callback, and needsApproval as a function', async () => {
  const asked = [];
  const h = new Harness({
    tools: {
      rm: { needsApproval: true, execute: () => 'removed' },
      write: { needsApproval: (args) => args.path.startsWith('/etc'), execute: () => 'written' },
    },
    approvals: async (req) => { asked.push(req); return req.args.ok === true; },
  });
  const r = await h.run(`
    const a = await tools.rm({ok: true});
    let b; try { await tools.rm({ok: false}) } catch (e) { b = e.code }
    const c = await tools.write({path: '/tmp/x'});
    let d; try { await tools.write({path: '/etc/x'}) } catch (e) { d = e.code }
    return [a, b, c, d]`);
  assert.deepEqual(r.value, ['removed', 'ApprovalDeniedError', 'written', 'ApprovalDeniedError']);
  assert.equal(asked.length, 3);
  assert.equal(asked[0].tool, 'rm');
  assert.equal(asked[0].line, 2);
  // Without a callback, approvals are denied.
  const strict = new Harness({ tools: { rm: { needsApproval: true, execute: () => 'x' } } });
  const s = await strict.run('try { await tools.rm({}) } catch (e) { return e.code }');
  assert.equal(s.value, 'ApprovalDeniedError');
  h.close();
  strict.close();
});

test('an AbortSignal cancels the run, and the tool call is aborted', async () => {
  let aborted = false;
  const h = new Harness({
    tools: {
      slow: {
        execute: (_args, { signal }) => new Promise((resolve) => {
          const t = setTimeout(() => resolve('late'), 10_000);
          signal.addEventListener('abort', () => { aborted = true; clearTimeout(t); resolve('aborted'); });
        }),
      },
    },
  });
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 150);
  const started = Date.now();
  const r = await h.run('console.log("before"); return await tools.slow({})', { signal: ac.signal });
  assert.equal(r.error.code, 'ScriptCancelledError');
  assert.ok(Date.now() - started < 5000);
  assert.equal(r.console[0].text, 'before');
  await new Promise((res) => setTimeout(res, 50));
  assert.ok(aborted, 'the tool saw its signal abort');
  h.close();
});

test('a tool that reads its signal only after the call was aborted finds it aborted', async () => {
  let seen = null;
  let settle;
  const read = new Promise((res) => { settle = res; });
  const h = new Harness({
    tools: {
      late: {
        execute: async (_args, context) => {
          await new Promise((res) => setTimeout(res, 300));
          seen = { aborted: context.signal.aborted, reason: String(context.signal.reason) };
          settle();
          return 1;
        },
      },
    },
  });
  const r = await h.run('return await tools.late({})', { timeoutMs: 100 });
  assert.equal(r.error.code, 'ScriptTimeoutError');
  await read;
  assert.deepEqual(seen, { aborted: true, reason: 'Error: the script no longer needs this call' });
  h.close();
});

test('a runaway script stops at its deadline while Node keeps serving timers', async () => {
  const h = new Harness();
  let ticks = 0;
  const iv = setInterval(() => ticks++, 10);
  const started = Date.now();
  const r = await h.run('while (true) {}', { timeoutMs: 200 });
  const elapsed = Date.now() - started;
  clearInterval(iv);
  assert.equal(r.error.code, 'ScriptTimeoutError');
  assert.ok(elapsed >= 190 && elapsed < 2000, `ended after ${elapsed} ms`);
  assert.ok(ticks >= 10, `the interval ticked ${ticks} times`);
  h.close();
});

test('a run that outlasts runNow keeps Node alive until its report, and then lets it exit', () => {
  // A child whose only work is the run: its report comes through a
  // thread-safe function after runNow returned.
  const { execFileSync } = require('node:child_process');
  const child = `const { Harness } = require(${JSON.stringify(require.resolve('..'))});
    const h = new Harness();
    h.run('const t = Date.now(); while (Date.now() - t < 200) {} return 5').then((r) => console.log('value', r.value));`;
  const started = Date.now();
  const out = execFileSync(process.execPath, ['-e', child], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(out.trim(), 'value 5');
  assert.ok(Date.now() - started < 20_000, 'the child exited once the run had answered');
});

test('runs answered on Node\'s thread and later ones mix: long scripts, awaits, errors, in order', async () => {
  const wait = { execute: () => new Promise((resolve) => setTimeout(() => resolve(2), 20)) };
  const h = new Harness({ tools: { add, wait }, limits: { maxSourceBytes: 256 * 1024 } });
  // Over 64 KiB: never polled on Node's thread.
  const long = `/*${' '.repeat(70 * 1024)}*/ return (await tools.add({a: 1, b: 2})).sum`;
  const scripts = [
    ['return 1', 1],
    [long, 3],
    ['return await tools.wait({})', 2],
    ['return (await tools.add({a: 2, b: 2})).sum', 4],
    ['const t = Date.now(); while (Date.now() - t < 5) {} return 6', 6],
  ];
  for (let round = 0; round < 20; round++) {
    for (const [code, want] of scripts) assert.equal((await h.run(code)).value, want);
    const all = await Promise.all(scripts.map(([code]) => h.run(code)));
    assert.deepEqual(all.map((r) => r.value), scripts.map(([, want]) => want));
  }
  assert.equal((await h.run('null.x')).error.code, 'ScriptRuntimeError');
  h.close();
});

test('200 concurrent runs', async () => {
  const h = new Harness({ tools: { add } });
  const runs = Array.from({ length: 200 }, (_, i) => h.run(`return (await tools.add({a: ${i}, b: 1})).sum`));
  const reports = await Promise.all(runs);
  reports.forEach((r, i) => assert.equal(r.value, i + 1));
  h.close();
});

test('errors carry the documented codes; check, typescript, context', async () => {
  const h = new Harness({ tools: { add } });
  assert.equal((await h.run('null.x')).error.code, 'ScriptRuntimeError');
  assert.equal((await h.run('return (')).error.code, 'ScriptSyntaxError');
  assert.equal((await h.run('return tools.nope()')).error.code, 'ToolNotFoundError');
  assert.equal(await h.check('return 1'), null);
  const e = await h.check('let = ;');
  assert.equal(e.code, 'ScriptSyntaxError');
  assert.match(h.typescript(), /add\(args: \{/);
  const c = await h.run('return [context.turnId, context.model]', { context: { turnId: 't1', model: 'm' } });
  assert.deepEqual(c.value, ['t1', 'm']);
  const ts = await h.run('const n: number = 41; return n + 1', { language: 'ts' });
  assert.equal(ts.value, 42);
  h.close();
  await assert.rejects(() => h.run('return 1'), /closed/);
});

test('respond runs the blocks of a model response', async () => {
  const h = new Harness({ tools: { add } });
  const text = 'Let me add.\n<tool-calls>\nreturn (await tools.add({a: 2, b: 3})).sum\n</tool-calls>';
  const items = await h.respond(text, { format: 'openai-responses' });
  assert.equal(items[0].type, 'message');
  const output = items.find((i) => i.type === 'function_call_output');
  assert.equal(JSON.parse(output.output).output, 5, output.output);
  const native = await h.respond(text);
  assert.ok(native.length >= 2);
  h.close();
});

test('memory stays flat over 5,000 runs', async () => {
  const h = new Harness({ tools: { add } });
  const batch = async (n) => { for (let i = 0; i < n; i++) await h.run('return (await tools.add({a: 1, b: 2})).sum'); };
  await batch(500);
  global.gc?.();
  const before = process.memoryUsage().rss;
  await batch(4500);
  global.gc?.();
  const grown = (process.memoryUsage().rss - before) / (1024 * 1024);
  assert.ok(grown < 40, `RSS grew ${grown.toFixed(1)} MiB over 4,500 runs`);
  h.close();
});

test('a tool answer that is no JSON, or an error whose message is no string, fails the call, not Node', async () => {
  const h = new Harness({
    tools: {
      fn: { execute: () => () => 1 },
      odd: { execute: () => { const e = new Error('x'); e.message = { not: 'a string' }; throw e; } },
    },
  });
  const r = await h.run('const out = []; for (const t of [tools.fn, tools.odd]) { try { await t({}); out.push("ok") } catch (e) { out.push(e.code) } } return out');
  assert.deepEqual(r.value, ['ToolExecutionError', 'ToolExecutionError']);
  h.close();
});

test('calls one after another (handed to Node straight from complete) are answered in order, failing, aborted or after a pause', async () => {
  let n = 0;
  let aborted = 0;
  const h = new Harness({
    tools: {
      next: { execute: async () => ++n },
      fail: { execute: async () => { throw new Error('no'); } },
      slow: {
        execute: (_, { signal }) => new Promise((resolve, reject) => {
          const t = setTimeout(() => resolve('slow'), 5000);
          signal.addEventListener('abort', () => { aborted++; clearTimeout(t); reject(signal.reason); });
        }),
      },
    },
    limits: { maxToolCalls: 500 },
  });
  // The pause is longer than complete's wait for the next call, so those
  // calls come through dispatch instead.
  const r = await h.run(`const out = [];
    for (let i = 0; i < 50; i++) {
      out.push(await tools.next({}));
      try { await tools.fail({}) } catch (e) { out.push(e.code) }
      if (i % 10 === 0) { const t = Date.now(); while (Date.now() - t < 2) {} }
      if (i % 25 === 0) out.push(await Promise.race([tools.slow({}), tools.next({})]));
    }
    return out`);
  assert.equal(r.ok, true, JSON.stringify(r.error));
  const want = [];
  let m = 0;
  for (let i = 0; i < 50; i++) {
    want.push(++m, 'ToolExecutionError');
    if (i % 25 === 0) want.push(++m);
  }
  assert.deepEqual(r.value, want);
  assert.equal(r.tool_calls.filter((c) => c.status === 'cancelled').length, 2);
  // The aborts reach the tools (through abort, a thread-safe function).
  for (let i = 0; i < 100 && aborted < 2; i++) await new Promise((res) => setTimeout(res, 10));
  assert.equal(aborted, 2);
  // Runs back to back, each ending while complete may wait for a call.
  for (let i = 0; i < 20; i++) {
    const s = await h.run('return (await tools.next({})) > 0');
    assert.equal(s.value, true);
  }
  h.close();
});

test('keepWarmMs: runs a few ms apart answer as before, and a bad value is refused by name', async () => {
  const h = new Harness({ tools: { add }, keepWarmMs: 20 });
  for (let i = 0; i < 5; i++) {
    const r = await h.run(`return (await tools.add({a: ${i}, b: 1})).sum`);
    assert.equal(r.value, i + 1, JSON.stringify(r.error));
    await new Promise((resolve) => setTimeout(resolve, 3));
  }
  h.close();
  for (const bad of [-1, 1.5, '20']) {
    assert.throws(() => new Harness({ keepWarmMs: bad }), /keep_warm_ms/);
  }
});

test('anticipate: steady runs answer as before, and a bad value is refused by name', async () => {
  for (const anticipate of [undefined, false]) {
    const h = new Harness({ tools: { add }, anticipate });
    for (let i = 0; i < 12; i++) {
      const r = await h.run(`return (await tools.add({a: ${i}, b: 2})).sum`);
      assert.equal(r.value, i + 2, JSON.stringify(r.error));
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    h.close();
  }
  for (const bad of [1, 'false']) {
    assert.throws(() => new Harness({ anticipate: bad }), /anticipate/);
  }
});

test('keepWarmAwake: runs a few ms apart answer as before, and a bad value is refused by name', async () => {
  const h = new Harness({ tools: { add }, keepWarmMs: 20, keepWarmAwake: true });
  for (let i = 0; i < 5; i++) {
    const r = await h.run(`return (await tools.add({a: ${i}, b: 1})).sum`);
    assert.equal(r.value, i + 1, JSON.stringify(r.error));
    await new Promise((resolve) => setTimeout(resolve, 3));
  }
  h.close();
  for (const bad of [1, 'true']) {
    assert.throws(() => new Harness({ keepWarmMs: 20, keepWarmAwake: bad }), /keep_warm_awake/);
  }
});

test('a session keeps its declarations for its own runs only', async () => {
  const h = new Harness();
  const a = h.openSession();
  assert.ok(a instanceof Session);
  assert.match(a.id, /^[0-9a-f]{32}$/);
  assert.equal((await a.run('const data = [1, 2, 3]; return data.length')).value, 3);
  assert.deepEqual((await a.run('return data.map(x => x * 2)')).value, [2, 4, 6]);
  const b = h.openSession();
  assert.equal((await b.run('return typeof data')).value, 'undefined');
  assert.equal((await h.run('return typeof data')).value, 'undefined');
  assert.equal(a.close(), true);
  assert.equal(a.close(), false);
  const closed = await a.run('return data');
  assert.equal(closed.error.code, ErrorCode.SessionClosedError);
  const stranger = await h.run('return 1', { session: '0123456789abcdef0123456789abcdef' });
  assert.equal(stranger.error.code, ErrorCode.SessionClosedError);
  b.close();
  h.close();
});

test('a run suspends on an approval and a deferred tool, and resumes in another harness', async () => {
  const { SUSPEND } = require('..');
  const sent = [];
  const make = () => new Harness({
    engine: 'wasi',
    tools: {
      send: { needsApproval: true, execute: ({ to }) => { sent.push(to); return { sent: to }; } },
      ask: { deferred: true, description: 'asks a person' },
    },
    approvals: () => SUSPEND,
    suspend: { keys: ['5a'.repeat(32)] },
  });
  const a = make();
  const b = make();
  try {
    const r = await a.run("const who = await tools.ask({q: 'to?'}); return await tools.send({to: who})");
    assert.equal(r.ok, false);
    assert.equal(r.error, null);
    assert.equal(r.suspension.pending[0].kind, 'deferred');
    const r2 = await b.resume(r.suspension.continuation, { answers: { 1: 'ada' } });
    assert.equal(r2.suspension.pending[0].tool, 'send');
    assert.deepEqual(sent, []);
    const done = await a.resume(r2.suspension.continuation, { approve: true });
    assert.deepEqual(done.value, { sent: 'ada' });
    assert.deepEqual(sent, ['ada']);
    const twice = await a.resume(r2.suspension.continuation, { approve: true });
    assert.equal(twice.error.code, ErrorCode.ContinuationInvalidError);
    const quick = new Harness({ suspend: { keys: ['5a'.repeat(32)] } });
    assert.equal((await quick.run('return 1')).error.code, ErrorCode.UnsupportedError);
    quick.close();
  } finally {
    a.close();
    b.close();
  }
});
