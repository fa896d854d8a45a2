//! The engine contract: what an adapter supplies, and what core builds
//! from it.
//!
//! This module is for adapter authors and is less stable than the crate
//! root. An adapter supplies
//!
//! - [`Engine`]: the primitives of one run on one fresh context (load the
//!   prelude, start the script, run jobs, settle a tool call, measure
//!   memory). The one event loop drives them the same way for every engine.
//! - [`EngineThread`]: the engine state one thread owns (a runtime, an
//!   isolate, a compiled module), which lends a fresh [`Engine`] per run,
//!   parses without running, and runs global code (test262).
//! - [`EngineDescriptor`]: who the engine is (name, aliases, version,
//!   capabilities, default isolation) and how to build its threads.
//!
//! From these, core builds everything else once for every engine: the
//! in-process adapter ([`Pooled`], a pool of engine threads), the worker
//! process that serves an engine behind the process boundary
//! ([`crate::process`]), and the process adapter.
//!
//! # The host operations
//!
//! A script reaches the host only through the engine's one native
//! function, `host(op, a, b) -> string`, which the prelude
//! (`crates/abi/src/prelude.js`) captures and hides. Each operation is a [`HostOp`]:
//!
//! | op | `a` | `b` | answer |
//! |---|---|---|---|
//! | `call` | tool name, then optionally NUL and the engine's stack at the call (its first `script.js:L:C` frame is where the call was made) | arguments as JSON | call id (`"0"`: refused, over the attempt cap) |
//! | `spawn` | as for `call` | arguments as JSON | `{"id", "settle"}` of a new detached task, or `{"error": {"code", "message"}}` |
//! | `cancel_task` | task id | | `"1"` if it was running |
//! | `unknown` | tool name | | call id of a call that already failed (ToolNotFoundError), a newline, and its message |
//! | `cancel` | call id | | |
//! | `console` | level (`log`, `info`, `warn`, `error`, `debug`) | text | |
//! | `progress` | message | data as JSON, or empty | `"1"` kept, `"0"` dropped by the rate limit |
//! | `progress_warn` | as for `progress` | as for `progress` | as for `progress` (an event of kind `warn`) |
//! | `approval_id` | | | the run's latest approval request id, or empty |
//! | `warnings` | lossy conversions of the return value, as JSON `[{path, message}]` | | |
//! | `budget` | | | tool calls left |
//! | `remaining_ms` | | | milliseconds to the deadline |
//! | `done` | `"1"` if a value was returned | the value as JSON | |
//! | `fail` | the error's description as JSON | | |
//!
//! An unknown op answers `""`. The table is checked against the prelude by
//! this module's tests. The ops whose answer is blank are *notices*
//! (`HostOp::NOTICES`): behind the process boundary the worker sends them
//! without waiting for an answer, which spares a trivial run one round trip
//! through the pipe.

use crate::adapter::{
    Capabilities, EngineInfo, ExecutionRequest, GlobalEval, GlobalEvalOutcome, ScriptRuntimeAdapter,
};
use crate::error::ScriptError;
use crate::limits::{Isolation, Limits};
use crate::pool::WorkerPool;
use crate::report::ExecutionReport;
use crate::tuning::{Tunable, Tuned, Tuning};
use async_trait::async_trait;
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::body::Body;
pub use crate::end_check::EndCheck;
pub use crate::event_loop::{
    parse_error, run_script, syntax_error, RunOutput, PRELUDE, PRELUDE_FILE, REFUSED_CALLS_KEPT,
};

/// A new id for a context an engine made ([`Engine::context_id`]):
/// unique in this process.
pub fn new_context_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What kind of failure an engine primitive hit (shared with the WASI
/// guest through `harness-abi`).
pub use harness_abi::FaultKind;

/// A failure inside an engine primitive, with the engine's own words.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct EngineFault {
    /// What kind of failure.
    pub kind: FaultKind,
    /// The engine's error name (`InternalError`, `RangeError`, …).
    pub name: String,
    /// The engine's message.
    pub message: String,
    /// The engine's stack, where it has one (locations for syntax errors).
    pub stack: Option<String>,
}

impl EngineFault {
    /// A fault without a stack.
    pub fn new(kind: FaultKind, name: impl Into<String>, message: impl Into<String>) -> Self {
        EngineFault {
            kind,
            name: name.into(),
            message: message.into(),
            stack: None,
        }
    }

    /// The same fault with the engine's stack (or locations, for a syntax
    /// error).
    pub fn with_stack(mut self, stack: impl Into<String>) -> Self {
        self.stack = Some(stack.into());
        self
    }
}

/// What an engine needs to set up one run.
#[derive(Debug)]
pub struct EngineSetup<'a> {
    /// The hardening prelude ([`PRELUDE`]).
    pub prelude: &'a str,
    /// What the prelude's `install` takes: tool names and the context, as JSON.
    pub config_json: &'a str,
    /// The run's limits (memory, stack, fuel).
    pub limits: &'a Limits,
    /// When the interrupt handler must stop the script.
    pub deadline: Instant,
    /// Cancelled: the interrupt handler must stop the script.
    pub cancel: &'a CancellationToken,
}

/// The host side of the engine's one native function, `host(op, a, b)`.
/// In process it is the run's own state (tools, console, outcome); behind the process boundary
/// it is a proxy that asks the host over the pipe.
pub trait Host {
    /// Answers one host operation. Never fails; unknown ops return "".
    fn call(&self, op: &str, a: &str, b: &str) -> String;
}

/// Shared handle to the run's host; the engine's one native function
/// forwards to [`Host::call`].
pub type HostHandle = Rc<dyn Host>;

/// Engine primitives. Implementations are not `Send`: each run owns its
/// engine on one worker thread.
pub trait Engine {
    /// Provides a fresh context that no script has run in, with a native
    /// host function that calls [`Host::call`] on `host`; evaluates the
    /// prelude, calls it as `harden(hostFn)` and the result as
    /// `install(config)`. (The hardening half may have been done ahead of
    /// time on a fresh context.) Arms the interrupt handler with the
    /// deadline and cancel token, and sets the memory and stack limits.
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault>;
    /// Compiles the body's wrapped text ([`Body::wrapped`]) as `script.js`,
    /// in the script goal and strict, and passes the function to the
    /// prelude's `start`. A compile error is a [`FaultKind::Syntax`] fault.
    fn start(&mut self, body: &Body) -> Result<(), EngineFault>;
    /// Runs pending jobs (microtasks) until none is left.
    fn run_jobs(&mut self) -> Result<(), EngineFault>;
    /// Calls the prelude's `settle(id, ok, payload)`.
    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault>;
    /// Engine heap in use, where known.
    fn memory_used(&mut self) -> Option<u64>;
    /// Fuel consumed so far, for engines that count it.
    fn fuel_consumed(&mut self) -> Option<u64> {
        None
    }
    /// Whether the heap is at its limit. Engines that throw a bare value
    /// when they cannot allocate an error object use this to tell such a
    /// throw from a script's own `throw null`.
    fn memory_exhausted(&mut self) -> bool {
        false
    }
    /// Which context this run is in, once loaded: two runs with the same
    /// id met the same context (the second reused what the first left).
    /// Never shown to scripts; the cross-run suite reads it to prove that
    /// its pairs met a reused context. `None` where the engine does not
    /// say. Adapters draw ids from [`new_context_id`].
    fn context_id(&self) -> Option<u64> {
        None
    }
    /// A callback the watchdog calls (from another thread) when the run
    /// passes its deadline or is cancelled, for engines that can stop work
    /// faster than their interrupt checks notice. Asked for after `load`.
    fn stopper(&self) -> Option<Box<dyn FnOnce() + Send>> {
        None
    }
    /// Maps an error the script saw (by name and message) to an engine
    /// fault kind, for errors the engine raises itself (interrupts, out of
    /// memory, stack overflow). Returns `Thrown` for ordinary errors.
    fn classify(&self, name: &str, message: &str) -> FaultKind;
    /// The run needs nothing more from this engine: called once by
    /// [`crate::event_loop::run_script`] after its last use of the engine,
    /// before it builds the report (and not at all for a run refused
    /// before it reached the engine, a source over the limit). An engine
    /// whose tidying up can go on beside the rest of the run (a worker
    /// process) may start it here. The default does nothing.
    fn finished(&mut self) {}
}

/// `$262` for test262's harness files, evaluated as global code before a
/// test by engines that run [`GlobalEval`]. `evalScript` uses indirect
/// eval, which the hardening prelude blocks (that is the point of
/// test262's `--raw` runs).
pub const TEST262_HOST: &str = "globalThis.$262 = { global: globalThis, gc() {}, \
    evalScript(src) { return (0, eval)(src); }, \
    detachArrayBuffer() { throw new TypeError('detachArrayBuffer is not supported'); }, agent: {} };";

/// One operation of the engine's native function `host(op, a, b)`, decoded
/// (see the table in the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostOp<'a> {
    /// A tool call: answered with its call id.
    Call {
        /// The tool's name as the script wrote it.
        tool: &'a str,
        /// The arguments as JSON.
        args: &'a str,
        /// Where in the script the call was made, where the engine can tell.
        at: Option<crate::error::Location>,
    },
    /// A detached task (`tools.spawn.exec`): answered with its id and the
    /// id its `done` promise settles under, or why it was refused.
    Spawn {
        /// The tool's name.
        tool: &'a str,
        /// The arguments as JSON.
        args: &'a str,
        /// Where in the script it was started.
        at: Option<crate::error::Location>,
    },
    /// Cancels a detached task: answered `"1"` if it was running.
    CancelTask {
        /// The task id.
        id: &'a str,
    },
    /// The id of the run's latest approval request, or empty.
    ApprovalId,
    /// Lossy conversions of the return value (sent before `done`).
    Warnings {
        /// `[{path, message}]` as JSON.
        json: &'a str,
    },
    /// A call of a tool that does not exist (or is not exposed): recorded
    /// as failed, answered with its call id.
    Unknown {
        /// The name the script used.
        tool: &'a str,
    },
    /// The script no longer waits for this call (a lost race).
    Cancel {
        /// The call id, as the script holds it.
        id: &'a str,
    },
    /// A console line.
    Console {
        /// `log`, `info`, `warn`, `error` or `debug`.
        level: &'a str,
        /// The formatted line.
        text: &'a str,
    },
    /// A progress event: answered `"1"` if kept, `"0"` if rate-limited.
    Progress {
        /// The event's message.
        message: &'a str,
        /// Its data as JSON, or empty.
        data: &'a str,
        /// `info` or `warn`.
        kind: crate::report::ProgressKind,
    },
    /// Tool calls left in the budget.
    Budget,
    /// Milliseconds left before the deadline.
    RemainingMs,
    /// The script returned.
    Done {
        /// Whether it returned a value (not `undefined`).
        has_value: bool,
        /// The value as JSON.
        json: &'a str,
    },
    /// The script threw or its promise rejected.
    Fail {
        /// The prelude's description of the error, as JSON.
        description: &'a str,
    },
    /// An op this host does not know: answered with `""`.
    Other(&'a str),
}

impl<'a> HostOp<'a> {
    /// Every op name the prelude uses, in the order of the docs table.
    pub const NAMES: [&'static str; 14] = [
        "call",
        "spawn",
        "cancel_task",
        "unknown",
        "cancel",
        "console",
        "progress",
        "progress_warn",
        "approval_id",
        "warnings",
        "budget",
        "remaining_ms",
        "done",
        "fail",
    ];

    /// The ops whose answer is always `""` (the blank answers of the
    /// module docs' table): the script learns nothing from the host by
    /// them, so a worker process sends them and goes on without waiting
    /// (`crate::process`). The host answers them in the order they came,
    /// like every op, so nothing is reordered.
    pub(crate) const NOTICES: [&'static str; 5] = ["cancel", "console", "warnings", "done", "fail"];

    /// Decodes the three strings the native function received.
    pub fn decode(op: &'a str, a: &'a str, b: &'a str) -> Self {
        use crate::report::ProgressKind;
        match op {
            "call" => {
                let (tool, at) = split_site(a);
                HostOp::Call { tool, args: b, at }
            }
            "spawn" => {
                let (tool, at) = split_site(a);
                HostOp::Spawn { tool, args: b, at }
            }
            "cancel_task" => HostOp::CancelTask { id: a },
            "approval_id" => HostOp::ApprovalId,
            "warnings" => HostOp::Warnings { json: a },
            "unknown" => HostOp::Unknown { tool: a },
            "cancel" => HostOp::Cancel { id: a },
            "console" => HostOp::Console { level: a, text: b },
            "progress" | "progress_warn" => HostOp::Progress {
                message: a,
                data: b,
                kind: if op == "progress" {
                    ProgressKind::Info
                } else {
                    ProgressKind::Warn
                },
            },
            "budget" => HostOp::Budget,
            "remaining_ms" => HostOp::RemainingMs,
            "done" => HostOp::Done {
                has_value: a == "1",
                json: b,
            },
            "fail" => HostOp::Fail { description: a },
            other => HostOp::Other(other),
        }
    }
}

/// Splits `tool\0STACK`, where STACK is the engine's stack at the call
/// (`new Error().stack` in the prelude), into the tool's name and the
/// first frame in the user's script. The prelude hands the stack over
/// unparsed: scanning it in JavaScript cost QuickJS a fifth of a tool call.
fn split_site(a: &str) -> (&str, Option<crate::error::Location>) {
    let Some((tool, stack)) = a.split_once('\0') else {
        return (a, None);
    };
    (
        tool,
        crate::error::call_site(stack, crate::body::LINE_OFFSET),
    )
}

/// The engine state one thread owns (a runtime, an isolate, a compiled
/// module). Not `Send`: it is created on its thread and stays there.
///
/// Core drives it from the in-process pool ([`Pooled`]) and from a worker
/// process ([`crate::process`]); adapters never implement the pooling or
/// the process protocol themselves.
pub trait EngineThread {
    /// Lends a fresh engine (no script has run in it) to `run`, which
    /// returns whether the engine is tainted (faulted, stopped, out of
    /// memory) and must not be reused; then tears the run's context down
    /// and may prepare the next one (after `run` has answered its caller).
    /// A thread that keeps a context for the next run keeps only one whose
    /// run passed the prelude's `end` and the end-of-run check of the body
    /// it started ([`Body::end_check`]).
    fn lend(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool);
    /// Called when the thread has no run to do, before it sleeps (in
    /// process, after the pool's spin for the next job; behind the
    /// process boundary, after the worker's): work that would otherwise
    /// delay a run, such as a garbage collection. A run sent meanwhile
    /// waits for it, so keep it short. Does nothing by default.
    fn idle(&mut self) {}
    /// Compiles a script body as [`Engine::start`] would, without running
    /// any of it.
    fn check(&mut self, body: &Body) -> Result<(), ScriptError>;
    /// Runs standalone global code (test262). Engines that cannot say so.
    fn eval_global(&mut self, eval: GlobalEval) -> GlobalEvalOutcome {
        let _ = eval;
        GlobalEvalOutcome::Unsupported("this engine cannot run global code".to_owned())
    }
}

/// Who an engine is and how core builds it: the one thing an adapter crate
/// exports besides its engine types. Built with [`EngineDescriptor::new`].
#[derive(Clone)]
#[non_exhaustive]
pub struct EngineDescriptor {
    /// Stable name, as in `--engine` (`quickjs`, `boa`, …).
    pub name: &'static str,
    /// Other names `--engine` accepts (`qjs`).
    pub aliases: &'static [&'static str],
    /// The engine's version, for reports and the worker handshake.
    pub version: String,
    /// What the engine enforces in this process (behind the process
    /// boundary, core adds what the boundary enforces).
    pub capabilities: Capabilities,
    /// Where it runs unless told otherwise: behind the process boundary
    /// for engines that cannot stop themselves or cap their heap.
    pub default_isolation: Isolation,
    /// Native stack of each engine thread (parsers and interpreters
    /// recurse on it).
    pub thread_stack_bytes: usize,
    /// A run in a private realm leaves its engine thread long work after
    /// it has answered (collecting the realm, making the next one ahead):
    /// the next run then goes to another thread, in process and behind
    /// the process boundary ([`EngineDescriptor::with_long_private_tidy_up`]).
    pub long_private_tidy_up: bool,
    in_process: fn() -> Arc<dyn ScriptRuntimeAdapter>,
    in_process_threads: Option<fn(usize) -> Arc<dyn ScriptRuntimeAdapter>>,
    worker_thread: fn() -> Box<dyn EngineThread>,
    prepare_process: Option<fn(&mut crate::process::ProcessOptions)>,
}

impl fmt::Debug for EngineDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineDescriptor")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("version", &self.version)
            .field("capabilities", &self.capabilities)
            .field("default_isolation", &self.default_isolation)
            .finish_non_exhaustive()
    }
}

impl EngineDescriptor {
    /// An engine named `name`: `in_process` builds its in-process adapter
    /// (usually `|| Arc::new(Pooled::<MyEngine>::new())`), `worker_thread`
    /// the engine state a worker process serves. In process by default,
    /// with 16 MiB of native stack per engine thread.
    pub fn new(
        name: &'static str,
        version: impl Into<String>,
        capabilities: Capabilities,
        in_process: fn() -> Arc<dyn ScriptRuntimeAdapter>,
        worker_thread: fn() -> Box<dyn EngineThread>,
    ) -> Self {
        EngineDescriptor {
            name,
            aliases: &[],
            version: version.into(),
            capabilities,
            default_isolation: Isolation::InProcess,
            thread_stack_bytes: 16 << 20,
            long_private_tidy_up: false,
            in_process,
            in_process_threads: None,
            worker_thread,
            prepare_process: None,
        }
    }

    /// Other names the engine answers to.
    pub fn with_aliases(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }

    /// Where the engine runs unless told otherwise.
    pub fn with_default_isolation(mut self, isolation: Isolation) -> Self {
        self.default_isolation = isolation;
        self
    }

    /// Native stack of each engine thread.
    pub fn with_thread_stack_bytes(mut self, bytes: usize) -> Self {
        self.thread_stack_bytes = bytes;
        self
    }

    /// Says that a run in a private realm leaves the engine thread long
    /// work after it answers (hundreds of µs or more: collecting the
    /// realm, making the next one ahead), so that the pool sends the next
    /// run to another thread and that work overlaps it. Without it, a run
    /// sent while a thread tidies up waits for that thread, whose state
    /// is warmest (right where tidying takes microseconds).
    pub fn with_long_private_tidy_up(mut self) -> Self {
        self.long_private_tidy_up = true;
        self
    }

    /// How to build the in-process adapter with at most `n` engine
    /// threads (usually `|n| Arc::new(Pooled::<MyEngine>::with_max_workers(n))`),
    /// for [`EngineDescriptor::in_process_with_threads`].
    pub fn with_in_process_threads(
        mut self,
        build: fn(usize) -> Arc<dyn ScriptRuntimeAdapter>,
    ) -> Self {
        self.in_process_threads = Some(build);
        self
    }

    /// A hook run once in the host before process workers are started
    /// (fill a cache the workers read, pass them an environment variable).
    pub fn with_process_setup(mut self, setup: fn(&mut crate::process::ProcessOptions)) -> Self {
        self.prepare_process = Some(setup);
        self
    }

    /// Whether `name` (any case) is this engine's name or an alias.
    pub fn answers_to(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(self.name)
            || self.aliases.iter().any(|a| name.eq_ignore_ascii_case(a))
    }

    /// Whether the engine holds a run to its memory limit by itself (else
    /// a worker process's heap budget is exactly the limit).
    pub fn enforces_memory(&self) -> bool {
        self.capabilities.memory_limit
    }

    /// The engine in this process.
    pub fn info(&self) -> EngineInfo {
        EngineInfo {
            name: self.name.to_owned(),
            engine_version: self.version.clone(),
            capabilities: self.capabilities,
            isolation: Isolation::InProcess,
        }
    }

    /// A new in-process adapter.
    pub fn in_process(&self) -> Arc<dyn ScriptRuntimeAdapter> {
        (self.in_process)()
    }

    /// A new in-process adapter with at most `threads` engine threads
    /// (runs in flight; more queue), or `None` when the adapter crate did
    /// not say how ([`EngineDescriptor::with_in_process_threads`]). With
    /// one thread, runs one after another meet the same engine state: what
    /// the cross-run isolation suite needs to be sure it tests.
    pub fn in_process_with_threads(&self, threads: usize) -> Option<Arc<dyn ScriptRuntimeAdapter>> {
        self.in_process_threads.map(|build| build(threads.max(1)))
    }

    /// The engine state a worker process serves.
    pub fn worker_thread(&self) -> Box<dyn EngineThread> {
        (self.worker_thread)()
    }

    /// Runs the engine's process set-up hook on `opts`, if it has one.
    pub fn prepare_process(&self, opts: &mut crate::process::ProcessOptions) {
        if let Some(setup) = self.prepare_process {
            setup(opts);
        }
    }
}

/// An adapter crate's engine, as [`Pooled`] runs it: the descriptor, and a
/// factory for the state of each engine thread.
pub trait EngineAdapter: fmt::Debug + Clone + Send + Sync + 'static {
    /// Who the engine is.
    fn descriptor() -> EngineDescriptor;
    /// The state of one new engine thread of this process.
    fn new_thread(&self) -> Box<dyn EngineThread>;
}

/// An engine in this process: a pool of threads, each owning one
/// [`EngineThread`], running one script at a time on the shared event loop.
/// Adapter crates name it for their engine (`pub type QuickJs =
/// Pooled<QuickJsEngine>`).
pub struct Pooled<A: EngineAdapter> {
    adapter: A,
    /// The engine's name, for reports (static: no copy per run).
    name: &'static str,
    info: EngineInfo,
    /// Global code needs a way to stop it: engines that cannot interrupt
    /// themselves run it only behind the process boundary.
    global_eval: bool,
    pool: Arc<WorkerPool<Box<dyn EngineThread>>>,
    /// Whether its threads rehearse after each run, and how many
    /// rehearsals they ran; shared by clones ([`Tunable`]).
    keep_warm: KeepWarm,
}

impl<A: EngineAdapter> Clone for Pooled<A> {
    fn clone(&self) -> Self {
        Pooled {
            adapter: self.adapter.clone(),
            name: self.name,
            info: self.info.clone(),
            global_eval: self.global_eval,
            pool: self.pool.clone(),
            keep_warm: self.keep_warm.clone(),
        }
    }
}

impl<A: EngineAdapter> fmt::Debug for Pooled<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pooled")
            .field("engine", &self.info.name)
            .field("adapter", &self.adapter)
            .field("pool", &self.pool)
            .finish()
    }
}

impl<A: EngineAdapter + Default> Default for Pooled<A> {
    fn default() -> Self {
        Self::new()
    }
}

pub use crate::tuning::MAX_KEEP_WARM;

pub(crate) use crate::rehearsal::{KeepWarm, Rehearsal};

thread_local! {
    /// This engine thread's rehearsal, set after each run while the
    /// engine keeps warm and dropped when its window has passed.
    static REHEARSAL: RefCell<Option<Rehearsal>> = const { RefCell::new(None) };
    /// The name of the engine whose run set [`REHEARSAL`].
    static REHEARSAL_ENGINE: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

/// Whether this thread has a rehearsal due.
fn rehearsal_due(_: &mut Box<dyn EngineThread>) -> bool {
    REHEARSAL.with(|r| Rehearsal::due(&mut r.borrow_mut()))
}

/// Whether this thread has a rehearsal to run when anticipating.
fn rehearsal_ready(_: &mut Box<dyn EngineThread>) -> bool {
    REHEARSAL.with(|r| Rehearsal::ready(&mut r.borrow_mut()))
}

/// Drops this thread's rehearsal plan: it sleeps until its next run.
fn forget_rehearsal(_: &mut Box<dyn EngineThread>) {
    REHEARSAL.with(|r| *r.borrow_mut() = None);
}

/// Runs this thread's rehearsal, if one is due.
fn rehearse(thread: &mut Box<dyn EngineThread>) {
    let engine = REHEARSAL_ENGINE.get();
    let Some((request, tokio)) = REHEARSAL.with(|r| r.borrow().as_ref().map(|p| p.next(engine)))
    else {
        return;
    };
    let mut job = Some(request);
    thread.lend(&mut |lent| match (lent, job.take()) {
        (Ok(e), Some(request)) => crate::event_loop::rehearse(e, engine, request, &tokio),
        _ => false,
    });
}

/// Engine threads a [`Pooled`] engine starts at most, unless told otherwise.
pub const DEFAULT_MAX_THREADS: usize = 64;

impl<A: EngineAdapter + Default> Pooled<A> {
    /// The engine with up to 64 threads (runs in flight; more queue).
    pub fn new() -> Self {
        Self::with_max_workers(DEFAULT_MAX_THREADS)
    }

    /// The engine with at most `max_workers` runs in flight; more queue.
    pub fn with_max_workers(max_workers: usize) -> Self {
        Self::with_adapter(A::default(), max_workers)
    }
}

impl<A: EngineAdapter> Pooled<A> {
    /// The engine as `adapter` configures it, with at most `max_workers`
    /// runs in flight.
    pub fn with_adapter(adapter: A, max_workers: usize) -> Self {
        let d = A::descriptor();
        let for_threads = adapter.clone();
        let keep_warm = KeepWarm::anticipating();
        Pooled {
            name: d.name,
            info: d.info(),
            global_eval: d.capabilities.interrupt,
            pool: Arc::new(
                WorkerPool::new(
                    &format!("harness-{}", d.name),
                    max_workers,
                    d.thread_stack_bytes,
                    move || for_threads.new_thread(),
                )
                .with_idle(|thread| thread.idle())
                .with_rehearsal(rehearsal_due, rehearse, keep_warm.awake_flag())
                .with_anticipation(
                    rehearsal_ready,
                    rehearse,
                    forget_rehearsal,
                    keep_warm.anticipate_flag(),
                )
                .with_long_private_tidy_up(d.long_private_tidy_up),
            ),
            adapter,
            keep_warm,
        }
    }

    /// The adapter's own configuration.
    pub fn adapter(&self) -> &A {
        &self.adapter
    }
}

/// Tuned in process: awake on a machine with a CPU for the poller and
/// one for a caller; anticipation waits for the run awake there and only
/// rehearses ahead of it on one CPU.
impl<A: EngineAdapter> Tunable for Pooled<A> {
    fn tune(&self, tuning: Tuning) -> Tuned {
        self.keep_warm.tune(tuning, self.pool.can_stay_awake())
    }

    fn rehearsals(&self) -> u64 {
        self.keep_warm.rehearsals()
    }
}

#[async_trait]
impl<A: EngineAdapter> ScriptRuntimeAdapter for Pooled<A> {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        let body = Body::parse(source)?;
        self.pool.ask(move |t| t.check(&body)).await?
    }

    async fn execute(&self, mut request: ExecutionRequest) -> ExecutionReport {
        let name = self.name;
        // Where it runs, for the run's span.
        request.limits.isolation = Some(Isolation::InProcess);
        // Kept warm: the window and the engine's count of rehearsals
        // (nothing is cloned for a run of an engine that is not).
        let warm = self.keep_warm.for_run(self.pool.steady());
        self.pool
            .execute(name, request, move |thread, request, tokio, reply| {
                let rehearsal = warm.map(|warm| Rehearsal::after(&request, warm, tokio));
                let mut job = Some((request, reply));
                thread.lend(&mut |engine| {
                    let Some((request, reply)) = job.take() else {
                        return false;
                    };
                    crate::event_loop::run_lent(engine, name, request, tokio, |report| {
                        reply.send(report)
                    })
                });
                REHEARSAL_ENGINE.set(name);
                REHEARSAL.with(|r| *r.borrow_mut() = rehearsal.map(Rehearsal::starting_now));
            })
            .await
    }

    async fn eval_global(&self, eval: GlobalEval) -> GlobalEvalOutcome {
        if !self.global_eval {
            return GlobalEvalOutcome::Unsupported(format!(
                "{} cannot interrupt global code in this process; run it with isolation=process",
                self.info.name
            ));
        }
        self.pool
            .ask(move |t| t.eval_global(eval))
            .await
            .unwrap_or_else(|e| GlobalEvalOutcome::Unsupported(e.message))
    }
}

#[cfg(test)]
mod tests;
