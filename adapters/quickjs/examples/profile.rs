//! Runs a trivial script N times (optionally GAP ms apart) on a pool of
//! WORKERS threads (default 1; more grows the pool with a burst first) and
//! prints the mean time per run: `profile N [GAP] [WORKERS] [IN_FLIGHT]`
//! (with IN_FLIGHT > 1: N runs with that many in flight at once, and the
//! throughput in scripts/s);
//! `PROFILE_SCRIPT=FILE` runs that script instead of `return 1+1`;
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
    let script: &'static str = match std::env::var("PROFILE_SCRIPT") {
        Ok(path) => Box::leak(
            std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("PROFILE_SCRIPT {path}: {e}"))
                .into_boxed_str(),
        ),
        Err(_) => "return 1+1",
    };
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
                set.spawn(async move { e.execute(ExecutionRequest::new(script)).await });
            }
            while set.join_next().await.is_some() {}
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let in_flight: usize = std::env::args()
        .nth(4)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    if in_flight > 1 {
        let t = std::time::Instant::now();
        rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            let mut started = 0;
            let mut done = 0;
            while done < n {
                while started < n && set.len() < in_flight {
                    let e = e.clone();
                    set.spawn(async move { e.execute(ExecutionRequest::new(script)).await });
                    started += 1;
                }
                if let Some(r) = set.join_next().await {
                    assert!(r.expect("run").ok);
                    done += 1;
                }
            }
        });
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{:.0} scripts/s with {in_flight} in flight on {workers} worker(s)",
            n as f64 / secs
        );
        return;
    }
    let mut busy = std::time::Duration::ZERO;
    for _ in 0..n {
        let t = std::time::Instant::now();
        let r = rt.block_on(e.execute(ExecutionRequest::new(script)));
        busy += t.elapsed();
        assert!(r.ok);
        if gap > 0 {
            std::thread::sleep(std::time::Duration::from_millis(gap));
        }
    }
    println!("{:?} per run (gap {gap} ms)", busy / n as u32);
}
