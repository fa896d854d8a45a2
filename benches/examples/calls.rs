//! A steady driver for profiling tool calls: `calls N CALLS [GAP_MS]
//! [OPTIONS]` runs a script of CALLS sequential `echo` calls N times on
//! QuickJS in process (OPTIONS as `split`'s: `process` for the process
//! boundary, an engine such as `boa` or `wasi`),
//! GAP_MS apart (default 0: back to back), and prints the mean and median
//! per run. Under callgrind the per-call instructions are
//! (cost(CALLS=100) - cost(CALLS=10)) / 90 / N. Comparing CALLS=1 and
//! CALLS=100 with and without a gap tells a cost paid once per spaced run
//! (a wake-up) from one paid on every call.
use harness_benches::{arg, Config};
use std::time::{Duration, Instant};

// Its own worker processes, for `process`.
harness::main! {
fn main() {
    let (n, calls, gap) = (arg(1, 200) as usize, arg(2, 100) as usize, arg(3, 0));
    let config = Config::from_options(&std::env::args().nth(4).unwrap_or_default());
    let h = harness_benches::harness(config);
    let script = harness_benches::sequential_calls(calls);
    let rt = harness_benches::runtime(1);
    for _ in 0..20 {
        assert!(rt.block_on(h.run(&script)).ok);
    }
    let mut runs = Vec::with_capacity(n);
    for _ in 0..n {
        if gap > 0 {
            std::thread::sleep(Duration::from_millis(gap));
        }
        let t = Instant::now();
        let r = rt.block_on(h.run(&script));
        runs.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(r.ok, "{r:?}");
    }
    let mean = runs.iter().sum::<f64>() / n as f64;
    runs.sort_by(f64::total_cmp);
    println!(
        "{calls} calls, {gap} ms apart, {config}: mean {mean:.1} µs, median {:.1} µs per run",
        runs[n / 2]
    );
}
}
