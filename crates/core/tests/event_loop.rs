//! The event loop without a JavaScript engine: a scripted fake engine
//! drives [`run_script`] through every way a run can end.
//!
//! The fake stands in for an engine and the prelude together: instead of
//! running JavaScript it performs a list of host operations (a tool call,
//! the outcome, a lost race) at `start` and at each settled call, or stops
//! the way a real engine would (interrupted at the deadline or on cancel,
//! out of memory, an internal fault).

use harness_core::engine::{
    run_script, Engine, EngineFault, EngineSetup, FaultKind, HostHandle, RunOutput,
};
use harness_core::{
    CallStatus, CancellationToken, ErrorCode, ExecutionRequest, FnTool, Phase, ToolError,
    ToolRegistry, ToolSet,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the fake script does, one host operation (or stop) at a time.
#[derive(Debug, Clone)]
enum Step {
    /// `tools.NAME(args)`: a call the loop dispatches.
    Call(&'static str, Value),
    /// `return VALUE` (`None`: returned undefined).
    Done(Option<Value>),
    /// Threw: the prelude's description of the error.
    Fail(Value),
    /// Let go of the n-th call this script made (a lost `Promise.race`).
    Release(usize),
    /// Runs until the engine's interrupt handler fires (deadline or cancel).
    Spin,
    /// The engine stops with this fault.
    Fault(FaultKind),
}

#[derive(Default)]
struct Fake {
    /// Steps run by `start`.
    on_start: Vec<Step>,
    /// Steps run when the n-th call settles.
    on_settle: Vec<Vec<Step>>,
    host: Option<HostHandle>,
    call_ids: Vec<String>,
    /// Calls answered with their outcome in the op, settled at the next
    /// `run_jobs`, as the prelude's promise reactions would run.
    answered: Vec<(u64, bool, String)>,
    settled: Vec<(u64, bool, String)>,
    deadline: Option<Instant>,
    cancel: Option<CancellationToken>,
    exhausted: bool,
    config: Value,
    /// How often the loop said it was finished with the engine.
    finished: u32,
    /// The loop used the engine after it said it was finished.
    used_after_finished: std::cell::Cell<bool>,
}

impl Fake {
    fn script(on_start: Vec<Step>) -> Self {
        Fake {
            on_start,
            ..Fake::default()
        }
    }

    fn then_on_settle(mut self, steps: Vec<Step>) -> Self {
        self.on_settle.push(steps);
        self
    }

    /// Notes a use of the engine (after `finished`, a bug in the loop).
    fn used(&self) {
        if self.finished > 0 {
            self.used_after_finished.set(true);
        }
    }

    fn host(&self, op: &str, a: &str, b: &str) -> String {
        self.host.as_ref().expect("loaded").call(op, a, b)
    }

    /// A call's promise settled: the steps that follow it run.
    fn settled_with(&mut self, id: u64, ok: bool, payload: String) -> Result<(), EngineFault> {
        self.settled.push((id, ok, payload));
        if self.on_settle.is_empty() {
            return Ok(());
        }
        let steps = self.on_settle.remove(0);
        self.perform(steps)
    }

    fn perform(&mut self, steps: Vec<Step>) -> Result<(), EngineFault> {
        for step in steps {
            match step {
                Step::Call(tool, args) => {
                    let answer = self.host("call", tool, &args.to_string());
                    // Ids are dense from 1; a call that finished at once
                    // is answered with its outcome (` JSON`, `!ID\nJSON`).
                    let id = self.call_ids.len() as u64 + 1;
                    if let Some(json) = answer.strip_prefix(' ') {
                        self.answered.push((id, true, json.to_owned()));
                    } else if let Some(rest) = answer.strip_prefix('!') {
                        let (n, json) = rest.split_once('\n').expect("id, newline, failure");
                        assert_eq!(n, id.to_string());
                        self.answered.push((id, false, json.to_owned()));
                    } else {
                        assert_eq!(answer, id.to_string());
                    }
                    self.call_ids.push(id.to_string());
                }
                Step::Done(None) => {
                    self.host("done", "0", "");
                }
                Step::Done(Some(v)) => {
                    self.host("done", "1", &v.to_string());
                }
                Step::Fail(desc) => {
                    self.host("fail", &desc.to_string(), "");
                }
                Step::Release(n) => {
                    let id = self.call_ids[n].clone();
                    self.host("cancel", &id, "");
                }
                Step::Spin => {
                    let (deadline, cancel) = (self.deadline.unwrap(), self.cancel.clone().unwrap());
                    while Instant::now() < deadline && !cancel.is_cancelled() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    return Err(EngineFault::new(
                        FaultKind::Interrupted,
                        "InternalError",
                        "interrupted",
                    ));
                }
                Step::Fault(kind) => {
                    self.exhausted |= kind == FaultKind::OutOfMemory;
                    return Err(EngineFault::new(
                        kind,
                        "InternalError",
                        "the fake engine stopped",
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Engine for Fake {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        self.used();
        self.config = serde_json::from_str(setup.config_json).expect("config is JSON");
        self.deadline = Some(setup.deadline);
        self.cancel = Some(setup.cancel.clone());
        self.host = Some(host);
        Ok(())
    }

    fn start(&mut self, body: &harness_core::body::Body) -> Result<(), EngineFault> {
        assert!(body.wrapped().starts_with("(async function () {\n"));
        self.used();
        let steps = std::mem::take(&mut self.on_start);
        self.perform(steps)
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        self.used();
        while !self.answered.is_empty() {
            let (id, ok, payload) = self.answered.remove(0);
            self.settled_with(id, ok, payload)?;
        }
        Ok(())
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        self.used();
        self.settled_with(id, ok, payload.to_owned())
    }

    fn memory_used(&mut self) -> Option<u64> {
        self.used();
        Some(4096)
    }

    fn memory_exhausted(&mut self) -> bool {
        self.used();
        self.exhausted
    }

    fn classify(&self, name: &str, message: &str) -> FaultKind {
        self.used();
        match (name, message) {
            ("InternalError", "interrupted") => FaultKind::Interrupted,
            _ => FaultKind::Thrown,
        }
    }

    fn finished(&mut self) {
        self.finished += 1;
    }
}

fn tools() -> ToolSet {
    let mut r = ToolRegistry::new();
    r.register(FnTool::new(
        "echo",
        "Returns its arguments",
        json!({"type": "object"}),
        |args, _| async move { Ok(args) },
    ))
    .unwrap();
    r.register(FnTool::new(
        "slow",
        "Waits until cancelled",
        json!({"type": "object"}),
        |_, ctx| async move {
            // A well-behaved tool: it stops when its call is cancelled.
            ctx.cancel.cancelled().await;
            Err(ToolError::new("stopped: the call was cancelled"))
        },
    ))
    .unwrap();
    ToolSet::new(Arc::new(r))
}

fn run_with(engine: &mut Fake, request: ExecutionRequest) -> RunOutput {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut request = request;
    request.tools = tools();
    run_script(engine, "fake", request, rt.handle())
}

fn run(engine: &mut Fake) -> RunOutput {
    run_with(engine, ExecutionRequest::new("return 1"))
}

fn code(out: &RunOutput) -> Option<ErrorCode> {
    out.report.error.as_ref().map(|e| e.code)
}

#[test]
fn a_returned_value_is_the_report_value() {
    let mut e = Fake::script(vec![Step::Done(Some(json!({"a": [1, 2]})))]);
    let out = run(&mut e);
    assert!(out.report.ok, "{:?}", out.report);
    assert_eq!(out.report.value, Some(json!({"a": [1, 2]})));
    assert!(!out.engine_tainted);
    assert_eq!(out.report.metrics.engine, "fake");
    assert_eq!(out.report.metrics.memory_used_bytes, Some(4096));
    // The prelude's configuration names the tools the script may call.
    assert_eq!(e.config["static"]["tools"], json!(["echo", "slow"]));
}

#[test]
fn undefined_is_no_value() {
    let out = run(&mut Fake::script(vec![Step::Done(None)]));
    assert!(out.report.ok);
    assert_eq!(out.report.value, None);
}

#[test]
fn a_tool_call_settles_and_the_script_returns_its_result() {
    let mut e = Fake::script(vec![Step::Call("echo", json!({"x": 1}))])
        .then_on_settle(vec![Step::Done(Some(json!("after the call")))]);
    let out = run(&mut e);
    assert!(out.report.ok, "{:?}", out.report);
    assert_eq!(out.report.value, Some(json!("after the call")));
    assert_eq!(e.settled.len(), 1);
    let (id, ok, payload) = &e.settled[0];
    assert!(*ok);
    assert_eq!(id.to_string(), e.call_ids[0]);
    assert_eq!(
        serde_json::from_str::<Value>(payload).unwrap(),
        json!({"x": 1})
    );
    assert_eq!(out.report.tool_calls.len(), 1);
    assert_eq!(out.report.tool_calls[0].status, CallStatus::Ok);
}

#[test]
fn a_thrown_error_is_a_script_runtime_error() {
    let desc = json!({"host": false, "name": "TypeError", "message": "x is not a function",
                      "stack": "at <anonymous> (script.js:2:3)"});
    let out = run(&mut Fake::script(vec![Step::Fail(desc)]));
    let err = out.report.error.clone().unwrap();
    assert_eq!(err.code, ErrorCode::ScriptRuntimeError);
    assert_eq!(err.phase, Phase::Executing);
    assert_eq!(err.message, "Uncaught TypeError: x is not a function");
    assert!(
        !out.engine_tainted,
        "a thrown error leaves the engine healthy"
    );
}

#[test]
fn a_compile_fault_is_a_syntax_error_with_a_location() {
    let mut fault = EngineFault::new(FaultKind::Syntax, "SyntaxError", "unexpected token");
    fault.stack = Some("    at script.js:2:5".to_owned());
    struct Broken(Fake, EngineFault);
    impl Engine for Broken {
        fn load(&mut self, s: &EngineSetup<'_>, h: HostHandle) -> Result<(), EngineFault> {
            self.0.load(s, h)
        }
        fn start(&mut self, _: &harness_core::body::Body) -> Result<(), EngineFault> {
            Err(self.1.clone())
        }
        fn run_jobs(&mut self) -> Result<(), EngineFault> {
            Ok(())
        }
        fn settle(&mut self, _: u64, _: bool, _: &str) -> Result<(), EngineFault> {
            Ok(())
        }
        fn memory_used(&mut self) -> Option<u64> {
            None
        }
        fn classify(&self, _: &str, _: &str) -> FaultKind {
            FaultKind::Thrown
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let out = run_script(
        &mut Broken(Fake::default(), fault),
        "fake",
        // A body oxc accepts: the fault is the engine's own.
        ExecutionRequest::new("let x =\nfoo"),
        rt.handle(),
    );
    let err = out.report.error.unwrap();
    assert_eq!(err.code, ErrorCode::ScriptSyntaxError);
    assert_eq!(err.phase, Phase::Parsing);
    assert!(err.message.contains("script.js:1:5"), "{}", err.message);
}

#[test]
fn the_deadline_stops_the_run_and_taints_the_engine() {
    let mut request = ExecutionRequest::new("for (;;) {}");
    request.limits.timeout_ms = 50;
    let t = Instant::now();
    let out = run_with(&mut Fake::script(vec![Step::Spin]), request);
    assert_eq!(code(&out), Some(ErrorCode::ScriptTimeoutError));
    assert!(out.engine_tainted);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn cancelling_stops_the_run() {
    let request = ExecutionRequest::new("for (;;) {}");
    let token = request.cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        token.cancel();
    });
    let out = run_with(&mut Fake::script(vec![Step::Spin]), request);
    assert_eq!(code(&out), Some(ErrorCode::ScriptCancelledError));
    assert!(out.engine_tainted);
}

#[test]
fn running_out_of_memory_is_a_memory_error() {
    let out = run(&mut Fake::script(vec![Step::Fault(FaultKind::OutOfMemory)]));
    assert_eq!(code(&out), Some(ErrorCode::ScriptMemoryError));
    assert!(out.engine_tainted);
}

#[test]
fn a_caught_out_of_memory_still_fails_the_run() {
    // The script caught the error and returned, but the heap was exhausted.
    let mut e = Fake::script(vec![Step::Done(Some(json!("caught it")))]);
    e.exhausted = true;
    let out = run(&mut e);
    assert_eq!(code(&out), Some(ErrorCode::ScriptMemoryError));
    assert_eq!(out.report.value, None);
    assert!(out.engine_tainted);
}

#[test]
fn waiting_on_nothing_is_a_deadlock() {
    let out = run(&mut Fake::script(vec![]));
    let err = out.report.error.unwrap();
    assert_eq!(err.code, ErrorCode::ScriptRuntimeError);
    assert!(
        err.message.contains("nothing can settle"),
        "{}",
        err.message
    );
    assert!(!out.engine_tainted);
}

#[test]
fn returning_with_calls_in_flight_reports_the_orphans() {
    let mut e = Fake::script(vec![
        Step::Call("slow", json!({})),
        Step::Done(Some(json!(1))),
    ]);
    let out = run(&mut e);
    let err = out.report.error.clone().unwrap();
    assert_eq!(err.code, ErrorCode::DetachedPromiseError);
    assert!(err.message.contains("slow#"), "{}", err.message);
    assert_eq!(out.report.tool_calls.len(), 1);
    assert_eq!(out.report.tool_calls[0].status, CallStatus::Cancelled);
}

#[test]
fn the_loser_of_a_race_is_cancelled_without_an_error() {
    let mut e = Fake::script(vec![
        Step::Call("slow", json!({})),
        Step::Call("echo", json!({"won": true})),
    ])
    .then_on_settle(vec![Step::Release(0), Step::Done(Some(json!("won")))]);
    let out = run(&mut e);
    assert!(out.report.ok, "{:?}", out.report);
    assert_eq!(out.report.value, Some(json!("won")));
    let status = |tool: &str| {
        out.report
            .tool_calls
            .iter()
            .find(|c| c.tool == tool)
            .map(|c| c.status)
    };
    assert_eq!(status("echo"), Some(CallStatus::Ok));
    assert_eq!(status("slow"), Some(CallStatus::Cancelled));
}

#[test]
fn an_engine_fault_taints_the_engine() {
    let out = run(&mut Fake::script(vec![Step::Fault(FaultKind::Internal)]));
    assert_eq!(code(&out), Some(ErrorCode::HarnessInternalError));
    assert!(out.engine_tainted);
}

#[test]
fn an_unknown_tool_fails_its_call_with_the_reason() {
    let mut e =
        Fake::script(vec![Step::Call("nope", json!({}))]).then_on_settle(vec![Step::Done(None)]);
    let out = run(&mut e);
    assert!(out.report.ok, "{:?}", out.report);
    let (_, ok, payload) = &e.settled[0];
    assert!(!ok);
    let failure: Value = serde_json::from_str(payload).unwrap();
    assert_eq!(failure["code"], json!("ToolNotFoundError"));
}

/// `Engine::finished` lets a worker process tidy up while the host builds
/// the report: it must come once, after the loop's last use of the engine
/// (a classify, a memory figure), however the run ends.
#[test]
fn the_loop_says_once_that_it_is_finished_with_the_engine_after_its_last_use() {
    let ends: Vec<(Fake, Option<ErrorCode>)> = vec![
        (Fake::script(vec![Step::Done(Some(json!(1)))]), None),
        (
            Fake::script(vec![Step::Call("echo", json!({}))])
                .then_on_settle(vec![Step::Done(None)]),
            None,
        ),
        (
            // An engine's `interrupted` that the host did not cause (no
            // deadline passed, nothing cancelled) is the script's own throw.
            Fake::script(vec![Step::Fail(
                json!({"name": "InternalError", "message": "interrupted"}),
            )]),
            Some(ErrorCode::ScriptRuntimeError),
        ),
        (
            Fake::script(vec![Step::Fault(FaultKind::OutOfMemory)]),
            Some(ErrorCode::ScriptMemoryError),
        ),
        (Fake::script(vec![]), Some(ErrorCode::ScriptRuntimeError)),
    ];
    for (mut fake, expected) in ends {
        let out = run(&mut fake);
        assert_eq!(code(&out), expected, "{:?}", out.report.error);
        assert_eq!(fake.finished, 1, "{:?}", out.report.error);
        assert!(!fake.used_after_finished.get(), "{:?}", out.report.error);
    }
    let mut request = ExecutionRequest::new("for (;;) {}");
    request.limits.timeout_ms = 30;
    let mut fake = Fake::script(vec![Step::Spin]);
    let out = run_with(&mut fake, request);
    assert_eq!(code(&out), Some(ErrorCode::ScriptTimeoutError));
    assert_eq!(fake.finished, 1);
    assert!(!fake.used_after_finished.get());
}
