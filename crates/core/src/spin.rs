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
/// about to sleep (docs/performance.md, "The worker process moves off
/// its host thread's CPU"), and treats both as too cache-hot to move
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
