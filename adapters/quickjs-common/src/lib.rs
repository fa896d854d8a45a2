//! The rquickjs code written once for both QuickJS builds: the native
//! engine (`harness-quickjs`) and the WASI guest (`adapters/wasi/guest`,
//! QuickJS for `wasm32-wasip1`). Both give scripts the same intrinsics,
//! enforce the memory limit with the same counting allocator, and read and
//! classify QuickJS's exceptions the same way.

pub mod alloc;

pub use alloc::{AllocState, CountingAllocator};
pub use harness_abi::{classify_quickjs as classify, FaultKind};

use rquickjs::context::intrinsic;
use rquickjs::{Ctx, Function, Object, Runtime, Value};

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

/// Strict global code: a harness script's wrapped source.
pub const STRICT_SCRIPT: u32 = rquickjs::qjs::JS_EVAL_FLAG_STRICT;
/// Compiled, not run.
pub const COMPILE_ONLY: u32 = rquickjs::qjs::JS_EVAL_FLAG_COMPILE_ONLY;

/// Evaluates (or with [`COMPILE_ONLY`], compiles) `source` as global code
/// named `file`, sloppy unless `flags` has [`STRICT_SCRIPT`]. QuickJS is
/// given the text's length: a NUL in a string literal or a comment is
/// JavaScript, which rquickjs's `eval` (a C string) would refuse; and
/// rquickjs has no safe call that only compiles.
#[allow(unsafe_code)]
pub fn eval_global<'js>(
    ctx: &Ctx<'js>,
    source: &str,
    file: &std::ffi::CStr,
    flags: u32,
) -> rquickjs::Result<Value<'js>> {
    use rquickjs::qjs;
    let mut code = Vec::with_capacity(source.len() + 1);
    code.extend_from_slice(source.as_bytes());
    code.push(0);
    // SAFETY: `code` is NUL-terminated and outlives the call (QuickJS reads
    // `len` bytes and wants the terminator); the value returned is owned,
    // and `Value` frees it once.
    let value = unsafe {
        let v = qjs::JS_Eval(
            ctx.as_raw().as_ptr(),
            code.as_ptr().cast(),
            source.len() as _,
            file.as_ptr(),
            (qjs::JS_EVAL_TYPE_GLOBAL | flags) as _,
        );
        Value::from_raw(ctx.clone(), v)
    };
    if value.is_exception() {
        Err(rquickjs::Error::Exception)
    } else {
        Ok(value)
    }
}

/// Runs global code [`eval_global`] compiled with [`COMPILE_ONLY`]: its
/// completion value. The compiled code is left as it was, to run again.
#[allow(unsafe_code)]
pub fn eval_compiled<'js>(ctx: &Ctx<'js>, compiled: &Value<'js>) -> rquickjs::Result<Value<'js>> {
    use rquickjs::qjs;
    // SAFETY: `JS_EvalFunction` takes one reference to the compiled code,
    // the one duplicated here; the value returned is owned, and `Value`
    // frees it once.
    let value = unsafe {
        let ctx_ptr = ctx.as_raw().as_ptr();
        let v = qjs::JS_EvalFunction(ctx_ptr, qjs::JS_DupValue(ctx_ptr, compiled.as_raw()));
        Value::from_raw(ctx.clone(), v)
    };
    if value.is_exception() {
        Err(rquickjs::Error::Exception)
    } else {
        Ok(value)
    }
}

/// Evaluates the host's end-of-run probe (harness-core's `end_check`) as
/// sloppy global code: the list the prelude's `end(list)` judges.
pub fn eval_probe<'js>(ctx: &Ctx<'js>, text: &str) -> rquickjs::Result<Value<'js>> {
    eval_global(ctx, text, c"end-check.js", 0)
}

/// A context's last probe and its list: a run of the same source is
/// judged by the same closures (they read the global scope when called,
/// and no script can reach them), instead of compiling them again.
pub type ProbeCache = Option<(String, rquickjs::Persistent<Value<'static>>)>;

/// [`eval_probe`] through `cache`.
pub fn cached_probe<'js>(
    ctx: &Ctx<'js>,
    cache: &mut ProbeCache,
    text: &str,
) -> rquickjs::Result<Value<'js>> {
    if let Some((cached, list)) = cache {
        if cached == text {
            return list.clone().restore(ctx);
        }
    }
    let list = eval_probe(ctx, text)?;
    *cache = Some((
        text.to_owned(),
        rquickjs::Persistent::save(ctx, list.clone()),
    ));
    Ok(list)
}

/// Ends the installed run with the prelude's `end`, given the value of
/// the run's end-of-run probe if it has one: true when the context may
/// serve another run. A probe that failed to evaluate still ends the run,
/// and drops the context.
pub fn end_run<'js>(
    ctx: &Ctx<'js>,
    end: &Function<'js>,
    list: Option<rquickjs::Result<Value<'js>>>,
) -> bool {
    let ended = match list {
        None => end.call::<_, bool>(()),
        Some(Ok(list)) => end.call::<_, bool>((list,)),
        Some(Err(_)) => {
            let _ = ctx.catch();
            let _ = end.call::<_, bool>(());
            Ok(false)
        }
    };
    ended.unwrap_or_else(|_| {
        let _ = ctx.catch();
        false
    })
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
