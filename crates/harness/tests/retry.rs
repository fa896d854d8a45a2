//! A run that ends in HarnessInternalError is run once more on a fresh
//! engine, only when nothing it did can have had an effect.

use harness::{
    EngineInfo, ErrorCode, ExecutionReport, ExecutionRequest, Harness, ScriptError,
    ScriptRuntimeAdapter,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Fails its first `fail_first` runs with HarnessInternalError (as a dead
/// worker would), then runs on the real engine. `with_call` makes the
/// failed runs look as if a tool call had been dispatched.
struct Flaky {
    real: Arc<dyn ScriptRuntimeAdapter>,
    fail_first: u32,
    with_call: bool,
    runs: AtomicU32,
}

/// Not tuned: it schedules nothing of its own.
impl harness::Tunable for Flaky {}

#[async_trait::async_trait]
impl ScriptRuntimeAdapter for Flaky {
    fn info(&self) -> EngineInfo {
        self.real.info()
    }
    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        self.real.check_syntax(source).await
    }
    async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
        let n = self.runs.fetch_add(1, Ordering::SeqCst);
        if n < self.fail_first {
            // A real report of a run that did make a call, then "died".
            let mut r = if self.with_call {
                let mut req = request.clone();
                req.source = "await tools.nope({}).catch(() => 0); return 1".into();
                self.real.execute(req).await
            } else {
                ExecutionReport::failed("flaky", ScriptError::internal("x"))
            };
            r.ok = false;
            r.value = None;
            r.error = Some(ScriptError::internal(
                "the worker process died unexpectedly",
            ));
            return r;
        }
        self.real.execute(request).await
    }
}

fn flaky(fail_first: u32, with_call: bool) -> (Harness, Arc<Flaky>) {
    let real = harness::EngineKind::default().adapter().unwrap();
    let f = Arc::new(Flaky {
        real,
        fail_first,
        with_call,
        runs: AtomicU32::new(0),
    });
    let h = Harness::builder().adapter(f.clone()).build().unwrap();
    (h, f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_without_effects_is_retried_once() {
    let (h, f) = flaky(1, false);
    let r = h.run("return 7").await;
    assert!(r.ok && r.retried, "{r:?}");
    assert_eq!(r.value, Some(serde_json::json!(7)));
    assert_eq!(f.runs.load(Ordering::SeqCst), 2);

    // Twice in a row: one retry only, and its failure is the answer.
    let (h, f) = flaky(5, false);
    let r = h.run("return 7").await;
    assert_eq!(r.code(), Some(ErrorCode::HarnessInternalError));
    assert!(r.retried);
    assert_eq!(f.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_made_a_call_is_not_retried_and_opting_out_works() {
    let (h, f) = flaky(1, true);
    let r = h.run("return 7").await;
    assert_eq!(r.code(), Some(ErrorCode::HarnessInternalError));
    assert!(!r.retried);
    assert_eq!(f.runs.load(Ordering::SeqCst), 1);

    let real = harness::EngineKind::default().adapter().unwrap();
    let f = Arc::new(Flaky {
        real,
        fail_first: 1,
        with_call: false,
        runs: AtomicU32::new(0),
    });
    let h = Harness::builder()
        .adapter(f.clone())
        .retry_internal_errors(false)
        .build()
        .unwrap();
    let r = h.run("return 7").await;
    assert_eq!(r.code(), Some(ErrorCode::HarnessInternalError));
    assert_eq!(f.runs.load(Ordering::SeqCst), 1);
}
