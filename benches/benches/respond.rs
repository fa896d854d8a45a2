//! Detection and preparation of a 20 KiB script, cold and from the cache;
//! the realm check on scripts of several sizes.
//!
//! Run: `cargo bench -p harness-benches --bench respond`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use harness::respond::realm::{changes_builtins, RealmCache};
use harness::respond::{detect, prepare::Preparer, Language};
use harness_benches::{response_20kib, script_20kib, POLYFILL, TRIVIAL, TYPICAL};

fn prepare(c: &mut Criterion) {
    let mut g = c.benchmark_group("prepare_20kib");
    for (name, lang) in [
        ("javascript", Language::Javascript),
        ("typescript", Language::Typescript),
    ] {
        let src = script_20kib(lang == Language::Typescript);
        assert!(src.len() <= 20 * 1024, "{} bytes", src.len());
        g.throughput(Throughput::Bytes(src.len() as u64));
        // Cold: a fresh cache each time (parse, scan, strip types, hash).
        g.bench_with_input(BenchmarkId::new("cold", name), &src, |b, src| {
            b.iter(|| {
                let p = Preparer::new(1, 20 * 1024);
                p.prepare(src.as_bytes(), lang).expect("prepares")
            })
        });
        // Cached: the same script again (decode, hash, lookup).
        let p = Preparer::new(16, 20 * 1024);
        p.prepare(src.as_bytes(), lang).expect("prepares");
        g.bench_with_input(BenchmarkId::new("cached", name), &src, |b, src| {
            b.iter(|| p.prepare(src.as_bytes(), lang).expect("prepares"))
        });
    }
    g.finish();

    // Which realm a script needs (`respond::realm`): run by the facade
    // on every script it executes.
    let mut g = c.benchmark_group("realm_check");
    for (name, src) in [
        ("trivial", TRIVIAL.to_owned()),
        ("typical", TYPICAL.to_owned()),
        ("polyfill", POLYFILL.to_owned()),
        ("20kib", script_20kib(false)),
    ] {
        g.throughput(Throughput::Bytes(src.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(name), &src, |b, src| {
            b.iter(|| changes_builtins(src))
        });
        // The same script again, through the facade's cache of verdicts.
        let cache = RealmCache::new(64);
        cache.realm_for(&src);
        g.bench_with_input(BenchmarkId::new("cached", name), &src, |b, src| {
            b.iter(|| cache.realm_for(src))
        });
    }
    g.finish();

    let text = response_20kib();
    let mut g = c.benchmark_group("detect_20kib");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("response", |b| b.iter(|| detect(&text).expect("detects")));
    g.finish();
}

criterion_group!(benches, prepare);
criterion_main!(benches);
