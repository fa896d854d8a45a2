//! The rquickjs code written once for both QuickJS builds: the native
//! engine (`harness-quickjs`) and the WASI guest (`adapters/wasi/guest`,
//! QuickJS for `wasm32-wasip1`). Both give scripts the same intrinsics,
//! enforce the memory limit with the same counting allocator, and read and
//! classify QuickJS's exceptions the same way.

pub mod alloc;

pub use alloc::{AllocState, CountingAllocator};
pub use harness_abi::{classify_quickjs as classify, FaultKind};

use rquickjs::context::intrinsic;
use rquickjs::{Object, Runtime, Value};

/// Garbage a reused context may carry into the next run before it is
/// collected between runs. A collection marks the whole hardened context
/// (about 450,000 instructions, a third of a trivial run), and QuickJS
/// frees most of a run's garbage by reference counting anyway; what is
/// left is cycles (every function with a `prototype` is one). QuickJS
/// also collects on its own as a run allocates.
pub const GC_SLACK_BYTES: usize = 1 << 20;

/// Between runs on a reused context (both builds): collects when `force`
/// or once the heap has grown past `after_gc` (what the last collection
/// left) by [`GC_SLACK_BYTES`], and returns the new `after_gc`. QuickJS
/// would collect on its own once its heap passes 1.5 times what the last
/// collection left: with a hardened context that is every few runs, on
/// the critical path. Its threshold is set to let the runs leave the slack
/// first; past twice the slack (a run making cyclic garbage) QuickJS
/// collects as before.
pub fn collect_between_runs(
    rt: &Runtime,
    alloc: &AllocState,
    after_gc: usize,
    force: bool,
) -> usize {
    let after_gc = if force || alloc.used() > after_gc.saturating_add(GC_SLACK_BYTES) {
        rt.run_gc();
        alloc.used()
    } else {
        after_gc
    };
    rt.set_gc_threshold(after_gc.saturating_add(2 * GC_SLACK_BYTES));
    after_gc
}

/// Intrinsics a script gets: the language, no `Performance`, no
/// `DOMException`. `Eval` is needed to compile our own code; the prelude
/// makes `eval` and the function constructors throw for scripts.
pub type Intrinsics = (
    intrinsic::Date,
    intrinsic::Eval,
    intrinsic::RegExpCompiler,
    intrinsic::RegExp,
    intrinsic::Json,
    intrinsic::Proxy,
    intrinsic::MapSet,
    intrinsic::TypedArrays,
    intrinsic::Promise,
    intrinsic::WeakRef,
);

/// A caught exception, in the engine's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// What QuickJS's messages say it is.
    pub kind: FaultKind,
    /// The error's name; empty for a thrown non-object (QuickJS throws
    /// `null` when it cannot allocate an error: the caller judges that
    /// against its allocator).
    pub name: String,
    /// The error's message.
    pub message: String,
    /// The error's stack, for error objects.
    pub stack: Option<String>,
}

/// Reads a caught exception (`ctx.catch()`).
pub fn read_exception(v: Value<'_>) -> Exception {
    let Some(obj) = v.as_object() else {
        return Exception {
            kind: FaultKind::Thrown,
            name: String::new(),
            message: "a non-error value was thrown by the engine".to_owned(),
            stack: None,
        };
    };
    let get = |k: &str| {
        obj.get::<_, Option<String>>(k)
            .ok()
            .flatten()
            .unwrap_or_default()
    };
    let (mut name, message, stack) = (get("name"), get("message"), get("stack"));
    if name.is_empty() {
        // Errors made by plain constructors (test262's Test262Error) have
        // no `name`; their constructor's name says what they are.
        name = obj
            .get::<_, Option<Object>>("constructor")
            .ok()
            .flatten()
            .and_then(|c| c.get::<_, Option<String>>("name").ok().flatten())
            .unwrap_or_default();
    }
    Exception {
        kind: classify(&name, &message),
        name,
        message,
        stack: Some(stack),
    }
}
