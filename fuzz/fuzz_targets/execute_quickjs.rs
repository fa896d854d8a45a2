//! QuickJS in process on arbitrary source: never panics, stays within its
//! limits (plus the stated margins), and the host runs the next script.
#![no_main]
use harness::{EngineKind, Isolation};
use harness_fuzzing::Execute;
use std::sync::OnceLock;

static ORACLE: OnceLock<Execute> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ORACLE
        .get_or_init(|| Execute::new(EngineKind::QuickJs, Isolation::InProcess))
        .check(data)
});
