//! `prepare` on arbitrary bytes, as JavaScript and TypeScript: never
//! panics; deterministic; stripped TypeScript is valid JavaScript.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| harness_fuzzing::check_prepare(data));
