//! Brief busy-waits, and the one rule for when they are allowed.
//!
//! On VMs whose idle CPUs halt, a blocked thread's wake-up waits tens of
//! microseconds for its CPU; a waiter that polls for a few tens of
//! microseconds first keeps its CPU awake for answers that come quickly
//! (docs/operations.md, "Busy-waiting"). Spinning is only worth it while
//! CPUs are free: each party that may spin counts itself in a counter for
//! as long as it may, and [`allowed`] compares that count with the CPUs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Counts one party in `counter` while it lives.
#[derive(Debug)]
pub(crate) struct Counted(&'static AtomicUsize);

impl Counted {
    pub(crate) fn begin(counter: &'static AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Counted(counter)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether those counted in `counter` may spin: only while each can have
/// a CPU for itself and another for whoever answers it (counted × 2 ≤
/// CPUs). Under load a spin takes the CPU another run needs (measured
/// before this rule: 2 runs in flight on 2 cores spent 10–20% more CPU per
/// script on Boa and WASI).
pub(crate) fn allowed(counter: &AtomicUsize) -> bool {
    counter.load(Ordering::Acquire) * 2 <= cores()
}

/// The CPUs this process may use (read once).
pub(crate) fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Polls `ready` until it says true or `budget` has passed, yielding the
/// CPU to anything runnable between polls; whether `ready` said true.
pub(crate) fn until(budget: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + budget;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::yield_now();
    }
}
