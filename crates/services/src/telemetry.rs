//! Exporting what the harness measures. Core records metrics through the
//! `metrics` facade (names and labels: `harness::core::telemetry`) and
//! spans through `tracing`; this module serves the metrics to Prometheus
//! (feature `prometheus`) and ships the spans over OTLP (feature `otlp`).

#[cfg(feature = "prometheus")]
use std::net::SocketAddr;

/// Why the exporter could not start.
#[cfg(feature = "prometheus")]
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {message}")]
#[non_exhaustive]
pub struct ExporterError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// What failed.
    pub message: String,
}

/// Installs the process-wide Prometheus recorder and serves `/metrics`
/// on `addr` (the `--metrics ADDR` of long-running commands). Call it
/// once, inside a tokio runtime.
#[cfg(feature = "prometheus")]
pub fn serve_prometheus(addr: SocketAddr) -> Result<(), ExporterError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| ExporterError {
            addr,
            message: e.to_string(),
        })
}

/// Whether the standard OpenTelemetry variables name a collector
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`).
#[cfg(feature = "otlp")]
pub fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Flushes the spans still buffered and stops the exporter when dropped.
#[cfg(feature = "otlp")]
#[derive(Debug)]
pub struct OtlpGuard(opentelemetry_sdk::trace::SdkTracerProvider);

#[cfg(feature = "otlp")]
impl Drop for OtlpGuard {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

/// A tracing layer that ships every span over OTLP (HTTP, protobuf) to
/// the collector the standard `OTEL_EXPORTER_OTLP_*` variables name, and
/// the guard that flushes it. Install the layer in the subscriber; keep
/// the guard until the program ends.
#[cfg(feature = "otlp")]
pub fn otlp_layer<S>() -> Result<(impl tracing_subscriber::Layer<S>, OtlpGuard), String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use opentelemetry::trace::TracerProvider as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("harness")
        .build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("harness");
    Ok((
        tracing_opentelemetry::layer().with_tracer(tracer),
        OtlpGuard(provider),
    ))
}
