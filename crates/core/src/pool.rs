//! Worker threads for engines that are not `Send`.
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
//! alternate between threads (docs/performance.md, "The process boundary
//! back to back"). Except after a run in a private realm: that worker's
//! tidy-up collects a whole realm and makes the next one (hundreds of µs
//! or more), so the next run goes to an idle worker (or a new one while a
//! CPU is free) and the tidy-up overlaps it; with every CPU busy it waits
//! for the first worker done, not for a new thread.
//!
//! A pool may also *rehearse* ([`WorkerPool::with_rehearsal`]): for a
//! while after a run, an idle worker wakes about every
//! [`REHEARSAL_PERIOD`] to do a small fixed piece of work (an engine pool
//! runs a trivial script), so that a run arriving a few milliseconds
//! later finds the code and data it needs in the caches. Only while the
//! engine asks for it (`keep_warm`), since each rehearsal costs CPU.
//! Asked to keep *awake* as well, one such worker at a time (the one that
//! holds the pool's spinning flag) polls its channel between rehearsals,
//! yielding, instead of sleeping, and rehearses more often
//! ([`AWAKE_REHEARSAL_PERIOD`]): its CPU never halts in the window, which
//! on a VM is what costs a run after a pause most (docs/performance.md,
//! "Halting is what a pause costs"), and a caller waits awake for its
//! answer. Only while the machine has CPUs for it: the busy workers' runs
//! and the next one ([`WorkerPool::with_cpus_per_run`] each) and a caller
//! besides. A poller on a CPU that a run needs holds it up: it yields,
//! but the scheduler may leave it running for hundreds of microseconds
//! while the run waits (behind the process boundary on 2 CPUs, kept awake
//! took the median down but the 90th percentile from 0.37 to 1 ms).
//!
//! And a pool may *anticipate* ([`WorkerPool::with_anticipation`]): it
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
    /// ([`WorkerPool::with_anticipation`]).
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
    /// ([`WorkerPool::with_long_private_tidy_up`]).
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
    /// ([`WorkerPool::with_idle`]).
    idle: Option<fn(&mut S)>,
    /// Whether a rehearsal is due on this thread now, and the rehearsal
    /// itself ([`WorkerPool::with_rehearsal`]).
    rehearsal: Option<Rehearsal<S>>,
    /// How long runs have been taking from submission to answer, in µs
    /// (a moving average; 0 before the first): how long a caller may
    /// wait awake for its answer ([`answer_budget`]).
    answer_us: std::sync::atomic::AtomicU64,
    /// Anticipating the next run ([`WorkerPool::with_anticipation`]).
    anticipation: Option<Anticipation<S>>,
    /// Whether the last pause was anticipated: runs have been coming at a
    /// steady pace ([`WorkerPool::steady`]).
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
pub(crate) struct WorkerPool<S: 'static> {
    shared: Arc<Shared<S>>,
}

impl<S> fmt::Debug for WorkerPool<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerPool")
            .field("name", &self.shared.name)
            .field("threads", &self.threads())
            .field("max_threads", &self.shared.max_threads)
            .finish()
    }
}

impl<S: 'static> WorkerPool<S> {
    /// A pool whose threads have `stack_size` bytes of stack and build their
    /// state with `factory`.
    pub(crate) fn new(
        name: &str,
        max_threads: usize,
        stack_size: usize,
        factory: impl Fn() -> S + Send + Sync + 'static,
    ) -> Self {
        WorkerPool {
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
    /// [`WorkerPool::with_rehearsal`]; unless kept awake, anticipation
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
    /// ([`WorkerPool::with_cpus_per_run`]).
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
    /// worker thread could be started.
    pub(crate) fn submit(&self, job: impl FnOnce(&mut S) + Send + 'static) -> Result<(), String> {
        self.place(Box::new(job)).map(|_| ())
    }

    /// [`WorkerPool::submit`], saying whether the job queued for a worker
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

/// Hands a run's report back to the caller of [`WorkerPool::execute`] as
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
    /// This worker thread's job has answered its caller ([`Reply::send`])
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

impl<S: 'static> WorkerPool<S> {
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
        // than parking (docs/performance.md, "The caller waits awake
        // behind the process boundary too").
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
                let awake = hot || behind;
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
    /// deadline passes or it is cancelled ([`WorkerPool::execute`]).
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
    tracing::warn!(pool = %shared.name, "a run did not stop at its deadline inside the engine; its worker thread is retired");
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

impl<S> Drop for WorkerPool<S> {
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
        .map_err(|e| format!("could not start a worker thread: {e}"))
}

/// How long an idle worker spins for its next job before it sleeps. A run
/// back to back with the last one then skips a thread wake-up: a trivial
/// QuickJS run went from 84–89 µs to 46–59 µs on the development VM. At
/// most one worker spins, and only while the workers with runs leave a
/// CPU besides the caller's: spinning beside busy workers took their CPU
/// (8 in flight on 8 workers: 53,000 → 22,000 scripts/s without this
/// rule, no measurable change with it).
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// The longest a caller waits awake for its answer: runs that usually
/// answer sooner (Boa's trivial run takes about 50 µs, longer than
/// [`SPIN`]; it was answered to a parked caller about half the time, at
/// about 90 µs instead of 50).
const ANSWER_SPIN_MAX: std::time::Duration = std::time::Duration::from_micros(200);

/// How long a caller waits awake for its answer: [`SPIN`], or half again
/// as long as runs have been taking ([`Shared::answer_us`]) where that
/// is at most [`ANSWER_SPIN_MAX`]; runs that take longer are answered to
/// a parked caller, whose wake-up is then a small part of the run.
fn answer_budget(answer_us: &std::sync::atomic::AtomicU64) -> std::time::Duration {
    let typical = answer_us.load(std::sync::atomic::Ordering::Relaxed);
    let typical = std::time::Duration::from_micros(typical);
    if typical > ANSWER_SPIN_MAX {
        return SPIN;
    }
    (typical + typical / 2).clamp(SPIN, ANSWER_SPIN_MAX)
}

/// Folds one run's time from submission to answer into `answer_us`, a
/// moving average over about the last eight runs. Racing callers may
/// lose an update; the figure only tunes [`answer_budget`].
fn note_answer(answer_us: &std::sync::atomic::AtomicU64, took: std::time::Duration) {
    use std::sync::atomic::Ordering;
    // A run of seconds counts as 10 ms: enough to say "long".
    let sample = (took.as_micros() as u64).min(10_000);
    let old = answer_us.load(Ordering::Relaxed);
    let new = if old == 0 {
        sample
    } else {
        old - old / 8 + sample / 8
    };
    answer_us.store(new, Ordering::Relaxed);
}

/// What a caller waiting awake for its answer found.
enum Soon<T> {
    Answer(T),
    /// The worker dropped the reply without answering (its job panicked).
    Closed,
    /// No answer within the budget: await it.
    Later,
}

/// The answer of a run handed to a spinning worker, if it comes within
/// `budget` ([`answer_budget`]); the caller otherwise awaits it as usual.
/// Where the idle CPUs of a VM halt, waking a parked caller costs tens of
/// microseconds, more than a trivial run (docs/performance.md, "A second
/// machine: the caller's wake-up, and tool calls"). Only called when the
/// run went to a worker that was spinning or queued for one tidying up,
/// that is while the busy workers leave a CPU free, so it does not take a
/// CPU that runs need; it yields between polls (a worker that shares this
/// CPU runs), and holds this thread (a tokio worker, perhaps) for at most
/// `budget`.
fn answer_soon<T>(
    rx: &mut tokio::sync::oneshot::Receiver<T>,
    budget: std::time::Duration,
) -> Soon<T> {
    use tokio::sync::oneshot::error::TryRecvError;
    let mut soon = Soon::Later;
    crate::spin::until_in_place(budget, || match rx.try_recv() {
        Ok(answer) => {
            soon = Soon::Answer(answer);
            true
        }
        // The receiver is spent: it must not be awaited now.
        Err(TryRecvError::Closed) => {
            soon = Soon::Closed;
            true
        }
        Err(TryRecvError::Empty) => false,
    });
    soon
}

/// How often an idle worker rehearses while one is due: often enough that
/// the caches keep what a run needs (on a Firecracker VM whose halted
/// vCPU lost them within 2 ms, a walk repeated every 1 ms kept 1,000
/// random lines as warm as back to back; docs/performance.md, "Keeping
/// an idle engine thread warm"), rarely enough that rehearsing costs a
/// few per cent of a CPU.
pub(crate) const REHEARSAL_PERIOD: std::time::Duration = std::time::Duration::from_micros(800);

/// How often a worker kept awake rehearses: its CPU is held between
/// rehearsals anyway, so rehearsing more often costs no CPU that was free;
/// it keeps more of the run's working set in the caches than polling alone.
/// Every 200 µs instead of [`REHEARSAL_PERIOD`] took a spaced trivial
/// QuickJS run kept awake from 78–89 to 69–75 µs in three alternating
/// pairs of launches on a VM without a cpuidle driver, and its 99th
/// percentile inside the engine from 16–38 to 16–18 µs on one with
/// `haltpoll`; every 50 µs did no better (docs/performance.md,
/// "Rehearsing more often while awake").
pub(crate) const AWAKE_REHEARSAL_PERIOD: std::time::Duration =
    std::time::Duration::from_micros(200);

struct Rehearsal<S> {
    due: fn(&mut S) -> bool,
    rehearse: fn(&mut S),
    /// Whether the worker stays awake between rehearsals (module docs).
    awake: Arc<std::sync::atomic::AtomicBool>,
}

/// The next job sent to this idle worker; `None` once the pool closed.
/// `idle` runs once if none is waiting (after the spin); then the worker
/// rehearses while a rehearsal is due, and sleeps.
fn next_job<S>(
    shared: &Shared<S>,
    rx: &mpsc::Receiver<Job<S>>,
    busy: usize,
    plan: Option<crate::anticipate::Plan>,
    state: &mut S,
) -> Option<Job<S>> {
    use std::sync::atomic::Ordering;
    // Spin only while the workers with runs leave a CPU free.
    let may_spin = busy + 1 < shared.cores;
    if may_spin && !shared.spinning.swap(true, Ordering::AcqRel) {
        // Yielding between polls: a caller on this CPU (the scheduler
        // put both here while the other CPU was busy) gets to submit its
        // job. Spinning without yielding cost such a pair up to the whole
        // spin per run: 15 → 65 µs for a trivial QuickJS run, 50 → 100 on
        // Boa, with a build on the other CPU (docs/performance.md).
        let got = poll_for(rx, SPIN);
        shared.spinning.store(false, Ordering::Release);
        match got {
            Ok(j) => return Some(j),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    match rx.try_recv() {
        Ok(j) => return Some(j),
        Err(mpsc::TryRecvError::Disconnected) => return None,
        Err(mpsc::TryRecvError::Empty) => {
            if let Some(idle) = shared.idle {
                guarded(shared, state, idle);
            }
        }
    }
    if let Some(r) = &shared.rehearsal {
        // Anticipating a steady run first, unless kept awake (which polls
        // from now on): it sleeps until shortly before the run is due,
        // skipping the rehearsals a window kept warm asleep would run
        // meanwhile (the one at its wake-up warms what they would).
        if let (Some(plan), Some(a)) = (plan, &shared.anticipation) {
            if !r.awake.load(Ordering::Relaxed) {
                if let Some(next) = anticipate(shared, rx, state, a, plan, busy) {
                    return next;
                }
            }
        }
        // Awake: at most one worker, holding the spinning flag (so that a
        // caller waits awake for its answer), while the CPUs allow.
        let awake = r.awake.load(Ordering::Relaxed)
            && (r.due)(state)
            && awake_fits(shared, busy)
            && !shared.spinning.swap(true, Ordering::AcqRel);
        let next = rehearse_while_due(shared, rx, state, r, awake);
        if awake {
            shared.spinning.store(false, Ordering::Release);
        }
        if let Some(next) = next {
            return next;
        }
    }
    // Nothing to rehearse until the next job, which brings its own plan.
    if let Some(a) = &shared.anticipation {
        (a.forget)(state);
    }
    rx.recv().ok()
}

/// Sleeps until `plan` says to wake, then rehearses and polls for the next
/// job until `plan.awake_until` (`crate::anticipate`): the job
/// (`Some(None)` once the pool closed), or `None` when none came (or the
/// state has nothing to rehearse, or the CPUs or another poller do not
/// allow it) and the worker should sleep as usual.
fn anticipate<S>(
    shared: &Shared<S>,
    rx: &mpsc::Receiver<Job<S>>,
    state: &mut S,
    a: &Anticipation<S>,
    plan: crate::anticipate::Plan,
    busy: usize,
) -> Option<Option<Job<S>>> {
    use std::sync::atomic::Ordering;
    use std::time::Instant;
    if !(a.ready)(state) {
        return None;
    }
    let asleep = plan.wake_at.saturating_duration_since(Instant::now());
    if !asleep.is_zero() {
        match rx.recv_timeout(asleep) {
            Ok(j) => return Some(Some(j)),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Some(None),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    if Instant::now() >= plan.awake_until {
        return None;
    }
    metrics::counter!("anticipated_wakeups_total", "pool" => shared.name.clone()).increment(1);
    if !anticipation_fits(shared, busy) || shared.spinning.swap(true, Ordering::AcqRel) {
        // No CPU to wait awake on (or another worker polls): the caches
        // at least are warm when the run comes.
        guarded(shared, state, a.rehearse);
        return None;
    }
    // One rehearsal: the run is due within a few hundred microseconds,
    // and a second would be as likely to hold it up as to help (on Boa
    // every rehearsal brings the next garbage collection nearer).
    guarded(shared, state, a.rehearse);
    let got = match poll_for(
        rx,
        plan.awake_until.saturating_duration_since(Instant::now()),
    ) {
        Ok(j) => Some(Some(j)),
        Err(mpsc::RecvTimeoutError::Disconnected) => Some(None),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
    };
    shared.spinning.store(false, Ordering::Release);
    if matches!(got, Some(Some(_))) {
        metrics::counter!("anticipated_runs_total", "pool" => shared.name.clone()).increment(1);
    }
    got
}

/// Whether an idle worker may poll through an anticipation window beside
/// `busy` busy ones: a CPU for itself besides the CPUs their runs keep busy
/// ([`WorkerPool::with_cpus_per_run`] each). Looser than [`awake_fits`],
/// which also keeps CPUs for the next run and its caller, because the
/// window is short (a few hundred microseconds per pause, against a whole
/// keep-warm window) and ends when the run comes. In process it is the
/// same rule; behind the process boundary on 2 CPUs it lets the host
/// thread poll beside its worker process (which lingers in the window on
/// its own CPU): the run then no longer waits for the host thread's
/// wake-up, and neither the caller's wake-up nor the CPU time grew
/// (docs/performance.md, "The host thread polls in an anticipation
/// window").
fn anticipation_fits<S>(shared: &Shared<S>, busy: usize) -> bool {
    busy * shared.cpus_per_run + 1 < shared.cores
}

/// Whether an idle worker may stay awake beside `busy` busy ones: the
/// CPUs their runs and the next one keep busy, and one for a caller, are
/// there (module docs).
fn awake_fits<S>(shared: &Shared<S>, busy: usize) -> bool {
    (busy + 1) * shared.cpus_per_run < shared.cores
}

/// Rehearses while due, waiting for a job in between, asleep or awake
/// ([`poll_for`]): the job (`Some(None)` once the pool closed), or `None`
/// when no rehearsal is due any more.
fn rehearse_while_due<S>(
    shared: &Shared<S>,
    rx: &mpsc::Receiver<Job<S>>,
    state: &mut S,
    r: &Rehearsal<S>,
    awake: bool,
) -> Option<Option<Job<S>>> {
    while (r.due)(state) {
        let got = if awake {
            poll_for(rx, AWAKE_REHEARSAL_PERIOD)
        } else {
            rx.recv_timeout(REHEARSAL_PERIOD)
        };
        match got {
            Ok(j) => return Some(Some(j)),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Some(None),
            Err(mpsc::RecvTimeoutError::Timeout) => guarded(shared, state, r.rehearse),
        }
    }
    None
}

/// `rx.recv_timeout(budget)` awake: polling, yielding between polls (a
/// caller that shares this CPU runs at once), so that this CPU does not
/// halt meanwhile.
fn poll_for<T>(
    rx: &mpsc::Receiver<T>,
    budget: std::time::Duration,
) -> Result<T, mpsc::RecvTimeoutError> {
    let mut got = Err(mpsc::TryRecvError::Empty);
    crate::spin::until(budget, || {
        got = rx.try_recv();
        !matches!(got, Err(mpsc::TryRecvError::Empty))
    });
    got.map_err(|e| match e {
        mpsc::TryRecvError::Empty => mpsc::RecvTimeoutError::Timeout,
        mpsc::TryRecvError::Disconnected => mpsc::RecvTimeoutError::Disconnected,
    })
}

/// Calls `f` on the worker's state; a panic rebuilds the state.
fn guarded<S>(shared: &Shared<S>, state: &mut S, f: fn(&mut S)) {
    if catch_unwind(AssertUnwindSafe(|| f(state))).is_err() {
        *state = (shared.factory)();
    }
}

/// Keeps the pool's books when a worker thread ends, however it ends: the
/// pool closing, or a panic outside a job's `catch_unwind` (the state's
/// factory, rebuilding after a job panicked) or a poisoned lock. The
/// thread is no longer counted in `threads` (else a pool at its maximum
/// would queue every later run for a thread that is gone, and they would
/// never run), nor as tidying up (else runs would keep queueing for it);
/// and if runs are queued and the pool is open, a new thread takes them.
struct Leaving<'a, S: 'static>(&'a Arc<Shared<S>>);

thread_local! {
    /// Set on a worker whose run outlived its deadline inside the engine
    /// ([`WorkerPool::execute`]): the pool counted it gone already, and it
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
mod tests {
    use super::*;

    #[test]
    fn an_idle_worker_does_its_idle_work_and_survives_a_panic_there() {
        // State: (jobs since idle, idle calls). Idle panics on its second
        // call; the state is then rebuilt.
        static IDLE_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        fn idle(s: &mut (u32, u32)) {
            IDLE_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            s.1 += 1;
            assert!(s.1 != 2, "idle panics");
            s.0 = 0;
        }
        let pool = WorkerPool::new("t", 1, 1 << 20, || (0u32, 0u32)).with_idle(idle);
        let ask = |pool: &WorkerPool<(u32, u32)>| {
            let (tx, rx) = mpsc::channel();
            pool.submit(move |s| {
                s.0 += 1;
                tx.send(*s).unwrap();
            })
            .unwrap();
            rx.recv().unwrap()
        };
        // Waits for the worker's `n`th idle call to begin; a job sent then
        // waits for it to end.
        let settle = |n: u32| {
            while IDLE_CALLS.load(std::sync::atomic::Ordering::SeqCst) < n {
                std::thread::yield_now();
            }
        };
        assert_eq!(ask(&pool), (1, 0));
        settle(1);
        assert_eq!(ask(&pool), (1, 1), "idle ran once between the jobs");
        settle(2);
        // The second idle call panicked: a fresh state.
        assert_eq!(ask(&pool), (1, 0));
        settle(3);
        assert_eq!(ask(&pool), (1, 1));
        assert_eq!(pool.threads(), 1);
    }

    /// A worker's state for the rehearsal tests: rehearsals since the
    /// last job, and how many more are due (the test sets it).
    struct Rehearsing {
        rehearsals: u32,
        due: Arc<std::sync::atomic::AtomicU32>,
    }

    /// A one-thread pool of [`Rehearsing`], awake or not between
    /// rehearsals, and its count of rehearsals still due.
    fn rehearsing_pool(
        awake: Arc<std::sync::atomic::AtomicBool>,
    ) -> (WorkerPool<Rehearsing>, Arc<std::sync::atomic::AtomicU32>) {
        rehearsing_pool_on(awake, None, 1)
    }

    /// [`rehearsing_pool`] as if on `cores` CPUs (else this machine's),
    /// each run keeping `cpus_per_run` busy.
    fn rehearsing_pool_on(
        awake: Arc<std::sync::atomic::AtomicBool>,
        cores: Option<usize>,
        cpus_per_run: usize,
    ) -> (WorkerPool<Rehearsing>, Arc<std::sync::atomic::AtomicU32>) {
        use std::sync::atomic::Ordering;
        fn due(s: &mut Rehearsing) -> bool {
            s.due.load(Ordering::SeqCst) > 0
        }
        fn rehearse(s: &mut Rehearsing) {
            s.rehearsals += 1;
            let _ = s
                .due
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_sub(1));
        }
        let still_due = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let for_state = still_due.clone();
        let pool = WorkerPool::new("t", 1, 1 << 20, move || Rehearsing {
            rehearsals: 0,
            due: for_state.clone(),
        })
        .with_rehearsal(due, rehearse, awake)
        .with_cpus_per_run(cpus_per_run);
        let pool = match cores {
            Some(n) => pool.with_cores(n),
            None => pool,
        };
        (pool, still_due)
    }

    /// Runs a job on `pool`: the rehearsals since the last one.
    fn rehearsals_since_last_job(pool: &WorkerPool<Rehearsing>) -> u32 {
        let (tx, rx) = mpsc::channel();
        pool.submit(move |s| tx.send(std::mem::take(&mut s.rehearsals)).unwrap())
            .unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the job ran")
    }

    /// Waits (10 s at most) until `what` holds.
    fn wait_for(what: impl Fn() -> bool) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !what() {
            assert!(std::time::Instant::now() < end, "timed out");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn an_idle_worker_rehearses_while_due_and_takes_a_job_meanwhile() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (pool, due) = rehearsing_pool(Arc::new(AtomicBool::new(false)));
        let ask = rehearsals_since_last_job;
        assert_eq!(ask(&pool), 0, "nothing due: no rehearsal");
        due.store(3, Ordering::SeqCst);
        // The worker is asleep with nothing due: it rehearses after its
        // next job, three times, then sleeps.
        assert_eq!(ask(&pool), 0);
        wait_for(|| due.load(Ordering::SeqCst) == 0);
        assert_eq!(ask(&pool), 3, "three rehearsals, then none");
        // Due for a long time (about 800 s of rehearsals): a job sent
        // meanwhile is taken at its next wait, not after the window.
        due.store(1_000_000, Ordering::SeqCst);
        assert_eq!(ask(&pool), 0);
        wait_for(|| due.load(Ordering::SeqCst) <= 999_998);
        assert!(ask(&pool) >= 2, "the job came between rehearsals");
        due.store(0, Ordering::SeqCst);
    }

    #[test]
    fn an_awake_worker_polls_between_rehearsals_holding_the_spinning_flag() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let awake = Arc::new(AtomicBool::new(true));
        let (pool, due) = rehearsing_pool(awake.clone());
        let ask = rehearsals_since_last_job;
        let spinning = || pool.shared.spinning.load(Ordering::Acquire);
        assert_eq!(ask(&pool), 0);
        // Due for a long time: the worker stays awake (with a CPU free
        // besides its own) and rehearses every period meanwhile.
        due.store(1_000_000, Ordering::SeqCst);
        assert_eq!(ask(&pool), 0);
        wait_for(|| due.load(Ordering::SeqCst) <= 999_997);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores > 1 {
            wait_for(spinning);
        }
        // A job sent meanwhile is taken at once, rehearsals counted.
        assert!(ask(&pool) >= 3, "the job came between rehearsals");
        // Nothing due: the worker lets the flag go and sleeps.
        due.store(0, Ordering::SeqCst);
        wait_for(|| !spinning());
        // Awake turned off: rehearsals asleep, the flag never taken.
        awake.store(false, Ordering::Relaxed);
        assert_eq!(ask(&pool), 0);
        due.store(1_000_000, Ordering::SeqCst);
        assert_eq!(ask(&pool), 0);
        wait_for(|| due.load(Ordering::SeqCst) <= 999_997);
        assert!(!spinning(), "asleep between rehearsals");
        due.store(0, Ordering::SeqCst);
    }

    /// Jobs sent to an anticipating pool of [`Rehearsing`] after each of
    /// `pauses` (ms): the rehearsals each found since the last.
    fn anticipated(on: bool, pauses: &[u64]) -> Vec<u32> {
        use std::sync::atomic::AtomicBool;
        fn ready(_: &mut Rehearsing) -> bool {
            true
        }
        fn rehearse(s: &mut Rehearsing) {
            s.rehearsals += 1;
        }
        let (pool, _) = rehearsing_pool(Arc::new(AtomicBool::new(false)));
        let pool = pool.with_anticipation(ready, rehearse, |_| {}, Arc::new(AtomicBool::new(on)));
        rehearsals_since_last_job(&pool);
        pauses
            .iter()
            .map(|&ms| {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                rehearsals_since_last_job(&pool)
            })
            .collect()
    }

    #[test]
    fn steady_runs_are_anticipated_and_lone_or_irregular_ones_are_not() {
        // Runs every 30 ms: once 8 pauses agree (give or take 14.5 ms,
        // half the pause less the awake stretch's margins: room for a
        // loaded machine's late wake-ups), the worker rehearses ahead of
        // each.
        let steady = anticipated(true, &[30; 24]);
        assert!(
            steady[..crate::anticipate::SAMPLES].iter().all(|&n| n == 0),
            "no anticipation before {} pauses: {steady:?}",
            crate::anticipate::SAMPLES
        );
        assert!(
            steady[crate::anticipate::SAMPLES..].iter().any(|&n| n > 0),
            "steady runs anticipated: {steady:?}"
        );
        // Turned off: never.
        assert!(anticipated(false, &[30; 12]).iter().all(|&n| n == 0));
        // Pauses that disagree (2 and 40 ms by turns): never.
        let irregular: Vec<u64> = (0..14).map(|i| if i % 2 == 0 { 2 } else { 40 }).collect();
        assert!(anticipated(true, &irregular).iter().all(|&n| n == 0));
    }

    /// Whether an anticipating worker of a pool as if on `cores` CPUs,
    /// each run keeping `cpus_per_run` busy, polled for its next job (held
    /// the spinning flag) in the last 8 ms before any of 16 jobs sent
    /// 30 ms apart after 8 such pauses: the spin after a job is over by
    /// then, so only the anticipation window holds the flag there.
    fn polls_ahead(cores: usize, cpus_per_run: usize) -> bool {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};
        fn ready(_: &mut Rehearsing) -> bool {
            true
        }
        fn rehearse(s: &mut Rehearsing) {
            s.rehearsals += 1;
        }
        let (pool, _) =
            rehearsing_pool_on(Arc::new(AtomicBool::new(false)), Some(cores), cpus_per_run);
        let pool = pool.with_anticipation(ready, rehearse, |_| {}, Arc::new(AtomicBool::new(true)));
        let pace = Duration::from_millis(30);
        let mut polled = false;
        for k in 0..crate::anticipate::SAMPLES + 16 {
            let sent = Instant::now();
            rehearsals_since_last_job(&pool);
            let watch = sent + pace - Duration::from_millis(8);
            std::thread::sleep(watch.saturating_duration_since(Instant::now()));
            while Instant::now() < sent + pace {
                polled |=
                    k >= crate::anticipate::SAMPLES && pool.shared.spinning.load(Ordering::Acquire);
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        polled
    }

    /// An anticipating worker polls for the run wherever it has a CPU of
    /// its own besides the busy runs': behind the process boundary (two
    /// CPUs a run) on 2 CPUs too, where a worker kept awake would not.
    #[test]
    fn an_anticipating_worker_polls_where_it_has_a_cpu_of_its_own() {
        for (cores, cpus_per_run, polls) in [(2, 1, true), (2, 2, true), (1, 1, false)] {
            assert_eq!(
                polls_ahead(cores, cpus_per_run),
                polls,
                "{cores} CPUs, {cpus_per_run} per run"
            );
        }
    }

    /// A worker stays awake only where the CPUs allow: its run (two CPUs
    /// behind the process boundary) and a caller's besides its own.
    #[test]
    fn a_worker_stays_awake_only_with_cpus_for_its_run_and_a_caller() {
        use std::sync::atomic::{AtomicBool, Ordering};
        for (cores, cpus_per_run, stays) in
            [(2, 1, true), (1, 1, false), (2, 2, false), (3, 2, true)]
        {
            let (pool, due) =
                rehearsing_pool_on(Arc::new(AtomicBool::new(true)), Some(cores), cpus_per_run);
            let what = format!("{cores} CPUs, {cpus_per_run} per run");
            assert_eq!(pool.can_stay_awake(), stays, "{what}");
            assert_eq!(rehearsals_since_last_job(&pool), 0);
            due.store(1_000_000, Ordering::SeqCst);
            assert_eq!(rehearsals_since_last_job(&pool), 0);
            // Three rehearsals in, the worker is awake between them or not.
            wait_for(|| due.load(Ordering::SeqCst) <= 999_997);
            if stays {
                wait_for(|| pool.shared.spinning.load(Ordering::Acquire));
            } else {
                assert!(!pool.shared.spinning.load(Ordering::Acquire), "{what}");
            }
            due.store(0, Ordering::SeqCst);
        }
    }

    /// A worker thread that dies outside a job's `catch_unwind` (here its
    /// state's factory, rebuilding after a job panicked) leaves the pool's
    /// books right: a pool of one thread runs the next jobs on a new one,
    /// and the runs queued meanwhile are not stranded.
    #[test]
    fn a_worker_thread_that_dies_is_replaced_and_strands_no_run() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::time::Duration;
        static MADE: AtomicU32 = AtomicU32::new(0);
        // The second state panics as it is made: after the first job's
        // panic, so the thread dies.
        let pool = WorkerPool::new("t", 1, 1 << 20, || {
            let n = MADE.fetch_add(1, Ordering::SeqCst);
            assert!(n != 1, "the factory panics");
            n
        });
        let (tx, rx) = mpsc::channel();
        let (go, wait) = mpsc::channel::<()>();
        // Held until the jobs below are queued behind it.
        pool.submit(move |_| {
            let _ = wait.recv();
            panic!("the job panics");
        })
        .unwrap();
        for i in 0..3 {
            let tx = tx.clone();
            pool.submit(move |s| tx.send((i, *s)).unwrap()).unwrap();
        }
        go.send(()).unwrap();
        let mut got: Vec<(i32, u32)> = (0..3)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(10))
                    .expect("a queued run ran")
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![(0, 2), (1, 2), (2, 2)],
            "on the new thread's state"
        );
        wait_for(|| pool.threads() == 1);
        let tx = tx.clone();
        pool.submit(move |s| tx.send((3, *s)).unwrap()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), (3, 2));
    }

    #[test]
    fn runs_jobs_and_survives_panics() {
        let pool = WorkerPool::new("t", 2, 1 << 20, || 0u32);
        let (tx, rx) = mpsc::channel();
        pool.submit(|_| panic!("boom")).unwrap();
        for i in 0..10 {
            let tx = tx.clone();
            pool.submit(move |s| {
                *s += 1;
                tx.send(i).unwrap();
            })
            .unwrap();
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(pool.threads() <= 2);
    }

    #[test]
    fn jobs_past_the_maximum_wait_and_all_run() {
        let pool = WorkerPool::new("t", 2, 1 << 20, || ());
        let (tx, rx) = mpsc::channel();
        for i in 0..50 {
            let tx = tx.clone();
            pool.submit(move |_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                tx.send(i).unwrap();
            })
            .unwrap();
        }
        let mut got: Vec<i32> = (0..50)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .collect();
        got.sort();
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        assert_eq!(pool.threads(), 2);
    }

    #[test]
    fn the_next_run_waits_for_the_worker_tidying_up() {
        next_run_waits_for_the_worker_tidying_up(false);
    }

    /// After a run in a private realm, whose tidy-up is long, the next run
    /// goes to another worker while a CPU is free, so that the tidy-up
    /// overlaps it; with every CPU busy it waits for the first worker done
    /// rather than starting a thread (and an engine) more.
    #[test]
    fn after_a_private_run_the_next_goes_to_another_worker() {
        next_run_waits_for_the_worker_tidying_up(true);
    }

    fn next_run_waits_for_the_worker_tidying_up(private: bool) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = WorkerPool::new("t", 4, 1 << 20, || ()).with_long_private_tidy_up(true);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let realm = private.then_some(crate::limits::Realm::Private);
        let run = |tidy_ms: u64| {
            let tx = tx.clone();
            let mut request = ExecutionRequest::new("1");
            request.limits = request.limits.with_realm(realm);
            rt.block_on(pool.execute("t", request, move |_, _, _, reply| {
                tx.send(std::thread::current().id()).unwrap();
                reply.send(ExecutionReport::failed("t", ScriptError::internal("done")));
                // Tidying up after the answer.
                std::thread::sleep(std::time::Duration::from_millis(tidy_ms));
            }))
        };
        for _ in 0..5 {
            run(30);
        }
        let threads: Vec<_> = (0..5).map(|_| rx.recv().unwrap()).collect();
        if cores >= 2 && !private {
            // Each run came while the last one's worker tidied up: it
            // waited for that worker instead of starting another.
            assert_eq!(pool.threads(), 1);
            assert!(threads.iter().all(|t| *t == threads[0]));
        }
        if cores >= 2 && private {
            // The second run did not wait for the first one's worker;
            // later ones go to whichever worker is done first.
            assert_ne!(
                threads[0], threads[1],
                "a run queued for a worker's long tidy-up: {threads:?}"
            );
            // A thread per CPU (at most the pool's 4), not one per run.
            assert_eq!(pool.threads(), cores.min(4));
        }
        // Once the last worker is done tidying, nobody counts as finishing.
        let t = std::time::Instant::now();
        while pool.shared.finishing.count() != (0, 0) && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(pool.shared.finishing.count(), (0, 0));
    }

    #[test]
    fn a_run_whose_job_panics_while_its_caller_waits_awake_fails_cleanly() {
        // The caller waits awake for a run given to a worker still
        // tidying up after the last one (`behind`), or spinning for it
        // (`hot`); a job that panics drops its reply there, and the
        // caller must report that, not poll a spent receiver (tokio's
        // "called after complete" panic, seen before this test).
        let pool = WorkerPool::new("t", 1, 1 << 20, || ());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for round in 0..50 {
            let ok =
                rt.block_on(
                    pool.execute("t", ExecutionRequest::new("1"), |_, _, _, reply| {
                        reply.send(ExecutionReport::failed(
                            "t",
                            ScriptError::internal("answered"),
                        ));
                    }),
                );
            assert!(ok.error.is_some_and(|e| e.message == "answered"));
            let panicked = rt.block_on(pool.execute(
                "t",
                ExecutionRequest::new("1"),
                move |_, _, _, _reply| {
                    if round % 2 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(20));
                    }
                    panic!("the engine panicked");
                },
            ));
            let e = panicked.error.expect("a failed report");
            assert!(e.message.contains("stopped before answering"), "{e:?}");
        }
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn callers_wait_awake_about_as_long_as_runs_take() {
        let a = std::sync::atomic::AtomicU64::new(0);
        assert_eq!(answer_budget(&a), SPIN, "nothing known yet");
        note_answer(&a, std::time::Duration::from_micros(60));
        assert_eq!(a.load(std::sync::atomic::Ordering::Relaxed), 60);
        assert_eq!(answer_budget(&a), std::time::Duration::from_micros(90));
        for _ in 0..64 {
            note_answer(&a, std::time::Duration::from_micros(10));
        }
        assert_eq!(answer_budget(&a), SPIN, "short runs: the floor");
        for _ in 0..64 {
            note_answer(&a, std::time::Duration::from_millis(5));
        }
        assert_eq!(answer_budget(&a), SPIN, "long runs: no longer than before");
        note_answer(&a, std::time::Duration::from_secs(3600));
        assert!(a.load(std::sync::atomic::Ordering::Relaxed) <= 10_000);
        for _ in 0..64 {
            note_answer(&a, std::time::Duration::from_micros(150));
        }
        assert_eq!(answer_budget(&a), ANSWER_SPIN_MAX, "capped");
    }

    #[test]
    fn dropping_the_pool_ends_its_threads() {
        struct Alive(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Alive {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let alive = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = alive.clone();
        let pool = WorkerPool::new("t", 4, 1 << 20, move || {
            a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Alive(a.clone())
        });
        let (tx, rx) = mpsc::channel();
        for _ in 0..4 {
            let tx = tx.clone();
            pool.submit(move |_| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                tx.send(()).unwrap();
            })
            .unwrap();
        }
        for _ in 0..4 {
            rx.recv().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(alive.load(std::sync::atomic::Ordering::SeqCst) > 0);
        drop(pool);
        let t = std::time::Instant::now();
        while alive.load(std::sync::atomic::Ordering::SeqCst) > 0 && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            alive.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "worker threads outlived the pool"
        );
    }
}
