//! What an idle worker does until its next job: spins briefly, waits
//! for its answer's caller, rehearses while kept warm, anticipates a
//! steady pace.

use super::*;

/// How long an idle worker spins for its next job before it sleeps. A run
/// back to back with the last one then skips a thread wake-up: a trivial
/// QuickJS run went from 84–89 µs to 46–59 µs on the development VM. At
/// most one worker spins, and only while the workers with runs leave a
/// CPU besides the caller's: spinning beside busy workers took their CPU
/// (8 in flight on 8 workers: 53,000 → 22,000 scripts/s without this
/// rule, no measurable change with it).
pub(super) const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// The longest a caller waits awake for its answer: runs that usually
/// answer sooner (Boa's trivial run takes about 50 µs, longer than
/// [`SPIN`]; it was answered to a parked caller about half the time, at
/// about 90 µs instead of 50).
pub(super) const ANSWER_SPIN_MAX: std::time::Duration = std::time::Duration::from_micros(200);

/// How long a caller waits awake for its answer: [`SPIN`], or half again
/// as long as runs have been taking ([`Shared::answer_us`]) where that
/// is at most [`ANSWER_SPIN_MAX`]; runs that take longer are answered to
/// a parked caller, whose wake-up is then a small part of the run.
pub(super) fn answer_budget(answer_us: &std::sync::atomic::AtomicU64) -> std::time::Duration {
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
pub(super) fn note_answer(answer_us: &std::sync::atomic::AtomicU64, took: std::time::Duration) {
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
pub(super) enum Soon<T> {
    Answer(T),
    /// The worker dropped the reply without answering (its job panicked).
    Closed,
    /// No answer within the budget: await it.
    Later,
}

/// The answer of a run handed to a spinning worker, if it comes within
/// `budget` ([`answer_budget`]); the caller otherwise awaits it as usual.
/// Where the idle CPUs of a VM halt, waking a parked caller costs tens of
/// microseconds, more than a trivial run. Only called when the
/// run went to a worker that was spinning or queued for one tidying up,
/// that is while the busy workers leave a CPU free, so it does not take a
/// CPU that runs need; it yields between polls (a worker that shares this
/// CPU runs), and holds this thread (a tokio worker, perhaps) for at most
/// `budget`.
pub(super) fn answer_soon<T>(
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
/// random lines as warm as back to back), rarely enough that rehearsing costs a
/// few per cent of a CPU.
pub(crate) const REHEARSAL_PERIOD: std::time::Duration = std::time::Duration::from_micros(800);

/// How often a worker kept awake rehearses: its CPU is held between
/// rehearsals anyway, so rehearsing more often costs no CPU that was free;
/// it keeps more of the run's working set in the caches than polling alone.
/// Every 200 µs instead of [`REHEARSAL_PERIOD`] took a spaced trivial
/// QuickJS run kept awake from 78–89 to 69–75 µs in three alternating
/// pairs of launches on a VM without a cpuidle driver, and its 99th
/// percentile inside the engine from 16–38 to 16–18 µs on one with
/// `haltpoll`; every 50 µs did no better.
pub(crate) const AWAKE_REHEARSAL_PERIOD: std::time::Duration =
    std::time::Duration::from_micros(200);

pub(super) struct Rehearsal<S> {
    pub(super) due: fn(&mut S) -> bool,
    pub(super) rehearse: fn(&mut S),
    /// Whether the worker stays awake between rehearsals (module docs).
    pub(super) awake: Arc<std::sync::atomic::AtomicBool>,
}

/// The next job sent to this idle worker; `None` once the pool closed.
/// `idle` runs once if none is waiting (after the spin); then the worker
/// rehearses while a rehearsal is due, and sleeps.
pub(super) fn next_job<S>(
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
        // Boa, with a build on the other CPU.
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
pub(super) fn anticipate<S>(
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
/// ([`ThreadPool::with_cpus_per_run`] each). Looser than [`awake_fits`],
/// which also keeps CPUs for the next run and its caller, because the
/// window is short (a few hundred microseconds per pause, against a whole
/// keep-warm window) and ends when the run comes. In process it is the
/// same rule; behind the process boundary on 2 CPUs it lets the host
/// thread poll beside its worker process (which lingers in the window on
/// its own CPU): the run then no longer waits for the host thread's
/// wake-up, and neither the caller's wake-up nor the CPU time grew.
pub(super) fn anticipation_fits<S>(shared: &Shared<S>, busy: usize) -> bool {
    busy * shared.cpus_per_run + 1 < shared.cores
}

/// Whether an idle worker may stay awake beside `busy` busy ones: the
/// CPUs their runs and the next one keep busy, and one for a caller, are
/// there (module docs).
pub(super) fn awake_fits<S>(shared: &Shared<S>, busy: usize) -> bool {
    (busy + 1) * shared.cpus_per_run < shared.cores
}

/// Rehearses while due, waiting for a job in between, asleep or awake
/// ([`poll_for`]): the job (`Some(None)` once the pool closed), or `None`
/// when no rehearsal is due any more.
pub(super) fn rehearse_while_due<S>(
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
pub(super) fn poll_for<T>(
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
pub(super) fn guarded<S>(shared: &Shared<S>, state: &mut S, f: fn(&mut S)) {
    if catch_unwind(AssertUnwindSafe(|| f(state))).is_err() {
        *state = (shared.factory)();
    }
}
