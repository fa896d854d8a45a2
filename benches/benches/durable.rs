//! Durable runs on the WASI engine, in process with the module cache
//! warm: a run until it suspends on an approval (sealing its
//! continuation included), and the resume of that continuation to the
//! end (opening it and a fresh instance included), for a script that made
//! one call and for one that built 50,000 objects first. The sizes of the
//! continuations are printed once.
//!
//! Run: `cargo bench -p harness-benches --bench durable`.

use criterion::{criterion_group, Criterion};
use harness::durable::{Answer, ContinuationKeys, DurableRuns, Ledger};
use harness::{
    ApprovalBridge, ApprovalDecision, ApprovalRequest, EngineKind, FnTool, Harness, ToolRegistry,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

struct Suspend;

#[async_trait::async_trait]
impl ApprovalBridge for Suspend {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Suspend
    }
}

/// Lets the bench resume one continuation again and again.
#[derive(Debug)]
struct Always;

impl Ledger for Always {
    fn claim(&self, _: &str, _: u64) -> Result<bool, String> {
        Ok(true)
    }
}

const ONE_CALL: &str = "const r = await tools.send({to: 'x'}); return r.sent";
const BUILT: &str = "const a = Array.from({length: 50000}, (_, i) => ({i, s: 'item ' + i})); \
                     await tools.send({to: 1}); return a[49999].s";

fn durable(c: &mut Criterion) {
    let rt = harness_benches::runtime(2);
    let mut tools = ToolRegistry::new();
    tools
        .register(
            FnTool::new(
                "send",
                "sends",
                json!({"type": "object"}),
                |a, _| async move { Ok(json!({"sent": a["to"]})) },
            )
            .requiring_approval(|_| true),
        )
        .expect("registers");
    let keys = ContinuationKeys::generate().expect("a key");
    let h = Harness::builder()
        .engine(EngineKind::Wasi)
        .tools(tools)
        .approvals(Arc::new(Suspend))
        .suspend(DurableRuns::new(keys).with_ledger(Arc::new(Always)))
        .build()
        .expect("the wasi engine (bin/quickjs.wasm)");
    let approve = BTreeMap::from([(1, Answer::Approve)]);
    let mut g = c.benchmark_group("durable");
    for (name, script) in [("one_call", ONE_CALL), ("50k_objects", BUILT)] {
        let first = rt.block_on(h.run(script));
        let s = first.suspension.expect("suspends");
        // As the CLI reads it from its file: the sealed bytes.
        let sealed = harness::durable::continuation_bytes(s.continuation.as_bytes()).into_owned();
        eprintln!("durable/{name}: continuation {} bytes", sealed.len());
        g.bench_function(format!("suspend/{name}"), |b| {
            b.iter(|| {
                let r = rt.block_on(h.run(script));
                assert!(r.suspension.is_some());
            })
        });
        g.bench_function(format!("resume/{name}"), |b| {
            b.iter(|| {
                let r = rt.block_on(h.resume(&sealed, approve.clone()));
                assert!(r.ok, "{:?}", r.error);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, durable);

harness::main! {
    fn main() {
        benches();
        criterion::Criterion::default().configure_from_args().final_summary();
    }
}
