//! The throughput row on its own, to profile: CALLERS tasks on a Tokio
//! runtime of THREADS workers, each running trivial scripts back to back,
//! for WINDOWS windows of 16 runs per caller; prints the median µs of CPU
//! per script (wall × cores ÷ runs, as `compare`'s row) and the process's
//! own CPU time per script (user + system, from /proc/self/stat), which shows
//! what spinning and hand-offs cost beside the runs.
//! `through [CALLERS] [THREADS] [WINDOWS] [OPTIONS]` (defaults: cores,
//! 2, 2000, QuickJS in process):
//! `cargo build --release -p harness-benches --example through &&
//!  target/release/examples/through`
use harness_benches::{arg, harness, quantile, throughput_window, Config, RUNS_PER_CALLER as RUNS};
use std::time::Instant;

/// The process's user + system CPU time in seconds (all threads), from
/// /proc/self/stat (clock ticks of 10 ms: measure seconds, not runs).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name's closing parenthesis; utime and stime
    // are the 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

harness::main! {
    fn main() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let callers = arg(1, cores as u64).max(1) as usize;
        let threads = arg(2, 2).max(1) as usize;
        let windows = arg(3, 2000).max(1) as usize;
        let options = std::env::args().nth(4).unwrap_or_default();
        let h = harness(Config::from_options(&options));
        let rt = harness_benches::runtime(threads);
        let window = || throughput_window(&rt, &h, callers, RUNS);
        for _ in 0..windows / 4 {
            window();
        }
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        let mut per = Vec::with_capacity(windows);
        for _ in 0..windows {
            let t = Instant::now();
            window();
            per.push(t.elapsed().as_secs_f64() * 1e6 * cores as f64 / (callers * RUNS) as f64);
        }
        let wall = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        per.sort_by(f64::total_cmp);
        let runs = (windows * callers * RUNS) as f64;
        println!(
            "{callers} callers on {threads} Tokio threads: wall × cores per script median {:.1} p90 {:.1} µs; \
             CPU used per script {:.1} µs ({:.0}% of {cores} cores)",
            quantile(&per, 0.5),
            quantile(&per, 0.9),
            cpu / runs * 1e6,
            cpu / (wall * cores as f64) * 100.0
        );
    }
}
