//! `harness warm`: make the WASI guest's snapshots ahead of the first run.

use super::*;

/// `harness warm`: one line (or JSON object) per snapshot. A guest that is
/// missing or broken is a usage error, as for `sandbox`; a snapshot the
/// guest cannot make is reported, and its runs take the slow path.
#[cfg(feature = "wasi")]
pub(super) fn warm(args: WarmArgs) -> ExitCode {
    let made = match harness::wasi::warm_caches() {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    if args.json {
        return match serde_json::to_string(&made) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => usage_error(format!("cannot encode the result: {e}")),
        };
    }
    for w in &made {
        let how = match (w.ready, w.from_cache) {
            (false, _) => "not made (this guest cannot; its runs take the slow path)",
            (true, true) => "read back",
            (true, false) => "compiled",
        };
        let file = w
            .cache_file
            .as_ref()
            .map_or_else(String::new, |f| f.display().to_string());
        println!(
            "{:<8} {:<10} {how:<9} {:>9.1} ms  {file}",
            w.snapshot, w.isolation, w.millis
        );
    }
    ExitCode::SUCCESS
}
