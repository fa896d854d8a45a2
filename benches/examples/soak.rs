//! Memory over many runs: `soak [RUNS] [EVERY] [OPTIONS]` (defaults
//! 300000 and 50000) runs a trivial script RUNS times back to back on
//! QuickJS through `Harness::run` and prints the process's resident set
//! (`VmRSS`, Linux) every EVERY runs, so that a leak shows as growth from
//! one line to the next while start-up shows only in the first. OPTIONS
//! is a comma-separated list of `process` (the process boundary: the
//! host's RSS; the worker's is its own), an engine (`boa`, `wasi`, …),
//! and `polyfill` (a script that gets a private realm). Nothing is kept
//! per run, so the figure is the harness's alone:
//! `cargo build --release -p harness-benches --example soak &&
//!  target/release/examples/soak 300000 50000`
use harness_benches::{arg, harness, script_from_options, Config};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

// Its own worker processes, for `process`.
harness::main! {
    fn main() {
        let (runs, every) = (arg(1, 300_000), arg(2, 50_000).max(1));
        let options = std::env::args().nth(3).unwrap_or_default();
        let config = Config::from_options(&options);
        let script = script_from_options(&options);
        let rt = harness_benches::runtime(2);
        let h = harness(config);
        println!("{config}: {} KiB before the first run", rss_kib());
        for i in 1..=runs {
            let r = rt.block_on(h.run(script));
            assert!(r.ok, "run {i}: {r:?}");
            if i % every == 0 || i == 1_000 {
                println!("{config}: {} KiB after {i} runs", rss_kib());
            }
        }
    }
}
