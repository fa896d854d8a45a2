//! Sessions on QuickJS in this process: what persists inside one, what
//! never reaches another session or an unscoped run, the REPL rules of
//! declarations, faults that end a session, and the `[sessions]` limits.

use harness::{ErrorCode, Harness, Limits, SessionLimits};
use serde_json::{json, Value};

fn harness() -> Harness {
    Harness::builder().build().unwrap()
}

async fn value(s: &harness::Session, src: &str) -> Value {
    let r = s.run(src).await;
    assert!(r.ok, "{src:?}: {:?}", r.error);
    r.value.unwrap_or(Value::Null)
}

async fn code(s: &harness::Session, src: &str) -> ErrorCode {
    let r = s.run(src).await;
    r.error
        .unwrap_or_else(|| panic!("{src:?} succeeded: {:?}", r.value))
        .code
}

#[tokio::test]
async fn a_session_keeps_its_declarations_and_nobody_else_sees_them() {
    let h = harness();
    let a = h.open_session().unwrap();
    assert_eq!(
        value(&a, "const data = [1, 2, 3]; return data.length").await,
        json!(3)
    );
    assert_eq!(
        value(&a, "return data.map(x => x * 2)").await,
        json!([2, 4, 6])
    );
    let b = h.open_session().unwrap();
    assert_ne!(a.id(), b.id());
    assert_eq!(value(&b, "return typeof data").await, json!("undefined"));
    assert_eq!(
        h.run("return typeof data").await.value,
        Some(json!("undefined"))
    );
    // The same harness's unscoped runs go on as ever.
    assert_eq!(h.run("return 1 + 1").await.value, Some(json!(2)));
}

#[tokio::test]
async fn every_kind_of_declaration_persists_with_its_live_value() {
    let h = harness();
    let s = h.open_session().unwrap();
    value(
        &s,
        "let count = 0;\n\
         var seen = new Map();\n\
         function bump(k) { count++; seen.set(k, (seen.get(k) ?? 0) + 1); return count }\n\
         class Box { constructor(v) { this.v = v } get twice() { return this.v * 2 } }\n\
         const {a, b: [c]} = {a: 1, b: [2]};\n\
         return bump('x')",
    )
    .await;
    assert_eq!(
        value(
            &s,
            "bump('x'); bump('y'); return [count, seen.get('x'), new Box(a + c).twice]"
        )
        .await,
        json!([3, 2, 6])
    );
    // Functions called before their declaration in the run: hoisted.
    assert_eq!(
        value(&s, "return later(); function later() { return 'hoisted' }").await,
        json!("hoisted")
    );
    assert_eq!(value(&s, "return later()").await, json!("hoisted"));
    // Top-level await and return still work.
    assert_eq!(
        value(&s, "const p = await Promise.resolve(41); return p + 1").await,
        json!(42)
    );
    assert_eq!(value(&s, "return p").await, json!(41));
}

#[tokio::test]
async fn the_repl_rules_of_declarations() {
    let h = harness();
    let s = h.open_session().unwrap();
    value(&s, "const k = 1; let v = 1").await;
    // A later run may declare the same name again.
    assert_eq!(value(&s, "const k = 2; return k").await, json!(2));
    assert_eq!(value(&s, "let k = 3; k++; return k").await, json!(4));
    // const is constant within a run (and stays so until redeclared).
    assert_eq!(
        code(&s, "const c = 1; c = 2").await,
        ErrorCode::ScriptRuntimeError
    );
    assert_eq!(code(&s, "c = 3").await, ErrorCode::ScriptRuntimeError);
    assert_eq!(value(&s, "return c").await, json!(1));
    // A binding whose initialiser threw is absent afterwards, never stuck.
    assert_eq!(
        code(&s, "let broken = (() => { throw new Error('no') })()").await,
        ErrorCode::ScriptRuntimeError
    );
    assert_eq!(value(&s, "return typeof broken").await, json!("undefined"));
    assert_eq!(value(&s, "let broken = 5; return broken").await, json!(5));
    // Bindings assigned before a run threw are kept.
    assert_eq!(
        code(&s, "let kept = 'yes'; v = 10; throw new Error('late')").await,
        ErrorCode::ScriptRuntimeError
    );
    assert_eq!(value(&s, "return [kept, v]").await, json!(["yes", 10]));
    // Reading a name before its declaration in the same run is the dead zone.
    assert_eq!(
        code(&s, "const early = late; let late = 1").await,
        ErrorCode::ScriptRuntimeError
    );
    assert_eq!(
        value(&s, "return [typeof early, typeof late]").await,
        json!(["undefined", "undefined"])
    );
    // Inside blocks, declarations stay the run's own.
    assert_eq!(
        value(
            &s,
            "{ let inner = 1 } for (let i = 0; i < 1; i++) {} return [typeof inner, typeof i]"
        )
        .await,
        json!(["undefined", "undefined"])
    );
    // The scope's own name is refused.
    assert_eq!(
        code(&s, "return __harness_session").await,
        ErrorCode::ScriptSyntaxError
    );
}

#[tokio::test]
async fn a_session_may_change_its_built_ins_and_only_its_own() {
    let h = harness();
    let s = h.open_session().unwrap();
    value(
        &s,
        "Array.prototype.total = function () { return this.reduce((a, b) => a + b, 0) }",
    )
    .await;
    assert_eq!(value(&s, "return [1, 2, 3].total()").await, json!(6));
    assert_eq!(
        value(&s, "globalThis.extra = 1; return extra").await,
        json!(1)
    );
    let other = h.open_session().unwrap();
    assert_eq!(
        value(&other, "return typeof [].total").await,
        json!("undefined")
    );
    assert_eq!(
        h.run("return typeof [].total").await.value,
        Some(json!("undefined"))
    );
    assert_eq!(
        value(&other, "return typeof extra").await,
        json!("undefined")
    );
}

#[tokio::test]
async fn a_run_that_times_out_ends_its_session_and_later_runs_say_why() {
    let h = Harness::builder()
        .limits(Limits::default().with_timeout_ms(200))
        .build()
        .unwrap();
    let s = h.open_session().unwrap();
    value(&s, "const x = 1").await;
    assert_eq!(
        code(&s, "while (true) {}").await,
        ErrorCode::ScriptTimeoutError
    );
    let r = s.run("return x").await;
    let e = r.error.unwrap();
    assert_eq!(e.code, ErrorCode::SessionClosedError);
    assert!(e.message.contains("timed out"), "{e:?}");
    assert!(h.session(s.id()).is_err());
}

#[tokio::test]
async fn closed_and_unknown_sessions_are_session_closed_errors() {
    let h = harness();
    let s = h.open_session().unwrap();
    value(&s, "const x = 1").await;
    assert!(h.session(s.id()).is_ok());
    assert!(s.close());
    assert!(!s.close());
    let e = s.run("return x").await.error.unwrap();
    assert_eq!(e.code, ErrorCode::SessionClosedError);
    assert!(e.message.contains("closed"), "{e:?}");
    let e = h.session("0123456789abcdef0123456789abcdef").unwrap_err();
    assert!(e.to_string().contains("no such session"), "{e}");
    // A second harness does not know the first one's sessions.
    let other = harness();
    let s = h.open_session().unwrap();
    assert!(other.session(s.id()).is_err());
}

#[tokio::test]
async fn opening_past_the_maximum_closes_the_least_recently_used() {
    let h = Harness::builder()
        .sessions(SessionLimits::default().with_max(2))
        .build()
        .unwrap();
    let first = h.open_session().unwrap();
    let second = h.open_session().unwrap();
    value(&first, "const a = 1").await;
    value(&second, "const b = 2").await;
    value(&first, "return a").await;
    let third = h.open_session().unwrap();
    assert_eq!(value(&third, "return 3").await, json!(3));
    let e = second.run("return b").await.error.unwrap();
    assert_eq!(e.code, ErrorCode::SessionClosedError);
    assert!(e.message.contains("max"), "{e:?}");
    assert_eq!(value(&first, "return a").await, json!(1));
    assert_eq!(h.session_stats().0, 2);
}

#[tokio::test]
async fn a_session_over_its_memory_is_closed_by_the_limit() {
    let h = Harness::builder()
        .sessions(SessionLimits::default().with_memory_bytes(8 << 20))
        .build()
        .unwrap();
    let s = h.open_session().unwrap();
    value(&s, "const small = 'x'.repeat(1 << 20); return small.length").await;
    let e = code(
        &s,
        "const big = []; for (let i = 0; i < 1e7; i++) big.push({i}); return big.length",
    )
    .await;
    assert_eq!(e, ErrorCode::ScriptMemoryError);
    assert_eq!(
        code(&s, "return small.length").await,
        ErrorCode::SessionClosedError
    );
}

#[tokio::test]
async fn the_memory_gauge_adds_up_what_the_sessions_hold() {
    let h = harness();
    let (_, before) = h.session_stats();
    let s = h.open_session().unwrap();
    value(&s, "return 0").await;
    let (_, empty) = h.session_stats();
    value(
        &s,
        "const held = Array.from({length: 100000}, (_, i) => ({i, s: 'item ' + i}))",
    )
    .await;
    let (live, full) = h.session_stats();
    assert_eq!(live, 1);
    assert!(
        full > empty + (4 << 20),
        "before {before}, empty {empty}, full {full}"
    );
}

#[tokio::test]
async fn sixty_four_sessions_of_a_mebibyte_are_counted_and_the_next_closes_the_oldest() {
    const MIB: u64 = 1 << 20;
    let h = harness();
    let mut sessions = Vec::new();
    for i in 0..64 {
        let s = h.open_session().unwrap();
        // One MiB of string data per session (Latin-1: a byte a character).
        value(
            &s,
            &format!("const blob = 'x'.repeat({MIB} - 16) + '{i:016}'; return blob.length"),
        )
        .await;
        sessions.push(s);
    }
    let (live, held) = h.session_stats();
    assert_eq!(live, 64);
    let sum = 64 * MIB;
    let off = held.abs_diff(sum) as f64 / sum as f64;
    println!(
        "64 sessions of 1 MiB: session_memory_bytes {held} against {sum} ({:.1}% off)",
        off * 100.0
    );
    assert!(
        off <= 0.10,
        "session_memory_bytes {held} against {sum}: {:.1}% off",
        off * 100.0
    );
    // The 65th closes the least recently used: the first.
    let next = h.open_session().unwrap();
    assert_eq!(value(&next, "return typeof blob").await, json!("undefined"));
    let e = sessions[0].run("return blob.length").await.error.unwrap();
    assert_eq!(e.code, ErrorCode::SessionClosedError);
    assert_eq!(
        value(&sessions[1], "return blob.slice(-16)").await,
        json!("0000000000000001")
    );
    assert_eq!(h.session_stats().0, 64);
}

/// The same rules on every engine that has sessions in this process.
#[tokio::test]
async fn sessions_work_alike_on_every_engine_in_this_process() {
    for engine in harness::EngineKind::available() {
        let built = Harness::builder()
            .engine(engine)
            .isolation(harness::Isolation::InProcess)
            .build()
            .unwrap();
        let a = match built.open_session() {
            Ok(s) => s,
            Err(harness::SessionError::Unsupported(why)) => {
                assert!(
                    !matches!(
                        engine,
                        harness::EngineKind::QuickJs | harness::EngineKind::Boa
                    ),
                    "{why}"
                );
                continue;
            }
            Err(e) => panic!("{engine:?}: {e}"),
        };
        let name = engine.name();
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
        let b = built.open_session().unwrap();
        assert_eq!(
            value(&b, "return typeof data").await,
            json!("undefined"),
            "{name}"
        );
        assert_eq!(
            built.run("return typeof data").await.value,
            Some(json!("undefined")),
            "{name}"
        );
        assert_eq!(
            code(&a, "let broken = (() => { throw 1 })()").await,
            ErrorCode::ScriptRuntimeError,
            "{name}"
        );
        assert_eq!(
            value(&a, "return typeof broken").await,
            json!("undefined"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_session_unused_for_idle_ms_expires_and_says_so() {
    let h = Harness::builder()
        .sessions(SessionLimits::default().with_idle_ms(300))
        .build()
        .unwrap();
    let s = h.open_session().unwrap();
    value(&s, "const x = 1").await;
    // Used within the idle time, it stays.
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_eq!(value(&s, "return x").await, json!(1));
    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    let e = s.run("return x").await.error.unwrap();
    assert_eq!(e.code, ErrorCode::SessionClosedError);
    assert!(e.message.contains("expired"), "{e:?}");
    assert_eq!(h.session_stats().0, 0);
}
