//! The worker side: [`serve`] runs an engine for the host over stdin/stdout.

use super::{
    Classified, FromWorker, Link, Settle, StepPhase, ToWorker, EXIT_OUT_OF_MEMORY,
    PROTOCOL_VERSION, WORKER_ARG,
};
use crate::adapter::GlobalEvalOutcome;
use crate::body::Body;
use crate::engine::EngineDescriptor;
use crate::error::ScriptError;
use crate::event_loop::PRELUDE;
use crate::limits::Limits;
use crate::primitives::{
    Engine, EngineFault, EngineSetup, EngineThread, FaultKind, Host, HostHandle, HostOp,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::io::{self, StdinLock, StdoutLock};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Stack of the thread the engine runs on inside a worker: parsers and
/// interpreters recurse on the native stack.
const WORKER_STACK_BYTES: usize = 256 << 20;

/// Head-room over the script's memory limit for engines that enforce the
/// limit themselves: the worker's budget is then only a backstop.
const BACKSTOP_SLACK_BYTES: u64 = 64 << 20;

/// Exit status of a worker binary whose global allocator is not
/// [`WorkerAllocator`]: it could not hold runs to their memory limit, so it
/// refuses to serve.
pub const EXIT_NO_WORKER_ALLOCATOR: i32 = 4;

/// If this process was started as a worker (`PROGRAM --harness-worker
/// ENGINE`), serves the engine `find` returns for that name and exits;
/// otherwise returns. Binaries call it through [`crate::worker_main!`],
/// which also installs the [`WorkerAllocator`] it needs.
pub fn serve_if_requested(find: impl FnOnce(&str) -> Option<EngineDescriptor> + Send + 'static) {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(WORKER_ARG)) {
        return;
    }
    let engine = args
        .next()
        .and_then(|a| a.into_string().ok())
        .unwrap_or_default();
    std::process::exit(serve(move || find(&engine)));
}

/// Serves one engine over stdin/stdout until the host closes stdin.
/// Returns the process exit status: 0 when the host hung up, 2 on a
/// protocol error, 3 when there is no such engine,
/// [`EXIT_NO_WORKER_ALLOCATOR`] when the binary's allocator cannot count.
///
/// It first closes every descriptor above stderr that the process
/// inherited (a worker holds its stdin, stdout and stderr, and nothing
/// else of its host's), so a binary calls it, through
/// [`serve_if_requested`], before it opens anything of its own; and it
/// moves to `/`, so that a worker depends on no directory of its host's.
pub fn serve(find: impl FnOnce() -> Option<EngineDescriptor> + Send + 'static) -> i32 {
    sys::close_inherited();
    // A root that cannot be entered leaves the worker where it started:
    // nothing it runs resolves paths against its working directory.
    let _ = std::env::set_current_dir("/");
    // Panics are caught and reported to the host; the default hook would
    // only print them to a stderr nobody reads.
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::Builder::new()
        .name("harness-worker".to_owned())
        .stack_size(WORKER_STACK_BYTES)
        .spawn(move || match find() {
            Some(engine) => {
                let mut thread = engine.worker_thread();
                serve_on_thread(&engine, thread.as_mut())
            }
            None => 3,
        })
        .map(|t| t.join().unwrap_or(70))
        .unwrap_or(71)
}

/// The worker's stdin: what its first read found (with rings, the host's
/// `Init`, which brought the rings' descriptor), then the rest.
type FromHost = io::Chain<io::Cursor<Vec<u8>>, StdinLock<'static>>;

/// When a worker moves off its host thread's CPU. Two sides of an
/// exchange that poll for each other's frames on one CPU hand it over at
/// every frame (a context switch each way, about 3.5 µs on the
/// development VM, where two CPUs pass a frame in a fraction of a
/// microsecond), and the scheduler does not part them within a run: a
/// wake-up through a pipe or socket tells it the waker is about to sleep,
/// so the woken worker lands on the host thread's CPU whenever no other
/// is idle at that instant, and both then count as too cache-hot to move.
/// Moving costs too: 40–75 µs on that VM, where the other CPU is halted
/// and must wake (`spin::move_off`). So a worker moves only once
/// [`Apart::AFTER`] host messages in a row of one run found it on the host
/// thread's CPU: a run of many round trips (100 sequential tool calls:
/// 1.8 against 1.1 ms) pays the move back within itself, and a short one
/// never makes it.
#[derive(Debug, Default)]
pub(crate) struct Apart {
    /// Host messages in a row, in this run, that found this thread on the
    /// host thread's CPU.
    together: u32,
}

impl Apart {
    /// Messages in a row on one CPU before the worker moves.
    pub(crate) const AFTER: u32 = 8;

    /// A new run: nothing shared yet.
    pub(crate) fn new_run(&mut self) {
        self.together = 0;
    }

    /// One host message that found this thread on the host thread's CPU
    /// (`sharing`) or not; says whether to move now.
    pub(crate) fn note(&mut self, sharing: bool) -> bool {
        self.together = if sharing { self.together + 1 } else { 0 };
        if self.together >= Self::AFTER {
            self.together = 0;
            return true;
        }
        false
    }
}

struct Pipe {
    link: RefCell<Link<FromHost, StdoutLock<'static>>>,
    /// The host's last message let this worker spin for its next answer.
    spin: std::cell::Cell<bool>,
    /// How long this worker has shared its host thread's CPU.
    apart: RefCell<Apart>,
    /// The last `Run` told this worker to linger after it
    /// ([`super::WORKER_LINGER`]).
    linger: std::cell::Cell<bool>,
    /// Errors the script failed with since the last Step (name, message),
    /// for the engine to classify before the host asks.
    failures: RefCell<Vec<(String, String)>>,
}

impl Pipe {
    fn send(&self, msg: &FromWorker) {
        if self.link.borrow_mut().send(msg).is_err() {
            // The host is gone: nothing left to do.
            std::process::exit(0);
        }
    }

    /// The host's next message. `soon`: it is likely to come within
    /// microseconds (an answer within a run's exchange, or the next run
    /// just after one, as when runs come back to back), so spin for it
    /// first if the host's last message allowed ([`super::may_spin`]);
    /// never while idle otherwise, when a spin only burns CPU.
    fn recv(&self, soon: bool) -> ToWorker {
        let spin = soon && self.spin.get();
        match self.link.borrow_mut().recv(spin) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => std::process::exit(0),
            Err(_) => std::process::exit(2),
        }
    }

    /// Takes the host's word on spinning (its last message's `spin`);
    /// where the run may spin, and this thread has shared the host
    /// thread's CPU for a while, moves off it ([`Apart`]), unless it came
    /// there from a crowded CPU lately (`spin::until`), where the move
    /// would take it back.
    fn allow_spin(&self, spin: bool) {
        self.spin.set(spin);
        let here = if spin {
            self.link.borrow().on_host_cpu()
        } else {
            None
        };
        if self.apart.borrow_mut().note(here.is_some()) {
            if let Some(cpu) = here.filter(|_| !crate::spin::left_crowded_lately()) {
                crate::spin::move_off(cpu);
            }
        }
    }

    /// The host's next command, between runs: [`Pipe::recv`], but if
    /// nothing has come when it would block (after its spin, if any), it
    /// calls `idle` first, once; then, just after a run that said to
    /// linger, it polls for [`super::WORKER_LINGER`] before it blocks.
    fn recv_command(&self, soon: bool, idle: impl FnOnce()) -> ToWorker {
        let ready = {
            let link = self.link.borrow();
            link.has_input() || (soon && self.spin.get() && link.spin_for_input())
        };
        if !ready {
            idle();
            if soon && self.spin.get() && self.linger.get() {
                self.link.borrow().poll_for_input(super::WORKER_LINGER);
            }
        }
        self.recv(false)
    }
}

/// The engine's native host function, behind the boundary: ask the host.
struct PipeHost(Rc<Pipe>);

impl Host for PipeHost {
    fn call(&self, op: &str, a: &str, b: &str) -> String {
        if HostOp::NOTICES.contains(&op) {
            if op == "fail" {
                self.0.failures.borrow_mut().extend(failure_names(a));
            }
            // Its answer is always empty: no round trip.
            self.0.send(&FromWorker::Notice {
                op: op.to_owned(),
                a: a.to_owned(),
                b: b.to_owned(),
            });
            return String::new();
        }
        self.0.send(&FromWorker::HostOp {
            op: op.to_owned(),
            a: a.to_owned(),
            b: b.to_owned(),
        });
        match self.0.recv(true) {
            ToWorker::Reply { value, spin } => {
                self.0.allow_spin(spin);
                value
            }
            _ => std::process::exit(2),
        }
    }
}

fn serve_on_thread(engine: &EngineDescriptor, host: &mut dyn EngineThread) -> i32 {
    #[cfg(unix)]
    let stdin_fd = std::os::fd::AsRawFd::as_raw_fd(&io::stdin());
    // With rings, stdin is a socket and the host's first frame carries
    // their descriptor, which only a read that asks for it receives.
    let (first, given) = sys::first_read();
    let pipe = Rc::new(Pipe {
        link: RefCell::new(Link::new(
            io::Read::chain(io::Cursor::new(first), io::stdin().lock()),
            io::stdout().lock(),
            #[cfg(unix)]
            stdin_fd,
            #[cfg(unix)]
            Some(std::os::unix::process::parent_id()),
            #[cfg(not(unix))]
            None,
        )),
        spin: std::cell::Cell::new(false),
        apart: RefCell::new(Apart::default()),
        linger: std::cell::Cell::new(false),
        failures: RefCell::new(Vec::new()),
    });
    let mut session: Option<crate::session::SessionSpec> = None;
    let rings = match pipe.recv(false) {
        ToWorker::Init {
            address_space_bytes,
            rings,
            session_memory_bytes,
        } => {
            if let Some(bytes) = session_memory_bytes {
                let spec = crate::session::SessionSpec::new(bytes);
                if !host.begin_session(spec.clone()) {
                    eprintln!("harness worker: the engine {} has no sessions", engine.name);
                    return 3;
                }
                session = Some(spec);
            }
            // Mapped before the caps: the descriptor, then closed, is one
            // of the few the worker may hold.
            let rings = if rings {
                sys::map_rings(given)
            } else {
                drop(given);
                None
            };
            sys::cap_self(address_space_bytes);
            rings
        }
        _ => return 2,
    };
    budget::enable();
    if !budget::counting() {
        eprintln!(
            "harness worker: this binary's global allocator is not \
             harness_core::process::WorkerAllocator, so runs could not be held to their \
             memory limit; declare the binary's main with harness_core::worker_main! \
             (or harness::main!)"
        );
        return EXIT_NO_WORKER_ALLOCATOR;
    }
    pipe.send(&FromWorker::Hello {
        protocol: PROTOCOL_VERSION,
        engine: engine.name.to_owned(),
        version: engine.version.clone(),
        rings: rings.is_some(),
    });
    #[cfg(target_os = "linux")]
    if let Some(rings) = rings {
        pipe.link.borrow_mut().use_rings(rings);
    }
    let enforces = engine.enforces_memory();
    // Just after a run the next one may follow at once: the worker spins
    // for it as the pool's idle threads do, rather than be woken.
    let mut after_run = false;
    // The last run's config and limits, which the next `Run` may leave out.
    let mut last_config = String::new();
    let mut last_limits: Option<Limits> = None;
    loop {
        let mut idle_panicked = false;
        let msg = pipe.recv_command(after_run, || {
            idle_panicked = catch_unwind(AssertUnwindSafe(|| host.idle())).is_err();
        });
        // A panic may leave the engine's thread state broken.
        if idle_panicked {
            return 70;
        }
        after_run = false;
        match msg {
            ToWorker::Run {
                config,
                config_delta,
                limits,
                timeout_ms,
                source,
                spin,
                linger,
            } => {
                // What this run leaves out is what the last one was sent
                // (the host keeps the same; `Proc::run_message`).
                if config_delta {
                    if super::apply_config_delta(&mut last_config, &config).is_none() {
                        return 2;
                    }
                } else {
                    last_config = config;
                }
                if limits.is_some() {
                    last_limits = limits;
                }
                let Some(limits) = last_limits.as_ref() else {
                    return 2;
                };
                let config = &last_config;
                pipe.apart.borrow_mut().new_run();
                pipe.allow_spin(spin);
                pipe.linger.set(linger);
                let extra = if enforces { BACKSTOP_SLACK_BYTES } else { 0 };
                // Counted, without a cap, until the engine has loaded the
                // run; `serve_run` then arms the run's budget.
                budget::arm(u64::MAX);
                let run = RunMsg {
                    config,
                    limits,
                    timeout_ms,
                    body: &Body::trusted(source),
                    budget_bytes: limits.memory_bytes.saturating_add(extra),
                };
                let mut panicked = false;
                let lent = catch_unwind(AssertUnwindSafe(|| {
                    host.lend(&mut |engine| match engine {
                        Ok(engine) => {
                            let tainted = serve_run(engine, &pipe, &run, &mut panicked);
                            // The run is over: what the engine thread does
                            // next (teardown, the next context made ahead)
                            // is not the run's memory, and must not end the
                            // worker after the run was answered.
                            budget::disarm();
                            tainted
                        }
                        Err(f) => {
                            answer_failed_run(&pipe, f);
                            true
                        }
                    })
                }));
                budget::disarm();
                // A panic may leave the engine's thread state broken: the
                // host replaces this worker.
                if lent.is_err() || panicked {
                    return 70;
                }
                match &session {
                    Some(spec) => pipe.send(&FromWorker::Kept {
                        session_bytes: spec.retained_bytes(),
                    }),
                    None => pipe.send(&FromWorker::Ready),
                }
                after_run = true;
            }
            ToWorker::Check { source } => {
                // Parsed here again: the worker never compiles what it was
                // not given as a body.
                let error = guarded(|| Ok(Body::parse(&source).and_then(|b| host.check(&b))));
                let error = match error {
                    Ok(r) => r.err(),
                    Err(f) => Some(ScriptError::internal(f.message)),
                };
                pipe.send(&FromWorker::Checked { error });
            }
            ToWorker::EvalGlobal { eval } => {
                let outcome = guarded(|| Ok(host.eval_global(eval)))
                    .unwrap_or_else(|f| GlobalEvalOutcome::Unsupported(f.message));
                pipe.send(&FromWorker::Global { outcome });
            }
            ToWorker::Finish => {}
            _ => return 2,
        }
    }
}

struct RunMsg<'a> {
    config: &'a str,
    limits: &'a Limits,
    timeout_ms: u64,
    body: &'a Body,
    /// The heap the script may grow, counted from the end of `load`.
    budget_bytes: u64,
}

/// The engine could not even be created: answer the Run, then wait for
/// the host to finish it.
fn answer_failed_run(pipe: &Pipe, f: EngineFault) {
    pipe.send(&FromWorker::Step {
        phase: StepPhase::Load,
        fault: Some(f),
        memory_used: None,
        exhausted: false,
        fuel_consumed: None,
        kinds: Vec::new(),
        context: None,
    });
    loop {
        match pipe.recv(false) {
            ToWorker::Finish => return,
            ToWorker::Classify { .. } => pipe.send(&FromWorker::Kind {
                kind: FaultKind::Thrown,
            }),
            _ => pipe.send(&FromWorker::Step {
                phase: StepPhase::Jobs,
                fault: Some(EngineFault::new(FaultKind::Internal, "Error", "no engine")),
                memory_used: None,
                exhausted: false,
                fuel_consumed: None,
                kinds: Vec::new(),
                context: None,
            }),
        }
    }
}

/// Runs engine primitives as the host asks, until Finish. Returns whether
/// the engine is tainted, by the in-process pool's rule (`run_script`): a
/// fault other than a script that did not compile, or memory exhausted
/// even where the script caught it. (This once counted every fault, a
/// syntax error too: each such run, and each TypeScript script that the
/// facade first tried as JavaScript, cost the next run a new runtime and
/// a freshly hardened context, 6 ms on a slow VM. And a run that caught
/// its out-of-memory error left the runtime in service.)
fn serve_run(
    engine: &mut dyn Engine,
    pipe: &Rc<Pipe>,
    run: &RunMsg<'_>,
    panicked: &mut bool,
) -> bool {
    let cancel = CancellationToken::new();
    let deadline = Instant::now() + Duration::from_millis(run.timeout_ms);
    let setup = EngineSetup {
        prelude: PRELUDE,
        config_json: run.config,
        limits: run.limits,
        deadline,
        cancel: &cancel,
        suspendable: false,
    };
    let host: HostHandle = Rc::new(PipeHost(pipe.clone()));
    pipe.failures.borrow_mut().clear();
    let mut tainted = false;
    let mut step = |engine: &mut dyn Engine, phase: StepPhase, r: Result<(), EngineFault>| {
        if let Err(f) = &r {
            *panicked |= f.kind == FaultKind::Internal && f.message.starts_with(PANIC_PREFIX);
        }
        let memory_used = engine.memory_used().or_else(|| Some(budget::peak()));
        let exhausted = engine.memory_exhausted();
        tainted |= taints(phase, r.as_ref().err(), exhausted);
        let kinds = pipe
            .failures
            .take()
            .into_iter()
            .map(|(name, message)| {
                let kind =
                    guarded(|| Ok(engine.classify(&name, &message))).unwrap_or(FaultKind::Thrown);
                Classified {
                    name,
                    message,
                    kind,
                }
            })
            .collect::<Vec<Classified>>();
        // The script failed with a stack overflow: the same rule as in
        // process (`run_script`), the context goes.
        tainted |= kinds.iter().any(|k| k.kind == FaultKind::StackOverflow);
        let fuel_consumed = engine.fuel_consumed();
        let context = engine.context_id();
        pipe.send(&FromWorker::Step {
            phase,
            fault: r.err(),
            memory_used,
            exhausted,
            fuel_consumed,
            kinds,
            context,
        });
    };
    let loaded = guarded(|| engine.load(&setup, host));
    // The budget counts the script's heap, from here: a context the engine
    // had to make in `load` (none was made ahead of time: a fresh
    // worker's first run, a first private run) is the engine's, and
    // counting it made a limit fail on a fresh worker that passed on a
    // warm one (Boa, `return 1 + 1` under 2 MiB: its ~3 MB context).
    budget::arm(run.budget_bytes);
    let (phase, r) = match loaded {
        Err(f) => (StepPhase::Load, Err(f)),
        Ok(()) => match guarded(|| engine.start(run.body)) {
            Err(f) => (StepPhase::Start, Err(f)),
            Ok(()) => (StepPhase::Jobs, guarded(|| engine.run_jobs())),
        },
    };
    step(engine, phase, r);
    loop {
        match pipe.recv(true) {
            ToWorker::Drain { settles, spin } => {
                pipe.allow_spin(spin);
                let r = settle_all(engine, &settles).and_then(|()| guarded(|| engine.run_jobs()));
                step(engine, StepPhase::Jobs, r);
            }
            ToWorker::Classify { name, message } => {
                let kind =
                    guarded(|| Ok(engine.classify(&name, &message))).unwrap_or(FaultKind::Thrown);
                pipe.send(&FromWorker::Kind { kind });
            }
            ToWorker::Finish => return tainted,
            _ => std::process::exit(2),
        }
    }
}

/// The name and message pairs the host may classify for a `fail` notice
/// (`event_loop::Failure` reads the description for both sides).
fn failure_names(description: &str) -> Vec<(String, String)> {
    crate::event_loop::Failure::parse(description).classified_pairs()
}

/// Whether one step of a run taints the engine (see [`serve_run`]).
fn taints(phase: StepPhase, fault: Option<&EngineFault>, exhausted: bool) -> bool {
    let faulted = fault
        .is_some_and(|f| !(phase == StepPhase::Start && crate::event_loop::is_parse_failure(f)));
    faulted || exhausted
}

fn settle_all(engine: &mut dyn Engine, settles: &[Settle]) -> Result<(), EngineFault> {
    for s in settles {
        guarded(|| engine.settle(s.id, s.ok, &s.payload))?;
    }
    Ok(())
}

const PANIC_PREFIX: &str = "the engine panicked: ";

/// Runs an engine primitive, turning a panic into an internal fault.
fn guarded<R>(f: impl FnOnce() -> Result<R, EngineFault>) -> Result<R, EngineFault> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(EngineFault::new(
            FaultKind::Internal,
            "Error",
            format!(
                "{PANIC_PREFIX}{}",
                crate::error::panic_message(payload.as_ref())
            ),
        )),
    }
}

/// Heap budget of a worker run, counted by [`WorkerAllocator`].
mod budget {
    use super::*;

    pub(super) static ENABLED: AtomicBool = AtomicBool::new(false);
    pub(super) static LIVE: AtomicIsize = AtomicIsize::new(0);
    pub(super) static PEAK: AtomicIsize = AtomicIsize::new(0);
    pub(super) static CAP: AtomicIsize = AtomicIsize::new(isize::MAX);

    /// Starts counting (worker processes only).
    pub(super) fn enable() {
        ENABLED.store(true, Ordering::SeqCst);
    }

    /// Net heap growth from now on may not pass `bytes`.
    pub(super) fn arm(bytes: u64) {
        LIVE.store(0, Ordering::SeqCst);
        PEAK.store(0, Ordering::SeqCst);
        CAP.store(
            isize::try_from(bytes).unwrap_or(isize::MAX),
            Ordering::SeqCst,
        );
    }

    pub(super) fn disarm() {
        CAP.store(isize::MAX, Ordering::SeqCst);
    }

    /// Whether allocations are counted: false when the binary's global
    /// allocator is not [`WorkerAllocator`].
    pub(super) fn counting() -> bool {
        let before = LIVE.load(Ordering::SeqCst);
        let probe = std::hint::black_box(Vec::<u8>::with_capacity(4096));
        let after = LIVE.load(Ordering::SeqCst);
        drop(probe);
        after - before >= 4096
    }

    pub(super) fn peak() -> u64 {
        PEAK.load(Ordering::Relaxed).max(0) as u64
    }

    /// Counts `bytes` more; over the cap the process ends at once with
    /// [`EXIT_OUT_OF_MEMORY`] (nothing may allocate on this path).
    #[inline]
    pub(super) fn charge(bytes: usize) {
        let bytes = bytes as isize;
        let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if now > CAP.load(Ordering::Relaxed) {
            super::sys::exit_now(EXIT_OUT_OF_MEMORY);
        }
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn release(bytes: usize) {
        LIVE.fetch_sub(bytes as isize, Ordering::Relaxed);
    }
}

/// The global allocator every worker binary should install: the system
/// allocator, plus (in worker mode only) a count of the heap a run uses,
/// which enforces the run's memory limit for engines that have none of
/// their own (Boa) and backstops those that do. Outside worker mode it
/// costs one relaxed load per allocation.
///
/// Install it with [`crate::worker_main!`]; a worker whose binary did not
/// refuses to serve ([`EXIT_NO_WORKER_ALLOCATOR`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct WorkerAllocator;

#[allow(unsafe_code)]
// SAFETY: every method forwards to `System` with the caller's arguments;
// the counting around it never touches the memory.
unsafe impl GlobalAlloc for WorkerAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if budget::ENABLED.load(Ordering::Relaxed) {
            budget::charge(layout.size());
        }
        System.alloc(layout)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if budget::ENABLED.load(Ordering::Relaxed) {
            budget::charge(layout.size());
        }
        System.alloc_zeroed(layout)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if budget::ENABLED.load(Ordering::Relaxed) {
            budget::release(layout.size());
        }
        System.dealloc(ptr, layout)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if budget::ENABLED.load(Ordering::Relaxed) {
            if new_size > layout.size() {
                budget::charge(new_size - layout.size());
            } else {
                budget::release(layout.size() - new_size);
            }
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// The few system calls of the process boundary.
#[allow(unsafe_code)]
pub(super) mod sys {
    /// The first read of stdin, before any other: with rings, the host's
    /// `Init` and the rings' descriptor that came with it; a pipe, or any
    /// failure, reads nothing here (the usual reads then see what is
    /// there, or the error).
    #[cfg(target_os = "linux")]
    pub(super) fn first_read() -> (Vec<u8>, Option<std::os::fd::OwnedFd>) {
        super::super::ring::recv_with_descriptor(0, 4096).unwrap_or_default()
    }

    /// No rings off Linux: nothing to read first.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn first_read() -> (Vec<u8>, Option<std::convert::Infallible>) {
        (Vec::new(), None)
    }

    /// The shared rings whose descriptor the host sent with `Init`,
    /// mapped; the descriptor is closed either way. `None` if none came or
    /// they cannot be mapped: the pipes carry everything then.
    #[cfg(target_os = "linux")]
    pub(super) fn map_rings(
        given: Option<std::os::fd::OwnedFd>,
    ) -> Option<super::super::ring::Rings> {
        use super::super::ring::{Region, Rings};
        use std::os::fd::AsRawFd;
        let region = Region::map(given?.as_raw_fd()).ok()?;
        Some(Rings::worker(region))
    }

    /// No rings off Linux.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn map_rings(
        _: Option<std::convert::Infallible>,
    ) -> Option<std::convert::Infallible> {
        None
    }

    /// Caps this process before any script runs: address space, no core
    /// files, no file writes, a handful of descriptors.
    #[cfg(unix)]
    pub(super) fn cap_self(address_space_bytes: Option<u64>) {
        let set = |resource, value: u64| {
            let lim = libc::rlimit {
                rlim_cur: value as libc::rlim_t,
                rlim_max: value as libc::rlim_t,
            };
            // SAFETY: setrlimit reads the struct we pass and nothing else.
            unsafe { libc::setrlimit(resource, &lim) };
        };
        if let Some(bytes) = address_space_bytes {
            set(libc::RLIMIT_AS, bytes);
        }
        set(libc::RLIMIT_CORE, 0);
        set(libc::RLIMIT_FSIZE, 0);
        set(libc::RLIMIT_NOFILE, 16);
    }

    #[cfg(not(unix))]
    pub(super) fn cap_self(_: Option<u64>) {}

    /// Closes every descriptor above stderr this process inherited: a
    /// host's descriptors without close-on-exec (a build's jobserver
    /// pipes, files its own parent passed down) would otherwise sit in
    /// every worker, one sandbox escape away from a script.
    #[cfg(target_os = "linux")]
    pub(super) fn close_inherited() {
        // SAFETY: close_range closes descriptors of this process only;
        // nothing here holds one above 2 yet (the rings' comes later).
        let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } == 0;
        if closed {
            return;
        }
        // Kernels before 5.9: the descriptors /proc lists.
        let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2)
            .collect();
        for fd in open {
            // SAFETY: as above; the listing's own descriptor is already
            // closed, so at worst this is EBADF.
            unsafe { libc::close(fd) };
        }
    }

    /// Elsewhere: each descriptor up to the limit of open files.
    #[cfg(all(unix, not(target_os = "linux")))]
    pub(super) fn close_inherited() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct we pass.
        let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            (lim.rlim_cur as u64).min(65_536) as i32
        } else {
            1024
        };
        for fd in 3..max {
            // SAFETY: as above.
            unsafe { libc::close(fd) };
        }
    }

    #[cfg(not(unix))]
    pub(super) fn close_inherited() {}

    /// SIGKILLs process group `pgid` (a worker and what it started).
    #[cfg(unix)]
    pub(in crate::process) fn kill_group(pgid: u32) {
        if let Ok(pgid) = libc::pid_t::try_from(pgid) {
            if pgid > 1 {
                // SAFETY: kill takes plain integers; a group that is gone
                // is ESRCH, which is ignored.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
        }
    }

    #[cfg(not(unix))]
    pub(in crate::process) fn kill_group(_: u32) {}

    /// A worker that died leaves its pipe broken, and the host's next
    /// write to it must fail with `EPIPE` (the worker is then replaced),
    /// not kill the host with `SIGPIPE`. Rust programs, CPython and Node
    /// already ignore `SIGPIPE`; a host that left it at its default (a C
    /// program, libFuzzer's `main`: a `cross_run` soak died this way) has
    /// it ignored here, once, before its first worker starts. A handler
    /// the host set is kept, and children started with
    /// `std::process::Command` get the default back.
    #[cfg(unix)]
    pub(in crate::process) fn ignore_sigpipe() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: reads the current disposition into a zeroed struct,
            // and replaces only the default one with `SIG_IGN`.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_DFL
                {
                    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                }
            }
        });
    }

    #[cfg(not(unix))]
    pub(in crate::process) fn ignore_sigpipe() {}

    /// Ends the process now, without unwinding, flushing or allocating.
    pub(super) fn exit_now(code: i32) -> ! {
        #[cfg(unix)]
        // SAFETY: _exit never returns and touches no Rust state.
        unsafe {
            libc::_exit(code)
        }
        #[cfg(not(unix))]
        std::process::abort()
    }
}

#[cfg(test)]
mod tests;
