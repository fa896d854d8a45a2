//! What a pause costs this machine's CPU, with no engine involved: the
//! same fixed work back to back and after sleeping GAP_MS, as plain
//! arithmetic (no memory), as a sweep over 256 KiB and 2 MiB, and as a
//! walk of 1,000 cache lines at random in 1 MiB. If only the work that
//! touches memory slows down after the pause, the caches were emptied
//! while the CPU slept, and a run gets faster spaced only by touching
//! less memory. `cold [GAP_MS] [RUNS]` (defaults 2, 500); p10 / p50 / p90
//! in µs: `cargo run --release -p harness-benches --example cold`.
use harness_benches::{arg, quantile};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One piece of fixed work, timed.
type Work<'a> = Box<dyn FnMut() + 'a>;

fn arithmetic(n: u64) -> u64 {
    let mut x = 1u64;
    for _ in 0..n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
    }
    x
}

fn sweep(buf: &mut [u8]) -> u64 {
    let mut s = 0u64;
    for line in buf.chunks_mut(64) {
        s += u64::from(line[0]);
        line[0] = line[0].wrapping_add(1);
    }
    s
}

/// Follows a chain of `next` indices, one per cache line, so each load
/// waits for the one before (no prefetching).
fn walk(next: &[usize], start: usize, steps: usize) -> usize {
    let mut p = start;
    for _ in 0..steps {
        p = next[p];
    }
    p
}

fn main() {
    let (gap, n) = (arg(1, 2), arg(2, 500).max(1) as usize);
    let mut small = vec![1u8; 256 << 10];
    let mut large = vec![1u8; 2 << 20];
    // 1,000 lines of 1 MiB (16,384 lines of 8 usizes) in a random cycle.
    let lines = 16_384usize;
    let mut order: Vec<usize> = (0..lines).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..lines).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let mut next = vec![0usize; lines * 8];
    for w in 0..1000 {
        next[order[w] * 8] = order[(w + 1) % 1000] * 8;
    }
    let start = order[0] * 8;
    let mut work: Vec<(&str, Work)> = vec![
        (
            "arithmetic (no memory)",
            Box::new(|| {
                black_box(arithmetic(black_box(200_000)));
            }),
        ),
        (
            "sweep 256 KiB",
            Box::new(|| {
                black_box(sweep(&mut small));
            }),
        ),
        (
            "sweep 2 MiB",
            Box::new(|| {
                black_box(sweep(&mut large));
            }),
        ),
        (
            "1,000 random lines in 1 MiB",
            Box::new(|| {
                black_box(walk(&next, start, 1000));
            }),
        ),
    ];
    for (name, f) in &mut work {
        for g in [0, gap] {
            let mut t = Vec::with_capacity(n);
            for _ in 0..n {
                if g > 0 {
                    std::thread::sleep(Duration::from_millis(g));
                }
                let s = Instant::now();
                f();
                t.push(s.elapsed().as_secs_f64() * 1e6);
            }
            t.sort_by(f64::total_cmp);
            println!(
                "{name}, gap {g} ms: {:.1} / {:.1} / {:.1} µs",
                quantile(&t, 0.1),
                quantile(&t, 0.5),
                quantile(&t, 0.9)
            );
        }
    }
}
