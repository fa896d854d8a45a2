//! Boa on arbitrary source, behind the process boundary (in process, Boa
//! cannot stop a script or cap its heap: docs/security.md). The workers
//! are this binary: libFuzzer ignores `--` flags, and the init block
//! serves the worker protocol before any fuzzing starts.
#![no_main]
use harness::{EngineKind, Isolation};
use harness_fuzzing::Execute;
use std::sync::OnceLock;

/// Lets the workers (this binary) enforce the memory limit.
#[global_allocator]
static ALLOC: harness::core::process::WorkerAllocator = harness::core::process::WorkerAllocator;

static ORACLE: OnceLock<Execute> = OnceLock::new();

libfuzzer_sys::fuzz_target!(
    init: harness::serve_worker_if_requested(),
    |data: &[u8]| {
        ORACLE
            .get_or_init(|| Execute::new(EngineKind::Boa, Isolation::Process))
            .check(data)
    }
);
