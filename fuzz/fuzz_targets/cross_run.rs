//! Pairs of generated scripts on one harness: the second run's report must
//! be the same as on a fresh harness (cross-run isolation).
#![no_main]
use harness_fuzzing::CrossRun;
use std::sync::OnceLock;

static ORACLE: OnceLock<CrossRun> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ORACLE.get_or_init(CrossRun::new).check(data);
});
