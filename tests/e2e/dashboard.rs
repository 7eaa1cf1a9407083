//! The Grafana dashboard `deploy/grafana/taskgate.json`, for real: every
//! query of every panel, read from the JSON with its variables filled in as
//! Grafana would, runs against a real Prometheus scraping taskgate under
//! traffic of every kind the panels show, and returns at least one series
//! carrying a value other than 0. Before that, the JSON itself: a `datasource`
//! variable of type Prometheus that every panel and query uses, no datasource
//! uid written in, a description on every panel.
//!
//! `TASKGATE_PROMETHEUS` names the Prometheus server binary
//! (`scripts/prometheus/install.sh`; scripts/test.sh sets it).

use crate::common;
use crate::metrics::Prometheus;

use std::path::Path;
use std::time::Duration;

use common::{metric_sum, modern_meta, wait_for, Legacy, Server, Setup, SseReader, MODERN};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);
/// How long Prometheus may take to show what taskgate counted (it scrapes
/// every second).
const SCRAPED: Duration = Duration::from_secs(60);
/// What `$__rate_interval` becomes: long enough to hold both rounds of
/// traffic, as Grafana's own value would on a dashboard showing the last
/// minutes.
const RATE_INTERVAL: &str = "1m";

/// The dashboard, parsed.
fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/taskgate.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every object under `v` that has a `datasource` key, with its path.
fn datasource_refs<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(map) => {
            if let Some(ds) = map.get("datasource") {
                out.push((at.clone(), ds));
            }
            for (k, child) in map {
                datasource_refs(child, format!("{at}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                datasource_refs(child, format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Each query of each panel: (panel title, refId, PromQL as written).
fn panel_queries(dash: &Value) -> Vec<(String, String, String)> {
    let mut queries = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("a panel title").to_owned();
        assert!(
            panel["description"].as_str().is_some_and(|d| d.len() > 20),
            "panel {title:?} has no description"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("a PromQL expr").to_owned();
            let ref_id = t["refId"].as_str().unwrap_or("?").to_owned();
            queries.push((title.clone(), ref_id, expr));
        }
    }
    queries
}

/// `expr` with the dashboard's variables filled in: one job, every replica.
fn substituted(expr: &str) -> String {
    let q = expr
        .replace("$__rate_interval", RATE_INTERVAL)
        .replace("$job", "taskgate")
        .replace("$instance", ".+");
    assert!(!q.contains('$'), "a variable the test does not know: {q}");
    q
}

#[test]
fn the_dashboard_queries_prometheus_through_its_datasource_variable_only() {
    let dash = dashboard();
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 39));
    assert!(dash["id"].is_null(), "an exported id would clash on import");
    assert!(dash["description"].as_str().is_some_and(|d| !d.is_empty()));
    let vars = dash["templating"]["list"].as_array().expect("variables");
    let ds = vars
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let mut refs = Vec::new();
    datasource_refs(&dash, String::new(), &mut refs);
    assert!(refs.len() > 20, "{refs:?}");
    for (at, r) in refs {
        if at == ".annotations.list[0]" {
            // Grafana's own annotations, built in.
            assert_eq!(r["type"], "grafana", "{at}: {r}");
            continue;
        }
        if at.starts_with(".templating.list") && r.is_string() {
            continue;
        }
        assert_eq!(
            r,
            &json!({ "type": "prometheus", "uid": "${datasource}" }),
            "{at}: a datasource other than the variable"
        );
    }
    let queries = panel_queries(&dash);
    assert!(queries.len() >= 20, "{queries:?}");
    for (title, _, expr) in &queries {
        assert!(
            expr.contains("job=~\"$job\"") && expr.contains("instance=~\"$instance\""),
            "{title}: {expr} ignores the job or replica variable"
        );
        let _ = substituted(expr);
    }
    let all = queries.iter().map(|q| q.2.as_str()).collect::<String>();
    for series in [
        "taskgate_mcp_requests_total",
        "taskgate_mcp_request_duration_seconds_bucket",
        "taskgate_engine_calls_total",
        "taskgate_engine_errors_total",
        "taskgate_engine_call_duration_seconds_bucket",
        "taskgate_waits_in_flight",
        "taskgate_listen_streams_in_flight",
        "taskgate_watched_runs",
        "taskgate_refused_handles_total",
        "taskgate_quota_refusals_total",
        "taskgate_auth_refusals_total",
        "taskgate_build_info",
    ] {
        assert!(all.contains(series), "no panel shows {series}");
    }
}

/// POSTs `subscriptions/listen` for `task_id` (request id `id`).
async fn listen(url: &str, id: &str, task_id: &str) -> reqwest::Response {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": [task_id] }, "_meta": modern_meta(true) },
    });
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("POST /mcp")
}

/// One round of traffic of every kind the panels show; it ends with a
/// counted MCP request, so a scrape that holds all of its requests holds all
/// of it. `gone` is a task whose run its engine no longer has.
async fn round(server: &Server, legacy: &Legacy, gone: &str, n: usize) {
    let client = server.client();
    for i in 0..2 {
        let ok = client
            .call(
                "work",
                json!({ "label": format!("r{n}-{i}"), "seconds": 0 }),
            )
            .await;
        assert!(ok.is_ok(), "{}", ok.raw);
    }
    let old = legacy
        .call(
            "work",
            json!({ "label": format!("legacy-{n}"), "seconds": 0 }),
        )
        .await;
    assert!(old.is_ok(), "{}", old.raw);
    // Bad input: refused before the engine.
    let bad = client.call("work", json!({ "label": 7 })).await;
    assert!(!bad.is_ok(), "{}", bad.raw);
    // An engine error (not_found).
    let lost = client.get_reply(gone).await;
    assert!(!lost.is_ok(), "{}", lost.raw);
    // At the door: an Origin not allowed.
    let refused = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("origin", "https://evil.example.com")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(refused.status().as_u16(), 403);
    // Past server.max_watched_runs_per_caller: a listen stream for one more
    // run is refused.
    let over: Value = listen(&server.url(), &format!("over-{n}"), gone)
        .await
        .json()
        .await
        .expect("a JSON refusal");
    common::assert_bound_refusal(&over["error"], "server.max_watched_runs_per_caller");
    // A forged handle, last.
    let forged = client
        .get_reply("tg1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .await;
    assert!(!forged.is_ok(), "{}", forged.raw);
}

/// Waits until Prometheus holds a scrape with every request taskgate has
/// counted so far.
async fn scraped(server: &Server, prom: &Prometheus, what: &str) {
    let counted = metric_sum(&server.metrics().await, "taskgate_mcp_requests_total", &[]);
    wait_for(what, SCRAPED, async || {
        let seen = prom.value("sum(taskgate_mcp_requests_total)").await;
        match seen {
            Some(v) if v >= counted as f64 => Ok(()),
            other => Err(format!("{other:?} of {counted} requests")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_query_returns_series_from_a_prometheus_scraping_taskgate_under_traffic() {
    let Some(prometheus) = taskgate_engine::testing::e2e_endpoint("TASKGATE_PROMETHEUS") else {
        return;
    };
    let queries = panel_queries(&dashboard());
    let mut setup = Setup::new();
    // The listen stream held open watches the caller's one run: a stream
    // for another run is a quota refusal.
    setup.extra_env.push((
        "TASKGATE__SERVER__MAX_WATCHED_RUNS_PER_CALLER".into(),
        "1".into(),
    ));
    let server = Server::start(&setup).await;
    let client = server.client();
    let prom = Prometheus::start(&prometheus, &server.base);
    wait_for("Prometheus to scrape taskgate", SCRAPED, async || {
        prom.value("up{job=\"taskgate\"}")
            .await
            .filter(|v| *v == 1.0)
    })
    .await;

    // A task whose run its engine no longer has: each read is an engine error.
    let gone = client.start_task("sleeper", json!({})).await;
    let runs = setup.runs_of("sleeper");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let _ = client.cancel_reply(&gone).await;
    client.until_status(&gone, "cancelled", LIMIT).await;
    wait_for("the run folder to be removed", LIMIT, || {
        let removed = std::fs::remove_dir_all(&runs[0]).is_ok() || !runs[0].exists();
        async move { removed.then_some(()) }
    })
    .await;

    // Held open through the queries: a blocking call and a listen stream.
    let url = server.url();
    let blocking = tokio::spawn(async move {
        let c = Legacy::connect(&url, "2025-06-18", json!({})).await;
        c.call("work", json!({ "label": "held", "seconds": 60 }))
            .await
    });
    let watched = client.start_task("sleeper", json!({})).await;
    let mut stream = SseReader::new(listen(&server.url(), "held", &watched).await);
    let ack = stream.next(LIMIT).await.expect("the acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    wait_for(
        "the call and the stream to hold their slots",
        LIMIT,
        async || {
            let text = server.metrics().await;
            let held = (
                metric_sum(&text, "taskgate_waits_in_flight", &[]),
                metric_sum(&text, "taskgate_listen_streams_in_flight", &[]),
                metric_sum(&text, "taskgate_watched_runs", &[]),
            );
            (held == (2, 1, 1)).then_some(()).ok_or(format!("{held:?}"))
        },
    )
    .await;
    scraped(&server, &prom, "Prometheus to scrape the held requests").await;

    // Two rounds with a scrape between them: a series first seen in round
    // one has grown by round two, so its rate is not 0.
    let legacy = Legacy::connect(&server.url(), "2025-06-18", json!({})).await;
    round(&server, &legacy, &gone, 1).await;
    scraped(&server, &prom, "Prometheus to scrape round 1").await;
    round(&server, &legacy, &gone, 2).await;
    scraped(&server, &prom, "Prometheus to scrape round 2").await;

    let text = server.metrics().await;
    for (name, labels) in [
        (
            "taskgate_quota_refusals_total",
            ("key", "max_watched_runs_per_caller"),
        ),
        (
            "taskgate_auth_refusals_total",
            ("reason", "origin_not_allowed"),
        ),
        ("taskgate_refused_handles_total", ("reason", "unopenable")),
    ] {
        assert_eq!(metric_sum(&text, name, &[labels]), 2, "{name}: {text}");
    }

    let failing = wait_for(
        "every panel query to show the traffic",
        SCRAPED,
        async || {
            let mut failing = Vec::new();
            for (title, ref_id, expr) in &queries {
                let q = substituted(expr);
                match prom.query(&q).await {
                    Ok(series) if series.is_empty() => {
                        failing.push(format!("{title} ({ref_id}): no series for {q}"));
                    }
                    Ok(series) => {
                        let shown = series.iter().any(|s| {
                            s["value"][1]
                                .as_str()
                                .and_then(|v| v.parse::<f64>().ok())
                                .is_some_and(|v| v.is_finite() && v != 0.0)
                        });
                        if !shown {
                            failing.push(format!(
                                "{title} ({ref_id}): only zero or NaN for {q}: {series:?}"
                            ));
                        }
                    }
                    Err(e) => failing.push(format!("{title} ({ref_id}): {e}")),
                }
            }
            if failing.is_empty() {
                Ok(failing)
            } else {
                Err(failing.join("\n"))
            }
        },
    )
    .await;
    assert!(failing.is_empty(), "{}", prom.log());
    println!("{} panel queries returned series", queries.len());

    drop(stream);
    blocking.abort();
    let _ = client.cancel_reply(&watched).await;
}
