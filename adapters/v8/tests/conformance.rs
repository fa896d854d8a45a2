//! The whole shared suite on V8, in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-v8 --test conformance -- 'v8 (process)::security::'`).
//!
//! Links V8, so it builds only where the prebuilt library is available
//! (`RUSTY_V8_ARCHIVE`, or network access): `scripts/test` runs it then,
//! and otherwise prints why it was skipped.
//!
//! This binary is also the worker the process adapter starts.

harness_conformance::conformance_main!(harness_v8::descriptor());
