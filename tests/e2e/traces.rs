//! OpenTelemetry traces through the binary, read back from a real trace backend
//! (Jaeger, `scripts/jaeger/up.sh`), never from taskgate's own output: a
//! caller's `traceparent` in `_meta` is the parent of taskgate's SERVER span,
//! the engine-start span is beneath it, and the exec run sees `TRACEPARENT` of
//! that span; no attribute of the trace holds the argument or the bearer
//! token; a malformed context is ignored; with tracing off Jaeger hears
//! nothing. Without Jaeger these skip, or fail under `TASKGATE_REQUIRE_E2E=1`.

use crate::common;

use std::time::Duration;

use common::jaeger::{Jaeger, SpanView};
use common::{modern_meta, Bearer, Client, Options, Server, Setup, Tool, LABEL_SCHEMA};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// A fresh random-looking id of `hex` digits (the test's own traces must not
/// meet another run's in a shared Jaeger).
fn fresh_id(hex: usize) -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut out = String::new();
    while out.len() < hex {
        let n = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        out.push_str(&format!("{n:016x}"));
    }
    out.truncate(hex);
    out
}

/// The core tools plus `trace_env` (sync: prints `TRACEPARENT`/`TRACESTATE`),
/// a bearer caller, and `telemetry` appended as is.
fn setup(telemetry: &str) -> (Setup, Bearer) {
    let alice = Bearer::new("alice");
    let tool = Tool::new("trace_env", "sync", "trace_env.sh", LABEL_SCHEMA).toml();
    let mut setup = Setup::with(Options {
        bearer: vec![alice.clone()],
        extra: format!("{tool}\n{telemetry}"),
        ..Options::default()
    });
    // Export each batch at once rather than every 5 s.
    setup
        .extra_env
        .push(("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()));
    (setup, alice)
}

fn telemetry_to(jaeger: &Jaeger, instance: &str) -> String {
    format!(
        "[telemetry]\nendpoint = \"{}\"\nresource = {{ \"service.instance.id\" = \"{instance}\" }}\n",
        jaeger.otlp_grpc
    )
}

/// A 2026-07-28 `tools/call` of `trace_env` with `meta` added to its `_meta`
/// and `headers` besides the standard ones; returns the reply's result text.
async fn call_traced(
    client: &Client,
    label: &str,
    meta: Value,
    headers: &[(&'static str, String)],
) -> String {
    let mut params = json!({ "name": "trace_env", "arguments": { "label": label } });
    let mut m = modern_meta(false);
    for (k, v) in meta.as_object().into_iter().flatten() {
        m[k] = v.clone();
    }
    params["_meta"] = m;
    let mut all = Client::headers_for("tools/call", &params);
    all.extend(headers.iter().cloned());
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params });
    let reply = client.post_raw(&all, body.to_string()).await;
    assert!(reply.is_ok(), "{}", reply.raw);
    assert_eq!(reply.result()["isError"], false, "{}", reply.raw);
    reply.result()["content"][0]["text"]
        .as_str()
        .expect("text content")
        .to_owned()
}

fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {text:?}"))
}

fn named<'a>(spans: &'a [SpanView], name: &str) -> Option<&'a SpanView> {
    spans.iter().find(|s| s.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_traceparent_parents_the_server_span_and_reaches_the_run() {
    let Some(jaeger) = Jaeger::from_env("traces::a_callers_traceparent_parents_the_server_span")
    else {
        return;
    };
    let (mut setup, alice) = setup(&telemetry_to(&jaeger, &fresh_id(8)));
    setup
        .extra_env
        .push(("TASKGATE_LOG_FORMAT".into(), "json".into()));
    let server = Server::start(&setup).await;
    let client = server.client().with_token(&alice.token);
    let (trace_id, parent) = (fresh_id(32), fresh_id(16));
    let label = format!("secretarg{}", fresh_id(12));
    let text = call_traced(
        &client,
        &label,
        json!({ "traceparent": format!("00-{trace_id}-{parent}-01"), "tracestate": "rojo=00f067aa0ba902b7" }),
        // The HTTP header of another trace loses to _meta.
        &[(
            "traceparent",
            format!("00-{}-{}-01", fresh_id(32), fresh_id(16)),
        )],
    )
    .await;

    let spans = jaeger
        .trace_until(&trace_id, LIMIT, |spans| {
            named(spans, "tools/call trace_env").is_some() && named(spans, "start local").is_some()
        })
        .await;
    let request = named(&spans, "tools/call trace_env").unwrap();
    let start = named(&spans, "start local").unwrap();
    assert_eq!(
        request.parent.as_deref(),
        Some(parent.as_str()),
        "{:?}",
        request.raw
    );
    assert_eq!(request.tag("span.kind"), Some("server"));
    assert_eq!(request.tag("mcp.method.name"), Some("tools/call"));
    assert_eq!(request.tag("mcp.protocol.version"), Some("2026-07-28"));
    assert_eq!(request.tag("jsonrpc.request.id"), Some("7"));
    assert_eq!(request.tag("gen_ai.tool.name"), Some("trace_env"));
    assert_eq!(request.tag("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(request.tag("network.transport"), Some("tcp"));
    assert_eq!(request.tag("service.name"), Some("taskgate"));
    assert!(request.tag("error.type").is_none(), "{:?}", request.raw);
    // The transport's own context is linked, not the parent.
    assert_eq!(request.links.len(), 1, "{:?}", request.raw);
    assert_eq!(start.parent.as_deref(), Some(request.span_id.as_str()));
    assert_eq!(start.tag("span.kind"), Some("client"));
    assert_eq!(start.tag("taskgate.engine"), Some("local"));
    assert_eq!(start.tag("taskgate.engine.operation"), Some("start"));
    assert_eq!(start.tag("taskgate.engine.outcome"), Some("ok"));
    // The run was started under the engine-start span, sampled.
    assert_eq!(
        line(&text, "TRACEPARENT"),
        format!("00-{trace_id}-{}-01", start.span_id)
    );
    assert_eq!(line(&text, "TRACESTATE"), "rojo=00f067aa0ba902b7");
    // The sync call read the run: engine reads under the same request.
    assert!(
        spans.iter().any(|s| s
            .tag("taskgate.engine.operation")
            .is_some_and(|o| o != "start")
            && s.parent.as_deref() == Some(request.span_id.as_str())),
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    // The request's JSON log line names its trace and span.
    let logged = server.stderr_text();
    let line_json: Value = logged
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["message"] == "run started")
        .unwrap_or_else(|| panic!("no 'run started' line in {logged}"));
    let run_started = line_json.to_string();
    assert_eq!(line_json["trace_id"], trace_id.as_str(), "{run_started}");
    assert_eq!(
        line_json["span_id"],
        request.span_id.as_str(),
        "{run_started}"
    );
    // Neither the argument nor the token, anywhere in the trace.
    for span in &spans {
        for (k, v) in &span.tags {
            assert!(
                !v.contains(&label) && !v.contains(&alice.token),
                "{}: {k} = {v}",
                span.name
            );
        }
        assert!(!span.name.contains(&label));
        let raw = span.raw.to_string();
        assert!(
            !raw.contains(&label) && !raw.contains(&alice.token),
            "{raw}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_is_ignored_and_the_call_succeeds() {
    let Some(jaeger) = Jaeger::from_env("traces::a_malformed_traceparent_is_ignored") else {
        return;
    };
    let (setup, alice) = setup(&telemetry_to(&jaeger, &fresh_id(8)));
    let server = Server::start(&setup).await;
    let client = server.client().with_token(&alice.token);
    let bad_trace = fresh_id(32);
    for (meta, headers) in [
        // Upper-case hex, a version not 00, a zero span id, a bad tracestate.
        (
            json!({ "traceparent": format!("00-{}-{}-01", bad_trace.to_uppercase(), fresh_id(16)) }),
            vec![],
        ),
        (
            json!({ "traceparent": format!("ff-{bad_trace}-{}-01", fresh_id(16)) }),
            vec![("traceparent", "garbage".to_owned())],
        ),
        (
            json!({ "traceparent": format!("00-{bad_trace}-0000000000000000-01"), "tracestate": 42 }),
            vec![],
        ),
        (json!({ "traceparent": { "not": "a string" } }), vec![]),
        // Long, within the body limit (64 KiB here).
        (json!({ "traceparent": "x".repeat(60_000) }), vec![]),
    ] {
        let text = call_traced(&client, "ok", meta, &headers).await;
        // Traced as a new trace of taskgate's own.
        let tp = line(&text, "TRACEPARENT");
        assert!(tp.starts_with("00-") && !tp.contains(&bad_trace), "{tp}");
        assert_eq!(line(&text, "TRACESTATE"), "none");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tracing_off_jaeger_hears_nothing_and_the_run_gets_no_context() {
    let Some(jaeger) = Jaeger::from_env("traces::with_tracing_off_jaeger_hears_nothing") else {
        return;
    };
    let (off, alice) = setup("");
    let server = Server::start(&off).await;
    let client = server.client().with_token(&alice.token);
    let untraced = fresh_id(32);
    let text = call_traced(
        &client,
        "ok",
        json!({ "traceparent": format!("00-{untraced}-{}-01", fresh_id(16)) }),
        &[],
    )
    .await;
    assert_eq!(line(&text, "TRACEPARENT"), "none");
    assert_eq!(line(&text, "TRACESTATE"), "none");
    drop(server);
    // The control: a server with tracing on, called after, is heard.
    let (on, alice) = setup(&telemetry_to(&jaeger, &fresh_id(8)));
    let server = Server::start(&on).await;
    let client = server.client().with_token(&alice.token);
    let traced = fresh_id(32);
    call_traced(
        &client,
        "ok",
        json!({ "traceparent": format!("00-{traced}-{}-01", fresh_id(16)) }),
        &[],
    )
    .await;
    jaeger
        .trace_until(&traced, LIMIT, |spans| {
            named(spans, "tools/call trace_env").is_some()
        })
        .await;
    assert!(
        jaeger.spans(&untraced).await.unwrap().is_empty(),
        "the server with tracing off exported spans"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_over_stdio_is_traced_too() {
    let Some(jaeger) = Jaeger::from_env("traces::a_legacy_session_over_stdio_is_traced_too") else {
        return;
    };
    let (setup, _) = setup(&telemetry_to(&jaeger, &fresh_id(8)));
    let mut server = common::StdioServer::start(&setup);
    let init = server
        .request_raw(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "legacy-stdio", "version": "1" } }),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    server
        .send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let (trace_id, parent) = (fresh_id(32), fresh_id(16));
    let call = server
        .request_raw(
            "tools/call",
            json!({ "name": "trace_env", "arguments": { "label": "old" },
                    "_meta": { "traceparent": format!("00-{trace_id}-{parent}-01") } }),
        )
        .await;
    assert_eq!(call["result"]["isError"], false, "{call}");
    let text = call["result"]["content"][0]["text"].as_str().unwrap();
    let spans = jaeger
        .trace_until(&trace_id, LIMIT, |spans| {
            named(spans, "tools/call trace_env").is_some() && named(spans, "start local").is_some()
        })
        .await;
    let request = named(&spans, "tools/call trace_env").unwrap();
    let start = named(&spans, "start local").unwrap();
    assert_eq!(request.parent.as_deref(), Some(parent.as_str()));
    assert_eq!(request.tag("network.transport"), Some("pipe"));
    assert_eq!(request.tag("mcp.protocol.version"), Some("2025-06-18"));
    assert!(request.tag("network.protocol.name").is_none());
    assert_eq!(
        line(text, "TRACEPARENT"),
        format!("00-{trace_id}-{}-01", start.span_id)
    );
}
