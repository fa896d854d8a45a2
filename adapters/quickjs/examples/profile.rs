//! Runs a trivial script N times on one worker (optionally GAP ms apart)
//! and prints the mean time per run;
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
    let e = harness_quickjs::QuickJs::with_max_workers(1);
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
