//! Runs that join a caller's trace (feature `otlp`).

/// A span whose parent is the caller's trace, from a W3C `traceparent`
/// (`00-<trace id>-<span id>-<flags>`); a malformed one starts a new
/// trace.
pub(crate) fn span_from_traceparent(traceparent: &str) -> tracing::Span {
    use opentelemetry::propagation::TextMapPropagator as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let carrier =
        std::collections::HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    let span = tracing::info_span!("harness_run", traceparent = traceparent);
    let _ = span.set_parent(cx);
    span
}
