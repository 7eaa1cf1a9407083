//! Span links from every request on a task to the span that started its run
//! (issue 34, item 3): the start span's ids are sealed into the task handle,
//! so the link holds on any replica and needs no state.
//!
//! - In process, with OpenTelemetry's in-memory exporter under the
//!   `tracing-opentelemetry` layer: `tasks/get`, `taskgate_logs` and
//!   `tasks/cancel` on a 2026-07-28 handle, `tasks/get` and `tasks/cancel` on
//!   a 2025-11-25 one, the `handles` companions on a plain client's handle,
//!   each record one link to exactly the span of the `tools/call` that
//!   started the run; a handle whose text was altered, or sealed by another
//!   keyring with a span of its choosing, is refused before any link is made.
//! - Two replicas exporting to Jaeger (`TASKGATE_JAEGER_URL`, the query base
//!   URL; OTLP/gRPC at `TASKGATE_JAEGER_OTLP_GRPC`, both exported by `scripts/jaeger/up.sh`):
//!   a start on A, a `tasks/get` on B with the same keyring, and Jaeger shows
//!   B's span linking to A's start span. Skipped without Jaeger, failed with
//!   `TASKGATE_REQUIRE_E2E=1`.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{modern_meta, tool_script, Client, Options, Server, Setup};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use taskgate::core::handle::{unix_ms, Dialect, Keyring, Purpose, TaskClaims, TraceRef};
use taskgate::core::trace_link::{RELATION_KEY, RELATION_START};
use taskgate::Gateway;
use tracing_subscriber::layer::SubscriberExt as _;

// ------------------------------------------------------------------ in process

/// The sealing secret of the in-process gateway (a test value, loopback only).
/// Its HTTP caller, without `[auth]`, is `anonymous`.
const SECRET: &str = "pMB786Hyqn13qKAg6PJpP+906egOk+Zaf0+qlrAiAeU=";
/// Another keyring's secret.
const OTHER_SECRET: &str = "oyZheMkMT/N61eSaSv3CBFq75gWxdzBudobo6l9e6u0=";

/// A gateway whose exec engine runs `sleeper.sh` (a run that waits until it
/// is cancelled) as the tools `sleeper` and `held` (`legacy = "handles"`),
/// with the built binary as the run's supervisor; its spool in `setup`'s
/// folder (whose drop ends whatever a run left).
async fn gateway(setup: &Setup) -> Arc<Gateway> {
    let text = format!(
        "[keys]\nseal = [{{ id = \"k1\", dev_secret = \"{SECRET}\" }}]\n\n\
         [engines.local]\nkind = \"exec\"\nspool_dir = {}\nsupervisor = [{}, \"supervise\"]\n\n\
         [[tools]]\nname = \"sleeper\"\nengine = \"local\"\nmode = \"async\"\n\
         input_schema = {{ type = \"object\" }}\ntarget = {{ command = [{sleeper}] }}\n\n\
         [[tools]]\nname = \"held\"\nengine = \"local\"\nmode = \"async\"\nlegacy = \"handles\"\n\
         input_schema = {{ type = \"object\" }}\ntarget = {{ command = [{sleeper}] }}\n",
        common::toml_str(&setup.spool),
        common::toml_str(&common::bin()),
        sleeper = common::toml_str(&tool_script("sleeper.sh")),
    );
    let path = setup.dir.path().join("in-process.toml");
    std::fs::write(&path, text).unwrap();
    Arc::new(taskgate::load(&path).await.expect("the config loads"))
}

/// One 2026-07-28 request through the HTTP router, in this task (so on this
/// thread, under its tracing subscriber); the JSON-RPC response.
async fn post(app: &axum::Router, method: &str, mut params: Value) -> Value {
    params["_meta"] = modern_meta(true);
    let headers: Vec<(String, String)> = Client::headers_for(method, &params)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    exchange(app, &headers, &body).await.0
}

/// One message through the HTTP router with `headers` besides the usual
/// ones: the JSON-RPC response (`null` for none) and the session id the
/// server set, if any.
async fn exchange(
    app: &axum::Router,
    headers: &[(String, String)],
    body: &Value,
) -> (Value, Option<String>) {
    use tower::ServiceExt as _;
    let mut req = axum::http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("host", "127.0.0.1:8808");
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let resp = app
        .clone()
        .oneshot(req.body(axum::body::Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if text.trim().is_empty() {
        return (Value::Null, session);
    }
    let answer = serde_json::from_str(&text)
        .or_else(|_| {
            common::sse_messages(&text)
                .into_iter()
                .find(|m| m.get("id").is_some())
                .ok_or(())
        })
        .unwrap_or_else(|()| panic!("not a JSON-RPC response: {text}"));
    (answer, session)
}

/// A legacy session over the router: `initialize` with `version` and
/// `capabilities`, then `notifications/initialized`; the headers of its
/// later requests.
async fn legacy_session(
    app: &axum::Router,
    version: &str,
    capabilities: Value,
) -> Vec<(String, String)> {
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": capabilities,
        "clientInfo": { "name": "taskgate-tests", "version": "1.0.0" } } });
    let (answer, session) = exchange(app, &[], &init).await;
    assert_eq!(answer["result"]["protocolVersion"], version, "{answer}");
    let headers = vec![
        ("mcp-session-id".to_owned(), session.expect("a session id")),
        ("mcp-protocol-version".to_owned(), version.to_owned()),
    ];
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized", "params": {} });
    exchange(app, &headers, &note).await;
    headers
}

/// A request of a legacy session: its JSON-RPC response.
async fn legacy(
    app: &axum::Router,
    headers: &[(String, String)],
    method: &str,
    params: Value,
) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 2, "method": method, "params": params });
    exchange(app, headers, &body).await.0
}

/// Asserts that the requests' spans hold exactly one link, on the request's
/// server span, to `start`, naming the relation and nothing else.
fn assert_links_to(spans: &[SpanData], start: &SpanData, what: &str) {
    let server = server_span(spans, what);
    assert_eq!(links(spans).len(), 1, "{what}: one link in {spans:#?}");
    assert_eq!(server.links.links.len(), 1, "{what}: on the server span");
    let link = &server.links.links[0];
    assert_eq!(
        link.span_context.trace_id(),
        start.span_context.trace_id(),
        "{what}"
    );
    assert_eq!(
        link.span_context.span_id(),
        start.span_context.span_id(),
        "{what}"
    );
    assert!(link.span_context.is_sampled(), "{what}");
    assert_eq!(
        link.attributes,
        vec![KeyValue::new(RELATION_KEY, RELATION_START)],
        "{what}: the relation, nothing of the caller's"
    );
}

/// The spans finished since the last call (and forgets them).
fn drain(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    let spans = exporter.get_finished_spans().unwrap();
    exporter.reset();
    spans
}

/// The one span of a request that has no parent: the server's span of it.
fn server_span(spans: &[SpanData], what: &str) -> SpanData {
    let roots: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == SpanId::INVALID)
        .collect();
    assert_eq!(
        roots.len(),
        1,
        "{what}: one root span, not {:?}",
        roots.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    roots[0].clone()
}

/// The OpenTelemetry layer as `serve` stacks it: only taskgate's trace spans
/// (target `taskgate::trace`), not the log's `request` spans.
fn traced_spans_only(
    provider: &SdkTracerProvider,
) -> impl tracing_subscriber::Layer<tracing_subscriber::Registry> {
    use tracing_subscriber::Layer as _;
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("trace-links"))
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target().starts_with(taskgate::telemetry::TARGET)
        }))
}

/// Every link recorded on any of `spans`.
fn links(spans: &[SpanData]) -> Vec<&opentelemetry::trace::Link> {
    spans.iter().flat_map(|s| s.links.links.iter()).collect()
}

#[tokio::test]
async fn every_request_on_a_task_links_to_the_span_that_started_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(traced_spans_only(&provider));
    // This thread only: the runtime of this test is single-threaded.
    let _default = tracing::subscriber::set_default(subscriber);

    let setup = Setup::config("", &[]);
    let gw = gateway(&setup).await;
    let app = taskgate::transport::http::router(gw.clone());

    let started = post(
        &app,
        "tools/call",
        json!({ "name": "sleeper", "arguments": {} }),
    )
    .await;
    let task = started["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {started}"))
        .to_owned();
    let start = server_span(&drain(&exporter), "tools/call");
    assert!(start.span_context.is_sampled());

    // The handle names exactly that span (read with the gateway's own key).
    let claims = Keyring::new(&[("k1".to_owned(), SECRET.to_owned())])
        .unwrap()
        .open_task("anonymous", &task)
        .expect("the handle opens for the caller it was sealed for");
    let sealed = claims.trace.expect("a start span in the handle");
    assert_eq!(sealed.trace_id(), start.span_context.trace_id().to_bytes());
    assert_eq!(sealed.span_id(), start.span_context.span_id().to_bytes());

    for (method, params) in [
        ("tasks/get", json!({ "taskId": task })),
        (
            "tools/call",
            json!({ "name": "taskgate_logs", "arguments": { "taskId": task } }),
        ),
        ("tasks/cancel", json!({ "taskId": task })),
    ] {
        let reply = post(&app, method, params).await;
        assert!(reply.get("result").is_some(), "{method}: {reply}");
        assert_links_to(&drain(&exporter), &start, method);
    }
}

/// The session dialects: a 2025-11-25 task and a plain client's `handles`
/// handle link the same way.
#[tokio::test]
async fn requests_of_the_session_dialects_link_to_their_start_too() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(traced_spans_only(&provider));
    let _default = tracing::subscriber::set_default(subscriber);

    let setup = Setup::config("", &[]);
    let gw = gateway(&setup).await;
    let app = taskgate::transport::http::router(gw.clone());

    // 2025-11-25 tasks (SEP-1686).
    let session = legacy_session(&app, "2025-11-25", json!({ "tasks": {} })).await;
    drain(&exporter);
    let started = legacy(
        &app,
        &session,
        "tools/call",
        json!({ "name": "sleeper", "arguments": {}, "task": { "ttl": 60000 } }),
    )
    .await;
    let task = started["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {started}"))
        .to_owned();
    let start = server_span(&drain(&exporter), "2025-11-25 tools/call");
    for method in ["tasks/get", "tasks/cancel"] {
        let reply = legacy(&app, &session, method, json!({ "taskId": task })).await;
        assert!(reply.get("result").is_some(), "{method}: {reply}");
        assert_links_to(&drain(&exporter), &start, &format!("2025-11-25 {method}"));
    }

    // A plain client's handle and its companion tools.
    let session = legacy_session(&app, "2025-06-18", json!({})).await;
    drain(&exporter);
    let started = legacy(
        &app,
        &session,
        "tools/call",
        json!({ "name": "held", "arguments": {} }),
    )
    .await;
    let handle = started["result"]["structuredContent"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("a handle: {started}"))
        .to_owned();
    let start = server_span(&drain(&exporter), "plain tools/call");
    for tool in ["taskgate_task_status", "taskgate_task_cancel"] {
        let reply = legacy(
            &app,
            &session,
            "tools/call",
            json!({ "name": tool, "arguments": { "handle": handle } }),
        )
        .await;
        assert!(reply.get("result").is_some(), "{tool}: {reply}");
        assert_links_to(&drain(&exporter), &start, tool);
    }
}

#[tokio::test]
async fn an_altered_or_foreign_handle_links_to_nothing() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(traced_spans_only(&provider));
    let _default = tracing::subscriber::set_default(subscriber);

    let setup = Setup::config("", &[]);
    let gw = gateway(&setup).await;
    let app = taskgate::transport::http::router(gw.clone());

    // The span an attacker would like polls to point at.
    let chosen = TraceRef::new([0x5a; 16], [0xa5; 8], 1).unwrap();
    let claims = TaskClaims {
        dialect: Dialect::TasksExtension,
        tool: "sleeper".to_owned(),
        native: "tg-aaaaaaaaaaaaaaaaaaaaaaaaaa".to_owned(),
        created_ms: unix_ms(SystemTime::now()),
        ttl_ms: Some(3_600_000),
        trace: Some(chosen),
    };
    // Sealed by another keyring under the same key id.
    let foreign = Keyring::new(&[("k1".to_owned(), OTHER_SECRET.to_owned())])
        .unwrap()
        .seal(Purpose::Task, "anonymous", &claims);
    // A real handle, one character of its sealed text changed at each place.
    let started = post(
        &app,
        "tools/call",
        json!({ "name": "sleeper", "arguments": {} }),
    )
    .await;
    let task = started["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {started}"))
        .to_owned();
    drain(&exporter);
    let body = task.rfind('.').unwrap() + 1;
    let mut bad = vec![foreign];
    for at in [body, body + 20, task.len() - 30, task.len() - 1] {
        let mut bytes = task.clone().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        bad.push(String::from_utf8(bytes).unwrap());
    }
    bad.push(task.replacen("tg3.k1.", "tg3.k2.", 1));
    for handle in &bad {
        let reply = post(&app, "tasks/get", json!({ "taskId": handle })).await;
        assert!(reply.get("error").is_some(), "{handle}: refused: {reply}");
        let spans = drain(&exporter);
        assert!(
            links(&spans).is_empty(),
            "{handle}: no link from a refused handle: {spans:#?}"
        );
    }
    // The real handle still links (the run is then cancelled).
    let reply = post(&app, "tasks/cancel", json!({ "taskId": task })).await;
    assert!(reply.get("result").is_some(), "{reply}");
    assert_eq!(links(&drain(&exporter)).len(), 1);
}

// ------------------------------------------------------ two replicas, Jaeger

/// A random lower-hex id of `bytes` bytes (never all zero).
fn random_hex(bytes: usize) -> String {
    let mut out = vec![0u8; bytes];
    aws_lc_rs::rand::fill(&mut out).unwrap();
    out[0] |= 1;
    hex::encode(out)
}

/// An id of Jaeger's OTLP JSON as lower hex (hex as OTLP/JSON writes it, or
/// base64 as the protobuf JSON mapping does).
fn id_hex(v: &Value) -> String {
    use base64::Engine as _;
    let s = v.as_str().unwrap_or_default();
    if matches!(s.len(), 16 | 32) && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return s.to_ascii_lowercase();
    }
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(hex::encode)
        .unwrap_or_default()
}

/// One span of a trace as Jaeger's v3 API returns it.
#[derive(Debug, Clone)]
struct JaegerSpan {
    span_id: String,
    parent: String,
    name: String,
    /// (trace id, span id, attributes as key → string value).
    links: Vec<(String, String, HashMap<String, String>)>,
}

/// The spans of trace `trace_id` in Jaeger (none while it does not know it).
async fn jaeger_trace(base: &str, trace_id: &str) -> Result<Vec<JaegerSpan>, String> {
    let url = format!("{}/api/v3/traces/{trace_id}", base.trim_end_matches('/'));
    let resp = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("GET {url}: {status} {text}"));
    }
    let body: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    let mut spans = Vec::new();
    let resources = body["result"]["resourceSpans"].as_array().cloned();
    for rs in resources.unwrap_or_default() {
        for ss in rs["scopeSpans"].as_array().cloned().unwrap_or_default() {
            for s in ss["spans"].as_array().cloned().unwrap_or_default() {
                let links = s["links"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|l| {
                        let attributes = l["attributes"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                            .iter()
                            .map(|a| {
                                (
                                    a["key"].as_str().unwrap_or_default().to_owned(),
                                    a["value"]["stringValue"]
                                        .as_str()
                                        .unwrap_or_default()
                                        .to_owned(),
                                )
                            })
                            .collect();
                        (id_hex(&l["traceId"]), id_hex(&l["spanId"]), attributes)
                    })
                    .collect();
                spans.push(JaegerSpan {
                    span_id: id_hex(&s["spanId"]),
                    parent: id_hex(&s["parentSpanId"]),
                    name: s["name"].as_str().unwrap_or_default().to_owned(),
                    links,
                });
            }
        }
    }
    Ok(spans)
}

/// `tools/call` / `tasks/*` to `server`, continuing the caller's trace from
/// `traceparent` in `_meta` (where the MCP conventions place it).
async fn traced_request(server: &Server, traceparent: &str, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = modern_meta(true);
    params["_meta"]["traceparent"] = json!(traceparent);
    let headers = Client::headers_for(method, &params);
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let reply = server.client().post_raw(&headers, body.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    reply.result().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_on_another_replica_links_to_the_start_in_jaeger() {
    let Some(jaeger) = taskgate_engine::testing::e2e_endpoint("TASKGATE_JAEGER_URL") else {
        return;
    };
    let otlp = std::env::var("TASKGATE_JAEGER_OTLP_GRPC").expect(
        "scripts/jaeger/up.sh exports TASKGATE_JAEGER_OTLP_GRPC beside TASKGATE_JAEGER_URL",
    );
    let setup = Setup::with(Options {
        extra: format!(
            "[telemetry]\nendpoint = \"{otlp}\"\nprotocol = \"grpc\"\nsampling_ratio = 1.0\n"
        ),
        ..Options::default()
    });
    let a = Server::start(&setup).await;
    let b = Server::start(&setup).await;

    let (trace_a, parent_a) = (random_hex(16), random_hex(8));
    let (trace_b, parent_b) = (random_hex(16), random_hex(8));
    let started = traced_request(
        &a,
        &format!("00-{trace_a}-{parent_a}-01"),
        "tools/call",
        json!({ "name": "sleeper", "arguments": {} }),
    )
    .await;
    let task = started["taskId"].as_str().expect("taskId").to_owned();
    let got = traced_request(
        &b,
        &format!("00-{trace_b}-{parent_b}-01"),
        "tasks/get",
        json!({ "taskId": task }),
    )
    .await;
    assert_eq!(got["status"], "working", "{got}");
    a.client().cancel(&task).await;

    // B's span (its parent the caller's span of trace B) links to a span of
    // trace A that is taskgate's: the caller's parent span of A above it.
    let limit = Duration::from_secs(60);
    let (link_trace, link_span, attributes) = common::wait_for(
        "B's span linking to A's start in Jaeger",
        limit,
        async || {
            let spans = jaeger_trace(&jaeger, &trace_b).await?;
            spans
                .iter()
                .find(|s| s.parent == parent_b && !s.links.is_empty())
                .map(|s| s.links[0].clone())
                .ok_or_else(|| format!("{spans:?}"))
        },
    )
    .await;
    assert_eq!(link_trace, trace_a);
    assert_eq!(
        attributes.get(RELATION_KEY).map(String::as_str),
        Some(RELATION_START),
        "{attributes:?}"
    );
    let spans_a = common::wait_for("A's start span in Jaeger", limit, async || {
        let spans = jaeger_trace(&jaeger, &trace_a).await?;
        if spans.iter().any(|s| s.span_id == link_span) {
            Ok(spans)
        } else {
            Err(format!("no span {link_span} in {spans:?}"))
        }
    })
    .await;
    // From the linked span up through its parents to the caller's span.
    let by_id: HashMap<&str, &JaegerSpan> =
        spans_a.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut at = link_span.as_str();
    let mut path = Vec::new();
    while let Some(span) = by_id.get(at) {
        path.push(span.name.clone());
        at = span.parent.as_str();
    }
    assert_eq!(
        at, parent_a,
        "the linked span descends from the start request: {path:?}"
    );
}
