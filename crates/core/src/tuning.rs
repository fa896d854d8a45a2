//! How an engine spends idle CPU so that its next run starts sooner.
//!
//! Tuning is not part of what an engine is ([`ScriptRuntimeAdapter`]): it
//! belongs to the scheduler that runs the engine's threads, a pool in
//! this process ([`crate::engine::Pooled`]) or the host threads of the
//! process boundary ([`crate::process::ProcessAdapter`]). Both take one
//! [`Tuning`] value through [`Tunable::tune`] and say what took effect on
//! this machine ([`Tuned`]). A wrapper around an engine written as a
//! [`crate::layer::Layer`] forwards tuning to the engine it wraps by
//! construction.
//!
//! What each setting costs is in docs/performance.md; a library embedded
//! in someone's server spends nothing while idle with the defaults
//! (anticipation only wakes for runs that come at a steady pace).
//!
//! [`ScriptRuntimeAdapter`]: crate::ScriptRuntimeAdapter

use std::time::Duration;

/// The longest keep-warm window honoured: one minute (longer asks are cut
/// to it).
pub const MAX_KEEP_WARM: Duration = Duration::from_secs(60);

/// How a scheduler spends idle CPU on its engine's next run. The default
/// keeps nothing warm and anticipates steady runs.
///
/// ```
/// use harness_core::tuning::Tuning;
/// use std::time::Duration;
/// let t = Tuning::default().with_keep_warm(Duration::from_millis(50));
/// assert!(t.anticipate && !t.keep_awake);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tuning {
    /// How long after each run the thread that ran it keeps the engine
    /// warm (zero: not at all): while it waits it rehearses a trivial run
    /// about every 0.8 ms, with the same tools, context and limits and a
    /// fixed script that nobody hears of, so that a run arriving within
    /// the window finds the caches warm. A few per cent of a core per
    /// thread in its window; cut to [`MAX_KEEP_WARM`]. Behind the process
    /// boundary the host thread rehearses through its worker process,
    /// warming both.
    pub keep_warm: Duration,
    /// While kept warm, whether a thread in its window also stays awake
    /// between rehearsals, polling for the next run instead of sleeping,
    /// so that its CPU does not halt. One thread of the engine at a time,
    /// and only while the machine has CPUs for the busy runs, the next
    /// one and a caller besides the poller; most of a CPU for each window.
    pub keep_awake: bool,
    /// Whether runs that come at a steady pace are anticipated: after the
    /// same pause, give or take a little, before each of the last 8 runs,
    /// the thread that will take the next one wakes shortly before it is
    /// due, rehearses once and waits for it awake until shortly after.
    /// Lone runs and irregular traffic cost nothing; steady runs cost that
    /// short awake stretch per pause (at most half the pause). Where the
    /// CPUs do not allow waiting awake it only rehearses ahead of the run.
    pub anticipate: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            keep_warm: Duration::ZERO,
            keep_awake: false,
            anticipate: true,
        }
    }
}

impl Tuning {
    /// Keeps warm for `window` after each run ([`Tuning::keep_warm`]).
    pub fn with_keep_warm(mut self, window: Duration) -> Self {
        self.keep_warm = window;
        self
    }

    /// Stays awake while kept warm ([`Tuning::keep_awake`]).
    pub fn with_keep_awake(mut self, awake: bool) -> Self {
        self.keep_awake = awake;
        self
    }

    /// Anticipates steady runs or not ([`Tuning::anticipate`]).
    pub fn with_anticipate(mut self, on: bool) -> Self {
        self.anticipate = on;
        self
    }

    /// The keep-warm window as a scheduler honours it.
    pub(crate) fn window(&self) -> Duration {
        self.keep_warm.min(MAX_KEEP_WARM)
    }
}

/// What a scheduler does of a [`Tuning`] on this machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tuned {
    /// Its threads keep warm after each run.
    pub keeps_warm: bool,
    /// A thread in its window stays awake between rehearsals (the CPUs
    /// allow it).
    pub keeps_awake: bool,
    /// It anticipates runs at a steady pace.
    pub anticipates: bool,
}

/// The scheduler side of an engine: what takes a [`Tuning`]. Every
/// [`ScriptRuntimeAdapter`](crate::ScriptRuntimeAdapter) is one; an
/// engine that schedules nothing keeps the defaults, which tune nothing.
pub trait Tunable {
    /// Applies every setting of `tuning` at once (a window of zero also
    /// ends one under way) and says what took effect. Default: nothing.
    fn tune(&self, tuning: Tuning) -> Tuned {
        let _ = tuning;
        Tuned::default()
    }

    /// Rehearsals run so far to keep warm or to anticipate; each costs
    /// about one trivial run of CPU (also the `keep_warm_rehearsals_total`
    /// metric). Default: none.
    fn rehearsals(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_over_a_minute_is_cut_to_one() {
        let t = Tuning::default().with_keep_warm(Duration::from_secs(3600));
        assert_eq!(t.window(), MAX_KEEP_WARM);
        assert_eq!(Tuning::default().window(), Duration::ZERO);
    }
}
