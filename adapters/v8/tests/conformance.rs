//! The whole shared suite on V8 in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-v8 --test conformance -- 'v8::security::'`).
//!
//! Links V8, so it builds only where the prebuilt library is available
//! (`RUSTY_V8_ARCHIVE`, or network access): `scripts/test` runs it then,
//! and otherwise prints why it was skipped.
//!
//! This binary is also the worker the process adapter starts
//! (`conformance --harness-worker v8`), so it installs the worker
//! allocator and serves before anything else.

use harness_conformance::{all_cases, run_suite, Case, Status};
use harness_core::process::{serve_if_requested, ProcessAdapter, ProcessOptions, WorkerAllocator};
use harness_core::ScriptRuntimeAdapter;
use libtest_mimic::{Arguments, Failed, Trial};
use std::sync::Arc;

#[global_allocator]
static ALLOC: WorkerAllocator = WorkerAllocator;

fn worker_host(engine: &str) -> Option<Box<dyn harness_core::process::EngineHost>> {
    (engine == harness_v8::ENGINE_NAME).then(harness_v8::worker_host)
}

fn main() {
    serve_if_requested(worker_host);
    let mut args = Arguments::from_args();
    // Cases time themselves (deadlines, cancellation); one at a time.
    args.test_threads.get_or_insert(1);
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime"),
    );
    let opts =
        ProcessOptions::current_exe(harness_v8::ENGINE_NAME).expect("the test binary's path");
    let process = ProcessAdapter::new(harness_v8::engine_info(), opts);
    process.prewarm(1);
    let engines: Vec<(&str, Arc<dyn ScriptRuntimeAdapter>)> = vec![
        ("v8", Arc::new(harness_v8::V8::new())),
        ("v8 (process)", Arc::new(process)),
    ];
    let cases: Vec<Case> = all_cases();
    let mut trials = Vec::new();
    for (label, adapter) in &engines {
        let caps = adapter.info().capabilities;
        let mut unsupported = Vec::new();
        for case in &cases {
            let name = format!("{label}::{}", case.name);
            if let Some(reason) = case.needs.missing(&caps) {
                unsupported.push(format!("{}: {reason}", case.name));
                trials.push(
                    Trial::test(name, || Ok(()))
                        .with_kind(format!("unsupported: {reason}"))
                        .with_ignored_flag(true),
                );
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
        // V8 can interrupt, cap its heap and guard its stack: every case
        // must run, in process and behind the boundary.
        trials.push(Trial::test(
            format!("{label}::every_case_runs"),
            move || {
                if unsupported.is_empty() {
                    Ok(())
                } else {
                    Err(format!("unsupported on V8: {}", unsupported.join("; ")).into())
                }
            },
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}
