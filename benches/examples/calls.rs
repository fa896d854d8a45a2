//! A steady driver for profiling tool calls: `calls N CALLS` runs a script
//! of CALLS sequential `echo` calls N times on in-process QuickJS and
//! prints the mean per run; under callgrind the per-call instructions are
//! (cost(CALLS=100) - cost(CALLS=10)) / 90 / N.
use harness::{EngineKind, Isolation};

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (n, calls) = (arg(1, 200), arg(2, 100));
    let h = harness_benches::harness(harness_benches::Config {
        engine: EngineKind::QuickJs,
        isolation: Isolation::InProcess,
    });
    let script = harness_benches::sequential_calls(calls);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let t = std::time::Instant::now();
    for _ in 0..n {
        let r = rt.block_on(h.run(&script));
        assert!(r.ok, "{r:?}");
    }
    println!(
        "{:.1} µs per run",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
