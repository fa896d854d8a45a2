//! Engine threads for engines that are not `Send`.
//!
//! Each worker owns its engine state (created on the thread by a factory)
//! and runs jobs one at a time. Idle workers wait on their own channel in a
//! LIFO stack: a job goes to the most recently idle worker (its caches and
//! pre-built state are warmest) and wakes exactly one thread. With no idle
//! worker the pool starts a new one, up to its maximum; past that, jobs
//! wait in a backlog that workers drain before going idle. Idling and
//! queueing happen under one lock, so a job is never stranded.
//!
//! One exception to "the most recently idle worker": a run sent while a
//! worker tidies up after answering the last run (back to back) queues for
//! that worker, while every busy worker has a CPU. It is idle again within
//! microseconds as a rule, with the warmest caches (and, behind the process
//! boundary, a warm worker process), and it takes the run without a
//! hand-off; handing the run to another worker made sequential runs
//! alternate between threads. Except after a run in a private realm: that worker's
//! tidy-up collects a whole realm and makes the next one (hundreds of µs
//! or more), so the next run goes to an idle worker (or a new one while a
//! CPU is free) and the tidy-up overlaps it; with every CPU busy it waits
//! for the first worker done, not for a new thread.
//!
//! A pool may also *rehearse* ([`ThreadPool::with_rehearsal`]): for a
//! while after a run, an idle worker wakes about every
//! [`REHEARSAL_PERIOD`] to do a small fixed piece of work (an engine pool
//! runs a trivial script), so that a run arriving a few milliseconds
//! later finds the code and data it needs in the caches. Only while the
//! engine asks for it (`keep_warm`), since each rehearsal costs CPU.
//! Asked to keep *awake* as well, one such worker at a time (the one that
//! holds the pool's spinning flag) polls its channel between rehearsals,
//! yielding, instead of sleeping, and rehearses more often
//! ([`AWAKE_REHEARSAL_PERIOD`]): its CPU never halts in the window, which
//! on a VM is what costs a run after a pause most, and a caller waits awake for its
//! answer. Only while the machine has CPUs for it: the busy workers' runs
//! and the next one ([`ThreadPool::with_cpus_per_run`] each) and a caller
//! besides. A poller on a CPU that a run needs holds it up: it yields,
//! but the scheduler may leave it running for hundreds of microseconds
//! while the run waits (behind the process boundary on 2 CPUs, kept awake
//! took the median down but the 90th percentile from 0.37 to 1 ms).
//!
//! And a pool may *anticipate* ([`ThreadPool::with_anticipation`]): it
//! notes the pauses between going idle and its next run, and while the
//! last few agree (runs at a steady pace), the worker that went idle last
//! sleeps until shortly before the next run is due, rehearses, and polls
//! for it until shortly after (`crate::anticipate`): the latency of
//! keeping awake for the CPU of a short stretch per pause, and nothing for
//! lone or irregular runs.

use crate::adapter::{CancelOnDrop, ExecutionRequest};
use crate::error::ScriptError;
use crate::report::ExecutionReport;
use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};

mod idle;

pub(crate) use idle::REHEARSAL_PERIOD;
use idle::*;

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;
type Factory<S> = Arc<dyn Fn() -> S + Send + Sync>;

struct State<S> {
    /// Senders of idle workers; the last is the most recently idle.
    idle: Vec<mpsc::Sender<Job<S>>>,
    backlog: VecDeque<Job<S>>,
    threads: usize,
    /// The pool was dropped: workers exit instead of idling.
    closed: bool,
    /// The pauses between the pool going idle and its next run
    /// ([`ThreadPool::with_anticipation`]).
    arrivals: crate::anticipate::Arrivals,
}

struct Shared<S> {
    state: Mutex<State<S>>,
    max_threads: usize,
    stack_size: usize,
    name: String,
    factory: Factory<S>,
    /// Whether a worker is spinning for its next job (at most one is).
    spinning: std::sync::atomic::AtomicBool,
    /// Runs in a private realm tidy up long
    /// ([`ThreadPool::with_long_private_tidy_up`]).
    private_tidy_long: bool,
    /// Workers that have answered their run's caller ([`Reply::send`]) and
    /// are tidying up.
    finishing: Arc<Finishing>,
    /// The CPUs this process may use.
    cores: usize,
    /// The CPUs one run keeps busy: 1 in process, 2 behind the process
    /// boundary (the host thread and its worker process).
    cpus_per_run: usize,
    /// Work for a worker's state when it finds no job waiting
    /// ([`ThreadPool::with_idle`]).
    idle: Option<fn(&mut S)>,
    /// Whether a rehearsal is due on this thread now, and the rehearsal
    /// itself ([`ThreadPool::with_rehearsal`]).
    rehearsal: Option<Rehearsal<S>>,
    /// How long runs have been taking from submission to answer, in µs
    /// (a moving average; 0 before the first): how long a caller may
    /// wait awake for its answer ([`answer_budget`]).
    answer_us: std::sync::atomic::AtomicU64,
    /// Anticipating the next run ([`ThreadPool::with_anticipation`]).
    anticipation: Option<Anticipation<S>>,
    /// Whether the last pause was anticipated: runs have been coming at a
    /// steady pace ([`ThreadPool::steady`]).
    steady: std::sync::atomic::AtomicBool,
}

impl<S> Shared<S> {
    /// The pool's anticipation, while it is turned on: only then does it
    /// note pauses (a clock read under the lock per run).
    fn anticipating(&self) -> Option<&Anticipation<S>> {
        self.anticipation
            .as_ref()
            .filter(|a| a.on.load(std::sync::atomic::Ordering::Relaxed))
    }
}

struct Anticipation<S> {
    /// Whether the worker's state has a rehearsal to run.
    ready: fn(&mut S) -> bool,
    /// The rehearsal to run on waking.
    rehearse: fn(&mut S),
    /// Drops the state's rehearsal plan (a copy of the last run's tools
    /// and context) before the worker sleeps until its next job, which
    /// brings a plan of its own.
    forget: fn(&mut S),
    /// Whether the pool anticipates at all (the engine's setting).
    on: Arc<std::sync::atomic::AtomicBool>,
}

/// Workers tidying up after answering ([`Reply::send`]), counted until
/// they next look for work.
#[derive(Debug, Default)]
struct Finishing {
    /// All of them.
    all: std::sync::atomic::AtomicUsize,
    /// Those whose run was in a private realm: their tidy-up collects a
    /// whole set of intrinsics and makes the next realm (hundreds of µs
    /// on QuickJS, milliseconds on Boa), so the next run does not queue
    /// for them while another worker is idle (module docs).
    long: std::sync::atomic::AtomicUsize,
}

impl Finishing {
    fn count(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        let long = self.long.load(Ordering::Acquire);
        (self.all.load(Ordering::Acquire).saturating_sub(long), long)
    }
}

/// A growable pool of threads, each holding one `S`.
pub(crate) struct ThreadPool<S: 'static> {
    shared: Arc<Shared<S>>,
}

impl<S> fmt::Debug for ThreadPool<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPool")
            .field("name", &self.shared.name)
            .field("threads", &self.threads())
            .field("max_threads", &self.shared.max_threads)
            .finish()
    }
}

impl<S: 'static> ThreadPool<S> {
    /// A pool whose threads have `stack_size` bytes of stack and build their
    /// state with `factory`.
    pub(crate) fn new(
        name: &str,
        max_threads: usize,
        stack_size: usize,
        factory: impl Fn() -> S + Send + Sync + 'static,
    ) -> Self {
        ThreadPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    idle: Vec::new(),
                    backlog: VecDeque::new(),
                    threads: 0,
                    closed: false,
                    arrivals: crate::anticipate::Arrivals::default(),
                }),
                max_threads: max_threads.max(1),
                stack_size,
                name: name.to_owned(),
                factory: Arc::new(factory),
                spinning: std::sync::atomic::AtomicBool::new(false),
                private_tidy_long: false,
                finishing: Arc::default(),
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                cpus_per_run: 1,
                idle: None,
                rehearsal: None,
                answer_us: std::sync::atomic::AtomicU64::new(0),
                anticipation: None,
                steady: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Anticipates the next run while `on` is set and runs come at a
    /// steady pace (`crate::anticipate`): the worker that went idle last
    /// sleeps until shortly before the next run is due, then (when
    /// `ready` says its state has a rehearsal) calls `rehearse` once and
    /// polls for the run, holding the spinning flag, until shortly after
    /// it was due at the latest. It polls only while the machine has a
    /// CPU for it besides the busy runs' ([`anticipation_fits`]: behind
    /// the process boundary, where a run keeps two CPUs busy, that is 2
    /// CPUs with no run in flight); otherwise it rehearses once and
    /// sleeps. Needs
    /// [`ThreadPool::with_rehearsal`]; unless kept awake, anticipation
    /// comes before the keep-warm window's rehearsals. `forget` drops the
    /// state's plan whenever the worker sleeps with no rehearsal to come,
    /// so that no copy of a run's request outlives its use.
    pub(crate) fn with_anticipation(
        mut self,
        ready: fn(&mut S) -> bool,
        rehearse: fn(&mut S),
        forget: fn(&mut S),
        on: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.anticipation = Some(Anticipation {
                ready,
                rehearse,
                forget,
                on,
            });
        }
        self
    }

    /// Whether runs have been coming at a steady pace, so that the worker
    /// that runs the next one will anticipate the one after it: the time
    /// to keep what a rehearsal needs.
    pub(crate) fn steady(&self) -> bool {
        self.shared
            .steady
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Calls `idle` on a worker's state each time the worker runs out of
    /// jobs (after its spin for the next one, if it spun), before it
    /// sleeps: work that would otherwise delay a run. A job sent meanwhile
    /// waits for `idle` to return. A panic in `idle` rebuilds the state.
    pub(crate) fn with_idle(mut self, idle: fn(&mut S)) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.idle = Some(idle);
        }
        self
    }

    /// Rehearses while idle: after `idle`, as long as `due` says a
    /// rehearsal is due on this thread (for this state), the worker waits
    /// for a job at most [`REHEARSAL_PERIOD`] at a time and calls
    /// `rehearse` each time none came. `due` is asked first, so that a
    /// pool with nothing to rehearse sleeps at once as before. A panic in
    /// `rehearse` rebuilds the state. While `awake` is set, one worker at
    /// a time polls between rehearsals instead of sleeping, and rehearses
    /// every [`AWAKE_REHEARSAL_PERIOD`] (module docs).
    pub(crate) fn with_rehearsal(
        mut self,
        due: fn(&mut S) -> bool,
        rehearse: fn(&mut S),
        awake: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.rehearsal = Some(Rehearsal {
                due,
                rehearse,
                awake,
            });
        }
        self
    }

    /// Each run keeps `cpus` CPUs busy (default 1; 2 behind the process
    /// boundary, where the host thread waits on its worker process): a
    /// worker stays awake between rehearsals only while the machine has
    /// CPUs for the busy runs and the next one, and one for a caller.
    pub(crate) fn with_cpus_per_run(mut self, cpus: usize) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.cpus_per_run = cpus.max(1);
        }
        self
    }

    /// Whether this machine has CPUs for a worker that stays awake
    /// between rehearsals, beside no other busy one
    /// ([`ThreadPool::with_cpus_per_run`]).
    pub(crate) fn can_stay_awake(&self) -> bool {
        awake_fits(&self.shared, 0)
    }

    /// As if this machine had `cores` CPUs.
    #[cfg(test)]
    fn with_cores(mut self, cores: usize) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.cores = cores;
        }
        self
    }

    /// For engines whose runs in a private realm leave long work after
    /// their answer (`EngineDescriptor::with_long_private_tidy_up`): the
    /// next run does not queue for such a worker (module docs).
    pub(crate) fn with_long_private_tidy_up(mut self, long: bool) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.private_tidy_long = long;
        }
        self
    }

    /// Threads started so far.
    pub(crate) fn threads(&self) -> usize {
        self.shared.state.lock().map(|s| s.threads).unwrap_or(0)
    }

    /// Runs `job` on a worker. A panicking job is contained: the worker
    /// rebuilds its state and carries on. Returns an error only if no
    /// engine thread could be started.
    pub(crate) fn submit(&self, job: impl FnOnce(&mut S) + Send + 'static) -> Result<(), String> {
        self.place(Box::new(job)).map(|_| ())
    }

    /// [`ThreadPool::submit`], saying whether the job queued for a worker
    /// that is tidying up after answering (module docs).
    fn place(&self, mut job: Job<S>) -> Result<bool, String> {
        let mut first = true;
        loop {
            let mut state = self
                .shared
                .state
                .lock()
                .map_err(|_| "worker pool poisoned".to_owned())?;
            let busy = state.threads - state.idle.len();
            if std::mem::take(&mut first) && self.shared.anticipating().is_some() {
                state.arrivals.arrived(std::time::Instant::now(), busy);
            }
            let (short, long) = self.shared.finishing.count();
            if busy < self.shared.cores && state.backlog.len() < short {
                state.backlog.push_back(job);
                return Ok(true);
            }
            if let Some(worker) = state.idle.pop() {
                drop(state);
                match worker.send(job) {
                    Ok(()) => return Ok(false),
                    // That worker is gone; try the next one.
                    Err(mpsc::SendError(j)) => {
                        job = j;
                        continue;
                    }
                }
            }
            // Every CPU is busy and a worker will be free after its long
            // tidy-up: a new thread would only share a CPU with it (and
            // hold an engine of its own), so the run waits for it.
            let wait_for_long = busy >= self.shared.cores && state.backlog.len() < long;
            if state.threads < self.shared.max_threads && !wait_for_long {
                state.threads += 1;
                drop(state);
                return spawn(&self.shared, job)
                    .inspect_err(|_| {
                        if let Ok(mut s) = self.shared.state.lock() {
                            s.threads -= 1;
                        }
                    })
                    .map(|()| false);
            }
            state.backlog.push_back(job);
            return Ok(false);
        }
    }
}

/// Hands a run's report back to the caller of [`ThreadPool::execute`] as
/// soon as it is ready (before the worker tidies up).
#[derive(Debug)]
pub(crate) struct Reply {
    tx: tokio::sync::oneshot::Sender<ExecutionReport>,
    /// The pool's count of workers tidying up after answering.
    finishing: Arc<Finishing>,
    /// The run was in a private realm: its tidy-up takes long.
    long: bool,
}

thread_local! {
    /// This engine thread's job has answered its caller ([`Reply::send`])
    /// and is counted in `Shared::finishing` until the thread next looks
    /// for work: `Some(long)`, as counted.
    static ANSWERED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

impl Reply {
    pub(crate) fn send(self, report: ExecutionReport) {
        use std::sync::atomic::Ordering;
        if ANSWERED.get().is_none() {
            // `all` up first and down last, so that `long <= all` holds
            // (a reader may still load the two at different moments:
            // `Finishing::count` saturates).
            self.finishing.all.fetch_add(1, Ordering::AcqRel);
            if self.long {
                self.finishing.long.fetch_add(1, Ordering::AcqRel);
            }
            ANSWERED.set(Some(self.long));
        }
        let _ = self.tx.send(report);
    }
}

impl<S: 'static> ThreadPool<S> {
    fn stopped(&self) -> String {
        format!(
            "the {} worker stopped before answering (engine panic)",
            self.shared.name
        )
    }

    /// Runs `job` on a worker and waits for its answer.
    pub(crate) async fn ask<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, ScriptError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(move |s| {
            let _ = tx.send(job(s));
        })
        .map_err(ScriptError::internal)?;
        rx.await.map_err(|_| ScriptError::internal(self.stopped()))
    }

    /// Runs one script on a worker: `run` gets the worker's state, the
    /// request, the caller's tokio runtime (for tool calls) and the
    /// [`Reply`] to send the report with. Dropping the returned future
    /// cancels the run. `engine` names the engine in failure reports.
    pub(crate) async fn execute(
        &self,
        engine: &str,
        request: ExecutionRequest,
        run: impl FnOnce(&mut S, ExecutionRequest, &tokio::runtime::Handle, Reply) + Send + 'static,
    ) -> ExecutionReport {
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            return ExecutionReport::failed(
                engine,
                ScriptError::internal("execute must be called from within a tokio runtime"),
            );
        };
        let mut guard = CancelOnDrop::new(request.cancel.clone());
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        // A worker spinning for its next job, or tidying up after the last
        // one, takes this one at once, on a CPU that is awake: then the
        // answer of a short run comes back within microseconds, and
        // waiting for it awake (`answer_soon`) spares this thread a
        // wake-up. Behind the process boundary too: there the caller
        // shares a CPU with the host thread as a rule (the worker process
        // has the other), and yielding between polls hands it over sooner
        // than parking.
        let hot = self
            .shared
            .spinning
            .load(std::sync::atomic::Ordering::Acquire);
        let finishing = self.shared.finishing.clone();
        let long = self.shared.private_tidy_long && request.limits.private_realm();
        let submitted_at = std::time::Instant::now();
        // A run that outlives its deadline and grace inside the engine (a
        // native loop over 2**32 array slots in QuickJS checks for no
        // interrupt) is answered then, and its worker retired: see
        // `retire`. Armed by the run's own deadline watch
        // ([`take_at_deadline`]), so that a run that ends in time costs
        // nothing more; a watchdog timer, so that no tokio timer is needed.
        let grace = request.limits.orphan_grace().saturating_add(STUCK_SLACK);
        let timeout_ms = request.limits.timeout_ms;
        let caller_polls = request.caller_polls;
        let (stuck_tx, mut stuck_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = self.shared.clone();
        let submitted = self.place(Box::new(move |s| {
            let race = Arc::new(std::sync::atomic::AtomicU8::new(RUNNING));
            let watched = race.clone();
            AT_DEADLINE.with(|h| {
                *h.borrow_mut() = Some(Box::new(move || {
                    if let Some(at) = std::time::Instant::now().checked_add(grace) {
                        // Registered for good: it fires once, then is gone.
                        std::mem::forget(crate::watchdog::watch(
                            at,
                            tokio_util::sync::CancellationToken::new(),
                            move || retire(&shared, &watched, stuck_tx),
                        ));
                    }
                }));
            });
            let reply = Reply {
                tx,
                finishing,
                long,
            };
            run(s, request, &tokio, reply);
            AT_DEADLINE.with(|h| h.borrow_mut().take());
            let ended = race.compare_exchange(
                RUNNING,
                ENDED,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
            );
            if ended.is_err() {
                RETIRED.with(|r| r.set(true));
            }
        }));
        let report = match submitted {
            Err(e) => ExecutionReport::failed(engine, ScriptError::internal(e)),
            Ok(behind) => {
                let awake = (hot || behind) && !caller_polls;
                let soon = if awake {
                    answer_soon(&mut rx, answer_budget(&self.shared.answer_us))
                } else {
                    Soon::Later
                };
                let answer = match soon {
                    Soon::Answer(report) => Some(report),
                    Soon::Closed => None,
                    Soon::Later => tokio::select! {
                        answer = &mut rx => answer.ok(),
                        Ok(()) = &mut stuck_rx => Some(stuck_report(engine, timeout_ms)),
                    },
                };
                let answer = answer.unwrap_or_else(|| {
                    ExecutionReport::failed(engine, ScriptError::internal(self.stopped()))
                });
                note_answer(&self.shared.answer_us, submitted_at.elapsed());
                answer
            }
        };
        guard.disarm();
        report
    }
}

thread_local! {
    /// What the job running on this thread arranges for when its run's
    /// deadline passes or it is cancelled ([`ThreadPool::execute`]).
    static AT_DEADLINE: std::cell::RefCell<Option<Box<dyn FnOnce() + Send>>> = const { std::cell::RefCell::new(None) };
}

/// For the run starting on this thread: what to call, from the watchdog,
/// when its deadline passes or it is cancelled (the event loop's watch).
pub(crate) fn take_at_deadline() -> Option<Box<dyn FnOnce() + Send>> {
    AT_DEADLINE.with(|h| h.borrow_mut().take())
}

/// How long past its deadline and orphan grace a run may take to answer
/// before its worker is taken for stuck inside the engine.
const STUCK_SLACK: std::time::Duration = std::time::Duration::from_millis(500);

/// From the watchdog thread: the run is past its deadline and grace and
/// has not ended. Unless it ended meanwhile, its worker is counted gone
/// (a new one may take its place, and the backlog), it leaves when the
/// engine returns, and the caller is told to answer ScriptTimeoutError.
fn retire<S: 'static>(
    shared: &Arc<Shared<S>>,
    race: &std::sync::atomic::AtomicU8,
    stuck: tokio::sync::oneshot::Sender<()>,
) {
    use std::sync::atomic::Ordering;
    if race
        .compare_exchange(RUNNING, STUCK, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    tracing::warn!(pool = %shared.name, "a run did not stop at its deadline inside the engine; its engine thread is retired");
    metrics::counter!("worker_threads_retired_total", "pool" => shared.name.clone()).increment(1);
    give_up_place(shared);
    let _ = stuck.send(());
}

/// The answer for a run whose worker was retired ([`retire`]).
fn stuck_report(engine: &str, timeout_ms: u64) -> ExecutionReport {
    ExecutionReport::failed(
        engine,
        ScriptError::new(
            crate::error::ErrorCode::ScriptTimeoutError,
            crate::error::Phase::Executing,
            format!(
                "script exceeded its time limit of {timeout_ms} ms (stopped inside a long engine operation)"
            ),
        ),
    )
}

impl<S> Drop for ThreadPool<S> {
    /// Idle workers wake (their channels close) and exit; busy ones exit
    /// after their job. Queued jobs are dropped, which their submitters see
    /// as a closed reply channel.
    fn drop(&mut self) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.closed = true;
            s.idle.clear();
            s.backlog.clear();
        }
    }
}

fn spawn<S: 'static>(shared: &Arc<Shared<S>>, first: Job<S>) -> Result<(), String> {
    let shared = shared.clone();
    let n = shared.state.lock().map(|s| s.threads).unwrap_or(0);
    std::thread::Builder::new()
        .name(format!("{}-{n}", shared.name))
        .stack_size(shared.stack_size)
        .spawn(move || work(&shared, first))
        .map(|_| ())
        .map_err(|e| format!("could not start an engine thread: {e}"))
}

/// Keeps the pool's books when an engine thread ends, however it ends: the
/// pool closing, or a panic outside a job's `catch_unwind` (the state's
/// factory, rebuilding after a job panicked) or a poisoned lock. The
/// thread is no longer counted in `threads` (else a pool at its maximum
/// would queue every later run for a thread that is gone, and they would
/// never run), nor as tidying up (else runs would keep queueing for it);
/// and if runs are queued and the pool is open, a new thread takes them.
struct Leaving<'a, S: 'static>(&'a Arc<Shared<S>>);

thread_local! {
    /// Set on a worker whose run outlived its deadline inside the engine
    /// ([`ThreadPool::execute`]): the pool counted it gone already, and it
    /// leaves once the run returns.
    static RETIRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn is_retired() -> bool {
    RETIRED.with(std::cell::Cell::get)
}

/// A run's race between its end and its retirement: whichever moves
/// [`RUNNING`] first wins.
const RUNNING: u8 = 0;
const ENDED: u8 = 1;
const STUCK: u8 = 2;

impl<S: 'static> Drop for Leaving<'_, S> {
    fn drop(&mut self) {
        let shared = self.0;
        finished_tidying(shared);
        if is_retired() {
            // Its place in the pool was given up when it was retired.
            return;
        }
        give_up_place(shared);
    }
}

/// A worker leaves the pool (it exits, or was retired): one thread fewer,
/// and a new one for the backlog if there is room.
fn give_up_place<S: 'static>(shared: &Arc<Shared<S>>) {
    let mut s = shared
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    s.threads = s.threads.saturating_sub(1);
    if s.closed || s.threads >= shared.max_threads {
        return;
    }
    if let Some(job) = s.backlog.pop_front() {
        s.threads += 1;
        drop(s);
        if spawn(shared, job).is_err() {
            // The job is dropped with its reply: its caller hears that
            // the worker stopped.
            let mut s = shared
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.threads = s.threads.saturating_sub(1);
        }
    }
}

/// This thread's answered job is done tidying up ([`ANSWERED`]).
fn finished_tidying<S>(shared: &Shared<S>) {
    if let Some(long) = ANSWERED.take() {
        use std::sync::atomic::Ordering;
        // `long` down first (see `Reply::send`).
        if long {
            shared.finishing.long.fetch_sub(1, Ordering::AcqRel);
        }
        shared.finishing.all.fetch_sub(1, Ordering::AcqRel);
    }
}

fn work<S: 'static>(shared: &Arc<Shared<S>>, first: Job<S>) {
    let _leaving = Leaving(shared);
    let mut state = (shared.factory)();
    let mut job = first;
    loop {
        if catch_unwind(AssertUnwindSafe(|| job(&mut state))).is_err() {
            state = (shared.factory)();
        }
        if is_retired() {
            return;
        }
        // Take queued work, or go idle on a fresh channel whose only sender
        // sits in the idle stack: when the pool closes, the stack is
        // cleared and `recv` fails, ending the thread.
        let (rx, busy, plan) = {
            let Ok(mut s) = shared.state.lock() else {
                return;
            };
            // Done tidying up: under the lock, so that a run queued for
            // this worker while it tidied is in the backlog it drains now.
            finished_tidying(shared);
            if s.closed {
                return;
            }
            if let Some(j) = s.backlog.pop_front() {
                job = j;
                continue;
            }
            let (tx, rx) = mpsc::channel::<Job<S>>();
            s.idle.push(tx);
            let busy = s.threads.saturating_sub(s.idle.len());
            // The last busy worker going idle: a pause begins, and this
            // worker (the top of the idle stack) takes the run that ends it.
            let plan = if busy == 0 && shared.anticipating().is_some() {
                s.arrivals.idle(std::time::Instant::now());
                let plan = s.arrivals.plan();
                shared
                    .steady
                    .store(plan.is_some(), std::sync::atomic::Ordering::Relaxed);
                plan
            } else {
                None
            };
            (rx, busy, plan)
        };
        match next_job(shared, &rx, busy, plan, &mut state) {
            Some(j) => job = j,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests;
