//! A continuation from anywhere: never panics, never opens without the
//! key, and a changed byte is always refused.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| harness_fuzzing::check_continuation(data));
