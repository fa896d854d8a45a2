//! The suite as test trials, for each adapter's `tests/conformance.rs`
//! (feature `trials`): one trial per engine and case, named
//! `ENGINE::module::case` so that one case can be filtered and rerun.
//!
//! An adapter's test binary is also the worker its process adapters start,
//! so its `main` is declared with [`harness_core::worker_main!`]:
//!
//! ```ignore
//! harness_core::worker_main! {
//!     engines = [harness_boa::descriptor()];
//!     fn main() {
//!         harness_conformance::trials::Trials::new()
//!             .in_process(&harness_boa::descriptor())
//!             .process(&harness_boa::descriptor())
//!             .run()
//!     }
//! }
//! ```

use crate::{all_cases, run_suite_on, unsupported, Status, SuiteEngines};
use harness_core::engine::EngineDescriptor;
use harness_core::process::ProcessOptions;
use harness_core::{Isolation, ScriptRuntimeAdapter};
use libtest_mimic::{Arguments, Failed, Trial};
use std::sync::Arc;

/// The engines a test binary holds to the suite.
#[derive(Default)]
pub struct Trials {
    engines: Vec<SuiteEngines>,
    /// Engines whose end-of-run check is held on their own thread
    /// ([`crate::walls`]).
    walls: Vec<EngineDescriptor>,
}

impl std::fmt::Debug for Trials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.engines.iter().map(|e| label(e.any.as_ref())).collect();
        f.debug_struct("Trials").field("engines", &names).finish()
    }
}

fn label(adapter: &dyn ScriptRuntimeAdapter) -> String {
    let info = adapter.info();
    match info.isolation {
        harness_core::Isolation::InProcess => info.name,
        harness_core::Isolation::Process => format!("{} (process)", info.name),
    }
}

impl Trials {
    /// No engines yet.
    pub fn new() -> Self {
        Trials::default()
    }

    /// Any adapter. The cross-run cases run on it too, where the pause
    /// between steps makes it likely, not certain, that both runs of a
    /// pair meet one engine thread; [`Trials::in_process`] and
    /// [`Trials::process`] make it certain.
    pub fn adapter(mut self, adapter: Arc<dyn ScriptRuntimeAdapter>) -> Self {
        self.engines.push(SuiteEngines::new(adapter));
        self
    }

    /// The engine in this process (the cross-run cases on a twin with one
    /// engine thread, when the descriptor can size its pool).
    pub fn in_process(mut self, engine: &EngineDescriptor) -> Self {
        self.walls.push(engine.clone());
        self.engine(engine, Isolation::InProcess)
    }

    /// The engine behind the process boundary, with this test binary as
    /// its worker (declare its `main` with [`harness_core::worker_main!`]);
    /// the cross-run cases on a twin with one worker process.
    pub fn process(self, engine: &EngineDescriptor) -> Self {
        self.engine(engine, Isolation::Process)
    }

    /// The engine in `isolation`, with this test binary as the worker of
    /// its processes (never started in process).
    fn engine(mut self, engine: &EngineDescriptor, isolation: Isolation) -> Self {
        let engines = SuiteEngines::for_engine(engine, isolation, ProcessOptions::current_exe)
            .expect("the test binary's path");
        self.engines.push(engines);
        self
    }

    /// One trial per engine and case. A case the engine may leave
    /// unsupported ([`unsupported::UNSUPPORTED`]) and cannot run is shown
    /// as ignored, with the reason as its kind.
    pub fn trials(&self, rt: &Arc<tokio::runtime::Runtime>) -> Vec<Trial> {
        let cases = all_cases();
        let mut trials = Vec::new();
        for engines in &self.engines {
            let label = label(engines.any.as_ref());
            let info = engines.any.info();
            for case in &cases {
                let name = format!("{label}::{}", case.name);
                let listed = unsupported::listed(case.name, &info);
                if let (Some(u), Some(_)) = (listed, case.needs.missing(&info.capabilities)) {
                    trials.push(
                        Trial::test(name, || Ok(()))
                            .with_kind(format!("unsupported: {}", u.reason))
                            .with_ignored_flag(true),
                    );
                    continue;
                }
                let (rt, engines, case) = (rt.clone(), engines.clone(), *case);
                trials.push(Trial::test(name, move || {
                    let report = rt.block_on(run_suite_on(engines, &[case], None));
                    match &report.results[0].status {
                        // Passed, or failed where the list expects it to.
                        Status::Passed { .. } | Status::Unsupported { .. } => Ok(()),
                        Status::Failed { reason } => Err(Failed::from(reason.as_str())),
                        Status::Untested => Err(Failed::from("the case was not run")),
                    }
                }));
            }
        }
        for engine in &self.walls {
            for case in crate::walls::CASES {
                let name = format!("{}::end_check::{}", engine.name, case.name);
                let engine = engine.clone();
                trials.push(Trial::test(name, move || {
                    crate::walls::check(&engine, case).map_err(Failed::from)
                }));
            }
        }
        trials
    }

    /// Runs the trials as a libtest-style test binary (filters, `--list`,
    /// `--nocapture`) and exits. Cases time themselves (deadlines,
    /// cancellation), so they run one at a time unless told otherwise.
    pub fn run(self) -> ! {
        let mut args = Arguments::from_args();
        args.test_threads.get_or_insert(1);
        let rt = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime"),
        );
        let trials = self.trials(&rt);
        let conclusion = libtest_mimic::run(&args, trials);
        if let Some((line, holds)) = crate::REUSE.summary() {
            println!("{line}");
            if !holds {
                std::process::exit(101);
            }
        }
        conclusion.exit()
    }
}

/// The whole `tests/conformance.rs` of an adapter: a `main` that holds the
/// engine `descriptor` describes to the suite in this process and behind
/// the process boundary, and serves it when started as the worker.
///
/// ```ignore
/// harness_conformance::conformance_main!(harness_boa::descriptor());
/// ```
#[macro_export]
macro_rules! conformance_main {
    ($descriptor:expr) => {
        $crate::__core::worker_main! {
            engines = [$descriptor];
            fn main() {
                let engine = $descriptor;
                $crate::trials::Trials::new()
                    .in_process(&engine)
                    .process(&engine)
                    .run()
            }
        }
    };
}
