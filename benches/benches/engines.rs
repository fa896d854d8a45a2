//! Engine benches: the same workloads on every engine built in.
//!
//! Run: `cargo bench -p harness-benches` (one group: `--bench engines -- trivial`).

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use harness_benches::*;
use std::time::{Duration, Instant};

fn trivial(c: &mut Criterion) {
    let rt = runtime(2);
    back_to_back(c, &rt, "trivial", TRIVIAL);
    // A script that patches a built-in, back to back: each run gets a
    // private realm, a context made for it (the price of `Realm::Private`).
    back_to_back(c, &rt, "private_realm", POLYFILL);
    // TypeScript with the language left to the facade (`auto`): the
    // types are found and stripped before the engine sees the script.
    back_to_back(c, &rt, "typescript", TYPESCRIPT);

    // Runs spaced 2 ms apart, as between a model's turns: each run finds a
    // context hardened in advance. And 20 ms apart, which leaves engines
    // with costly contexts (Boa) the time to prepare the next one.
    spaced(c, &rt, "trivial_spaced", Duration::from_millis(2));
    spaced(c, &rt, "trivial_spaced_20ms", Duration::from_millis(20));
}

/// A trivial run outside any session, in an empty session, and in a
/// session holding about 10 MiB (100,000 small objects): what a session's
/// state costs a run that does not touch it.
fn sessions(c: &mut Criterion) {
    let rt = runtime(2);
    let mut g = c.benchmark_group("session");
    for engine in engines() {
        let h = harness(engine);
        let empty = h.open_session().expect("sessions");
        let full = h.open_session().expect("sessions");
        let planted = rt.block_on(full.run(
            "const held = Array.from({length: 100000}, (_, i) => ({i, s: 'item ' + i})); return held.length",
        ));
        assert!(planted.ok, "{:?}", planted.error);
        g.bench_function(BenchmarkId::new("unscoped", engine), |b| {
            b.iter(|| assert!(rt.block_on(h.run(TRIVIAL)).ok))
        });
        g.bench_function(BenchmarkId::new("empty", engine), |b| {
            b.iter(|| assert!(rt.block_on(empty.run(TRIVIAL)).ok))
        });
        g.bench_function(BenchmarkId::new("holding_10mib", engine), |b| {
            b.iter(|| assert!(rt.block_on(full.run(TRIVIAL)).ok))
        });
    }
    g.finish();
}

/// `script` run back to back on every engine, as group `group`.
fn back_to_back(c: &mut Criterion, rt: &tokio::runtime::Runtime, group: &str, script: &str) {
    let mut g = c.benchmark_group(group);
    for engine in engines() {
        let h = harness(engine);
        g.bench_function(BenchmarkId::from_parameter(engine), |b| {
            b.iter(|| {
                let r = rt.block_on(h.run(script));
                assert!(r.ok);
            })
        });
    }
    g.finish();
}

/// Trivial runs `gap` apart. Only the runs themselves are timed, and every
/// run is kept: criterion reports medians, the tail needs every sample
/// (printed to stderr as `latency GROUP ENGINE: p50 … p99 … max …`).
fn spaced(c: &mut Criterion, rt: &tokio::runtime::Runtime, group: &str, gap: Duration) {
    let mut g = c.benchmark_group(group);
    for engine in engines() {
        let h = harness(engine);
        let mut all: Vec<Duration> = Vec::new();
        g.bench_function(BenchmarkId::from_parameter(engine), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    std::thread::sleep(gap);
                    let t = Instant::now();
                    let r = rt.block_on(h.run(TRIVIAL));
                    let d = t.elapsed();
                    assert!(r.ok);
                    total += d;
                    all.push(d);
                }
                total
            })
        });
        print_percentiles(&format!("{group} {engine}"), &mut all);
    }
    g.finish();
}

fn print_percentiles(label: &str, all: &mut [Duration]) {
    if all.len() < 20 {
        return;
    }
    all.sort();
    let p = |q: f64| all[((all.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    eprintln!(
        "latency {label}: n {} p50 {:.3} ms p90 {:.3} ms p99 {:.3} ms max {:.3} ms",
        all.len(),
        p(0.5),
        p(0.9),
        p(0.99),
        p(1.0)
    );
}

fn tool_calls(c: &mut Criterion) {
    let rt = runtime(2);
    let mut g = c.benchmark_group("tool_calls");
    for engine in engines() {
        let h = harness(engine);
        for n in [1usize, 10, 100] {
            let src = sequential_calls(n);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{engine}/sequential"), n),
                &src,
                |b, src| b.iter(|| assert!(rt.block_on(h.run(src)).ok)),
            );
        }
        let src = parallel_calls(32);
        g.throughput(Throughput::Elements(32));
        g.bench_with_input(
            BenchmarkId::new(format!("{engine}/promise_all"), 32),
            &src,
            |b, src| b.iter(|| assert!(rt.block_on(h.run(src)).ok)),
        );
    }
    g.finish();
}

fn workloads(c: &mut Criterion) {
    let rt = runtime(2);
    let mut g = c.benchmark_group("workloads");
    g.sample_size(20);
    for engine in engines() {
        let h = harness(engine);
        for (name, src) in [
            ("cpu_1e6_additions", CPU_BOUND),
            ("json_100kib", JSON_HEAVY),
        ] {
            g.bench_function(BenchmarkId::new(name, engine), |b| {
                b.iter(|| assert!(rt.block_on(h.run(src)).ok))
            });
        }
    }
    g.finish();
}

/// Scripts per second with 1, 2 and 8 executions in flight: one criterion
/// iteration is one finished script; `in_flight` tasks share one harness.
fn throughput(c: &mut Criterion) {
    let rt = runtime(2);
    let mut g = c.benchmark_group("throughput");
    g.throughput(Throughput::Elements(1));
    for engine in engines() {
        let h = harness(engine);
        for in_flight in [1usize, 2, 8] {
            g.bench_function(BenchmarkId::new(engine.to_string(), in_flight), |b| {
                b.iter_custom(|iters| {
                    let t = Instant::now();
                    rt.block_on(run_in_flight(&h, iters, in_flight));
                    t.elapsed()
                })
            });
        }
    }
    g.finish();
}

/// Runs `total` trivial scripts, `in_flight` at a time.
async fn run_in_flight(h: &harness::Harness, total: u64, in_flight: usize) {
    let mut set = tokio::task::JoinSet::new();
    let mut started = 0u64;
    while started < total || !set.is_empty() {
        while started < total && set.len() < in_flight {
            let h = h.clone();
            set.spawn(async move { assert!(h.run(TRIVIAL).await.ok) });
            started += 1;
        }
        if let Some(done) = set.join_next().await {
            done.expect("run task");
        }
    }
}

criterion_group!(benches, trivial, tool_calls, workloads, throughput, sessions);

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
