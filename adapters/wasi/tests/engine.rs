//! What the wasi engine adds to the shared suite: fuel, and per-run state
//! that pre-initialisation must not freeze. Needs `bin/quickjs.wasm`.

use harness_core::{ErrorCode, ExecutionRequest, Limits, Realm, ScriptRuntimeAdapter};
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

/// A run in a private realm starts in an instance of the private snapshot
/// once it is made: its fuel is the script's alone (hardening a realm
/// inside the run costs tens of millions of instructions), it may change
/// built-ins, and the next shared run, in the instance the thread kept,
/// sees none of it. Randomness is still seeded per run.
#[test]
fn private_runs_start_from_their_snapshot() {
    let engine = Wasi::new();
    assert!(engine.engine().preload_private().unwrap());
    let private = Limits::default().with_realm(Some(Realm::Private));
    let shared = run(&engine, "return [1, 2].at(-1)", Limits::default());
    assert_eq!(shared.value, Some(serde_json::json!(2)), "{shared:?}");
    let polyfill = "const before = typeof Array.prototype.last; \
                    Array.prototype.last = function () { return this[this.length - 1] }; \
                    return [[1, 2].last(), Object.isFrozen(Array.prototype), Math.random(), before]";
    // Each run in a fresh instance: neither sees the other's change.
    let a = run(&engine, polyfill, private.clone());
    let b = run(&engine, polyfill, private);
    let (va, vb) = (
        a.value.clone().expect("a value"),
        b.value.clone().expect("a value"),
    );
    assert_eq!(va[0], serde_json::json!(2), "{a:?}");
    assert_eq!(va[1], serde_json::json!(false), "{a:?}");
    assert_ne!(va[2], vb[2], "Math.random is seeded per run");
    for v in [&va, &vb] {
        assert_eq!(
            v[3],
            serde_json::json!("undefined"),
            "a private realm saw another run's change"
        );
    }
    let script_fuel = shared.metrics.fuel_consumed.unwrap();
    let private_fuel = a.metrics.fuel_consumed.unwrap();
    assert!(
        private_fuel < 10 * script_fuel,
        "a private run paid for its realm: {private_fuel} fuel against {script_fuel}"
    );
    let after = run(
        &engine,
        "return [typeof Array.prototype.last, Object.isFrozen(Array.prototype)]",
        Limits::default(),
    );
    assert_eq!(
        after.value,
        Some(serde_json::json!(["undefined", true])),
        "{after:?}"
    );

    // A guest the caller loaded has no private snapshot: the same run
    // hardens its realm inside the instance, and pays for it in fuel.
    let loaded = harness_wasi::load_uncached(&harness_wasi::ModuleOptions::cached()).unwrap();
    let adapter = harness_wasi::WasiEngine::with_loaded(std::sync::Arc::new(loaded));
    assert!(!adapter.preload_private().unwrap());
    let slow = Wasi::with_engine(adapter, 1);
    let r = run(
        &slow,
        polyfill,
        Limits::default().with_realm(Some(Realm::Private)),
    );
    assert_eq!(
        r.value.as_ref().map(|v| v[0].clone()),
        Some(serde_json::json!(2)),
        "{r:?}"
    );
    let hardened_fuel = r.metrics.fuel_consumed.unwrap();
    assert!(
        hardened_fuel > 10 * script_fuel,
        "{hardened_fuel} fuel against {script_fuel}"
    );
}
