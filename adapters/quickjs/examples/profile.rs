//! Runs a trivial script N times on one worker and prints the mean time;
//! a steady driver for profilers:
//! `cargo build --release -p harness-quickjs --example profile &&
//!  valgrind --tool=callgrind target/release/examples/profile 200`
use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let e = harness_quickjs::QuickJs::with_max_workers(1);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let r = rt.block_on(e.execute(ExecutionRequest::new("return 1+1")));
        assert!(r.ok);
    }
    println!("{:?} per run", t.elapsed() / n as u32);
}
