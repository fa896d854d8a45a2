//! `harness sandbox`: one script in the workspace sandbox.

use super::*;

#[cfg(feature = "wasi")]
pub(super) fn sandbox(args: SandboxArgs) -> ExitCode {
    use harness::wasi::{Sandbox, SandboxPolicy};
    let mut policy = SandboxPolicy::default();
    if let Some(f) = args.fuel {
        policy.fuel = (f > 0).then_some(f);
    }
    if let Some(m) = args.memory_mb {
        policy.memory_bytes = m.saturating_mul(1024 * 1024);
    }
    if let Some(n) = args.stdout_max_bytes {
        policy.stdout_max_bytes = n;
    }
    if let Some(n) = args.stderr_max_bytes {
        policy.stderr_max_bytes = n;
    }
    if let Some(t) = args.timeout_ms {
        policy.timeout_ms = t;
    }
    let code = match read_input(&args.file) {
        Ok(b) => match String::from_utf8(b) {
            Ok(s) => s,
            Err(_) => return usage_error(format!("{} is not valid UTF-8", args.file)),
        },
        Err(e) => return usage_error(format!("cannot read {}: {e}", args.file)),
    };
    let mut sandbox = match Sandbox::new(policy, args.session, args.root) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    if let Some(w) = args.wasm {
        sandbox = sandbox.with_wasm_binary_path(w);
    }
    let result = match sandbox.execute(&code) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    if args.json {
        match serde_json::to_string(&result) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage_error(format!("cannot encode the result: {e}")),
        }
    } else {
        print!("{}", result.stdout);
        eprint!("{}", result.stderr);
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        eprintln!(
            "-- sandbox {}: exit {} ({:?}) in {:.2} ms, {} fuel, {} KiB memory{}{}; created: {}; modified: {}; deleted: {}",
            result.metadata.session_id,
            result.exit_code,
            result.metadata.termination,
            result.duration_ms,
            result.fuel_consumed,
            result.memory_used_bytes / 1024,
            if result.metadata.stdout_truncated { "; stdout truncated" } else { "" },
            if result.metadata.stderr_truncated { "; stderr truncated" } else { "" },
            list(&result.files_created),
            list(&result.files_modified),
            list(&result.files_deleted),
        );
    }
    if result.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
