//! `/metrics` after known traffic, through the binary: the request counter by
//! method, dialect and outcome; engine calls by engine, tool and operation; a
//! forged handle on the refused-handles counter; an engine error by kind; and no
//! label value carrying a task id or an argument.

mod common;

use std::time::Duration;

use common::{metric_sum, Server, Setup};
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
    std::fs::remove_dir_all(&runs[0]).unwrap();
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
