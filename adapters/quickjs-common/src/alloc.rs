//! A counting allocator for QuickJS that enforces the memory limit itself
//! and remembers when it refused an allocation.
//!
//! Why: when QuickJS runs out of memory it tries to throw an
//! `InternalError: out of memory`, but if that error cannot be allocated
//! either (or a later step of the rejection path cannot), the script sees a
//! bare `null` instead. Only the allocator knows for sure that the limit was
//! hit, so it records that, and the adapter reports ScriptMemoryError.
//!
//! It also remembers every block it handed out, so that whatever QuickJS
//! still holds when its runtime is freed (an engine leak: a reference
//! count an error path forgot, which keeps an object and everything it
//! reaches alive) is given back then rather than lost until the process
//! exits. See [`AllocState::reclaimed`].
//!
//! QuickJS's own malloc limit is left unset on purpose: it is checked
//! before the allocator is called, so a huge request it refused would not
//! be recorded here, and the OOM would look like an ordinary error. This
//! allocator is the one enforcer, covered by the memory tests. rquickjs's
//! `rust-alloc` feature (which replaces the allocator) is not used.

// The rquickjs `Allocator` trait is unsafe by nature (raw pointers handed to
// C); this module only delegates to rquickjs's own `RustAllocator` and keeps
// counters around it.
#![allow(unsafe_code)]

use rquickjs::allocator::{Allocator, RustAllocator};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Shared between the allocator (inside the runtime) and the worker.
#[derive(Debug)]
pub struct AllocState {
    limit: AtomicUsize,
    used: AtomicUsize,
    refused: AtomicBool,
    /// One more than the generation of the latest halted run (0: none):
    /// the run is halted while this equals `generation + 1`. Checking the
    /// generation and recording the halt are one atomic step, so a halt
    /// that the watchdog delivers late, after its run ended, cannot reach
    /// the time between runs or the next run.
    halted_for: AtomicUsize,
    /// Highest `used` since the last `arm`.
    peak: AtomicUsize,
    /// Counts `arm`s, so a late halt cannot reach the next run.
    generation: AtomicUsize,
    /// Bytes still admitted after a halt or refusal: room for the error
    /// that stops the script (see [`AllocState::grant_grace`]).
    grace: AtomicUsize,
    /// Bytes QuickJS still held when its runtime was freed, which the
    /// allocator then gave back (see [`AllocState::reclaimed`]).
    reclaimed: AtomicUsize,
}

/// Room for QuickJS's uncatchable `InternalError: interrupted` (an error
/// object and its message; a backtrace only if it fits).
const GRACE_BYTES: usize = 16 * 1024;

/// No limit: between runs, and while hardening a context ahead of time.
const UNLIMITED: usize = usize::MAX;

impl Default for AllocState {
    fn default() -> Self {
        AllocState {
            limit: AtomicUsize::new(UNLIMITED),
            used: AtomicUsize::new(0),
            refused: AtomicBool::new(false),
            halted_for: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            grace: AtomicUsize::new(0),
            reclaimed: AtomicUsize::new(0),
        }
    }
}

impl AllocState {
    /// Lifts the limit (after a run, before teardown).
    pub fn disarm(&self) {
        self.arm(UNLIMITED);
    }

    /// Sets the limit for the next run and forgets earlier refusals.
    pub fn arm(&self, limit: usize) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.limit.store(limit, Ordering::Relaxed);
        self.refused.store(false, Ordering::Relaxed);
        self.grace.store(0, Ordering::Relaxed);
        self.peak
            .store(self.used.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Peak heap bytes since the last `arm`.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Heap bytes allocated now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes QuickJS had not freed when its runtime was freed, given back
    /// by the allocator when the runtime dropped it: zero unless the
    /// engine leaked. quickjs-ng has such leaks on error paths that only
    /// a failed allocation takes (a halt at the deadline, the memory
    /// limit): `JSON.stringify` keeps an array element it fetched when
    /// turning the index into a string fails (`js_json_to_str`), and
    /// realising a lazy built-in written in JS keeps its arguments
    /// (`js_bytecode_eval`). One such reference keeps the object, its
    /// prototypes and with them the whole context alive; QuickJS (built
    /// with `NDEBUG`) then frees the runtime without freeing them. The
    /// runtime is gone by then, so nothing can reach those blocks.
    pub fn reclaimed(&self) -> usize {
        self.reclaimed.load(Ordering::Relaxed)
    }

    fn grew(&self, n: usize) {
        let now = self.used.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// The run is past its deadline or cancelled: refuse every allocation
    /// (without counting it as out-of-memory). QuickJS checks for
    /// interrupts only every 10,000 ticks, and a loop over heavy native
    /// calls (sorting, JSON of big data) ticks rarely; failing their
    /// allocations ends such work at once, so the next check comes soon.
    ///
    /// `generation` is the run's ([`AllocState::generation`] after its
    /// `arm`). The watchdog calls this from its own thread, possibly after
    /// the run ended: a halt for an earlier generation does nothing. (It
    /// once compared the generation and then set a flag, two steps; a
    /// watchdog preempted between them halted the allocator after its run
    /// ended, where the next run's context was being hardened, or even
    /// into the next run, which then failed as if its own deadline had
    /// passed.)
    pub fn halt(&self, generation: usize) {
        self.halted_for
            .fetch_max(generation.saturating_add(1), Ordering::AcqRel);
    }

    /// The interrupt handler is about to stop the script. QuickJS throws
    /// an uncatchable `InternalError: interrupted`, but only if it can
    /// allocate that error; if not, it throws a catchable `null`, and a
    /// script that catches everything (`for(;;) try { for(;;){} } catch
    /// {}`) would spin forever once the allocator is halted. Found by the
    /// `execute_quickjs` fuzz target. The grace lets that one error be
    /// allocated; it is granted again at each stop, never added up.
    pub fn grant_grace(&self) {
        self.grace.store(GRACE_BYTES, Ordering::Relaxed);
    }

    /// Takes `extra` bytes from the grace, if they fit.
    fn take_grace(&self, extra: usize) -> bool {
        self.grace
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                g.checked_sub(extra)
            })
            .is_ok()
    }

    /// The current run's generation, for [`AllocState::halt`].
    pub fn generation(&self) -> usize {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the run was stopped (allocations fail until disarmed).
    pub fn halted(&self) -> bool {
        self.halted_for.load(Ordering::Acquire)
            == self.generation.load(Ordering::Acquire).saturating_add(1)
    }

    /// Whether an allocation was refused since the last `arm`.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether `extra` more bytes fit; records a refusal when not. Once
    /// the limit was hit, every further allocation of the run is refused
    /// too: the run is ending with ScriptMemoryError, and refusing at once
    /// keeps a script that catches the error from grinding on at the cap
    /// between interrupt checks.
    fn admit(&self, extra: usize) -> bool {
        if self.refused.load(Ordering::Relaxed) || self.halted() {
            return self.take_grace(extra);
        }
        let used = self.used.load(Ordering::Relaxed);
        let limit = self.limit.load(Ordering::Relaxed);
        if used.saturating_add(extra) > limit {
            self.refused.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// Hashes a block's address: blocks are 8-byte aligned, so the low bits
/// carry nothing; a multiplication spreads the rest.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = ((n as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The allocator a QuickJS runtime is built with
/// (`Runtime::new_with_alloc`): rquickjs's own, counted against
/// [`AllocState`]'s limit. QuickJS serves small objects from 4 KB arenas
/// of its own, so this sees arenas and large blocks only (every block in
/// a sanitizer build).
#[allow(missing_debug_implementations)]
pub struct CountingAllocator {
    inner: RustAllocator,
    state: Arc<AllocState>,
    /// Every block handed out and not given back, by address.
    live: HashSet<usize, BuildHasherDefault<AddressHasher>>,
}

impl CountingAllocator {
    /// An allocator that counts against `state`.
    pub fn new(state: Arc<AllocState>) -> Self {
        CountingAllocator {
            inner: RustAllocator,
            state,
            live: HashSet::default(),
        }
    }
}

impl Drop for CountingAllocator {
    /// rquickjs drops the allocator after `JS_FreeRuntime`: a block still
    /// live is one the engine leaked, and is given back now.
    fn drop(&mut self) {
        let mut total = 0;
        for p in self.live.drain() {
            let p = p as *mut u8;
            // SAFETY: `p` was returned by RustAllocator and not given back
            // (it would have left `live`); the runtime that held it is
            // freed, so nothing will use or free it again.
            let n = unsafe { RustAllocator::usable_size(p) };
            total += n;
            // SAFETY: as above.
            unsafe { self.inner.dealloc(p) };
        }
        if total > 0 {
            self.state.used.fetch_sub(total, Ordering::Relaxed);
            self.state.reclaimed.fetch_add(total, Ordering::Relaxed);
        }
    }
}

// SAFETY: every pointer this allocator returns comes from `RustAllocator`
// and every pointer it is given back was returned by it, so delegating
// `dealloc`, `realloc` and `usable_size` upholds RustAllocator's contract.
// Null pointers are never passed on.
unsafe impl Allocator for CountingAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if size > isize::MAX as usize / 2 {
            self.state.refused.store(true, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        if !self.state.admit(size) {
            return std::ptr::null_mut();
        }
        let p = self.inner.alloc(size);
        if !p.is_null() {
            // SAFETY: `p` was just returned by RustAllocator.
            let n = unsafe { RustAllocator::usable_size(p) };
            self.state.grew(n);
            self.live.insert(p as usize);
        }
        p
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        // RustAllocator panics on overflow; a panic here would cross FFI.
        // A request no limit admits is refused like one over the limit:
        // recorded, so that a caught out-of-memory still ends the runtime.
        let total = count
            .checked_mul(size)
            .filter(|t| *t <= isize::MAX as usize / 2);
        let Some(total) = total else {
            self.state.refused.store(true, Ordering::Relaxed);
            return std::ptr::null_mut();
        };
        if !self.state.admit(total) {
            return std::ptr::null_mut();
        }
        let p = self.inner.calloc(count, size);
        if !p.is_null() {
            // SAFETY: `p` was just returned by RustAllocator.
            let n = unsafe { RustAllocator::usable_size(p) };
            self.state.grew(n);
            self.live.insert(p as usize);
        }
        p
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        // SAFETY: `ptr` came from this allocator (see the impl comment).
        let n = unsafe { RustAllocator::usable_size(ptr) };
        self.state.used.fetch_sub(n, Ordering::Relaxed);
        self.live.remove(&(ptr as usize));
        // SAFETY: as above.
        unsafe { self.inner.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        // SAFETY: `ptr` came from this allocator.
        let old = unsafe { RustAllocator::usable_size(ptr) };
        if new_size > isize::MAX as usize / 2 {
            self.state.refused.store(true, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        if new_size > old && !self.state.admit(new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from this allocator; on failure it stays valid.
        let p = unsafe { self.inner.realloc(ptr, new_size) };
        if !p.is_null() {
            if p != ptr {
                self.live.remove(&(ptr as usize));
                self.live.insert(p as usize);
            }
            // SAFETY: `p` was just returned by RustAllocator.
            let new = unsafe { RustAllocator::usable_size(p) };
            // The net change, as admitted: counting `new` before taking
            // `old` off would report a peak the limit never allowed.
            if new >= old {
                self.state.grew(new - old);
            } else {
                self.state.used.fetch_sub(old - new, Ordering::Relaxed);
            }
        }
        p
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: QuickJS only asks about pointers this allocator returned.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halted_allocator_admits_only_the_grace() {
        let s = AllocState::default();
        s.arm(1 << 20);
        assert!(s.admit(1024));
        s.halt(s.generation());
        assert!(!s.admit(16), "halted: refused");
        s.grant_grace();
        assert!(s.admit(256), "room for the interrupt error");
        assert!(!s.admit(GRACE_BYTES), "but no more than the grace");
        s.arm(1 << 20);
        assert!(s.admit(1024), "a new run starts clean");
        assert!(!s.take_grace(1), "with no grace left over");
    }

    /// Blocks still live when the allocator is dropped (after
    /// `JS_FreeRuntime`: an engine leak) are given back and counted; blocks
    /// freed or moved by `realloc` are not counted twice.
    #[test]
    fn dropping_the_allocator_gives_back_what_is_still_live() {
        let s = Arc::new(AllocState::default());
        let mut a = CountingAllocator::new(s.clone());
        let kept = a.alloc(1000);
        let freed = a.alloc(2000);
        let moved = a.calloc(10, 10);
        // SAFETY: pointers from this allocator, each given back once.
        let moved = unsafe {
            a.dealloc(freed);
            a.realloc(moved, 100_000)
        };
        assert!(!kept.is_null() && !moved.is_null());
        // SAFETY: as above.
        let live = unsafe { RustAllocator::usable_size(kept) + RustAllocator::usable_size(moved) };
        assert_eq!(s.used(), live);
        drop(a);
        assert_eq!(s.used(), 0);
        assert_eq!(s.reclaimed(), live);
    }

    /// The watchdog may deliver a run's halt after the run ended: while
    /// the worker tidies up (no limit, generation bumped by `disarm`),
    /// after a later run's halt, or during the next run. None of these may
    /// halt anything but the run the halt was for.
    #[test]
    fn a_late_halt_reaches_no_later_run() {
        let s = AllocState::default();
        s.arm(1 << 20);
        let first = s.generation();
        s.disarm();
        s.halt(first);
        assert!(!s.halted(), "not between runs");
        assert!(s.admit(1 << 30), "tidying up allocates freely");
        s.arm(1 << 20);
        let second = s.generation();
        s.halt(first);
        assert!(!s.halted() && s.admit(1024), "not in the next run");
        s.halt(second);
        assert!(s.halted(), "the next run's own halt works");
        s.halt(first);
        assert!(s.halted(), "and a late one does not undo it");
        s.arm(1 << 20);
        s.halt(second);
        assert!(!s.halted() && s.admit(1024));
    }
}
