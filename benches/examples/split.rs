//! Where a trivial run's time goes, back to back or spaced: the wall time
//! seen by the caller of `Harness::run` beside the time inside
//! `run_script` (the report's `duration_ms`), in µs at the 10th, 25th,
//! 50th, 75th and 90th percentiles, on QuickJS (or the engine OPTIONS
//! names) with the benches' `echo` tool, and how much CPU the hypervisor
//! took over the timed runs (steal, `harness_benches::steal_s`). In process, `run_script` runs on the engine thread; with
//! `process`, on the host thread that drives a worker process.
//! `split [GAP_MS] [WARMUP_RUNS] [RUNS] [OPTIONS]` (defaults 2, 500, 1000),
//! where OPTIONS is a comma-separated list of `process`, an engine
//! (`boa`, `wasi`, …), `polyfill` (run `benches::POLYFILL`, a private realm, instead),
//! `typescript` (`benches::TYPESCRIPT`, types found and stripped) and
//! `keep_warm` (the engine kept warm between runs, `benches::KEEP_WARM`)
//! and `awake` (kept warm and awake, `HarnessBuilder::keep_warm_awake`),
//! `asleep` (anticipation off, `HarnessBuilder::anticipate(false)`):
//! `cargo build --release -p harness-benches --example split &&
//!  target/release/examples/split 0 && target/release/examples/split 0 500 1000 process`;
//! `SPLIT_DUMP=FILE` also writes each run's wall and inside µs and its
//! start (Unix seconds), in order;
//! `SPLIT_SCRIPT='…'` times that script instead (an error path, a tool
//! call: `tools.echo` is there).
use harness_benches::{arg, harness, quantile, script_from_options, Config};

// Its own worker processes, for `process`.
harness::main! {
    fn main() {
        let (gap, warmup, n) = (arg(1, 2), arg(2, 500), arg(3, 1000).max(1) as usize);
        let options = std::env::args().nth(4).unwrap_or_default();
        let config = Config::from_options(&options);
        let rt = harness_benches::runtime(2);
        let h = harness(config);
        // SPLIT_SCRIPT: any script instead (an error path, a tool call, …).
        let script = std::env::var("SPLIT_SCRIPT")
            .unwrap_or_else(|_| script_from_options(&options).to_owned());
        let run = || rt.block_on(h.run(&script));
        for _ in 0..warmup {
            run();
        }
        let steal_before = harness_benches::steal_s();
        let (mut wall, mut inner) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut started = Vec::with_capacity(n);
        for _ in 0..n {
            if gap > 0 {
                std::thread::sleep(std::time::Duration::from_millis(gap));
            }
            started.push(std::time::SystemTime::now());
            let t = std::time::Instant::now();
            let r = run();
            wall.push(t.elapsed().as_secs_f64() * 1e6);
            inner.push(r.metrics.duration_ms * 1e3);
        }
        let steal = steal_before
            .zip(harness_benches::steal_s())
            .map_or_else(|| "unknown".to_string(), |(a, b)| format!("{:.2} s", b - a));
        // SPLIT_DUMP=FILE: each run's wall and inside times, in run order,
        // and when it started (Unix seconds: to line slow runs up with a
        // monitor of `/proc`, or see whether they come at a period).
        if let Some(path) = std::env::var_os("SPLIT_DUMP") {
            let since_epoch = |t: &std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64())
            };
            let lines: String = wall
                .iter()
                .zip(&inner)
                .zip(&started)
                .map(|((w, i), s)| format!("{w:.1} {i:.1} {:.4}\n", since_epoch(s)))
                .collect();
            std::fs::write(&path, lines).expect("SPLIT_DUMP file");
        }
        wall.sort_by(f64::total_cmp);
        inner.sort_by(f64::total_cmp);
        let q = |s: &[f64]| {
            [0.1, 0.25, 0.5, 0.75, 0.9, 0.99]
                .map(|p| format!("{:.1}", quantile(s, p)))
                .join(" / ")
        };
        println!(
            "{config} gap {gap} ms, p10 / p25 / p50 / p75 / p90 / p99 µs: wall {}; inside run_script {}; hypervisor steal over the timed runs {steal}",
            q(&wall),
            q(&inner)
        );
    }
}
