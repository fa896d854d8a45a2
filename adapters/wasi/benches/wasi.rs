//! WASI-QuickJS: instantiate-and-run of a trivial script with the module
//! compiled once, the first run of a process with and without the on-disk
//! module cache, and the workspace sandbox end to end.
//!
//! Run: `cargo bench -p harness-wasi` (needs `bin/quickjs.wasm`).

use criterion::{criterion_group, criterion_main, Criterion};
use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
use harness_wasi::{load_uncached, ModuleOptions, Sandbox, SandboxPolicy, Wasi, WasiEngine};
use std::sync::Arc;
use std::time::Duration;

fn trivial(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let engine = Wasi::new();
    engine
        .engine()
        .preload()
        .expect("bin/quickjs.wasm (scripts/build-quickjs-wasm)");
    let mut g = c.benchmark_group("wasi");
    g.bench_function("instantiate_and_run/trivial", |b| {
        b.iter(|| {
            let r = rt.block_on(engine.execute(ExecutionRequest::new("return 1+1")));
            assert!(r.ok, "{r:?}");
        })
    });
    g.finish();
}

/// A process's first run: load the guest (compile it, or read the
/// compiled module back from the cache), instantiate, run.
fn first_run(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let cache = tempfile::tempdir().expect("tempdir");
    let wasm = harness_wasi::default_wasm_path();
    let cached = ModuleOptions {
        wasm_path: Some(wasm.clone()),
        cache_dir: Some(cache.path().to_path_buf()),
        bounded_memory: false,
        preinit: true,
    };
    // Fill the cache once.
    load_uncached(&cached).expect("bin/quickjs.wasm (scripts/build-quickjs-wasm)");
    let uncached = ModuleOptions {
        wasm_path: Some(wasm),
        cache_dir: None,
        bounded_memory: false,
        preinit: true,
    };
    let mut g = c.benchmark_group("wasi/first_run");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    for (name, opts) in [("compile", &uncached), ("disk_cache", &cached)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let loaded = load_uncached(opts).expect("loads");
                assert_eq!(loaded.from_cache, name == "disk_cache");
                let engine = Wasi::with_engine(WasiEngine::with_loaded(Arc::new(loaded)), 1);
                let r = rt.block_on(engine.execute(ExecutionRequest::new("return 1+1")));
                assert!(r.ok, "{r:?}");
            })
        });
    }
    g.finish();
}

fn sandbox(c: &mut Criterion) {
    let root = tempfile::tempdir().expect("tempdir");
    let sb = Sandbox::new(SandboxPolicy::default(), "bench", root.path()).expect("session");
    let mut g = c.benchmark_group("sandbox");
    g.bench_function("execute/trivial", |b| {
        b.iter(|| {
            let r = sb.execute("console.log(1 + 1)").expect("runs");
            assert!(r.success);
        })
    });
    g.bench_function("execute/write_file", |b| {
        b.iter(|| {
            let r = sb
                .execute("require('fs').writeFileSync('out.txt', String(Math.random()))")
                .expect("runs");
            assert!(r.success);
        })
    });
    g.finish();
}

criterion_group!(benches, trivial, first_run, sandbox);
criterion_main!(benches);
