//! The exit-status convention shared by the project's command-line programs
//! (`harness`, `conformance`): parse arguments with clap (usage errors exit
//! with 2, `--help` and `--version` with 0), log to stderr (never stdout)
//! filtered by `RUST_LOG` (default: warnings), then run the program on a
//! small tokio runtime, which the program outlives by half a second at most.

use std::future::Future;
use std::process::ExitCode;

/// How long a finished program waits for work still running on its runtime.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

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
    let _otlp = init_logging();
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => {
            let code = rt.block_on(program(args));
            // A tool call still blocked in the file system (the run ended at
            // its deadline without it) must not keep the program alive.
            rt.shutdown_timeout(SHUTDOWN_WAIT);
            code
        }
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            ExitCode::from(2)
        }
    }
}

/// What keeps exported spans flowing until the program ends (flushes on drop).
#[cfg(feature = "otlp")]
pub type LoggingGuard = Option<crate::telemetry::OtlpGuard>;
/// What keeps exported spans flowing until the program ends (flushes on drop).
#[cfg(not(feature = "otlp"))]
pub type LoggingGuard = Option<()>;

/// Logs to stderr with tracing-subscriber's env filter (`RUST_LOG`, e.g.
/// `RUST_LOG=harness_core=info`); warnings and errors by default. With the
/// `otlp` feature and `OTEL_EXPORTER_OTLP_ENDPOINT` (or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, every span is also shipped
/// to that collector; keep the guard until the program ends.
pub fn init_logging() -> LoggingGuard {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(filter);
    #[cfg(feature = "otlp")]
    if crate::telemetry::otlp_configured() {
        match crate::telemetry::otlp_layer() {
            Ok((layer, guard)) => {
                // Spans of the harness go to the collector whatever RUST_LOG says.
                let layer = layer.with_filter(
                    tracing_subscriber::filter::Targets::new()
                        .with_target("harness", tracing::Level::INFO)
                        .with_target("harness_core", tracing::Level::INFO),
                );
                let _ = tracing_subscriber::registry()
                    .with(fmt)
                    .with(layer)
                    .try_init();
                return Some(guard);
            }
            Err(e) => eprintln!("harness: OTLP export is off: {e}"),
        }
    }
    let _ = tracing_subscriber::registry().with(fmt).try_init();
    None
}
