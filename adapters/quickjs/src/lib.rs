//! QuickJS (quickjs-ng through rquickjs) as a harness engine.
//!
//! Runs on worker threads with a plain rquickjs [`Runtime`] driven by the
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
    parse_error, Body, EndCheck, Engine, EngineAdapter, EngineDescriptor, EngineFault, EngineSetup,
    EngineThread, FaultKind, HostHandle, Pooled, PRELUDE, PRELUDE_FILE, TEST262_HOST,
};
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
    cached_probe, end_run, eval_global, read_exception, AllocState, CountingAllocator, Intrinsics,
    ProbeCache, COMPILE_ONLY, STRICT_SCRIPT,
};

/// Engine name, as in `--engine`.
pub const ENGINE_NAME: &str = "quickjs";

/// The QuickJS version compiled in (quickjs-ng, vendored by rquickjs-sys).
pub const QUICKJS_VERSION: &str = "quickjs-ng 0.16.2 (rquickjs 0.14)";

/// Stack of each worker thread. The JS stack limit is kept well inside it.
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

/// Where a context's native host function finds the current run.
type HostSlot = Rc<RefCell<Option<HostHandle>>>;

/// A hardened context with no run installed: fresh, or handed on by a
/// run that ended clean. Field order is drop order.
struct Warm {
    install: Persistent<Function<'static>>,
    host: HostSlot,
    /// The last run's end-of-run probe, compiled in this context.
    probe: ProbeCache,
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
            prelude.call((host_fn, unfrozen))
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

/// A runtime owned by one worker thread.
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
    slot: Option<RuntimeSlot>,
}

/// One run's engine: a fresh context on the worker's runtime.
struct QjsEngine<'w> {
    // Field order is drop order: JS handles before the context, the context
    // before the runtime it lives in.
    start_fn: Option<Persistent<Function<'static>>>,
    settle_fn: Option<Persistent<Function<'static>>>,
    end_fn: Option<Persistent<Function<'static>>>,
    ctx: Option<Warm>,
    /// A context hardened ahead of time, used by `load` if present (not
    /// by a private realm's run, which hands it back).
    pre: Option<Warm>,
    /// A private realm made ahead of time, used by `load` for a private
    /// run if present (handed back otherwise).
    pre_private: Option<Warm>,
    /// The heap bytes `pre_private` holds.
    pre_private_bytes: usize,
    /// The run has a private realm: its context is never reused.
    private: bool,
    /// A fault of the script's first steps, for `run_jobs` to report.
    deferred: Option<EngineFault>,
    /// What `end_run` checks after the run ([`Body::end_check`]).
    end_check: EndCheck,
    slot: &'w RuntimeSlot,
}

/// The prelude's per-run controller: `start`, `settle`, `end`.
type Controller<'js> = (Function<'js>, Function<'js>, Function<'js>);

fn internal(msg: &str) -> EngineFault {
    EngineFault::new(FaultKind::Internal, "Error", msg)
}

/// Maps QuickJS's own error messages to fault kinds (shared with the WASI
/// engine and its guest, which run the same QuickJS).
pub use harness_abi::classify_quickjs as classify;

impl QjsEngine<'_> {
    /// Ends the installed run and takes its context back if it may serve
    /// another run: the prelude's `end` closed the run and found nothing
    /// of it pending. Any doubt (no run installed, `end` failing) drops it.
    fn end_run(&mut self) -> Option<Warm> {
        self.start_fn = None;
        self.settle_fn = None;
        let end = self.end_fn.take();
        let mut warm = self.ctx.take()?;
        // The run's host handle goes whatever happens next.
        warm.host.borrow_mut().take();
        let end = end?;
        if self.private {
            // Still ended, so that nothing of the run is left pending.
            let _ = warm
                .ctx
                .with(|ctx| end.restore(&ctx).and_then(|f| f.call::<_, bool>(())));
            return None;
        }
        let Warm {
            ctx: context,
            probe: cache,
            ..
        } = &mut warm;
        let clean = context.with(|ctx| {
            let Ok(end) = end.restore(&ctx) else {
                return false;
            };
            match &self.end_check {
                EndCheck::Nothing => end_run(&ctx, &end, None),
                EndCheck::Probe(text) => {
                    let list = cached_probe(&ctx, cache, text);
                    end_run(&ctx, &end, Some(list))
                }
                _ => {
                    end_run(&ctx, &end, None);
                    false
                }
            }
        });
        clean.then_some(warm)
    }

    /// Turns an rquickjs error into a fault, reading the pending exception.
    fn fault(&self, ctx: &Ctx<'_>, err: rquickjs::Error) -> EngineFault {
        match err {
            rquickjs::Error::Exception => exception_fault(ctx.catch()),
            rquickjs::Error::Allocation => {
                EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory")
            }
            other => internal(&other.to_string()),
        }
    }

    /// Classifies an engine error. While the allocator is halted (deadline
    /// or cancel) allocations fail, and QuickJS reports that as out of
    /// memory or, when it cannot even build that message, as
    /// `InternalError: Invalid error message`: both are the stop at work.
    fn kind_of(&self, name: &str, message: &str) -> FaultKind {
        let kind = classify(name, message);
        // Past a refusal the interrupt handler stops the script with
        // `interrupted`: that stop is the memory limit at work.
        if self.memory_refused() && matches!(kind, FaultKind::Interrupted | FaultKind::OutOfMemory)
        {
            return FaultKind::OutOfMemory;
        }
        let halted = self.slot.alloc.halted() && !self.slot.alloc.refused();
        if halted && (kind == FaultKind::OutOfMemory || name == "InternalError") {
            FaultKind::Interrupted
        } else {
            kind
        }
    }

    /// Whether the allocator refused an allocation during this run.
    fn memory_refused(&self) -> bool {
        self.slot.alloc.refused()
    }

    /// Runs `f` in the context. The runtime is locked meanwhile, so faults
    /// are finished (memory check) only after leaving it.
    fn with<R>(
        &self,
        f: impl FnOnce(&Ctx<'_>) -> Result<R, EngineFault>,
    ) -> Result<R, EngineFault> {
        let warm = self.ctx.as_ref().ok_or_else(|| internal("no context"))?;
        warm.ctx
            .with(|ctx| f(&ctx))
            .map_err(|f| self.finish_fault(f))
    }

    /// QuickJS throws a bare value (not an error object) only when it could
    /// not allocate one: near the memory limit that is an out-of-memory.
    fn finish_fault(&self, mut f: EngineFault) -> EngineFault {
        if f.kind == FaultKind::Thrown && f.name.is_empty() {
            if self.memory_refused() {
                f = EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory");
            } else if self.slot.alloc.halted() {
                f = EngineFault::new(FaultKind::Interrupted, "InternalError", "interrupted");
            }
        }
        if matches!(
            f.kind,
            FaultKind::OutOfMemory | FaultKind::Thrown | FaultKind::Interrupted
        ) {
            f.kind = self.kind_of(&f.name, &f.message);
        }
        f
    }
}

/// Reads the pending exception. A non-object is reported with an empty
/// name, for [`QjsEngine::finish_fault`] to judge.
fn exception_fault(v: Value<'_>) -> EngineFault {
    let e = read_exception(v);
    let mut f = EngineFault::new(e.kind, e.name, e.message);
    f.stack = e.stack;
    f
}

impl Engine for QjsEngine<'_> {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        {
            let mut i = self
                .slot
                .interrupt
                .lock()
                .map_err(|_| internal("interrupt state poisoned"))?;
            i.deadline = Some(setup.deadline);
            i.cancel = Some(setup.cancel.clone());
        }
        let rt = &self.slot.rt;
        // `setup.prelude` is the same core PRELUDE the bytecode was built from.
        debug_assert_eq!(setup.prelude, PRELUDE);
        // A context hardened now, when none was hardened ahead of time,
        // is hardened as it would have been then: without the run's limit.
        // The engine's own set-up is not the script's memory, a run must
        // not fail or pass depending on whether the worker had time to
        // prepare a context after the run before it, and QuickJS leaks
        // when hardening runs out of memory at certain points (it
        // realises lazy built-ins whose initialisation drops its
        // arguments on failure: `js_bytecode_eval`).
        self.slot.alloc.disarm();
        self.private = setup.limits.private_realm();
        let warm = if self.private {
            match self.pre_private.take() {
                Some(w) => w,
                None => harden_as(rt, true).map_err(|f| self.finish_fault(f))?,
            }
        } else {
            match self.pre.take() {
                Some(w) => w,
                None => harden(rt).map_err(|f| self.finish_fault(f))?,
            }
        };
        let mut limit = usize::try_from(setup.limits.memory_bytes).unwrap_or(usize::MAX);
        if self.pre_private.is_some() {
            // Kept for a later run, not this one's memory.
            limit = limit.saturating_add(self.pre_private_bytes);
        }
        // The counting allocator enforces `limit`. QuickJS's own malloc
        // limit stays unset: it checks before calling the allocator, so a
        // huge request refused there would leave no trace of the OOM.
        self.slot.alloc.arm(limit);
        let stack = setup
            .limits
            .stack_bytes
            .min(THREAD_STACK_BYTES as u64 - STACK_MARGIN_BYTES);
        rt.set_max_stack_size(stack as usize);
        *warm.host.borrow_mut() = Some(host);
        // Kept even if the install fails, so that it is dropped in order.
        self.ctx = Some(warm);
        let warm = self.ctx.as_ref().ok_or_else(|| internal("no context"))?;
        let (start, settle, end) = warm
            .ctx
            .with(|ctx| {
                let run = || -> rquickjs::Result<Controller<'_>> {
                    let install = warm.install.clone().restore(&ctx)?;
                    let controller: Object = install.call((setup.config_json,))?;
                    Ok((
                        controller.get("start")?,
                        controller.get("settle")?,
                        controller.get("end")?,
                    ))
                };
                match run() {
                    Ok((s, t, e)) => Ok((
                        Persistent::save(&ctx, s),
                        Persistent::save(&ctx, t),
                        Persistent::save(&ctx, e),
                    )),
                    Err(e) => Err(self.fault(&ctx, e)),
                }
            })
            .map_err(|f| self.finish_fault(f))?;
        self.start_fn = Some(start);
        self.settle_fn = Some(settle);
        self.end_fn = Some(end);
        Ok(())
    }

    fn start(&mut self, body: &Body) -> Result<(), EngineFault> {
        self.end_check = body.end_check();
        let start = self
            .start_fn
            .clone()
            .ok_or_else(|| internal("not loaded"))?;
        self.with(|ctx| {
            let script = compile(ctx, body, false).and_then(|v| v.get::<Function>());
            let script: Function = match script {
                Ok(f) => f,
                Err(e) => {
                    let mut f = self.fault(ctx, e);
                    if f.kind == FaultKind::Thrown && f.name == "SyntaxError" {
                        f.kind = FaultKind::Syntax;
                    }
                    return Err(f);
                }
            };
            let start = start.restore(ctx).map_err(|e| self.fault(ctx, e))?;
            Ok(start
                .call::<_, ()>((script,))
                .err()
                .map(|e| self.fault(ctx, e)))
        })
        // The script's own first steps failed (a stack overflow in its
        // synchronous part that the prelude could not catch): a fault of
        // the run, reported by `run_jobs`, never taken for one of compiling.
        .map(|deferred| self.deferred = deferred)
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        if let Some(f) = self.deferred.take() {
            return Err(self.finish_fault(f));
        }
        let mut n: u32 = 0;
        loop {
            match self.slot.rt.execute_pending_job() {
                Ok(true) => {
                    n = n.wrapping_add(1);
                    // A flood of tiny jobs may never reach the interrupt
                    // counter; check the deadline ourselves now and then.
                    if n % 1024 == 0 {
                        let stop = self
                            .slot
                            .interrupt
                            .lock()
                            .map(|s| s.should_stop())
                            .unwrap_or(true);
                        if stop {
                            return Err(EngineFault::new(
                                FaultKind::Interrupted,
                                "InternalError",
                                "interrupted",
                            ));
                        }
                    }
                }
                Ok(false) => return Ok(()),
                Err(job) => {
                    let f = job.0.with(|ctx| exception_fault(ctx.catch()));
                    return Err(self.finish_fault(f));
                }
            }
        }
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        let settle = self
            .settle_fn
            .clone()
            .ok_or_else(|| internal("not loaded"))?;
        self.with(|ctx| {
            let f = settle.restore(ctx).map_err(|e| self.fault(ctx, e))?;
            f.call::<_, ()>((id as f64, ok, payload))
                .map_err(|e| self.fault(ctx, e))
        })
    }

    /// Peak heap during the run, as the allocator saw it.
    fn context_id(&self) -> Option<u64> {
        self.ctx.as_ref().map(|w| w.id)
    }

    fn memory_used(&mut self) -> Option<u64> {
        Some(self.slot.alloc.peak() as u64)
    }

    fn memory_exhausted(&mut self) -> bool {
        self.memory_refused()
    }

    /// Halts the allocator: heavy native work then fails at once and the
    /// next interrupt check stops the script.
    fn stopper(&self) -> Option<Box<dyn FnOnce() + Send>> {
        let alloc = self.slot.alloc.clone();
        let generation = alloc.generation();
        Some(Box::new(move || alloc.halt(generation)))
    }

    fn classify(&self, name: &str, message: &str) -> FaultKind {
        self.kind_of(name, message)
    }
}

impl Drop for QuickJsThread {
    /// The hardened context first, then the runtime it lives in.
    fn drop(&mut self) {
        self.warm = None;
        self.private_warm = None;
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

impl EngineThread for QuickJsThread {
    /// Lends an engine to `run` (which says whether it is tainted), then
    /// keeps its context for the next run if the run ended clean, or
    /// tears it down and hardens the next one: after `run` has answered
    /// its caller, off the critical path.
    fn lend(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
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
        let mut engine = QjsEngine {
            start_fn: None,
            settle_fn: None,
            end_fn: None,
            ctx: None,
            pre,
            pre_private,
            pre_private_bytes,
            private: false,
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
pub struct QuickJsAdapter;

/// The QuickJS engine in this process: a pool of engine threads, each with
/// its own runtime.
pub type QuickJs = Pooled<QuickJsAdapter>;

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
    .with_aliases(&["qjs"])
    // Collecting a private realm and making the next one ahead.
    .with_long_private_tidy_up()
    .with_thread_stack_bytes(THREAD_STACK_BYTES)
}

impl EngineAdapter for QuickJsAdapter {
    fn descriptor() -> EngineDescriptor {
        descriptor()
    }

    fn new_thread(&self) -> Box<dyn EngineThread> {
        Box::<QuickJsThread>::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `RuntimeSlot::free` reports: nothing for a runtime whose
    /// contexts were all dropped, the leaked bytes for one in which an
    /// object outlived them (without aborting: `NDEBUG`). A forgotten
    /// reference is what QuickJS's leaks on failed allocations leave: the
    /// object, its prototype chain and the whole context stay alive. The
    /// allocator gives those bytes back: nothing stays allocated.
    #[test]
    fn freeing_a_runtime_gives_back_what_quickjs_leaked() {
        let used = |leak: bool| {
            let slot = RuntimeSlot::new().unwrap();
            let alloc = slot.alloc.clone();
            let ctx = Context::full(&slot.rt).unwrap();
            ctx.with(|ctx| {
                let obj: Object = ctx
                    .eval("({a: [1, 2, 3], s: 'x'.repeat(100), big: 'y'.repeat(100000)})")
                    .unwrap();
                if leak {
                    std::mem::forget(Persistent::save(&ctx, obj));
                }
            });
            drop(ctx);
            let left = slot.free();
            (left, alloc.used(), alloc.reclaimed())
        };
        assert_eq!(used(false), (0, 0, 0));
        let (left, used_after, reclaimed) = used(true);
        assert!(left > 100_000, "the context and the big string: {left}");
        assert_eq!(used_after, 0, "nothing stays allocated");
        assert_eq!(reclaimed, left);
    }

    /// A private realm (test262's unfrozen mode, a `Realm::Private` run)
    /// leaves the intrinsics as they are and hardens the rest; it serves
    /// one run, and its global object is sealed as ever. The hardening every
    /// other run gets freezes them.
    #[test]
    fn a_private_realm_hardens_all_but_the_intrinsics_and_serves_one_run() {
        let slot = RuntimeSlot::new().unwrap();
        for unfrozen in [false, true] {
            let warm = harden_as(&slot.rt, unfrozen).unwrap();
            warm.ctx.with(|ctx| {
                let seen: String = ctx
                    .eval(
                        "const r = [Object.isFrozen(Array.prototype), Object.isFrozen(Math)];\n\
                         try { eval('1'); r.push('eval ran'); } catch (e) { r.push(e.name); }\n\
                         r.join(' ')",
                    )
                    .unwrap();
                let frozen = !unfrozen;
                assert_eq!(seen, format!("{frozen} {frozen} BannedIdentifierError"));
                let install = warm.install.clone().restore(&ctx).unwrap();
                let config = r#"{"run":{"scriptId":"a"},"static":{"tools":[],"sited":[],"spawn":false,"lineOffset":0,"context":{"sandbox":{"timeoutMs":1,"memoryMb":1,"maxConcurrentToolCalls":1,"mode":"enabled"},"limits":{}}}}"#;
                let first = install.call::<_, Object>((config,));
                assert!(first.is_ok(), "{:?}", first.err().map(|_| exception_fault(ctx.catch())));
                let global_frozen: bool = ctx.eval("Object.isFrozen(globalThis)").unwrap();
                assert!(global_frozen, "install seals the global object in either");
                if unfrozen {
                    let end: Function = first.unwrap().get("end").unwrap();
                    let _: bool = end.call(()).unwrap();
                    let second = install.call::<_, rquickjs::Value>((config,));
                    assert!(matches!(second, Err(rquickjs::Error::Exception)));
                    let e = exception_fault(ctx.catch());
                    assert!(e.message.contains("serves one run"), "{e:?}");
                }
            });
            drop(warm);
        }
        assert_eq!(slot.free(), 0, "nothing leaked");
    }
}
