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

/// A yield that kept the thread away from its CPU at least this long
/// handed the CPU to another task until a scheduler tick: the CPU is
/// crowded. A yield to nothing takes about a microsecond, a yield to the
/// other side polling on the same CPU a few.
const CROWDED_YIELD: Duration = Duration::from_micros(100);

/// How long after leaving a crowded CPU a worker stays off the move that
/// parts it from its host thread (`process::worker::Apart`): that move
/// would take it back to the CPU it left.
const CROWDED_MEMORY: Duration = Duration::from_secs(1);

thread_local! {
    /// When this thread last left a crowded CPU.
    static LEFT_CROWDED: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// Whether the calling thread left a crowded CPU ([`until`]) within the
/// last [`CROWDED_MEMORY`].
pub(crate) fn left_crowded_lately() -> bool {
    LEFT_CROWDED
        .get()
        .is_some_and(|t| t.elapsed() < CROWDED_MEMORY)
}

/// Polls `ready` until it says true or `budget` has passed, yielding the
/// CPU to anything runnable between polls; whether `ready` said true.
///
/// A yield that took [`CROWDED_YIELD`] or more found the CPU crowded: a
/// busy task there takes the CPU at each yield until the next scheduler
/// tick (4 ms at 250 Hz), while the poller stays runnable, so it is
/// never woken and the scheduler never places it anew. So the poller
/// moves off that CPU ([`move_off`]) and polls on (with one busy task on one of 2 CPUs,
/// 13-17% of the runs of 100 tool calls behind the boundary took 30-418
/// ms before, instead of about 2).
pub(crate) fn until(budget: Duration, ready: impl FnMut() -> bool) -> bool {
    poll(budget, true, ready)
}

/// [`until`] on a caller's thread (one of the embedding program's, a
/// tokio worker perhaps), which it never moves: a crowded CPU costs that
/// caller one tick at most, since it polls for 200 µs at most and then
/// blocks.
pub(crate) fn until_in_place(budget: Duration, ready: impl FnMut() -> bool) -> bool {
    poll(budget, false, ready)
}

fn poll(budget: Duration, may_move: bool, mut ready: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + budget;
    loop {
        if ready() {
            return true;
        }
        let before = Instant::now();
        if before >= end {
            return false;
        }
        let cpu = this_cpu();
        std::thread::yield_now();
        if may_move && before.elapsed() >= CROWDED_YIELD {
            leave_crowded(cpu);
        }
    }
}

/// The CPU the calling thread is on, where the platform says.
fn this_cpu() -> Option<u32> {
    #[cfg(target_os = "linux")]
    return current_cpu();
    #[cfg(not(target_os = "linux"))]
    None
}

/// After a long yield that began on `cpu`: moves the calling thread off
/// that CPU unless the scheduler moved it already, and remembers when it
/// left.
fn leave_crowded(cpu: Option<u32>) {
    let now = this_cpu();
    let left = match (cpu, now) {
        (Some(before), Some(now)) if before != now => true,
        #[cfg(target_os = "linux")]
        (_, Some(now)) => move_off(now).is_some(),
        _ => false,
    };
    if left {
        LEFT_CROWDED.set(Some(Instant::now()));
    }
}

/// The CPU the calling thread runs on now (Linux; `None` elsewhere or if
/// the kernel will not say). Cheap: glibc reads it from the thread's
/// restartable-sequences area or the vDSO, without a system call.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn current_cpu() -> Option<u32> {
    // SAFETY: no arguments; it only reads the calling thread's CPU.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// Moves the calling thread off `cpu` onto another CPU it may use, then
/// lets it use every CPU it could before again (the kernel moves a thread
/// at once when its CPU leaves its affinity mask, and never back when
/// the mask is restored). Nothing is changed where the thread may only
/// use `cpu`, or is not on it. The CPU it moved to, if it moved.
///
/// Two parties that poll for each other's frames on one CPU hand it back
/// and forth at every frame (a context switch each, where two CPUs would
/// answer in a fraction of a microsecond); the scheduler puts them there
/// when one wakes the other through a pipe, which tells it the waker is
/// about to sleep, and treats both as too cache-hot to move
/// apart again within a run.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn move_off(cpu: u32) -> Option<u32> {
    let cpu = cpu as usize;
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `cpu_set_t` is plain bits, zeroed is an empty set; the
    // calls get its exact size and only read or write that set, for the
    // calling thread (pid 0); `cpu` is checked against the set's size
    // before the CPU_* macros index it.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * size
            || libc::sched_getaffinity(0, size, &mut mask) != 0
            || !libc::CPU_ISSET(cpu, &mask)
            || libc::CPU_COUNT(&mask) < 2
            || current_cpu() != Some(cpu as u32)
        {
            return None;
        }
        let mut elsewhere = mask;
        libc::CPU_CLR(cpu, &mut elsewhere);
        if libc::sched_setaffinity(0, size, &elsewhere) != 0 {
            return None;
        }
        let landed = current_cpu();
        // Restoring can only fail if the allowed CPUs changed meanwhile
        // (a cpuset moved): the thread then keeps the narrower mask, which
        // still holds every CPU but one of what it had.
        let _ = libc::sched_setaffinity(0, size, &mask);
        landed
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn affinity() -> Vec<usize> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: as in `move_off`.
        unsafe {
            let mut mask: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, size, &mut mask), 0);
            (0..8 * size)
                .filter(|&c| libc::CPU_ISSET(c, &mask))
                .collect()
        }
    }

    #[allow(unsafe_code)]
    fn set_affinity(cpus: &[usize]) {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: as in `move_off`; every CPU given came from the mask.
        unsafe {
            let mut mask: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut mask);
            }
            assert_eq!(libc::sched_setaffinity(0, size, &mask), 0);
        }
    }

    #[test]
    fn a_poller_leaves_a_cpu_that_a_busy_task_holds() {
        std::thread::spawn(|| {
            let cpus = affinity();
            if cpus.len() < 2 {
                eprintln!("one CPU only: leaving a crowded CPU is not tried");
                return;
            }
            let (busy, other) = (cpus[0], cpus[1]);
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let hog = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    set_affinity(&[busy]);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            };
            assert!(!left_crowded_lately());
            // Onto the busy task's CPU, free to leave it; then poll for
            // something that never comes. A yield there hands the CPU to
            // the busy task until a tick, or the scheduler moves us: tries
            // in case the busy task was not running yet.
            let left = (0..20).any(|_| {
                set_affinity(&[busy]);
                set_affinity(&[busy, other]);
                assert!(!until(Duration::from_millis(20), || false));
                left_crowded_lately()
            });
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            hog.join().unwrap();
            assert!(left, "a poller on a busy task's CPU left it");
            assert_eq!(affinity(), vec![busy, other], "the mask is kept");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_moves_off_its_cpu_and_keeps_every_cpu_it_had() {
        std::thread::spawn(|| {
            let before = affinity();
            let here = current_cpu().expect("Linux says which CPU");
            assert!(before.contains(&(here as usize)));
            if before.len() < 2 {
                // Nowhere to go: nothing changes.
                assert_eq!(move_off(here), None);
                assert_eq!(affinity(), before);
                eprintln!("one CPU only: moving off it is not tried");
                return;
            }
            // The kernel may move the thread between reading its CPU and
            // the call (which then does nothing): try a few times.
            let moved = (0..1000).find_map(|_| {
                let here = current_cpu()?;
                Some((here, move_off(here)?))
            });
            let (from, to) = moved.expect("moved off its CPU within 1,000 tries");
            assert_ne!(from, to);
            assert!(before.contains(&(to as usize)));
            assert_eq!(affinity(), before, "the mask is restored");
            assert_eq!(move_off(u32::MAX), None, "no such CPU");
        })
        .join()
        .unwrap();
    }
}
