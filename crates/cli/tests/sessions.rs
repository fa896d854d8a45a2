//! Sessions behind the process boundary, with the `harness` binary as the
//! worker: each session has a worker process of its own, which keeps the
//! session's realm between runs; a run that times out kills it and ends
//! the session.

use harness::core::process::ProcessOptions;
use harness::{EngineKind, ErrorCode, Harness, Isolation, Limits};
use serde_json::{json, Value};

fn harness(engine: EngineKind) -> Harness {
    Harness::builder()
        .engine(engine)
        .isolation(Isolation::Process)
        .worker(ProcessOptions::new(
            engine.name(),
            env!("CARGO_BIN_EXE_harness"),
        ))
        .limits(Limits::default().with_timeout_ms(2_000))
        .build()
        .unwrap()
}

async fn value(s: &harness::Session, src: &str) -> Value {
    let r = s.run(src).await;
    assert!(r.ok, "{src:?}: {:?}", r.error);
    r.value.unwrap_or(Value::Null)
}

#[tokio::test]
async fn sessions_keep_their_state_behind_the_boundary_and_share_none() {
    for engine in [EngineKind::QuickJs, EngineKind::Boa, EngineKind::Wasi] {
        let name = engine.name();
        let h = harness(engine);
        let a = h.open_session().unwrap();
        assert_eq!(
            value(&a, "const data = [1, 2, 3]; return data.length").await,
            json!(3),
            "{name}"
        );
        assert_eq!(
            value(&a, "return data.map(x => x * 2)").await,
            json!([2, 4, 6]),
            "{name}"
        );
        let b = h.open_session().unwrap();
        assert_eq!(
            value(&b, "return typeof data").await,
            json!("undefined"),
            "{name}"
        );
        assert_eq!(
            h.run("return typeof data").await.value,
            Some(json!("undefined")),
            "{name}"
        );
        assert_eq!(
            value(
                &a,
                "let n = 0; function inc() { return ++n } inc(); return inc()"
            )
            .await,
            json!(2),
            "{name}"
        );
        assert_eq!(value(&a, "return inc()").await, json!(3), "{name}");
        // The REPL rules hold behind the boundary too.
        assert_eq!(
            value(&a, "const data = 'again'; return data").await,
            json!("again"),
            "{name}"
        );
        let r = a
            .run("let broken = (() => { throw new Error('no') })()")
            .await;
        assert_eq!(
            r.error.unwrap().code,
            ErrorCode::ScriptRuntimeError,
            "{name}"
        );
        assert_eq!(
            value(&a, "return typeof broken").await,
            json!("undefined"),
            "{name}"
        );
        let r = a.run("const c = 1; c = 2").await;
        assert_eq!(
            r.error.unwrap().code,
            ErrorCode::ScriptRuntimeError,
            "{name}"
        );
        assert_eq!(value(&a, "Array.prototype.last = function () { return this[this.length - 1] }; return [1, 2].last()").await, json!(2), "{name}");
        assert_eq!(
            value(&b, "return typeof [].last").await,
            json!("undefined"),
            "{name}"
        );
        // A run that times out kills the session's worker: the session ends.
        let r = a.run("while (true) {}").await;
        assert_eq!(
            r.error.unwrap().code,
            ErrorCode::ScriptTimeoutError,
            "{name}"
        );
        let e = a.run("return data").await.error.unwrap();
        assert_eq!(e.code, ErrorCode::SessionClosedError, "{name}");
        // The other session lives on.
        assert_eq!(
            value(&b, "const mine = 1; return mine").await,
            json!(1),
            "{name}"
        );
    }
}
