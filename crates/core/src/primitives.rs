//! The primitives an engine gives the event loop: [`Engine`] for one run,
//! [`EngineThread`] for the state one thread owns, [`Host`] and [`HostOp`]
//! for the way back. Published as [`crate::engine`], whose docs describe
//! them; kept apart so that the event loop, the pool and the process
//! boundary all build on them without building on each other.

use crate::adapter::{GlobalEval, GlobalEvalOutcome};
use crate::body::Body;
use crate::error::ScriptError;
use crate::limits::Limits;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

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

    /// The fault every run of a session gets once the session ended
    /// ([`SessionThread::ended`](crate::session::SessionThread::ended)).
    pub fn session_ended(why: &str) -> Self {
        EngineFault::new(FaultKind::Internal, "Error", why)
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
    /// The hardening prelude ([`PRELUDE`](crate::engine::PRELUDE)).
    pub prelude: &'a str,
    /// What the prelude's `install` takes: tool names and the context, as JSON.
    pub config_json: &'a str,
    /// The run's limits (memory, stack, fuel).
    pub limits: &'a Limits,
    /// When the interrupt handler must stop the script.
    pub deadline: Instant,
    /// Cancelled: the interrupt handler must stop the script.
    pub cancel: &'a CancellationToken,
    /// The run may suspend: it must start in a fresh context, in which
    /// nothing of an earlier run is.
    pub suspendable: bool,
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
/// engine on one engine thread.
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
    /// Whether this run is one of a session's, on a thread that
    /// [`EngineThread::begin_session`] made one session's: its source is
    /// then parsed with [`Body::parse_session`], and its context outlives
    /// it. False by default.
    fn in_session(&self) -> bool {
        false
    }
    /// Whether this engine can put a run away while it waits
    /// ([`crate::durable`]): then [`suspend`](Engine::suspend) and
    /// [`resume`](Engine::resume) work. False by default.
    fn can_suspend(&self) -> bool {
        false
    }
    /// The run as it stands, while only host calls are pending (no script
    /// code is on the stack): everything [`resume`](Engine::resume) needs
    /// to go on in a fresh context of the same build. The context is not
    /// used again.
    fn suspend(&mut self) -> Result<Vec<u8>, EngineFault> {
        Err(EngineFault::new(
            FaultKind::Internal,
            "Error",
            "this engine cannot suspend a run",
        ))
    }
    /// Instead of `load` and `start`: a fresh context that goes on where
    /// `image` ([`suspend`](Engine::suspend)) left, under `setup`'s
    /// limits and with `host` answering. A fault here means the image is
    /// not one this engine can resume.
    fn resume(
        &mut self,
        setup: &EngineSetup<'_>,
        host: HostHandle,
        image: &[u8],
    ) -> Result<(), EngineFault> {
        let _ = (setup, host, image);
        Err(EngineFault::new(
            FaultKind::Internal,
            "Error",
            "this engine cannot resume a run",
        ))
    }
}

/// `$262` for test262's harness files, evaluated as global code before a
/// test by engines that run [`GlobalEval`]. `evalScript` uses indirect
/// eval, which the hardening prelude blocks (that is the point of
/// test262's `--raw` runs).
pub const TEST262_HOST: &str = "globalThis.$262 = { global: globalThis, gc() {}, \
    evalScript(src) { return (0, eval)(src); }, \
    detachArrayBuffer() { throw new TypeError('detachArrayBuffer is not supported'); }, agent: {} };";

/// One operation of the engine's native function `host(op, a, b)`, decoded
/// (see the table in the [module docs](crate::engine)).
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
/// Core drives it from the in-process pool ([`Pooled`](crate::engine::Pooled)) and from a worker
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
    /// Makes this thread one session's, before its first run: from then
    /// on every run it lends is in the session's realm (a context of its
    /// own, hardened with `harden(host, 'session')`: built-ins open, the
    /// global object open for the session's bindings), which it keeps
    /// between runs and never shares, and whose heap `spec` bounds. A
    /// run that leaves the engine tainted ends the session: the realm is
    /// dropped and every later `lend` is refused with a fault whose
    /// message says why, never a fresh realm. Returns false, and changes
    /// nothing, where the engine has no sessions (the default).
    fn begin_session(&mut self, spec: crate::session::SessionSpec) -> bool {
        let _ = spec;
        false
    }
    /// Runs standalone global code (test262). Engines that cannot say so.
    fn eval_global(&mut self, eval: GlobalEval) -> GlobalEvalOutcome {
        let _ = eval;
        GlobalEvalOutcome::Unsupported("this engine cannot run global code".to_owned())
    }
}
