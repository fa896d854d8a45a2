//! The whole shared suite on WASI-QuickJS, in this process and behind the
//! process boundary: one test per engine and case
//! (`cargo test -p harness-wasi --test conformance -- 'wasi::limits::'`).
//!
//! Needs `bin/quickjs.wasm` (`scripts/build-quickjs-wasm`); without it
//! every case fails with the message that says so.
//!
//! This binary is also the worker the process adapter starts
//! (`conformance --harness-worker wasi`), so it installs the worker
//! allocator and serves before anything else.

use harness_conformance::{all_cases, run_suite, Case, Status};
use harness_core::process::{serve_if_requested, ProcessAdapter, ProcessOptions, WorkerAllocator};
use harness_core::ScriptRuntimeAdapter;
use libtest_mimic::{Arguments, Failed, Trial};
use std::sync::Arc;

#[global_allocator]
static ALLOC: WorkerAllocator = WorkerAllocator;

fn main() {
    serve_if_requested(|engine| (engine == "wasi").then(harness_wasi::worker_host));
    let mut args = Arguments::from_args();
    // Cases time themselves (deadlines, cancellation); one at a time keeps
    // a 2-core machine honest.
    args.test_threads.get_or_insert(1);
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime"),
    );
    let opts = ProcessOptions::current_exe("wasi").expect("the test binary's path");
    let process = ProcessAdapter::new(harness_wasi::engine_info(), opts);
    process.prewarm(1);
    let engines: Vec<(&str, Arc<dyn ScriptRuntimeAdapter>)> = vec![
        ("wasi", Arc::new(harness_wasi::Wasi::new())),
        ("wasi (process)", Arc::new(process)),
    ];
    let cases: Vec<Case> = all_cases();
    let mut trials = Vec::new();
    for (label, adapter) in &engines {
        let caps = adapter.info().capabilities;
        for case in &cases {
            let name = format!("{label}::{}", case.name);
            // WASI-QuickJS enforces every limit itself: no case may be
            // skipped as unsupported.
            if let Some(reason) = case.needs.missing(&caps) {
                let reason = reason.to_owned();
                trials.push(Trial::test(name, move || {
                    Err(Failed::from(format!("unsupported on WASI: {reason}")))
                }));
                continue;
            }
            let (rt, adapter, case) = (rt.clone(), adapter.clone(), *case);
            trials.push(Trial::test(name, move || {
                let report = rt.block_on(run_suite(adapter, &[case], None));
                match &report.results[0].status {
                    Status::Passed { .. } => Ok(()),
                    Status::Failed { reason } => Err(Failed::from(reason.as_str())),
                    other => Err(Failed::from(format!("unexpected status {other:?}"))),
                }
            }));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
