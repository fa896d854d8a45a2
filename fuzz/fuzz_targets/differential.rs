//! Deterministic scripts from a small grammar on every built engine:
//! values, error codes and console lines must agree.
#![no_main]
use harness_fuzzing::Differential;
use std::sync::OnceLock;

static ORACLE: OnceLock<Differential> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ORACLE.get_or_init(Differential::new).check(data);
});
