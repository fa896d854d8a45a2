use super::*;
use harness_abi::run_config;

fn slot(
    tokio: &tokio::runtime::Runtime,
    waiting: bool,
) -> (Arc<CallSlot>, mpsc::Receiver<LoopEvent>) {
    let (tx, rx) = mpsc::channel();
    let fut: CallFuture = Box::pin(async { Ok("1".to_owned()) });
    let slot = Arc::new(CallSlot {
        id: 7,
        fut: std::sync::Mutex::new(Some(fut)),
        to: Starter {
            tx,
            loop_waiting: Arc::new(std::sync::atomic::AtomicBool::new(waiting)),
            tokio: tokio.handle().clone(),
        },
    });
    (slot, rx)
}

/// A woken call goes to the loop while it waits, to tokio otherwise;
/// either way exactly one outcome comes back.
#[test]
fn a_woken_call_is_polled_by_whoever_is_free() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let (s, rx) = slot(&rt, true);
    Waker::from(s.clone()).wake_by_ref();
    let Ok(LoopEvent::Poll(p)) = rx.recv_timeout(Duration::from_secs(5)) else {
        panic!("the waiting loop gets the poll");
    };
    assert_eq!(p.poll_once().map(|o| o.ok()), Some(Some("1".to_owned())));
    assert!(p.poll_once().is_none(), "the slot is empty once answered");

    let (s, rx) = slot(&rt, false);
    Waker::from(s).wake();
    let Ok(LoopEvent::ToolDone(7, Ok(v))) = rx.recv_timeout(Duration::from_secs(5)) else {
        panic!("tokio polls it and sends the outcome");
    };
    assert_eq!(v, "1");
}

/// A poll spawned on a runtime that has shut down is never run: the
/// call ends as aborted instead of leaving the loop to its deadline.
#[test]
fn a_poll_dropped_unrun_ends_the_call() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let (s, rx) = slot(&rt, false);
    rt.shutdown_background();
    Waker::from(s.clone()).wake();
    let Ok(LoopEvent::ToolDone(7, Err(f))) = rx.recv_timeout(Duration::from_secs(5)) else {
        panic!("the call ends");
    };
    assert_eq!(f.code, ErrorCode::ScriptCancelledError);
    assert!(s.poll_once().is_none(), "its future is gone");
}

/// The static part of the prelude's config is the same JSON, served
/// from the thread's cache or serialised again, for any sequence of
/// requests: one that differs in a tool, the allowlist, a context
/// field, a limit or the mode is never shown the last one's. The run's
/// part is the seed's 32 hex digits and the id, at fixed offsets.
#[test]
fn the_prelude_config_is_the_requests_own_whatever_ran_before() {
    use crate::tool::{Allowlist, FnTool, ToolRegistry};
    let mut registry = ToolRegistry::new();
    for name in ["alpha", "beta"] {
        registry
            .register(FnTool::new(
                name,
                "t",
                json!({"type": "object"}),
                |a, _| async move { Ok(a) },
            ))
            .unwrap();
    }
    let registry = Arc::new(registry);
    let base = || {
        let mut r = ExecutionRequest::new("return 1");
        r.tools.registry = registry.clone();
        r
    };
    let mut only_alpha = base();
    only_alpha.tools.allow = Allowlist::Only(["alpha".to_owned()].into());
    let mut other_model = base();
    other_model.context.model = Some("m2".to_owned());
    let mut other_extra = base();
    other_extra.context.extra = json!({"k": [1, 2]});
    let mut other_limit = base();
    other_limit.limits.max_tool_calls += 1;
    let mut dry = base();
    dry.mode = Mode::DryRun;
    let mut dry_again = base();
    dry_again.mode = Mode::DryRun;
    let mut unregistered = ExecutionRequest::new("return 1");
    unregistered.context.model = Some("m2".to_owned());
    let requests = [
        base(),
        base(),
        only_alpha,
        base(),
        other_model,
        other_extra,
        base(),
        other_limit,
        dry,
        dry_again,
        unregistered,
        base(),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = std::collections::HashSet::new();
    for (i, request) in requests.iter().enumerate() {
        let facade = ToolFacade::new(request, deadline, "scr_0123456789abcdef");
        let config = prelude_config(request, &facade, "scr_0123456789abcdef");
        let (head, mark) = (run_config::PREFIX, run_config::STATIC_MARK);
        let run_end = run_config::RUN_PART.end;
        assert!(config.starts_with(head), "{config}");
        assert_eq!(&config[run_end..run_end + mark.len()], mark, "{config}");
        let parsed: Value = serde_json::from_str(&config).expect("the config is JSON");
        let run = parsed["run"].as_str().unwrap();
        assert!(
            run[..run_config::SEED_HEX_LEN]
                .bytes()
                .all(|b| b.is_ascii_hexdigit()),
            "{run}"
        );
        assert_eq!(&run[run_config::SEED_HEX_LEN..], "scr_0123456789abcdef");
        assert!(
            seen.insert(run[..run_config::SEED_HEX_LEN].to_owned()),
            "a seed repeated: {run}"
        );
        let fixed = &config[run_end + mark.len()..config.len() - 1];
        assert_eq!(fixed, static_json(request, &facade), "request {i}");
    }
    let tools = |i: usize| {
        let f = ToolFacade::new(&requests[i], deadline, "scr_0123456789abcdef");
        serde_json::from_str::<Value>(&prelude_config(&requests[i], &f, "scr_0123456789abcdef"))
            .unwrap()["static"]["tools"]
            .clone()
    };
    assert_eq!(tools(0), json!(["alpha", "beta"]));
    assert_eq!(tools(2), json!(["alpha"]));
    assert_eq!(tools(0), json!(["alpha", "beta"]));
    assert_eq!(tools(10), json!([]));
    // The cache is in use: it holds the last request's inputs.
    let kept = LAST_STATIC.with(|l| l.borrow().as_ref().map(|c| c.tools.clone()));
    assert_eq!(kept, Some(Vec::new()), "the unregistered request's tools");
}

/// Each engine's words for a write to a frozen object get the hint;
/// other errors, and other names, do not.
#[test]
fn frozen_writes_get_a_hint() {
    for message in [
        "object is not extensible",
        "'a' is read-only",
        "could not delete property",
        "cannot set non-writable property: a",
        "cannot redefine property: c",
        "Cannot delete property",
        "can't set prototype of this object",
        "Cannot add property a, object is not extensible",
        "Cannot assign to read only property 'a' of object '#<Object>'",
    ] {
        let m = uncaught("TypeError", message);
        assert_eq!(m, format!("Uncaught TypeError: {message}{FROZEN_HINT}"));
    }
    assert_eq!(
        uncaught("TypeError", "x is not a function"),
        "Uncaught TypeError: x is not a function"
    );
    assert_eq!(
        uncaught("Error", "object is not extensible"),
        "Uncaught Error: object is not extensible"
    );
}
