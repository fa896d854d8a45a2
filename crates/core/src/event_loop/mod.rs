//! The one event loop every engine runs on.
//!
//! An adapter supplies only engine primitives through [`Engine`]: load the
//! prelude into a fresh context, start the script, drain jobs, settle a tool
//! call, measure memory. [`run_script`] does the rest, the same way for
//! every engine: hand each tool call to the tool facade the moment the
//! script makes it (polled there once, then wherever its waker finds room:
//! see `CallSlot`), block until the next completion or the deadline,
//! settle, repeat; then cancel what is left, wait out the grace period and
//! build the report.

use crate::adapter::{ExecutionRequest, Mode};
use crate::durable::{Answer, Durable, Header, HostSnapshot, Resume, Waiting};
use crate::error::{clamp_location, first_location, sanitize_stack, ErrorCode, Phase, ScriptError};
use crate::error::{ErrorMetadata, Location};
use crate::facade::{Admission, CallFailure, CallOutcome, CallSite, ToolFacade};
use crate::limits::Limits;
use crate::primitives::{Engine, EngineFault, EngineSetup, FaultKind, Host, HostHandle, HostOp};
use crate::report::{CallError, CallStatus, Warning};
use crate::report::{ConsoleLevel, ExecutionReport, Metrics};
use crate::sinks::{ms, ConsoleSink, ProgressSink};
use crate::tasks::{DetachedTasks, TaskStatus};
use crate::tracker::PromiseTracker;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub use harness_abi::{PRELUDE, PRELUDE_FILE};

use crate::body::Body;
/// Lines the wrapper adds before the user's first line.
use crate::body::LINE_OFFSET as WRAPPER_LINE_OFFSET;

mod calls;
mod config;
mod driving;
mod host;
mod outcome;

use calls::*;
use config::*;
use driving::*;
use host::*;
pub use host::{HostState, REFUSED_CALLS_KEPT};
use outcome::*;
pub(crate) use outcome::{is_parse_failure, Failure};
pub use outcome::{parse_error, syntax_error};

/// The result of [`run_script`].
#[derive(Debug)]
#[non_exhaustive]
pub struct RunOutput {
    /// The run's report.
    pub report: ExecutionReport,
    /// The engine hit a fault (timeout, memory, stack, internal) and should
    /// not be reused for another run.
    pub engine_tainted: bool,
}

/// Runs one script on `engine` and reports. `tokio` runs the tool calls.
///
/// The run has four parts, each a function of its own: `new_host` (the
/// per-run state the engine's native function talks to),
/// `LoopControl::drive` (load, start, and the loop of jobs, tool calls and
/// settles until the script settles or is stopped), `wind_down` (cancel
/// what is still pending, give it the grace period) and
/// `LoopControl::conclude` with `final_error` and `build_report` (the
/// report's value, error and records).
pub fn run_script<E: Engine + ?Sized>(
    engine: &mut E,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
) -> RunOutput {
    run(engine, engine_name, request, tokio, Told::Everyone)
}

/// A rehearsal (`Pooled::keep_warm`): the run as any other, to warm the
/// caches, but nobody hears of it: no span, no metrics; the report is
/// dropped. Returns whether the engine is tainted.
pub(crate) fn rehearse<E: Engine + ?Sized>(
    engine: &mut E,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
) -> bool {
    run(engine, engine_name, request, tokio, Told::Nobody).engine_tainted
}

/// Whose business a run is: telemetry's (a script's run) or nobody's (a
/// rehearsal).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Told {
    Everyone,
    Nobody,
}

fn run<E: Engine + ?Sized>(
    engine: &mut E,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
    told: Told,
) -> RunOutput {
    let started = Instant::now();
    let limits = request.limits.clone();
    if let Err(e) = crate::source::check_size(request.source.len(), limits.max_source_bytes) {
        return RunOutput {
            report: ExecutionReport::failed(engine_name, e),
            engine_tainted: false,
        };
    }
    let durable = request.durable.clone();
    let resume = request.resume.clone();
    if (durable.is_some() || resume.is_some()) && !engine.can_suspend() {
        let e = ScriptError::new(
            ErrorCode::UnsupportedError,
            Phase::Parsing,
            format!(
                "{engine_name} cannot suspend a run; runs that suspend and resume need the wasi engine (--engine wasi)"
            ),
        );
        return RunOutput {
            report: ExecutionReport::failed(engine_name, e),
            engine_tainted: false,
        };
    }
    let prior = resume.as_ref().map(|r| &r.header.host);
    let time_left = prior.map_or(limits.timeout(), |h| Duration::from_millis(h.left_ms));
    let deadline = started + time_left;
    let cancel = request.cancel.clone();
    let script_id = prior.map_or_else(new_script_id, |h| h.script_id.clone());
    let facade = Arc::new(ToolFacade::new(&request, deadline, &script_id));
    if let Some(r) = &resume {
        if let Err(why) = resumable(r, engine_name, &request, &facade) {
            let e = ScriptError::new(ErrorCode::ContinuationInvalidError, Phase::Parsing, why);
            return RunOutput {
                report: ExecutionReport::failed(engine_name, e),
                engine_tainted: false,
            };
        }
    }
    if let Some(o) = &request.observer {
        o.0.started(&script_id);
    }
    let (tx, rx) = mpsc::channel::<LoopEvent>();
    let starter = Starter {
        tx: tx.clone(),
        loop_waiting: Arc::default(),
        tokio: tokio.clone(),
    };
    let loop_waiting = starter.loop_waiting.clone();
    let host = new_host(
        &request,
        &facade,
        (started, deadline),
        script_id.clone(),
        starter,
    );
    if let Some(h) = prior {
        restore(&mut host.borrow_mut(), h);
        facade.restore(h.budget_used, h.approvals_asked, h.approvals.clone());
    }

    let config = prelude_config(&request, &facade, &script_id);
    // One span per run (no source, no arguments at info level); tool calls
    // are spans inside it. A host's span in the request is the parent.
    let span = match told {
        Told::Nobody => tracing::Span::none(),
        Told::Everyone => tracing::info_span!(
            parent: request.trace.as_ref().and_then(|s| s.id()),
            "script_run",
            script_id = %script_id,
            engine = engine_name,
            isolation = request.limits.isolation.map_or("", |i| i.as_str()),
            provider = request.context.provider.as_deref().unwrap_or(""),
            outcome = tracing::field::Empty,
        ),
    };
    let _entered = span.enter();
    let setup = EngineSetup {
        prelude: PRELUDE,
        config_json: &config,
        limits: &limits,
        deadline,
        cancel: &cancel,
        suspendable: durable.is_some(),
    };

    let mut ctl = LoopControl {
        engine,
        host: host.clone(),
        tx,
        tokio,
        deadline,
        cancel: cancel.clone(),
        watch: None,
        loop_waiting,
    };
    let end = ctl.drive(&setup, &request.source, &rx, resume.as_deref());
    if let End::Unresumable(f) = &end {
        // Nothing of the continuation ran: a report of that alone.
        let e = ScriptError::new(
            ErrorCode::ContinuationInvalidError,
            Phase::Parsing,
            format!("the continuation cannot resume here: {}", f.message),
        );
        host.borrow_mut().observer = None;
        return RunOutput {
            report: ExecutionReport::failed(engine_name, e),
            engine_tainted: true,
        };
    }
    let memory_used = ctl.engine.memory_used();
    let fuel_consumed = ctl.engine.fuel_consumed();
    let context_id = ctl.engine.context_id();
    let prior_ms = prior.map_or(0.0, |h| h.elapsed_ms);
    if let (End::Suspended, Some(durable)) = (&end, &durable) {
        let mut report = suspend(
            &mut ctl,
            durable,
            (&request, &facade, engine_name),
            (started, deadline, prior_ms),
            (memory_used, fuel_consumed),
        );
        report.context_id = context_id;
        ctl.engine.finished();
        host.borrow_mut().observer = None;
        if told == Told::Everyone {
            crate::telemetry::record_run(&report, 0, &counted(prior));
        }
        span.record("outcome", crate::telemetry::report_outcome(&report));
        return RunOutput {
            report,
            engine_tainted: true,
        };
    }
    let memory_exhausted = ctl.engine.memory_exhausted();
    let pending_at_end = host.borrow().tracker.pending_count() as u32;
    let timed_out = matches!(end, End::Timeout);
    let orphans = wind_down(&host, &rx, &limits, tokio);
    if !orphans.is_empty() {
        tracing::warn!(orphans = orphans.len(), calls = %orphans.join(", "), "tool calls left pending at the end of the script were cancelled");
    }

    // An engine that hit a fault, was stopped, or ran out of memory (even
    // if the script caught it) is not trusted with another run; nor is
    // one a run that may suspend was in (it was fresh for that run),
    // unless it is a session's, whose realm is its own.
    let engine_tainted = memory_exhausted
        || (durable.is_some() && !ctl.engine.in_session())
        || matches!(end, End::Fault(_) | End::Timeout | End::Cancelled);
    let (value, error) = ctl.conclude(end, &limits, memory_exhausted, &request.source);
    ctl.engine.finished();
    let (value, error) = final_error(value, error, memory_exhausted, &orphans, &limits);
    // A stack overflow the script's promise rejected with (caught and
    // rethrown, or uncaught in an async frame) is a fault too: the engine
    // hit its stack limit in this context.
    let engine_tainted = engine_tainted
        || error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::StackOverflowError && e.phase != Phase::Parsing);

    // The engine may keep the host state alive (its native function holds
    // it until the context is collected); the observer must not outlive
    // the run.
    host.borrow_mut().observer = None;
    let error = error.map(|mut e| {
        let records = host.borrow().tracker.records();
        let finished = records
            .iter()
            .filter(|r| matches!(r.status, CallStatus::Ok | CallStatus::Error))
            .count() as u32;
        e.metadata = Some(ErrorMetadata {
            elapsed_ms: ms(started.elapsed()) + prior_ms,
            completed_tools: finished,
            pending_tools: pending_at_end,
            partial_results: timed_out && finished > 0,
        });
        e
    });
    let mut report = build_report(
        &host.borrow(),
        &facade,
        engine_name,
        started,
        (value, error),
        (memory_used, fuel_consumed),
    );
    report.context_id = context_id;
    report.metrics.duration_ms += prior_ms;
    if told == Told::Everyone {
        crate::telemetry::record_run(&report, orphans.len(), &counted(prior));
    }
    span.record("outcome", crate::telemetry::report_outcome(&report));
    RunOutput {
        report,
        engine_tainted,
    }
}

/// Whether `r` may resume here: on the engine that made it, before it
/// expired, for the tools and limits it was made under.
fn resumable(
    r: &Resume,
    engine_name: &str,
    request: &ExecutionRequest,
    facade: &ToolFacade,
) -> Result<(), String> {
    let h = &r.header;
    if h.engine != engine_name {
        return Err(format!(
            "the continuation was made by the {} engine, not {engine_name}",
            h.engine
        ));
    }
    if crate::durable::now_ms() > h.expires_at_ms {
        return Err(format!(
            "the continuation expired at {}",
            crate::durable::rfc3339(h.expires_at_ms)
        ));
    }
    if crate::durable::fingerprint(
        &request.limits,
        &format!("{:?}", request.mode),
        &request.tools.registry,
        facade.visible_tools(),
    ) != h.fingerprint
    {
        return Err(
            "the continuation was made for other tools or limits than this harness has".to_owned(),
        );
    }
    Ok(())
}

/// What the suspended part of a resumed run counted in the metrics.
fn counted(prior: Option<&HostSnapshot>) -> crate::telemetry::Counted {
    let Some(h) = prior else {
        return crate::telemetry::Counted::default();
    };
    crate::telemetry::Counted {
        ms: h.elapsed_ms,
        calls: h
            .calls
            .iter()
            .filter(|c| c.status != CallStatus::Pending)
            .map(|c| c.id)
            .collect(),
    }
}

/// A resumed run's host state, as the suspended run left it.
fn restore(h: &mut HostState, snap: &HostSnapshot) {
    h.tracker = PromiseTracker::restore(&snap.calls);
    h.console.entries = snap.console.clone();
    h.console.dropped = snap.console_dropped;
    h.progress.events = snap.progress.clone();
    h.progress.dropped = snap.progress_dropped;
    h.calls_dropped = snap.calls_dropped;
    h.warnings = snap.warnings.clone();
}

/// Puts a run away that waits only on answers from outside: the engine's
/// image and the host's state, sealed, in a report whose `suspension`
/// says what it waits on.
fn suspend<E: Engine + ?Sized>(
    ctl: &mut LoopControl<'_, E>,
    durable: &Durable,
    (request, facade, engine_name): (&ExecutionRequest, &ToolFacade, &str),
    (started, deadline, prior_ms): (Instant, Instant, f64),
    used: (Option<u64>, Option<u64>),
) -> ExecutionReport {
    let failed = |why: String| {
        let e = ScriptError::internal(format!("the run could not be suspended: {why}"));
        (None, Some(e))
    };
    let in_session = ctl.engine.in_session();
    let sealed = ctl
        .engine
        .suspend()
        .map_err(|f| f.message)
        .and_then(|image| {
            let h = ctl.host.borrow();
            let snap = HostSnapshot {
                script_id: h.script_id.clone(),
                elapsed_ms: prior_ms + ms(started.elapsed()),
                left_ms: deadline
                    .saturating_duration_since(Instant::now())
                    .as_millis() as u64,
                calls: h.tracker.records(),
                console: h.console.entries.clone(),
                console_dropped: h.console.dropped,
                progress: h.progress.events.clone(),
                progress_dropped: h.progress.dropped,
                approvals: facade.approval_records(),
                approvals_asked: facade.approvals_asked(),
                budget_used: facade.budget_used(),
                calls_dropped: h.calls_dropped,
                warnings: h.warnings.clone(),
                waiting: h.waiting.clone(),
                session: in_session,
            };
            let id = crate::durable::new_id();
            let expires_at_ms = crate::durable::now_ms().saturating_add(durable.max_suspended_ms);
            let fingerprint = crate::durable::fingerprint(
                &request.limits,
                &format!("{:?}", request.mode),
                &request.tools.registry,
                facade.visible_tools(),
            );
            let header = Header::new(id.clone(), engine_name, expires_at_ms, fingerprint, snap);
            let plain = crate::durable::encode(&header, &image)?;
            let sealed = durable.sealer.seal(&id, &plain)?;
            Ok((id, expires_at_ms, sealed))
        });
    let outcome = match &sealed {
        Ok(_) => (None, None),
        Err(why) => failed(why.clone()),
    };
    let mut report = build_report(
        &ctl.host.borrow(),
        facade,
        engine_name,
        started,
        outcome,
        used,
    );
    report.metrics.duration_ms += prior_ms;
    if let Ok((id, expires_at_ms, sealed)) = sealed {
        use base64::Engine as _;
        report.ok = false;
        report.suspension = Some(crate::report::Suspension {
            continuation: base64::engine::general_purpose::STANDARD.encode(sealed),
            id,
            pending: ctl
                .host
                .borrow()
                .waiting
                .iter()
                .map(|w| w.call.clone())
                .collect(),
            expires_at: crate::durable::rfc3339(expires_at_ms),
        });
    }
    report
}

/// The per-run state the engine's native function talks to.
fn new_host(
    request: &ExecutionRequest,
    facade: &Arc<ToolFacade>,
    (started, deadline): (Instant, Instant),
    script_id: String,
    starter: Starter,
) -> Rc<RefCell<HostState>> {
    let limits = &request.limits;
    Rc::new(RefCell::new(HostState {
        started,
        deadline,
        facade: facade.clone(),
        tracker: PromiseTracker::default(),
        console: ConsoleSink::new(limits),
        progress: ProgressSink::new(limits),
        starter,
        cancel: request.cancel.clone(),
        finished: Vec::new(),
        outcome: None,
        observer: request.observer.clone(),
        call_names: std::collections::HashMap::new(),
        max_attempts: (limits.max_tool_calls as usize).saturating_add(REFUSED_CALLS_KEPT),
        calls_dropped: 0,
        script_id,
        tasks: (request.mode == Mode::Enabled)
            .then(|| request.tasks.clone())
            .flatten(),
        run_tasks: Vec::new(),
        tasks_live: 0,
        warnings: Vec::new(),
        waiting: Vec::new(),
    }))
}

/// After the loop: cancels the calls still pending, waits out the grace
/// period for them, and abandons the rest. Returns the orphans: calls the
/// script neither awaited nor let go of (`tool#id`).
fn wind_down(
    host: &Rc<RefCell<HostState>>,
    rx: &mpsc::Receiver<LoopEvent>,
    limits: &Limits,
    tokio: &tokio::runtime::Handle,
) -> Vec<String> {
    // Calls that finished on their first poll, inside the op, after the
    // loop last looked (the script faulted, timed out or was cancelled in
    // that job): they ran, so they are recorded as they ended, not as
    // orphans.
    let finished = std::mem::take(&mut host.borrow_mut().finished);
    for (id, o) in finished {
        host.borrow_mut().record(id, &o);
    }
    let orphans = host.borrow().tracker.orphans();
    // Calls that waited on an answer from outside, in a run that ended
    // otherwise, end as they say they would.
    let waiting = std::mem::take(&mut host.borrow_mut().waiting);
    for w in waiting {
        let code = match w.call.kind {
            crate::report::PendingKind::Approval => ErrorCode::ApprovalDeniedError,
            _ => ErrorCode::ToolExecutionError,
        };
        let failure = CallFailure::new(code, "the run ended before this call's answer came");
        host.borrow_mut().record(w.call.call_id, &Err(failure));
    }
    host.borrow().tracker.cancel_all_pending();
    let grace_end = Instant::now() + limits.orphan_grace();
    while host.borrow().tracker.pending_count() > 0 {
        let left = grace_end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(left) {
            Ok(LoopEvent::ToolDone(id, o)) => {
                host.borrow_mut().record(id, &o);
            }
            // Sent while the main loop still waited.
            Ok(LoopEvent::Poll(slot)) => {
                let outcome = {
                    let _rt = tokio.enter();
                    slot.poll_once()
                };
                if let Some(o) = outcome {
                    host.borrow_mut().record(slot.id, &o);
                }
            }
            Ok(LoopEvent::Stop | LoopEvent::TaskDone(..)) => {}
            Err(_) => break,
        }
    }
    let mut h = host.borrow_mut();
    for id in h.tracker.detach_remaining() {
        h.tell_finished(id, Some(ErrorCode::DetachedPromiseError));
    }
    orphans
}

/// The rules that override how the script itself ended: hitting the
/// memory limit fails the run on every engine (even if the script caught
/// the error and returned), and a script that returned with calls still
/// pending fails with DetachedPromiseError.
fn final_error(
    value: Option<Value>,
    error: Option<ScriptError>,
    memory_exhausted: bool,
    orphans: &[String],
    limits: &Limits,
) -> (Option<Value>, Option<ScriptError>) {
    if memory_exhausted && error.as_ref().map(|e| e.code) != Some(ErrorCode::ScriptMemoryError) {
        let oom = EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory");
        return (None, Some(fault_error(&oom, limits)));
    }
    if error.is_none() && !orphans.is_empty() {
        let error = ScriptError::new(
            ErrorCode::DetachedPromiseError,
            Phase::Finalizing,
            format!(
                "the script finished while {} tool call(s) were still pending and not awaited ({}); \
                 they were cancelled. Await every tool call, e.g. with Promise.all",
                orphans.len(),
                orphans.join(", ")
            ),
        );
        return (value, Some(error));
    }
    (value, error)
}

/// The report of a finished run.
fn build_report(
    h: &HostState,
    facade: &ToolFacade,
    engine_name: &str,
    started: Instant,
    (value, error): (Option<Value>, Option<ScriptError>),
    (memory_used, fuel_consumed): (Option<u64>, Option<u64>),
) -> ExecutionReport {
    let tool_calls = h.tracker.records();
    ExecutionReport {
        ok: error.is_none(),
        value,
        error,
        console: h.console.entries.clone(),
        console_dropped: h.console.dropped,
        tool_calls_dropped: h.calls_dropped,
        approvals: facade.approval_records(),
        progress: h.progress.events.clone(),
        progress_dropped: h.progress.dropped,
        script_id: h.script_id.clone(),
        detached_tasks: match &h.tasks {
            Some(t) => h.run_tasks.iter().filter_map(|id| t.get(id)).collect(),
            None => Vec::new(),
        },
        warnings: h.warnings.clone(),
        retried: false,
        context_id: None,
        suspension: None,
        session: None,
        metrics: Metrics {
            engine: engine_name.to_owned(),
            duration_ms: ms(started.elapsed()),
            tool_calls: tool_calls.len() as u32,
            memory_used_bytes: memory_used,
            fuel_consumed,
        },
        tool_calls,
    }
}

/// Runs `request` on an engine an adapter lent for one run (or reports
/// why there is none), hands the report to `respond` at once, and returns
/// whether the engine is tainted: the body of every in-process adapter's
/// per-run job.
pub fn run_lent<E: Engine + ?Sized>(
    engine: Result<&mut E, EngineFault>,
    engine_name: &str,
    request: ExecutionRequest,
    tokio: &tokio::runtime::Handle,
    respond: impl FnOnce(ExecutionReport),
) -> bool {
    match engine {
        Ok(engine) => {
            let out = run_script(engine, engine_name, request, tokio);
            respond(out.report);
            out.engine_tainted
        }
        Err(f) => {
            respond(ExecutionReport::failed(
                engine_name,
                ScriptError::internal(f.message),
            ));
            false
        }
    }
}

#[cfg(test)]
mod tests;
