//! The shared conformance and security suite.
//!
//! A case is a named function over a [`ScriptRuntimeAdapter`] with a one-line
//! statement of the expected behaviour. [`run_suite`] runs every case (or
//! those matching a filter) and returns a [`SuiteReport`] of passed, failed,
//! unsupported (by declared capability) and untested cases. A security case
//! is gated only by what no adapter code can stand in for (stopping a
//! running script, a memory limit, surviving native stack exhaustion), and
//! is then reported unsupported with the reason, never passed.
//!
//! # Examples
//! ```no_run
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use harness_conformance::{run_suite, all_cases};
//! let engine = std::sync::Arc::new(harness_quickjs::QuickJs::new());
//! let report = run_suite(engine, &all_cases(), None).await;
//! assert!(report.everything_was_tested(), "{}", report.summary_line());
//! # });
//! ```

pub mod cases;
mod engines;
pub mod format;
pub mod test262;
pub mod tools;
#[cfg(feature = "trials")]
pub mod trials;
pub mod unsupported;
#[cfg(feature = "trials")]
pub mod walls;

pub use engines::{single_engine, SessionMaker, SuiteEngines, WARM_WINDOW};
use harness_core::approval::{ApprovalBridge, AutoApprove, AutoDeny, NeverAnswer};
use harness_core::engine::EngineDescriptor;
use harness_core::process::{ProcessAdapter, ProcessOptions};
use harness_core::{
    Capabilities, EngineInfo, ErrorCode, ExecutionReport, ExecutionRequest, Isolation, Limits,
    Mode, ScriptContext, ScriptLanguage, ScriptRuntimeAdapter, ToolSet,
};
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use tools::Counters;

#[cfg(feature = "trials")]
#[doc(hidden)]
pub use harness_core as __core;

/// Which part of the contract a case covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    Semantics,
    Tools,
    Context,
    Limits,
    Security,
}

/// A capability a case needs to be run at all. An engine without it would
/// hang or take the host down on the case, so the case is reported
/// unsupported with the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// The engine can stop a running script (interrupt or hard kill).
    Stop,
    /// The engine enforces the memory limit.
    MemoryLimit,
    /// The engine survives native stack exhaustion (a guard, or a process
    /// boundary).
    StackGuard,
}

impl Needs {
    /// Why an engine with `caps` cannot run a case that needs this, if it
    /// cannot.
    pub fn missing(self, caps: &Capabilities) -> Option<String> {
        let reason = self.missing_capability(caps)?;
        let hint = match caps.hard_kill {
            true => "",
            false => " in this process; run the engine with isolation=process",
        };
        Some(format!("{reason}{hint}"))
    }

    fn missing_capability(self, caps: &Capabilities) -> Option<&'static str> {
        match self {
            Needs::Nothing => None,
            Needs::Stop if !(caps.interrupt || caps.hard_kill) => {
                Some("the engine can neither interrupt nor kill a running script")
            }
            Needs::MemoryLimit if !caps.memory_limit => {
                Some("the engine does not enforce a memory limit")
            }
            Needs::StackGuard if !caps.stack_guard => {
                Some("native stack exhaustion would end the host process")
            }
            _ => None,
        }
    }
}

/// Who answers approvals in a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approvals {
    Deny,
    Approve,
    Never,
}

/// What a case observed: the report, the test tools' counters, the
/// wall time the run took as seen by the caller, and the reports of the
/// case's earlier steps (on the same engine instance), in order.
#[derive(Debug)]
pub struct Observed {
    pub report: ExecutionReport,
    pub counters: Arc<Counters>,
    pub wall: Duration,
    pub earlier: Vec<ExecutionReport>,
    /// The report's detached tasks as the run returned them, before the
    /// runner waited for them (`report.detached_tasks` holds their end).
    pub tasks_at_return: Vec<harness_core::DetachedTask>,
}

/// How a case checks what it observed: `Ok(note)` passes (the note, if
/// any, is shown in the output), `Err(why)` fails.
pub type Check = fn(&Observed) -> Result<Option<String>, String>;

/// How long [`Spec::cancel_in_sleep`] waits for a `sleep` call to begin
/// before it cancels anyway.
pub const SLEEP_WAIT: Duration = Duration::from_secs(10);

/// One script run and its check.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub source: &'static str,
    /// Builds the source instead (large or generated inputs).
    pub generate: Option<fn() -> String>,
    pub limits: fn(&mut Limits),
    pub mode: Mode,
    pub approvals: Approvals,
    /// Tools and packs the script may see; `None` for all.
    pub allow: Option<&'static [&'static str]>,
    /// Cancel the run this long after it starts (or after its first
    /// `sleep` call began, with `cancel_in_sleep`).
    pub cancel_after_ms: Option<u64>,
    /// Start `cancel_after_ms` once a `sleep` call is running, so that the
    /// cancellation meets the tool however long the engine took to get
    /// there (a fresh Boa worker in a dev build takes over 100 ms).
    pub cancel_in_sleep: bool,
    /// The script's language (default: auto, as every entry).
    pub language: ScriptLanguage,
    /// Start detached tasks here (`tools.spawn` on) when set.
    pub spawn: bool,
    /// The context's host-provided fields (`conversationId`, `model`, …).
    pub context: Option<fn() -> ScriptContext>,
    pub check: Check,
}

impl Spec {
    pub const fn new(source: &'static str, check: Check) -> Self {
        Spec {
            source,
            generate: None,
            limits: |_| {},
            mode: Mode::Enabled,
            approvals: Approvals::Deny,
            allow: None,
            cancel_after_ms: None,
            cancel_in_sleep: false,
            language: ScriptLanguage::Auto,
            spawn: false,
            context: None,
            check,
        }
    }
    pub const fn language(mut self, l: ScriptLanguage) -> Self {
        self.language = l;
        self
    }
    /// With `tools.spawn` on.
    pub const fn spawn(mut self) -> Self {
        self.spawn = true;
        self
    }
    pub const fn context(mut self, c: fn() -> ScriptContext) -> Self {
        self.context = Some(c);
        self
    }
    /// A spec whose source is built by `generate`.
    pub const fn generated(generate: fn() -> String, check: Check) -> Self {
        let mut s = Spec::new("", check);
        s.generate = Some(generate);
        s
    }
    pub const fn limits(mut self, f: fn(&mut Limits)) -> Self {
        self.limits = f;
        self
    }
    /// In the shared realm, whatever the script does: the case is about
    /// its frozen built-ins ([`harness_core::Realm::Shared`]).
    pub const fn shared_realm(self) -> Self {
        self.limits(|l| l.realm = Some(harness_core::Realm::Shared))
    }
    /// In a private realm ([`harness_core::Realm::Private`]).
    pub const fn private_realm(self) -> Self {
        self.limits(|l| l.realm = Some(harness_core::Realm::Private))
    }
    pub const fn mode(mut self, m: Mode) -> Self {
        self.mode = m;
        self
    }
    pub const fn approvals(mut self, a: Approvals) -> Self {
        self.approvals = a;
        self
    }
    pub const fn allow(mut self, names: &'static [&'static str]) -> Self {
        self.allow = Some(names);
        self
    }
    pub const fn cancel_after(mut self, ms: u64) -> Self {
        self.cancel_after_ms = Some(ms);
        self
    }
    /// Cancel the run `ms` after its first `sleep` call began (or after
    /// [`SLEEP_WAIT`], if none does: the check then sees no cancelled
    /// call).
    pub const fn cancel_in_sleep(mut self, ms: u64) -> Self {
        self.cancel_after_ms = Some(ms);
        self.cancel_in_sleep = true;
        self
    }
}

/// One conformance case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// `module::case`, as filtered and shown in the matrix.
    pub name: &'static str,
    /// The expected behaviour, in one line.
    pub doc: &'static str,
    pub group: Group,
    pub needs: Needs,
    /// Runs in order; every step must pass. Security cases also check that
    /// the host still runs a trivial script afterwards.
    pub steps: &'static [Spec],
}

impl Case {
    /// A cross-run isolation case: a pair (or more) of runs that must
    /// meet one engine state.
    pub fn is_cross_run(&self) -> bool {
        self.name.starts_with("cross_run::")
    }

    /// A session case: its steps run in order in one fresh session.
    pub fn in_session(&self) -> bool {
        self.name.starts_with("session::")
    }
}

/// Every case, in a stable order.
pub fn all_cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend_from_slice(cases::semantics::CASES);
    v.extend_from_slice(cases::tools::CASES);
    v.extend_from_slice(cases::context::CASES);
    v.extend_from_slice(cases::limits::CASES);
    v.extend_from_slice(cases::security::CASES);
    v.extend_from_slice(cases::contract::CASES);
    v.extend_from_slice(cases::cross_run::CASES);
    v.extend_from_slice(cases::session::CASES);
    v
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Status {
    Passed { note: Option<String> },
    Failed { reason: String },
    Unsupported { reason: String },
    Untested,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: &'static str,
    pub doc: &'static str,
    pub group: Group,
    #[serde(flatten)]
    pub status: Status,
    pub duration_ms: f64,
}

/// The outcome of a suite run on one engine.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    pub engine: String,
    pub engine_version: String,
    pub results: Vec<CaseResult>,
}

impl SuiteReport {
    fn count(&self, f: impl Fn(&Status) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.status)).count()
    }
    pub fn passed(&self) -> usize {
        self.count(|s| matches!(s, Status::Passed { .. }))
    }
    pub fn failed(&self) -> usize {
        self.count(|s| matches!(s, Status::Failed { .. }))
    }
    pub fn unsupported(&self) -> usize {
        self.count(|s| matches!(s, Status::Unsupported { .. }))
    }
    pub fn untested(&self) -> usize {
        self.count(|s| matches!(s, Status::Untested))
    }
    /// No case failed and none was left untested (unsupported cases carry
    /// their reason and are allowed).
    pub fn everything_was_tested(&self) -> bool {
        self.failed() == 0 && self.untested() == 0
    }
    /// `N passed, N failed, N unsupported` (and untested when any).
    pub fn summary_line(&self) -> String {
        let mut s = format!(
            "{} passed, {} failed, {} unsupported",
            self.passed(),
            self.failed(),
            self.unsupported()
        );
        if self.untested() > 0 {
            s.push_str(&format!(", {} untested", self.untested()));
        }
        s
    }
}

fn bridge(a: Approvals) -> Arc<dyn ApprovalBridge> {
    match a {
        Approvals::Deny => Arc::new(AutoDeny::default()),
        Approvals::Approve => Arc::new(AutoApprove),
        Approvals::Never => Arc::new(NeverAnswer),
    }
}

/// Runs one script step on `adapter` with fresh test tools.
pub async fn run_step(adapter: &dyn ScriptRuntimeAdapter, spec: &Spec) -> Observed {
    run_step_in(adapter, spec, None).await
}

/// [`run_step`], in `realm` where the step does not choose one (`None`:
/// as the `harness` facade chooses, by the script).
async fn run_step_in(
    adapter: &dyn ScriptRuntimeAdapter,
    spec: &Spec,
    realm: Option<harness_core::Realm>,
) -> Observed {
    let counters = Arc::new(Counters::default());
    let mut req = match spec.generate {
        Some(g) => ExecutionRequest::new(g()),
        None => ExecutionRequest::new(spec.source),
    };
    (spec.limits)(&mut req.limits);
    if req.limits.realm.is_none() {
        req.limits.realm = realm;
    }
    req.mode = spec.mode;
    req.language = spec.language;
    if let Some(c) = spec.context {
        req.context = c();
    }
    let tasks = spec
        .spawn
        .then(|| Arc::new(harness_core::DetachedTasks::new(Default::default())));
    req.tasks = tasks.clone();
    req.tools = ToolSet::new(Arc::new(tools::registry(counters.clone())))
        .with_allow(match spec.allow {
            Some(names) => harness_core::Allowlist::only(names.iter().copied()),
            None => harness_core::Allowlist::All,
        })
        .with_approvals(bridge(spec.approvals));
    if let Some(ms) = spec.cancel_after_ms {
        let token = req.cancel.clone();
        let (in_sleep, counters) = (spec.cancel_in_sleep, counters.clone());
        tokio::spawn(async move {
            let waited = Instant::now();
            while in_sleep
                && Counters::get(&counters.sleeping) == 0
                && waited.elapsed() < SLEEP_WAIT
                && !token.is_cancelled()
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            token.cancel();
        });
    }
    let t = Instant::now();
    let mut report = adapter.execute(req).await;
    let wall = t.elapsed();
    let tasks_at_return = report.detached_tasks.clone();
    if let Some(tasks) = tasks {
        // As a host would: wait for the run's tasks, then look at them.
        let ids: Vec<String> = report.detached_tasks.iter().map(|t| t.id.clone()).collect();
        report.detached_tasks = tasks.wait_all(&ids, Duration::from_secs(10)).await;
    }
    Observed {
        report,
        counters,
        wall,
        earlier: Vec::new(),
        tasks_at_return,
    }
}

/// Runs one case under the one policy for unsupported cases (see
/// [`unsupported`]).
async fn run_case(engines: &SuiteEngines, info: &EngineInfo, case: &Case) -> Status {
    let listed = unsupported::listed(case.name, info);
    if let Some(missing) = case.needs.missing(&info.capabilities) {
        return match listed {
            Some(u) => Status::Unsupported {
                reason: u.reason.to_owned(),
            },
            None => Status::Failed {
                reason: format!(
                    "the engine cannot run this case ({missing}), and it is not on the list of \
                     unsupported cases (conformance/src/unsupported.rs)"
                ),
            },
        };
    }
    if case.in_session() {
        let status = match engines.sessions.as_ref().map(|make| make()) {
            Some(Some(session)) => run_case_steps(session.as_ref(), case).await,
            Some(None) => Status::Failed {
                reason: "the engine says it has sessions, but none could be made".to_owned(),
            },
            None => Status::Unsupported {
                reason:
                    "no sessions: the engine has none, or the suite was given no way to make one"
                        .to_owned(),
            },
        };
        return match (listed, status) {
            (Some(u), Status::Failed { .. }) => Status::Unsupported {
                reason: u.reason.to_owned(),
            },
            (_, status) => status,
        };
    }
    let mut status = run_case_steps(engines.for_case(case), case).await;
    if let (Status::Passed { .. }, true, Some(warm)) = (&status, case.is_cross_run(), &engines.warm)
    {
        // Again with rehearsals between the steps: they must neither carry
        // anything from one run to the next nor hide what a run left.
        // Every other such case kept awake as well (the idle thread polls
        // between rehearsals instead of sleeping), so that both ways of
        // waiting are held to it.
        static WARM_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let awake = WARM_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2 == 1;
        let tuning = harness_core::Tuning::default()
            .with_keep_warm(WARM_WINDOW)
            .with_keep_awake(awake);
        let awake = warm.tune(tuning).keeps_awake;
        if let Status::Failed { reason } = run_case_steps(warm.as_ref(), case).await {
            let how = if awake {
                "kept warm and awake"
            } else {
                "kept warm"
            };
            status = Status::Failed {
                reason: format!("{how} (rehearsals between the runs): {reason}"),
            };
        }
    }
    if let (Status::Passed { .. }, true, Some(make)) =
        (&status, case.is_cross_run(), &engines.sessions)
    {
        if let Status::Failed { reason } = run_case_in_sessions(engines, make, case).await {
            status = Status::Failed { reason };
        }
    }
    if let (Status::Passed { note }, true) = (&mut status, case.is_cross_run()) {
        if engines.single.is_none() {
            // Said, not hidden: the pair may have met two engine threads.
            let weaker = "its runs met one engine thread only as the pool chose (no one-thread \
                          adapter: EngineDescriptor::with_in_process_threads)";
            *note = Some(match note.take() {
                Some(n) => format!("{n}; {weaker}"),
                None => weaker.to_owned(),
            });
        }
    }
    match (listed, status) {
        (Some(u), Status::Passed { .. }) => Status::Failed {
            reason: format!(
                "surprise: the case passes, but conformance/src/unsupported.rs lists it as \
                 unsupported ({}); remove the entry",
                u.reason
            ),
        },
        (Some(u), Status::Failed { .. }) => Status::Unsupported {
            reason: u.reason.to_owned(),
        },
        (_, status) => status,
    }
}

/// A cross-run case replayed with sessions: every step but the last (the
/// plants) in session A, then the last (the probe) in session B and
/// outside any session, where it must see what it sees after plants in
/// no session: a session's state reaches neither.
async fn run_case_in_sessions(engines: &SuiteEngines, make: &SessionMaker, case: &Case) -> Status {
    let (Some(a), Some(b)) = (make(), make()) else {
        return Status::Failed {
            reason: "the engine says it has sessions, but none could be made".to_owned(),
        };
    };
    let Some((probe, plants)) = case.steps.split_last() else {
        return Status::Passed { note: None };
    };
    let mut earlier = Vec::new();
    for step in plants {
        let o = run_step(a.as_ref(), step).await;
        earlier.push(o.report);
        tokio::time::sleep(STEP_GAP).await;
    }
    let unscoped = engines.for_case(case);
    let lookers: [(&dyn ScriptRuntimeAdapter, &str); 2] = [
        (b.as_ref(), "another session"),
        (unscoped, "a run outside any session"),
    ];
    for (adapter, who) in lookers {
        let mut o = run_step(adapter, probe).await;
        o.earlier = earlier.clone();
        if let Err(why) = (probe.check)(&o) {
            return Status::Failed {
                reason: format!("planted in a session, seen by {who}: {why}"),
            };
        }
        tokio::time::sleep(STEP_GAP).await;
    }
    Status::Passed { note: None }
}

/// The pause between the steps of one case (see [`run_case_steps`]).
const STEP_GAP: Duration = Duration::from_millis(25);

/// Runs a case's steps. A cross-run case runs twice: as the facade
/// chooses the realm (a plant that writes to a built-in gets a private
/// realm, which must vanish with its run), then with every step in the
/// shared realm (where the plant meets frozen built-ins), so that each
/// channel is checked both ways.
async fn run_case_steps(adapter: &dyn ScriptRuntimeAdapter, case: &Case) -> Status {
    let status = run_case_steps_in(adapter, case, None).await;
    if !case.is_cross_run() || !matches!(status, Status::Passed { .. }) {
        return status;
    }
    match run_case_steps_in(adapter, case, Some(harness_core::Realm::Shared)).await {
        Status::Failed { reason } => Status::Failed {
            reason: format!("in the shared realm: {reason}"),
        },
        _ => status,
    }
}

/// How many cross-run pairs provably met a reused context: the last
/// run of a case (its probe) ran in a context an earlier run of the case
/// (or the warm-up run before it) had already run in, by the engines'
/// [`ExecutionReport::context_id`]. Counted over the cases whose earlier
/// runs ended without a fault (after a fault the context is dropped, and
/// that is checked instead); a pair whose context was dropped for what
/// its first run left (a queued job, a pending call) counts as not met.
#[derive(Debug, Default)]
pub struct ReuseTally {
    met: std::sync::atomic::AtomicU32,
    expected: std::sync::atomic::AtomicU32,
    /// The cases whose pairs lacked the proof, with how often.
    missing: std::sync::Mutex<Vec<(&'static str, u32)>>,
}

/// The tally of this process's cross-run pairs.
pub static REUSE: ReuseTally = ReuseTally {
    met: std::sync::atomic::AtomicU32::new(0),
    expected: std::sync::atomic::AtomicU32::new(0),
    missing: std::sync::Mutex::new(Vec::new()),
};

impl ReuseTally {
    /// Pairs that met a reused context, and pairs counted.
    pub fn counts(&self) -> (u32, u32) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.met.load(Relaxed), self.expected.load(Relaxed))
    }

    /// A line for the suite's output, and whether the proof holds: it may
    /// be missing for at most a tenth of the pairs (judged from 10 pairs).
    pub fn summary(&self) -> Option<(String, bool)> {
        let (met, expected) = self.counts();
        (expected > 0).then(|| {
            let holds = expected < 10 || (expected - met) * 10 <= expected;
            let missing = self
                .missing
                .lock()
                .map(|m| {
                    m.iter()
                        .map(|(case, n)| format!("{case} ×{n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            (
                format!(
                    "cross-run pairs that met a reused context: {met} of {expected}{}{}",
                    if holds {
                        ""
                    } else {
                        " (more than a tenth without proof: FAILED)"
                    },
                    if missing.is_empty() {
                        String::new()
                    } else {
                        format!("; without: {missing}")
                    }
                ),
                holds,
            )
        })
    }

    fn record(&self, case: &'static str, met: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.expected.fetch_add(1, Relaxed);
        if met {
            self.met.fetch_add(1, Relaxed);
        } else if let Ok(mut m) = self.missing.lock() {
            match m.iter_mut().find(|(c, _)| *c == case) {
                Some((_, n)) => *n += 1,
                None => m.push((case, 1)),
            }
        }
    }
}

/// A fault after which the engine drops the context (and its runtime).
fn drops_the_context(report: &ExecutionReport) -> bool {
    matches!(
        report.code(),
        Some(
            ErrorCode::ScriptTimeoutError
                | ErrorCode::ScriptMemoryError
                | ErrorCode::StackOverflowError
                | ErrorCode::ScriptCancelledError
                | ErrorCode::HarnessInternalError
        )
    )
}

/// After a cross-run case's steps: the proof that its probe met the
/// context its earlier runs left, or, where one of them faulted, that
/// the faulted run's context was not used again.
fn check_reuse(
    case: &'static str,
    warm_up: &ExecutionReport,
    steps: &[ExecutionReport],
) -> Result<(), String> {
    let Some((probe, before)) = steps.split_last() else {
        return Ok(());
    };
    let faulted: Vec<&ExecutionReport> = before.iter().filter(|r| drops_the_context(r)).collect();
    if !faulted.is_empty() {
        for f in faulted {
            if f.context_id.is_some() && f.context_id == probe.context_id {
                return Err(format!(
                    "the run after a {} ran in the context that run faulted in",
                    f.code().map_or("fault", |c| c.as_str())
                ));
            }
        }
        return Ok(());
    }
    let met = probe.context_id.is_some()
        && std::iter::once(warm_up)
            .chain(before)
            .any(|r| r.context_id == probe.context_id);
    REUSE.record(case, met);
    Ok(())
}

async fn run_case_steps_in(
    adapter: &dyn ScriptRuntimeAdapter,
    case: &Case,
    realm: Option<harness_core::Realm>,
) -> Status {
    let mut notes = Vec::new();
    let mut earlier = Vec::new();
    // A cross-run case starts on a context that served a run already, so
    // that its probe's context can be compared with one the case did not
    // make (a plant in a private realm leaves the shared context waiting).
    let warm_up = match case.is_cross_run() {
        true => {
            let spec =
                Spec::new("return 0", |o| expect_value(o, serde_json::json!(0))).shared_realm();
            let o = run_step(adapter, &spec).await;
            if let Err(why) = (spec.check)(&o) {
                return Status::Failed {
                    reason: format!("the warm-up run failed: {why}"),
                };
            }
            tokio::time::sleep(STEP_GAP).await;
            Some(o.report)
        }
        false => None,
    };
    for (i, step) in case.steps.iter().enumerate() {
        if i > 0 {
            // Let the engine thread that ran the last step go idle: pools
            // hand a run to the most recently idle thread, so the next step
            // meets the context the last one left, where an engine keeps
            // contexts between runs. Without the pause it would find the
            // thread still tidying up and start another.
            tokio::time::sleep(STEP_GAP).await;
        }
        let mut observed = run_step_in(adapter, step, realm).await;
        observed.earlier = std::mem::take(&mut earlier);
        let checked = (step.check)(&observed);
        earlier = std::mem::take(&mut observed.earlier);
        earlier.push(observed.report.clone());
        match checked {
            Ok(Some(n)) => notes.push(n),
            Ok(None) => {}
            Err(why) => {
                let step = if case.steps.len() > 1 {
                    format!("step {}: ", i + 1)
                } else {
                    String::new()
                };
                return Status::Failed {
                    reason: format!("{step}{why}"),
                };
            }
        }
    }
    // A probe in a private realm runs in a context made for it alone.
    let private_probe = case.steps.last().is_some_and(|step| {
        let mut limits = Limits::default();
        (step.limits)(&mut limits);
        limits.realm.or(realm) == Some(harness_core::Realm::Private)
    });
    if let (Some(warm_up), false) = (&warm_up, private_probe) {
        if let Err(reason) = check_reuse(case.name, warm_up, &earlier) {
            return Status::Failed { reason };
        }
    }
    if case.group == Group::Security {
        let spec = Spec::new("return [1 + 1, Object.isFrozen(Object.prototype)]", |o| {
            expect_value(o, serde_json::json!([2, true]))
        })
        .shared_realm();
        let healthy = run_step(adapter, &spec).await;
        if let Err(why) = (spec.check)(&healthy) {
            return Status::Failed {
                reason: format!("the host is not healthy afterwards: {why}"),
            };
        }
    }
    Status::Passed {
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// Runs `cases` on `adapter`; cases whose name does not contain `filter`
/// are reported as untested. The cross-run cases run on `adapter` too:
/// [`run_suite_on`] with [`SuiteEngines::for_engine`] makes sure each of
/// their pairs meets one engine state.
pub async fn run_suite(
    adapter: Arc<dyn ScriptRuntimeAdapter>,
    cases: &[Case],
    filter: Option<&str>,
) -> SuiteReport {
    run_suite_on(SuiteEngines::new(adapter), cases, filter).await
}

/// Runs `cases` on `engines` (the cross-run cases on their one-thread
/// adapter, when there is one); cases whose name does not contain
/// `filter` are reported as untested.
pub async fn run_suite_on(
    engines: SuiteEngines,
    cases: &[Case],
    filter: Option<&str>,
) -> SuiteReport {
    // As every entry of the harness does: TypeScript is stripped before
    // the engine sees a script (free for JavaScript).
    let aware = |a: Arc<dyn ScriptRuntimeAdapter>| -> Arc<dyn ScriptRuntimeAdapter> {
        Arc::new(harness_respond::language::TypeScriptAware::new(a))
    };
    let sessions = engines
        .sessions
        .map(|make| -> SessionMaker { Arc::new(move || make().map(aware)) });
    let engines = SuiteEngines {
        any: aware(engines.any),
        single: engines.single.map(aware),
        warm: engines.warm.map(aware),
        sessions,
    };
    let adapter = &engines.any;
    let info = adapter.info();
    let mut results = Vec::with_capacity(cases.len());
    for case in cases {
        let t = Instant::now();
        let status = match filter {
            Some(f) if !case.name.contains(f) => Status::Untested,
            _ => run_case(&engines, &info, case).await,
        };
        results.push(CaseResult {
            name: case.name,
            doc: case.doc,
            group: case.group,
            status,
            duration_ms: (t.elapsed().as_secs_f64() * 1e4).round() / 10.0,
        });
    }
    SuiteReport {
        engine: match info.isolation {
            harness_core::Isolation::InProcess => info.name,
            harness_core::Isolation::Process => format!("{} (process)", info.name),
        },
        engine_version: info.engine_version,
        results,
    }
}

fn dump(o: &Observed) -> String {
    serde_json::to_string(&o.report).unwrap_or_default()
}

/// Passes when the run succeeded with exactly `v`.
pub fn expect_value(o: &Observed, v: Value) -> Result<Option<String>, String> {
    if o.report.ok && o.report.value.as_ref() == Some(&v) {
        Ok(None)
    } else {
        Err(format!("expected value {v}, got {}", dump(o)))
    }
}

/// Passes when the run succeeded with no value (`undefined`).
pub fn expect_undefined(o: &Observed) -> Result<Option<String>, String> {
    if o.report.ok && o.report.value.is_none() {
        Ok(None)
    } else {
        Err(format!("expected no value, got {}", dump(o)))
    }
}

/// Passes when the run failed with `code`.
pub fn expect_code(o: &Observed, code: ErrorCode) -> Result<Option<String>, String> {
    match &o.report.error {
        Some(e) if e.code == code && !o.report.ok => Ok(None),
        _ => Err(format!("expected {code}, got {}", dump(o))),
    }
}

/// Fails with `why` (and the report) unless `cond` holds.
pub fn ensure(o: &Observed, cond: bool, why: &str) -> Result<Option<String>, String> {
    if cond {
        Ok(None)
    } else {
        Err(format!("{why}: {}", dump(o)))
    }
}
