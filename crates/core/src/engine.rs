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
//! | `call` | tool name, then optionally NUL and the engine's stack at the call (its first `script.js:L:C` frame is where the call was made) | arguments as JSON | call id (`"0"`: refused, over the attempt cap); for a call that finished at once, its outcome: a space and the result's JSON, or `!`, the call id, a newline and the failure as JSON `{code, message, stderr}` |
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
use crate::limits::Isolation;
use crate::pool::ThreadPool;
use crate::report::ExecutionReport;
use crate::tuning::{Tunable, Tuned, Tuning};
use async_trait::async_trait;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

pub use crate::body::Body;
pub use crate::end_check::EndCheck;
pub use crate::event_loop::{
    parse_error, run_script, syntax_error, RunOutput, PRELUDE, PRELUDE_FILE, REFUSED_CALLS_KEPT,
};
pub use crate::primitives::{
    new_context_id, Engine, EngineFault, EngineSetup, EngineThread, FaultKind, Host, HostHandle,
    HostOp, TEST262_HOST,
};

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
    prepare_process: Option<fn(&mut crate::process_options::ProcessOptions)>,
    in_process_session: Option<SessionBuilder>,
}

/// How a descriptor builds one session's engine in this process.
pub type SessionBuilder = fn(crate::session::SessionSpec) -> Option<Arc<dyn ScriptRuntimeAdapter>>;

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
            in_process_session: None,
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
    pub fn with_process_setup(
        mut self,
        setup: fn(&mut crate::process_options::ProcessOptions),
    ) -> Self {
        self.prepare_process = Some(setup);
        self
    }

    /// How to build one session's engine in this process (usually
    /// `|spec| Pooled::<E>::for_session(E, spec).map(|p| Arc::new(p) as _)`).
    pub fn with_sessions(mut self, build: SessionBuilder) -> Self {
        self.in_process_session = Some(build);
        self
    }

    /// Whether the engine has sessions ([`EngineThread::begin_session`]),
    /// in process and behind the process boundary.
    pub fn has_sessions(&self) -> bool {
        self.in_process_session.is_some()
    }

    /// One session's engine in this process, where the engine has
    /// sessions.
    pub fn in_process_session(
        &self,
        spec: crate::session::SessionSpec,
    ) -> Option<Arc<dyn ScriptRuntimeAdapter>> {
        self.in_process_session.and_then(|build| build(spec))
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
    pub fn prepare_process(&self, opts: &mut crate::process_options::ProcessOptions) {
        if let Some(setup) = self.prepare_process {
            setup(opts);
        }
    }
}

/// An adapter crate's engine, as [`Pooled`] runs it: the descriptor, and a
/// factory for the state of each engine thread (`QuickJsEngine`,
/// `BoaEngine`, …; "adapter" is only what implements
/// [`ScriptRuntimeAdapter`]).
pub trait PooledEngine: fmt::Debug + Clone + Send + Sync + 'static {
    /// Who the engine is.
    fn descriptor() -> EngineDescriptor;
    /// The state of one new engine thread of this process.
    fn new_thread(&self) -> Box<dyn EngineThread>;
    /// Whether its threads serve sessions
    /// ([`EngineThread::begin_session`]). False by default.
    fn has_sessions(&self) -> bool {
        false
    }
}

/// The old name of [`PooledEngine`], for bounds (`A: EngineAdapter`);
/// implement [`PooledEngine`].
#[deprecated(note = "renamed to PooledEngine")]
pub trait EngineAdapter: PooledEngine {}

#[allow(deprecated)]
impl<T: PooledEngine> EngineAdapter for T {}

/// An engine in this process: a pool of threads, each owning one
/// [`EngineThread`], running one script at a time on the shared event loop.
/// Adapter crates name it for their engine (`pub type QuickJs =
/// Pooled<QuickJsEngine>`).
pub struct Pooled<A: PooledEngine> {
    engine: A,
    /// The engine's name, for reports (static: no copy per run).
    name: &'static str,
    info: EngineInfo,
    /// Global code needs a way to stop it: engines that cannot interrupt
    /// themselves run it only behind the process boundary.
    global_eval: bool,
    pool: Arc<ThreadPool<Box<dyn EngineThread>>>,
    /// Whether its threads rehearse after each run, and how many
    /// rehearsals they ran; shared by clones ([`Tunable`]).
    keep_warm: KeepWarm,
}

impl<A: PooledEngine> Clone for Pooled<A> {
    fn clone(&self) -> Self {
        Pooled {
            engine: self.engine.clone(),
            name: self.name,
            info: self.info.clone(),
            global_eval: self.global_eval,
            pool: self.pool.clone(),
            keep_warm: self.keep_warm.clone(),
        }
    }
}

impl<A: PooledEngine> fmt::Debug for Pooled<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pooled")
            .field("engine", &self.info.name)
            .field("engine", &self.engine)
            .field("pool", &self.pool)
            .finish()
    }
}

impl<A: PooledEngine + Default> Default for Pooled<A> {
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

impl<A: PooledEngine + Default> Pooled<A> {
    /// The engine with up to 64 threads (runs in flight; more queue).
    pub fn new() -> Self {
        Self::with_max_workers(DEFAULT_MAX_THREADS)
    }

    /// The engine with at most `max_workers` runs in flight; more queue.
    pub fn with_max_workers(max_workers: usize) -> Self {
        Self::with_engine(A::default(), max_workers)
    }
}

impl<A: PooledEngine> Pooled<A> {
    /// The engine as `engine` configures it, with at most `max_workers`
    /// runs in flight.
    pub fn with_engine(engine: A, max_workers: usize) -> Self {
        let d = A::descriptor();
        let for_threads = engine.clone();
        let keep_warm = KeepWarm::anticipating();
        Pooled {
            name: d.name,
            info: d.info(),
            global_eval: d.capabilities.interrupt,
            pool: Arc::new(
                ThreadPool::new(
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
            engine,
            keep_warm,
        }
    }

    /// One session's engine: a single engine thread, made that session's
    /// with [`EngineThread::begin_session`] before its first run, that
    /// serves nothing else and never rehearses. A second thread (the
    /// pool replaces one that a run left stuck past its deadline) finds
    /// the session claimed and refuses every run. `None` where the engine
    /// has no sessions.
    pub fn for_session(engine: A, spec: crate::session::SessionSpec) -> Option<Self> {
        let d = A::descriptor();
        if !engine.has_sessions() {
            return None;
        }
        let for_threads = engine.clone();
        let factory = move || {
            let mut thread = for_threads.new_thread();
            thread.begin_session(spec.clone());
            thread
        };
        Some(Pooled {
            name: d.name,
            info: d.info(),
            global_eval: false,
            pool: Arc::new(ThreadPool::new(
                &format!("harness-{}-session", d.name),
                1,
                d.thread_stack_bytes,
                factory,
            )),
            engine,
            keep_warm: KeepWarm::default(),
        })
    }

    /// The engine's own configuration.
    pub fn engine(&self) -> &A {
        &self.engine
    }

    /// The old name of [`Pooled::with_engine`].
    #[deprecated(note = "renamed to with_engine")]
    pub fn with_adapter(engine: A, max_workers: usize) -> Self {
        Self::with_engine(engine, max_workers)
    }

    /// The old name of [`Pooled::engine`].
    #[deprecated(note = "renamed to engine")]
    pub fn adapter(&self) -> &A {
        &self.engine
    }
}

/// Tuned in process: awake on a machine with a CPU for the poller and
/// one for a caller; anticipation waits for the run awake there and only
/// rehearses ahead of it on one CPU.
impl<A: PooledEngine> Tunable for Pooled<A> {
    fn tune(&self, tuning: Tuning) -> Tuned {
        self.keep_warm.tune(tuning, self.pool.can_stay_awake())
    }

    fn rehearsals(&self) -> u64 {
        self.keep_warm.rehearsals()
    }
}

#[async_trait]
impl<A: PooledEngine> ScriptRuntimeAdapter for Pooled<A> {
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
