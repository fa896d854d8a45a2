//! QuickJS (quickjs-ng through rquickjs) as a harness engine.
//!
//! Runs on engine threads with a plain rquickjs [`Runtime`] driven by the
//! core event loop (never rquickjs's `AsyncRuntime`). A context is made
//! with a deliberate set of intrinsics and hardened once by the shared
//! prelude (every reachable intrinsic frozen), then serves one run after
//! another: a run that ends clean (no fault, no job queued, no tool call
//! or task pending) hands the context to the next run; any other ending
//! drops it, and a fault (timeout, memory, stack, cancel) drops the
//! runtime too. The cross-run isolation suite holds this to "no run can
//! observe or influence another".
//! Deadlines and cancellation are enforced by the interrupt handler, memory
//! by the runtime's malloc limit (rquickjs's `rust-alloc` feature, which
//! would bypass it, is never enabled), recursion by the stack limit.
//!
//! # Examples
//! ```
//! use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
//! use harness_quickjs::QuickJs;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let engine = QuickJs::new();
//! let report = engine.execute(ExecutionRequest::new("return 1 + 1")).await;
//! assert_eq!(report.value, Some(serde_json::json!(2)));
//! # });
//! ```

use harness_core::engine::{
    parse_error, Body, EndCheck, Engine, EngineDescriptor, EngineFault, EngineSetup, EngineThread,
    FaultKind, HostHandle, Pooled, PooledEngine, PRELUDE, PRELUDE_FILE, TEST262_HOST,
};
use harness_core::session::{SessionSpec, SessionThread};
use harness_core::CancellationToken;
use harness_core::{Capabilities, GlobalEval, GlobalEvalOutcome, ScriptError};
use rquickjs::context::EvalOptions;
use rquickjs::module::WriteOptions;
use rquickjs::{Context, Ctx, Function, Module, Object, Persistent, Runtime, Value};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use harness_quickjs_common::{
    cached_probe, end_run, eval_compiled, eval_global, read_exception, AllocState,
    CountingAllocator, Intrinsics, ProbeCache, COMPILE_ONLY, STRICT_SCRIPT,
};

mod engine;

use engine::*;

/// Engine name, as in `--engine`.
pub const ENGINE_NAME: &str = "quickjs";

/// The QuickJS version compiled in (quickjs-ng, vendored by rquickjs-sys).
pub const QUICKJS_VERSION: &str = "quickjs-ng 0.16.2 (rquickjs 0.14)";

/// Stack of each engine thread. The JS stack limit is kept well inside it.
const THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Native stack kept free below the JS limit, for host code and the parser.
const STACK_MARGIN_BYTES: u64 = 2 * 1024 * 1024;

/// The prelude compiled once per process to QuickJS bytecode (as a module
/// whose default export is the prelude function). Parsing it costs about a
/// millisecond; loading bytecode a small fraction of that.
static PRELUDE_BYTECODE: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();

fn prelude_bytecode() -> Result<&'static [u8], EngineFault> {
    PRELUDE_BYTECODE
        .get_or_init(|| {
            let rt = Runtime::new().map_err(|e| e.to_string())?;
            let ctx = Context::custom::<Intrinsics>(&rt).map_err(|e| e.to_string())?;
            ctx.with(|ctx| {
                let source = format!("export default {PRELUDE};");
                let module = Module::declare(ctx.clone(), PRELUDE_FILE, source).map_err(|e| {
                    let f = exception_fault(ctx.catch());
                    format!("prelude does not compile: {e}: {} {}", f.name, f.message)
                })?;
                let opts = WriteOptions {
                    strip_source: true,
                    strip_debug: true,
                    ..WriteOptions::default()
                };
                module.write(opts).map_err(|e| e.to_string())
            })
        })
        .as_deref()
        .map_err(|e| internal(e))
}

/// Instantiates the prelude function from the cached bytecode.
#[allow(unsafe_code)]
fn load_prelude<'js>(ctx: &Ctx<'js>, bytes: &'static [u8]) -> rquickjs::Result<Function<'js>> {
    // SAFETY: `bytes` was produced by `Module::write` in this process, by the
    // same QuickJS build, and is 'static, as JS_READ_OBJ_ROM_DATA requires.
    let module = unsafe { Module::load(ctx.clone(), bytes)? };
    let (module, _promise) = module.eval()?;
    module.get("default")
}

/// Compiles (and unless `compile_only`, evaluates) the wrapped source as
/// strict global code named `script.js`.
fn compile<'js>(ctx: &Ctx<'js>, body: &Body, compile_only: bool) -> rquickjs::Result<Value<'js>> {
    debug_assert_eq!(harness_core::error::SCRIPT_FILE, "script.js");
    let mut flags = STRICT_SCRIPT;
    if compile_only {
        flags |= COMPILE_ONLY;
    }
    eval_global(ctx, body.wrapped(), c"script.js", flags)
}

/// The longest wrapped script a context keeps compiled ([`Warm::script`]).
const KEPT_SCRIPT_BYTES: usize = 32 * 1024;

/// The script's function, from the context's last script compiled if it
/// is the same text (`cache`), else compiled now and, where `keep`, kept
/// in `cache` for the next run. A script with a template literal is never
/// kept: a tagged template's strings array is made when the script is
/// compiled, and would be one object in two runs.
fn script_function<'js>(
    ctx: &Ctx<'js>,
    cache: &mut ProbeCache,
    body: &Body,
    keep: bool,
) -> rquickjs::Result<Function<'js>> {
    let text = body.wrapped();
    if let Some((kept, compiled)) = cache {
        if kept == text {
            return eval_compiled(ctx, &compiled.clone().restore(ctx)?)?.get();
        }
    }
    if !keep || text.len() > KEPT_SCRIPT_BYTES || text.contains('`') {
        return compile(ctx, body, false)?.get();
    }
    let compiled = compile(ctx, body, true)?;
    *cache = Some((text.to_owned(), Persistent::save(ctx, compiled.clone())));
    eval_compiled(ctx, &compiled)?.get()
}

/// Where a context's native host function finds the current run.
type HostSlot = Rc<RefCell<Option<HostHandle>>>;

/// A hardened context with no run installed: fresh, or handed on by a
/// run that ended clean. Field order is drop order.
struct Warm {
    install: Persistent<Function<'static>>,
    host: HostSlot,
    /// The last run's end-of-run probe, compiled in this context.
    probe: ProbeCache,
    /// The last script compiled in this context ([`script_function`]).
    script: ProbeCache,
    /// The static part of the config this context was last installed
    /// with (`harness_abi::run_config::split_static`); empty when unknown.
    installed_static: String,
    ctx: Context,
    /// The context's [`Engine::context_id`].
    id: u64,
}

fn context_fault(e: rquickjs::Error) -> EngineFault {
    match e {
        rquickjs::Error::Allocation => {
            EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory")
        }
        e => internal(&e.to_string()),
    }
}

/// Creates a context on `rt` and runs the hardening half of the prelude.
fn harden(rt: &Runtime) -> Result<Warm, EngineFault> {
    harden_as(rt, false)
}

/// [`harden`], or with `unfrozen` everything but the intrinsics hardened:
/// a private realm, for one run ([`Realm::Private`]) or test262's
/// [`GlobalEval::unfrozen`], and dropped after it.
fn harden_as(rt: &Runtime, unfrozen: bool) -> Result<Warm, EngineFault> {
    harden_realm(
        rt,
        if unfrozen {
            Realm::Private
        } else {
            Realm::Shared
        },
    )
}

/// Which realm the prelude makes: `harden(host, false | true | 'session')`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Realm {
    Shared,
    Private,
    Session,
}

/// A session's realm: built-ins open, the global object open for the
/// session's bindings, kept from run to run.
fn harden_session(rt: &Runtime) -> Result<Warm, EngineFault> {
    harden_realm(rt, Realm::Session)
}

fn harden_realm(rt: &Runtime, realm: Realm) -> Result<Warm, EngineFault> {
    let bytecode = prelude_bytecode()?;
    let ctx = Context::custom::<Intrinsics>(rt).map_err(context_fault)?;
    let host: HostSlot = Rc::new(RefCell::new(None));
    let slot = host.clone();
    let install = ctx.with(|ctx| {
        let run = || -> rquickjs::Result<Function<'_>> {
            let prelude = load_prelude(&ctx, bytecode)?;
            let host_fn = Function::new(ctx.clone(), move |op: String, a: String, b: String| {
                // Bind the handle first: the borrow must end before the call.
                let current = slot.borrow().clone();
                match current {
                    Some(h) => h.call(&op, &a, &b),
                    None => String::new(),
                }
            })?;
            let mode = match realm {
                Realm::Shared => Value::new_bool(ctx.clone(), false),
                Realm::Private => Value::new_bool(ctx.clone(), true),
                Realm::Session => rquickjs::String::from_str(ctx.clone(), "session")?.into_value(),
            };
            prelude.call((host_fn, mode))
        };
        match run() {
            Ok(f) => Ok(Persistent::save(&ctx, f)),
            Err(rquickjs::Error::Exception) => Err(exception_fault(ctx.catch())),
            Err(e) => Err(context_fault(e)),
        }
    })?;
    Ok(Warm {
        install,
        host,
        probe: None,
        script: None,
        installed_static: String::new(),
        ctx,
        id: harness_core::engine::new_context_id(),
    })
}

/// What the interrupt handler checks; set for each run.
#[derive(Default)]
struct InterruptState {
    deadline: Option<Instant>,
    cancel: Option<CancellationToken>,
}

impl InterruptState {
    fn should_stop(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }
}

/// A runtime owned by one engine thread.
struct RuntimeSlot {
    rt: Runtime,
    interrupt: Arc<Mutex<InterruptState>>,
    alloc: Arc<AllocState>,
    /// Heap bytes after the last collection between runs.
    after_gc: std::cell::Cell<usize>,
}

impl RuntimeSlot {
    fn new() -> Result<Self, EngineFault> {
        let alloc = Arc::new(AllocState::default());
        let rt = Runtime::new_with_alloc(CountingAllocator::new(alloc.clone()))
            .map_err(|e| internal(&e.to_string()))?;
        let interrupt = Arc::new(Mutex::new(InterruptState::default()));
        let state = interrupt.clone();
        let memory = alloc.clone();
        // Stop at the deadline, on cancel, and once the memory limit was hit.
        rt.set_interrupt_handler(Some(Box::new(move || {
            let stop = memory.refused()
                || memory.halted()
                || state.lock().map(|s| s.should_stop()).unwrap_or(true);
            if stop {
                // Room for the uncatchable error QuickJS throws next.
                memory.grant_grace();
            }
            stop
        })));
        Ok(RuntimeSlot {
            rt,
            interrupt,
            alloc,
            after_gc: std::cell::Cell::new(0),
        })
    }
}

impl RuntimeSlot {
    /// Frees the runtime (every context in it must be gone) and returns
    /// the bytes QuickJS left allocated: zero, unless the engine leaked
    /// an object. The allocator gives such bytes back once the runtime is
    /// gone ([`AllocState::reclaimed`]); the leak is logged, with `lost`
    /// the bytes it could not give back (zero: any other figure is a bug
    /// in the allocator's bookkeeping). (Built without `NDEBUG`, QuickJS
    /// would abort the process there instead: docs/security.md.)
    fn free(self) -> usize {
        let alloc = self.alloc.clone();
        drop(self);
        // Each runtime has its own state: all it reclaimed is this leak.
        let reclaimed = alloc.reclaimed();
        let lost = alloc.used();
        if reclaimed + lost > 0 {
            tracing::warn!(
                bytes = reclaimed + lost,
                lost,
                "QuickJS left memory allocated when its runtime was freed: an engine leak, given back by the allocator"
            );
        }
        reclaimed + lost
    }
}

/// One engine thread's state: the reusable runtime, if healthy, and a
/// context hardened ahead of time.
#[derive(Default)]
struct QuickJsThread {
    // Dropped before the runtime it lives in.
    warm: Option<Warm>,
    /// A private realm made ahead of time, once this thread served one
    /// (scripts that patch built-ins tend to come again): used by the
    /// next private run, never by a shared one.
    private_warm: Option<Warm>,
    /// Heap bytes `private_warm` holds: a shared run's memory limit is
    /// raised by them, so that it does not depend on whether one is kept.
    private_bytes: usize,
    /// Set when the thread serves one session.
    session: Option<SessionThread<Warm>>,
    slot: Option<RuntimeSlot>,
}

impl Drop for QuickJsThread {
    /// The hardened context first, then the runtime it lives in.
    fn drop(&mut self) {
        self.warm = None;
        self.private_warm = None;
        if let Some(s) = &mut self.session {
            drop(s.take_realm());
        }
        if let Some(slot) = self.slot.take() {
            slot.free();
        }
    }
}

impl QuickJsThread {
    fn slot(&mut self) -> Result<&RuntimeSlot, EngineFault> {
        if self.slot.is_none() {
            self.slot = Some(RuntimeSlot::new()?);
        }
        Ok(self.slot.as_ref().expect("just set"))
    }

    /// Hardens a fresh context for the next run, while the worker is idle.
    fn prewarm(&mut self) {
        if self.warm.is_some() {
            return;
        }
        if let Ok(slot) = self.slot() {
            // A failure here is not fatal: `load` hardens on demand.
            self.warm = harden(&slot.rt).ok();
        }
    }

    /// Makes a private realm for the next private run, after one, while
    /// the worker is idle (off the critical path, as `prewarm`).
    fn prewarm_private(&mut self) {
        if self.private_warm.is_some() {
            return;
        }
        if let Some(slot) = &self.slot {
            let before = slot.alloc.used();
            self.private_warm = harden_as(&slot.rt, true).ok();
            self.private_bytes = slot.alloc.used().saturating_sub(before);
        }
    }

    /// After a run: drop the runtime if it may be unhealthy (a fault, or
    /// jobs left behind), otherwise keep `reuse` (a context the run handed
    /// back clean) for the next run and collect the garbage.
    fn recycle(&mut self, tainted: bool, reuse: Option<Warm>) {
        self.recycle_after(tainted, reuse, false);
    }

    /// [`Self::recycle`]; `dropped_realm`: the run's private realm was
    /// just dropped, a whole set of intrinsics to collect now (left to the
    /// slack, the collection lands inside a later run instead: p90 of
    /// private runs back to back 850 µs against 310).
    fn recycle_after(&mut self, tainted: bool, reuse: Option<Warm>, dropped_realm: bool) {
        let Some(slot) = &self.slot else { return };
        if let Ok(mut i) = slot.interrupt.lock() {
            *i = InterruptState::default();
        }
        slot.alloc.disarm();
        if tainted || slot.rt.is_job_pending() {
            drop(reuse);
            self.warm = None;
            self.private_warm = None;
            if let Some(slot) = self.slot.take() {
                slot.free();
            }
        } else {
            // A context that serves the next run is collected only once
            // its garbage passes the slack; anything else now.
            let force = reuse.is_none() || dropped_realm;
            if reuse.is_some() {
                self.warm = reuse;
            }
            slot.after_gc
                .set(harness_quickjs_common::collect_between_runs(
                    &slot.rt,
                    &slot.alloc,
                    slot.after_gc.get(),
                    force,
                ));
        }
    }
}

impl QuickJsThread {
    /// A session's run: its realm, kept if the run ended clean; any
    /// other ending ends the session, and the runtime with it.
    fn lend_session(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        let Some(state) = self.session.as_mut() else {
            return;
        };
        if let Some(why) = state.ended() {
            run(Err(EngineFault::session_ended(why)));
            return;
        }
        let pre = state.take_realm();
        let spec = state.spec.clone();
        let slot = match self.slot() {
            Ok(s) => s,
            Err(f) => {
                run(Err(f));
                return;
            }
        };
        let mut engine = QjsRun {
            start_fn: None,
            settle_fn: None,
            end_fn: None,
            ctx: None,
            pre,
            pre_private: None,
            pre_private_bytes: 0,
            private: false,
            session: Some(spec.clone()),
            deferred: None,
            end_check: EndCheck::Nothing,
            slot,
        };
        let tainted = run(Ok(&mut engine));
        // A run refused before it loaded (a source that is not one body)
        // leaves the realm as it was, or still to be made.
        let untouched = !tainted && engine.ctx.is_none();
        let kept = if untouched {
            engine.pre.take()
        } else if tainted {
            if let Some(w) = &engine.ctx {
                w.host.borrow_mut().take();
            }
            None
        } else {
            engine.end_run()
        };
        drop(engine);
        // Jobs left queued would run inside the next run: none may be.
        let queued = self.slot.as_ref().is_some_and(|s| s.rt.is_job_pending());
        let ended = match self.session.as_mut() {
            Some(state) if untouched && !queued => {
                state.untouched(kept);
                false
            }
            Some(state) => state.after_run(kept.filter(|_| !queued), tainted),
            None => true,
        };
        if ended {
            self.recycle_after(true, None, false);
            return;
        }
        let Some(slot) = &self.slot else { return };
        if let Ok(mut i) = slot.interrupt.lock() {
            *i = InterruptState::default();
        }
        slot.alloc.disarm();
        // A kept realm is collected as a shared context is, once its
        // garbage passes the slack: a session holding megabytes is not
        // walked after every run.
        slot.after_gc
            .set(harness_quickjs_common::collect_between_runs(
                &slot.rt,
                &slot.alloc,
                slot.after_gc.get(),
                false,
            ));
        spec.set_retained_bytes(slot.alloc.used() as u64);
    }
}

impl EngineThread for QuickJsThread {
    fn begin_session(&mut self, spec: SessionSpec) -> bool {
        self.warm = None;
        self.private_warm = None;
        self.session = Some(SessionThread::begin(spec));
        true
    }

    /// Lends an engine to `run` (which says whether it is tainted), then
    /// keeps its context for the next run if the run ended clean, or
    /// tears it down and hardens the next one: after `run` has answered
    /// its caller, off the critical path.
    fn lend(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        if self.session.is_some() {
            self.lend_session(run);
            return;
        }
        let pre = self.warm.take();
        let pre_private = self.private_warm.take();
        let pre_private_bytes = self.private_bytes;
        let slot = match self.slot() {
            Ok(s) => s,
            Err(f) => {
                run(Err(f));
                return;
            }
        };
        let mut engine = QjsRun {
            start_fn: None,
            settle_fn: None,
            end_fn: None,
            ctx: None,
            pre,
            pre_private,
            pre_private_bytes,
            private: false,
            session: None,
            deferred: None,
            end_check: EndCheck::Nothing,
            slot,
        };
        let tainted = run(Ok(&mut engine));
        let reuse = if tainted {
            // The run's host goes now, not with the context: an engine
            // leak on the way out keeps the context's native function
            // (and what it holds) alive, and must not keep the run's
            // host state with it.
            if let Some(w) = &engine.ctx {
                w.host.borrow_mut().take();
            }
            None
        } else {
            // A private realm's run hands back the shared context it did
            // not use.
            engine.end_run().or_else(|| engine.pre.take())
        };
        let private = engine.private;
        let unused_private = engine.pre_private.take();
        drop(engine);
        self.private_warm = unused_private;
        self.recycle_after(tainted, reuse, private);
        self.prewarm();
        if private {
            self.prewarm_private();
        }
    }

    /// Runs standalone global code (test262): optional hardening, a
    /// `print` global and a minimal `$262`, jobs drained, a deadline.
    fn eval_global(&mut self, eval: GlobalEval) -> GlobalEvalOutcome {
        let slot = match self.slot() {
            Ok(s) => s,
            Err(f) => return GlobalEvalOutcome::Unsupported(f.message),
        };
        let deadline = Instant::now() + std::time::Duration::from_millis(eval.timeout_ms);
        if let Ok(mut i) = slot.interrupt.lock() {
            i.deadline = Some(deadline);
            i.cancel = None;
        }
        let limit = 256usize << 20;
        slot.alloc.arm(limit);
        slot.rt.set_max_stack_size(1 << 20);
        let prints: Rc<RefCell<Vec<String>>> = Rc::default();
        let outcome = run_global(slot, &eval, prints.clone(), deadline);
        let timed_out = matches!(outcome, GlobalEvalOutcome::TimedOut { .. });
        self.recycle(timed_out || slot_refused(&self.slot), None);
        outcome
    }

    fn check(&mut self, body: &Body) -> Result<(), ScriptError> {
        let slot = self.slot().map_err(|f| ScriptError::internal(f.message))?;
        let ctx = Context::custom::<Intrinsics>(&slot.rt)
            .map_err(|e| ScriptError::internal(e.to_string()))?;
        let result = ctx.with(|ctx| match compile(&ctx, body, true) {
            Ok(_) => Ok(()),
            Err(rquickjs::Error::Exception) => {
                let f = exception_fault(ctx.catch());
                Err(parse_error(&f, body.source()))
            }
            Err(e) => Err(ScriptError::internal(e.to_string())),
        });
        drop(ctx);
        self.recycle(false, None);
        result
    }
}

fn slot_refused(slot: &Option<RuntimeSlot>) -> bool {
    slot.as_ref().is_some_and(|s| s.alloc.refused())
}

fn run_global(
    slot: &RuntimeSlot,
    eval: &GlobalEval,
    prints: Rc<RefCell<Vec<String>>>,
    deadline: Instant,
) -> GlobalEvalOutcome {
    let taken = || prints.borrow().clone();
    let threw = |f: EngineFault| {
        if f.kind == FaultKind::Interrupted || Instant::now() >= deadline {
            GlobalEvalOutcome::TimedOut { prints: taken() }
        } else {
            GlobalEvalOutcome::Threw {
                name: f.name,
                message: f.message,
                prints: taken(),
            }
        }
    };
    // Keep the context alive (and dropped before the runtime) for the run.
    let warm;
    let plain;
    let ctx = if eval.hardened {
        match harden_as(&slot.rt, eval.unfrozen) {
            Ok(w) => {
                warm = w;
                &warm.ctx
            }
            Err(f) => return threw(f),
        }
    } else {
        match Context::custom::<Intrinsics>(&slot.rt) {
            Ok(c) => {
                plain = c;
                &plain
            }
            Err(e) => return threw(context_fault(e)),
        }
    };
    let sink = prints.clone();
    let ran = ctx.with(|ctx| {
        let setup = || -> rquickjs::Result<()> {
            let print = Function::new(ctx.clone(), move |v: rquickjs::Coerced<String>| {
                sink.borrow_mut().push(v.0);
            })?;
            ctx.globals().set("print", print)?;
            ctx.eval::<(), _>(TEST262_HOST)
        };
        if let Err(e) = setup() {
            return Err(match e {
                rquickjs::Error::Exception => exception_fault(ctx.catch()),
                e => context_fault(e),
            });
        }
        let mut opts = EvalOptions::default();
        opts.strict = false;
        opts.filename = Some("test262.js".to_owned());
        match ctx.eval_with_options::<(), _>(eval.source.as_str(), opts) {
            Ok(()) => Ok(()),
            Err(rquickjs::Error::Exception) => Err(exception_fault(ctx.catch())),
            Err(e) => Err(context_fault(e)),
        }
    });
    if let Err(f) = ran {
        return threw(f);
    }
    loop {
        if Instant::now() >= deadline {
            return GlobalEvalOutcome::TimedOut { prints: taken() };
        }
        match slot.rt.execute_pending_job() {
            Ok(true) => {}
            Ok(false) => return GlobalEvalOutcome::Completed { prints: taken() },
            Err(job) => {
                let f = job.0.with(|ctx| exception_fault(ctx.catch()));
                return threw(f);
            }
        }
    }
}

impl std::fmt::Debug for QuickJsThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuickJsThread")
            .field("runtime", &self.slot.is_some())
            .field("prepared", &self.warm.is_some())
            .finish()
    }
}

/// QuickJS on the shared event loop: its descriptor and thread state for
/// [`Pooled`].
#[derive(Debug, Clone, Copy, Default)]
pub struct QuickJsEngine;

/// The QuickJS engine in this process: a pool of engine threads, each with
/// its own runtime.
pub type QuickJs = Pooled<QuickJsEngine>;

/// The old name of [`QuickJsEngine`].
#[deprecated(note = "renamed to QuickJsEngine")]
pub type QuickJsAdapter = QuickJsEngine;

/// QuickJS: it stops scripts with its interrupt handler and enforces the
/// memory limit with its own allocator, so it runs in this process by
/// default.
pub fn descriptor() -> EngineDescriptor {
    EngineDescriptor::new(
        ENGINE_NAME,
        QUICKJS_VERSION,
        Capabilities::NONE
            .with_interrupt()
            .with_memory_limit()
            .with_stack_guard(),
        || std::sync::Arc::new(QuickJs::new()),
        || Box::<QuickJsThread>::default(),
    )
    .with_in_process_threads(|n| std::sync::Arc::new(QuickJs::with_max_workers(n)))
    .with_sessions(|spec| {
        QuickJs::for_session(QuickJsEngine, spec).map(|p| std::sync::Arc::new(p) as _)
    })
    .with_aliases(&["qjs"])
    // Collecting a private realm and making the next one ahead.
    .with_long_private_tidy_up()
    .with_thread_stack_bytes(THREAD_STACK_BYTES)
}

impl PooledEngine for QuickJsEngine {
    fn descriptor() -> EngineDescriptor {
        descriptor()
    }

    fn new_thread(&self) -> Box<dyn EngineThread> {
        Box::<QuickJsThread>::default()
    }

    fn has_sessions(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
