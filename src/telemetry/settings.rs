//! `[telemetry]` checked into [`Settings`] (pure but for reading the files it
//! names and the headers variable), and the OTLP exporter built from them.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;

use super::config::{CallerSampling, TelemetryConfig, TelemetryProtocol};
use super::{attribute, CallerSampler, TelemetryError};

/// One thing wrong in `[telemetry]`: the key under `telemetry.` and why
/// (never a header's value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The dotted key, `telemetry.` included.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// The most headers an export carries, and the longest file of them.
const MAX_HEADERS: usize = 64;
const MAX_HEADERS_FILE_BYTES: u64 = 64 * 1024;
/// The longest TLS file read.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// Checked `[telemetry]`, ready to build the exporter.
pub struct Settings {
    endpoint: String,
    protocol: TelemetryProtocol,
    ratio: f64,
    caller_sampling: CallerSampling,
    headers: Vec<(String, String)>,
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    timeout: Duration,
    resource: Vec<(String, String)>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials: only their names are shown.
        f.debug_struct("Settings")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("ratio", &self.ratio)
            .field("caller_sampling", &self.caller_sampling)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What is wrong with `cfg` (the config check of `serve` and
/// `check-config`): empty when nothing is.
#[must_use]
pub fn check(cfg: &TelemetryConfig) -> Vec<Problem> {
    settings(cfg).err().unwrap_or_default()
}

/// Checks `cfg`: `Ok(None)` when tracing is off (no endpoint). Reads the
/// headers file, the headers variable and the TLS files.
///
/// # Errors
///
/// Every problem found, each naming its key under `telemetry.` (never a
/// header's value).
pub fn settings(cfg: &TelemetryConfig) -> Result<Option<Settings>, Vec<Problem>> {
    settings_with(cfg, |name| std::env::var(name).ok())
}

fn settings_with(
    cfg: &TelemetryConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, message: String| {
        problems.push(Problem {
            key: format!("telemetry.{key}"),
            message,
        });
    };
    if !(0.0..=1.0).contains(&cfg.sampling_ratio) {
        problem(
            "sampling_ratio",
            format!("{} is not between 0.0 and 1.0", cfg.sampling_ratio),
        );
    }
    if cfg.timeout.is_zero() {
        problem("timeout", "must be longer than 0s".to_owned());
    }
    let endpoint = match cfg.endpoint.as_deref() {
        None => None,
        Some(url) => match endpoint(url, cfg.protocol) {
            Ok(url) => Some(url),
            Err(m) => {
                problem("endpoint", m);
                None
            }
        },
    };
    let mut headers = Vec::new();
    if let Some(path) = &cfg.headers_file {
        match read_bounded(path, MAX_HEADERS_FILE_BYTES) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => match parse_headers(&text) {
                    Ok(h) => headers.extend(h),
                    Err(m) => problem("headers_file", format!("{}: {m}", path.display())),
                },
                Err(_) => problem(
                    "headers_file",
                    format!("{}: not UTF-8 text", path.display()),
                ),
            },
            Err(m) => problem("headers_file", m),
        }
    }
    if let Some(var) = &cfg.headers_env {
        match env(var) {
            None => problem(
                "headers_env",
                format!("the environment variable {var} is not set"),
            ),
            Some(text) => match parse_headers(&text) {
                Ok(h) => {
                    // The variable's win over the file's on the same name.
                    headers.retain(|(name, _)| !h.iter().any(|(n, _)| n == name));
                    headers.extend(h);
                }
                Err(m) => problem("headers_env", format!("{var}: {m}")),
            },
        }
    }
    if headers.len() > MAX_HEADERS {
        problem("headers_file", format!("more than {MAX_HEADERS} headers"));
    }
    let pem =
        |key: &str, path: &Option<std::path::PathBuf>, problem: &mut dyn FnMut(&str, String)| {
            path.as_ref()
                .and_then(|p| match read_bounded(p, MAX_PEM_BYTES) {
                    Ok(bytes) if looks_like_pem(&bytes) => Some(bytes),
                    Ok(_) => {
                        problem(key, format!("{}: not a PEM file", p.display()));
                        None
                    }
                    Err(m) => {
                        problem(key, m);
                        None
                    }
                })
        };
    let ca = pem("ca_file", &cfg.ca_file, &mut problem);
    let cert = pem("cert_file", &cfg.cert_file, &mut problem);
    let key = pem("key_file", &cfg.key_file, &mut problem);
    let identity = match (cert, key, &cfg.cert_file, &cfg.key_file) {
        (Some(c), Some(k), _, _) => Some((c, k)),
        (_, _, Some(_), None) => {
            problem("key_file", "must be set with cert_file".to_owned());
            None
        }
        (_, _, None, Some(_)) => {
            problem("cert_file", "must be set with key_file".to_owned());
            None
        }
        _ => None,
    };
    if (ca.is_some() || identity.is_some())
        && endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
    {
        problem(
            "endpoint",
            "ca_file, cert_file and key_file need an https:// endpoint".to_owned(),
        );
    }
    for key in cfg.resource.keys() {
        if key.trim().is_empty() {
            problem("resource", "an attribute name may not be empty".to_owned());
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(endpoint.map(|endpoint| Settings {
        endpoint,
        protocol: cfg.protocol,
        ratio: cfg.sampling_ratio,
        caller_sampling: cfg.caller_sampling,
        headers,
        ca,
        identity,
        timeout: cfg.timeout,
        resource: cfg
            .resource
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }))
}

/// Checks an endpoint URL; for OTLP/HTTP a URL without a path gets
/// `/v1/traces`.
fn endpoint(url: &str, protocol: TelemetryProtocol) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?}: the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(
            "credentials in the URL are refused (they would be logged): use headers_env or headers_file"
                .to_owned(),
        );
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!("{url:?}: no query or fragment"));
    }
    Ok(match protocol {
        TelemetryProtocol::Http if matches!(parsed.path(), "" | "/") => {
            format!("{}/v1/traces", url.trim_end_matches('/'))
        }
        _ => url.to_owned(),
    })
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(format!("{} is longer than {max} bytes", path.display()));
    }
    Ok(bytes)
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// `name=value` pairs separated by commas or newlines; `#` starts a comment
/// line. Names are HTTP header names (lowercased); values printable ASCII.
/// An error names the pair's position, never its value.
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let pairs = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty());
    for (i, pair) in pairs.enumerate() {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!("header {} is not name=value", i + 1));
        };
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!("header {} has an invalid name", i + 1));
        }
        if value.is_empty() || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(format!("header {name:?} has an empty or invalid value"));
        }
        out.push((name, value.to_owned()));
    }
    Ok(out)
}

impl Settings {
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(super) fn sampler(&self) -> CallerSampler {
        CallerSampler::new(self.ratio, self.caller_sampling == CallerSampling::Follow)
    }

    /// The resource: `service.name`, `service.version`, the pod's name and
    /// namespace when `env` has them, then the configured attributes.
    pub(super) fn resource(&self, env: impl Fn(&str) -> Option<String>) -> Resource {
        let mut attributes: Vec<KeyValue> = vec![
            attribute("service.name", "taskgate"),
            attribute("service.version", env!("CARGO_PKG_VERSION")),
        ];
        let first = |names: [&str; 2]| {
            names
                .into_iter()
                .find_map(|n| env(n).filter(|v| !v.trim().is_empty()))
        };
        if let Some(pod) = first(["POD_NAME", "K8S_POD_NAME"]) {
            attributes.push(attribute("k8s.pod.name", &pod));
        }
        if let Some(ns) = first(["POD_NAMESPACE", "K8S_NAMESPACE_NAME"]) {
            attributes.push(attribute("k8s.namespace.name", &ns));
        }
        for (k, v) in &self.resource {
            attributes.retain(|a| a.key.as_str() != k);
            attributes.push(attribute(k, v));
        }
        Resource::builder_empty()
            .with_attributes(attributes)
            .build()
    }
}

/// The OTLP span exporter of `settings`.
pub(super) fn exporter(
    settings: &Settings,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let tls_error = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| TelemetryError::Tls {
        what: what.to_owned(),
        source: e,
    };
    match settings.protocol {
        TelemetryProtocol::Grpc => {
            use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
            use tonic::transport::{Certificate, ClientTlsConfig, Identity};
            let mut metadata = MetadataMap::new();
            for (name, value) in &settings.headers {
                let header = || TelemetryError::Header { name: name.clone() };
                let key = MetadataKey::from_bytes(name.as_bytes()).map_err(|_| header())?;
                let value = MetadataValue::try_from(value.as_str()).map_err(|_| header())?;
                metadata.insert(key, value);
            }
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(settings.timeout)
                .with_metadata(metadata);
            if settings.endpoint.starts_with("https://") {
                let mut tls = ClientTlsConfig::new();
                tls = match &settings.ca {
                    Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
                    None => tls.with_native_roots(),
                };
                if let Some((cert, key)) = &settings.identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                builder = builder.with_tls_config(tls);
            }
            builder.build().map_err(TelemetryError::Exporter)
        }
        TelemetryProtocol::Http => {
            let mut client = reqwest::Client::builder().timeout(settings.timeout);
            if let Some(ca) = &settings.ca {
                let certs = reqwest::Certificate::from_pem_bundle(ca)
                    .map_err(|e| tls_error("ca_file holds no usable certificate", e.into()))?;
                for cert in certs {
                    client = client.add_root_certificate(cert);
                }
            }
            if let Some((cert, key)) = &settings.identity {
                let pem = [cert.as_slice(), b"\n", key.as_slice()].concat();
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    tls_error("cert_file and key_file are not a usable identity", e.into())
                })?;
                client = client.identity(identity);
            }
            let client = client
                .build()
                .map_err(|e| tls_error("the HTTP client could not be built", e.into()))?;
            let headers: HashMap<String, String> = settings.headers.iter().cloned().collect();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(settings.timeout)
                .with_headers(headers)
                .with_http_client(client)
                .build()
                .map_err(TelemetryError::Exporter)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Write as _;

    use super::*;

    fn on(endpoint: &str) -> TelemetryConfig {
        TelemetryConfig {
            endpoint: Some(endpoint.to_owned()),
            ..TelemetryConfig::default()
        }
    }

    fn keys(found: Vec<Problem>) -> Vec<String> {
        found.into_iter().map(|p| p.key).collect()
    }

    #[test]
    fn off_without_an_endpoint() {
        assert!(settings_with(&TelemetryConfig::default(), |_| None)
            .unwrap()
            .is_none());
    }

    #[test]
    fn an_http_base_url_gets_the_traces_path() {
        let mut cfg = on("http://127.0.0.1:4318");
        cfg.protocol = TelemetryProtocol::Http;
        let s = settings_with(&cfg, |_| None).unwrap().unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:4318/v1/traces");
        cfg.endpoint = Some("https://c.example/otlp/v1/traces".into());
        let s = settings_with(&cfg, |_| None).unwrap().unwrap();
        assert_eq!(s.endpoint, "https://c.example/otlp/v1/traces");
        let grpc = settings_with(&on("http://127.0.0.1:4317"), |_| None)
            .unwrap()
            .unwrap();
        assert_eq!(grpc.endpoint, "http://127.0.0.1:4317");
    }

    #[test]
    fn refuses_bad_values_naming_each_key() {
        let mut cfg = on("ftp://collector:4317");
        cfg.sampling_ratio = 1.5;
        cfg.timeout = Duration::ZERO;
        cfg.headers_file = Some("/nonexistent/headers".into());
        cfg.headers_env = Some("TG_TEST_NO_SUCH_VAR".into());
        cfg.cert_file = Some("/nonexistent/cert.pem".into());
        let found = keys(settings_with(&cfg, |_| None).unwrap_err());
        for key in [
            "telemetry.sampling_ratio",
            "telemetry.timeout",
            "telemetry.endpoint",
            "telemetry.headers_file",
            "telemetry.headers_env",
            "telemetry.cert_file",
            "telemetry.key_file",
        ] {
            assert!(found.contains(&key.to_owned()), "{key} in {found:?}");
        }
        for bad in [
            "not a url",
            "http://",
            "http://user:secret@collector:4317",
            "http://collector:4317/?q=1",
        ] {
            let found = settings_with(&on(bad), |_| None).unwrap_err();
            assert_eq!(keys(found.clone()), ["telemetry.endpoint"], "{bad}");
            assert!(!found[0].message.contains("secret"));
        }
        let negative = TelemetryConfig {
            sampling_ratio: -0.1,
            ..TelemetryConfig::default()
        };
        assert_eq!(
            keys(settings_with(&negative, |_| None).unwrap_err()),
            ["telemetry.sampling_ratio"]
        );
    }

    #[test]
    fn headers_come_from_a_file_and_a_variable_and_errors_never_show_values() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            file,
            "# the collector's key\nx-api-key=from-file\nx-tenant = a"
        )
        .unwrap();
        let mut cfg = on("http://127.0.0.1:4317");
        cfg.headers_file = Some(file.path().to_owned());
        cfg.headers_env = Some("H".into());
        let s = settings_with(&cfg, |_| Some("X-Api-Key=from-env,x-other=b".into()))
            .unwrap()
            .unwrap();
        let mut got = s.headers.clone();
        got.sort();
        assert_eq!(
            got,
            [
                ("x-api-key".to_owned(), "from-env".to_owned()),
                ("x-other".to_owned(), "b".to_owned()),
                ("x-tenant".to_owned(), "a".to_owned()),
            ]
        );
        assert!(!format!("{s:?}").contains("from-env"), "{s:?}");
        for bad in ["novalue-secret", "bad name=secret", "x=secret\u{7}"] {
            let found = settings_with(&cfg, |_| Some(bad.to_owned())).unwrap_err();
            assert_eq!(keys(found.clone()), ["telemetry.headers_env"]);
            assert!(!found[0].message.contains("secret"), "{:?}", found[0]);
        }
    }

    #[test]
    fn tls_files_must_be_pem_and_need_https() {
        let mut not_pem = tempfile::NamedTempFile::new().unwrap();
        writeln!(not_pem, "hello").unwrap();
        let mut cfg = on("https://collector:4317");
        cfg.ca_file = Some(not_pem.path().to_owned());
        assert_eq!(
            keys(settings_with(&cfg, |_| None).unwrap_err()),
            ["telemetry.ca_file"]
        );
        let mut pem = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            pem,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----"
        )
        .unwrap();
        cfg.ca_file = Some(pem.path().to_owned());
        assert!(settings_with(&cfg, |_| None).unwrap().is_some());
        cfg.endpoint = Some("http://collector:4317".into());
        assert_eq!(
            keys(settings_with(&cfg, |_| None).unwrap_err()),
            ["telemetry.endpoint"]
        );
    }

    #[test]
    fn the_resource_names_the_service_and_the_pod() {
        let s = settings_with(&on("http://127.0.0.1:4317"), |_| None)
            .unwrap()
            .unwrap();
        let env = |name: &str| match name {
            "POD_NAME" => Some("taskgate-7d9f".to_owned()),
            "K8S_NAMESPACE_NAME" => Some("pipelines".to_owned()),
            _ => None,
        };
        let r = s.resource(env);
        let get = |k: &str| {
            r.get(&opentelemetry::Key::from(k.to_owned()))
                .map(|v| v.to_string())
        };
        assert_eq!(get("service.name").as_deref(), Some("taskgate"));
        assert_eq!(
            get("service.version").as_deref(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(get("k8s.pod.name").as_deref(), Some("taskgate-7d9f"));
        assert_eq!(get("k8s.namespace.name").as_deref(), Some("pipelines"));
        let bare = s.resource(|_| None);
        assert!(bare
            .get(&opentelemetry::Key::from_static_str("k8s.pod.name"))
            .is_none());
        let mut cfg = on("http://127.0.0.1:4317");
        cfg.resource = BTreeMap::from([("service.name".into(), "gateway-eu".into())]);
        let s = settings_with(&cfg, |_| None).unwrap().unwrap();
        let r = s.resource(|_| None);
        assert_eq!(
            r.get(&opentelemetry::Key::from_static_str("service.name"))
                .map(|v| v.to_string())
                .as_deref(),
            Some("gateway-eu")
        );
    }
}
