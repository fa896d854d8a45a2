//! Where a trivial run's time goes, back to back or spaced: the wall time
//! seen by the caller beside the time inside `run_script` on the engine
//! thread (the report's `duration_ms`), medians and p90 in µs.
//! `split [GAP_MS] [WARMUP_RUNS] [RUNS]` (defaults 2, 500, 1000):
//! `cargo build --release -p harness-benches --example split &&
//!  target/release/examples/split 0 && target/release/examples/split 2`
use harness::{ExecutionRequest, ScriptRuntimeAdapter};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (gap, warmup, n) = (arg(1, 2), arg(2, 500), arg(3, 1000).max(1) as usize);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let e = harness_quickjs::QuickJs::with_max_workers(1);
    let run = || rt.block_on(e.execute(ExecutionRequest::new("return 1+1")));
    for _ in 0..warmup {
        run();
    }
    let (mut wall, mut inner) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        if gap > 0 {
            std::thread::sleep(std::time::Duration::from_millis(gap));
        }
        let t = std::time::Instant::now();
        let r = run();
        wall.push(t.elapsed().as_secs_f64() * 1e6);
        inner.push(r.metrics.duration_ms * 1e3);
    }
    wall.sort_by(f64::total_cmp);
    inner.sort_by(f64::total_cmp);
    let q = harness_benches::quantile;
    println!(
        "gap {gap} ms: wall median {:.1} p90 {:.1} µs; inside run_script median {:.1} p90 {:.1} µs",
        q(&wall, 0.5),
        q(&wall, 0.9),
        q(&inner, 0.5),
        q(&inner, 0.9)
    );
}
