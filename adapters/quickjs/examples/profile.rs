//! Runs a trivial script N times (optionally GAP ms apart) on a pool of
//! WORKERS threads (default 1; more grows the pool with a burst first) and
//! prints the mean time per run: `profile N [GAP] [WORKERS]`;
//! a steady driver for profilers:
//! `cargo build --release -p harness-quickjs --example profile &&
//!  valgrind --tool=callgrind target/release/examples/profile 200`
use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    // Optional pause between runs (ms), as between a model's turns: then
    // each run finds a context hardened in advance.
    let gap: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let workers: usize = std::env::args()
        .nth(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let e = harness_quickjs::QuickJs::with_max_workers(workers);
    if workers > 1 {
        // Grow the pool with a burst of concurrent runs first.
        rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let e = e.clone();
                set.spawn(async move { e.execute(ExecutionRequest::new("return 1+1")).await });
            }
            while set.join_next().await.is_some() {}
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut busy = std::time::Duration::ZERO;
    for _ in 0..n {
        let t = std::time::Instant::now();
        let r = rt.block_on(e.execute(ExecutionRequest::new("return 1+1")));
        busy += t.elapsed();
        assert!(r.ok);
        if gap > 0 {
            std::thread::sleep(std::time::Duration::from_millis(gap));
        }
    }
    println!("{:?} per run (gap {gap} ms)", busy / n as u32);
}
