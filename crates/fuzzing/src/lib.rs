//! Generators and oracles for the cargo-fuzz targets in `fuzz/`.
//!
//! Every target is a thin `fuzz_target!` around one function here, so the
//! same checks run three ways: under libFuzzer (`cargo +nightly fuzz run
//! TARGET`, see `fuzz/README.md`), under plain `cargo test -p
//! harness-fuzzing` (the smoke test feeds them pseudo-random inputs, so
//! this code never rots), and by hand on one input when a crash is being
//! debugged (`cargo run -p harness-fuzzing --example replay TARGET FILE`).
//!
//! An oracle *panics* when the property it checks does not hold: libFuzzer
//! records the input as a crash, the smoke test fails.
//!
//! - [`check_detect`]: `detect` on arbitrary text never panics, and its
//!   segments tile the input.
//! - [`check_prepare`]: `prepare` on arbitrary bytes, as JavaScript and as
//!   TypeScript, never panics; what it accepts is stable and the stripped
//!   TypeScript is itself valid JavaScript.
//! - [`Execute`]: one engine in one isolation runs arbitrary source within
//!   its limits (plus the margins stated in [`Margins`]), and the host is
//!   healthy afterwards.
//! - [`Differential`]: a deterministic script from [`grammar::program`] runs
//!   on every built engine; values, error codes and console lines agree,
//!   apart from the differences listed in [`known_difference`].
//! - [`CrossRun`]: a pair of generated scripts on one harness; the second
//!   run's report must be the same as on a fresh harness (durations,
//!   memory figures and ids normalised), on every engine and isolation.

pub mod grammar;

use harness::core::process::ProcessOptions;
use harness::respond::detect::{detect, SegmentKind};
use harness::respond::prepare::{prepare_with, PrepareOptions};
use harness::respond::Language;
use harness::{
    EngineKind, ErrorCode, ExecutionReport, FnTool, Harness, Isolation, Limits, ToolRegistry,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `detect` never panics, and its segments tile the input in order; every
/// script or thinking body lies inside its segment.
pub fn check_detect(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(segments) = detect(&text) else {
        return;
    };
    let mut at = 0;
    for s in &segments {
        assert_eq!(s.range.start, at, "segments leave a gap or overlap");
        assert!(s.range.end > s.range.start, "empty segment {s:?}");
        if let Some(body) = &s.body {
            assert!(
                s.range.start <= body.start && body.end <= s.range.end,
                "body outside its segment: {s:?}"
            );
        }
        assert_eq!(
            s.kind == SegmentKind::Script,
            s.language.is_some(),
            "only scripts have a language: {s:?}"
        );
        at = s.range.end;
    }
    assert_eq!(at, text.len(), "segments do not reach the end of the input");
}

/// A continuation from anywhere: opening arbitrary bytes never panics
/// and never succeeds without the key; a sealed continuation with any
/// byte changed (where `data` says) is refused; plain bytes that are not
/// a continuation are refused by `Resume::new` without a panic.
pub fn check_continuation(data: &[u8]) {
    use harness::durable::ContinuationKeys;
    let keys = ContinuationKeys::new([7; 32]);
    assert!(keys.open(data).is_err(), "arbitrary bytes opened");
    let _ = harness::core::durable::Resume::new(data, Default::default());
    let _ = harness::core::durable::pending_calls(data);
    let sealed = keys.seal("cnt_fuzz", b"plain continuation").expect("seals");
    for pair in data.chunks(2) {
        let (at, flip) = (
            pair[0] as usize % sealed.len(),
            pair.get(1).copied().unwrap_or(1),
        );
        if flip == 0 {
            continue;
        }
        let mut t = sealed.clone();
        t[at] ^= flip;
        assert!(
            keys.open(&t).is_err(),
            "byte {at} changed by {flip:#x} still opened"
        );
    }
    let mut longer = sealed.clone();
    longer.extend_from_slice(data);
    assert!(
        data.is_empty() || keys.open(&longer).is_err(),
        "bytes appended still opened"
    );
}

/// `prepare` never panics on any bytes, as either language; accepting is
/// deterministic; a prepared script hashes its source; stripped TypeScript
/// is valid JavaScript with the same verdict.
pub fn check_prepare(data: &[u8]) {
    for language in [Language::Javascript, Language::Typescript] {
        let opts = PrepareOptions::new(language);
        let first = prepare_with(data, opts);
        if let Err(e) = &first {
            if e.code == harness::ErrorCode::HarnessInternalError {
                let known = harness::respond::prepare::KNOWN_PARSER_PANICS
                    .iter()
                    .any(|k| e.message.contains(k));
                assert!(known, "prepare failed internally: {}", e.message);
                continue;
            }
        }
        let again = prepare_with(data, opts);
        assert_eq!(
            first.as_ref().map(|p| &p.code).map_err(|e| e.code),
            again.as_ref().map(|p| &p.code).map_err(|e| e.code),
            "prepare is not deterministic"
        );
        let Ok(p) = first else { continue };
        assert_eq!(p.sha256, harness::respond::prepare::sha256_hex(&p.source));
        if language == Language::Typescript {
            let js = prepare_with(
                p.code.as_bytes(),
                PrepareOptions::new(Language::Javascript).with_max_source_bytes(u64::MAX),
            );
            if let Err(e) = js {
                panic!(
                    "stripped TypeScript is not valid JavaScript ({}: {}):\n{}",
                    e.code, e.message, p.code
                );
            }
        }
    }
}

/// How far past its limits a run may go before an oracle calls it a bug.
#[derive(Debug, Clone, Copy)]
pub struct Margins {
    /// Wall clock past `timeout_ms` (a loaded fuzzing machine, sanitizers,
    /// starting a fresh worker after a kill).
    pub time: Duration,
    /// Engine heap past `memory_bytes`, where the engine reports it.
    pub memory_bytes: u64,
}

/// The margins the fuzz targets and the smoke test hold engines to.
pub const MARGINS: Margins = Margins {
    time: Duration::from_millis(1_500),
    memory_bytes: 64 * 1024,
};

/// The limits arbitrary source runs under: small, so the fuzzer spends its
/// time on many inputs rather than on a few slow ones.
pub fn fuzz_limits() -> Limits {
    Limits::default()
        .with_timeout_ms(250)
        .with_memory_bytes(32 << 20)
        .with_max_tool_calls(8)
        .with_max_console_lines(20)
}

/// Tools the fuzzed scripts may call: `echo` (returns its arguments) and
/// `fail` (always fails).
pub fn fuzz_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools
        .register(FnTool::new(
            "echo",
            "returns its arguments",
            json!({"type": "object"}),
            |a, _| async move { Ok(a) },
        ))
        .expect("echo registers");
    tools
        .register(FnTool::new(
            "fail",
            "always fails",
            json!({"type": "object"}),
            |_, _| async move { Err(harness::ToolError::new("fail always fails")) },
        ))
        .expect("fail registers");
    tools
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A harness for `engine` in `isolation` with [`fuzz_tools`] and `limits`.
/// Process workers are the running binary (it must call
/// `harness::serve_worker_if_requested` first), without the address-space
/// cap: sanitizers reserve terabytes of shadow memory, and the worker's
/// own heap budget still enforces the memory limit.
pub fn fuzz_harness(engine: EngineKind, isolation: Isolation, limits: Limits) -> Harness {
    harness_with_workers(engine, isolation, limits, 2, Kept::No)
}

/// Whether a harness of the oracles keeps its engine warm between runs
/// ([`KEPT_WARM`]), and awake as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    No,
    Warm,
    /// Kept warm, and awake between rehearsals where the machine has the
    /// CPUs for it (`HarnessBuilder::keep_warm_awake`).
    Awake,
}

/// [`fuzz_harness`] with at most `max_workers` worker processes behind
/// the process boundary, or engine threads in process (where the engine's
/// descriptor can size its pool), kept warm (and awake) after each run as
/// `kept` says.
fn harness_with_workers(
    engine: EngineKind,
    isolation: Isolation,
    limits: Limits,
    max_workers: usize,
    kept: Kept,
) -> Harness {
    let mut b = Harness::builder()
        .engine(engine)
        .tools(fuzz_tools())
        .limits(limits)
        .isolation(isolation);
    if isolation == Isolation::Process {
        let mut opts = ProcessOptions::current_exe(engine.name()).expect("the running binary");
        opts.address_space_bytes = None;
        opts.max_workers = max_workers;
        b = b.worker(opts);
    } else if let Some(adapter) = engine
        .descriptor()
        .ok()
        .and_then(|d| d.in_process_with_threads(max_workers))
    {
        b = b.adapter(adapter);
    }
    if kept != Kept::No {
        b = b.keep_warm(KEPT_WARM).keep_warm_awake(kept == Kept::Awake);
    }
    b.build().expect("engine is built in")
}

/// The `execute` oracle for one engine in one isolation.
pub struct Execute {
    rt: tokio::runtime::Runtime,
    harness: Harness,
    /// The same engine and workers with a generous deadline: the health
    /// check is about the host, not about speed (a worker replaced after a
    /// kill may take longer than the fuzz deadline to start on a busy
    /// machine).
    health: Harness,
    limits: Limits,
    label: String,
}

impl std::fmt::Debug for Execute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execute")
            .field("label", &self.label)
            .finish()
    }
}

impl Execute {
    pub fn new(engine: EngineKind, isolation: Isolation) -> Self {
        let limits = fuzz_limits();
        let harness = fuzz_harness(engine, isolation, limits.clone());
        let health = harness.with_limits((limits.clone()).with_timeout_ms(30_000));
        Execute {
            rt: runtime(),
            harness,
            health,
            limits,
            label: format!("{engine} ({isolation:?})"),
        }
    }

    /// Runs `data` as a script: the report must be consistent and within
    /// the limits plus [`MARGINS`], and a trivial script must work after it.
    pub fn check(&self, data: &[u8]) {
        let started = Instant::now();
        let report = self.rt.block_on(self.harness.run_bytes(data));
        let wall = started.elapsed();
        check_report(&self.label, &self.limits, &report, wall);
        let next = self.rt.block_on(self.health.run("return 1+1"));
        assert!(
            next.ok && next.value == Some(json!(2)),
            "{}: unhealthy after the input: {:?}",
            self.label,
            next.error
        );
    }
}

/// The properties every report must have, whatever the script did.
pub fn check_report(label: &str, limits: &Limits, r: &ExecutionReport, wall: Duration) {
    assert_eq!(r.ok, r.error.is_none(), "{label}: ok and error disagree");
    assert!(
        r.ok || r.value.is_none(),
        "{label}: a failed run kept a value"
    );
    let budget = Duration::from_millis(limits.timeout_ms) + MARGINS.time;
    assert!(
        wall <= budget,
        "{label}: ran {wall:?}, limit {} ms + margin {:?}",
        limits.timeout_ms,
        MARGINS.time
    );
    if let Some(used) = r.metrics.memory_used_bytes {
        assert!(
            used <= limits.memory_bytes + MARGINS.memory_bytes,
            "{label}: heap {used} bytes, limit {} + margin {}",
            limits.memory_bytes,
            MARGINS.memory_bytes
        );
    }
    assert!(
        r.console.len() <= limits.max_console_lines as usize,
        "{label}: {} console lines kept, cap {}",
        r.console.len(),
        limits.max_console_lines
    );
    let recorded = limits.max_tool_calls as usize + harness::core::event_loop::REFUSED_CALLS_KEPT;
    assert!(
        r.tool_calls.len() <= recorded,
        "{label}: {} tool calls recorded, at most {recorded}",
        r.tool_calls.len(),
    );
    let ran = r
        .tool_calls
        .iter()
        .filter(|c| {
            c.error.as_ref().is_none_or(|e| {
                !matches!(
                    e.code,
                    ErrorCode::ToolBudgetExceededError
                        | ErrorCode::ToolNotFoundError
                        | ErrorCode::ToolValidationError
                )
            })
        })
        .count();
    assert!(
        ran <= limits.max_tool_calls as usize,
        "{label}: {ran} tool calls ran, budget {}",
        limits.max_tool_calls
    );
    if let Some(v) = &r.value {
        let len = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0) as u64;
        assert!(
            len <= limits.max_return_bytes,
            "{label}: returned {len} bytes, cap {}",
            limits.max_return_bytes
        );
    }
    if let Some(e) = &r.error {
        assert!(!e.message.is_empty(), "{label}: {} with no message", e.code);
        if let Some(stack) = &e.stack {
            assert!(
                !stack.contains(".rs:") && !stack.contains("/src/"),
                "{label}: host frames in a stack: {stack}"
            );
        }
    }
}

/// What one engine made of a script, reduced to what must agree.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub value: Option<Value>,
    pub error: Option<ErrorCode>,
    pub console: Vec<String>,
}

impl Outcome {
    fn of(r: &ExecutionReport) -> Outcome {
        Outcome {
            value: r.value.clone(),
            error: r.error.as_ref().map(|e| e.code),
            console: r.console.iter().map(|c| c.text.clone()).collect(),
        }
    }

    /// Runs that hit a resource limit: engines differ in how much they use,
    /// so such outcomes are not compared.
    fn hit_limit(&self) -> bool {
        matches!(
            self.error,
            Some(
                ErrorCode::ScriptTimeoutError
                    | ErrorCode::ScriptMemoryError
                    | ErrorCode::StackOverflowError
            )
        )
    }
}

/// Differences between engines that are known and accepted; each is also
/// listed in `fuzz/README.md`. `None`: the outcomes must be equal.
pub fn known_difference(_source: &str, _a: &Outcome, _b: &Outcome) -> Option<&'static str> {
    None
}

/// The limits of the oracles that run generated scripts ([`Differential`],
/// [`CrossRun`]): small and bounded, generous enough that they rarely hit.
fn oracle_limits() -> Limits {
    Limits::default()
        .with_timeout_ms(2_000)
        .with_memory_bytes(64 << 20)
        .with_max_tool_calls(64)
        .with_max_console_lines(50)
}

/// The differential oracle: the same generated script on every built
/// engine (in process: generated scripts are small and bounded, and the
/// first engine's limits gate the others).
pub struct Differential {
    rt: tokio::runtime::Runtime,
    engines: Vec<(EngineKind, Harness)>,
}

impl std::fmt::Debug for Differential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.engines.iter().map(|(e, _)| e.name()).collect();
        f.debug_struct("Differential")
            .field("engines", &names)
            .finish()
    }
}

impl Default for Differential {
    fn default() -> Self {
        Self::new()
    }
}

impl Differential {
    pub fn new() -> Self {
        let limits = oracle_limits();
        let mut engines = EngineKind::available();
        // QuickJS first: it enforces every limit in process, so a script
        // that passes it is safe to give to engines that do not.
        engines.sort_by_key(|e| *e != EngineKind::QuickJs);
        Differential {
            rt: runtime(),
            engines: engines
                .into_iter()
                .map(|e| (e, fuzz_harness(e, Isolation::InProcess, limits.clone())))
                .collect(),
        }
    }

    /// Builds a script from `data` and checks that every engine agrees.
    /// Returns the script (for the smoke test's statistics).
    pub fn check(&self, data: &[u8]) -> String {
        let source = grammar::program(&mut arbitrary::Unstructured::new(data));
        self.check_source(&source);
        source
    }

    /// What each engine made of `source`. Stops after an engine that hit
    /// a resource limit: the engines after it may not enforce it.
    pub fn outcomes(&self, source: &str) -> Vec<(EngineKind, Outcome)> {
        let mut outcomes: Vec<(EngineKind, Outcome)> = Vec::new();
        for (engine, h) in &self.engines {
            let r = self.rt.block_on(h.run(source));
            let o = Outcome::of(&r);
            let stop = o.hit_limit();
            outcomes.push((*engine, o));
            if stop {
                break;
            }
        }
        outcomes
    }

    /// Runs `source` on every engine and compares the outcomes.
    pub fn check_source(&self, source: &str) -> Vec<Outcome> {
        if harness::core::body::Body::parse(source).is_err() {
            self.check_refused(source);
        }
        let outcomes = self.outcomes(source);
        let (first, a) = &outcomes[0];
        for (other, b) in &outcomes[1..] {
            if b.hit_limit() || a == b || known_difference(source, a, b).is_some() {
                continue;
            }
            panic!(
                "engines disagree\n--- script\n{source}\n--- {first}\n{a:#?}\n--- {other}\n{b:#?}"
            );
        }
        outcomes.into_iter().map(|(_, o)| o).collect()
    }
}

impl Differential {
    /// A source that is not one function body ran on no engine: each
    /// reports a parse-phase error, with no console line or tool call.
    fn check_refused(&self, source: &str) {
        for (engine, h) in &self.engines {
            let r = self.rt.block_on(h.run(source));
            assert_refused(&format!("{engine}"), source, &r);
        }
    }
}

/// `r` is the report of a script that never ran.
fn assert_refused(label: &str, source: &str, r: &ExecutionReport) {
    let refused = r
        .error
        .as_ref()
        .is_some_and(|e| e.phase == harness::core::Phase::Parsing)
        && r.console.is_empty()
        && r.tool_calls.is_empty();
    assert!(
        refused,
        "{label}: a source that is not one function body ran\n--- script\n{source}\n--- report\n{:#}",
        normalised(r)
    );
}

/// The cross-run oracle: script A, then script B on the same harness
/// (the same engine instance and, behind the process boundary, the same
/// worker processes); B's report must equal B's report on a harness that
/// never ran anything. Half the pairs run on harnesses kept warm
/// ([`KEPT_WARM`]), so that rehearsals come between A and B, and half of
/// those kept awake as well (the engine thread polls between rehearsals
/// where the machine has the CPUs for it). Durations,
/// memory figures and ids are normalised
/// ([`normalised`]); everything else is compared. Reports of runs that hit
/// a resource limit are not compared (how far a run got before its
/// deadline depends on the machine's load).
pub struct CrossRun {
    rt: tokio::runtime::Runtime,
    limits: Limits,
    /// Each engine and isolation, with its shared harnesses.
    configs: Vec<Shared>,
    /// The pair checked before this one: its fresh harness's engine
    /// threads free their runtimes after that pair's check, so a leak
    /// there surfaces during the next pair.
    last: std::sync::Mutex<Option<(String, String)>>,
}

/// How long the cross-run oracle's harnesses kept warm stay warm after
/// each run: past the pause between a pair's two runs (25 ms).
pub const KEPT_WARM: std::time::Duration = std::time::Duration::from_millis(50);

/// One engine and isolation of the cross-run oracle: the harnesses whose
/// engine state a pair's second run meets.
struct Shared {
    engine: EngineKind,
    isolation: Isolation,
    plain: Harness,
    /// The same kept warm ([`KEPT_WARM`]).
    warm: Harness,
    /// The same kept warm and awake.
    awake: Harness,
}

impl Shared {
    /// The harness a pair runs on, and how it keeps its engine.
    fn harness(&self, kept: Kept) -> (&Harness, &'static str) {
        match kept {
            Kept::No => (&self.plain, ""),
            Kept::Warm => (&self.warm, ", kept warm: rehearsals between the runs"),
            Kept::Awake if self.awake.keeps_warm_awake() => (
                &self.awake,
                ", kept warm and awake: rehearsals between the runs, polling between them",
            ),
            Kept::Awake => (
                &self.awake,
                ", kept warm (awake asked for; one CPU here): rehearsals between the runs",
            ),
        }
    }
}

impl std::fmt::Debug for CrossRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self
            .configs
            .iter()
            .map(|c| format!("{} ({:?})", c.engine, c.isolation))
            .collect();
        f.debug_struct("CrossRun").field("configs", &names).finish()
    }
}

/// A report as JSON without what legitimately differs between two runs of
/// the same script: durations, memory and fuel figures, ids.
pub fn normalised(r: &ExecutionReport) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in [
                    "duration_ms",
                    "elapsed_ms",
                    "elapsedMs",
                    "memory_used_bytes",
                    "fuel_consumed",
                    "script_id",
                    "request_id",
                    "retried",
                ] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    strip(&mut v);
    v
}

/// The warnings engines log in this process when a freed runtime kept
/// memory: an engine leak. QuickJS built with `NDEBUG` no longer turns it
/// into an abort (docs/security.md), and its allocator gives the bytes
/// back once the runtime is gone; the oracles fail on a leak it could not
/// give back (`lost`), and count the rest. Behind the process boundary
/// such a warning is the worker's.
mod leaks {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tracing::field::{Field, Visit};
    use tracing::{span, Event, Level, Metadata, Subscriber};

    static SEEN: AtomicU64 = AtomicU64::new(0);
    static GIVEN_BACK: AtomicU64 = AtomicU64::new(0);

    struct Watch;

    fn watched(m: &Metadata<'_>) -> bool {
        *m.level() == Level::WARN && m.target().starts_with("harness_quickjs")
    }

    /// The event's `lost` field; a warning without one counts as lost.
    struct Lost(Option<u64>);

    impl Visit for Lost {
        fn record_u64(&mut self, f: &Field, v: u64) {
            if f.name() == "lost" {
                self.0 = Some(v);
            }
        }
        fn record_i64(&mut self, f: &Field, v: i64) {
            if f.name() == "lost" {
                self.0 = Some(v.unsigned_abs());
            }
        }
        fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
    }

    impl Subscriber for Watch {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            watched(m)
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, e: &Event<'_>) {
            if !watched(e.metadata()) {
                return;
            }
            let mut lost = Lost(None);
            e.record(&mut lost);
            if lost.0 == Some(0) {
                let n = GIVEN_BACK.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= 10 {
                    eprintln!("note: QuickJS leaked in a run it then discarded; its allocator gave the memory back ({n} so far)");
                }
            } else {
                SEEN.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    /// Starts counting, unless the process has a subscriber already.
    pub(crate) fn watch() {
        let _ = tracing::subscriber::set_global_default(Watch);
    }

    /// Leaks so far whose memory stayed lost.
    pub(crate) fn seen() -> u64 {
        SEEN.load(Ordering::SeqCst)
    }

    /// Leaks so far whose memory the allocator gave back.
    #[cfg(test)]
    pub(crate) fn given_back() -> u64 {
        GIVEN_BACK.load(Ordering::SeqCst)
    }
}

impl CrossRun {
    /// Every built engine behind the process boundary (a worker serves
    /// many runs), and in process where the engine can stop a script.
    pub fn new() -> Self {
        leaks::watch();
        let limits = oracle_limits();
        let mut configs = Vec::new();
        for engine in EngineKind::available() {
            let mut isolations = vec![Isolation::Process];
            if engine.default_isolation() == Isolation::InProcess {
                isolations.insert(0, Isolation::InProcess);
            }
            for isolation in isolations {
                // One engine thread, or one worker process: the second
                // run of a pair always meets the engine state the first
                // left (after a private run the pool would otherwise hand
                // the next run to another thread while the first one
                // tidies up).
                let with = |kept| harness_with_workers(engine, isolation, limits.clone(), 1, kept);
                configs.push(Shared {
                    engine,
                    isolation,
                    plain: with(Kept::No),
                    warm: with(Kept::Warm),
                    awake: with(Kept::Awake),
                });
            }
        }
        CrossRun {
            rt: runtime(),
            limits,
            configs,
            last: std::sync::Mutex::new(None),
        }
    }

    /// Rehearsals run so far by the harnesses kept warm, awake or not
    /// (those of the pairs whose two lengths differ in parity).
    pub fn rehearsals(&self) -> u64 {
        self.configs
            .iter()
            .map(|c| c.warm.rehearsals() + c.awake.rehearsals())
            .sum()
    }

    /// Builds two scripts from `data` (its two halves) and checks them on
    /// every configuration. Returns the pair.
    pub fn check(&self, data: &[u8]) -> (String, String) {
        let (a, b) = data.split_at(data.len() / 2);
        let first = grammar::program(&mut arbitrary::Unstructured::new(a));
        let second = grammar::program(&mut arbitrary::Unstructured::new(b));
        self.check_pair(&first, &second);
        (first, second)
    }

    /// Runs `first` then `second` on each configuration's harness, and
    /// `second` on a fresh one, and compares the two reports of `second`.
    /// Checks for an engine leak before the pair and after each run,
    /// naming where it was first seen.
    pub fn check_pair(&self, first: &str, second: &str) {
        let last = self
            .last
            .lock()
            .map(|mut l| l.replace((first.to_string(), second.to_string())))
            .unwrap_or(None);
        let leak_check = |when: &str| {
            if leaks::seen() == 0 {
                return;
            }
            let earlier = match &last {
                Some((f, s)) => format!(
                    "\n(or at the end of the pair before, whose fresh harness freed its runtime after its check)\n--- the pair before: first\n{f}\n--- the pair before: second\n{s}"
                ),
                None => String::new(),
            };
            panic!(
                "QuickJS (in this process) leaked memory that a freed runtime kept and its allocator did not give back, seen {when} (an engine frees a tainted run's runtime after the run answered, so the leak may be the run's before)\n--- first\n{first}\n--- second\n{second}{earlier}"
            );
        };
        leak_check("before this pair ran anything");
        // Half the pairs (by their lengths, so that a pair replays the
        // same way) run on the harnesses kept warm: rehearsals then run
        // in the pause between the two runs. Half of those on the ones
        // kept awake too.
        let kept = match (first.len() ^ second.len()) & 3 {
            1 => Kept::Warm,
            3 => Kept::Awake,
            _ => Kept::No,
        };
        for c in &self.configs {
            let (engine, isolation) = (&c.engine, &c.isolation);
            let (shared, how) = c.harness(kept);
            let before = self.rt.block_on(shared.run(first));
            if harness::core::body::Body::parse(first).is_err() {
                assert_refused(&format!("{engine} ({isolation:?}{how})"), first, &before);
            }
            leak_check(&format!(
                "after the first run on {engine} ({isolation:?}{how})"
            ));
            // Let the engine thread go idle, so that the second run meets
            // what its tidy-up left (a private run's tidy-up, collecting
            // its realm and making the next, takes a few ms under the
            // sanitiser), as a run some time later would.
            std::thread::sleep(std::time::Duration::from_millis(25));
            let after = self.rt.block_on(shared.run(second));
            leak_check(&format!(
                "after the second run on {engine} ({isolation:?}{how})"
            ));
            // A harness that never ran anything (behind the process
            // boundary: with workers of its own).
            let fresh_harness = fuzz_harness(*engine, *isolation, self.limits.clone());
            let fresh = self.rt.block_on(fresh_harness.run(second));
            leak_check(&format!("after the fresh run on {engine} ({isolation:?})"));
            drop(fresh_harness);
            if Outcome::of(&after).hit_limit() || Outcome::of(&fresh).hit_limit() {
                continue;
            }
            let (x, y) = (normalised(&after), normalised(&fresh));
            assert!(
                x == y,
                "{engine} ({isolation:?}{how}): the second run differs from a fresh run\n--- first\n{first}\n--- second\n{second}\n--- after the first\n{x:#}\n--- fresh\n{y:#}"
            );
        }
    }
}

impl Default for CrossRun {
    fn default() -> Self {
        Self::new()
    }
}

/// xorshift64: reproducible inputs without a dependency (the smoke test,
/// `fuzz-tool sample`, the grammar tests).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Up to `max` bytes (the length is random too).
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = (self.next_u64() as usize) % (max + 1);
        self.fill(n)
    }

    /// Exactly `n` bytes.
    pub fn fill(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// A seed with a few bytes replaced, inserted or removed.
    pub fn mutate(&mut self, seed: &str) -> Vec<u8> {
        let mut b = seed.as_bytes().to_vec();
        for _ in 0..1 + self.next_u64() % 4 {
            let at = (self.next_u64() as usize) % (b.len() + 1);
            match self.next_u64() % 3 {
                0 if at < b.len() => b[at] = self.next_u64() as u8,
                1 if at < b.len() => {
                    b.remove(at);
                }
                _ => {
                    const PUNCT: &[u8] = b"{}()[];'`\"\\/*+-.=<>?!0aZ\n";
                    b.insert(at, PUNCT[(self.next_u64() as usize) % PUNCT.len()])
                }
            }
        }
        b
    }
}

/// Hand-written inputs every target starts from: the hostile scripts of
/// the security suite in miniature, and ordinary ones. `cargo run -p
/// harness-fuzzing --example fuzz-tool -- seed fuzz/corpus` writes them
/// into each target's corpus.
pub const SEEDS: &[&str] = &[
    "return 1+1",
    "while(true){}",
    "for(;;){ try { for(;;){} } catch(e) {} }",
    "const a = []; for(;;) a.push(new Array(1e5).fill('x'))",
    "let s = 'x'; for(;;) s += s",
    "function f(){ return f() } return f()",
    "return eval('1')",
    "return (() => {}).constructor('return 1')()",
    "Object.prototype.polluted = 1; return {}.polluted",
    "tools.echo({a: 1}); return 1",
    "return await Promise.all([1,2,3].map(i => tools.echo({i})))",
    "try { await tools.fail({}) } catch (e) { return e.message }",
    "for (let i = 0; i < 20; i++) await tools.echo({i})",
    "for (let i = 0; i < 100; i++) console.log(i)",
    "return 'x'.repeat(200000)",
    "return 10n",
    "const o = {}; o.o = o; return o",
    "return new Proxy({}, { get() { throw new Error('trap') } })",
    "throw new TypeError('boom')",
    "throw null",
    "return [1, 'a', null, {b: [true]}]",
    "return JSON.parse('[' .repeat(5000))",
    "return /(a+)+$/.test('a'.repeat(30) + 'b')",
    "context.x = 1",
    "globalThis.tools = null; return typeof tools",
    "import('x')",
    "return Symbol('s')",
    "await new Promise(() => {})",
    "const {a, ...rest} = {a: 1, b: 2}; return rest",
    "class A { #x = 1; get x() { return this.#x } } return new A().x",
    "<tool-calls>\nreturn 1\n</tool-calls>",
    "interface A { x: number } const a: A = { x: 1 }; return a.x",
];

#[cfg(test)]
mod tests;
