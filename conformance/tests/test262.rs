//! The test262 runner on its own fixtures (conformance/fixtures/test262).

use harness_conformance::test262::{run, Counts, Options};
use harness_quickjs::QuickJs;

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/test262")
}

fn counts(pass: usize, fail: usize, skip: usize) -> Counts {
    Counts { pass, fail, skip }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardened_run_of_the_fixtures() {
    let report = run(&QuickJs::new(), &Options::new(fixtures()))
        .await
        .unwrap();
    let text = report.render();
    // built-ins/hardening: the direct write, and the question whether a
    // built-in is extensible, run in a private realm and pass; the override
    // test stays shared and passes; the write through an alias the realm
    // check cannot follow meets the frozen intrinsics.
    for (dir, want) in [
        ("language/basics", counts(6, 1, 0)),
        ("built-ins/async", counts(1, 1, 0)),
        ("built-ins/features", counts(2, 1, 2)),
        ("built-ins/hardening", counts(3, 1, 0)),
    ] {
        assert_eq!(report.directories[dir], want, "{dir}: {text}");
    }
    let private = |test: &str| {
        report
            .private_realm
            .contains(&format!("built-ins/hardening/{test}"))
    };
    assert!(
        private("mutates-intrinsic.js")
            && private("asks-extensible.js")
            && !private("override.js")
            && !private("hidden-write.js"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{} tests ran in a private realm (they change a built-in or ask whether one is frozen), 0 of them failed\n",
            report.private_realm.len()
        )),
        "{text}"
    );
    let failed: Vec<&str> = report.failures.iter().map(|(t, _)| t.as_str()).collect();
    // The wrong assertion, the async failure, eval under hardening, and a
    // write to a frozen intrinsic.
    assert_eq!(
        failed,
        [
            "built-ins/async/fail.js",
            "built-ins/features/eval.js",
            "built-ins/hardening/hidden-write.js",
            "language/basics/fail.js"
        ],
        "{text}"
    );
    // Of those, only the write passes with the intrinsics unfrozen: eval is
    // refused whether they are frozen or not.
    assert_eq!(
        report.frozen_only,
        ["built-ins/hardening/hidden-write.js"],
        "{text}"
    );
    assert!(
        text.contains("FAIL built-ins/hardening/hidden-write.js: strict: threw TypeError")
            && text.contains("[passes with the intrinsics unfrozen]\n"),
        "{text}"
    );
    assert!(
        text.contains("of the 4 failures, 1 pass with the intrinsics unfrozen (lost to freezing), 3 fail for another reason\n"),
        "{text}"
    );
    assert!(
        report
            .failures
            .iter()
            .any(|(_, why)| why.contains("Test262Error")),
        "{text}"
    );
    assert!(text.ends_with("12 passed, 4 failed, 2 skipped\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_run_shows_what_hardening_costs() {
    let mut opts = Options::new(fixtures());
    opts.raw = true;
    let report = run(&QuickJs::new(), &opts).await.unwrap();
    assert_eq!(
        report.directories["built-ins/features"],
        counts(3, 0, 2),
        "{}",
        report.render()
    );
    assert_eq!(report.total(), counts(14, 2, 2));
    // Raw, nothing is frozen: no rerun, no classification.
    assert!(report.frozen_only.is_empty());
    assert!(!report.render().contains("unfrozen"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_and_skips() {
    let mut opts = Options::new(fixtures());
    opts.filter = Some("language".into());
    let report = run(&QuickJs::new(), &opts).await.unwrap();
    assert_eq!(report.directories.len(), 1);
    assert_eq!(report.total(), counts(6, 1, 0));
    let mut opts = Options::new(fixtures());
    opts.filter = Some("built-ins/features".into());
    let report = run(&QuickJs::new(), &opts).await.unwrap();
    let skipped: Vec<&str> = report.skipped.iter().map(|(_, why)| why.as_str()).collect();
    assert_eq!(
        skipped,
        [
            "modules are not supported",
            "feature SharedArrayBuffer is skipped"
        ]
    );
    opts.filter = Some("no/such/dir".into());
    assert!(run(&QuickJs::new(), &opts).await.is_err());
}

/// An engine without global code (the default `eval_global`).
struct NoGlobalCode(QuickJs);

impl harness_core::Tunable for NoGlobalCode {}

#[async_trait::async_trait]
impl harness_core::ScriptRuntimeAdapter for NoGlobalCode {
    fn info(&self) -> harness_core::EngineInfo {
        self.0.info()
    }
    async fn check_syntax(&self, source: &str) -> Result<(), harness_core::ScriptError> {
        self.0.check_syntax(source).await
    }
    async fn execute(
        &self,
        request: harness_core::ExecutionRequest,
    ) -> harness_core::ExecutionReport {
        self.0.execute(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_cannot_run_global_code_skips_every_test() {
    let report = run(&NoGlobalCode(QuickJs::new()), &Options::new(fixtures()))
        .await
        .unwrap();
    // 14 tests the engine cannot run, plus the 2 skipped by feature or flag.
    assert_eq!(report.total(), counts(0, 0, 18), "{}", report.render());
    assert!(report.failures.is_empty());
    assert!(report
        .skipped
        .iter()
        .any(|(_, why)| why.starts_with("the engine cannot run it: ")));
    assert!(report
        .render()
        .ends_with("0 passed, 0 failed, 18 skipped\n"));
}
