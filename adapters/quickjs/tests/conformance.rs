//! QuickJS runs the whole shared conformance and security suite.

use harness_conformance::{all_cases, format, run_suite};
use harness_quickjs::QuickJs;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickjs_passes_the_whole_suite() {
    let report = run_suite(Arc::new(QuickJs::new()), &all_cases(), None).await;
    let text = format::text(std::slice::from_ref(&report));
    assert!(report.everything_was_tested(), "{text}");
    assert_eq!(
        report.unsupported(),
        0,
        "QuickJS declares every capability the suite asks for\n{text}"
    );
}
