//! Exporting what the harness measures. Core records metrics through the
//! `metrics` facade (names and labels: [`harness_core::telemetry`]) and
//! spans through `tracing`; this module serves the metrics to Prometheus.

use std::net::SocketAddr;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {message}")]
pub struct ExporterError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// What failed.
    pub message: String,
}

/// Installs the process-wide Prometheus recorder and serves `/metrics`
/// on `addr` (the `--metrics ADDR` of long-running commands). Call it
/// once, inside a tokio runtime.
pub fn serve_prometheus(addr: SocketAddr) -> Result<(), ExporterError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| ExporterError {
            addr,
            message: e.to_string(),
        })
}
