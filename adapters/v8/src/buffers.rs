//! The `ArrayBuffer` allocator: typed arrays and `ArrayBuffer`s live
//! outside the V8 heap, so the heap limit does not see them. This one
//! counts their bytes against the run's memory limit and refuses past it
//! (V8 then throws `RangeError: Array buffer allocation failed`, which the
//! adapter reports as ScriptMemoryError).

// V8 calls this allocator through a C vtable: raw pointers and `unsafe
// extern "C"` functions are the interface. Each block says why it holds.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Alignment of every backing store (what `calloc` gives V8 by default).
const ALIGN: usize = 16;

/// Bytes of backing stores in use, their peak and the limit, shared by
/// the isolate's allocator and the worker that arms it for each run.
#[derive(Default)]
pub(crate) struct BufferBudget {
    used: AtomicUsize,
    peak: AtomicUsize,
    /// 0 means "no run armed": nothing is refused (V8's own setup).
    limit: AtomicUsize,
    refused: AtomicBool,
    /// Called on a refusal: stops the script at once, as the memory limit
    /// is fatal for the run even if the script catches the RangeError.
    on_refuse: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for BufferBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferBudget")
            .field("used", &self.used)
            .field("limit", &self.limit)
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

impl BufferBudget {
    /// What to do when an allocation is refused (set once, by the isolate).
    pub(crate) fn on_refuse(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_refuse.set(Box::new(f));
    }

    fn refuse(&self) {
        self.refused.store(true, Ordering::SeqCst);
        if let Some(f) = self.on_refuse.get() {
            f();
        }
    }

    /// Sets the limit for a run and clears its peak and refusal.
    pub(crate) fn arm(&self, limit: usize) {
        self.limit.store(limit.max(1), Ordering::SeqCst);
        self.peak
            .store(self.used.load(Ordering::SeqCst), Ordering::SeqCst);
        self.refused.store(false, Ordering::SeqCst);
    }

    pub(crate) fn disarm(&self) {
        self.limit.store(0, Ordering::SeqCst);
    }

    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Whether an allocation was refused since the run was armed.
    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    /// Takes `n` bytes from the budget, or refuses.
    fn reserve(&self, n: usize) -> bool {
        let limit = self.limit.load(Ordering::SeqCst);
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let Some(next) = used.checked_add(n) else {
                self.refuse();
                return false;
            };
            if limit != 0 && next > limit {
                self.refuse();
                return false;
            }
            match self
                .used
                .compare_exchange(used, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::SeqCst);
                    return true;
                }
                Err(now) => used = now,
            }
        }
    }

    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::SeqCst);
    }
}

fn layout(n: usize) -> Option<Layout> {
    Layout::from_size_align(n.max(1), ALIGN).ok()
}

/// Allocates `n` bytes (zeroed or not) within the budget; null refuses.
fn allocate_with(budget: &BufferBudget, n: usize, zeroed: bool) -> *mut c_void {
    let Some(layout) = layout(n) else {
        budget.refuse();
        return std::ptr::null_mut();
    };
    if !budget.reserve(n) {
        return std::ptr::null_mut();
    }
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe {
        if zeroed {
            std::alloc::alloc_zeroed(layout)
        } else {
            std::alloc::alloc(layout)
        }
    };
    if p.is_null() {
        budget.release(n);
    }
    p.cast()
}

unsafe extern "C" fn allocate(budget: &BufferBudget, n: usize) -> *mut c_void {
    allocate_with(budget, n, true)
}

unsafe extern "C" fn allocate_uninitialized(budget: &BufferBudget, n: usize) -> *mut c_void {
    allocate_with(budget, n, false)
}

unsafe extern "C" fn free(budget: &BufferBudget, data: *mut c_void, n: usize) {
    if data.is_null() {
        return;
    }
    if let Some(layout) = layout(n) {
        // SAFETY: V8 frees what `allocate_with` returned, with its length.
        unsafe { std::alloc::dealloc(data.cast(), layout) };
        budget.release(n);
    }
}

unsafe extern "C" fn drop_budget(budget: *const BufferBudget) {
    // SAFETY: the pointer came from `Arc::into_raw` in `allocator`.
    drop(unsafe { Arc::from_raw(budget) });
}

static VTABLE: v8::RustAllocatorVtable<BufferBudget> = v8::RustAllocatorVtable {
    allocate,
    allocate_uninitialized,
    free,
    drop: drop_budget,
};

/// A V8 `ArrayBuffer::Allocator` drawing on `budget`.
pub(crate) fn allocator(budget: &Arc<BufferBudget>) -> v8::UniqueRef<v8::Allocator> {
    // SAFETY: the handle is a leaked Arc that `drop_budget` reclaims, and
    // the vtable's functions match its type.
    unsafe { v8::new_rust_allocator(Arc::into_raw(budget.clone()), &VTABLE) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_past_its_limit_and_keeps_the_peak() {
        let b = BufferBudget::default();
        b.arm(100);
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        b.on_refuse(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        assert!(b.reserve(60));
        assert!(!b.reserve(60));
        assert!(b.refused());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the isolate is told");
        b.release(60);
        assert!(b.reserve(100));
        assert_eq!(b.peak(), 100);
        b.release(100);
        assert_eq!(b.used(), 0);
        b.disarm();
        assert!(b.reserve(usize::MAX / 2), "disarmed: nothing refused");
    }

    #[test]
    fn allocations_round_trip_through_the_vtable() {
        let b = BufferBudget::default();
        b.arm(1 << 20);
        let p = allocate_with(&b, 4096, true);
        assert!(!p.is_null());
        assert_eq!(b.used(), 4096);
        // SAFETY: `p` came from `allocate_with` with this length.
        unsafe { free(&b, p, 4096) };
        assert_eq!(b.used(), 0);
        assert!(allocate_with(&b, 2 << 20, false).is_null());
        let z = allocate_with(&b, 0, true);
        assert!(!z.is_null());
        // SAFETY: as above.
        unsafe { free(&b, z, 0) };
    }
}
