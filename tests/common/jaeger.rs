//! The trace backend of the telemetry tests: a Jaeger that `scripts/jaeger/up.sh`
//! started (`TASKGATE_JAEGER_URL`, `TASKGATE_JAEGER_OTLP_GRPC`,
//! `TASKGATE_JAEGER_OTLP_HTTP`), read through its query API.

use std::time::Duration;

use serde_json::Value;

/// A running Jaeger.
#[derive(Debug, Clone)]
pub struct Jaeger {
    /// The query API (`http://127.0.0.1:16696`).
    pub url: String,
    /// The OTLP/gRPC endpoint.
    pub otlp_grpc: String,
    /// The OTLP/HTTP endpoint (base URL).
    pub otlp_http: String,
    http: reqwest::Client,
}

/// One span of a trace, as the query API returns it.
#[derive(Debug, Clone)]
pub struct SpanView {
    /// Its id (16 hex digits).
    pub span_id: String,
    /// Its name.
    pub name: String,
    /// The span id of its parent (`CHILD_OF`), if any.
    pub parent: Option<String>,
    /// Its links (`FOLLOWS_FROM`): span ids.
    pub links: Vec<String>,
    /// Its attributes, by key, as text.
    pub tags: Vec<(String, String)>,
    /// The whole span, as returned.
    pub raw: Value,
}

impl SpanView {
    /// The attribute `key`, as text.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl Jaeger {
    /// The Jaeger of the environment. Without one: `None` after printing
    /// "skipping: …", or a failure under `TASKGATE_REQUIRE_E2E=1`.
    pub fn from_env(test: &str) -> Option<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        match (
            var("TASKGATE_JAEGER_URL"),
            var("TASKGATE_JAEGER_OTLP_GRPC"),
            var("TASKGATE_JAEGER_OTLP_HTTP"),
        ) {
            (Some(url), Some(otlp_grpc), Some(otlp_http)) => Some(Self {
                url: url.trim_end_matches('/').to_owned(),
                otlp_grpc,
                otlp_http,
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .expect("http client"),
            }),
            _ => {
                assert!(
                    std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
                    "{test}: Jaeger is required (TASKGATE_REQUIRE_E2E=1): run \
                     `eval \"$(scripts/jaeger/up.sh)\"` (scripts/test.sh does)"
                );
                eprintln!(
                    "skipping {test}: no Jaeger (TASKGATE_JAEGER_URL unset; run `eval \"$(scripts/jaeger/up.sh)\"`)"
                );
                None
            }
        }
    }

    /// The spans of trace `trace_id` now (empty when Jaeger has none).
    pub async fn spans(&self, trace_id: &str) -> Result<Vec<SpanView>, String> {
        let url = format!("{}/api/traces/{trace_id}", self.url);
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        if !response.status().is_success() {
            return Err(format!("GET {url}: {}", response.status()));
        }
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for trace in body["data"].as_array().into_iter().flatten() {
            for span in trace["spans"].as_array().into_iter().flatten() {
                out.push(view(span, &trace["processes"]));
            }
        }
        Ok(out)
    }

    /// The spans of trace `trace_id` once `done` holds for them, waiting at most
    /// `limit` (spans arrive in batches, a moment after the request ends).
    pub async fn trace_until(
        &self,
        trace_id: &str,
        limit: Duration,
        done: impl Fn(&[SpanView]) -> bool,
    ) -> Vec<SpanView> {
        super::wait_for(
            &format!("trace {trace_id} in Jaeger"),
            limit,
            async || match self.spans(trace_id).await {
                Ok(spans) if done(&spans) => Ok(spans),
                Ok(spans) => Err(format!(
                    "{} spans: {:?}",
                    spans.len(),
                    spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>()
                )),
                Err(e) => Err(e),
            },
        )
        .await
    }
}

/// A span of the v1 query API, with its process's tags among its own (the
/// resource attributes: `service.name`, the pod).
fn view(span: &Value, processes: &Value) -> SpanView {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let references = span["references"].as_array().cloned().unwrap_or_default();
    let refs = |kind: &str| -> Vec<String> {
        references
            .iter()
            .filter(|r| r["refType"] == kind)
            .filter_map(|r| r["spanID"].as_str().map(str::to_owned))
            .collect()
    };
    let mut tags: Vec<(String, String)> = span["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (text(&t["key"]), text(&t["value"])))
        .collect();
    if let Some(process) = span["processID"].as_str().map(|id| &processes[id]) {
        tags.push(("service.name".into(), text(&process["serviceName"])));
        for t in process["tags"].as_array().into_iter().flatten() {
            tags.push((text(&t["key"]), text(&t["value"])));
        }
    }
    SpanView {
        span_id: text(&span["spanID"]),
        name: text(&span["operationName"]),
        parent: refs("CHILD_OF").into_iter().next(),
        links: refs("FOLLOWS_FROM"),
        tags,
        raw: span.clone(),
    }
}
