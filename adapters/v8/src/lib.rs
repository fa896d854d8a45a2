//! V8 isolates (the `v8` crate) as a harness engine.
//!
//! **Not yet run on this project's machines**: the `v8` crate links a
//! prebuilt V8 that these machines cannot download, so this adapter is
//! compile-checked here (`RUSTY_V8_SKIP_DOWNLOAD=1 cargo check -p
//! harness-v8 --all-targets`) and its tests run only where the library can
//! be had (`RUSTY_V8_ARCHIVE`, or network access). See `README.md` in this
//! crate for what a first run must check.
//!
//! Runs on the shared event loop like every engine. Each engine thread owns
//! one isolate; each run gets a fresh context with the shared hardening
//! prelude, hardened ahead of time while the worker is idle.
//!
//! How each limit is enforced:
//! - **Deadline and cancel**: the core watchdog calls this engine's stopper,
//!   which calls `IsolateHandle::terminate_execution` from the watchdog
//!   thread. A generation counter, checked under a lock, keeps a late stop
//!   from landing on the next run.
//! - **Heap**: the isolate's heap limit is the memory limit (at least
//!   [`MIN_HEAP_BYTES`]); a near-heap-limit callback terminates the script
//!   and raises the limit by [`OOM_HEADROOM_BYTES`] so V8 can unwind
//!   instead of aborting the process; the run is ScriptMemoryError and the
//!   isolate is rebuilt.
//! - **ArrayBuffers** (outside the V8 heap): an allocator that counts their
//!   bytes against the same limit and refuses past it.
//! - **Stack**: the isolate's stack limit is `Limits::stack_bytes` below the
//!   worker's stack at isolate creation; V8 throws `RangeError: Maximum call
//!   stack size exceeded`, reported as StackOverflowError.
//! - **Code generation from strings**: `--disallow-code-generation-from-strings`
//!   and the per-context switch, under the prelude's own blocks; no
//!   `WebAssembly` (the prelude deletes it: V8 152 has no flag that hides
//!   it short of `--jitless`), no
//!   `SharedArrayBuffer` or `Atomics` (the prelude deletes them).
//! - **Stacks**: the prelude pins `Error.prepareStackTrace` and
//!   `Error.stackTraceLimit`, so a script cannot see call sites; reported
//!   stacks keep only `script.js` frames.

use harness_core::engine::{
    parse_error, Body, EndCheck, Engine, EngineDescriptor, EngineFault, EngineSetup, EngineThread,
    FaultKind, HostHandle, Pooled, PooledEngine, PRELUDE, PRELUDE_FILE, TEST262_HOST,
};
use harness_core::{Capabilities, GlobalEval, GlobalEvalOutcome, ScriptError};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

mod buffers;

use buffers::BufferBudget;
use engine::*;

/// Engine name, as in `--engine`.
pub const ENGINE_NAME: &str = "v8";

/// The `v8` crate this adapter is built against (V8's own version is
/// added at run time, see [`engine_version`]).
pub const V8_CRATE_VERSION: &str = "v8 crate 152.2.0";

/// Process-wide V8 flags, set once before V8 initialises. V8 stops
/// reading flags at one it does not know (printing "unrecognized flag" on
/// stderr), so every flag here must exist in the V8 this crate links: the
/// test `code_generation_is_off_without_the_prelude` checks the first.
/// (`--no-expose-wasm` was here; V8 152 removed it.)
pub const V8_FLAGS: &str = "--disallow-code-generation-from-strings";

/// Stack of each engine thread; the JS stack limit is kept well inside it.
pub const THREAD_STACK_BYTES: usize = 16 << 20;
/// Native stack kept free below the JS limit, for host code and the parser.
const STACK_MARGIN_BYTES: u64 = 2 << 20;

/// The smallest heap an isolate is given: a V8 context alone needs a few
/// MiB, so memory limits below this are raised to it.
pub const MIN_HEAP_BYTES: u64 = 16 << 20;

/// What the near-heap-limit callback adds to the heap limit when it
/// terminates a script, so that V8 can finish the allocation in progress
/// and unwind instead of aborting the process. One large object (a string
/// or an array's backing store) is at most about 1 GiB.
pub const OOM_HEADROOM_BYTES: usize = 1 << 30;

/// Garbage a reused context may gather past the heap left by the last
/// collection between runs before the worker collects (a full collection,
/// after the report was sent). Run to run, V8's own collector keeps the
/// heap in bounds; this keeps one run's garbage out of the next run's
/// memory figure.
const GC_SLACK_BYTES: usize = 4 << 20;

/// Initialises V8 once per process (platform, flags).
fn init_v8() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        v8::V8::set_flags_from_string(V8_FLAGS);
        let platform = v8::new_default_platform(0, false).make_shared();
        v8::V8::initialize_platform(platform);
        v8::V8::initialize();
    });
}

/// `V8 <version> (v8 crate …)`. Does not start V8 (its version is a
/// constant): every binary built with V8 asks for the descriptor, also a
/// QuickJS or Boa worker, whose address-space cap V8's start-up reserves
/// far more than (those workers died of SIGABRT when this started V8).
pub fn engine_version() -> String {
    format!("V8 {} ({V8_CRATE_VERSION})", v8::V8::get_version())
}

fn internal(msg: &str) -> EngineFault {
    EngineFault::new(FaultKind::Internal, "Error", msg)
}

fn interrupted() -> EngineFault {
    EngineFault::new(FaultKind::Interrupted, "InternalError", "interrupted")
}

fn out_of_memory() -> EngineFault {
    EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory")
}

/// Maps V8's own error messages to fault kinds.
fn classify(name: &str, message: &str) -> FaultKind {
    match (name, message) {
        ("RangeError", m) if m.starts_with("Maximum call stack size exceeded") => {
            FaultKind::StackOverflow
        }
        _ => FaultKind::Thrown,
    }
}

/// The limits an isolate is built with; a run with other limits gets a
/// new isolate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IsolateKey {
    heap_bytes: u64,
    stack_bytes: u64,
}

impl IsolateKey {
    fn of(limits: &harness_core::Limits) -> Self {
        IsolateKey {
            heap_bytes: limits.memory_bytes.max(MIN_HEAP_BYTES),
            stack_bytes: limits
                .stack_bytes
                .clamp(64 << 10, THREAD_STACK_BYTES as u64 - STACK_MARGIN_BYTES),
        }
    }
}

/// Who may stop the isolate, and which run a stop is for.
#[derive(Debug, Default)]
struct StopControl {
    /// The current run's number; a stopper armed for another run does
    /// nothing. Held while terminating, so a stop never lands after the
    /// run it was for has been closed.
    generation: Mutex<u64>,
    /// The watchdog stopped the current run.
    stopped: AtomicBool,
}

/// The near-heap-limit callback's state; lives in a `Box` owned by the
/// isolate's slot, which drops the isolate first.
struct HeapGuard {
    oom: AtomicBool,
    handle: v8::IsolateHandle,
}

#[allow(unsafe_code)]
unsafe extern "C" fn near_heap_limit(
    data: *mut c_void,
    current_heap_limit: usize,
    _initial_heap_limit: usize,
) -> usize {
    // SAFETY: `data` is the `HeapGuard` boxed in `IsolateSlot`, which
    // outlives the isolate that calls this.
    let guard = unsafe { &*(data as *const HeapGuard) };
    guard.oom.store(true, Ordering::SeqCst);
    guard.handle.terminate_execution();
    current_heap_limit.saturating_add(OOM_HEADROOM_BYTES)
}

/// Where the native host function finds the current run.
#[derive(Default)]
struct HostSlot(RefCell<Option<HostHandle>>);

/// `host(op, a, b)`: the one native function of the engine protocol.
fn host_callback(
    scope: &mut v8::PinScope,
    args: v8::FunctionCallbackArguments,
    mut rv: v8::ReturnValue<v8::Value>,
) {
    // Strings only: converting anything else could run script code
    // (`toString`) inside the host call.
    let arg = |i: i32| {
        let v = args.get(i);
        if v.is_string() {
            v.to_rust_string_lossy(scope)
        } else {
            String::new()
        }
    };
    let (op, a, b) = (arg(0), arg(1), arg(2));
    // Bind the handle first: the borrow must end before the call.
    let host = scope
        .get_slot::<HostSlot>()
        .and_then(|s| s.0.borrow().clone());
    let answer = host.map(|h| h.call(&op, &a, &b)).unwrap_or_default();
    if let Some(s) = v8::String::new(scope, &answer) {
        rv.set(s.into());
    }
}

/// `print(v)` for test262.
fn print_callback(
    scope: &mut v8::PinScope,
    args: v8::FunctionCallbackArguments,
    _rv: v8::ReturnValue<v8::Value>,
) {
    let text = args.get(0).to_rust_string_lossy(scope);
    if let Some(p) = scope.get_slot::<Prints>() {
        p.0.borrow_mut().push(text);
    }
}

#[derive(Default)]
struct Prints(RefCell<Vec<String>>);

/// A hardened context with no run installed: fresh from the prelude's
/// hardening, or handed back by a run that ended clean (see
/// [`V8Run::end_run`]).
struct Warm {
    install: v8::Global<v8::Function>,
    context: v8::Global<v8::Context>,
    /// The context's [`Engine::context_id`].
    id: u64,
    /// The last run's end-of-run probe and its list, evaluated in this
    /// context (the closures read the global scope when called, and no
    /// script reaches them).
    probe: Option<(String, v8::Global<v8::Value>)>,
}

/// One isolate, owned by one engine thread. Field order is drop order:
/// the isolate goes before the state its callbacks point to.
struct IsolateSlot {
    isolate: v8::OwnedIsolate,
    key: IsolateKey,
    heap: Box<HeapGuard>,
    buffers: Arc<BufferBudget>,
    stop: Arc<StopControl>,
    /// Heap bytes in use after the last collection between runs.
    after_gc: usize,
}

impl IsolateSlot {
    /// Builds an isolate on this thread. Isolates on one thread must be
    /// dropped in reverse order of creation, so the caller drops the old
    /// one first.
    #[allow(unsafe_code)]
    fn new(key: IsolateKey) -> Self {
        init_v8();
        let buffers = Arc::new(BufferBudget::default());
        let here = 0u8;
        let stack_top = std::ptr::addr_of!(here) as usize;
        let stack_limit = stack_top.saturating_sub(key.stack_bytes as usize);
        let params = v8::CreateParams::default()
            .heap_limits(0, key.heap_bytes as usize)
            .array_buffer_allocator(buffers::allocator(&buffers));
        // SAFETY: the limit is an address inside this engine thread's
        // stack (its size is THREAD_STACK_BYTES, of which `stack_bytes`
        // plus a margin is at most all), and the isolate only ever runs on
        // this thread.
        let params = unsafe { params.set_stack_limit(stack_limit as *mut u32) };
        let mut isolate = v8::Isolate::new(params);
        isolate.set_microtasks_policy(v8::MicrotasksPolicy::Explicit);
        isolate.set_slot(HostSlot::default());
        isolate.set_slot(Prints::default());
        let heap = Box::new(HeapGuard {
            oom: AtomicBool::new(false),
            handle: isolate.thread_safe_handle(),
        });
        let data = &*heap as *const HeapGuard as *mut c_void;
        isolate.add_near_heap_limit_callback(near_heap_limit, data);
        // A refused ArrayBuffer ends the run at once, as the heap limit does.
        let handle = isolate.thread_safe_handle();
        buffers.on_refuse(move || {
            handle.terminate_execution();
        });
        IsolateSlot {
            isolate,
            key,
            heap,
            buffers,
            stop: Arc::new(StopControl::default()),
            after_gc: 0,
        }
    }

    /// Starts a run: a new generation, no stop, no OOM, buffers armed.
    fn arm(&self, memory_bytes: u64) -> u64 {
        let mut g = self
            .stop
            .generation
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *g += 1;
        // A termination left from outside a run (the heap callback during
        // a prewarm) must not hit this one.
        self.heap.handle.cancel_terminate_execution();
        self.stop.stopped.store(false, Ordering::SeqCst);
        self.heap.oom.store(false, Ordering::SeqCst);
        self.buffers
            .arm(usize::try_from(memory_bytes).unwrap_or(usize::MAX));
        *g
    }

    /// Ends a run: no stop armed for it can land any more, and a stop
    /// that landed is cleared.
    fn close(&mut self) {
        {
            let mut g = self
                .stop
                .generation
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *g += 1;
            self.isolate.cancel_terminate_execution();
        }
        self.buffers.disarm();
        if let Some(h) = self.isolate.get_slot::<HostSlot>() {
            h.0.borrow_mut().take();
        }
    }

    /// Whether the current run hit a limit the engine enforces by
    /// terminating: the heap, or the watchdog.
    fn stop_fault(&self) -> Option<EngineFault> {
        if self.heap.oom.load(Ordering::SeqCst) || self.buffers.refused() {
            Some(out_of_memory())
        } else if self.stop.stopped.load(Ordering::SeqCst) {
            Some(interrupted())
        } else {
            None
        }
    }
}

/// Scripts are strict, as on every engine (QuickJS and Boa set a flag; V8
/// takes the directive). It goes on the wrapper's own first line, so user
/// line numbers do not move.
fn strict_source(wrapped_source: &str) -> String {
    let mut s = String::with_capacity(wrapped_source.len() + 14);
    s.push_str("'use strict'; ");
    s.push_str(wrapped_source);
    s
}

/// Compiles and runs `source` as `name`; reads a thrown error into a
/// fault (with `Syntax` for compile errors).
macro_rules! compile_run {
    ($tc:ident, $source:expr, $name:expr) => {
        match compile!($tc, $source, $name) {
            Ok(script) => match script.run($tc) {
                Some(v) => Ok(v),
                None => Err(caught_fault($tc)),
            },
            Err(f) => Err(f),
        }
    };
}

/// Compiles `source` as `name` without running it (a `Syntax` fault for
/// compile errors).
macro_rules! compile {
    ($tc:ident, $source:expr, $name:expr) => {
        match v8::String::new($tc, $name) {
            None => Err(internal("resource name")),
            Some(resource) => {
                let origin = v8::ScriptOrigin::new(
                    $tc,
                    resource.into(),
                    0,
                    0,
                    false,
                    0,
                    None,
                    false,
                    false,
                    false,
                    None,
                );
                match v8::String::new($tc, $source) {
                    None => Err(out_of_memory()),
                    Some(code) => v8::Script::compile($tc, code, Some(&origin))
                        .ok_or_else(|| syntax_fault($tc)),
                }
            }
        }
    };
}

/// Runs `$body` with `$tc`, a TryCatch scope inside `$context` (a
/// `Global<Context>`) on `$isolate`.
macro_rules! in_context {
    ($isolate:expr, $context:expr, |$tc:ident| $body:expr) => {{
        let isolate = $isolate;
        v8::scope!(let hs, isolate);
        let context = v8::Local::new(hs, $context);
        let cs = &mut v8::ContextScope::new(hs, context);
        v8::tc_scope!(let $tc, cs);
        $body
    }};
}

// After `in_context!`, which it uses.
mod engine;

/// The pending exception of a TryCatch scope, as a fault.
fn caught_fault(
    tc: &mut v8::PinnedRef<'_, v8::TryCatch<'_, '_, v8::HandleScope<'_>>>,
) -> EngineFault {
    if tc.has_terminated() {
        // The slot decides between OOM and interrupt; see `finish`.
        return interrupted();
    }
    let Some(exception) = tc.exception() else {
        return internal("a V8 call failed without an exception");
    };
    exception_fault(tc, exception)
}

/// Reads name, message and stack off a thrown value.
fn exception_fault(
    scope: &v8::PinScope<'_, '_>,
    exception: v8::Local<'_, v8::Value>,
) -> EngineFault {
    let Ok(obj) = v8::Local::<v8::Object>::try_from(exception) else {
        return EngineFault::new(
            FaultKind::Thrown,
            "",
            "a non-error value was thrown by the engine",
        );
    };
    let get = |k: &str| -> String {
        let Some(key) = v8::String::new(scope, k) else {
            return String::new();
        };
        match obj.get(scope, key.into()) {
            Some(v) if v.is_string() => v.to_rust_string_lossy(scope),
            _ => String::new(),
        }
    };
    let (name, message, stack) = (get("name"), get("message"), get("stack"));
    EngineFault::new(classify(&name, &message), name, message).with_stack(stack)
}

/// A compile error, with V8's line and column turned into a
/// `script.js:L:C` frame for the loop to place.
fn syntax_fault(
    tc: &mut v8::PinnedRef<'_, v8::TryCatch<'_, '_, v8::HandleScope<'_>>>,
) -> EngineFault {
    let mut f = caught_fault(tc);
    if f.kind == FaultKind::Thrown {
        f.kind = FaultKind::Syntax;
    }
    if let Some(message) = tc.message() {
        if let Some(line) = message.get_line_number(tc) {
            let column = message.get_start_column().saturating_add(1);
            f.stack = Some(format!(
                "    at {}:{line}:{column}",
                harness_core::error::SCRIPT_FILE
            ));
        }
    }
    f
}

/// A function-valued property of `obj`.
fn function_prop<'s>(
    scope: &v8::PinScope<'s, '_>,
    obj: v8::Local<'s, v8::Value>,
    key: &str,
) -> Option<v8::Local<'s, v8::Function>> {
    let obj = v8::Local::<v8::Object>::try_from(obj).ok()?;
    let key = v8::String::new(scope, key)?;
    let v = obj.get(scope, key.into())?;
    v8::Local::<v8::Function>::try_from(v).ok()
}

/// Creates a context on the slot's isolate and runs the hardening half
/// of the prelude (or, for `raw`, leaves the context as V8 made it, with
/// code generation from strings allowed).
fn new_context(slot: &mut IsolateSlot, raw: bool) -> Result<Warm, EngineFault> {
    new_context_as(slot, raw, false)
}

/// [`new_context_as`] with a private realm (`unfrozen`) or, with
/// `session`, a session's realm: `harden(host, 'session')`, built-ins and
/// the global object open, kept from run to run.
fn new_realm(slot: &mut IsolateSlot, unfrozen: bool, session: bool) -> Result<Warm, EngineFault> {
    new_context_mode(slot, false, unfrozen, session)
}

/// [`new_context`], or with `unfrozen` everything but the intrinsics
/// hardened (a private realm: a `Realm::Private` run, or test262's
/// [`GlobalEval::unfrozen`]), in a context of
/// its own.
fn new_context_as(slot: &mut IsolateSlot, raw: bool, unfrozen: bool) -> Result<Warm, EngineFault> {
    new_context_mode(slot, raw, unfrozen, false)
}

fn new_context_mode(
    slot: &mut IsolateSlot,
    raw: bool,
    unfrozen: bool,
    session: bool,
) -> Result<Warm, EngineFault> {
    let isolate = &mut slot.isolate;
    v8::scope!(let hs, isolate);
    let context = v8::Context::new(hs, Default::default());
    context.set_allow_generation_from_strings(raw);
    let global_context = v8::Global::new(hs, context);
    let cs = &mut v8::ContextScope::new(hs, context);
    v8::tc_scope!(let tc, cs);
    let install = if raw {
        // test262 raw mode: no prelude; `install` is never called.
        let f = v8::Function::new(tc, print_callback).ok_or_else(|| internal("function"))?;
        v8::Global::new(tc, f)
    } else {
        let prelude = compile_run!(tc, PRELUDE, PRELUDE_FILE)?;
        let prelude = v8::Local::<v8::Function>::try_from(prelude)
            .map_err(|_| internal("the prelude is not a function"))?;
        let host_fn = v8::Function::new(tc, host_callback)
            .ok_or_else(|| internal("cannot create the host function"))?;
        let recv: v8::Local<v8::Value> = v8::undefined(tc).into();
        let mode: v8::Local<v8::Value> = if session {
            v8::String::new(tc, "session")
                .ok_or_else(|| internal("cannot create a string"))?
                .into()
        } else {
            v8::Boolean::new(tc, unfrozen).into()
        };
        let install = prelude
            .call(tc, recv, &[host_fn.into(), mode])
            .ok_or_else(|| caught_fault(tc))?;
        let install = v8::Local::<v8::Function>::try_from(install)
            .map_err(|_| internal("harden did not return a function"))?;
        v8::Global::new(tc, install)
    };
    Ok(Warm {
        install,
        context: global_context,
        id: harness_core::engine::new_context_id(),
        probe: None,
    })
}

/// Per-thread state: the isolate and a context hardened ahead of time.
/// Field order is drop order: handles before the isolate.
#[derive(Default)]
struct V8Thread {
    warm: Option<Warm>,
    slot: Option<IsolateSlot>,
    /// The limits of the last isolate, for rebuilding it ahead of the
    /// next run after a fault dropped it.
    last_key: Option<IsolateKey>,
    /// Set when the thread serves one session.
    session: Option<V8Session>,
}

/// A session thread's state: the realm itself waits in the thread's
/// `warm` between runs, on one isolate.
struct V8Session {
    thread: harness_core::session::SessionThread<()>,
    /// The isolate's limits, fixed by the first run: another isolate
    /// would lose the realm.
    key: Option<IsolateKey>,
}

impl std::fmt::Debug for V8Thread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V8Thread")
            .field("isolate", &self.slot.as_ref().map(|s| s.key))
            .field("warm", &self.warm.is_some())
            .finish()
    }
}

impl V8Thread {
    /// The isolate for `key`, rebuilt if it was made for other limits.
    fn slot_for(&mut self, key: IsolateKey) -> &mut IsolateSlot {
        if self.slot.as_ref().is_some_and(|s| s.key != key) {
            // Handles first, then the isolate, before the next is made.
            self.warm = None;
            self.slot = None;
        }
        self.last_key = Some(key);
        self.slot.get_or_insert_with(|| IsolateSlot::new(key))
    }

    /// After a run: close it; drop the isolate if it may be unhealthy (a
    /// fault: its heap limit may have been raised, a termination may be
    /// pending), otherwise keep `reuse` (the context the run handed back
    /// clean) for the next run.
    fn recycle(&mut self, tainted: bool, reuse: Option<Warm>) {
        let Some(slot) = &mut self.slot else { return };
        slot.close();
        if tainted || slot.heap.oom.load(Ordering::SeqCst) {
            drop(reuse);
            self.warm = None;
            self.slot = None;
            return;
        }
        // A run refused before it loaded (a source that is not one body)
        // left the warm context where it was: it stays.
        if reuse.is_some() {
            self.warm = reuse;
        }
        let heap = slot.isolate.get_heap_statistics().used_heap_size();
        if slot.buffers.used() > 0 || heap > slot.after_gc.saturating_add(GC_SLACK_BYTES) {
            // Backing stores a run left count against the next run's
            // limit until V8 collects them, and a reused context keeps
            // the heap a run filled: collect now, after the report was
            // sent.
            slot.isolate.low_memory_notification();
            slot.after_gc = slot.isolate.get_heap_statistics().used_heap_size();
        }
    }

    /// Hardens a context for the next run, while the worker is idle (on
    /// a new isolate with the last one's limits if a fault dropped it).
    fn prewarm(&mut self) {
        if self.warm.is_some() {
            return;
        }
        if let (None, Some(key)) = (&self.slot, self.last_key) {
            self.slot_for(key);
        }
        if let Some(slot) = &mut self.slot {
            // A failure here is not fatal: `load` hardens on demand.
            self.warm = new_context(slot, false).ok();
            if slot.heap.oom.load(Ordering::SeqCst) {
                // The heap callback raised the limit: start over.
                self.warm = None;
                self.slot = None;
            }
        }
    }
}

impl EngineThread for V8Thread {
    /// Lends an engine to `run` (which says whether it is tainted), then
    /// closes the run and keeps its context for the next run if it ended
    /// clean, or hardens a fresh one: after `run` has answered its caller,
    /// off the critical path.
    fn begin_session(&mut self, spec: harness_core::session::SessionSpec) -> bool {
        self.warm = None;
        self.session = Some(V8Session {
            thread: harness_core::session::SessionThread::begin(spec),
            key: None,
        });
        true
    }

    fn lend(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        if let Some(why) = self.session.as_ref().and_then(|s| s.thread.ended()) {
            run(Err(EngineFault::session_ended(why)));
            return;
        }
        let session = self.session.is_some();
        let (tainted, reuse) = {
            let mut engine = V8Run {
                worker: self,
                handles: None,
                peak: 0,
                drained: false,
                private: false,
                spare: None,
                end_check: EndCheck::Nothing,
                session,
                loaded: false,
            };
            let tainted = run(Ok(&mut engine));
            if session && !tainted && !engine.loaded {
                // Refused before it loaded: the realm stays as it was.
                return;
            }
            let reuse = if tainted {
                None
            } else {
                let drained = engine.drained;
                engine
                    .end_run()
                    .or_else(|| engine.spare.take().filter(|_| drained))
            };
            (tainted, reuse)
        };
        if session {
            // The realm waits in `warm` for the session's next run; any
            // other ending ends the session, and the isolate with it.
            let ended = tainted || reuse.is_none();
            self.recycle(ended, reuse);
            // The isolate may have been dropped after all (its heap limit
            // raised by the near-limit callback): the realm with it.
            let ended = ended || self.warm.is_none();
            let used = self.slot.as_mut().map_or(0, |s| {
                s.isolate.get_heap_statistics().used_heap_size() as u64
            });
            if let Some(s) = &mut self.session {
                if !s.thread.after_run((!ended).then_some(()), tainted) {
                    s.thread.spec.set_retained_bytes(used);
                }
            }
            return;
        }
        self.recycle(tainted, reuse);
        self.prewarm();
    }

    fn check(&mut self, body: &Body) -> Result<(), ScriptError> {
        let source = body.source();
        let wrapped = strict_source(body.wrapped());
        let key = self
            .slot
            .as_ref()
            .map(|s| s.key)
            .unwrap_or_else(|| IsolateKey::of(&harness_core::Limits::default()));
        let slot = self.slot_for(key);
        let result: Result<(), EngineFault> = {
            let isolate = &mut slot.isolate;
            v8::scope!(let hs, isolate);
            let context = v8::Context::new(hs, Default::default());
            context.set_allow_generation_from_strings(false);
            let cs = &mut v8::ContextScope::new(hs, context);
            v8::tc_scope!(let tc, cs);
            // Compiling runs nothing.
            compile!(tc, &wrapped, harness_core::error::SCRIPT_FILE).map(|_| ())
        };
        result.map_err(|f| match f.kind {
            FaultKind::Internal => ScriptError::internal(f.message),
            _ => parse_error(&f, source),
        })
    }

    /// Global code for test262: a fresh context (hardened or raw), a
    /// `print` global, a minimal `$262`, jobs drained, a deadline enforced
    /// by a watchdog thread that terminates the isolate.
    fn eval_global(&mut self, eval: GlobalEval) -> GlobalEvalOutcome {
        let key = IsolateKey {
            heap_bytes: 256 << 20,
            stack_bytes: 1 << 20,
        };
        // A fresh isolate per test: test262 may leave anything behind.
        self.warm = None;
        self.slot = None;
        let slot = self.slot_for(key);
        let generation = slot.arm(256 << 20);
        if let Some(p) = slot.isolate.get_slot::<Prints>() {
            p.0.borrow_mut().clear();
        }
        let stop = stopper_for(slot, generation);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let timeout = Duration::from_millis(eval.timeout_ms);
        let watchdog = std::thread::spawn(move || {
            if done_rx.recv_timeout(timeout).is_err() {
                stop();
            }
        });
        let outcome = run_global(slot, &eval);
        let _ = done_tx.send(());
        let _ = watchdog.join();
        let prints = slot
            .isolate
            .get_slot::<Prints>()
            .map(|p| p.0.borrow().clone())
            .unwrap_or_default();
        let timed_out = slot.stop.stopped.load(Ordering::SeqCst);
        self.warm = None;
        self.slot = None;
        match outcome {
            _ if timed_out => GlobalEvalOutcome::TimedOut { prints },
            Ok(()) => GlobalEvalOutcome::Completed { prints },
            Err((true, f)) => GlobalEvalOutcome::ParseError {
                name: f.name,
                message: f.message,
            },
            Err((false, f)) => GlobalEvalOutcome::Threw {
                name: f.name,
                message: f.message,
                prints,
            },
        }
    }
}

/// Runs test262 global code; `Err((parse, fault))` on failure.
fn run_global(slot: &mut IsolateSlot, eval: &GlobalEval) -> Result<(), (bool, EngineFault)> {
    let warm = new_context_as(slot, !eval.hardened, eval.unfrozen).map_err(|f| (false, f))?;
    in_context!(&mut slot.isolate, &warm.context, |tc| {
        let print =
            v8::Function::new(tc, print_callback).ok_or_else(|| (false, internal("print")))?;
        let global = tc.get_current_context().global(tc);
        let key = v8::String::new(tc, "print").ok_or_else(|| (false, internal("print")))?;
        global.set(tc, key.into(), print.into());
        compile_run!(tc, TEST262_HOST, "test262-host.js").map_err(|f| (false, f))?;
        let script = compile!(tc, &eval.source, "test262.js").map_err(|f| (true, f))?;
        if script.run(tc).is_none() {
            return Err((false, caught_fault(tc)));
        }
        tc.perform_microtask_checkpoint();
        if tc.has_caught() {
            return Err((false, caught_fault(tc)));
        }
        Ok(())
    })
}

/// A stopper for `generation` of `slot`'s runs: terminates the isolate
/// if that run is still the current one.
fn stopper_for(slot: &IsolateSlot, generation: u64) -> Box<dyn FnOnce() + Send> {
    let stop = slot.stop.clone();
    let handle = slot.isolate.thread_safe_handle();
    Box::new(move || {
        let g = stop.generation.lock().unwrap_or_else(|p| p.into_inner());
        if *g == generation {
            stop.stopped.store(true, Ordering::SeqCst);
            handle.terminate_execution();
        }
    })
}

/// V8 isolates on the shared event loop: its descriptor and thread state
/// for [`Pooled`].
#[derive(Debug, Clone, Copy, Default)]
pub struct V8Engine;

/// The V8 engine in this process: a pool of engine threads, each with its
/// own isolate (64 at most by default).
pub type V8 = Pooled<V8Engine>;

/// The old name of [`V8Engine`].
#[deprecated(note = "renamed to V8Engine")]
pub type V8Adapter = V8Engine;

/// V8: it stops scripts by terminating the isolate and enforces the memory
/// limit with its heap limit and buffer allocator.
pub fn descriptor() -> EngineDescriptor {
    EngineDescriptor::new(
        ENGINE_NAME,
        engine_version(),
        Capabilities::NONE
            .with_interrupt()
            .with_memory_limit()
            .with_stack_guard(),
        || std::sync::Arc::new(V8::new()),
        || Box::<V8Thread>::default(),
    )
    .with_in_process_threads(|n| std::sync::Arc::new(V8::with_max_workers(n)))
    .with_sessions(|spec| V8::for_session(V8Engine, spec).map(|p| std::sync::Arc::new(p) as _))
    .with_thread_stack_bytes(THREAD_STACK_BYTES)
    .with_process_setup(widen_address_space)
}

/// The address space (`RLIMIT_AS`) a V8 worker gets at least. V8 reserves
/// far more address space than it uses: one isolate running `return 1 + 1`
/// had a `VmPeak` of 48.4 GiB (a 16 GiB reservation stays; the rest is
/// reserved to find aligned regions and given back) against 24 MiB
/// resident. Under the default 4 GiB cap the worker died at start with
/// "Failed to reserve virtual memory for CodeRange". Memory is bounded by
/// the heap limit and the `ArrayBuffer` allocator, as in process; this cap
/// only keeps a runaway native reservation from growing without end.
pub const WORKER_ADDRESS_SPACE_BYTES: u64 = 64 << 30;

/// Raises the workers' address-space cap to [`WORKER_ADDRESS_SPACE_BYTES`]
/// (a cap the caller removed stays removed).
fn widen_address_space(opts: &mut harness_core::process::ProcessOptions) {
    if let Some(bytes) = opts.address_space_bytes {
        opts.address_space_bytes = Some(bytes.max(WORKER_ADDRESS_SPACE_BYTES));
    }
}

impl PooledEngine for V8Engine {
    fn descriptor() -> EngineDescriptor {
        descriptor()
    }

    fn has_sessions(&self) -> bool {
        true
    }

    fn new_thread(&self) -> Box<dyn EngineThread> {
        Box::<V8Thread>::default()
    }
}

#[cfg(test)]
mod tests;
