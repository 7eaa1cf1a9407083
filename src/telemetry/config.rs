//! `[telemetry]`: the configuration of traces (read as part of the config
//! file, `crate::core::config::FileConfig::telemetry`; kept here so that the
//! telemetry module imports nothing from the core above it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// `[telemetry]`: OpenTelemetry traces, exported over OTLP. Off by default:
/// without `endpoint` no exporter is built and no span is recorded.
///
/// With it, every MCP request is one SERVER span (named after the MCP method,
/// with the attributes of OpenTelemetry's MCP semantic conventions) and every
/// engine call one child span; a caller's W3C trace context
/// (`params._meta.traceparent`/`tracestate`, else the HTTP headers of the same
/// names) is continued; log lines in JSON carry `trace_id` and `span_id`. No span
/// holds an argument value, a token, a handle or a full task id.
///
/// The SDK's standard variables apply only where these keys are silent:
/// `OTEL_EXPORTER_OTLP_{TRACES_,}ENDPOINT`, `…PROTOCOL` and `…TIMEOUT` never
/// override them; `OTEL_EXPORTER_OTLP_{TRACES_,}HEADERS` are sent besides
/// the configured headers; `OTEL_BSP_*` tune the batch processor (queue size,
/// export delay).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP endpoint, an `http://` or `https://` URL: for `grpc`, the
    /// collector's address (`http://127.0.0.1:4317`); for `http`, either the full
    /// traces URL or a base URL without a path, to which `/v1/traces` is added
    /// (`http://127.0.0.1:4318`). Absent (the default): tracing is off.
    pub endpoint: Option<String>,
    /// `grpc` (the default: OTLP over gRPC) or `http` (OTLP/HTTP with protobuf
    /// bodies).
    pub protocol: TelemetryProtocol,
    /// The share of new traces recorded, `0.0..=1.0` (default `1.0`). A request
    /// without a caller's context, or whose caller's flag `caller_sampling`
    /// ignores, is recorded with this probability; the spans beneath a recorded
    /// request are always recorded with it.
    pub sampling_ratio: f64,
    /// What a caller's `sampled` flag (in its `traceparent`) decides. `ratio` (the
    /// default): nothing — the caller's trace is continued, but whether it is
    /// recorded is a fresh draw at `sampling_ratio` (not a function of the trace
    /// id, which the caller chose), so no caller can make every request recorded.
    /// `follow`: the caller's flag decides (a parent-based sampler), as a trusted
    /// client expects; any caller can then have all its requests recorded (the
    /// exporter's queue stays bounded: spans past it are dropped, not kept).
    pub caller_sampling: CallerSampling,
    /// An environment variable holding headers sent with every export (an API
    /// key): `name=value` pairs separated by commas. Never logged.
    pub headers_env: Option<String>,
    /// A file holding headers sent with every export, `name=value` pairs
    /// separated by commas or newlines (`#` starts a comment line). Read once at
    /// start; never logged. With `headers_env` too, both are sent (the
    /// variable's win on the same name).
    pub headers_file: Option<PathBuf>,
    /// A PEM file of CA certificates the endpoint's certificate is checked
    /// against (`https://` endpoints; default: the system's roots).
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate for mutual TLS (with `key_file`).
    pub cert_file: Option<PathBuf>,
    /// The PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The deadline of one export (a batch of spans), e.g. `"5s"` (the default).
    /// Spans are exported in the background, never inside a client's request.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Extra resource attributes (`deployment.environment.name = "prod"`).
    /// `service.name` (`taskgate`), `service.version` and, when their variables
    /// are set, `k8s.pod.name` (`POD_NAME`, else `K8S_POD_NAME`) and
    /// `k8s.namespace.name` (`POD_NAMESPACE`, else `K8S_NAMESPACE_NAME`) are
    /// set by the server; a key here replaces one of those.
    pub resource: BTreeMap<String, String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: TelemetryProtocol::default(),
            sampling_ratio: 1.0,
            caller_sampling: CallerSampling::default(),
            headers_env: None,
            headers_file: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            timeout: Duration::from_secs(5),
            resource: BTreeMap::new(),
        }
    }
}

/// `telemetry.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TelemetryProtocol {
    /// OTLP over gRPC.
    #[default]
    Grpc,
    /// OTLP/HTTP, protobuf bodies.
    Http,
}

/// `telemetry.caller_sampling`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallerSampling {
    /// The caller's flag is ignored; `sampling_ratio` decides.
    #[default]
    Ratio,
    /// The caller's flag decides.
    Follow,
}
