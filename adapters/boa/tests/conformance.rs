//! The whole shared suite on Boa in this process, Boa behind the process
//! boundary, and QuickJS behind the process boundary: one test per engine
//! and case (`cargo test -p harness-boa --test conformance -- 'boa (process)::security::'`).
//!
//! This binary is also the worker the process adapters start
//! (`conformance --harness-worker boa`), so it installs the worker
//! allocator and serves before anything else.

use harness_conformance::{all_cases, run_suite, Case, Status};
use harness_core::process::{serve_if_requested, ProcessAdapter, ProcessOptions, WorkerAllocator};
use harness_core::ScriptRuntimeAdapter;
use libtest_mimic::{Arguments, Failed, Trial};
use std::sync::Arc;

#[global_allocator]
static ALLOC: WorkerAllocator = WorkerAllocator;

fn worker_host(engine: &str) -> Option<Box<dyn harness_core::process::EngineHost>> {
    match engine {
        "boa" => Some(harness_boa::worker_host()),
        "quickjs" => Some(harness_quickjs::worker_host()),
        _ => None,
    }
}

fn process(info: harness_core::EngineInfo) -> Arc<dyn ScriptRuntimeAdapter> {
    let opts = ProcessOptions::current_exe(&info.name).expect("the test binary's path");
    let adapter = ProcessAdapter::new(info, opts);
    adapter.prewarm(1);
    Arc::new(adapter)
}

fn main() {
    serve_if_requested(worker_host);
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
    let engines: Vec<(&str, Arc<dyn ScriptRuntimeAdapter>)> = vec![
        ("boa", Arc::new(harness_boa::Boa::new())),
        ("boa (process)", process(harness_boa::engine_info())),
        ("quickjs (process)", process(harness_quickjs::engine_info())),
    ];
    let cases: Vec<Case> = all_cases();
    let mut trials = Vec::new();
    for (label, adapter) in &engines {
        let caps = adapter.info().capabilities;
        let mut unsupported = 0;
        for case in &cases {
            let name = format!("{label}::{}", case.name);
            if let Some(reason) = case.needs.missing(&caps) {
                // Shown as ignored, with the reason as its kind.
                unsupported += 1;
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
        // Behind the process boundary every case must run.
        let expect_all = adapter.info().isolation == harness_core::Isolation::Process;
        let label = label.to_string();
        trials.push(Trial::test(
            format!("{label}::every_case_runs"),
            move || {
                if expect_all && unsupported > 0 {
                    Err(
                        format!("{unsupported} case(s) unsupported behind the process boundary")
                            .into(),
                    )
                } else {
                    Ok(())
                }
            },
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}
