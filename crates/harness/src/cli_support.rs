//! The exit-status convention shared by the project's command-line programs
//! (`harness`, `conformance`): parse arguments with clap (usage errors exit
//! with 2, `--help` and `--version` with 0), log to stderr (never stdout)
//! filtered by `RUST_LOG` (default: warnings), then run the program on a
//! small tokio runtime.

use std::future::Future;
use std::process::ExitCode;

/// Parses `P` from the command line and runs `program` with it.
pub fn main<P, F, Fut>(name: &str, program: F) -> ExitCode
where
    P: clap::Parser,
    F: FnOnce(P) -> Fut,
    Fut: Future<Output = ExitCode>,
{
    let args = match P::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_logging();
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(program(args)),
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            ExitCode::from(2)
        }
    }
}

/// Logs to stderr with tracing-subscriber's env filter (`RUST_LOG`, e.g.
/// `RUST_LOG=harness_core=info`); warnings and errors by default.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
