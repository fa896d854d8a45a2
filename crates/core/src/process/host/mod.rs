//! The host side: [`ProcessAdapter`] runs scripts in worker processes.

use super::{
    Classified, FromWorker, Link, Settle, StepPhase, ToWorker, EXIT_OUT_OF_MEMORY,
    PROTOCOL_VERSION, WORKER_ARG,
};
use crate::adapter::{
    Capabilities, EngineInfo, ExecutionRequest, GlobalEval, GlobalEvalOutcome, ScriptRuntimeAdapter,
};
use crate::engine::EngineDescriptor;
use crate::error::ScriptError;
use crate::event_loop::run_script;
use crate::limits::{Isolation, Limits};
use crate::pool::ThreadPool;
use crate::primitives::{Engine, EngineFault, EngineSetup, FaultKind, HostHandle};
use crate::rehearsal::{KeepWarm, Rehearsal};
use crate::report::ExecutionReport;
use crate::tuning::{Tunable, Tuned, Tuning};
use async_trait::async_trait;
use std::cell::RefCell;
use std::io;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod proc;
mod remote;

use proc::*;
pub(crate) use remote::RemoteEngine;

pub use crate::process_options::ProcessOptions;

/// Stack of the host threads that drive remote runs: the event loop reads
/// tool arguments and results (deeply nested JSON) on it.
const HOST_THREAD_STACK_BYTES: usize = 16 << 20;

/// A pool thread's worker process, kept warm between runs.
struct Slot {
    opts: Arc<ProcessOptions>,
    proc: Option<Proc>,
    /// Workers started by the whole adapter.
    started: Arc<AtomicU64>,
    /// What this thread rehearses while the adapter keeps warm, until
    /// when ([`Tuning::keep_warm`]).
    rehearsal: Option<Rehearsal>,
    /// Set when this slot's worker serves one session.
    session: Option<SlotSession>,
}

/// A session's slot: one worker process, started once; once it is gone
/// (killed at a deadline, dead) the session is over.
struct SlotSession {
    spec: crate::session::SessionSpec,
    /// A worker was started for the session (or another slot took it).
    started: bool,
}

impl Slot {
    fn spawn(&mut self) -> Result<Proc, String> {
        if let Some(s) = &mut self.session {
            if s.started {
                return Err("the session ended: its worker process was killed or died".to_owned());
            }
            s.started = true;
        }
        let p = Proc::spawn(&self.opts)?;
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(p)
    }

    fn take(&mut self) -> Result<Proc, String> {
        match self.proc.take() {
            Some(p) if p.alive() => Ok(p),
            Some(_) => {
                // The prepared worker died while idle.
                metrics::counter!("worker_restarts_total", "engine" => self.opts.engine.clone())
                    .increment(1);
                self.spawn()
            }
            None => self.spawn(),
        }
    }

    /// Starts the next worker while nobody waits for it.
    fn prewarm(&mut self) {
        if self.proc.is_none() && self.session.is_none() {
            self.proc = self.spawn().ok();
        }
    }

    /// Runs `request` on this thread's worker; `linger`: the worker polls
    /// for its next frame for a while after it ([`super::WORKER_LINGER`]).
    fn execute(
        &mut self,
        request: ExecutionRequest,
        tokio: &tokio::runtime::Handle,
        linger: bool,
        respond: impl FnOnce(ExecutionReport),
    ) {
        let mut proc = match self.take() {
            Ok(p) => p,
            Err(e) => {
                respond(ExecutionReport::failed(
                    &self.opts.engine,
                    ScriptError::internal(e),
                ));
                return;
            }
        };
        proc.linger = linger;
        let mut engine = RemoteEngine::new(proc);
        engine.session = self.session.as_ref().map(|s| s.spec.clone());
        // Counted in flight until the report is ready, not through the
        // worker's tidying up (super::may_spin).
        let in_flight = super::remote_run();
        let out = run_script(&mut engine, &self.opts.engine, request, tokio);
        drop(in_flight);
        respond(out.report);
        self.keep_worker(engine);
        if self.session.is_some() {
            // A session's worker is never recycled, nor replaced.
            return;
        }
        if let Some(p) = &mut self.proc {
            p.runs = p.runs.saturating_add(1);
            if self
                .opts
                .max_runs_per_worker
                .is_some_and(|max| p.runs >= max)
            {
                // Dropping it kills and reaps it; a fresh one follows.
                self.proc = None;
                metrics::counter!("worker_restarts_total", "engine" => self.opts.engine.clone())
                    .increment(1);
            }
        }
        self.prewarm();
    }

    /// Whether a rehearsal is due ([`ThreadPool::with_rehearsal`]).
    fn rehearsal_due(&mut self) -> bool {
        Rehearsal::due(&mut self.rehearsal)
    }

    /// Whether there is a rehearsal to run ahead of an anticipated run
    /// ([`ThreadPool::with_anticipation`]).
    fn rehearsal_ready(&mut self) -> bool {
        Rehearsal::ready(&mut self.rehearsal)
    }

    /// A rehearsal ahead of an anticipated run: the worker lingers after
    /// it (where the CPUs allow, as when kept awake), polling for the run
    /// that is due shortly instead of halting its CPU; the pool then lets
    /// the host thread poll for the run too where it has a CPU for it
    /// (`pool::anticipation_fits`: 2 CPUs with no run in flight), so that
    /// the run does not wait for the host thread's wake-up.
    fn rehearse_ahead(&mut self) {
        self.rehearse_lingering(true);
    }

    /// Drops the rehearsal plan: the host thread sleeps until its next
    /// run.
    fn forget_rehearsal(&mut self) {
        self.rehearsal = None;
    }

    /// Runs a rehearsal through this thread's worker, when one is due and
    /// the worker is there and alive: a run like any other on both sides
    /// of the boundary (the host's event loop, the frames, the worker's
    /// engine and its tidy-up), whose report nobody hears of. It is not
    /// counted against `max_runs_per_worker`. A worker that dies in it is
    /// replaced, as after a run.
    fn rehearse(&mut self) {
        let awake = self.rehearsal.as_ref().is_some_and(Rehearsal::awake);
        self.rehearse_lingering(awake);
    }

    /// [`Slot::rehearse`]; `linger`: the worker polls for its next frame
    /// after it.
    fn rehearse_lingering(&mut self, linger: bool) {
        let mut proc = match self.proc.take() {
            Some(p) if p.alive() => p,
            idle => {
                // None started, or dead: the next run replaces it (and
                // counts the restart); no rehearsal until then.
                self.proc = idle;
                self.rehearsal = None;
                return;
            }
        };
        let engine = &self.opts.engine;
        let Some((request, tokio)) = self.rehearsal.as_ref().map(|p| p.next(engine)) else {
            self.proc = Some(proc);
            return;
        };
        proc.linger = linger;
        let mut engine = RemoteEngine::new(proc);
        let in_flight = super::remote_run();
        crate::event_loop::rehearse(&mut engine, &self.opts.engine, request, &tokio);
        drop(in_flight);
        self.keep_worker(engine);
        self.prewarm();
    }

    /// Keeps the worker of a finished run (or rehearsal) for the next,
    /// once it is ready; one killed (deadline, cancel) or dead is counted
    /// as a restart, and a fresh one will replace it.
    fn keep_worker(&mut self, engine: RemoteEngine) {
        self.proc = engine.into_reusable(self.opts.start_timeout);
        if self.proc.is_none() {
            metrics::counter!("worker_restarts_total", "engine" => self.opts.engine.clone())
                .increment(1);
            tracing::info!(engine = %self.opts.engine, "worker process replaced after a kill or death");
        }
    }

    /// One request/answer exchange outside a run (check, global eval); the
    /// worker is killed if it takes longer than `limit`.
    fn ask(&mut self, msg: ToWorker, limit: Duration) -> Result<FromWorker, Asked> {
        let mut proc = self.take().map_err(Asked::Failed)?;
        let _watch = crate::watchdog::watch(
            Instant::now() + limit,
            CancellationToken::new(),
            proc.killer(),
        );
        let answer = proc.send(&msg).and_then(|()| proc.recv());
        match answer {
            Ok(a) => {
                self.proc = Some(proc);
                Ok(a)
            }
            Err(_) if proc.killed.load(Ordering::SeqCst) => Err(Asked::TimedOut),
            Err(e) => Err(Asked::Failed(format!(
                "the worker failed ({e}; {})",
                proc.death_note()
            ))),
        }
    }
}

/// Why [`Slot::ask`] got no answer.
#[derive(Debug)]
enum Asked {
    TimedOut,
    Failed(String),
}

/// Runs scripts of one engine in worker processes, one run per process at
/// a time, killed (SIGKILL) on deadline or cancel and replaced for the next
/// run. Tools, approvals and the tracker stay in the host.
#[derive(Debug, Clone)]
pub struct ProcessAdapter {
    info: EngineInfo,
    opts: Arc<ProcessOptions>,
    pool: Arc<ThreadPool<Slot>>,
    started: Arc<AtomicU64>,
    /// Whether host threads rehearse through their workers after each
    /// run ([`Tunable::tune`]); shared by clones.
    keep_warm: KeepWarm,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("warm", &self.proc.is_some())
            .finish()
    }
}

impl ProcessAdapter {
    /// `engine` is the in-process adapter's own description (name, version,
    /// capabilities); behind the boundary every engine can be stopped and
    /// held to its memory limit.
    pub fn new(engine: EngineInfo, opts: ProcessOptions) -> Self {
        Self::build(engine, opts, false)
    }

    /// [`ProcessAdapter::new`]; `long_private_tidy_up` as the engine's
    /// descriptor says ([`EngineDescriptor::with_long_private_tidy_up`]).
    fn build(engine: EngineInfo, opts: ProcessOptions, long_private_tidy_up: bool) -> Self {
        let opts = Arc::new(opts);
        let factory_opts = opts.clone();
        let started = Arc::new(AtomicU64::new(0));
        let factory_started = started.clone();
        let info = behind_the_boundary(engine);
        let keep_warm = KeepWarm::anticipating();
        ProcessAdapter {
            info,
            pool: Arc::new(
                ThreadPool::new(
                    &format!("harness-{}-process", opts.engine),
                    opts.max_workers,
                    HOST_THREAD_STACK_BYTES,
                    move || Slot {
                        opts: factory_opts.clone(),
                        proc: None,
                        started: factory_started.clone(),
                        rehearsal: None,
                        session: None,
                    },
                )
                .with_rehearsal(Slot::rehearsal_due, Slot::rehearse, keep_warm.awake_flag())
                .with_anticipation(
                    Slot::rehearsal_ready,
                    Slot::rehearse_ahead,
                    Slot::forget_rehearsal,
                    keep_warm.anticipate_flag(),
                )
                // The host thread and its worker process.
                .with_cpus_per_run(2)
                .with_long_private_tidy_up(long_private_tidy_up),
            ),
            opts,
            started,
            keep_warm,
        }
    }

    /// Workers serving `engine`, after its process set-up hook has run on
    /// `opts` (see [`EngineDescriptor::with_process_setup`]).
    pub fn for_engine(engine: &EngineDescriptor, mut opts: ProcessOptions) -> Self {
        engine.prepare_process(&mut opts);
        Self::build(engine.info(), opts, engine.long_private_tidy_up)
    }

    /// One session's engine behind the boundary: one host thread and one
    /// worker process, told to serve that session alone
    /// (`EngineThread::begin_session`), never recycled, never rehearsing;
    /// once its worker is killed (a deadline) or dies, every later run is
    /// refused. `None` where the engine has no sessions.
    pub fn for_session(
        engine: &EngineDescriptor,
        mut opts: ProcessOptions,
        spec: crate::session::SessionSpec,
    ) -> Option<Self> {
        if !engine.has_sessions() {
            return None;
        }
        engine.prepare_process(&mut opts);
        opts.max_workers = 1;
        opts.max_runs_per_worker = None;
        opts.session_memory_bytes = Some(spec.memory_bytes);
        let opts = Arc::new(opts);
        let factory_opts = opts.clone();
        let started = Arc::new(AtomicU64::new(0));
        let factory_started = started.clone();
        Some(ProcessAdapter {
            info: behind_the_boundary(engine.info()),
            pool: Arc::new(ThreadPool::new(
                &format!("harness-{}-session", opts.engine),
                1,
                HOST_THREAD_STACK_BYTES,
                move || Slot {
                    opts: factory_opts.clone(),
                    proc: None,
                    started: factory_started.clone(),
                    rehearsal: None,
                    session: Some(SlotSession {
                        spec: spec.clone(),
                        // A second slot (one replaced a stuck run's) finds
                        // the session taken and starts nothing.
                        started: !spec.claim(),
                    }),
                },
            )),
            opts,
            started,
            keep_warm: KeepWarm::default(),
        })
    }

    /// Worker processes started so far (the first ones, replacements after
    /// kills and deaths, and recycling after `max_runs_per_worker`).
    pub fn workers_started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Starts `n` workers now, so that the first runs find them warm.
    pub fn prewarm(&self, n: usize) {
        for _ in 0..n.min(self.opts.max_workers) {
            let _ = self.pool.submit(Slot::prewarm);
        }
    }
}

/// What an engine can do behind the boundary: every engine can be
/// stopped and held to its memory limit there.
fn behind_the_boundary(engine: EngineInfo) -> EngineInfo {
    EngineInfo {
        capabilities: Capabilities {
            interrupt: true,
            memory_limit: true,
            hard_kill: true,
            // A worker that overflows its stack dies alone, and the
            // host reports StackOverflowError.
            stack_guard: true,
            ..engine.capabilities
        },
        isolation: Isolation::Process,
        ..engine
    }
}

/// Tuned behind the boundary. Kept warm, the host thread rehearses a
/// trivial run through its worker process about every 0.8 ms while no run
/// comes (both sides' caches, and the worker's prepared context, stay
/// warm). Kept awake, the worker process polls for its next frame after
/// each run and rehearsal (`process::WORKER_LINGER`) on 2 or more CPUs
/// (one for it, one for its host thread and the caller), while a single
/// run is in flight; the host thread polls between rehearsals as well
/// only on a machine with CPUs for a run's two sides and its caller
/// besides that poller's (the pool decides, `can_stay_awake`: on 2, a
/// host-side poller held up the worker process). Anticipating, the host
/// thread rehearses through its worker process ahead of a run due
/// shortly, and the worker then polls for it on 2 CPUs or more; the host
/// thread polls as well while no other run is in flight there (the
/// anticipation window is short, unlike a keep-awake window).
impl Tunable for ProcessAdapter {
    fn tune(&self, tuning: Tuning) -> Tuned {
        self.keep_warm.tune(tuning, crate::spin::cores() >= 2)
    }

    fn rehearsals(&self) -> u64 {
        self.keep_warm.rehearsals()
    }
}

#[async_trait]
impl ScriptRuntimeAdapter for ProcessAdapter {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        crate::body::Body::parse(source)?;
        let msg = ToWorker::Check {
            source: source.to_owned(),
        };
        let limit = self.opts.start_timeout;
        match self.pool.ask(move |s| s.ask(msg, limit)).await? {
            Ok(FromWorker::Checked { error: None }) => Ok(()),
            Ok(FromWorker::Checked { error: Some(e) }) => Err(e),
            Ok(other) => Err(ScriptError::internal(format!(
                "the worker answered a check with {other:?}"
            ))),
            Err(Asked::TimedOut) => Err(ScriptError::internal("the worker took too long to parse")),
            Err(Asked::Failed(e)) => Err(ScriptError::internal(e)),
        }
    }

    async fn execute(&self, mut request: ExecutionRequest) -> ExecutionReport {
        // Where it runs, for the run's span.
        request.limits.isolation = Some(crate::limits::Isolation::Process);
        // Kept warm: nothing is cloned for a run of an adapter that is not.
        let warm = self.keep_warm.for_run(self.pool.steady());
        self.pool
            .execute(
                &self.opts.engine,
                request,
                move |s, request, tokio, reply| {
                    // Kept awake: the worker polls between rehearsals.
                    let linger = warm.as_ref().is_some_and(KeepWarm::awake);
                    let rehearsal = warm.map(|warm| Rehearsal::after(&request, warm, tokio));
                    s.execute(request, tokio, linger, |report| reply.send(report));
                    s.rehearsal = rehearsal.map(Rehearsal::starting_now);
                },
            )
            .await
    }

    async fn eval_global(&self, eval: GlobalEval) -> GlobalEvalOutcome {
        // The worker's engine may not stop itself: kill it at the deadline.
        let limit = Duration::from_millis(eval.timeout_ms.saturating_add(100));
        match self
            .pool
            .ask(move |s| s.ask(ToWorker::EvalGlobal { eval }, limit))
            .await
        {
            Ok(Ok(FromWorker::Global { outcome })) => outcome,
            Ok(Ok(other)) => GlobalEvalOutcome::Unsupported(format!("unexpected answer {other:?}")),
            Ok(Err(Asked::TimedOut)) => GlobalEvalOutcome::TimedOut { prints: Vec::new() },
            Ok(Err(Asked::Failed(e))) => GlobalEvalOutcome::Unsupported(e),
            Err(e) => GlobalEvalOutcome::Unsupported(e.message),
        }
    }
}
