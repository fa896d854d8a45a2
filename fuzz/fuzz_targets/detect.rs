//! `detect` on arbitrary text: never panics; segments tile the input.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| harness_fuzzing::check_detect(data));
