//! OpenTelemetry traces over OTLP/HTTP (protobuf), exported only when an endpoint is
//! configured with the standard variables: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL,
//! e.g. `http://otel-collector.monitoring:4318/v1/traces`) or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (the base URL; `/v1/traces` is appended). `OTEL_SERVICE_NAME` defaults to
//! `valkey-operator`; `OTEL_RESOURCE_ATTRIBUTES` adds attributes. Spans: one per reconcile
//! (`reconcile`, with the controller and the object) and one per webhook request.
//!
//! The exporter is the OTLP crate's blocking HTTP client on the batch processor's own thread:
//! nothing of it runs on the controllers' runtime, and a collector that is down only costs
//! dropped batches (logged by the SDK), never a stalled reconcile.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The environment variables that turn export on.
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether an OTLP endpoint is configured in this environment.
pub fn configured(env: impl Fn(&str) -> Option<String>) -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| env(v).is_some_and(|value| !value.trim().is_empty()))
}

/// The service name spans are reported under.
pub fn service_name(env: impl Fn(&str) -> Option<String>) -> String {
    env("OTEL_SERVICE_NAME")
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "valkey-operator".to_string())
}

/// The tracer provider, when an endpoint is configured. Keep it for the life of the process
/// and call [`SdkTracerProvider::shutdown`] at exit to flush the last batch.
pub fn provider_from_env() -> anyhow::Result<Option<SdkTracerProvider>> {
    let env = |name: &str| std::env::var(name).ok();
    if !configured(env) {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| anyhow::anyhow!("OTLP trace exporter: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(service_name(env))
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    Ok(Some(provider))
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(
    provider: &SdkTracerProvider,
) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("valkey-operator"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn export_is_on_only_with_an_endpoint() {
        assert!(!configured(env(&[])));
        assert!(!configured(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(configured(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector:4318"
        )])));
        assert!(configured(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://collector:4318/v1/traces"
        )])));
    }

    #[test]
    fn the_service_name_defaults_to_the_operator() {
        assert_eq!(service_name(env(&[])), "valkey-operator");
        assert_eq!(
            service_name(env(&[("OTEL_SERVICE_NAME", "vo-prod")])),
            "vo-prod"
        );
    }
}
