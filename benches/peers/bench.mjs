// The peer our benches compare against: QuickJS run through
// quickjs-emscripten, the way the TypeScript harnesses this project
// replaces run it. Same workloads and the same timing method as
// `benches/src/bin/compare.rs` (see benches/README.md).
//
//   node bench.mjs [--json] [--iters N] [--warmup-ms N] [--gap-ms N] [--only NAME]
//   node bench.mjs --in-process [--script-harness PATH] [...]   (ours beside the peer, one process)
//   node bench.mjs --in-process --split   (where a trivial run of ours spends its time)
//
// Every run is what a harness does per script: a fresh runtime with a
// memory limit, a stack limit and an interrupt deadline, a fresh context
// with `console` and `tools`, the script wrapped in an async function,
// its promise settled, the result dumped to JSON, everything disposed.
// The `reused` rows are the peer at its best: one context kept for every
// run (no isolation between runs), a fresh deadline each.
// The WebAssembly modules are loaded once, as a server would.

import {
  newQuickJSAsyncWASMModule,
  newQuickJSWASMModule,
  shouldInterruptAfterDeadline,
} from "quickjs-emscripten";
import { createRequire } from "node:module";
import os from "node:os";

const MIB = 1024 * 1024;
// Our defaults (docs/configuration.md): 96 MiB, 512 KiB of stack, 30 s.
const MEMORY_BYTES = 96 * MIB;
const STACK_BYTES = 512 * 1024;
const TIMEOUT_MS = 30_000;

const args = process.argv.slice(2);
const flag = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const JSON_OUT = args.includes("--json");
const ITERS = Number(flag("--iters", "300"));
const WARMUP_MS = Number(flag("--warmup-ms", "500"));
// Idle time before each timed run (not timed), as in `compare --gap-ms`.
const GAP_MS = Number(flag("--gap-ms", "0"));
const ONLY = flag("--only", null);

// The host tool: returns its arguments, asynchronously, as a real tool would.
const echoTool = async (a) => a;

/** Sets up one run: runtime, limits, context, console, tools. */
function open(module) {
  const runtime = module.newRuntime();
  runtime.setMemoryLimit(MEMORY_BYTES);
  runtime.setMaxStackSize(STACK_BYTES);
  runtime.setInterruptHandler(shouldInterruptAfterDeadline(Date.now() + TIMEOUT_MS));
  const ctx = runtime.newContext();
  const console_ = ctx.newObject();
  const log = ctx.newFunction("log", (...a) => {
    lines.push(a.map((h) => ctx.dump(h)).join(" "));
  });
  ctx.setProp(console_, "log", log);
  ctx.setProp(ctx.global, "console", console_);
  log.dispose();
  console_.dispose();
  return { runtime, ctx };
}
let lines = [];

/**
 * `tools.echo(args)` returns a promise the host settles when the tool is
 * done (the deferred-promise pattern: real concurrency for Promise.all).
 */
function installPromiseTools(runtime, ctx) {
  const raw = ctx.newFunction("__echo", (argJson) => {
    const deferred = ctx.newPromise();
    const input = JSON.parse(ctx.getString(argJson));
    echoTool(input).then((out) => {
      const s = ctx.newString(JSON.stringify(out));
      deferred.resolve(s);
      s.dispose();
      deferred.dispose();
      runtime.executePendingJobs();
    });
    return deferred.handle;
  });
  ctx.setProp(ctx.global, "__echo", raw);
  raw.dispose();
  ctx.unwrapResult(
    ctx.evalCode(
      "globalThis.tools = { echo: (a) => __echo(JSON.stringify(a)).then(JSON.parse) };",
    ),
  ).dispose();
}

/**
 * `tools.echoSync(args)` suspends the whole VM while the host awaits the
 * tool (asyncify): only for scripts written without `await`, because an
 * asyncified function cannot run from the job queue.
 */
function installAsyncifiedTools(ctx) {
  const raw = ctx.newAsyncifiedFunction("__echo", async (argJson) => {
    const out = await echoTool(JSON.parse(ctx.getString(argJson)));
    return ctx.newString(JSON.stringify(out));
  });
  ctx.setProp(ctx.global, "__echo", raw);
  raw.dispose();
  ctx.unwrapResult(
    ctx.evalCode("globalThis.tools = { echoSync: (a) => JSON.parse(__echo(JSON.stringify(a))) };"),
  ).dispose();
}

/**
 * The peer at its best: one runtime and context per module and tool kind,
 * made once and kept for every run (`reused` rows), as a harness that
 * gives up isolation between runs for speed would; each run gets a fresh
 * deadline.
 */
const keptContexts = new Map();
function keptContext(module, tools) {
  const key = `${module === syncModule ? "sync" : "async"}/${tools ?? "none"}`;
  let kept = keptContexts.get(key);
  if (!kept) {
    kept = open(module);
    if (tools === "promise") installPromiseTools(kept.runtime, kept.ctx);
    if (tools === "asyncify") installAsyncifiedTools(kept.ctx);
    keptContexts.set(key, kept);
  }
  kept.runtime.setInterruptHandler(shouldInterruptAfterDeadline(Date.now() + TIMEOUT_MS));
  return kept;
}

/** Runs `body` as the body of an async function and returns its value. */
async function runScript(module, body, tools, reuse) {
  lines = [];
  const { runtime, ctx } = reuse ? keptContext(module, tools) : open(module);
  try {
    if (!reuse && tools === "promise") installPromiseTools(runtime, ctx);
    if (!reuse && tools === "asyncify") installAsyncifiedTools(ctx);
    const code = `(async () => {\n${body}\n})()`;
    const evaluated =
      tools === "asyncify" ? await ctx.evalCodeAsync(code, "script.js") : ctx.evalCode(code, "script.js");
    const promise = ctx.unwrapResult(evaluated);
    const settled = ctx.resolvePromise(promise);
    promise.dispose();
    runtime.executePendingJobs();
    const result = ctx.unwrapResult(await settled);
    const value = ctx.dump(result);
    result.dispose();
    return JSON.stringify(value);
  } finally {
    if (!reuse) {
      ctx.dispose();
      runtime.dispose();
    }
  }
}

// The workloads, named as in `compare`. `script` is exactly our bench's
// script (benches/src/lib.rs); the asyncify rows need a script without
// `await` and say so in their name.
const sequential = (n) =>
  `let last; for (let i = 0; i < ${n}; i++) last = await tools.echo({i}); return last.i`;
const sequentialSync = (n) =>
  `let last; for (let i = 0; i < ${n}; i++) last = tools.echoSync({i}); return last.i`;
const parallel = (n) =>
  `const r = await Promise.all(Array.from({length: ${n}}, (_, i) => tools.echo({i}))); return r.length`;

const polyfill =
  "Array.prototype.last = function () { return this[this.length - 1]; }; return [1, 2].last()";

const syncModule = await newQuickJSWASMModule();
const asyncModule = await newQuickJSAsyncWASMModule();

const workloads = [
  { name: "trivial", config: "quickjs-emscripten", module: syncModule, script: "return 1+1", expect: "2" },
  { name: "trivial", config: "quickjs-emscripten/async", module: asyncModule, script: "return 1+1", expect: "2" },
  { name: "trivial", config: "quickjs-emscripten/reused", module: syncModule, script: "return 1+1", expect: "2", reuse: true },
  { name: "polyfill", config: "quickjs-emscripten", module: syncModule, script: polyfill, expect: "2" },
  // Promise tools on a fresh context per run, then on one kept for every run.
  ...[false, true].flatMap((reuse) =>
    [1, 10, 100].map((n) => ({
      name: `sequential_${n}`,
      config: reuse ? "quickjs-emscripten/async,reused" : "quickjs-emscripten/async",
      module: asyncModule,
      tools: "promise",
      script: sequential(n),
      expect: String(n - 1),
      reuse,
    })),
  ),
  ...[1, 10, 100].map((n) => ({
    name: `sequential_${n}`,
    config: "quickjs-emscripten/asyncify",
    module: asyncModule,
    tools: "asyncify",
    script: sequentialSync(n),
    expect: String(n - 1),
  })),
  {
    name: "promise_all_32",
    config: "quickjs-emscripten/async",
    module: asyncModule,
    tools: "promise",
    script: parallel(32),
    expect: "32",
  },
];

// Untimed runs at the timed runs' pace after the warm-up, with a gap: as
// `compare`'s SETTLE, so that both sides time a steady pace, not the
// change from the back-to-back warm-up to it.
const SETTLE = 16;

/** Warm up for WARMUP_MS (then SETTLE runs at the pace), then time ITERS runs of `once` one by one (µs, sorted). */
async function sample(once) {
  const until = performance.now() + WARMUP_MS;
  while (performance.now() < until) await once();
  for (let i = 0; GAP_MS > 0 && i < SETTLE; i++) {
    await new Promise((r) => setTimeout(r, GAP_MS));
    await once();
  }
  const samples = [];
  for (let i = 0; i < ITERS; i++) {
    if (GAP_MS > 0) await new Promise((r) => setTimeout(r, GAP_MS));
    const t = process.hrtime.bigint();
    await once();
    samples.push(Number(process.hrtime.bigint() - t) / 1e3);
  }
  return samples.sort((a, b) => a - b);
}

/** One workload on the peer: median, p90, mean. */
async function measure(w) {
  const samples = await sample(async () => {
    const got = await runScript(w.module, w.script, w.tools, w.reuse);
    if (got !== w.expect) throw new Error(`${w.config} ${w.name}: got ${got}, want ${w.expect}`);
  });
  const q = (p) => samples[Math.floor((samples.length - 1) * p)];
  const mean = samples.reduce((s, x) => s + x, 0) / samples.length;
  // `samples_us`: every timed run, sorted, so that `compare --rounds`
  // can pool the peer's rounds as it pools ours.
  return {
    workload: w.name,
    config: w.config,
    iters: ITERS,
    median_us: q(0.5),
    p90_us: q(0.9),
    mean_us: mean,
    samples_us: samples,
  };
}

const require = createRequire(import.meta.url);
const version = require("quickjs-emscripten/package.json").version;

// --in-process: the same Node process runs each workload on
// quickjs-emscripten (as above) and on the npm package script-harness
// (bindings/node, or --script-harness PATH), and prints them with the
// ratio (the faster peer configuration's median / ours: above 1 means
// script-harness is faster).
if (args.includes("--in-process")) {
  const path = flag("--script-harness", new URL("../../bindings/node/index.js", import.meta.url).pathname);
  const { Harness } = require(path);
  // As the criterion benches (benches/src/lib.rs): enough calls for sequential_100.
  const harness = new Harness({ tools: { echo: { execute: echoTool } }, limits: { maxToolCalls: 1000 } });
  const cpu = "let s = 0; for (let i = 0; i < 1000000; i++) s += i; return s";
  const rows = [
    { name: "trivial", script: "return 1+1", expect: "2" },
    ...[1, 10, 100].map((n) => ({ name: `sequential_${n}`, tools: "promise", script: sequential(n), expect: String(n - 1) })),
    { name: "promise_all_32", tools: "promise", script: parallel(32), expect: "32" },
    { name: "cpu_loop_1e6", script: cpu, expect: "499999500000" },
  ];
  const ours = async (w) => {
    const r = await harness.run(w.script);
    const got = JSON.stringify(r.value);
    if (got !== w.expect) throw new Error(`script-harness ${w.name}: got ${got} (${JSON.stringify(r.error)})`);
  };
  // The peer twice: a fresh runtime and context per run (what isolation
  // costs it), and one kept for every run with its tools installed once
  // (the peer at its best). Ratios are against the faster of the two.
  const peer = (reuse) => async (w) => {
    const got = await runScript(asyncModule, w.script, w.tools, reuse);
    if (got !== w.expect) throw new Error(`quickjs-emscripten ${w.name}: got ${got}`);
  };
  const time = async (once) => {
    const samples = await sample(once);
    return samples[Math.floor((samples.length - 1) * 0.5)];
  };
  // --split: where a trivial run's time goes, beside `split` (the same
  // run from Rust): the whole `harness.run`; the native call alone, from
  // `runNow` to the report's JSON in hand; parsing that JSON; and the
  // time inside the engine's event loop (the report's duration_ms).
  if (args.includes("--split")) {
    const code = "return 1+1";
    const inside = [];
    const full = await time(async () => {
      const r = await harness.run(code);
      inside.push(r.metrics.duration_ms * 1e3);
    });
    let id = 1 << 30;
    let text = "";
    // What `harness.run` does for a run still going: keep Node alive.
    const hold = setInterval(() => {}, 1 << 30);
    const native = await time(async () => {
      const runId = id++;
      const done = new Promise((resolve) => harness._runs.set(runId, resolve));
      harness._step(harness._native.runNow(code, runId, "{}"));
      text = await done;
    });
    clearInterval(hold);
    const parse = await time(async () => JSON.parse(text));
    inside.sort((a, b) => a - b);
    const row = { full_us: full, native_us: native, parse_us: parse, inside_us: inside[Math.floor(inside.length / 2)] };
    console.log(JSON_OUT ? JSON.stringify({ split: row }) : `trivial run, medians (µs): harness.run ${full.toFixed(1)}; native runNow to report JSON ${native.toFixed(1)}; JSON.parse of the report ${parse.toFixed(1)}; inside the event loop ${row.inside_us.toFixed(1)} (compare: target/release/examples/split 0 for Rust's wall)`);
    harness.close();
    process.exit(0);
  }
  const table = [];
  for (const w of rows) {
    if (ONLY && w.name !== ONLY) continue;
    const fresh = await time(() => peer(false)(w));
    const reused = await time(() => peer(true)(w));
    const o = await time(() => ours(w));
    const best = Math.min(fresh, reused);
    table.push({
      workload: w.name,
      peer_median_us: fresh,
      peer_reused_median_us: reused,
      ours_median_us: o,
      ratio: best / o,
      ratio_fresh: fresh / o,
    });
  }
  harness.close();
  if (JSON_OUT) {
    console.log(JSON.stringify({ meta: { peer: "quickjs-emscripten", version, node: process.version, gap_ms: GAP_MS, iters: ITERS }, in_process: table }));
  } else {
    console.log(`in one Node process (${process.version}), ${ITERS} runs each${GAP_MS ? `, ${GAP_MS} ms apart` : ", back to back"}: quickjs-emscripten ${version} (fresh: a runtime and context per run; reused: one kept for every run, tools installed once) vs script-harness`);
    console.log(`ratio: the faster quickjs-emscripten median / script-harness's (above 1: script-harness is faster)`);
    console.log(`| workload | quickjs-emscripten fresh | quickjs-emscripten reused | script-harness | ratio |`);
    console.log(`|---|---:|---:|---:|---:|`);
    for (const r of table) {
      console.log(
        `| ${r.workload} | ${r.peer_median_us.toFixed(1)} µs | ${r.peer_reused_median_us.toFixed(1)} µs | ${r.ours_median_us.toFixed(1)} µs | ${r.ratio.toFixed(2)}× |`,
      );
    }
  }
  process.exit(0);
}

const results = [];
for (const w of workloads) {
  if (ONLY && w.name !== ONLY) continue;
  results.push(await measure(w));
}

if (JSON_OUT) {
  const meta = { peer: "quickjs-emscripten", version, node: process.version, cpu: os.cpus()[0]?.model };
  console.log(JSON.stringify({ meta, results }));
} else {
  console.log(`quickjs-emscripten ${version} on node ${process.version}, ${ITERS} runs each`);
  for (const r of results) {
    console.log(
      `${r.workload.padEnd(16)} ${r.config.padEnd(28)} median ${r.median_us.toFixed(1).padStart(9)} µs  p90 ${r.p90_us.toFixed(1).padStart(9)} µs`,
    );
  }
}
