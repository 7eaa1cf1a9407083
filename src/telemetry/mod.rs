//! OpenTelemetry traces: the `[telemetry]` settings, the OTLP exporter, the
//! spans of a request and of an engine call, the caller's incoming context,
//! and the trace ids of JSON log lines.
//!
//! Off by default. Without `telemetry.endpoint` nothing here is built: no
//! exporter, no OpenTelemetry layer in the subscriber, and the spans below
//! (all of target [`TARGET`], which the log layers never take) are disabled at
//! their call sites, so a request pays one cached interest check per span.
//!
//! With it, spans are `tracing` spans exported by `tracing-opentelemetry`
//! through the SDK's batch processor on the tokio runtime: a request never
//! waits on an export, and spans past the processor's bounded queue are
//! dropped.
//!
//! What a span may hold: method and tool names (only of configured tools),
//! the JSON-RPC id, the protocol version, error codes, engine and operation
//! names. Never an argument value, a token, a handle, a task id or a session
//! id (sessions of the legacy eras are sealed, so their id is a credential).

pub mod config;
mod context;
mod logs;
mod sampler;
mod settings;

use std::time::Duration;

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SdkTracerProvider;
use taskgate_engine::{EngineError, TraceContext};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use context::{continue_remote, remote_parent, RemoteParent};
pub use logs::WithTraceIds;
pub use sampler::CallerSampler;
pub use settings::{check, settings, Problem, Settings};

/// The `tracing` target of every span taskgate exports. The log layers leave
/// it out (a request's log lines keep the fields they had); the
/// OpenTelemetry layer takes it.
pub const TARGET: &str = "taskgate::trace";

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter refused its settings.
    #[error("telemetry: the OTLP exporter could not be built")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// A TLS file did not hold what it should (`ca_file`, `cert_file`,
    /// `key_file`).
    #[error("telemetry: {what}")]
    Tls {
        /// Which file, and what was wrong.
        what: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A header name or value is not valid on the wire (names only are said).
    #[error("telemetry: header {name:?} is not a valid header")]
    Header {
        /// The header's name.
        name: String,
    },
}

/// The running exporter. Dropping it does not flush; call
/// [`Telemetry::shutdown`] when serving ends.
pub struct Telemetry {
    provider: SdkTracerProvider,
    timeout: Duration,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Builds the exporter, the sampler and the tracer provider. Must be called
    /// inside a tokio runtime (the exporter's client and the batch processor
    /// live on it). No connection is made here: the gRPC channel connects on
    /// the first export.
    ///
    /// # Errors
    ///
    /// [`TelemetryError`] when the exporter, a TLS file or a header is refused.
    pub fn start(settings: Settings) -> Result<Self, TelemetryError> {
        let timeout = settings.timeout();
        let exporter = settings::exporter(&settings)?;
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(settings.sampler())
            .with_resource(settings.resource(|name| std::env::var(name).ok()))
            .build();
        Ok(Self { provider, timeout })
    }

    /// The layer that turns the spans of [`TARGET`] (and the spans of the
    /// engines' SDKs, at `info` and above) into OpenTelemetry spans. Events
    /// (log lines) are not exported.
    #[must_use]
    pub fn layer(
        &self,
    ) -> Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync> {
        use tracing_subscriber::Layer as _;
        let tracer = self.provider.tracer("taskgate");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.is_span() && *m.level() <= tracing::Level::INFO && exported_target(m.target())
            }))
            .boxed()
    }

    /// Exports what is queued, within the export timeout, and stops. Call it
    /// from outside the runtime's worker threads (the processor runs on them).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(self.timeout * 2) {
            tracing::warn!(error = %e, "telemetry: spans not exported at shutdown");
        }
    }
}

/// The spans exported: taskgate's own ([`TARGET`]), and other crates' (the
/// engines' SDKs) except the transport stack's own, which would otherwise
/// trace the exporter's calls.
fn exported_target(target: &str) -> bool {
    if target.starts_with(TARGET) {
        return true;
    }
    const QUIET: [&str; 10] = [
        "taskgate",
        "opentelemetry",
        "tonic",
        "h2",
        "hyper",
        "tower",
        "reqwest",
        "rustls",
        "tokio",
        "mio",
    ];
    !QUIET.iter().any(|q| {
        target
            .strip_prefix(q)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::") || rest.starts_with('_'))
    })
}

/// How the request arrived, for `network.transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP.
    Http,
    /// stdio.
    Stdio,
}

/// The SERVER span of one MCP request, named `{mcp.method.name}` (the tool's
/// name is added by [`record_tool`]). `method` must be a bounded label (the
/// metrics' method label: an unknown method is `other`); `id` is the
/// request's JSON-RPC id, kept when it is a number or a string of at most 128
/// bytes. Disabled (and free) when tracing is off.
#[must_use]
pub fn request_span(method: &'static str, id: &serde_json::Value, transport: Transport) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "mcp request",
        otel.name = method,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = method,
        mcp.protocol.version = tracing::field::Empty,
        jsonrpc.request.id = tracing::field::Empty,
        gen_ai.tool.name = tracing::field::Empty,
        gen_ai.operation.name = tracing::field::Empty,
        error.type = tracing::field::Empty,
        rpc.response.status_code = tracing::field::Empty,
        network.transport = match transport {
            Transport::Http => "tcp",
            Transport::Stdio => "pipe",
        },
        network.protocol.name = tracing::field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if transport == Transport::Http {
        span.record("network.protocol.name", "http");
    }
    match id {
        serde_json::Value::Number(n) => {
            span.record("jsonrpc.request.id", tracing::field::display(n));
        }
        serde_json::Value::String(s) if s.len() <= 128 => {
            span.record("jsonrpc.request.id", s.as_str());
        }
        _ => {}
    }
    span
}

/// Names the tool a `tools/call` is for: the span is renamed `tools/call
/// {tool}`. Only a configured tool's name may be passed (a caller's unknown
/// name is not recorded).
pub fn record_tool(span: &Span, method: &str, tool: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.tool.name", tool);
    span.record("gen_ai.operation.name", "execute_tool");
    span.record("otel.name", format!("{method} {tool}"));
}

/// Records the protocol version the request was served in.
pub fn record_version(span: &Span, version: &'static str) {
    span.record("mcp.protocol.version", version);
}

/// Records how the request ended: a JSON-RPC error code, or `tool_error` for a
/// tool result with `isError`, both as `error.type` and an error status.
pub fn record_error(span: &Span, code: Option<i64>, tool_error: bool) {
    if span.is_disabled() {
        return;
    }
    if let Some(code) = code {
        span.record("error.type", tracing::field::display(code));
        span.record("rpc.response.status_code", tracing::field::display(code));
        span.record("otel.status_code", "error");
    } else if tool_error {
        span.record("error.type", "tool_error");
        span.record("otel.status_code", "error");
    }
}

/// The CLIENT span of one engine call: `engine` and `tool` are configured
/// names, `operation` one of the engine contract's (`start`, `read`, `cancel`,
/// `answer`, `locate`, `wait_for_change`, `check`, `logs`). Its outcome is
/// recorded by [`record_outcome`].
#[must_use]
pub fn engine_span(engine: &str, tool: &str, operation: &'static str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "engine call",
        otel.name = format!("{operation} {engine}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        taskgate.engine = engine,
        taskgate.engine.operation = operation,
        taskgate.engine.outcome = tracing::field::Empty,
        gen_ai.tool.name = tool,
        error.type = tracing::field::Empty,
    )
}

/// Records an engine call's outcome: `ok`, or the error's kind (the label of
/// the engine-error series of `/metrics`).
pub fn record_outcome(span: &Span, error: Option<&EngineError>) {
    if span.is_disabled() {
        return;
    }
    match error {
        None => {
            span.record("taskgate.engine.outcome", "ok");
        }
        Some(e) => {
            span.record("taskgate.engine.outcome", e.kind());
            span.record("error.type", e.kind());
            span.record("otel.status_code", "error");
        }
    }
}

/// The W3C trace context of `span`, for an engine to carry into the run it
/// starts. `None` when tracing is off.
#[must_use]
pub fn trace_context(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    if !sc.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    );
    let state = sc.trace_state().header();
    TraceContext::new(&traceparent, Some(state.as_str()))
        .or_else(|_| TraceContext::new(&traceparent, None))
        .ok()
}

/// A resource attribute: `KeyValue` of two strings.
fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue::new(key.to_owned(), value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_stack_is_not_exported_but_engine_sdks_are() {
        for quiet in [
            "taskgate::server",
            "taskgate",
            "tonic::transport",
            "h2",
            "hyper_util::client",
            "opentelemetry_sdk",
            "reqwest::connect",
        ] {
            assert!(!exported_target(quiet), "{quiet}");
        }
        for kept in [
            "taskgate::trace",
            "aws_smithy_runtime::client",
            "kube_client::client",
            "octocrab",
            "hyperion",
        ] {
            assert!(exported_target(kept), "{kept}");
        }
    }
}
