//! The whole shared suite on WASI-QuickJS, in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-wasi --test conformance -- 'wasi (process)::security::'`).
//!
//! Needs `bin/quickjs.wasm` (`scripts/build-quickjs-wasm`); without it
//! every case fails with the message that says so.
//!
//! This binary is also the worker the process adapter starts.

harness_conformance::conformance_main!(harness_wasi::descriptor());
