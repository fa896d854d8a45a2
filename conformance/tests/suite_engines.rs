//! Which adapter a cross-run case's pair runs on, and that the suite says
//! so when it cannot make sure both runs meet one engine thread.

use harness_conformance::{all_cases, run_suite, run_suite_on, Status, SuiteEngines};
use harness_core::process::ProcessOptions;
use harness_core::Isolation;
use std::sync::Arc;

const CASE: &str = "cross_run::script_id";

fn note(status: &Status) -> Option<&str> {
    match status {
        Status::Passed { note } => note.as_deref(),
        other => panic!("{CASE} did not pass: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_on_the_one_thread_twin_passes_without_a_caveat() {
    let engines = SuiteEngines::for_engine(
        &harness_quickjs::descriptor(),
        Isolation::InProcess,
        ProcessOptions::current_exe,
    )
    .expect("an in-process engine");
    assert!(engines.single.is_some(), "QuickJS sizes its pool");
    let report = run_suite_on(engines, &all_cases(), Some(CASE)).await;
    let ran: Vec<_> = report
        .results
        .iter()
        .filter(|r| r.status != Status::Untested)
        .collect();
    assert_eq!(ran.len(), 1, "{CASE} matched {} cases", ran.len());
    assert_eq!(note(&ran[0].status), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_on_the_shared_pool_says_so() {
    let adapter = Arc::new(harness_quickjs::QuickJs::new());
    let report = run_suite(adapter, &all_cases(), Some(CASE)).await;
    let ran = report
        .results
        .iter()
        .find(|r| r.status != Status::Untested)
        .expect("the case ran");
    let note = note(&ran.status).unwrap_or_default();
    assert!(note.contains("only as the pool chose"), "{note}");
}
