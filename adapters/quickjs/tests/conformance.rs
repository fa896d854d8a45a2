//! The whole shared suite on QuickJS, in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-quickjs --test conformance -- 'quickjs (process)::security::'`).
//!
//! This binary is also the worker the process adapter starts.

harness_core::worker_main! {
    engines = [harness_quickjs::descriptor()];
    fn main() {
        let engine = harness_quickjs::descriptor();
        harness_conformance::trials::Trials::new()
            .in_process(&engine)
            .process(&engine)
            .run()
    }
}
