//! Where a run of 100 sequential tool calls spends its time, spaced or
//! back to back: each call of the script `await tools.now()` stamps the
//! host's clock, so a run splits into the time to its first call, each
//! call's round trip (the host's answer, the script's next call) and the
//! time from its last call to the caller's answer, in µs (medians by
//! call index). Spaced and back-to-back runs take turns in blocks of 50
//! in one process (the first 10 of each block are not kept, while a
//! steady pace is learnt or forgotten), so that both meet the same
//! stretch of a VM whose speed drifts:
//! `round_trips [GAP_MS] [WARMUP_RUNS] [RUNS] [OPTIONS]` (defaults 2, 200, 1000;
//! OPTIONS as for `split`: `process`, an engine, `asleep`, …):
//! `cargo build --release -p harness-benches --example round_trips &&
//!  target/release/examples/round_trips 2 200 1000 process`.
use harness::FnTool;
use harness_benches::{arg, harness_with, quantile, Config};
use serde_json::json;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The calls each run makes.
const CALLS: usize = 100;
/// Runs per block, and how many at its start are not kept.
const BLOCK: usize = 50;
const SETTLING: usize = 10;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// µs since the process's epoch.
fn now_us() -> f64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e6
}

/// The medians of `samples`, one per position.
fn medians(samples: &mut [Vec<f64>]) -> Vec<f64> {
    samples
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            if v.is_empty() {
                f64::NAN
            } else {
                quantile(v, 0.5)
            }
        })
        .collect()
}

// Its own worker processes, for `process`.
harness::main! {
    fn main() {
        let (gap, warmup, n) = (arg(1, 2), arg(2, 200), arg(3, 1000).max(1) as usize);
        let options = std::env::args().nth(4).unwrap_or_default();
        let config = Config::from_options(&options);
        now_us();
        let h = harness_with(config, |tools| {
            tools
                .register(FnTool::new(
                    "now",
                    "the host's clock, µs",
                    json!({"type": "object"}),
                    |_, _| async move { Ok(json!(now_us())) },
                ))
                .expect("now registers");
        });
        let rt = harness_benches::runtime(2);
        let script = format!(
            "const t = []; for (let i = 0; i < {CALLS}; i++) t.push(await tools.now({{}})); return t"
        );
        let run = || rt.block_on(h.run(&script));
        for _ in 0..warmup {
            run();
        }
        // [spaced, back to back]: per position, the time to the first
        // call, each call after it, and the time after the last.
        let mut kept = [vec![Vec::new(); CALLS + 1], vec![Vec::new(); CALLS + 1]];
        // How much later than asked each spaced run's caller woke: a cost
        // the timed run does not see (a poller that held the caller's CPU
        // would show here).
        let mut late = Vec::new();
        for k in 0..n {
            let spaced = (k / BLOCK).is_multiple_of(2) && gap > 0;
            let slept = now_us();
            if spaced {
                std::thread::sleep(Duration::from_millis(gap));
            }
            let start = now_us();
            let r = run();
            let end = now_us();
            let stamps: Vec<f64> = r
                .value
                .as_ref()
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default();
            assert!(stamps.len() == CALLS, "{options}: {:?}", r.error);
            if k % BLOCK < SETTLING {
                continue;
            }
            if spaced {
                late.push(start - slept - gap as f64 * 1e3);
            }
            let per = &mut kept[usize::from(!spaced)];
            per[0].push(stamps[0] - start);
            for i in 1..CALLS {
                per[i].push(stamps[i] - stamps[i - 1]);
            }
            per[CALLS].push(end - stamps[CALLS - 1]);
        }
        if !late.is_empty() {
            late.sort_by(f64::total_cmp);
            println!(
                "{config} gap {gap} ms: the caller woke late by p50 {:.1} / p90 {:.1} / p99 {:.1} µs",
                quantile(&late, 0.5),
                quantile(&late, 0.9),
                quantile(&late, 0.99)
            );
        }
        for (which, per) in kept.iter_mut().enumerate() {
            if per[0].is_empty() {
                continue;
            }
            let m = medians(per);
            let between: f64 = m[1..CALLS].iter().sum();
            let mut rest = m[11..CALLS].to_vec();
            rest.sort_by(f64::total_cmp);
            let first: Vec<String> = m[1..11].iter().map(|x| format!("{x:.1}")).collect();
            println!(
                "{config} {}: medians µs: to the first call {:.1}, calls 2-{CALLS} {between:.1} in all (calls 2-11: {}; the median of the rest {:.1}), after the last {:.1}; {:.1} in all",
                if which == 0 { format!("gap {gap} ms") } else { "back to back".to_string() },
                m[0],
                first.join(" "),
                quantile(&rest, 0.5),
                m[CALLS],
                m[0] + between + m[CALLS],
            );
        }
    }
}
