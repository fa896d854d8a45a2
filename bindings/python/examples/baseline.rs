//! The Rust side of `bindings/python/benches/bench.py`: the same runs
//! through `harness::Harness` directly, in the same build (features,
//! profile) as the extension module, so the difference is what Python
//! adds.
//!
//! `cargo run --release -p script-harness-python --example baseline`

use harness::{FnTool, Harness, ToolRegistry};
use std::time::Instant;

fn median_us(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut registry = ToolRegistry::new();
    registry
        .register(FnTool::new(
            "echo",
            "returns its arguments",
            serde_json::json!({"type": "object"}),
            |args, _ctx| async move { Ok(args) },
        ))
        .expect("register");
    let limits = harness::Limits::default().with_max_tool_calls(1000);
    let h = Harness::builder()
        .tools(registry)
        .limits(limits)
        .build()
        .expect("harness");
    let time = |src: &str| -> f64 {
        for _ in 0..200 {
            rt.block_on(h.run(src));
        }
        let mut xs = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let r = rt.block_on(h.run(src));
            xs.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(r.ok, "{:?}", r.error);
        }
        median_us(xs)
    };
    let trivial = time("return 1");
    let one = time("return await tools.echo({x: 1})");
    let hundred = time("for (let i = 0; i < 100; i++) await tools.echo({i}); return 1");
    println!("rust  trivial run            {trivial:8.1} us (median of {n})");
    println!("rust  run + 1 tool call      {one:8.1} us");
    println!(
        "rust  per tool call (of 100) {:8.1} us",
        (hundred - trivial) / 100.0
    );
}
