//! The whole shared suite on Boa, in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-boa --test conformance -- 'boa (process)::security::'`).
//!
//! This binary is also the worker the process adapter starts.

harness_conformance::conformance_main!(harness_boa::descriptor());
