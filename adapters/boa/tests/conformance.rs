//! The whole shared suite on Boa, in this process and behind the process
//! boundary: one test per engine and case
//! (`cargo test -p harness-boa --test conformance -- 'boa (process)::security::'`).
//!
//! This binary is also the worker the process adapter starts.

harness_core::worker_main! {
    engines = [harness_boa::descriptor()];
    fn main() {
        let engine = harness_boa::descriptor();
        harness_conformance::trials::Trials::new()
            .in_process(&engine)
            .process(&engine)
            .run()
    }
}
