//! Runs a trivial script N times back to back (optionally GAP ms apart)
//! on WASI-QuickJS and prints the mean time per run: `wasi_profile N [GAP]`;
//! `PROFILE_SCRIPT=FILE` runs that script instead of `return 1+1`;
//! `PROFILE_SANDBOX=1` times the workspace sandbox's `execute` of
//! `console.log(1+1)` (a session under the temporary directory) instead.
//! Needs `bin/quickjs.wasm` (scripts/build-quickjs-wasm). A steady driver
//! for profilers: `cargo build --release -p harness-wasi --example wasi_profile
//! && strace -c -f target/release/examples/wasi_profile 1000`. (Not named
//! `profile`: QuickJS's example of that name would share its output file.)
use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let gap: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let script = match std::env::var("PROFILE_SCRIPT") {
        Ok(path) => {
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("PROFILE_SCRIPT {path}: {e}"))
        }
        Err(_) => "return 1+1".to_owned(),
    };
    if std::env::var_os("PROFILE_SANDBOX").is_some() {
        return sandbox(n, gap);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let engine = harness_wasi::Wasi::new();
    engine
        .engine()
        .preload()
        .expect("bin/quickjs.wasm (scripts/build-quickjs-wasm)");
    let per_run = mean(n, gap, || {
        let r = rt.block_on(engine.execute(ExecutionRequest::new(script.clone())));
        assert!(r.ok, "{r:?}");
    });
    println!("{per_run:?} per run (gap {gap} ms)");
}

/// Calls `once` to warm up (the pool's thread, the first instance), then
/// `n` times, each followed by `gap` ms of idling (not timed); the mean
/// time of a call.
fn mean(n: u32, gap: u64, once: impl Fn()) -> std::time::Duration {
    once();
    let mut busy = std::time::Duration::ZERO;
    for _ in 0..n {
        let t = std::time::Instant::now();
        once();
        busy += t.elapsed();
        if gap > 0 {
            std::thread::sleep(std::time::Duration::from_millis(gap));
        }
    }
    busy / n
}

/// `PROFILE_SANDBOX=1`: the sandbox's `execute`, end to end.
fn sandbox(n: u32, gap: u64) {
    use harness_wasi::{Sandbox, SandboxPolicy};
    let root = std::env::temp_dir().join(format!("harness-profile-{}", std::process::id()));
    let sb = Sandbox::new(SandboxPolicy::default(), "profile", &root).expect("a sandbox");
    let per_run = mean(n, gap, || {
        let r = sb.execute("console.log(1+1)").expect("the sandbox runs");
        assert!(r.success && r.stdout == "2\n", "{r:?}");
    });
    let _ = std::fs::remove_dir_all(&root);
    println!("{per_run:?} per sandbox execute (gap {gap} ms)");
}
