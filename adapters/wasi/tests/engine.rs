//! What the wasi engine adds to the shared suite: fuel, and per-run state
//! that pre-initialisation must not freeze. Needs `bin/quickjs.wasm`.

use harness_core::{ErrorCode, ExecutionRequest, Limits, ScriptRuntimeAdapter};
use harness_wasi::Wasi;

fn run(engine: &Wasi, source: &str, limits: Limits) -> harness_core::ExecutionReport {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut req = ExecutionRequest::new(source);
    req.limits = limits;
    rt.block_on(engine.execute(req))
}

#[test]
fn fuel_is_counted_and_limited() {
    let engine = Wasi::new();
    let r = run(&engine, "return 1 + 1", Limits::default());
    assert!(r.ok, "{r:?}");
    let trivial = r.metrics.fuel_consumed.expect("fuel is reported");
    assert!(trivial > 0);

    let limits = Limits::default().with_fuel(Some(20_000_000));
    let r = run(
        &engine,
        "for (;;) { try { for (;;) {} } catch (e) {} }",
        limits,
    );
    let e = r.error.expect("stopped");
    assert_eq!(e.code, ErrorCode::ScriptTimeoutError);
    assert!(e.message.contains("out of fuel"), "{}", e.message);
    assert_eq!(r.metrics.fuel_consumed, Some(20_000_000));

    // The engine is fine afterwards.
    let r = run(&engine, "return 'ok'", Limits::default());
    assert_eq!(r.value, Some(serde_json::json!("ok")));
}

#[test]
fn math_random_differs_between_runs() {
    let engine = Wasi::new();
    let a = run(&engine, "return Math.random()", Limits::default()).value;
    let b = run(&engine, "return Math.random()", Limits::default()).value;
    assert!(a.is_some() && a != b, "{a:?} {b:?}");
    let r = run(
        &engine,
        "const x = Math.random(); return x >= 0 && x < 1 && Object.isFrozen(Math)",
        Limits::default(),
    );
    assert_eq!(r.value, Some(serde_json::json!(true)));
}

/// Instances come from a pool that reserves ~4 TiB of address space up
/// front; where that cannot be had (`ulimit -v`, valgrind), the engine maps
/// each instance on demand instead and still runs. The test runs itself
/// again under `ulimit -v` (16 GB: room for one on-demand instance).
#[test]
fn runs_without_room_for_the_instance_pool() {
    if std::env::var_os("HARNESS_WASI_SMALL_ADDRESS_SPACE").is_some() {
        let engine = Wasi::new();
        let r = run(
            &engine,
            "return [1 + 1, Math.random() < 1]",
            Limits::default(),
        );
        assert_eq!(r.value, Some(serde_json::json!([2, true])), "{r:?}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 16000000 && exec \"$0\" --exact runs_without_room_for_the_instance_pool --nocapture")
        .arg(exe)
        .env("HARNESS_WASI_SMALL_ADDRESS_SPACE", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}
