//! QuickJS for `wasm32-wasip1`: the guest of the `harness-wasi` engine and of
//! the workspace sandbox. One binary, two ways in:
//!
//! - **Harness mode**: the host instantiates the module and calls the
//!   `harness_*` exports, the same engine primitives every adapter offers
//!   (load the hardened prelude, start the script, run jobs, settle a tool
//!   call). The script's one native function, `host(op, a, b)`, is the
//!   import `harness.host_call`; the host answers it (a tool call starts
//!   there) and the reply is copied in with `harness.host_reply`. Faults go
//!   out through `harness.fault` as JSON. `_start` is never called.
//! - **Sandbox mode**: `quickjs /app/user_code.js` runs a file as a program,
//!   with `console.log` to stdout, `console.error` to stderr and
//!   `require('fs')` confined to `/app` (the only preopened directory).
//!
//! Time, fuel and memory are enforced by the host (wasmtime); the guest
//! also sets QuickJS's own memory and stack limits so that a script over
//! them gets a catchable error where QuickJS can give one.

use rquickjs::context::EvalOptions;
use rquickjs::{Context, Ctx, Function, Object, Persistent, Runtime, Value};
use std::cell::RefCell;

mod sandbox;

// The native engine's counting allocator (it enforces the memory limit and
// remembers a refusal, which QuickJS may report only as a thrown `null`),
// its intrinsics and its reading of exceptions.
use harness_quickjs_common::{
    cached_probe, collect_between_runs, end_run, eval_global, read_exception, AllocState,
    CountingAllocator, Intrinsics, ProbeCache, COMPILE_ONLY, STRICT_SCRIPT,
};
use std::sync::Arc;

// The hardening prelude shared by every engine, built in so that a
// pre-initialised snapshot of the guest holds the hardened context; fault
// kinds and QuickJS's error classification as the host knows them.
use harness_abi::{FaultKind as Kind, PRELUDE, PRELUDE_FILE};
/// QuickJS's stack limit in sandbox mode, inside the shadow stack the
/// linker reserves (`build.rs`).
const SANDBOX_STACK_BYTES: usize = 1024 * 1024;

#[link(wasm_import_module = "harness")]
extern "C" {
    /// Answers `host(op, a, b)`; returns the reply's length in bytes.
    fn host_call(
        op: *const u8,
        op_len: usize,
        a: *const u8,
        a_len: usize,
        b: *const u8,
        b_len: usize,
    ) -> usize;
    /// Copies the last reply to `dst` (as long as `host_call` said).
    fn host_reply(dst: *mut u8);
    /// Reports the fault of the primitive that is about to return nonzero.
    fn fault(json: *const u8, len: usize);
}

/// What the `harness_*` primitives keep between calls. Field order is drop
/// order: JS handles before the context, the context before the runtime.
struct State {
    start: Option<Persistent<Function<'static>>>,
    settle: Option<Persistent<Function<'static>>>,
    /// The prelude's `end()` for the installed run: whether it ended clean.
    end: Option<Persistent<Function<'static>>>,
    install: Option<Persistent<Function<'static>>>,
    /// The last run's end-of-run probe, compiled in this context.
    probe: ProbeCache,
    ctx: Context,
    rt: Runtime,
    alloc: Arc<AllocState>,
    /// Heap bytes the last collection left.
    after_gc: usize,
    /// The context is a private realm (`harness_private`): it serves one
    /// run, and the instance is not reused after it.
    private: bool,
    /// The context is a session's realm (`harness_session`): it serves
    /// the session's runs, one after another.
    session: bool,
    /// The fault of the script's own first steps, which `harness_start`
    /// compiled and called: reported by the next `harness_run_jobs`, so
    /// that the host never takes it for a fault of compiling (a stack
    /// overflow there is a run's fault, which ends the instance).
    deferred: Option<Fault>,
}

thread_local! {
    /// The allocator's state, for faults reported outside `STATE`'s borrow.
    static ALLOC: RefCell<Option<Arc<AllocState>>> = const { RefCell::new(None) };
}

thread_local! {
    /// `Math.random`'s state (xorshift64*, as QuickJS's own), seeded per
    /// run in `harness_load`: QuickJS seeds its generator when the context
    /// is made, which a pre-initialised snapshot would freeze for every run.
    static RANDOM: std::cell::Cell<u64> = const { std::cell::Cell::new(0x9E37_79B9_7F4A_7C15) };
}

extern "C" {
    /// wasi-libc: fills `buf` from WASI `random_get`.
    fn getentropy(buf: *mut u8, len: usize) -> i32;
}

/// Seeds `Math.random` from the host's entropy.
fn seed_random() {
    let mut seed = [0u8; 8];
    // SAFETY: getentropy writes at most 8 bytes into the 8-byte buffer.
    let ok = unsafe { getentropy(seed.as_mut_ptr(), seed.len()) } == 0;
    let s = if ok { u64::from_le_bytes(seed) } else { 0 };
    RANDOM.with(|r| r.set(if s == 0 { 0x9E37_79B9_7F4A_7C15 } else { s }));
}

/// A double in [0, 1), as QuickJS makes one.
fn next_random() -> f64 {
    RANDOM.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        f64::from_bits((0x3FF << 52) | (bits >> 12)) - 1.0
    })
}

/// Makes `Math.random` the guest's generator, which each run seeds
/// ([`seed_random`]): QuickJS seeds its own when the context is made, which
/// a pre-initialised snapshot would freeze for every run.
fn install_random(ctx: &Ctx<'_>) -> rquickjs::Result<()> {
    let random = Function::new(ctx.clone(), next_random)?.with_name("random")?;
    ctx.globals()
        .get::<_, Object>("Math")?
        .set("random", random)
}

/// Whether the allocator refused an allocation in this run.
fn memory_refused() -> bool {
    ALLOC.with(|a| a.borrow().as_ref().is_some_and(|a| a.refused()))
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    /// Where the host writes a primitive's input (config, source, payload).
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

struct Fault {
    kind: Kind,
    name: String,
    message: String,
    stack: Option<String>,
}

impl Fault {
    fn internal(message: impl Into<String>) -> Self {
        Fault {
            kind: Kind::Internal,
            name: "Error".into(),
            message: message.into(),
            stack: None,
        }
    }

    /// Hands the fault to the host and returns the status that says so.
    /// Past a refused allocation, an interrupt, a bare thrown value or an
    /// engine failure is the memory limit at work.
    fn report(mut self) -> i32 {
        let bare = matches!(self.kind, Kind::Thrown) && self.name.is_empty();
        if memory_refused() && (bare || matches!(self.kind, Kind::Interrupted | Kind::Internal)) {
            self.kind = Kind::OutOfMemory;
            self.name = "InternalError".into();
            self.message = "out of memory".into();
        }
        let json = serde_json::json!({
            "kind": self.kind.name(),
            "name": self.name,
            "message": self.message,
            "stack": self.stack,
        })
        .to_string();
        // SAFETY: the import reads `len` bytes at `ptr`, which stay alive
        // for the call.
        unsafe { fault(json.as_ptr(), json.len()) };
        1
    }
}

/// Reads a caught exception. A non-object (QuickJS throws `null` when it
/// cannot allocate an error) is reported with an empty name.
fn exception_fault(v: Value<'_>) -> Fault {
    let e = read_exception(v);
    Fault {
        kind: e.kind,
        name: e.name,
        message: e.message,
        stack: e.stack,
    }
}

fn js_fault(ctx: &Ctx<'_>, e: rquickjs::Error) -> Fault {
    match e {
        rquickjs::Error::Exception => exception_fault(ctx.catch()),
        rquickjs::Error::Allocation => Fault {
            kind: Kind::OutOfMemory,
            name: "InternalError".into(),
            message: "out of memory".into(),
            stack: None,
        },
        other => Fault::internal(other.to_string()),
    }
}

/// The script's native `host(op, a, b)`: forwards to the host import.
fn call_host(op: &str, a: &str, b: &str) -> String {
    // SAFETY: the import reads the three buffers during the call and
    // writes exactly the length it returned into `reply`.
    unsafe {
        let len = host_call(
            op.as_ptr(),
            op.len(),
            a.as_ptr(),
            a.len(),
            b.as_ptr(),
            b.len(),
        );
        let mut reply = vec![0u8; len];
        if len > 0 {
            host_reply(reply.as_mut_ptr());
        }
        String::from_utf8(reply).unwrap_or_default()
    }
}

/// Builds the runtime and a context with the prelude's hardening done;
/// with `private`, a private realm (hardened but for the intrinsics).
fn init_state(private: bool) -> Result<State, Fault> {
    let alloc = Arc::new(AllocState::default());
    let rt = Runtime::new_with_alloc(CountingAllocator::new(alloc.clone()))
        .map_err(|e| Fault::internal(e.to_string()))?;
    // Deadlines and cancellation are the host's (epoch interruption); the
    // guest stops a script only once the memory limit was hit, so that a
    // script catching the error cannot grind on at the cap.
    let memory = alloc.clone();
    rt.set_interrupt_handler(Some(Box::new(move || {
        let stop = memory.refused();
        if stop {
            // Room for the uncatchable error QuickJS throws next.
            memory.grant_grace();
        }
        stop
    })));
    ALLOC.with(|a| *a.borrow_mut() = Some(alloc.clone()));
    let (ctx, install) = harden(
        &rt,
        if private {
            Realm::Private
        } else {
            Realm::Shared
        },
    )?;
    Ok(State {
        start: None,
        settle: None,
        end: None,
        install: Some(install),
        probe: None,
        ctx,
        rt,
        alloc,
        after_gc: 0,
        private,
        session: false,
        deferred: None,
    })
}

/// Which realm the prelude makes: `harden(host, false | true | 'session')`.
#[derive(Clone, Copy)]
enum Realm {
    Shared,
    Private,
    Session,
}

/// A context on `rt` with the prelude's hardening done: all of it (a
/// shared realm), all but the intrinsics' (a private realm), or that and
/// the global object left open (a session's realm).
fn harden(rt: &Runtime, realm: Realm) -> Result<(Context, Persistent<Function<'static>>), Fault> {
    let ctx = Context::custom::<Intrinsics>(rt).map_err(|e| Fault::internal(e.to_string()))?;
    let install = ctx.with(|ctx| {
        let run = || -> rquickjs::Result<Function<'_>> {
            let mut opts = EvalOptions::default();
            opts.strict = true;
            opts.filename = Some(PRELUDE_FILE.to_owned());
            // Before the prelude freezes `Math`.
            install_random(&ctx)?;
            let prelude: Function = ctx.eval_with_options(PRELUDE, opts)?;
            let host = Function::new(ctx.clone(), |op: String, a: String, b: String| {
                call_host(&op, &a, &b)
            })?;
            let mode = match realm {
                Realm::Shared => rquickjs::Value::new_bool(ctx.clone(), false),
                Realm::Private => rquickjs::Value::new_bool(ctx.clone(), true),
                Realm::Session => rquickjs::String::from_str(ctx.clone(), "session")?.into_value(),
            };
            prelude.call((host, mode))
        };
        run()
            .map(|f| Persistent::save(&ctx, f))
            .map_err(|e| js_fault(&ctx, e))
    })?;
    Ok((ctx, install))
}

fn take_input() -> String {
    INPUT.with(|i| String::from_utf8_lossy(&std::mem::take(&mut *i.borrow_mut())).into_owned())
}

/// Runs `f` on the state, turning a fault into the nonzero status.
fn with_state(f: impl FnOnce(&mut State) -> Result<(), Fault>) -> i32 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        match s.as_mut() {
            Some(state) => match f(state) {
                Ok(()) => 0,
                Err(fault) => fault.report(),
            },
            None => Fault::internal("the guest was not loaded").report(),
        }
    })
}

/// A buffer of `len` bytes for the next primitive's input.
#[no_mangle]
pub extern "C" fn harness_input(len: usize) -> *mut u8 {
    INPUT.with(|i| {
        let mut i = i.borrow_mut();
        i.clear();
        i.resize(len, 0);
        i.as_mut_ptr()
    })
}

/// Builds the runtime and hardens a context (idempotent). This is also the
/// pre-initialisation entry point: a snapshot taken after it holds the
/// hardened context, so a run does not pay for it.
#[no_mangle]
pub extern "C" fn harness_init() -> i32 {
    init(false)
}

/// Builds the runtime and hardens a context, a private realm with
/// `private`, unless one was built already.
fn init(private: bool) -> i32 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.is_some() {
            return 0;
        }
        match init_state(private) {
            Ok(mut state) => {
                state.after_gc = collect_between_runs(&state.rt, &state.alloc, 0, true);
                *s = Some(state);
                0
            }
            Err(f) => f.report(),
        }
    })
}

/// The pre-initialisation entry point (`[] -> []`, as wizer wants): builds
/// the runtime and hardens a context, so that a snapshot taken after it
/// starts every run there. A failure is left for `harness_load` to report.
#[no_mangle]
pub extern "C" fn wizer_initialize() {
    let _ = harness_init();
}

/// The pre-initialisation entry point of the private snapshot: the runtime
/// and a private realm, so that a run that needs one (docs/security.md,
/// "Private realms") starts in it instead of hardening it inside the run.
/// An instance of this snapshot serves that one run (`harness_end` says it
/// is not reusable). A failure is left for `harness_load` to report.
#[no_mangle]
pub extern "C" fn wizer_initialize_private() {
    let _ = init(true);
}

/// Replaces the hardened context with a private realm (hardened but for
/// the intrinsics, docs/security.md "Private realms") for the next run,
/// the instance's last: `harness_end` then says it is not reusable.
#[no_mangle]
pub extern "C" fn harness_private() -> i32 {
    let status = harness_init();
    if status != 0 {
        return status;
    }
    with_state(|state| {
        if state.start.is_some() {
            return Err(Fault::internal("a run is installed already"));
        }
        state.deferred = None;
        if state.private {
            return Ok(());
        }
        state.install = None;
        let (ctx, install) = harden(&state.rt, Realm::Private)?;
        state.ctx = ctx;
        state.install = Some(install);
        state.private = true;
        Ok(())
    })
}

/// Replaces the hardened context with a session's realm (built-ins and
/// the global object open, docs/user-guide.md "Sessions"), which then
/// serves every run of the instance: `harness_end` keeps it while runs
/// end clean, with no end-of-run probe.
#[no_mangle]
pub extern "C" fn harness_session() -> i32 {
    let status = harness_init();
    if status != 0 {
        return status;
    }
    with_state(|state| {
        if state.start.is_some() {
            return Err(Fault::internal("a run is installed already"));
        }
        if state.session {
            return Ok(());
        }
        if state.private {
            return Err(Fault::internal("a private realm cannot become a session's"));
        }
        state.install = None;
        state.probe = None;
        let (ctx, install) = harden(&state.rt, Realm::Session)?;
        state.ctx = ctx;
        state.install = Some(install);
        state.session = true;
        state.after_gc = collect_between_runs(&state.rt, &state.alloc, 0, true);
        Ok(())
    })
}

/// QuickJS heap in use now, as the allocator counts it.
#[no_mangle]
pub extern "C" fn harness_heap_used() -> u64 {
    ALLOC.with(|a| a.borrow().as_ref().map_or(0, |a| a.used() as u64))
}

/// Installs the run's config (the input) and sets QuickJS's memory and
/// stack limits; hardens a context first unless a snapshot already did.
#[no_mangle]
pub extern "C" fn harness_load(memory_limit: u64, stack_limit: u64) -> i32 {
    let status = harness_init();
    if status != 0 {
        return status;
    }
    let config = take_input();
    seed_random();
    with_state(|state| {
        // The allocator enforces the limit (not QuickJS's malloc limit,
        // which would refuse without leaving a trace).
        state
            .alloc
            .arm(usize::try_from(memory_limit).unwrap_or(usize::MAX));
        state
            .rt
            .set_max_stack_size(usize::try_from(stack_limit).unwrap_or(usize::MAX));
        if state.start.is_some() {
            return Err(Fault::internal("a run is installed already"));
        }
        let install = state
            .install
            .clone()
            .ok_or_else(|| Fault::internal("the context was not hardened"))?;
        let (start, settle, end) = state.ctx.with(|ctx| {
            type Controller<'js> = (Function<'js>, Function<'js>, Function<'js>);
            let run = || -> rquickjs::Result<Controller<'_>> {
                let install = install.restore(&ctx)?;
                let controller: Object = install.call((config.as_str(),))?;
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
                Err(e) => Err(js_fault(&ctx, e)),
            }
        })?;
        state.start = Some(start);
        state.settle = Some(settle);
        state.end = Some(end);
        Ok(())
    })
}

/// Compiles the wrapped source (the input) as `script.js` and starts it.
#[no_mangle]
pub extern "C" fn harness_start() -> i32 {
    let source = take_input();
    with_state(|state| {
        let start = state
            .start
            .clone()
            .ok_or_else(|| Fault::internal("not loaded"))?;
        state
            .ctx
            .with(|ctx| {
                let script = eval_global(&ctx, &source, c"script.js", STRICT_SCRIPT)
                    .and_then(|v| v.get::<Function>());
                let script: Function = script.map_err(|e| {
                    let mut f = js_fault(&ctx, e);
                    if matches!(f.kind, Kind::Thrown) && f.name == "SyntaxError" {
                        f.kind = Kind::Syntax;
                    }
                    f
                })?;
                let start = start.restore(&ctx).map_err(|e| js_fault(&ctx, e))?;
                Ok(start
                    .call::<_, ()>((script,))
                    .err()
                    .map(|e| js_fault(&ctx, e)))
            })
            .map(|deferred| state.deferred = deferred)
    })
}

/// Runs pending jobs until none is left.
#[no_mangle]
pub extern "C" fn harness_run_jobs() -> i32 {
    with_state(|state| loop {
        if let Some(f) = state.deferred.take() {
            return Err(f);
        }
        match state.rt.execute_pending_job() {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(job) => return Err(job.0.with(|ctx| exception_fault(ctx.catch()))),
        }
    })
}

/// Calls the prelude's `settle(id, ok, payload)`; the payload is the input.
#[no_mangle]
pub extern "C" fn harness_settle(id: f64, ok: i32) -> i32 {
    let payload = take_input();
    with_state(|state| {
        let settle = state
            .settle
            .clone()
            .ok_or_else(|| Fault::internal("not loaded"))?;
        state.ctx.with(|ctx| {
            let f = settle.restore(&ctx).map_err(|e| js_fault(&ctx, e))?;
            f.call::<_, ()>((id, ok != 0, payload.as_str()))
                .map_err(|e| js_fault(&ctx, e))
        })
    })
}

/// Ends the installed run and says whether this instance may serve the
/// next one (1) or must be dropped (0): only if the prelude's `end()` finds
/// nothing of the run left (no tool call or detached task pending) and,
/// given the host's end-of-run probe (the input; empty for none), no
/// global binding the instance was not handed over with; no job is
/// queued, and the memory limit never refused an allocation; the same
/// rules as the native engine's context reuse (docs/security.md, "Between
/// runs"). Garbage past the slack is collected here, between runs.
#[no_mangle]
pub extern "C" fn harness_end() -> i32 {
    let probe = take_input();
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(state) = s.as_mut() else { return 0 };
        state.start = None;
        state.settle = None;
        let clean = state.end.take().is_some_and(|end| {
            let cache = &mut state.probe;
            state.ctx.with(|ctx| {
                end.restore(&ctx).is_ok_and(|f| {
                    let list = (!probe.is_empty()).then(|| cached_probe(&ctx, cache, &probe));
                    end_run(&ctx, &f, list)
                })
            })
        });
        let reusable =
            clean && !state.private && !state.alloc.refused() && !state.rt.is_job_pending();
        state.alloc.disarm();
        if !reusable {
            return 0;
        }
        state.after_gc = collect_between_runs(&state.rt, &state.alloc, state.after_gc, false);
        1
    })
}

/// Peak QuickJS heap since `harness_load`, as the allocator counted it.
#[no_mangle]
pub extern "C" fn harness_heap_peak() -> u64 {
    ALLOC.with(|a| a.borrow().as_ref().map_or(0, |a| a.peak() as u64))
}

/// Whether the memory limit refused an allocation in this run.
#[no_mangle]
pub extern "C" fn harness_memory_refused() -> i32 {
    i32::from(memory_refused())
}

/// Parses the input without running it: `kind` 0 is a wrapped harness
/// script (compiled as `harness_start` compiles it), 1 a sandbox program
/// (global code). A syntax error is a fault.
#[no_mangle]
pub extern "C" fn harness_check(kind: i32) -> i32 {
    let source = take_input();
    let run = || -> Result<(), Fault> {
        let rt = Runtime::new().map_err(|e| Fault::internal(e.to_string()))?;
        rt.set_max_stack_size(256 * 1024);
        let ctx = Context::custom::<Intrinsics>(&rt).map_err(|e| Fault::internal(e.to_string()))?;
        ctx.with(|ctx| {
            let (file, flags) = if kind == 0 {
                (c"script.js", STRICT_SCRIPT)
            } else {
                (c"user_code.js", 0)
            };
            let parsed = eval_global(&ctx, &source, file, flags | COMPILE_ONLY).map(|_| ());
            parsed.map_err(|e| {
                let mut f = js_fault(&ctx, e);
                if matches!(f.kind, Kind::Thrown) {
                    f.kind = Kind::Syntax;
                }
                f
            })
        })
    };
    match run() {
        Ok(()) => 0,
        Err(f) => f.report(),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1) {
        Some(path) => sandbox::run_file(path),
        None => {
            eprintln!("usage: quickjs FILE.js");
            2
        }
    };
    // Returned, not `process::exit`: `_start` then returns normally on 0
    // (WASI `proc_exit` is only called for a failure), and the host does
    // not capture a backtrace for an exit that is no error.
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
