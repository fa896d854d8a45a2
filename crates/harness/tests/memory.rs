//! Memory over many runs. Alone in its own test binary: it reads the
//! process's RSS, which tests running beside it in the same binary would
//! inflate (a clean-clone CI run once saw +17 MiB that way).

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_runs_keep_memory_flat() {
    fn rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = s
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * 4
    }
    let (h, _) = harness();
    let script = "const r = await tools.echo({a: [1, 2, 3]}); const o = {}; o.self = o; console.log('x'); return r.a.length";
    for _ in 0..200 {
        h.run(script).await;
    }
    let before = rss_kib();
    for _ in 0..1000 {
        let r = h.run(script).await;
        assert!(r.ok);
    }
    let after = rss_kib();
    println!("RSS before {before} KiB, after 1000 runs {after} KiB");
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}
