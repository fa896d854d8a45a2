//! The wall behind the parse: each engine's end-of-run check
//! (`harness_core::end_check`), held on the engine's own thread.
//!
//! No entry of the harness lets a source close its wrapper, so these
//! cases hand the engine a body that was never parsed
//! ([`Body::unchecked`]), as a parser that read the text otherwise than
//! oxc would: its global code declares bindings that outlive the run. The
//! engine must then drop the context (the next run has another
//! [`Engine::context_id`] and sees none of it), and must keep it after a
//! run that changed nothing (the same id: the check does not drop every
//! context).

use harness_core::body::Body;
use harness_core::engine::{Engine, EngineDescriptor, EngineSetup, EngineThread, Host, PRELUDE};
use harness_core::{CancellationToken, Limits};
use std::cell::RefCell;
use std::rc::Rc;

/// One case: a first run's source (never parsed) and whether its context
/// must be dropped.
#[derive(Debug, Clone, Copy)]
pub struct WallCase {
    /// The trial's name, after `ENGINE::end_check::`.
    pub name: &'static str,
    /// What the first run compiles in the wrapper, as it is.
    pub first: &'static str,
    /// The first run left something behind: its context must not serve
    /// the second.
    pub dropped: bool,
    /// The first run must fail (the engine itself refuses what it does).
    pub fails: bool,
}

/// The cases.
pub const CASES: &[WallCase] = &[
    WallCase {
        name: "a_let_at_the_top_level_drops_the_context",
        first: "}); let stash = []; (async function () {",
        dropped: true,
        fails: false,
    },
    WallCase {
        name: "a_const_function_drops_the_context",
        first: "}); const structuredClone = (v) => v; (async function () {",
        dropped: true,
        fails: false,
    },
    WallCase {
        name: "a_class_drops_the_context",
        first: "}); class Stash {} (async function () {",
        dropped: true,
        fails: false,
    },
    WallCase {
        name: "an_escaped_name_drops_the_context",
        first: "}); let st\\u0061sh = 1; (async function () {",
        dropped: true,
        fails: false,
    },
    WallCase {
        name: "shadowing_an_inherited_global_drops_the_context",
        first: "}); let toString = () => 'planted'; (async function () {",
        dropped: true,
        fails: false,
    },
    WallCase {
        name: "a_name_past_the_probe_limit_drops_the_context",
        first: TOO_MANY,
        dropped: true,
        fails: false,
    },
    WallCase {
        name: "a_var_on_the_frozen_global_object_fails",
        first: "}); var stash = []; (async function () {",
        dropped: true,
        fails: true,
    },
    WallCase {
        name: "a_function_declaration_on_the_frozen_global_object_fails",
        first: "}); function Stash() {} (async function () {",
        dropped: true,
        fails: true,
    },
    WallCase {
        name: "a_run_that_changed_nothing_keeps_the_context",
        first: "const stash = [Math.max(1, 2), JSON.stringify({toString: 1})]; \
                let structuredClone = stash.map(String); return typeof toString",
        dropped: false,
        fails: false,
    },
    WallCase {
        name: "contextual_words_are_probed_and_keep_the_context",
        first: "return {yield: 1, await: 2, static: 3, implements: 4, package: 5, \
                arguments: 6, eval: 7, async: 8, of: 9, get: 10, set: 11, interface: 12, \
                private: 13, protected: 14, public: 15, as: 16, from: 17, undefined: 18, \
                NaN: 19, globalThis: 20, __proto__: 21, constructor: 22, console: 23, \
                tools: 24, context: 25}",
        dropped: false,
        fails: false,
    },
];

/// A source with more distinct words than the probe takes, that changes
/// nothing.
const TOO_MANY: &str = include_str!("walls_many_names.js");

/// What the second run reads: every name the first runs above plant.
const SECOND: &str = "return [typeof stash, typeof structuredClone, typeof Stash, \
     String(toString === Object.prototype.toString)].join(' ')";

/// What the second run must answer.
const UNTOUCHED: &str = "\"undefined undefined undefined true\"";

/// A host that records the run's outcome and answers nothing else.
#[derive(Default)]
struct Recorder {
    done: RefCell<Option<String>>,
    failed: RefCell<Option<String>>,
}

impl Host for Recorder {
    fn call(&self, op: &str, a: &str, b: &str) -> String {
        match op {
            // `done` says whether a value came ("1"), then its JSON.
            "done" => *self.done.borrow_mut() = Some(if a == "1" { b } else { "" }.to_owned()),
            "fail" => *self.failed.borrow_mut() = Some(a.to_owned()),
            _ => {}
        }
        String::new()
    }
}

const CONFIG: &str = r#"{"run":{"scriptId":"end_check"},"static":{"tools":[],"sited":[],"spawn":false,"lineOffset":0,"context":{"sandbox":{"timeoutMs":5000,"memoryMb":64,"maxConcurrentToolCalls":1,"mode":"enabled"},"limits":{}}}}"#;

/// One run of `body` on `thread`, the way core's event loop drives one
/// that makes no call: its context id and what it returned.
fn run(thread: &mut dyn EngineThread, body: &Body) -> Result<(Option<u64>, String), String> {
    let limits = Limits::default();
    let cancel = CancellationToken::new();
    let setup = EngineSetup {
        prelude: PRELUDE,
        config_json: CONFIG,
        limits: &limits,
        deadline: std::time::Instant::now() + limits.timeout(),
        cancel: &cancel,
        suspendable: false,
    };
    let host = Rc::new(Recorder::default());
    let mut outcome = Err("the engine was not lent".to_owned());
    thread.lend(&mut |engine| {
        let engine: &mut dyn Engine = match engine {
            Ok(e) => e,
            Err(f) => {
                outcome = Err(format!("no engine: {}", f.message));
                return true;
            }
        };
        let steps = (|| {
            engine.load(&setup, host.clone()).map_err(|f| f.message)?;
            let id = engine.context_id();
            engine.start(body).map_err(|f| f.message)?;
            engine.run_jobs().map_err(|f| f.message)?;
            Ok(id)
        })();
        outcome = steps.and_then(|id| match (host.done.take(), host.failed.take()) {
            (Some(value), _) => Ok((id, value)),
            (None, Some(error)) => Err(format!("the run failed: {error}")),
            (None, None) => Err("the run did not finish".to_owned()),
        });
        outcome.is_err()
    });
    thread.idle();
    outcome
}

/// Runs `case` on a new thread of `engine`: `Err` says what went wrong.
pub fn check(engine: &EngineDescriptor, case: &WallCase) -> Result<(), String> {
    let mut thread = engine.worker_thread();
    // A context the thread has served a clean run in.
    let (warm, _) = run(
        thread.as_mut(),
        &Body::parse("return 1").map_err(|e| e.message)?,
    )?;
    let first = match run(thread.as_mut(), &Body::unchecked(case.first)) {
        Ok((first, _)) if !case.fails => first,
        Err(_) if case.fails => warm,
        Ok(_) => return Err("the first run did not fail".to_owned()),
        Err(e) => return Err(e),
    };
    if first.is_none() || first != warm {
        return Err(format!(
            "the first run did not land on the reused context ({warm:?}, then {first:?})"
        ));
    }
    if !case.dropped {
        // Again: judged by the probe the context compiled last time.
        let (again, _) = run(thread.as_mut(), &Body::unchecked(case.first))?;
        if again != first {
            return Err(format!(
                "the same run again lost its context ({first:?}, then {again:?})"
            ));
        }
    }
    let (second, seen) = run(
        thread.as_mut(),
        &Body::parse(SECOND).map_err(|e| e.message)?,
    )?;
    if seen != UNTOUCHED {
        return Err(format!("the next run saw what the first left: {seen}"));
    }
    match (case.dropped, second == first) {
        (true, true) => Err(format!("the context {first:?} served the next run")),
        (false, false) => Err(format!(
            "a run that changed nothing lost its context ({first:?}, then {second:?})"
        )),
        _ => Ok(()),
    }
}
