//! Anticipating the next run: when runs come at a steady pace (a fleet
//! worker draining a queue, an evaluation loop, a host that calls every
//! few milliseconds), an idle engine thread wakes a little before the next
//! run is due, rehearses once and waits for it awake, instead of halting
//! its CPU until the run's own wake-up.
//!
//! On VMs whose idle vCPUs halt, a run that arrives on a halted CPU after
//! a pause of 2 ms costs 4-10× what it costs back to back (the wake-up
//! itself, and caches the host emptied meanwhile). Keeping the engine awake
//! through a whole window after each run (`keep_warm_awake`) removes that
//! but spends a CPU for the whole window, after a lone run as well. This
//! spends only the stretch around the predicted arrival, and only while
//! the last [`SAMPLES`] pauses agree: the pool notes when its last busy
//! worker went idle and how long until the next run came ([`Arrivals`]);
//! while the shortest and longest of those pauses, leaving out one of
//! each ([`TRIM`]: a caller's late wake-up on a VM with steal, a pause
//! that one slow run made), are close together (the awake stretch,
//! [`LEAD`] before the shortest to [`SLACK`] after the longest, is at most
//! half the shortest), the worker sleeps until [`LEAD`] before the
//! shortest pause ends, rehearses, and polls until [`SLACK`] after the
//! longest ([`Plan`]). A pause outside that pattern is simply one more
//! sample: a run that comes later than planned finds its thread asleep
//! as without anticipation, one that comes sooner wakes it early, and
//! a second pause outside the pattern within [`SAMPLES`] stops
//! anticipation until the pattern holds again. Lone runs and irregular
//! traffic cost nothing.

use std::time::{Duration, Instant};

/// Pauses remembered, and needed before anticipating.
pub(crate) const SAMPLES: usize = 8;

/// The shortest and longest pauses left out of the pattern: one each.
pub(crate) const TRIM: usize = 1;

/// How long before the shortest recent pause ends the worker wakes: time
/// for the timer's slack (about 50 µs on Linux), a rehearsal on cold
/// caches (60-100 µs) and some jitter in the caller.
pub(crate) const LEAD: Duration = Duration::from_micros(300);

/// How long after the longest recent pause the worker stays awake.
pub(crate) const SLACK: Duration = Duration::from_micros(200);

/// The longest pause anticipated: past it, a run's own wake-up is a small
/// part of the pause, and pacing that regular is rare.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(100);

/// When a worker that went idle should wake for the next run, and until
/// when it waits awake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) wake_at: Instant,
    pub(crate) awake_until: Instant,
}

/// The pool's recent pauses between going idle and the next run.
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    /// The last [`SAMPLES`] pauses in µs, oldest overwritten first.
    pauses: [u32; SAMPLES],
    len: usize,
    next: usize,
    /// When the pool's last busy worker went idle, while none is busy.
    idle_since: Option<Instant>,
}

impl Arrivals {
    /// The pool's last busy worker went idle at `now`.
    pub(crate) fn idle(&mut self, now: Instant) {
        self.idle_since = Some(now);
    }

    /// A run was submitted at `now`, finding `busy` workers busy: the
    /// pause since the pool went idle counts only if none was.
    pub(crate) fn arrived(&mut self, now: Instant, busy: usize) {
        let Some(since) = self.idle_since.take() else {
            return;
        };
        if busy > 0 {
            return;
        }
        let us = now.saturating_duration_since(since).as_micros();
        self.pauses[self.next] = u32::try_from(us).unwrap_or(u32::MAX);
        self.next = (self.next + 1) % SAMPLES;
        self.len = (self.len + 1).min(SAMPLES);
    }

    /// The plan for the pause that began when the pool last went idle, if
    /// the recent pauses are regular enough (module docs).
    pub(crate) fn plan(&self) -> Option<Plan> {
        let since = self.idle_since?;
        if self.len < SAMPLES {
            return None;
        }
        let mut sorted = self.pauses;
        sorted.sort_unstable();
        let lo = Duration::from_micros(u64::from(sorted[TRIM]));
        let hi = Duration::from_micros(u64::from(sorted[SAMPLES - 1 - TRIM]));
        if hi > MAX_PAUSE {
            return None;
        }
        let awake = (hi - lo) + LEAD + SLACK;
        if awake > lo / 2 {
            return None;
        }
        Some(Plan {
            wake_at: since + (lo - LEAD),
            awake_until: since + hi + SLACK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(pauses: &[u64]) -> (Arrivals, Instant) {
        let mut a = Arrivals::default();
        let mut t = Instant::now();
        for &p in pauses {
            a.idle(t);
            t += Duration::from_micros(p);
            a.arrived(t, 0);
            t += Duration::from_micros(50);
        }
        a.idle(t);
        (a, t)
    }

    #[test]
    fn regular_pauses_plan_a_wake_before_the_shortest_and_stay_until_after_the_longest() {
        // Leaving out the shortest (2,050) and the longest (2,200).
        let (a, t) = after(&[2_100, 2_050, 2_200, 2_080, 2_120, 2_060, 2_150, 2_090]);
        let plan = a.plan().expect("regular");
        assert_eq!(plan.wake_at, t + Duration::from_micros(2_060) - LEAD);
        assert_eq!(plan.awake_until, t + Duration::from_micros(2_150) + SLACK);
        // One pause far out either way (a late caller, a quick one) does
        // not break the pattern.
        let (a, t) = after(&[2_000, 2_000, 9_000, 2_000, 2_100, 2_000, 300, 2_000]);
        let plan = a.plan().expect("one outlier each way is left out");
        assert_eq!(plan.wake_at, t + Duration::from_micros(2_000) - LEAD);
        assert_eq!(plan.awake_until, t + Duration::from_micros(2_100) + SLACK);
    }

    #[test]
    fn too_few_irregular_short_or_long_pauses_plan_nothing() {
        // Seven pauses are not enough.
        assert_eq!(after(&[2_000; SAMPLES - 1]).0.plan(), None);
        // Two pauses of seconds among them.
        let mut p = [2_000; SAMPLES];
        p[3] = 3_000_000;
        p[6] = 3_000_000;
        assert_eq!(after(&p).0.plan(), None);
        // Spread too wide for the shortest pause.
        let mut p = [2_000; SAMPLES];
        p[5] = 2_600;
        p[1] = 2_600;
        assert_eq!(after(&p).0.plan(), None);
        // Back to back: the awake stretch would be longer than the pause.
        assert_eq!(after(&[20; SAMPLES]).0.plan(), None);
        // Regular but slow: past `MAX_PAUSE`.
        assert_eq!(after(&[200_000; SAMPLES]).0.plan(), None);
        // Steady pacing at 10 ms is anticipated.
        assert!(after(&[10_000; SAMPLES]).0.plan().is_some());
    }

    #[test]
    fn a_run_beside_a_busy_worker_is_no_pause() {
        let (mut a, t) = after(&[2_000; SAMPLES]);
        assert!(a.plan().is_some());
        // Submitted while another run was in flight: not a pause, and
        // nothing to plan until the pool is idle again.
        a.arrived(t + Duration::from_micros(10), 1);
        assert_eq!(a.plan(), None);
        a.idle(t + Duration::from_micros(500));
        assert!(a.plan().is_some(), "the pauses remembered still hold");
    }
}
