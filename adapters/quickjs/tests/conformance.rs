//! The whole shared suite on QuickJS, in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-quickjs --test conformance -- 'quickjs (process)::security::'`).
//!
//! This binary is also the worker the process adapter starts.

harness_conformance::conformance_main!(harness_quickjs::descriptor());
