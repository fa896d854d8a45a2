//! The floor under a spaced run: one thread hands a job to another through
//! a channel and waits on a tokio oneshot for its answer, as the worker
//! pool does, with nothing else done. Prints the median and p90 of each
//! hop in µs. `wake [GAP_MS]` (default 2; 0 for back to back):
//! `cargo run --release -p harness-benches --example wake -- 2`
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn main() {
    let gap: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let rt = harness_benches::runtime(2);
    let (jobs, rx) = mpsc::channel::<tokio::sync::oneshot::Sender<Instant>>();
    std::thread::spawn(move || {
        while let Ok(answer) = rx.recv() {
            let _ = answer.send(Instant::now());
        }
    });
    let n = 2000;
    let (mut there, mut back) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        if gap > 0 {
            std::thread::sleep(Duration::from_millis(gap));
        }
        let t = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        jobs.send(tx).expect("the worker is alive");
        let answered = rt.block_on(rx).expect("an answer");
        let end = Instant::now();
        there.push((answered - t).as_secs_f64() * 1e6);
        back.push((end - answered).as_secs_f64() * 1e6);
    }
    there.sort_by(f64::total_cmp);
    back.sort_by(f64::total_cmp);
    let q = harness_benches::quantile;
    println!(
        "gap {gap} ms: to the worker median {:.1} p90 {:.1} µs; back median {:.1} p90 {:.1} µs",
        q(&there, 0.5),
        q(&there, 0.9),
        q(&back, 0.5),
        q(&back, 0.9)
    );
}
