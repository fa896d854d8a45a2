//! The configuration file applied: per-tool settings, exposure, spawn,
//! per-turn overrides against ceilings.

use harness::config::{Config, Overrides};
use harness::{ErrorCode, FnTool, ToolRegistry};
use serde_json::json;
use std::time::Duration;

fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(FnTool::new(
        "slow",
        "sleeps 5 s",
        json!({"type": "object"}),
        |_, _| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(json!("late"))
        },
    ))
    .unwrap();
    r.register(FnTool::new(
        "echo",
        "echo",
        json!({"type": "object"}),
        |a, _| async move { Ok(a) },
    ))
    .unwrap();
    r.register(FnTool::new(
        "big",
        "1 KiB",
        json!({"type": "object"}),
        |_, _| async { Ok(json!("x".repeat(1024))) },
    ))
    .unwrap();
    r
}

const FILE: &str = r#"
[expose]
tools = ["slow", "echo", "big"]

[tools.slow]
timeout_ms = 100

[tools.echo]
needs_approval = true

[tools.big]
max_output_bytes = 100

[ceilings]
max_tool_calls = 40

[providers.narrow.expose]
tools = ["echo"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tool_settings_apply_without_touching_the_run() {
    let cfg = Config::from_toml_str(FILE, "test.toml").unwrap();
    let h = cfg.builder().unwrap().tools(tools()).build().unwrap();
    let r = h
        .run("try { await tools.slow({}) } catch (e) { return [e.name, e.message] }")
        .await;
    let v = r.value.unwrap();
    assert_eq!(v[0], "ToolExecutionError");
    assert!(
        v[1].as_str().unwrap().contains("tools.slow.timeout_ms"),
        "{v}"
    );
    assert!(r.metrics.duration_ms < 2000.0);
    // approvals.default is deny: echo now needs approval.
    let r = h
        .run("try { await tools.echo({}) } catch (e) { return e.name }")
        .await;
    assert_eq!(r.value, Some(json!("ApprovalDeniedError")));
    let r = h
        .run("try { await tools.big({}) } catch (e) { return e.message }")
        .await;
    assert!(r
        .value
        .unwrap()
        .as_str()
        .unwrap()
        .contains("max_output_bytes is 100"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_narrow_exposure_and_overrides_respect_ceilings() {
    let cfg = Config::from_toml_str(FILE, "test.toml").unwrap();
    let narrow = cfg.with_provider("narrow").unwrap();
    let h = narrow.builder().unwrap().tools(tools()).build().unwrap();
    let r = h.run("return context.capabilities.tools").await;
    assert_eq!(r.value, Some(json!(["echo"])));
    let turn = narrow
        .with_overrides(&Overrides::new().set("limits.max_tool_calls", 40).unwrap())
        .unwrap();
    let h = turn.builder().unwrap().tools(tools()).build().unwrap();
    assert_eq!(
        h.run("return context.limits.maxToolCalls").await.value,
        Some(json!(40))
    );
    let e = narrow
        .with_overrides(&Overrides::new().set("limits.max_tool_calls", 41).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("ceiling of 40"), "{e}");
    // A [tools.NAME] for a tool the registry lacks is refused at build.
    let cfg = Config::from_toml_str("[tools.nope]\ntimeout_ms = 1\n", "t.toml").unwrap();
    let err = cfg.builder().unwrap().tools(tools()).build().unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
    let _ = ErrorCode::ALL;
}

/// `[workers] max_threads` caps the runs in flight in this process: with
/// one engine thread, a second run waits while the first holds the thread
/// in a tool call; by default it runs beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_max_threads_caps_the_runs_in_flight_in_process() {
    use std::sync::Arc;
    use tokio::sync::{Notify, Semaphore};
    for (file, second_waits) in [
        ("[workers]\nmax_threads = 1\n", true),
        ("[workers]\nmax_workers = 1\n", false),
    ] {
        let entered = Arc::new(Notify::new());
        let release = Arc::new(Semaphore::new(0));
        let mut r = ToolRegistry::new();
        let (e, rel) = (entered.clone(), release.clone());
        r.register(FnTool::new(
            "hold",
            "waits until the test lets go",
            json!({"type": "object"}),
            move |_, _| {
                let (e, rel) = (e.clone(), rel.clone());
                async move {
                    e.notify_one();
                    let _ = rel.acquire().await;
                    Ok(json!(1))
                }
            },
        ))
        .unwrap();
        let cfg =
            Config::from_toml_str(&format!("isolation = \"in_process\"\n{file}"), "test.toml")
                .unwrap();
        let h = Arc::new(cfg.builder().unwrap().tools(r).build().unwrap());
        let first = tokio::spawn({
            let h = h.clone();
            async move { h.run("return await tools.hold({})").await }
        });
        entered.notified().await;
        let second = tokio::spawn({
            let h = h.clone();
            async move { h.run("return 2").await }
        });
        let early = tokio::time::timeout(Duration::from_millis(500), async {
            while !second.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .is_ok();
        assert_eq!(early, !second_waits, "{file}");
        release.add_permits(1);
        assert_eq!(first.await.unwrap().value, Some(json!(1)), "{file}");
        assert_eq!(second.await.unwrap().value, Some(json!(2)), "{file}");
    }
}

/// Whether an engine in process may stay awake here: with a CPU for a
/// caller besides its own.
fn awake_in_process_here() -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2
}

/// Three runs of `cfg`'s harness (in process), 5 ms apart: each answers
/// as any run, and the engine rehearsed between them; awake as `cfg` says
/// where the CPUs allow.
async fn spaced_runs_answer_and_the_engine_rehearses(cfg: &Config) {
    let h = cfg.builder().unwrap().build().unwrap();
    assert_eq!(
        h.keeps_warm_awake(),
        cfg.settings().workers.keep_warm_awake && awake_in_process_here()
    );
    for i in 0..3 {
        let r = h.run(&format!("return {i} + 1")).await;
        assert_eq!(r.value, Some(json!(i + 1)), "{:?}", r.error);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(rehearses(&h).await, "the engine kept warm between the runs");
}

/// Whether `h`'s engine has rehearsed, or does within 5 s: on a loaded
/// machine (a CI running tests side by side) its thread may wait
/// milliseconds for a CPU, so the tests' windows are long
/// ([`WINDOW_MS`]) and this waits rather than looks once.
async fn rehearses(h: &harness::Harness) -> bool {
    for _ in 0..500 {
        if h.rehearsals() > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// The keep-warm window of these tests: long enough that a loaded
/// machine still rehearses within it.
const WINDOW_MS: u64 = 10_000;

/// `[workers] keep_warm_ms` is read (and a misspelling refused); runs of a
/// harness kept warm, spaced past rehearsals, answer as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_keep_warm_ms_is_read_and_runs_answer_as_before() {
    let cfg = Config::from_toml_str(
        &format!("isolation = \"in_process\"\n[workers]\nkeep_warm_ms = {WINDOW_MS}\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(cfg.settings().workers.keep_warm_ms, WINDOW_MS);
    assert_eq!(Config::default().settings().workers.keep_warm_ms, 0);
    let err = Config::from_toml_str("[workers]\nkeep_warm = 20\n", "t.toml").unwrap_err();
    assert!(err.to_string().contains("keep_warm"), "{err}");
    spaced_runs_answer_and_the_engine_rehearses(&cfg).await;
    let off = Config::default().builder().unwrap().build().unwrap();
    assert!(off.run("return 1").await.ok);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(off.rehearsals(), 0, "off by default");
}

/// `[workers] keep_warm_awake` is read, off by default; runs of a harness
/// kept warm and awake, spaced past rehearsals, answer as any other (what
/// runs may share, in process and behind the boundary, is the cross-run
/// suite's to check: its kept-warm twin runs every other case awake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_keep_warm_awake_is_read_and_runs_answer_as_before() {
    assert!(!Config::default().settings().workers.keep_warm_awake);
    let cfg = Config::from_toml_str(
        &format!(
            "isolation = \"in_process\"\n[workers]\nkeep_warm_ms = {WINDOW_MS}\nkeep_warm_awake = true\n"
        ),
        "t.toml",
    )
    .unwrap();
    assert!(cfg.settings().workers.keep_warm_awake);
    spaced_runs_answer_and_the_engine_rehearses(&cfg).await;
}

/// The bindings' options object: `keep_warm_ms` (or `keepWarmMs`) keeps
/// the engine warm, over a file's `[workers] keep_warm_ms`; 0 turns it
/// off; anything but a whole number is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bindings_keep_warm_ms_option_keeps_warm_and_is_checked() {
    use harness::embed::builder_from_options;
    for options in [
        json!({ "keep_warm_ms": WINDOW_MS }),
        json!({ "keepWarmMs": WINDOW_MS }),
    ] {
        let h = builder_from_options(&options).unwrap().build().unwrap();
        assert!(h.run("return 1").await.ok);
        assert!(rehearses(&h).await, "{options}: kept warm");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.toml");
    std::fs::write(&file, "[workers]\nkeep_warm_ms = 20\n").unwrap();
    let h = builder_from_options(&json!({"config": file, "keep_warm_ms": 0}))
        .unwrap()
        .build()
        .unwrap();
    assert!(h.run("return 1").await.ok);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(h.rehearsals(), 0, "0 over the file's window: off");
    for bad in [json!(-1), json!(1.5), json!("20")] {
        let err = builder_from_options(&json!({"keep_warm_ms": bad})).unwrap_err();
        assert!(err.to_string().contains("keep_warm_ms"), "{bad}: {err}");
    }
}

/// The bindings' options object: `keep_warm_awake` (or `keepWarmAwake`)
/// keeps a warm engine awake, over a file's `[workers] keep_warm_awake`
/// (false turns it off); without a window it does nothing; anything but a
/// boolean is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bindings_keep_warm_awake_option_is_read_and_checked() {
    use harness::embed::builder_from_options;
    let build =
        |options: &serde_json::Value| builder_from_options(options).unwrap().build().unwrap();
    let awake = |options: serde_json::Value| build(&options).keeps_warm_awake();
    for options in [
        json!({"keep_warm_ms": WINDOW_MS, "keep_warm_awake": true}),
        json!({"keepWarmMs": WINDOW_MS, "keepWarmAwake": true}),
    ] {
        let h = build(&options);
        assert_eq!(h.keeps_warm_awake(), awake_in_process_here(), "{options}");
        assert!(h.run("return 1").await.ok);
        assert!(rehearses(&h).await, "{options}: kept warm");
        assert_eq!(h.run("return 2").await.value, Some(json!(2)));
    }
    assert!(
        !awake(json!({ "keep_warm_ms": WINDOW_MS })),
        "off by default"
    );
    assert!(
        !awake(json!({"keep_warm_awake": true})),
        "nothing to keep awake without a window"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.toml");
    std::fs::write(
        &file,
        "[workers]\nkeep_warm_ms = 20\nkeep_warm_awake = true\n",
    )
    .unwrap();
    assert_eq!(
        awake(json!({"config": file})),
        awake_in_process_here(),
        "the file's"
    );
    assert!(
        !awake(json!({"config": file, "keepWarmAwake": false})),
        "false over the file's"
    );
    for bad in [json!(1), json!("true")] {
        let err = builder_from_options(&json!({"keep_warm_awake": bad})).unwrap_err();
        assert!(err.to_string().contains("keep_warm_awake"), "{bad}: {err}");
    }
}

/// Runs of `h` at a steady pace (every 30 ms, well past the 8 pauses
/// anticipation needs): each answers as any run; whether the engine
/// rehearsed ahead of them.
async fn steady_runs_answer(h: &harness::Harness) -> bool {
    for i in 0..20 {
        let r = h.run(&format!("return {i} * 2")).await;
        assert_eq!(r.value, Some(json!(i * 2)), "{:?}", r.error);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    h.rehearsals() > 0
}

/// `[workers] anticipate` is read, on by default: runs at a steady pace
/// answer as any other, and the engine rehearses ahead of them (in
/// process and behind the process boundary); turned off, it never does.
/// What a rehearsal may leave for a run is the cross-run suite's to check
/// (its kept-warm twin interleaves the same rehearsals with its pairs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_anticipate_is_read_on_by_default_and_steady_runs_answer_as_before() {
    assert!(Config::default().settings().workers.anticipate);
    let on = Config::from_toml_str("isolation = \"in_process\"\n", "t.toml").unwrap();
    let h = on.builder().unwrap().build().unwrap();
    assert!(h.anticipates());
    assert!(steady_runs_answer(&h).await, "steady runs anticipated");
    let off = Config::from_toml_str(
        "isolation = \"in_process\"\n[workers]\nanticipate = false\n",
        "t.toml",
    )
    .unwrap();
    assert!(!off.settings().workers.anticipate);
    let h = off.builder().unwrap().build().unwrap();
    assert!(!h.anticipates());
    assert!(!steady_runs_answer(&h).await, "off: no rehearsal");
    let err = Config::from_toml_str("[workers]\nanticipated = false\n", "t.toml").unwrap_err();
    assert!(err.to_string().contains("anticipate"), "{err}");
}

/// The bindings' options object: `anticipate` (a boolean) over a file's
/// `[workers] anticipate`; anything but a boolean is refused by name.
#[test]
fn the_bindings_anticipate_option_is_read_and_checked() {
    use harness::embed::builder_from_options;
    let anticipates = |options: serde_json::Value| {
        builder_from_options(&options)
            .unwrap()
            .build()
            .unwrap()
            .anticipates()
    };
    assert!(anticipates(json!({})), "on by default");
    assert!(!anticipates(json!({"anticipate": false})));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.toml");
    std::fs::write(&file, "[workers]\nanticipate = false\n").unwrap();
    assert!(!anticipates(json!({"config": file})), "the file's");
    assert!(
        anticipates(json!({"config": file, "anticipate": true})),
        "true over the file's"
    );
    for bad in [json!(1), json!("false")] {
        let err = builder_from_options(&json!({"anticipate": bad})).unwrap_err();
        assert!(err.to_string().contains("anticipate"), "{bad}: {err}");
    }
}
