//! `/metrics` after known traffic, through the binary: the request counter by
//! method, dialect and outcome; engine calls by engine, tool and operation; a
//! forged handle on the refused-handles counter; an engine error by kind; and no
//! label value carrying a task id or an argument; refusals at the door by
//! reason. Then `promtool check metrics` on a scrape under load, and a real
//! Prometheus server scraping taskgate ([`Prometheus`], also used by
//! `dashboard.rs`).

use crate::common;

use std::time::Duration;

use common::{metric_sum, wait_for, Bearer, Client, Legacy, Options, Server, Setup};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_traffic_moves_the_labelled_series() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    let before = server.metrics().await;
    let ok_calls = [
        ("method", "tools/call"),
        ("dialect", "2026-07-28"),
        ("outcome", "ok"),
    ];
    let work_starts = [
        ("engine", "local"),
        ("tool", "work"),
        ("operation", "start"),
    ];
    assert_eq!(
        metric_sum(&before, "taskgate_mcp_requests_total", &ok_calls),
        0
    );
    assert_eq!(
        metric_sum(&before, "taskgate_engine_calls_total", &work_starts),
        0
    );
    assert!(
        before.contains("taskgate_build_info{version=\""),
        "{before}"
    );
    assert!(before.contains("taskgate_waits_in_flight 0"), "{before}");

    const N: u64 = 3;
    for i in 0..N {
        let reply = client
            .call(
                "work",
                json!({ "label": format!("secret-arg-{i}"), "seconds": 0 }),
            )
            .await;
        assert!(reply.is_ok(), "{}", reply.raw);
    }
    let after = server.metrics().await;
    assert_eq!(
        metric_sum(&after, "taskgate_mcp_requests_total", &ok_calls),
        N,
        "{after}"
    );
    assert_eq!(
        metric_sum(
            &after,
            "taskgate_mcp_request_duration_seconds_count",
            &ok_calls[..2]
        ),
        N,
        "{after}"
    );
    assert_eq!(
        metric_sum(&after, "taskgate_engine_calls_total", &work_starts),
        N,
        "{after}"
    );
    assert_eq!(
        metric_sum(
            &after,
            "taskgate_engine_call_duration_seconds_count",
            &work_starts
        ),
        N,
        "{after}"
    );
    assert!(!after.contains("secret-arg"), "an argument leaked: {after}");

    // A forged handle: refused, counted once, reaching no engine.
    let refused = [("reason", "unopenable")];
    assert_eq!(
        metric_sum(&after, "taskgate_refused_handles_total", &refused),
        0
    );
    let calls = server.engine_calls().await;
    let forged = client
        .get_reply("tg.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .await;
    assert!(!forged.is_ok(), "{}", forged.raw);
    let text = server.metrics().await;
    assert_eq!(
        metric_sum(&text, "taskgate_refused_handles_total", &refused),
        1,
        "{text}"
    );
    assert_eq!(
        metric_sum(
            &text,
            "taskgate_mcp_requests_total",
            &[("method", "tasks/get"), ("outcome", "error")]
        ),
        1,
        "{text}"
    );
    assert_eq!(server.engine_calls().await, calls);

    // A run its engine no longer has: an engine error of kind not_found.
    let task = client.start_task("sleeper", json!({})).await;
    let runs = setup.runs_of("sleeper");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let _ = client.cancel_reply(&task).await;
    client.until_status(&task, "cancelled", LIMIT).await;
    // The engine's wrapper may still be writing its last files: retry.
    wait_for("the run folder to be removed", LIMIT, || {
        let gone = std::fs::remove_dir_all(&runs[0]).is_ok() || !runs[0].exists();
        async move { gone.then_some(()) }
    })
    .await;
    let not_found = [("tool", "sleeper"), ("kind", "not_found")];
    let errors_before = metric_sum(
        &server.metrics().await,
        "taskgate_engine_errors_total",
        &not_found,
    );
    let gone = client.get_reply(&task).await;
    assert!(!gone.is_ok(), "{}", gone.raw);
    let text = server.metrics().await;
    assert_eq!(
        metric_sum(&text, "taskgate_engine_errors_total", &not_found),
        errors_before + 1,
        "{text}"
    );
    assert!(!text.contains(&task), "a task id leaked: {text}");
}

/// Requests refused at the door, each counted once under its reason, the
/// others left at 0; none of them reaches an engine, and no token shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_at_the_door_are_counted_by_reason() {
    let alice = Bearer::new("alice");
    let setup = Setup::with(Options {
        bearer: vec![alice.clone()],
        ..Options::default()
    });
    let server = Server::start(&setup).await;
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    let headers = |extra: &[(&'static str, String)]| {
        let mut h = Client::headers_for("tools/list", &json!({}));
        h.extend_from_slice(extra);
        h
    };
    let anonymous = server.client();
    let wrong = server.client().with_token("token-of-nobody-0123456789");
    let right = server.client().with_token(&alice.token);
    let cases = [
        (
            "no_token",
            anonymous.post_raw(&headers(&[]), body.clone()).await,
        ),
        (
            "invalid_token",
            wrong.post_raw(&headers(&[]), body.clone()).await,
        ),
        (
            "origin_not_allowed",
            right
                .post_raw(
                    &headers(&[("origin", "https://evil.example.com".into())]),
                    body.clone(),
                )
                .await,
        ),
        (
            "host_not_allowed",
            right
                .post_raw(
                    &headers(&[("host", "evil.example.com".into())]),
                    body.clone(),
                )
                .await,
        ),
    ];
    for (reason, reply) in &cases {
        assert!(
            matches!(reply.status, 401 | 403),
            "{reason}: {} {}",
            reply.status,
            reply.raw
        );
    }
    let ok = right.request("tools/list", json!({})).await;
    assert!(ok.is_ok(), "{}", ok.raw);
    let text = server.metrics().await;
    for reason in [
        "no_token",
        "invalid_token",
        "origin_not_allowed",
        "host_not_allowed",
        "issuer_unavailable",
        "too_many_failures",
        "peer_not_allowed",
        "access_rule",
        "insufficient_scope",
    ] {
        let want = u64::from(cases.iter().any(|(r, _)| *r == reason));
        assert_eq!(
            metric_sum(&text, "taskgate_auth_refusals_total", &[("reason", reason)]),
            want,
            "{reason}: {text}"
        );
    }
    assert!(!text.contains("token-of-"), "a token leaked: {text}");
    assert_eq!(server.engine_calls().await, 0);
}

/// Prometheus' own linter on a scrape taken while blocking calls are in
/// flight. `TASKGATE_PROMTOOL` names promtool (scripts/prometheus/install.sh
/// prints its folder; scripts/test.sh sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_passes_a_scrape_taken_under_load() {
    let Some(promtool) = taskgate_engine::testing::e2e_endpoint("TASKGATE_PROMTOOL") else {
        return;
    };
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    const WAITING: usize = 3;
    let mut calls = Vec::new();
    for i in 0..WAITING {
        let url = server.url();
        calls.push(tokio::spawn(async move {
            let c = Legacy::connect(&url, "2025-06-18", json!({})).await;
            c.call(
                "work",
                json!({ "label": format!("load-{i}"), "seconds": 20 }),
            )
            .await
        }));
    }
    // Traffic of every kind: plain calls, a failing tool, a forged handle.
    let client = server.client();
    for _ in 0..5 {
        assert!(client
            .call("work", json!({ "label": "x", "seconds": 0 }))
            .await
            .is_ok());
    }
    let _ = client.call("fail", json!({ "label": "x" })).await;
    let _ = client.get_reply("tg.k1.forged").await;
    let scrape = wait_for("the blocking calls to be in flight", LIMIT, || {
        let server = &server;
        async move {
            let text = server.metrics().await;
            (metric_sum(&text, "taskgate_waits_in_flight", &[]) == WAITING as u64).then_some(text)
        }
    })
    .await;
    let opened = [
        ("method", "initialize"),
        ("dialect", "2025-06-18"),
        ("outcome", "ok"),
    ];
    assert_eq!(
        metric_sum(&scrape, "taskgate_mcp_requests_total", &opened),
        WAITING as u64,
        "{scrape}"
    );
    let legacy = [("method", "tools/call"), ("dialect", "2025-06-18")];
    assert_eq!(
        metric_sum(&scrape, "taskgate_mcp_requests_total", &legacy),
        0,
        "{scrape}"
    );

    let mut child = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {promtool}: {e}"));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), scrape.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}\n{}{}\n--- scrape:\n{scrape}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for call in calls {
        call.abort();
    }
}

/// A real Prometheus server (its own data folder and port, scraping every
/// second) sees taskgate's labelled series, queried through its HTTP API.
/// `TASKGATE_PROMETHEUS` names the server binary (scripts/test.sh sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_server_scraping_taskgate_sees_the_series() {
    let Some(prometheus) = taskgate_engine::testing::e2e_endpoint("TASKGATE_PROMETHEUS") else {
        return;
    };
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    const N: u64 = 4;
    for i in 0..N {
        let reply = client
            .call("work", json!({ "label": format!("p{i}"), "seconds": 0 }))
            .await;
        assert!(reply.is_ok(), "{}", reply.raw);
    }
    let prom = Prometheus::start(&prometheus, &server.base);
    let query = |q: &'static str| prom.value(q);
    let calls = wait_for("Prometheus to scrape the tools/call counter", Duration::from_secs(60), || async {
        query("sum(taskgate_mcp_requests_total{method=\"tools/call\",dialect=\"2026-07-28\",outcome=\"ok\"})")
            .await
            .filter(|v| *v >= N as f64)
    })
    .await;
    assert_eq!(calls, N as f64);
    let starts = query(
        "sum(taskgate_engine_calls_total{engine=\"local\",tool=\"work\",operation=\"start\"})",
    )
    .await;
    assert_eq!(starts, Some(N as f64));
    let up = query("up{job=\"taskgate\"}").await;
    assert_eq!(up, Some(1.0));
    let build = query("count(taskgate_build_info)").await;
    assert_eq!(build, Some(1.0));
}

/// A real Prometheus server of its own (a temporary data folder, a free port)
/// scraping one taskgate every second; killed when dropped.
pub(crate) struct Prometheus {
    child: std::process::Child,
    /// Its data folder, configuration and log.
    data: tempfile::TempDir,
    /// Its instant-query endpoint.
    api: String,
}

impl Prometheus {
    /// Starts `binary` scraping `/metrics` of the taskgate at `base`
    /// (`http://host:port`) as job `taskgate`.
    pub(crate) fn start(binary: &str, base: &str) -> Self {
        let target = base.trim_start_matches("http://");
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: taskgate\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = common::free_port();
        let log = std::fs::File::create(data.path().join("prometheus.log")).unwrap();
        let child = std::process::Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                data.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"));
        Self {
            child,
            data,
            api: format!("http://127.0.0.1:{port}/api/v1/query"),
        }
    }

    /// The result vector of the instant query `q`; `Err` with what Prometheus
    /// said (or that it could not be asked) otherwise.
    pub(crate) async fn query(&self, q: &str) -> Result<Vec<serde_json::Value>, String> {
        let response = reqwest::Client::new()
            .get(&self.api)
            .query(&[("query", q)])
            .send()
            .await
            .map_err(|e| format!("cannot ask Prometheus: {e}"))?;
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| format!("not JSON from Prometheus: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("Prometheus refused {q}: {body}"));
        }
        body["data"]["result"]
            .as_array()
            .cloned()
            .ok_or_else(|| format!("no result vector for {q}: {body}"))
    }

    /// The value of the first series `q` returns, if any.
    pub(crate) async fn value(&self, q: &str) -> Option<f64> {
        let series = self.query(q).await.ok()?;
        series.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Its log so far (for failure messages).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.data.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
