//! What starting a worker process costs a host whose heap is large (a
//! Python or Node host, or a service holding caches): `isolation =
//! process` with every worker replaced after one run, so each run waits
//! for a fresh worker, and the host's heap is written once more after
//! each start (a worker started by a fork of the host leaves the host's
//! pages copy-on-write: each next write to one faults).
//! `spawn [HEAP_MIB] [RUNS]` (defaults 2048, 20), median and 90th
//! percentile in µs:
//! `cargo build --release -p harness-benches --example spawn &&
//!  target/release/examples/spawn 2048 20 && target/release/examples/spawn 0 20`.
//! `HARNESS_PROCESS_RINGS=0` starts the workers without the shared rings.
use harness::{EngineKind, Harness, Isolation, Limits};
use harness_benches::{arg, quantile};
use std::time::{Duration, Instant};

// Its own worker processes.
harness::main! {
    fn main() {
        let (heap_mib, n) = (arg(1, 2048) as usize, arg(2, 20).max(1) as usize);
        let mut heap = vec![0u8; heap_mib << 20];
        let touch = |heap: &mut [u8]| {
            let t = Instant::now();
            for page in heap.chunks_mut(4096) {
                page[0] = page[0].wrapping_add(1);
            }
            t.elapsed().as_secs_f64() * 1e6
        };
        touch(&mut heap);
        let rt = harness_benches::runtime(2);
        let h = Harness::builder()
            .engine(EngineKind::QuickJs)
            .limits(Limits::default().with_isolation(Some(Isolation::Process)))
            .workers(1, 1)
            .build()
            .expect("quickjs is built in");
        let run = || {
            let r = rt.block_on(h.run("return 1 + 1"));
            assert!(r.ok, "{r:?}");
        };
        run();
        // Back to back: each run waits for the worker started after the
        // last one.
        let mut started = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            run();
            started.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // After each start: the host writes its whole heap.
        let mut writes = Vec::with_capacity(n);
        for _ in 0..n {
            run();
            // The next worker has started by now.
            std::thread::sleep(Duration::from_millis(200));
            writes.push(touch(&mut heap));
        }
        started.sort_by(f64::total_cmp);
        writes.sort_by(f64::total_cmp);
        println!(
            "heap {heap_mib} MiB: a run with a worker start {:.0} / {:.0} µs; \
             writing the heap after a start {:.0} / {:.0} µs (p50 / p90)",
            quantile(&started, 0.5),
            quantile(&started, 0.9),
            quantile(&writes, 0.5),
            quantile(&writes, 0.9),
        );
    }
}
