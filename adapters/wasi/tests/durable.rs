//! Suspend and resume on the WASI engine, through the core's event loop
//! (the `harness` crate's tests seal continuations for real; here the
//! sealer keeps the plain bytes).

use async_trait::async_trait;
use harness_core::durable::{Answer, Durable, Resume, Sealer};
use harness_core::tool::{DeferredTool, FnTool};
use harness_core::{
    ApprovalBridge, ApprovalDecision, ApprovalRequest, ErrorCode, ExecutionRequest,
    ScriptRuntimeAdapter, ToolRegistry, ToolSet,
};
use harness_wasi::Wasi;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug)]
struct Plain;

impl Sealer for Plain {
    fn seal(&self, _id: &str, plain: &[u8]) -> Result<Vec<u8>, String> {
        Ok(plain.to_vec())
    }
}

struct SuspendAll;

#[async_trait]
impl ApprovalBridge for SuspendAll {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Suspend
    }
}

fn tools() -> ToolSet {
    let mut reg = ToolRegistry::new();
    reg.register(
        FnTool::new(
            "guarded",
            "doubles",
            json!({"type": "object"}),
            |a, _| async move { Ok(json!(a["n"].as_i64().unwrap_or(0) * 2)) },
        )
        .requiring_approval(|_| true),
    )
    .unwrap();
    reg.register(DeferredTool::new(
        "ask",
        "asks a person",
        json!({"type": "object"}),
    ))
    .unwrap();
    let mut set = ToolSet::default();
    set.registry = Arc::new(reg);
    set.approvals = Arc::new(SuspendAll);
    set
}

fn request(source: &str) -> ExecutionRequest {
    let mut r = ExecutionRequest::new(source);
    r.tools = tools();
    r.durable = Some(Arc::new(Durable::new(Arc::new(Plain))));
    r
}

fn opened(report: &harness_core::ExecutionReport) -> Vec<u8> {
    use base64::Engine as _;
    let s = report.suspension.as_ref().expect("suspended");
    base64::engine::general_purpose::STANDARD
        .decode(&s.continuation)
        .unwrap()
}

async fn resume(
    engine: &Wasi,
    plain: &[u8],
    answers: BTreeMap<u64, Answer>,
) -> harness_core::ExecutionReport {
    let mut r = request("");
    r.resume = Some(Arc::new(Resume::new(plain, answers).unwrap()));
    engine.execute(r).await
}

const SCRIPT: &str = r#"
const big = Array.from({length: 1000}, (_, i) => ({i, s: 'item ' + i}));
console.log('before');
let got;
try { got = await tools.guarded({n: 21}); } catch (e) { got = e.name; }
const answer = await tools.ask({q: 'name?'});
console.log('after');
return {got, answer, n: big.length, last: big[999].s};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_suspends_twice_and_resumes_in_fresh_instances() {
    let engine = Wasi::with_max_workers(1);
    let first = engine.execute(request(SCRIPT)).await;
    assert!(!first.ok && first.error.is_none(), "{first:?}");
    let s = first.suspension.clone().unwrap();
    assert_eq!(s.pending.len(), 1);
    assert_eq!(s.pending[0].tool, "guarded");
    assert_eq!(s.pending[0].args, json!({"n": 21}));
    assert_eq!(first.console.len(), 1);

    // Another run meanwhile: the engine thread is free.
    let other = engine.execute(ExecutionRequest::new("return 7")).await;
    assert_eq!(other.value, Some(json!(7)));

    let plain = opened(&first);
    let second = resume(&engine, &plain, BTreeMap::from([(1, Answer::Approve)])).await;
    let s2 = second
        .suspension
        .clone()
        .expect("suspends again on the deferred tool");
    assert_eq!(s2.pending[0].tool, "ask");
    assert_ne!(s2.id, s.id);
    assert_eq!(second.tool_calls.len(), 2);
    assert_eq!(second.approvals.len(), 1);

    let answers = BTreeMap::from([(
        2,
        Answer::Result {
            value: json!("Ada"),
        },
    )]);
    let third = resume(&engine, &opened(&second), answers).await;
    assert!(third.ok, "{third:?}");
    assert_eq!(
        third.value,
        Some(json!({"got": 42, "answer": "Ada", "n": 1000, "last": "item 999"}))
    );
    let lines: Vec<&str> = third.console.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(lines, ["before", "after"], "the report is cumulative");
    assert_eq!(third.script_id, first.script_id);

    // The same continuation again, denied this time: the script catches it.
    let denied = resume(
        &engine,
        &plain,
        BTreeMap::from([(
            1,
            Answer::Deny {
                reason: Some("no".into()),
            },
        )]),
    )
    .await;
    let s3 = denied.suspension.expect("then waits on ask");
    let last = resume(
        &engine,
        &opened_of(&s3),
        BTreeMap::from([(
            2,
            Answer::Error {
                message: "nobody".into(),
            },
        )]),
    )
    .await;
    assert_eq!(last.code(), Some(ErrorCode::ToolExecutionError), "{last:?}");
    assert_eq!(
        last.approvals[0].outcome,
        harness_core::ApprovalOutcome::Denied
    );
}

fn opened_of(s: &harness_core::Suspension) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(&s.continuation)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_cannot_suspend_deny_and_fail_deferred_calls() {
    let engine = Wasi::with_max_workers(1);
    let mut r = request(
        "let a; try { await tools.guarded({n: 1}) } catch (e) { a = e.name } \
         let b; try { await tools.ask({}) } catch (e) { b = e.name } return [a, b]",
    );
    r.durable = None;
    let report = engine.execute(r).await;
    assert_eq!(
        report.value,
        Some(json!(["ApprovalDeniedError", "ToolExecutionError"])),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_under_other_limits_is_refused() {
    let engine = Wasi::with_max_workers(1);
    let first = engine.execute(request(SCRIPT)).await;
    let plain = opened(&first);
    let mut r = request("");
    r.limits.max_tool_calls = 3;
    r.resume = Some(Arc::new(
        Resume::new(&plain, BTreeMap::from([(1, Answer::Approve)])).unwrap(),
    ));
    let report = engine.execute(r).await;
    assert_eq!(report.code(), Some(ErrorCode::ContinuationInvalidError));
    assert!(report.tool_calls.is_empty());
}

/// Another guest build cannot resume: the image names the guest file's
/// hash, and a continuation whose hash differs is refused before any of
/// it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_of_another_guest_build_is_refused() {
    let engine = Wasi::with_max_workers(1);
    let first = engine.execute(request(SCRIPT)).await;
    let mut plain = opened(&first);
    let sha = engine.engine().preload().unwrap().sha256.clone();
    let at = plain
        .windows(sha.len())
        .position(|w| w == sha.as_bytes())
        .expect("the image names its guest");
    plain[at] = if plain[at] == b'0' { b'1' } else { b'0' };
    let report = resume(&engine, &plain, BTreeMap::from([(1, Answer::Approve)])).await;
    assert_eq!(report.code(), Some(ErrorCode::ContinuationInvalidError));
    assert!(
        report
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("guest build"),
        "{report:?}"
    );
    assert!(report.tool_calls.is_empty() && report.console.is_empty());
}

/// Time suspended does not count against `timeout_ms`: a run with a
/// 400 ms limit that waits 700 ms suspended still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_suspended_is_not_run_time() {
    let engine = Wasi::with_max_workers(1);
    let mut r = request("const a = await tools.guarded({n: 2}); return a");
    r.limits.timeout_ms = 400;
    let first = engine.execute(r).await;
    let plain = opened(&first);
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let mut again = request("");
    again.limits.timeout_ms = 400;
    again.resume = Some(Arc::new(
        Resume::new(&plain, BTreeMap::from([(1, Answer::Approve)])).unwrap(),
    ));
    let done = engine.execute(again).await;
    assert_eq!(done.value, Some(json!(4)), "{done:?}");
}
