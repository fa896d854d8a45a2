// Hardening prelude, shared by every engine. Evaluated once in each fresh
// context before user code. Its value is a function the adapter calls as
// `harden(host)`; `host(op, a, b)` is the one native function an adapter
// provides (all arguments are strings, it returns a string). `harden`
// returns `install(configJson, keepStatic)`, which sets up one run and returns
// { start(fn), settle(id, ok, payload), end(list) } (`keepStatic`: see
// `install`, at the end). Hardening does not depend
// on the run, so an engine may harden a fresh context ahead of time and
// install when the request arrives.
//
// A context may serve many runs, one after another: `end()` closes a run
// (the host is no longer reachable, the globals `tools`, `context` and
// `console` read `undefined` until the next install) and answers whether
// the run left nothing behind (no tool call or task still pending); only
// then may the engine install the next run in it. What makes that safe is
// that nothing a script can reach is writable: the global object is
// frozen, and every object reachable from it or from syntax is frozen,
// found by walking (section 4); `tools` and `context`, kept between runs
// with the same static configuration, are frozen too. docs/security.md
// ("Between runs") lists the channels and why each is closed.
//
// Order matters: primordials are captured first, the global surface is
// trimmed, code generation from strings is blocked, intrinsics are frozen,
// and only then are `tools`, `context` and `console` installed.
//
// `harden(host, unfrozen)`: `unfrozen === true` leaves the intrinsics as
// they are (no pinned globals, no taming, no freezing) and hardens the
// rest. Such a context is a private realm: it serves one run at most (a
// second `install` throws; the adapter drops it after the run); `install`
// still seals its global object. Adapters make one for a run whose script
// may change a built-in (`Realm::Private`, docs/security.md), and
// test262's runner for global code.
//
// `harden(host, 'session')` makes a session's realm: the intrinsics are
// left open as in a private realm, the global object is not sealed (the
// session's top-level declarations live on it), and `install` may be
// called once per run for as long as the session lasts. `start` hands a
// session's script its scope (`__harness_session`: what core's
// session.rs makes a run's declarations call) as the only argument.
(function (host, unfrozen) {
  'use strict';
  const G = globalThis;
  const inSession = unfrozen === 'session';
  if (inSession) unfrozen = true;
  const O = Object;
  const freeze = O.freeze;
  const isFrozen = O.isFrozen;
  const getPrototypeOf = O.getPrototypeOf;
  const defineProperty = O.defineProperty;
  const getOwnPropertyDescriptor = O.getOwnPropertyDescriptor;
  const hasOwn = O.prototype.hasOwnProperty;
  const objectIs = O.is;
  const create = O.create;
  const keys = O.keys;
  const apply = Reflect.apply;
  const jsonStringify = JSON.stringify;
  const jsonParse = JSON.parse;
  const isArray = Array.isArray;
  const arrayFrom = Array.from;
  const arrayJoin = Array.prototype.join;
  const arrayPush = Array.prototype.push;
  const PromiseCtor = Promise;
  const promiseThen = Promise.prototype.then;
  const promiseReject = Promise.reject.bind(Promise);
  const promiseResolve = Promise.resolve.bind(Promise);
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const StringCtor = String;
  const NumberCtor = Number;
  const ProxyCtor = Proxy;
  const MapCtor = Map;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapDelete = Map.prototype.delete;
  const weakMapGet = WeakMap.prototype.get;
  const weakMapSet = WeakMap.prototype.set;
  const origRace = Promise.race;
  const origAny = Promise.any;
  const reExec = RegExp.prototype.exec;
  const stringIndexOf = String.prototype.indexOf;
  const stringSlice = String.prototype.slice;
  const isView = ArrayBuffer.isView;
  const DataViewCtor = DataView;
  const SetCtor = Set;
  const mapForEach = Map.prototype.forEach;
  const setForEach = Set.prototype.forEach;
  const setHas = Set.prototype.has;
  const setAdd = Set.prototype.add;
  const setDelete = Set.prototype.delete;
  const ObjectProto = Object.prototype;
  const ownKeys = Reflect.ownKeys;
  const imul = Math.imul;
  const nativeRandom = Math.random;
  const parseIntFn = parseInt;
  const getOwnPropertyDescriptors = O.getOwnPropertyDescriptors;
  const fnBind = Function.prototype.bind;
  const stringToWellFormed = String.prototype.toWellFormed;
  const stringReplace = String.prototype.replace;
  const loneSurrogates = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
  const fnCall = Function.prototype.call;
  // `f` as a function of its receiver and then its arguments, bound now to
  // the originals: a call reads nothing a script can change, and costs what
  // a method call costs (`apply` with an argument array costs over twice as
  // much on QuickJS). For what each run does; hardening uses `apply`.
  function uncurry(f) { return apply(fnBind, fnCall, [f]); }
  const thenOf = uncurry(promiseThen);
  const push = uncurry(arrayPush);
  const join = uncurry(arrayJoin);
  const mapGetIn = uncurry(mapGet);
  const mapSetIn = uncurry(mapSet);
  const mapEach = uncurry(mapForEach);
  const setEach = uncurry(setForEach);
  const setHasIn = uncurry(setHas);
  const setAddTo = uncurry(setAdd);
  const setDeleteFrom = uncurry(setDelete);
  const weakMapGetIn = uncurry(weakMapGet);
  const weakMapSetIn = uncurry(weakMapSet);
  const mapDeleteIn = uncurry(mapDelete);
  const owns = uncurry(hasOwn);
  const exec = uncurry(reExec);
  const toWellFormed = stringToWellFormed === undefined ? undefined : uncurry(stringToWellFormed);

  // What the harness knows of each error it made (code, tool, call id):
  // the error's own properties are the script's to change, this is not.
  const hostErrors = new WeakMap();
  const toolPromises = new WeakMap();
  // The installed run (its globals, pending calls and host access), or
  // null between runs.
  let active = null;

  // An error made by the harness: its code, tool and call id are reported
  // from the record kept here, never from the error's properties, which a
  // script could rewrite before rethrowing it.
  function hostError(code, message, tool, callId, stderr) {
    const e = new ErrorCtor(message);
    defineProperty(e, 'name', { value: code, writable: true, configurable: true });
    defineProperty(e, 'code', { value: code, writable: true, configurable: true });
    if (tool !== undefined) defineProperty(e, 'tool', { value: tool, writable: true, configurable: true });
    if (callId !== undefined) defineProperty(e, 'callId', { value: callId, writable: true, configurable: true });
    if (typeof stderr === 'string') defineProperty(e, 'stderr', { value: stderr, writable: true, configurable: true });
    apply(weakMapSet, hostErrors, [e, { code, message, tool, callId, stderr }]);
    return e;
  }

  // Freezes what JSON.parse made: a tree, each object met once.
  function freezeTree(v) {
    if (v === null || typeof v !== 'object') return v;
    freeze(v);
    if (isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const x = v[i];
        if (x !== null && typeof x === 'object') freezeTree(x);
      }
      return v;
    }
    const ks = keys(v);
    for (let i = 0; i < ks.length; i++) {
      const x = v[ks[i]];
      if (x !== null && typeof x === 'object') freezeTree(x);
    }
    return v;
  }
  function deepFreeze(v) {
    if (v !== null && typeof v === 'object' && !isFrozen(v)) {
      freeze(v);
      const ks = keys(v);
      for (let i = 0; i < ks.length; i++) deepFreeze(v[ks[i]]);
    }
    return v;
  }

  // ---- 1. Trim the global surface ---------------------------------------
  const removed = ['process', 'require', 'module', 'exports', 'Deno', 'Bun', 'std', 'os',
    'print', 'scriptArgs', 'gc', 'load', 'navigator', 'performance', 'SharedArrayBuffer',
    'Atomics', 'FinalizationRegistry', 'WebAssembly', 'setTimeout', 'setInterval',
    'clearTimeout', 'clearInterval', 'setImmediate', 'fetch', 'XMLHttpRequest', 'Worker',
    'importScripts', 'console', '__harness_host'];
  for (let i = 0; i < removed.length; i++) {
    const d = getOwnPropertyDescriptor(G, removed[i]);
    if (d !== undefined && d.configurable) delete G[removed[i]];
  }
  // RegExp's legacy statics (V8 has them; QuickJS and Boa do not) read the
  // context's last match: with a context serving run after run they would
  // show one run's last match to the next. Removed, as Hardened
  // JavaScript's lockdown does, so `RegExp` has the same own properties on
  // every engine.
  const regexpStatics = ['input', '$_', 'lastMatch', '$&', 'lastParen', '$+', 'leftContext',
    '$`', 'rightContext', "$'", '$1', '$2', '$3', '$4', '$5', '$6', '$7', '$8', '$9'];
  for (let i = 0; i < regexpStatics.length; i++) {
    const d = getOwnPropertyDescriptor(RegExp, regexpStatics[i]);
    if (d !== undefined && d.configurable) delete RegExp[regexpStatics[i]];
  }

  // ---- 2. No code generation from strings --------------------------------
  function blocked(kind) {
    const f = function () {
      throw hostError('BannedIdentifierError',
        kind + ' is disabled: code generation from strings is not allowed in scripts');
    };
    // `length` as the language's: eval and every function constructor take 1.
    defineProperty(f, 'length', { value: 1 });
    return f;
  }
  const FunctionProto = Function.prototype;
  const ctorProtos = [
    [FunctionProto, 'Function'],
    [getPrototypeOf(async function () {}), 'AsyncFunction'],
    [getPrototypeOf(function* () {}), 'GeneratorFunction'],
    [getPrototypeOf(async function* () {}), 'AsyncGeneratorFunction'],
  ];
  let SafeFunction;
  for (let i = 0; i < ctorProtos.length; i++) {
    const proto = ctorProtos[i][0];
    const ctor = blocked('the ' + ctorProtos[i][1] + ' constructor');
    defineProperty(ctor, 'name', { value: ctorProtos[i][1] });
    defineProperty(ctor, 'prototype', { value: proto, writable: false });
    defineProperty(proto, 'constructor', { value: ctor, writable: true, configurable: true });
    if (i === 0) SafeFunction = ctor;
  }
  defineProperty(G, 'Function', { value: SafeFunction, writable: false, configurable: false });
  defineProperty(G, 'eval', { value: blocked('eval'), writable: false, configurable: false });

  // ---- 3. Promise.race / Promise.any cancel their losing tool calls -------
  function cancelLosers(items) {
    const run = active;
    if (run === null) return;
    for (let i = 0; i < items.length; i++) {
      const it = items[i];
      if (it === null || typeof it !== 'object') continue;
      const id = weakMapGetIn(toolPromises, it);
      if (id !== undefined && run.pending[id] !== undefined) hostCall('cancel', StringCtor(id));
    }
  }
  // A method, so that, like the original, it is no constructor and has no
  // `prototype`. Only the intrinsic Promise over an array
  // (`Promise.race([tools.a(), tools.b()])`) is read first, to know the
  // tool calls in the race (an array whose iterator throws gives a
  // rejected promise, as the original does). Anything else (a subclass,
  // another `this`, an iterable that is no array, something not iterable)
  // goes to the original untouched, so that its steps, its errors and its
  // rejections are the language's: copying any iterable first lost 24
  // more of test262's `built-ins/Promise` tests.
  function withLoserCancel(orig, name) {
    const methods = {
      [name](iterable) {
        if (this !== PromiseCtor || !isArray(iterable)) return apply(orig, this, [iterable]);
        let items;
        try {
          items = arrayFrom(iterable);
        } catch (e) {
          // As the original does when iterating throws: a rejection.
          return promiseReject(e);
        }
        const p = apply(orig, this, [items]);
        const done = function () { cancelLosers(items); };
        apply(promiseThen, p, [done, done]);
        return p;
      },
    };
    return methods[name];
  }
  defineProperty(Promise, 'race', { value: withLoserCancel(origRace, 'race'), writable: true, configurable: true });
  defineProperty(Promise, 'any', { value: withLoserCancel(origAny, 'any'), writable: true, configurable: true });

  // ---- 4. Freeze intrinsics ----------------------------------------------
  // (The walk and the taming of the override mistake are below, after the
  // last changes to the intrinsics.)

  // Math.random is reseeded for every run (the run's 128-bit seed from
  // the host, in its config): an engine's own generator is seeded once per
  // context (quickjs-ng: from the clock, in microseconds), so a reused
  // context would continue one run's sequence into the next, and two
  // contexts made in the same microsecond would repeat it. xoshiro128**.
  // `install` only keeps the run's seed; the first `Math.random()` of the
  // run seeds from it (most runs never call it, and reading the seed's
  // hex digits costs more than a trivial run's config otherwise would).
  let r0 = 0, r1 = 0, r2 = 0, r3 = 0;
  // The installed run's seed, not yet used: 32 hex digits, or four words.
  let pendingSeed = null;
  function hexWord(hex, at) {
    return parseIntFn(apply(stringSlice, hex, [at, at + 8]), 16);
  }
  function seedRandom(seed) {
    if (typeof seed === 'string') seed = [hexWord(seed, 0), hexWord(seed, 8), hexWord(seed, 16), hexWord(seed, 24)];
    r0 = seed[0] | 0; r1 = seed[1] | 0; r2 = seed[2] | 0; r3 = seed[3] | 0;
    if ((r0 | r1 | r2 | r3) === 0) r0 = 1;
  }
  function next32() {
    const x = imul(r1, 5);
    const out = imul((x << 7) | (x >>> 25), 9) >>> 0;
    const t = r1 << 9;
    r2 ^= r0; r3 ^= r1; r1 ^= r2; r0 ^= r3;
    r2 ^= t;
    r3 = (r3 << 11) | (r3 >>> 21);
    return out;
  }
  // A method, so that, like the original, it is no constructor.
  const { random } = {
    random() {
      if (pendingSeed !== null) {
        const seed = pendingSeed;
        pendingSeed = null;
        seedRandom(seed);
      }
      return ((next32() >>> 5) * 67108864 + (next32() >>> 6)) / 9007199254740992;
    },
  };
  // Until a run installs its own seed (test262 hardens without a run).
  seedRandom([nativeRandom() * 4294967296, nativeRandom() * 4294967296,
    nativeRandom() * 4294967296, nativeRandom() * 4294967296]);
  defineProperty(Math, 'random', { value: random, writable: true, configurable: true });

  // V8-style stack hooks are accessors in some engines, so freezing Error
  // would not stop a script from installing them; they would then run
  // inside the harness's own error creation. Pin them as plain data.
  const stackKnobs = ['prepareStackTrace', 'stackTraceLimit'];
  for (let i = 0; i < stackKnobs.length; i++) {
    const d = getOwnPropertyDescriptor(ErrorCtor, stackKnobs[i]);
    if (d !== undefined && d.configurable) {
      const current = 'value' in d ? d.value : (stackKnobs[i] === 'stackTraceLimit' ? 10 : undefined);
      defineProperty(ErrorCtor, stackKnobs[i], { value: current, writable: false, configurable: false });
    } else if (d === undefined && stackKnobs[i] === 'prepareStackTrace' && unfrozen === true) {
      // A private realm's `Error` stays open: the hook is refused there
      // too, on every engine, whether or not the engine would call it.
      defineProperty(ErrorCtor, 'prepareStackTrace', { value: undefined, writable: false, configurable: false });
    }
  }

  const frozenGlobals = ['Object', 'Function', 'Array', 'Number', 'Boolean', 'String', 'Symbol',
    'Date', 'Promise', 'RegExp', 'Error', 'AggregateError', 'EvalError', 'RangeError',
    'ReferenceError', 'SyntaxError', 'TypeError', 'URIError', 'InternalError', 'JSON', 'Math',
    'Reflect', 'Proxy', 'Map', 'Set', 'WeakMap', 'WeakSet', 'WeakRef', 'BigInt', 'ArrayBuffer',
    'DataView', 'Int8Array', 'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array',
    'Int32Array', 'Uint32Array', 'Float16Array', 'Float32Array', 'Float64Array',
    'BigInt64Array', 'BigUint64Array', 'Iterator', 'Intl', 'parseInt', 'parseFloat',
    'isNaN', 'isFinite', 'encodeURI', 'encodeURIComponent', 'decodeURI',
    'decodeURIComponent', 'escape', 'unescape', 'queueMicrotask', 'DOMException'];
  // The global object's own properties are pinned here for the names
  // above; the object itself is frozen by the first install (test262's
  // runner adds `print` and `$262` to a hardened context first).
  const freezing = unfrozen !== true;
  for (let i = 0; freezing && i < frozenGlobals.length; i++) {
    const d = getOwnPropertyDescriptor(G, frozenGlobals[i]);
    if (d !== undefined && d.configurable) {
      defineProperty(G, frozenGlobals[i], { writable: false, configurable: false });
    }
  }
  // The override mistake: an assignment to a property that a frozen
  // prototype holds (`const a = []; a.constructor = C`, `err.name = 'X'`,
  // `obj.toString = f`) would throw instead of creating an own property
  // on the receiver. As Hardened JavaScript's lockdown does, every
  // writable data property of every intrinsic that serves as a prototype
  // (the [[Prototype]] of a reachable object, a function's `prototype`, or
  // one of the hidden intrinsics below, such as %ArrayIteratorPrototype%)
  // becomes a getter/setter pair: the getter returns the original value,
  // the setter defines an own property on the receiver, and assigning to
  // the prototype itself still fails.
  function tame(proto) {
    const ds = getOwnPropertyDescriptors(proto);
    const ks = ownKeys(ds);
    for (let i = 0; i < ks.length; i++) {
      const prop = ks[i];
      const d = ds[prop];
      if (!('value' in d) || !d.writable || !d.configurable) continue;
      const value = d.value;
      // Arrows and methods: no `prototype` object of their own to freeze.
      // (A bound `Object.prototype.valueOf` as the getter was measured
      // and is slower on QuickJS than this closure.)
      const pair = {
        get: () => value,
        set(v) {
          if (this === proto) throw new TypeErrorCtor("Cannot assign to read only property '" + StringCtor(prop) + "' of a built-in prototype");
          if (apply(hasOwn, this, [prop])) { this[prop] = v; return; }
          defineProperty(this, prop, { value: v, writable: true, enumerable: true, configurable: true });
        },
      };
      defineProperty(proto, prop, { get: freeze(pair.get), set: freeze(pair.set), enumerable: d.enumerable, configurable: false });
    }
  }
  // Every object reachable from the roots, through own properties (values,
  // getters and setters, string and symbol keys) and prototypes, is
  // tamed where it is a prototype and then frozen: a walk, so an intrinsic
  // an engine upgrade adds is covered too. Written for slow interpreters
  // (Boa walks ~700 objects in every fresh context): one descriptor call
  // per object, primitives never queued, no array allocated per step.
  function freezeReachable(roots) {
    const seen = new SetCtor();
    const isSeen = apply(fnBind, setHas, [seen]);
    const see = apply(fnBind, setAdd, [seen]);
    const protos = new SetCtor();
    const isProto = apply(fnBind, setHas, [protos]);
    const addProto = apply(fnBind, setAdd, [protos]);
    const objects = [];
    const queue = roots;
    // Every root but the global object is an intrinsic prototype only
    // syntax or a built-in's result reaches (the iterator prototypes, …).
    for (let i = 0; i < roots.length; i++) if (roots[i] !== G) addProto(roots[i]);
    for (let n = 0; n < queue.length; n++) {
      const v = queue[n];
      if (v === null || (typeof v !== 'object' && typeof v !== 'function') || isSeen(v)) continue;
      see(v);
      objects[objects.length] = v;
      const p = getPrototypeOf(v);
      if (p !== null) { addProto(p); queue[queue.length] = p; }
      const ds = getOwnPropertyDescriptors(v);
      const ks = ownKeys(ds);
      for (let i = 0; i < ks.length; i++) {
        const d = ds[ks[i]];
        if ('value' in d) {
          const x = d.value;
          if (x !== null && (typeof x === 'object' || typeof x === 'function')) {
            queue[queue.length] = x;
            if (ks[i] === 'prototype' && typeof v === 'function') addProto(x);
          }
        } else {
          if (d.get !== undefined) queue[queue.length] = d.get;
          if (d.set !== undefined) queue[queue.length] = d.set;
        }
      }
    }
    for (let i = 0; i < objects.length; i++) {
      const v = objects[i];
      if (v === G) continue;
      if (isProto(v)) tame(v);
      freeze(v);
    }
  }
  // The roots: the global object, and intrinsics no global names,
  // reachable from syntax or from what built-ins return.
  const hidden = [
    G,
    getPrototypeOf(Int8Array),
    ctorProtos[1][0], ctorProtos[2][0], ctorProtos[3][0],
    ctorProtos[2][0].prototype, ctorProtos[3][0].prototype,
    getPrototypeOf([][Symbol.iterator]()),
    getPrototypeOf(getPrototypeOf([][Symbol.iterator]())),
    getPrototypeOf(new Map()[Symbol.iterator]()),
    getPrototypeOf(new Set()[Symbol.iterator]()),
    getPrototypeOf(''[Symbol.iterator]()),
    getPrototypeOf(/x/[Symbol.matchAll](''))
  ];
  const asyncIterProto = getPrototypeOf(ctorProtos[3][0].prototype);
  if (asyncIterProto !== null) apply(arrayPush, hidden, [asyncIterProto]);
  // %ThrowTypeError% (a strict function's arguments.callee).
  apply(arrayPush, hidden, [getOwnPropertyDescriptor((function () { 'use strict'; return arguments; })(), 'callee').get]);
  // Iterator helpers and Iterator.from's wrapper, where the engine has them.
  const arrayIter = function () { return [][Symbol.iterator](); };
  const IteratorCtor = G.Iterator;
  if (typeof IteratorCtor === 'function') {
    const helpers = ['map', 'filter', 'take', 'drop', 'flatMap'];
    for (let i = 0; i < helpers.length; i++) {
      const f = IteratorCtor.prototype[helpers[i]];
      if (typeof f === 'function') {
        try { apply(arrayPush, hidden, [getPrototypeOf(apply(f, arrayIter(), [helpers[i] === 'take' || helpers[i] === 'drop' ? 0 : function (x) { return x; }]))]); } catch (_) { /* not this engine */ }
      }
    }
    if (typeof IteratorCtor.from === 'function') {
      try { apply(arrayPush, hidden, [getPrototypeOf(IteratorCtor.from({ next: function () { return { done: true }; } }))]); } catch (_) { /* not this engine */ }
    }
    if (typeof IteratorCtor.concat === 'function') {
      try { apply(arrayPush, hidden, [getPrototypeOf(IteratorCtor.concat())]); } catch (_) { /* not this engine */ }
    }
  }
  if (freezing) freezeReachable(hidden);

  // ---- Shared by every run: reporting, console, the return value ----------
  // The installed run's host, for the functions below (made once per
  // context). A run's own functions (tools, context) use its `call`.
  // Strings reach the host as UTF-8, which has no lone surrogates: each
  // becomes U+FFFD, as on every engine (QuickJS's conversion would throw).
  function wellFormed(s) {
    if (typeof s !== 'string') return s;
    if (toWellFormed !== undefined) return toWellFormed(s);
    return apply(stringReplace, s, [loneSurrogates, '\uFFFD']);
  }
  function hostCall(op, a, b) {
    if (active === null) throw new TypeErrorCtor('no run is installed');
    return host(op, a === undefined ? '' : wellFormed(a), b === undefined ? '' : wellFormed(b));
  }
  // `hostCall` for text that is well-formed already: the tool names the
  // host sent, and JSON that JSON.stringify made (it escapes every lone
  // surrogate, ES2019).
  function hostCallWellFormed(op, a, b) {
    if (active === null) throw new TypeErrorCtor('no run is installed');
    return host(op, a, b);
  }
  // A run's calls and tasks waiting for the host, by the id they settle
  // under: a null-prototype object of the prelude's, which no script
  // reaches, so reading and writing it runs nothing of the script's.
  function addPending(run, id, entry) {
    if (run.pending[id] === undefined) run.waiting += 1;
    run.pending[id] = entry;
  }
  function describeMessage(e) {
    try {
      if (e !== null && typeof e === 'object') return StringCtor(e.message);
      return StringCtor(e);
    } catch (_) {
      return '(unprintable)';
    }
  }
  function bigintReplacer(_k, x) {
    return typeof x === 'bigint' ? StringCtor(x) + 'n' : x;
  }
  function inspect(v) {
    const t = typeof v;
    if (t === 'string') return v;
    if (t === 'undefined') return 'undefined';
    if (t === 'function') return '[Function ' + (v.name || 'anonymous') + ']';
    if (t === 'symbol' || t === 'bigint' || t === 'number' || t === 'boolean') {
      return t === 'bigint' ? StringCtor(v) + 'n' : StringCtor(v);
    }
    if (v instanceof ErrorCtor) {
      try { return StringCtor(v.name) + ': ' + StringCtor(v.message); } catch (_) { return '[Error]'; }
    }
    try {
      const s = jsonStringify(v, bigintReplacer);
      return s === undefined ? StringCtor(v) : s;
    } catch (_) {
      try { return StringCtor(v); } catch (_2) { return '[object]'; }
    }
  }
  function logger(level) {
    // Arrows here and below: no `prototype` object to freeze or to leak.
    const f = (...args) => {
      const parts = [];
      for (let i = 0; i < args.length; i++) push(parts, inspect(args[i]));
      hostCall('console', level, join(parts, ' '));
    };
    defineProperty(f, 'name', { value: level });
    return freeze(f);
  }
  const sharedConsole = freeze({
    log: logger('log'), info: logger('info'), warn: logger('warn'),
    error: logger('error'), debug: logger('debug'),
  });

  // ---- 9. Run the script, report its outcome --------------------------------
  function describe(e) {
    // Every key is an own property from the start, so that no assignment
    // below reaches a setter a private realm's script put on a prototype
    // (JSON leaves the undefined ones out).
    const d = { host: false, name: 'Error', message: '', stack: '', code: undefined,
      tool: undefined, call_id: undefined, stderr: undefined, non_error: undefined };
    if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
      const known = weakMapGetIn(hostErrors, e);
      d.host = known !== undefined;
      try { d.stack = StringCtor(e.stack); } catch (_) { /* keep default */ }
      if (d.host) {
        d.name = known.code;
        d.message = known.message;
        d.code = known.code;
        if (known.tool !== undefined) d.tool = known.tool;
        if (known.callId !== undefined) d.call_id = known.callId;
        if (typeof known.stderr === 'string') d.stderr = known.stderr;
      } else {
        try { d.name = StringCtor(e.name); } catch (_) { /* keep default */ }
        try { d.message = StringCtor(e.message); } catch (_) { /* keep default */ }
      }
    } else {
      d.name = 'Error';
      d.message = 'Uncaught ' + inspect(e);
      d.non_error = true;
    }
    return jsonStringify(d);
  }
  function fail(e) {
    hostCall('fail', describe(e));
  }
  // ---- 9b. The return value, as JSON would mangle it -----------------------
  // A settled Promise becomes its value; a Map an object (string or number
  // keys) or an array of [key, value] pairs; a Set and a typed array
  // arrays. Anything else JSON would silently lose is listed as a warning.
  const identRe = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  // Where a value sits, as `$.a[0]["b c"]`: the place of its parent (an
  // object `{ up, key, index }`, `up` null for the value returned) and its
  // key there, an array's or a pair's position where `index`. Written out
  // only for a warning or an error: a path for every key cost more than
  // the rest of the walk.
  function pathAt(up, key, index) {
    if (up === null) return '$';
    const path = pathAt(up.up, up.key, up.index);
    if (index) return path + '[' + key + ']';
    return exec(identRe, key) !== null ? path + '.' + key : path + '[' + jsonStringify(key) + ']';
  }
  function isPromise(v) {
    try { return v instanceof PromiseCtor; } catch (_) { return false; }
  }
  function dropped(x) {
    return x === undefined || typeof x === 'function' || typeof x === 'symbol';
  }
  // `v` converted, where `v` is `key` of the value at place `up`
  // (`pathAt`); `key` is a string, or an array's position as a number.
  function convert(v, st, up, key, index) {
    if (v !== null && typeof v === 'object' && typeof v.toJSON === 'function') {
      v = v.toJSON(StringCtor(key));
    }
    const t = typeof v;
    if (v === null || t === 'string' || t === 'number' || t === 'boolean' || t === 'bigint') return v;
    if (t !== 'object') return v; // undefined, function, symbol: the parent decides
    if (isPromise(v)) {
      const known = mapGetIn(st.settled, v);
      if (known === undefined) {
        push(st.promises, [v, pathAt(up, key, index)]);
        return null;
      }
      if (!known.ok) {
        st.bad = { path: pathAt(up, key, index), state: known.state, reason: known.value };
        return null;
      }
      return convert(known.value, st, up, key, index);
    }
    if (setHasIn(st.ancestors, v)) throw new TypeErrorCtor('cyclic object value at ' + pathAt(up, key, index));
    setAddTo(st.ancestors, v);
    const here = { up: up, key: key, index: index };
    let out;
    if (isArray(v)) {
      out = [];
      for (let i = 0; i < v.length; i++) {
        const x = convert(v[i], st, here, i, true);
        if (dropped(x)) {
          warn(st, here, i, true, lost(x) + ' became null');
          push(out, null);
        } else {
          push(out, x);
        }
      }
    } else if (v instanceof MapCtor) {
      let plain = true;
      mapEach(v, function (_v, k) { if (typeof k !== 'string' && typeof k !== 'number') plain = false; });
      if (plain) {
        out = {};
        mapEach(v, function (val, k) {
          const name = StringCtor(k);
          const x = convert(val, st, here, name, false);
          if (dropped(x)) {
            warn(st, here, name, false, lost(x) + ' was dropped');
          } else {
            defineProperty(out, name, { value: x, writable: true, enumerable: true, configurable: true });
          }
        });
      } else {
        out = [];
        let i = 0;
        mapEach(v, function (val, k) {
          const pair = { up: here, key: i, index: true };
          push(out, [convert(k, st, pair, 0, true), convert(val, st, pair, 1, true)]);
          i++;
        });
      }
    } else if (v instanceof SetCtor) {
      out = [];
      let i = 0;
      setEach(v, function (val) {
        push(out, convert(val, st, here, i, true));
        i++;
      });
    } else if (isView(v) && !(v instanceof DataViewCtor)) {
      out = arrayFrom(v);
    } else {
      out = {};
      const ks = keys(v);
      for (let i = 0; i < ks.length; i++) {
        const x = convert(v[ks[i]], st, here, ks[i], false);
        if (dropped(x)) {
          warn(st, here, ks[i], false, lost(x) + ' was dropped');
        } else {
          out[ks[i]] = x;
        }
      }
      if (ks.length === 0) {
        const proto = getPrototypeOf(v);
        if (proto !== null && proto !== ObjectProto) {
          let name = 'object';
          try { name = StringCtor(v.constructor.name) || name; } catch (_) { /* keep */ }
          warn(st, up, key, index, 'an instance of ' + name + ' with no own enumerable properties became {}');
        }
      }
    }
    setDeleteFrom(st.ancestors, v);
    return out;
  }
  function lost(x) {
    return x === undefined ? 'an undefined value' : 'a ' + typeof x;
  }
  function warn(st, up, key, index, message) {
    if (st.warnings.length < 20) push(st.warnings, { path: pathAt(up, key, index), message: message });
  }
  function serialisationFail(message, e) {
    hostCall('fail', jsonStringify({ serialization: true, name: 'SerializationError', message: message,
      error_name: e === undefined ? '' : (function () { try { return StringCtor(e.name); } catch (_) { return ''; } })(),
      error_message: e === undefined ? '' : describeMessage(e) }));
  }
  // Settled promises inside the value are read by waiting a few microtask
  // turns (a settled promise's reaction runs on the next one); up to four
  // rounds, for values of promises that hold promises.
  function finish(value) {
    if (value === undefined) {
      hostCallWellFormed('done', '0', '');
      return;
    }
    // A primitive JSON can hold is its own converted form (`convert`
    // returns it as it is): no walk, no state for one. A number's JSON is
    // its string where it is finite, `null` where not.
    const t = typeof value;
    if (t === 'number') {
      hostCallWellFormed('done', '1', value - value === 0 ? '' + value : 'null');
      return;
    }
    if (value === null || t === 'string' || t === 'boolean') {
      finishJson(value, value, noWarnings);
      return;
    }
    const st = { settled: new MapCtor(), promises: [], ancestors: new SetCtor(), warnings: [], bad: undefined };
    let rounds = 0;
    const attempt = function () {
      st.promises = [];
      st.warnings = [];
      st.bad = undefined;
      let converted;
      try {
        converted = convert(value, st, null, '', false);
      } catch (e) {
        serialisationFail('the return value could not be serialised as JSON: ' + describeMessage(e), e);
        return;
      }
      if (st.bad !== undefined) {
        serialisationFail('the return value holds a rejected Promise at ' + st.bad.path + ' (' +
          inspect(st.bad.reason) + '); is an `await` missing?');
        return;
      }
      if (st.promises.length > 0) {
        if (rounds++ >= 4) {
          serialisationFail('the return value holds a pending Promise at ' + st.promises[0][1] +
            '; is an `await` missing?');
          return;
        }
        for (let i = 0; i < st.promises.length; i++) {
          const pr = st.promises[i][0];
          // A fake (`Object.create(Promise.prototype)`) or one whose species
          // constructor throws cannot be waited on: say where it is.
          try {
            thenOf(pr,
              function (x) { mapSetIn(st.settled, pr, { ok: true, value: x }); },
              function (r) { mapSetIn(st.settled, pr, { ok: false, state: 'rejected', value: r }); });
          } catch (e) {
            serialisationFail('the return value holds a Promise at ' + st.promises[i][1] +
              ' that cannot be awaited: ' + describeMessage(e), e);
            return;
          }
        }
        const tick = function (n) { return n === 0 ? attempt : function () { thenOf(promiseResolve(), tick(n - 1)); }; };
        thenOf(promiseResolve(), tick(2));
        return;
      }
      finishJson(value, converted, st.warnings);
    };
    attempt();
  }
  const noWarnings = freeze([]);
  function finishJson(value, converted, warnings) {
    let json;
    try {
      json = jsonStringify(converted);
    } catch (e) {
      serialisationFail('the return value could not be serialised as JSON: ' + describeMessage(e), e);
      return;
    }
    if (json === undefined) {
      hostCall('fail', jsonStringify({ serialization: true, name: 'SerializationError',
        message: 'the return value (a ' + typeof value + ') cannot be serialised as JSON' }));
      return;
    }
    if (warnings.length > 0) hostCallWellFormed('warnings', jsonStringify(warnings), '');
    hostCallWellFormed('done', '1', json);
  }
  function start(fn) {
    let p;
    try {
      p = inSession ? fn(sessionScope) : fn();
    } catch (e) {
      fail(e);
      return;
    }
    thenOf(promiseResolve(p), finish, fail);
  }

  // The globals a run sees are read through the installed run, so that a
  // context can serve one run after another with its global object frozen.
  function currentOf(key) {
    // An arrow: no `prototype` object to carry state from run to run.
    const get = () => (active === null ? undefined : active[key]);
    defineProperty(get, 'name', { value: 'get ' + key });
    return freeze(get);
  }
  let globalsDefined = false;

  // ---- 5-7. What a run's static configuration makes -----------------------
  // `tools` and `context` depend only on the static part of the config
  // (tool names, limits, the caller's ids): they are made once and kept,
  // frozen, for as long as the next run's static part is the same string.
  // Their functions reach the host of whichever run is installed.
  function makeShared(staticJson) {
    const config = jsonParse(staticJson);
    // ---- 5. tools -----------------------------------------------------------
    const toolNames = config.tools;
    const available = toolNames.length === 0 ? '(none)' : apply(arrayJoin, toolNames, [', ']);

    // Where in the script a tool call is made: the stack, appended to the
    // tool's name after `\0` (nothing where the engine keeps no stack).
    // The host finds the first `script.js:LINE:COLUMN` in it: a regular
    // expression here cost QuickJS a fifth of a tool call. `callTool` takes
    // the stack itself, one frame fewer to format.
    function callSite() {
      try { return '\0' + StringCtor(new ErrorCtor().stack); } catch (_) { return ''; }
    }

    function argsToJson(name, args) {
      let argsJson;
      try {
        argsJson = jsonStringify(args === undefined ? {} : args);
      } catch (e) {
        throw hostError('ToolValidationError',
          'arguments for tool ' + name + ' are not JSON-serialisable: ' + describeMessage(e), name);
      }
      if (argsJson === undefined) {
        throw hostError('ToolValidationError',
          'arguments for tool ' + name + ' must be a JSON value, got ' + typeof args, name);
      }
      return argsJson;
    }

    // Only calls that may need approval carry their site (the request's
    // `line`); the stack capture is a fifth of a QuickJS tool call.
    const sited = create(null);
    const sitedNames = isArray(config.sited) ? config.sited : toolNames;
    for (let i = 0; i < sitedNames.length; i++) sited[sitedNames[i]] = true;

    function callTool(name, args, withSite) {
      let argsJson;
      try {
        argsJson = argsToJson(name, args);
      } catch (e) {
        return promiseReject(e);
      }
      let site = '';
      if (withSite) {
        try { site = '\0' + StringCtor(new ErrorCtor().stack); } catch (_) { /* no stack */ }
      }
      const answer = hostCallWellFormed('call', site === '' ? name : wellFormed(name + site), argsJson);
      // A call that finished at once is answered with its outcome: a space
      // and the result's JSON (which JSON.parse reads past), or `!`, its
      // id, a newline and the failure; any other with its id.
      const mark = answer[0];
      if (mark === ' ') return promiseResolve(freezeTree(jsonParse(answer)));
      if (mark === '!') return promiseReject(failure(answer, name));
      const id = +answer;
      if (id === 0) {
        // The host stopped recording calls: this run attempted too many.
        return promiseReject(hostError('ToolBudgetExceededError',
          'too many tool call attempts: this script may make at most ' + config.context.limits.maxToolCalls +
          ' tool calls, and refused attempts are limited too', name));
      }
      let resolve, reject;
      const p = new PromiseCtor(function (res, rej) { resolve = res; reject = rej; });
      addPending(active, id, { resolve: resolve, reject: reject, name: name });
      weakMapSetIn(toolPromises, p, id);
      return p;
    }

    const toolFns = create(null);
    // Upstream MCP tools, `mcp.SERVER.TOOL`, are `tools.mcp.SERVER.TOOL`.
    const mcpServers = create(null);
    let hasMcp = false;
    for (let i = 0; i < toolNames.length; i++) {
      const name = toolNames[i];
      const withSite = sited[name] === true;
      const fn = (args) => callTool(name, args, withSite);
      if (apply(stringSlice, name, [0, 4]) === 'mcp.') {
        const rest = apply(stringSlice, name, [4]);
        const dot = apply(stringIndexOf, rest, ['.']);
        const server = apply(stringSlice, rest, [0, dot]);
        const tool = apply(stringSlice, rest, [dot + 1]);
        defineProperty(fn, 'name', { value: tool });
        if (mcpServers[server] === undefined) mcpServers[server] = create(null);
        mcpServers[server][tool] = freeze(fn);
        hasMcp = true;
        continue;
      }
      defineProperty(fn, 'name', { value: name });
      toolFns[name] = freeze(fn);
    }
    freeze(toolFns);
    const unknownTool = function (name) {
      return () => {
        // The host answers `id\nmessage` (the message suggests a close name).
        const answer = hostCall('unknown', name);
        const nl = apply(stringIndexOf, answer, ['\n']);
        const id = NumberCtor(nl < 0 ? answer : apply(stringSlice, answer, [0, nl])) || undefined;
        const message = nl < 0 ? "unknown tool '" + name + "'; available tools: " + available
          : apply(stringSlice, answer, [nl + 1]);
        throw hostError('ToolNotFoundError', message, name, id);
      };
    };
    // ---- 5b. tools.spawn: detached tasks ------------------------------------
    function cancelTask(id) {
      return promiseResolve(hostCall('cancel_task', StringCtor(id)) === '1');
    }
    const spawnExec = (toolOrArgs, args) => {
      let name = toolOrArgs;
      if (toolOrArgs !== null && typeof toolOrArgs === 'object') {
        // `tools.spawn.exec({command: [...]})`: the `exec` tool.
        name = 'exec';
        args = toolOrArgs;
      }
      name = StringCtor(name);
      const argsJson = argsToJson(name, args);
      const answer = jsonParse(hostCallWellFormed('spawn', wellFormed(name + callSite()), argsJson));
      if (answer.error !== undefined) throw hostError(answer.error.code, answer.error.message, name);
      let resolve, reject;
      const done = new PromiseCtor(function (res, rej) { resolve = res; reject = rej; });
      addPending(active, answer.settle, { resolve: resolve, reject: reject, name: name, task: true });
      const id = answer.id;
      const cancel = () => cancelTask(id);
      defineProperty(cancel, 'name', { value: 'cancel' });
      return freeze({ id: id, done: done, cancel: freeze(cancel) });
    };
    defineProperty(spawnExec, 'name', { value: 'exec' });
    const cancelById = (id) => cancelTask(id);
    defineProperty(cancelById, 'name', { value: 'cancel' });
    const spawnObj = freeze({ exec: freeze(spawnExec), cancel: freeze(cancelById) });

    // `tools.mcp.fs.nope` throws ToolNotFoundError like `tools.nope`.
    function sealedTools(target, prefix) {
      return new ProxyCtor(freeze(target), {
        get: function (t, key) {
          if (typeof key !== 'string') return undefined;
          const own = t[key];
          if (own !== undefined) return own;
          if (key === 'then' || key === 'toJSON') return undefined;
          return unknownTool(prefix + key);
        },
        set: function () { return false; },
        defineProperty: function () { return false; },
        deleteProperty: function () { return false; },
        setPrototypeOf: function () { return false; },
      });
    }
    const mcpObj = create(null);
    for (const server in mcpServers) mcpObj[server] = sealedTools(mcpServers[server], 'mcp.' + server + '.');
    const mcpTools = sealedTools(mcpObj, 'mcp.');

    const tools = new ProxyCtor(toolFns, {
      get: function (t, key) {
        if (typeof key !== 'string') return undefined;
        // `t` has no prototype and holds functions only: a defined
        // property is an own one.
        const own = t[key];
        if (own !== undefined) return own;
        if (key === 'then' || key === 'toJSON') return undefined;
        // The harness's own names: `if (tools.spawn)` must be false when off.
        if (key === 'spawn') return config.spawn ? spawnObj : undefined;
        if (key === 'mcp') return hasMcp ? mcpTools : undefined;
        if (key === 'http') return undefined;
        return unknownTool(key);
      },
      has: function (t, key) {
        return (key === 'spawn' && config.spawn === true) || (key === 'mcp' && hasMcp) ||
          owns(t, key);
      },
      set: function () { return false; },
      defineProperty: function () { return false; },
      deleteProperty: function () { return false; },
      setPrototypeOf: function () { return false; },
    });

    // ---- 7. context -------------------------------------------------------------
    const c = config.context;
    const budget = create(O.prototype, {
      remainingToolCalls: { get: freeze(() => NumberCtor(hostCall('budget'))), enumerable: true },
      remainingMs: { get: freeze(() => NumberCtor(hostCall('remaining_ms'))), enumerable: true },
    });
    // emitProgress(message, data) as before, or emitProgress(message, kind,
    // data) with kind 'info' or 'warn'.
    const emitProgress = (message, kindOrData, data) => {
      let kind = 'info';
      if (kindOrData === 'info' || kindOrData === 'warn') {
        kind = kindOrData;
      } else {
        data = kindOrData;
      }
      let dataJson = '';
      if (data !== undefined) {
        try { dataJson = jsonStringify(data); } catch (_) { dataJson = ''; }
        if (dataJson === undefined) dataJson = '';
      }
      const text = StringCtor(message);
      return (kind === 'warn' ? hostCall('progress_warn', text, dataJson) : hostCall('progress', text, dataJson)) === '1';
    };
    const telemetry = { emitProgress: emitProgress };
    const sandbox = create(O.prototype, {
      timeoutMs: { value: c.sandbox.timeoutMs, enumerable: true },
      memoryMb: { value: c.sandbox.memoryMb, enumerable: true },
      remainingToolBudget: { get: freeze(() => NumberCtor(hostCall('budget'))), enumerable: true },
      maxConcurrentToolCalls: { value: c.sandbox.maxConcurrentToolCalls, enumerable: true },
      mode: { value: c.sandbox.mode, enumerable: true },
    });
    const approvals = create(O.prototype, {
      required: { value: c.approvalsEnabled, enumerable: true },
      lastRequestId: { get: freeze(() => { const id = hostCall('approval_id'); return id === '' ? null : id; }), enumerable: true },
    });
    const contextObj = {
      conversationId: c.conversationId,
      sessionId: c.sessionId,
      turnId: c.turnId,
      sandbox: sandbox,
      capabilities: { tools: toolNames },
      approvals: approvals,
      emitProgress: emitProgress,
      identity: c.identity,
      workingDirectory: c.workingDirectory,
      provider: c.provider,
      model: c.model,
      extra: c.extra,
      limits: c.limits,
      tools: toolNames,
      approvalsEnabled: c.approvalsEnabled,
      mode: c.mode,
      budget: budget,
      telemetry: telemetry,
    };
    // The run's own id, read through the installed run.
    defineProperty(contextObj, 'scriptId', { get: freeze(() => (active === null ? undefined : active.scriptId)), enumerable: true });
    const context = deepFreeze(contextObj);
    freeze(emitProgress);

    return { json: staticJson, tools: tools, context: context };
  }
  let shared = null;

  // The error a failed call rejects with, from the host's payload
  // (`{code, message, stderr}`); `callId` undefined for a task.
  function callError(payload, name, callId) {
    const info = jsonParse(payload);
    return hostError(info.code, info.message, name, callId, info.stderr === null ? undefined : info.stderr);
  }
  // A `call` answered with its failure: `!ID\nPAYLOAD`.
  function failure(answer, name) {
    const nl = apply(stringIndexOf, answer, ['\n']);
    return callError(apply(stringSlice, answer, [nl + 1]), name, NumberCtor(apply(stringSlice, answer, [1, nl])));
  }

  // The prelude's side of a run, the same object for every run.
  function settle(id, ok, payload) {
    const r = active;
    if (r === null) return;
    const entry = r.pending[id];
    if (entry === undefined) return;
    delete r.pending[id];
    r.waiting -= 1;
    if (ok) {
      entry.resolve(freezeTree(jsonParse(payload)));
    } else {
      entry.reject(callError(payload, entry.name, entry.task ? undefined : id));
    }
  }
  // Closes the run: the host is no longer reachable and the globals read
  // `undefined`. True when the run left nothing pending and, given the
  // host's end-of-run probe (`list`, core's end_check.rs), no name the
  // run's source holds is a global binding the context was not handed
  // over with: only then may the context serve another run.
  function end(list) {
    const r = active;
    if (r === null) return false;
    active = null;
    if (r.waiting !== 0) return false;
    return list === undefined || unchanged(list);
  }
  // `list` holds, for each name, `() => typeof NAME`, `() => NAME`,
  // `() => delete NAME` and the name: closures of sloppy global code, so
  // they read the global scope. A name the global object (frozen, as is
  // its prototype chain) does not have must be unbound: `delete` of an
  // unqualified name is true only for a name nothing binds, and throws
  // nothing (reading one would throw, which costs an error object per
  // name). A name it has must read what it holds there: one in its dead
  // zone, or bound to anything else, is a binding of the global lexical
  // environment.
  function unchanged(list) {
    if (!isArray(list) || list.length % 4 !== 0) return false;
    for (let i = 0; i < list.length; i += 4) {
      const name = list[i + 3];
      if (!(name in G)) {
        if (list[i + 2]() !== true) return false;
        continue;
      }
      try { list[i](); } catch (_) { return false; }
      if (!objectIs(list[i + 1](), G[name])) return false;
    }
    return true;
  }
  const controller = freeze({ start: start, settle: settle, end: end });

  // ---- A session's scope ---------------------------------------------------
  // Core rewrites a session run's top-level declarations into calls of
  // these (crates/core/src/session.rs): the names become properties of the
  // session's global object, so the next run sees their live values.
  // `enter(list)` (kind, name pairs: 0 var, 1 let or class, 2 const) runs
  // first: a var that is not bound yet reads `undefined`, every other name
  // is in its dead zone until its declaration runs (`d`); `leave()` runs
  // last, whatever happened, and drops the names still in their dead zone
  // (a declaration that threw, or never ran), so that none is stuck there.
  const ReferenceErrorCtor = ReferenceError;
  let deadZone = new MapCtor();
  function bind(kind, name, value) {
    defineProperty(G, name, { value: value, writable: kind !== 2, enumerable: true, configurable: true });
    mapDeleteIn(deadZone, name);
  }
  const sessionScope = inSession ? freeze({
    enter: freeze(function enter(list) {
      deadZone = new MapCtor();
      for (let i = 0; i < list.length; i += 2) {
        const kind = list[i];
        const name = list[i + 1];
        if (kind === 0) {
          if (!owns(G, name)) bind(0, name, undefined);
          continue;
        }
        const unready = freeze(() => {
          throw new ReferenceErrorCtor("Cannot access '" + name + "' before initialization");
        });
        defineProperty(G, name, { get: unready, set: unready, enumerable: true, configurable: true });
        mapSetIn(deadZone, name, unready);
      }
    }),
    // A declarator `name = value`; without a value, a `let` is undefined.
    d: freeze(function d(kind, name, value) { bind(kind, name, value); }),
    // A destructuring declarator: `pick` is `(PATTERN) => [names…]`.
    p: freeze(function p(kind, names, pick, value) {
      const values = pick(value);
      for (let i = 0; i < names.length; i++) bind(kind, names[i], values[i]);
    }),
    // A function declaration, bound when the run starts (it is hoisted).
    f: freeze(function f(name, fn) { bind(1, name, fn); }),
    leave: freeze(function leave() {
      const left = deadZone;
      deadZone = new MapCtor();
      mapEach(left, (unready, name) => {
        const d = getOwnPropertyDescriptor(G, name);
        if (d !== undefined && d.get === unready) delete G[name];
      });
    }),
  }) : undefined;

  // The config is `{"run":"…","static":{…}}`, in that order. The run's
  // part is one string: the 128-bit seed as hex digits, then the script
  // id as the host makes it, so that the static part starts at a fixed
  // offset and is compared as a string, without parsing. Any other valid
  // config (another id's length, or the run's part as
  // `{"scriptId":…,"seed":[…]}`) takes the JSON path. The build writes
  // the layout of harness_abi::run_config in place of the four names.
  const runPrefix = RUN_PREFIX;
  const seedLength = SEED_HEX_LEN;
  const scriptIdLength = SCRIPT_ID_LEN;
  const staticMark = STATIC_MARK;
  const runEnd = runPrefix.length + seedLength + scriptIdLength;
  // The installed run's record (`active`): one per context, every field
  // set again by each install (making an object per run cost a fifth of
  // an install on QuickJS). No script reaches it.
  const record = { scriptId: '', pending: null, waiting: 0, tools: undefined, context: undefined, console: sharedConsole };
  // `keepStatic` true: the host installed this context last with the same
  // static part (compared whole) and sent only the run's part, up to and
  // including the mark.
  return function install(configJson, keepStatic) {
    if (!freezing && !inSession && globalsDefined) throw new TypeErrorCtor('a private realm serves one run');
    if (active !== null) throw new TypeErrorCtor('a run is already installed in this context');
    const kept = keepStatic === true;
    if (kept && shared === null) throw new TypeErrorCtor('no static part to keep in this context');
    let scriptId, seed, staticJson;
    // `configJson` comes from the host, and no script has run in this
    // context since its intrinsics were frozen (a shared realm) or at all
    // (a private realm, which serves one run): its `slice` is the
    // original, called directly (`apply` with an argument array costs
    // about three times as much).
    if (typeof configJson === 'string'
        && configJson.slice(runEnd, runEnd + staticMark.length) === staticMark
        && configJson.slice(0, runPrefix.length) === runPrefix) {
      seed = configJson.slice(runPrefix.length, runPrefix.length + seedLength);
      scriptId = configJson.slice(runPrefix.length + seedLength, runEnd);
      if (!kept) staticJson = configJson.slice(runEnd + staticMark.length, configJson.length - 1);
    } else if (kept) {
      throw new TypeErrorCtor('a kept static part needs the fixed layout');
    } else {
      const whole = jsonParse(configJson);
      const run = whole.run;
      if (typeof run === 'string') {
        seed = apply(stringSlice, run, [0, seedLength]);
        scriptId = apply(stringSlice, run, [seedLength]);
      } else {
        seed = run.seed;
        scriptId = run.scriptId;
      }
      staticJson = jsonStringify(whole.static);
    }
    pendingSeed = typeof seed === 'string' || isArray(seed) ? seed : null;
    // Installed from here on (making `context` reads its getters); an
    // install that throws leaves the context to be dropped, never reused.
    record.scriptId = scriptId;
    record.pending = create(null);
    record.waiting = 0;
    record.tools = undefined;
    record.context = undefined;
    active = record;
    if (!kept && (shared === null || shared.json !== staticJson)) shared = makeShared(staticJson);
    record.tools = shared.tools;
    record.context = shared.context;
    if (!globalsDefined) {
      defineProperty(G, 'tools', { get: currentOf('tools'), configurable: false, enumerable: false });
      defineProperty(G, 'context', { get: currentOf('context'), configurable: false, enumerable: false });
      defineProperty(G, 'console', { get: currentOf('console'), configurable: false, enumerable: false });
      // The global object is sealed for good: a script cannot create or
      // replace a global (scripts are strict, so trying throws a TypeError).
      // A private realm's too: only its built-ins are open. A session's
      // stays open for the bindings its runs declare.
      if (!inSession) freeze(G);
      globalsDefined = true;
    }
    return controller;
  };
})
