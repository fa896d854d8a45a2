//! Shared helpers for the integration tests; the test tools are the
//! conformance suite's (`harness_conformance::tools`).
#![allow(dead_code)]

use harness::core::ApprovalBridge;
use harness::{ExecutionReport, Harness, Limits, Mode};
use serde_json::{json, Value};
use std::sync::Arc;

pub use harness_conformance::tools::{registry, Counters};

pub fn harness_with(
    limits: Limits,
    mode: Mode,
    approvals: Arc<dyn ApprovalBridge>,
) -> (Harness, Arc<Counters>) {
    let c = Arc::new(Counters::default());
    let h = Harness::builder()
        .tools(registry(c.clone()))
        .limits(limits)
        .mode(mode)
        .approvals(approvals)
        .build()
        .unwrap();
    (h, c)
}

pub fn harness() -> (Harness, Arc<Counters>) {
    harness_with(
        Limits::default(),
        Mode::Enabled,
        Arc::new(harness::AutoDeny::default()),
    )
}

pub fn short(ms: u64) -> Limits {
    Limits::default().with_timeout_ms(ms)
}

/// Asserts the run failed with `code` and returns the report.
#[track_caller]
pub fn expect_code(r: &ExecutionReport, code: harness::ErrorCode) {
    let got = r.error.as_ref().map(|e| e.code);
    assert_eq!(
        got,
        Some(code),
        "report: {}",
        serde_json::to_string_pretty(r).unwrap()
    );
    assert!(!r.ok);
}

#[track_caller]
pub fn expect_value(r: &ExecutionReport, v: Value) {
    assert!(r.ok, "report: {}", serde_json::to_string_pretty(r).unwrap());
    assert_eq!(r.value, Some(v));
}

/// Runs `source` pinned to the shared realm: the context other runs use,
/// whose built-ins are frozen. (Left to the facade, a script that asks
/// whether a built-in is frozen gets a private realm.)
pub async fn run_shared(h: &Harness, source: &str) -> ExecutionReport {
    let mut request = h.request(source);
    request.limits = request.limits.with_realm(Some(harness::Realm::Shared));
    h.execute(request).await
}

/// The host still works after whatever ran before, and the shared realm
/// is still frozen.
pub async fn assert_healthy(h: &Harness) {
    let r = run_shared(
        h,
        "return [1 + 1, typeof Object.prototype.polluted, Object.isFrozen(Array.prototype)]",
    )
    .await;
    expect_value(&r, json!([2, "undefined", true]));
}
