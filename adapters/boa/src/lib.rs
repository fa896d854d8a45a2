//! Boa (`boa_engine`, pure Rust) as a harness engine.
//!
//! Boa runs on the shared event loop like every engine: a fresh context per
//! run with the shared hardening prelude, tool calls as promises the host
//! settles, the job queue drained by the loop. What Boa lacks is a way to
//! stop a running script: it has no interrupt hook, no instruction budget
//! and no memory limit (its `RuntimeLimits` cover loop iterations,
//! recursion and the VM stack), its regular expressions run in native code,
//! and some native paths (a long chain of Proxies) recurse on the native
//! stack until the thread overflows. So in this process ([`Boa`]) it is fit
//! only for trusted scripts, and says so in its capabilities; the default
//! is to run it behind the process boundary ([`harness_core::process`]),
//! where the host kills the worker at the deadline or on cancel, caps its
//! heap, and survives whatever the engine does.
//!
//! A panic inside Boa becomes HarnessInternalError and the context is
//! dropped; the host stays healthy.
//!
//! # Examples
//! ```
//! use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
//! use harness_boa::Boa;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let engine = Boa::new();
//! let report = engine.execute(ExecutionRequest::new("return 1 + 1")).await;
//! assert_eq!(report.value, Some(serde_json::json!(2)));
//! # });
//! ```

use boa_engine::context::HostHooks;
use boa_engine::error::{EngineError, RuntimeLimitError, TryNativeError};
use boa_engine::job::{Job, JobExecutor, SimpleJobExecutor};
use boa_engine::object::FunctionObjectBuilder;
use boa_engine::optimizer::OptimizerOptions;
use boa_engine::realm::Realm;
use boa_engine::script::Script;
use boa_engine::{
    js_string, Context, JsError, JsNativeError, JsNativeErrorKind, JsObject, JsResult, JsString,
    JsValue, NativeFunction, Source,
};
use harness_core::engine::{
    parse_error, Body, EndCheck, Engine, EngineDescriptor, EngineFault, EngineSetup, EngineThread,
    FaultKind, HostHandle, Pooled, PooledEngine, PRELUDE, TEST262_HOST,
};
use harness_core::session::SessionThread;
use harness_core::{Capabilities, GlobalEval, GlobalEvalOutcome, Isolation, ScriptError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::rc::Rc;

mod engine;

use engine::*;

/// Engine name, as in `--engine`.
pub const ENGINE_NAME: &str = "boa";

/// The Boa version compiled in.
pub const BOA_VERSION: &str = "boa_engine 0.22.0";

/// Stack of each engine thread: Boa's parser and native re-entry into the
/// VM recurse on the native stack.
pub const THREAD_STACK_BYTES: usize = 256 << 20;

/// Deepest bracket nesting accepted before parsing; Boa's recursive-descent
/// parser would otherwise overflow the native stack on hostile input.
const MAX_NESTING: usize = 1_000;

/// Refuses sources nested deeper than Boa's parser can take.
fn guard_nesting(source: &str) -> Result<(), EngineFault> {
    if harness_core::source::nesting_depth(source) > MAX_NESTING {
        return Err(EngineFault::new(
            FaultKind::StackOverflow,
            "SyntaxError",
            "the script is nested too deeply to parse",
        ));
    }
    Ok(())
}

/// Native stack a JS call costs, for turning `Limits::stack_bytes` into
/// Boa's recursion limit (frame count).
const BYTES_PER_FRAME: u64 = 256;

/// VM stack slots per byte of `Limits::stack_bytes` (a slot is 16 bytes).
const BYTES_PER_SLOT: u64 = 16;

/// Host hooks: code generation from strings (eval, the Function
/// constructors) is refused by the engine itself, under the prelude's own
/// blocks; test262's raw mode lifts it.
struct Hooks {
    allow_code_generation: bool,
}

impl HostHooks for Hooks {
    fn ensure_can_compile_strings(
        &self,
        _realm: Realm,
        _parameters: &[JsString],
        _body: &JsString,
        _direct: bool,
        _context: &mut Context,
    ) -> JsResult<()> {
        if self.allow_code_generation {
            Ok(())
        } else {
            Err(JsNativeError::eval()
                .with_message("code generation from strings is disabled")
                .into())
        }
    }
}

/// Where the native host function finds the current run (context data).
struct HostSlot(Option<HostHandle>);

/// Boa's own job executor, remembering whether a job was queued since its
/// queues last ran dry: a context is handed to the next run only if not.
struct TrackedJobs {
    inner: Rc<SimpleJobExecutor>,
    queued: std::cell::Cell<bool>,
}

impl JobExecutor for TrackedJobs {
    fn enqueue_job(self: Rc<Self>, job: Job, context: &mut Context) {
        self.queued.set(true);
        self.inner.clone().enqueue_job(job, context);
    }

    /// Runs until every queue is empty (no timers exist in the context);
    /// after an error the queues are cleared but the flag stays set.
    fn run_jobs(self: Rc<Self>, context: &mut Context) -> JsResult<()> {
        let ran = self.inner.clone().run_jobs(context);
        if ran.is_ok() {
            self.queued.set(false);
        }
        ran
    }
}

/// The context's [`TrackedJobs`] (context data).
struct Jobs(Rc<TrackedJobs>);

fn arg_string(args: &[JsValue], i: usize) -> String {
    args.get(i)
        .and_then(JsValue::as_string)
        .map(|s| s.to_std_string_lossy())
        .unwrap_or_default()
}

/// `host(op, a, b)`: the one native function of the engine protocol.
fn host_native(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let (op, a, b) = (
        arg_string(args, 0),
        arg_string(args, 1),
        arg_string(args, 2),
    );
    let host = ctx.get_data::<HostSlot>().and_then(|s| s.0.clone());
    let answer = host.map(|h| h.call(&op, &a, &b)).unwrap_or_default();
    Ok(JsValue::from(JsString::from(answer.as_str())))
}

fn new_context(allow_code_generation: bool) -> Result<Context, EngineFault> {
    let jobs = Rc::new(TrackedJobs {
        inner: Rc::new(SimpleJobExecutor::new()),
        queued: std::cell::Cell::new(false),
    });
    let mut ctx = Context::builder()
        .host_hooks(Rc::new(Hooks {
            allow_code_generation,
        }))
        .job_executor(jobs.clone())
        .build()
        .map_err(|e| internal(&format!("cannot build a Boa context: {e}")))?;
    ctx.insert_data(Jobs(jobs));
    Ok(ctx)
}

/// A fresh context with the prelude's hardening done and nothing
/// installed: no script has run in it.
struct Warm {
    ctx: Context,
    install: JsObject,
    /// The context's [`Engine::context_id`].
    id: u64,
    /// The last run's end-of-run probe and its list, evaluated in this
    /// context (the closures read the global scope when called, and no
    /// script reaches them).
    probe: Option<(String, JsValue)>,
}

/// The prelude as Boa parses it: Boa has no bytecode cache, so every fresh
/// context parses the prelude again, and that parse is most of what a
/// context costs. Comment lines and indentation go (about a fifth of the
/// text).
fn prelude_source() -> &'static str {
    static LEAN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LEAN.get_or_init(|| {
        PRELUDE
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

fn harden() -> Result<Warm, EngineFault> {
    harden_as(false)
}

/// [`harden`], or with `unfrozen` everything but the intrinsics hardened:
/// a private realm, for one run ([`harness_core::Realm::Private`]) or
/// test262's [`GlobalEval::unfrozen`], and dropped after it.
fn harden_as(unfrozen: bool) -> Result<Warm, EngineFault> {
    harden_mode(JsValue::from(unfrozen))
}

/// A session's realm (`harden(host, 'session')`): built-ins and the global
/// object open, kept from run to run.
fn harden_session() -> Result<Warm, EngineFault> {
    harden_mode(JsValue::from(js_string!("session")))
}

fn harden_mode(mode: JsValue) -> Result<Warm, EngineFault> {
    guarded(|| {
        let mut ctx = new_context(false)?;
        // The optimizer's passes find nothing to fold in the prelude; skip
        // them (scripts still get them).
        let optimizer = ctx.optimizer_options();
        ctx.set_optimizer_options(OptimizerOptions::empty());
        let prelude = ctx.eval(Source::from_bytes(prelude_source()));
        ctx.set_optimizer_options(optimizer);
        let prelude = prelude.map_err(|e| error_fault(&e, &mut ctx))?;
        let prelude = prelude
            .as_callable()
            .ok_or_else(|| internal("the prelude is not a function"))?;
        let host_fn =
            FunctionObjectBuilder::new(ctx.realm(), NativeFunction::from_fn_ptr(host_native))
                .name(js_string!("host"))
                .length(3)
                .build();
        let install = prelude
            .call(&JsValue::undefined(), &[host_fn.into(), mode], &mut ctx)
            .map_err(|e| error_fault(&e, &mut ctx))?;
        let install = install
            .as_callable()
            .ok_or_else(|| internal("harden did not return a function"))?;
        Ok(Warm {
            ctx,
            install,
            id: harness_core::engine::new_context_id(),
            probe: None,
        })
    })
}

fn internal(msg: &str) -> EngineFault {
    EngineFault::new(FaultKind::Internal, "Error", msg)
}

/// Runs an engine primitive, turning a panic into an internal fault.
fn guarded<R>(f: impl FnOnce() -> Result<R, EngineFault>) -> Result<R, EngineFault> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(internal(&format!(
            "the engine panicked: {}",
            harness_core::error::panic_message(payload.as_ref())
        ))),
    }
}

/// Boa's own limit errors and panics, which scripts cannot catch.
fn engine_error_fault(e: &EngineError) -> EngineFault {
    match e {
        EngineError::RuntimeLimit(RuntimeLimitError::Recursion | RuntimeLimitError::StackSize) => {
            EngineFault::new(FaultKind::StackOverflow, "RangeError", e.to_string())
        }
        EngineError::RuntimeLimit(RuntimeLimitError::LoopIteration) => {
            EngineFault::new(FaultKind::Interrupted, "InternalError", e.to_string())
        }
        other => internal(&other.to_string()),
    }
}

fn native_name(kind: &JsNativeErrorKind) -> &'static str {
    match kind {
        JsNativeErrorKind::Aggregate(_) => "AggregateError",
        JsNativeErrorKind::Eval => "EvalError",
        JsNativeErrorKind::Range => "RangeError",
        JsNativeErrorKind::Reference => "ReferenceError",
        JsNativeErrorKind::Syntax => "SyntaxError",
        JsNativeErrorKind::Type => "TypeError",
        JsNativeErrorKind::Uri => "URIError",
        _ => "Error",
    }
}

/// Reads a JS error the way the loop wants it: name, message, stack.
fn error_fault(err: &JsError, ctx: &mut Context) -> EngineFault {
    if let Err(TryNativeError::EngineError { source }) = err.try_native(ctx) {
        return engine_error_fault(&source);
    }
    let value = match err.clone().into_opaque(ctx) {
        Ok(v) => v,
        Err(e) => return internal(&e.to_string()),
    };
    let Some(obj) = value.as_object() else {
        return EngineFault::new(
            FaultKind::Thrown,
            "",
            "a non-error value was thrown by the engine",
        );
    };
    let mut get = |k: &str| {
        obj.get(JsString::from(k), ctx)
            .ok()
            .and_then(|v| v.as_string().map(|s| s.to_std_string_lossy()))
            .unwrap_or_default()
    };
    let (name, message, stack) = (get("name"), get("message"), get("stack"));
    let name = if name.is_empty() {
        err.as_native()
            .map(|n| native_name(n.kind()).to_owned())
            .unwrap_or_default()
    } else {
        name
    };
    EngineFault::new(classify(&name, &message), name, message).with_stack(stack)
}

/// Maps Boa's own error texts to fault kinds.
fn classify(name: &str, message: &str) -> FaultKind {
    if message.starts_with("RuntimeLimit")
        || message.contains("maximum number of recursive calls")
        || message.contains("maximum stack size")
        || (name == "RangeError" && message.contains("Maximum call stack"))
    {
        FaultKind::StackOverflow
    } else {
        FaultKind::Thrown
    }
}

/// A syntax error from Boa's parser, with its `line N, col M` turned into
/// a `script.js:N:M` frame for the loop to place.
fn syntax_fault(err: &JsError, ctx: &mut Context) -> EngineFault {
    let mut f = error_fault(err, ctx);
    if f.kind == FaultKind::Thrown {
        f.kind = FaultKind::Syntax;
    }
    if let Some((line, col)) = parse_position(&f.message) {
        f.stack = Some(format!(
            "    at {}:{line}:{col}",
            harness_core::error::SCRIPT_FILE
        ));
    }
    f
}

/// Finds `line N, col M` in a Boa parser message.
fn parse_position(message: &str) -> Option<(u32, u32)> {
    let at = message.rfind("line ")?;
    let rest = &message[at + 5..];
    let (line, rest) = rest.split_once(", col")?;
    let col: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((line.trim().parse().ok()?, col.parse().ok()?))
}

/// One engine thread's state: a context hardened ahead of time.
#[derive(Default)]
struct BoaThread {
    warm: Option<Warm>,
    /// A private realm made after a private run, for the next one: a
    /// thread that served one is likely to serve another (a host whose
    /// scripts patch built-ins), and making it is most of such a run's
    /// time (the prelude's parse). No script has run in it.
    private_warm: Option<Warm>,
    /// Runs since the last collection between runs.
    since_gc: u32,
    /// The configuration of the last run that handed its context on, for
    /// [`warm_up`].
    last_config: Option<String>,
    /// Set when the thread serves one session.
    session: Option<SessionThread<Warm>>,
}

impl BoaThread {
    /// A new engine for one run, using the context prepared ahead if any.
    fn engine(&mut self) -> BoaRun {
        BoaRun {
            ctx: None,
            context: None,
            install: None,
            start_fn: None,
            settle_fn: None,
            end_fn: None,
            pre: self.warm.take(),
            pre_private: self.private_warm.take(),
            deferred: None,
            config: None,
            private: false,
            session: false,
            end_check: EndCheck::Nothing,
            probe: None,
        }
    }

    /// A session's run: its realm, kept if the run ended clean; any other
    /// ending ends the session.
    fn lend_session(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        let Some(state) = self.session.as_mut() else {
            return;
        };
        if let Some(why) = state.ended() {
            run(Err(EngineFault::session_ended(why)));
            return;
        }
        let mut engine = BoaRun {
            pre: state.take_realm(),
            pre_private: None,
            session: true,
            ..self.engine()
        };
        let tainted = run(Ok(&mut engine));
        // A run refused before it loaded leaves the realm as it was, or
        // still to be made.
        let untouched = !tainted && engine.ctx.is_none();
        let kept = if untouched {
            engine.pre.take()
        } else if tainted {
            None
        } else {
            catch_unwind(AssertUnwindSafe(|| engine.end_run())).unwrap_or(None)
        };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(engine)));
        if let Some(state) = self.session.as_mut() {
            if untouched {
                state.untouched(kept);
            } else {
                state.after_run(kept, tainted);
            }
        }
        self.since_gc += 1;
        if self.since_gc >= RUNS_PER_GC {
            self.since_gc = 0;
            let _ = catch_unwind(boa_gc::force_collect);
        }
    }
}

/// A host that answers nothing, for [`warm_up`]: its script makes no call
/// and writes nothing, and what it returns is dropped.
struct Quiet;

impl harness_core::engine::Host for Quiet {
    fn call(&self, _op: &str, _a: &str, _b: &str) -> String {
        String::new()
    }
}

/// Runs `return 0` in `warm` with the last run's configuration, the way a
/// run does, and hands the context back if it ended clean. Done after a
/// forced collection, between runs: the collection drops the shapes and
/// caches the per-run objects use (Boa keeps shape transitions behind weak
/// references), and the run after it took twice the median to build them
/// again. It installs what the last run installed
/// and ends like any run, so the next run meets the context as it would
/// after a clean run with that configuration.
fn warm_up(engine: &mut BoaRun, config: &str) -> Option<Warm> {
    let limits = harness_core::Limits::default();
    let cancel = harness_core::CancellationToken::new();
    let setup = EngineSetup {
        prelude: PRELUDE,
        config_json: config,
        limits: &limits,
        deadline: std::time::Instant::now() + limits.timeout(),
        cancel: &cancel,
        suspendable: false,
    };
    engine.load(&setup, Rc::new(Quiet)).ok()?;
    engine.start(&Body::parse("return 0").ok()?).ok()?;
    engine.run_jobs().ok()?;
    engine.end_run()
}

/// Runs between two collections made after a run has answered. Boa's
/// collector otherwise starts inside whichever run crosses its
/// threshold and marks the whole hardened context there; 1–2% of runs
/// 2 ms apart took 500–570 µs against an 80 µs median, and half that once
/// collections came between runs. Boa does not say
/// how much it has allocated, so the collection comes by count instead.
const RUNS_PER_GC: u32 = 32;

/// Runs after which an idle thread collects (and warms the context up
/// again) rather than wait for [`RUNS_PER_GC`] in `lend`: where runs leave
/// the thread idle between them, the collection then always happens
/// there.
const IDLE_GC_RUNS: u32 = RUNS_PER_GC * 3 / 4;

impl EngineThread for BoaThread {
    /// Lends an engine to `run` (which says whether it is tainted). A run
    /// that ended clean hands its context to the next run (as QuickJS
    /// does: nothing a script reaches is writable, see docs/security.md);
    /// otherwise the used context is dropped, garbage collected and the
    /// next context hardened: after `run` has answered, off the critical
    /// path. Building a Boa context allocates a few thousand objects, and
    /// Boa's collector runs when allocation crosses its threshold: doing
    /// both here keeps that pause out of the next run. After a private
    /// run, the next private realm is made here too.
    fn lend(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        if self.session.is_some() {
            self.lend_session(run);
            return;
        }
        let mut engine = self.engine();
        let tainted = run(Ok(&mut engine));
        let config = engine.config.take();
        // A run that ended clean hands its context to the next run.
        let reuse = if tainted {
            None
        } else {
            catch_unwind(AssertUnwindSafe(|| engine.end_run())).unwrap_or(None)
        };
        // A private realm's run hands back the shared context it did not
        // use, and leaves a whole set of intrinsics to collect; so does a
        // run refused before it loaded (a source that is not one body).
        let private = engine.private;
        let reuse = match reuse {
            None if !tainted && (private || engine.ctx.is_none()) => engine.pre.take(),
            r => r,
        };
        // A shared run hands back the private realm it did not use.
        let pre_private = engine.pre_private.take();
        // Dropping a context a panic left half-way may panic again.
        let dropped = catch_unwind(AssertUnwindSafe(move || drop(engine)));
        if reuse.is_some() {
            self.warm = reuse;
            self.since_gc += 1;
            if private {
                // A dropped realm is collected now: left for later, the
                // collection lands inside later runs (p90 of private runs
                // back to back 8.2 ms against 6.5).
                self.since_gc = RUNS_PER_GC;
            }
            if self.since_gc >= RUNS_PER_GC {
                self.since_gc = 0;
                let _ = catch_unwind(boa_gc::force_collect);
            }
            self.last_config = config;
        } else if dropped.is_ok() {
            self.since_gc = 0;
            let _ = catch_unwind(boa_gc::force_collect);
            self.warm = harden().ok();
        }
        // After a private run (collected above), the next private realm,
        // made now rather than inside the next private run.
        self.private_warm = match pre_private {
            Some(w) => Some(w),
            None if private && dropped.is_ok() => harden_as(true).ok(),
            None => None,
        };
    }

    /// Boa does not count its heap: behind the process boundary (its
    /// default) the worker's allocator bounds the whole process, so a
    /// session's memory is that worker's.
    fn begin_session(&mut self, spec: harness_core::session::SessionSpec) -> bool {
        self.warm = None;
        self.private_warm = None;
        self.session = Some(SessionThread::begin(spec));
        true
    }

    /// Collects garbage between runs, then runs [`warm_up`], once
    /// [`IDLE_GC_RUNS`] runs have passed since the last collection.
    fn idle(&mut self) {
        if self.session.is_some() {
            return;
        }
        if self.since_gc < IDLE_GC_RUNS || self.warm.is_none() {
            return;
        }
        self.since_gc = 0;
        let _ = catch_unwind(boa_gc::force_collect);
        let Some(config) = self.last_config.take() else {
            return;
        };
        let mut engine = self.engine();
        let warmed = catch_unwind(AssertUnwindSafe(|| warm_up(&mut engine, &config)));
        self.private_warm = engine.pre_private.take();
        let dropped = catch_unwind(AssertUnwindSafe(move || drop(engine)));
        self.warm = warmed.ok().flatten().filter(|_| dropped.is_ok());
        if self.warm.is_none() {
            self.warm = harden().ok();
        }
    }

    fn check(&mut self, body: &Body) -> Result<(), ScriptError> {
        let wrapped = body.wrapped();
        let fault = |f: EngineFault| parse_error(&f, body.source());
        guard_nesting(wrapped).map_err(fault)?;
        let mut ctx = new_context(false).map_err(|f| ScriptError::internal(f.message))?;
        guarded(|| {
            ctx.strict(true);
            let path = Path::new(harness_core::error::SCRIPT_FILE);
            let src = Source::from_bytes(wrapped).with_path(path);
            Script::parse(src, None, &mut ctx)
                .map(|_| ())
                .map_err(|e| syntax_fault(&e, &mut ctx))
        })
        .map_err(|f| match f.kind {
            FaultKind::Internal => ScriptError::internal(f.message),
            _ => fault(f),
        })
    }

    /// Global code for test262. Boa cannot be interrupted, so this is
    /// offered only behind the process boundary, whose host kills the
    /// worker at the deadline.
    fn eval_global(&mut self, eval: GlobalEval) -> GlobalEvalOutcome {
        let prints = Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
        let taken = |p: &Rc<std::cell::RefCell<Vec<String>>>| p.borrow().clone();
        let ran = guarded(|| {
            let mut ctx = if eval.hardened {
                harden_as(eval.unfrozen)?.ctx
            } else {
                new_context(true)?
            };
            let sink = prints.clone();
            ctx.insert_data(PrintSink(sink));
            let print =
                FunctionObjectBuilder::new(ctx.realm(), NativeFunction::from_fn_ptr(print_native))
                    .name(js_string!("print"))
                    .length(1)
                    .build();
            let global = ctx.global_object();
            global
                .set(js_string!("print"), print, false, &mut ctx)
                .map_err(|e| error_fault(&e, &mut ctx))?;
            ctx.eval(Source::from_bytes(TEST262_HOST))
                .map_err(|e| error_fault(&e, &mut ctx))?;
            let source = Source::from_bytes(&eval.source).with_path(Path::new("test262.js"));
            match Script::parse(source, None, &mut ctx) {
                Err(e) => {
                    let f = syntax_fault(&e, &mut ctx);
                    return Ok(Err((true, f)));
                }
                Ok(script) => {
                    if let Err(e) = script.evaluate(&mut ctx) {
                        return Ok(Err((false, error_fault(&e, &mut ctx))));
                    }
                }
            }
            match ctx.run_jobs() {
                Ok(()) => Ok(Ok(())),
                Err(e) => Ok(Err((false, error_fault(&e, &mut ctx)))),
            }
        });
        match ran {
            Ok(Ok(())) => GlobalEvalOutcome::Completed {
                prints: taken(&prints),
            },
            Ok(Err((true, f))) => GlobalEvalOutcome::ParseError {
                name: f.name,
                message: f.message,
            },
            Ok(Err((false, f))) | Err(f) => GlobalEvalOutcome::Threw {
                name: f.name,
                message: f.message,
                prints: taken(&prints),
            },
        }
    }
}

struct PrintSink(Rc<std::cell::RefCell<Vec<String>>>);

fn print_native(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let text = match args.first() {
        Some(v) => v.to_string(ctx)?.to_std_string_lossy(),
        None => String::new(),
    };
    if let Some(sink) = ctx.get_data::<PrintSink>() {
        sink.0.borrow_mut().push(text);
    }
    Ok(JsValue::undefined())
}

/// Prints where a fresh, hardened Boa context's time goes, averaged over
/// `n` contexts (the `harden_cost` example): building the context, parsing
/// the prelude, evaluating it, running the hardening, dropping the
/// context, collecting garbage.
#[doc(hidden)]
pub fn print_harden_cost(n: u32) {
    use std::time::{Duration, Instant};
    let mut t = [Duration::ZERO; 6];
    for _ in 0..n {
        let s = Instant::now();
        let mut ctx = new_context(false).expect("context");
        t[0] += s.elapsed();
        let s = Instant::now();
        ctx.set_optimizer_options(OptimizerOptions::empty());
        let script =
            Script::parse(Source::from_bytes(prelude_source()), None, &mut ctx).expect("parse");
        t[1] += s.elapsed();
        let s = Instant::now();
        let f = script.evaluate(&mut ctx).expect("evaluate");
        t[2] += s.elapsed();
        let s = Instant::now();
        let host_fn =
            FunctionObjectBuilder::new(ctx.realm(), NativeFunction::from_fn_ptr(host_native))
                .name(js_string!("host"))
                .length(3)
                .build();
        let f = f.as_callable().expect("function");
        f.call(&JsValue::undefined(), &[host_fn.into()], &mut ctx)
            .expect("harden");
        t[3] += s.elapsed();
        let s = Instant::now();
        drop(ctx);
        t[4] += s.elapsed();
        let s = Instant::now();
        boa_gc::force_collect();
        t[5] += s.elapsed();
    }
    let names = [
        "context",
        "parse prelude",
        "evaluate",
        "harden",
        "drop",
        "gc",
    ];
    for (name, d) in names.iter().zip(t) {
        println!("{name:14} {:8.1} µs", d.as_secs_f64() * 1e6 / f64::from(n));
    }
}

/// Boa on the shared event loop: its descriptor and thread state for
/// [`Pooled`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BoaEngine;

/// Boa in this process: a pool of engine threads, each with its own
/// contexts. See the crate docs for what it cannot enforce.
pub type Boa = Pooled<BoaEngine>;

/// The old name of [`BoaEngine`].
#[deprecated(note = "renamed to BoaEngine")]
pub type BoaAdapter = BoaEngine;

/// Boa: in this process no way to stop a running script, no memory limit,
/// and native stack exhaustion ends the process; so it runs behind the
/// process boundary by default. Use it in process for trusted scripts only.
pub fn descriptor() -> EngineDescriptor {
    EngineDescriptor::new(
        ENGINE_NAME,
        BOA_VERSION,
        Capabilities::NONE,
        || std::sync::Arc::new(Boa::new()),
        || Box::<BoaThread>::default(),
    )
    .with_in_process_threads(|n| std::sync::Arc::new(Boa::with_max_workers(n)))
    .with_sessions(|spec| Boa::for_session(BoaEngine, spec).map(|p| std::sync::Arc::new(p) as _))
    .with_default_isolation(Isolation::Process)
    .with_thread_stack_bytes(THREAD_STACK_BYTES)
    // Collecting a private realm's context.
    .with_long_private_tidy_up()
}

impl PooledEngine for BoaEngine {
    fn descriptor() -> EngineDescriptor {
        descriptor()
    }

    fn new_thread(&self) -> Box<dyn EngineThread> {
        Box::<BoaThread>::default()
    }

    fn has_sessions(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
