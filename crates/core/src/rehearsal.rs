//! Rehearsals: what an idle engine thread (in process, or the process
//! boundary's host thread through its worker) runs to stay warm or to be
//! ready for a run it anticipates, and the tuning state behind them
//! ([`KeepWarm`], set by [`crate::tuning::Tunable::tune`]).

use crate::adapter::ExecutionRequest;
use crate::limits::Limits;
use crate::tuning::{Tuned, Tuning};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What an idle engine thread (or a process boundary's host thread)
/// rehearses, and until when: the last run's request on this thread with
/// a fixed script in place of its own ([`Rehearsal::after`]).
pub(crate) struct Rehearsal {
    /// The end of the keep-warm window (none while the engine does not
    /// keep warm: the plan is kept for anticipation only).
    until: Option<Instant>,
    /// When the plan is dropped: the window's end, or past the longest
    /// pause anticipated (`crate::anticipate::MAX_PAUSE`).
    expires: Instant,
    tokio: tokio::runtime::Handle,
    /// What the request of each rehearsal takes from the last run's
    /// ([`Rehearsal::next`] makes it; a run only copies these).
    limits: Limits,
    context: crate::adapter::ScriptContext,
    mode: crate::adapter::Mode,
    tools: crate::adapter::ToolSet,
    tasks: Option<Arc<crate::tasks::DetachedTasks>>,
    /// The engine's setting (turned off: no more rehearsals) and count.
    keep_warm: KeepWarm,
}

/// The script a rehearsal runs: what every run does (the prelude's
/// install, a compile, a call, a job, the value through `JSON.stringify`)
/// and nothing more.
const REHEARSAL_SCRIPT: &str = "return 1 + 1";

/// Whether an engine keeps warm, and its count of rehearsals: the
/// state behind [`Tunable::tune`], shared by an
/// adapter's clones.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeepWarm {
    /// The window after each run, in µs (0: not at all).
    window_us: Arc<AtomicU64>,
    rehearsals: Arc<AtomicU64>,
    /// Whether a thread in its window stays awake between rehearsals
    /// ([`Tuning::keep_awake`]); the pool reads it.
    awake: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the engine anticipates runs that come at a steady pace
    /// ([`Tuning::anticipate`]); the pool reads it.
    anticipate: Arc<std::sync::atomic::AtomicBool>,
}

impl KeepWarm {
    /// Takes every setting of `tuning`: the window (cut to
    /// [`crate::tuning::MAX_KEEP_WARM`]; zero turns it off and ends one under way),
    /// whether a thread in it stays awake, whether runs are anticipated.
    /// What took effect, where the machine has CPUs for a poller or not
    /// (`can_stay_awake`).
    pub(crate) fn tune(&self, tuning: Tuning, can_stay_awake: bool) -> Tuned {
        let window = tuning.window();
        self.window_us
            .store(window.as_micros() as u64, Ordering::Relaxed);
        self.awake.store(tuning.keep_awake, Ordering::Relaxed);
        self.anticipate.store(tuning.anticipate, Ordering::Relaxed);
        let keeps_warm = !window.is_zero();
        Tuned {
            keeps_warm,
            keeps_awake: keeps_warm && tuning.keep_awake && can_stay_awake,
            anticipates: tuning.anticipate,
        }
    }

    /// Whether a thread in its window stays awake ([`KeepWarm::set_awake`]).
    pub(crate) fn awake(&self) -> bool {
        self.awake.load(Ordering::Relaxed)
    }

    /// The flag [`KeepWarm::set_awake`] sets, for the pool.
    pub(crate) fn awake_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.awake.clone()
    }

    /// The default [`Tuning`]: anticipates steady runs
    /// (`crate::anticipate`) and does not keep warm.
    pub(crate) fn anticipating() -> Self {
        let k = KeepWarm::default();
        k.tune(Tuning::default(), false);
        k
    }

    /// The flag [`KeepWarm::set_anticipate`] sets, for the pool.
    pub(crate) fn anticipate_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.anticipate.clone()
    }

    /// Rehearsals run so far.
    pub(crate) fn rehearsals(&self) -> u64 {
        self.rehearsals.load(Ordering::Relaxed)
    }

    fn window(&self) -> Duration {
        Duration::from_micros(self.window_us.load(Ordering::Relaxed))
    }

    /// For a run starting now: the setting to plan its rehearsals with,
    /// when the engine keeps warm, or anticipates and runs have been
    /// coming at a `steady` pace (`ThreadPool::steady`); nothing is
    /// cloned otherwise.
    pub(crate) fn for_run(&self, steady: bool) -> Option<KeepWarm> {
        let anticipated = steady && self.anticipate.load(Ordering::Relaxed);
        (anticipated || !self.window().is_zero()).then(|| self.clone())
    }
}

impl Rehearsal {
    /// The rehearsals after `last`, due for the window from now: the same
    /// tools, context, mode, limits and detached-task registry (so that
    /// the prelude's kept configuration still fits the next run), in the
    /// shared realm, with a fixed script and nothing that reaches anyone
    /// (no observer, span, traceparent or the caller's cancel token). The
    /// script calls no tool and spawns no task.
    pub(crate) fn after(
        last: &ExecutionRequest,
        keep_warm: KeepWarm,
        tokio: &tokio::runtime::Handle,
    ) -> Rehearsal {
        let mut limits = last.limits.clone();
        limits.realm = Some(crate::limits::Realm::Shared);
        let (until, expires) = Rehearsal::window_from(&keep_warm, Instant::now());
        Rehearsal {
            until,
            expires,
            tokio: tokio.clone(),
            limits,
            context: last.context.clone(),
            mode: last.mode,
            tools: last.tools.clone(),
            tasks: last.tasks.clone(),
            keep_warm,
        }
    }

    /// Whether the engine is kept awake as well as warm.
    pub(crate) fn awake(&self) -> bool {
        self.keep_warm.awake()
    }

    /// The keep-warm window's end and the plan's expiry, for a window
    /// starting at `now`.
    fn window_from(keep_warm: &KeepWarm, now: Instant) -> (Option<Instant>, Instant) {
        let window = keep_warm.window();
        let until = (!window.is_zero()).then(|| now + window);
        let anticipated = now + crate::anticipate::MAX_PAUSE + crate::anticipate::SLACK;
        (until, until.map_or(anticipated, |u| u.max(anticipated)))
    }

    /// The same, its window starting now (when the run it follows ended).
    pub(crate) fn starting_now(mut self) -> Rehearsal {
        (self.until, self.expires) = Rehearsal::window_from(&self.keep_warm, Instant::now());
        self
    }

    /// Whether a keep-warm rehearsal of `plan` is due: in its window,
    /// while the engine keeps warm. Drops a plan that expired
    /// ([`Rehearsal::ready`]); the pool drops one whose window passed when
    /// its thread sleeps (`ThreadPool::with_anticipation`'s `forget`).
    pub(crate) fn due(plan: &mut Option<Rehearsal>) -> bool {
        Rehearsal::ready(plan)
            && plan.as_ref().is_some_and(|p| {
                p.until.is_some_and(|u| Instant::now() < u) && !p.keep_warm.window().is_zero()
            })
    }

    /// Whether `plan` can still be rehearsed (for anticipation, or to keep
    /// warm); drops one that expired.
    pub(crate) fn ready(plan: &mut Option<Rehearsal>) -> bool {
        let ready = plan.as_ref().is_some_and(|p| Instant::now() < p.expires);
        if !ready {
            *plan = None;
        }
        ready
    }

    /// The next rehearsal's request and runtime, counted (the engine's
    /// count and the `keep_warm_rehearsals_total` metric).
    pub(crate) fn next(&self, engine: &str) -> (ExecutionRequest, tokio::runtime::Handle) {
        self.keep_warm.rehearsals.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("keep_warm_rehearsals_total", "engine" => engine.to_owned()).increment(1);
        let mut r = ExecutionRequest::new(REHEARSAL_SCRIPT);
        r.limits = self.limits.clone();
        r.context = self.context.clone();
        r.mode = self.mode;
        r.tools = self.tools.clone();
        r.tasks = self.tasks.clone();
        (r, self.tokio.clone())
    }
}
