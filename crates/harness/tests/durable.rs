//! Durable runs through the facade: `HarnessBuilder::suspend`,
//! `Harness::resume`, on the WASI engine with sealed continuations.

use async_trait::async_trait;
use harness::durable::{Answer, ContinuationKeys, DurableRuns};
use harness::{
    ApprovalBridge, ApprovalDecision, ApprovalRequest, DeferredTool, EngineKind, ErrorCode, FnTool,
    Harness, ToolRegistry,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

struct Suspend;

#[async_trait]
impl ApprovalBridge for Suspend {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Suspend
    }
}

fn registry() -> ToolRegistry {
    let mut reg = ToolRegistry::new();
    reg.register(
        FnTool::new(
            "send",
            "sends",
            json!({"type": "object"}),
            |a, _| async move { Ok(json!({"sent": a["to"]})) },
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
    reg
}

fn harness(keys: &ContinuationKeys, threads: usize) -> Harness {
    Harness::builder()
        .engine(EngineKind::Wasi)
        .threads(threads)
        .tools(registry())
        .approvals(Arc::new(Suspend))
        .suspend(DurableRuns::new(keys.clone()))
        .build()
        .unwrap()
}

fn approve(id: u64) -> BTreeMap<u64, Answer> {
    BTreeMap::from([(id, Answer::Approve)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_resumes_once_and_in_another_harness_with_the_key() {
    let keys = ContinuationKeys::generate().unwrap();
    let a = harness(&keys, 1);
    let r = a
        .run("const who = await tools.ask({q: 'to?'}); return await tools.send({to: who})")
        .await;
    let s = r.suspension.clone().expect("suspended");
    assert_eq!(s.pending[0].kind, harness::PendingKind::Deferred);
    assert_eq!(a.pending(&s.continuation).unwrap(), s.pending);

    // Answers that do not fit: refused, and the continuation stays good.
    let wrong = a.resume(&s.continuation, approve(1)).await;
    assert_eq!(wrong.code(), Some(ErrorCode::ContinuationInvalidError));

    // Another harness (another process, another machine) with the key.
    let b = harness(&keys, 1);
    let answer = BTreeMap::from([(
        1,
        Answer::Result {
            value: json!("ada"),
        },
    )]);
    let r2 = b.resume(&s.continuation, answer.clone()).await;
    let s2 = r2
        .suspension
        .clone()
        .expect("then waits on send's approval");
    assert_eq!(s2.pending[0].tool, "send");
    let done = a.resume(&s2.continuation, approve(2)).await;
    assert_eq!(done.value, Some(json!({"sent": "ada"})), "{done:?}");
    assert_eq!(done.tool_calls.len(), 2);

    // The ledger is the harness's: b took the first continuation.
    let twice = b.resume(&s.continuation, answer.clone()).await;
    assert_eq!(twice.code(), Some(ErrorCode::ContinuationInvalidError));
    assert!(twice.error.unwrap().message.contains("resumed already"));

    // A harness without the key, or without suspend, cannot open it.
    let stranger = harness(&ContinuationKeys::generate().unwrap(), 1);
    let r = stranger.resume(&s2.continuation, approve(2)).await;
    assert_eq!(r.code(), Some(ErrorCode::ContinuationInvalidError));
    let plain = Harness::builder().engine(EngineKind::Wasi).build().unwrap();
    let r = plain.resume(&s2.continuation, approve(2)).await;
    assert_eq!(r.code(), Some(ErrorCode::ContinuationInvalidError));
}

/// A run that may suspend starts in a fresh instance, and no instance a
/// run suspended or resumed in serves another run (a harness that does
/// not suspend reuses its instance: the ids would show it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_may_suspend_never_share_an_instance() {
    let reusing = Harness::builder()
        .engine(EngineKind::Wasi)
        .threads(1)
        .build()
        .unwrap();
    let a = reusing.run("return 1").await.context_id;
    let b = reusing.run("return 1").await.context_id;
    assert_eq!(a, b, "the plain harness reuses its instance");

    let keys = ContinuationKeys::generate().unwrap();
    let h = harness(&keys, 1);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        let r = h.run("return 1").await;
        assert_eq!(r.value, Some(json!(1)), "{r:?}");
        assert!(
            seen.insert(r.context_id.unwrap()),
            "a fresh context each run"
        );
    }
    let r = h
        .run("const secret = 's3'; await tools.send({to: 'x'}); return secret")
        .await;
    assert!(seen.insert(r.context_id.unwrap()));
    let s = r.suspension.clone().unwrap_or_else(|| panic!("{r:?}"));
    let done = h.resume(&s.continuation, approve(1)).await;
    assert_eq!(done.value, Some(json!("s3")));
    assert!(
        seen.insert(done.context_id.unwrap()),
        "resumed in a fresh instance"
    );
    let after = h.run("return 1").await;
    assert!(seen.insert(after.context_id.unwrap()));
}

/// Suspended runs hold no engine thread: one thread serves other runs
/// while a hundred wait, then resumes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_suspended_runs_hold_no_thread() {
    let keys = ContinuationKeys::generate().unwrap();
    let h = harness(&keys, 1);
    let mut waiting = Vec::new();
    for i in 0..100 {
        let r = h
            .run(&format!(
                "const n = {i}; const r = await tools.send({{to: n}}); return r.sent * 2"
            ))
            .await;
        waiting.push(r.suspension.expect("suspended").continuation);
    }
    for i in 0..10 {
        let r = h.run(&format!("return {i} + 1")).await;
        assert_eq!(r.value, Some(json!(i + 1)));
    }
    for (i, c) in waiting.iter().enumerate() {
        let r = h.resume(c, approve(1)).await;
        assert_eq!(r.value, Some(json!(i * 2)), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_is_small() {
    use base64::Engine as _;
    let keys = ContinuationKeys::generate().unwrap();
    let h = harness(&keys, 1);
    let size = |s: &harness::Suspension| {
        base64::engine::general_purpose::STANDARD
            .decode(&s.continuation)
            .unwrap()
            .len()
    };
    let r = h
        .run("const r = await tools.send({to: 'x'}); return r.sent")
        .await;
    let small = size(r.suspension.as_ref().unwrap());
    assert!(small <= 32 << 10, "{small} bytes");
    let r = h
        .run(
            "const a = Array.from({length: 50000}, (_, i) => ({i, s: 'item ' + i})); \
             await tools.send({to: 1}); return a[49999].s",
        )
        .await;
    let big = size(r.suspension.as_ref().unwrap());
    assert!(big <= 2 << 20, "{big} bytes");
    eprintln!("continuations: {small} bytes (one call), {big} bytes (50,000 objects)");
    let done = h
        .resume(&r.suspension.unwrap().continuation, approve(1))
        .await;
    assert_eq!(done.value, Some(json!("item 49999")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_other_than_wasi_refuse_to_suspend() {
    let keys = ContinuationKeys::generate().unwrap();
    let h = Harness::builder()
        .engine(EngineKind::QuickJs)
        .suspend(DurableRuns::new(keys))
        .build()
        .unwrap();
    let r = h.run("return 1").await;
    assert_eq!(r.code(), Some(ErrorCode::UnsupportedError));
    assert!(r.error.unwrap().message.contains("wasi"));
}

/// A session's run suspends with its session: the old session closes,
/// and the resume goes on in a new session (here or in another harness
/// with the key) that holds what the old one held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_suspends_with_its_run_and_moves() {
    let keys = ContinuationKeys::generate().unwrap();
    let a = harness(&keys, 1);
    let s = a.open_session().unwrap();
    let r = s.run("const seen = []; let n = 1; return n").await;
    assert_eq!(r.value, Some(json!(1)), "{r:?}");
    let r = s
        .run("n += 1; const sent = await tools.send({to: 'x'}); seen.push(sent.sent); return n")
        .await;
    let c = r.suspension.clone().expect("suspends").continuation;
    let closed = s.run("return n").await;
    assert_eq!(closed.code(), Some(ErrorCode::SessionClosedError));
    assert!(closed.error.unwrap().message.contains("suspended"));

    let b = harness(&keys, 1);
    let done = b.resume(&c, approve(1)).await;
    assert_eq!(done.value, Some(json!(2)), "{done:?}");
    let moved = b
        .session(done.session.as_deref().expect("the new session"))
        .unwrap();
    assert_ne!(moved.id(), s.id());
    let r = moved.run("n += 1; return [n, seen]").await;
    assert_eq!(r.value, Some(json!([3, ["x"]])), "{r:?}");
    // Nothing of it outside the session.
    assert_eq!(
        b.run("return typeof n").await.value,
        Some(json!("undefined"))
    );
}
