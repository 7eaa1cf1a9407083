//! Item 12: audit answers who, from where, saw what.
//!
//! The attacker reads runs (its own, or with a forged handle), sends requests
//! with a `Host` or `Origin` taskgate does not serve, and counts on an operator
//! who turned the log down (`TASKGATE_LOG=off`) to leave no trace. Each event
//! must name the caller, the peer's address and a request id; none may hold an
//! argument value, a handle or a token.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// The audit events in the JSON-lines file at `path`: each event's fields.
fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["target"] == "taskgate::audit")
        .map(|e| e["fields"].clone())
        .collect()
}

/// The first event with every `(field, value)` of `want`.
fn find<'e>(events: &'e [Value], want: &[(&str, &str)]) -> Option<&'e Value> {
    events
        .iter()
        .find(|e| want.iter().all(|(k, v)| e[*k] == *v))
}

/// Every event of `path` that has every `(field, value)` of `want`, waited for.
async fn wait_event(path: &Path, want: &[(&str, &str)]) -> Value {
    wait_for(&format!("an audit event {want:?}"), LIMIT, async || {
        let all = events(path);
        find(&all, want)
            .cloned()
            .ok_or_else(|| format!("{} events: {all:?}", all.len()))
    })
    .await
}

#[track_caller]
fn assert_from_loopback(event: &Value) {
    assert!(
        event["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "the peer's socket address: {event}"
    );
    assert!(
        event["request"].as_str().is_some_and(|r| !r.is_empty()),
        "a request id: {event}"
    );
}

/// Reads (`tasks/get`, a listen stream), a forged handle, a foreign `Host` and
/// a foreign `Origin` are audited in a sink of their own, with the peer and a
/// request id, even with the log filter off; no event holds an argument value
/// or a handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_refusals_are_audited_with_peer_and_request_id() {
    let mut setup = Setup::new();
    let audit = setup.dir.path().join("audit.jsonl");
    setup.extra_env.extend([
        ("TASKGATE_LOG".to_owned(), "off".to_owned()),
        ("TASKGATE_AUDIT_LOG".to_owned(), audit.display().to_string()),
    ]);
    let server = Server::start(&setup).await;
    let c = server.client();
    let secret_label = "labelvalue7f3a9c";
    let task = c
        .start_task("work", json!({ "label": secret_label, "seconds": 0 }))
        .await;
    c.wait_terminal(&task, LIMIT).await;

    let start = wait_event(&audit, &[("action", "start"), ("outcome", "ok")]).await;
    assert_from_loopback(&start);
    assert_eq!(start["caller"], "anonymous", "{start}");
    assert_eq!(start["method"], "tools/call", "{start}");
    let run = start["run"].as_str().expect("a run reference").to_owned();

    let read = wait_event(
        &audit,
        &[
            ("action", "read"),
            ("method", "tasks/get"),
            ("outcome", "ok"),
        ],
    )
    .await;
    assert_from_loopback(&read);
    assert_eq!(read["run"], run.as_str(), "the read names the run: {read}");
    assert_ne!(read["request"], start["request"], "one id per request");

    // A listen stream on the (ended) task is a read too.
    let listen = json!({ "jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": [task] }, "_meta": modern_meta(true) } });
    let answer = c
        .post_raw(
            &[
                ("mcp-protocol-version", MODERN.to_owned()),
                ("mcp-method", "subscriptions/listen".to_owned()),
            ],
            listen.to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.raw);
    let listened = wait_event(
        &audit,
        &[("action", "read"), ("method", "subscriptions/listen")],
    )
    .await;
    assert_eq!(listened["run"], run.as_str(), "{listened}");

    // A forged handle: refused, and audited as such.
    let forged = format!("{}x", &task[..task.len() - 1]);
    let reply = c.get_reply(&forged).await;
    assert_eq!(reply.code(), -32602, "{}", reply.raw);
    let refused = wait_event(
        &audit,
        &[
            ("action", "read"),
            ("outcome", "refused"),
            ("method", "tasks/get"),
        ],
    )
    .await;
    assert_from_loopback(&refused);
    assert_eq!(refused["reason"], "unopenable", "{refused}");

    // A foreign Host, a foreign Origin: refused at the door, audited.
    let http = reqwest::Client::new();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": { "_meta": modern_meta(true) } });
    for (name, value, reason) in [
        ("host", "rebind.example", "host_not_allowed"),
        ("origin", "https://evil.example", "origin_not_allowed"),
    ] {
        let response = http
            .post(server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(name, value)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403, "{name}: {value}");
        let event = wait_event(
            &audit,
            &[
                ("action", "request"),
                ("outcome", "refused"),
                ("reason", reason),
            ],
        )
        .await;
        assert_from_loopback(&event);
    }

    // Nothing secret in the trail: no argument value, no handle.
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(!text.contains(secret_label), "an argument value in: {text}");
    assert!(!text.contains(&task), "a task handle in: {text}");
    assert!(!text.contains(&forged), "a presented handle in: {text}");
    assert!(!text.contains(KEY_SECRET), "the seal key in: {text}");

    // And the log itself stayed off: the trail has a sink of its own.
    assert!(
        !server.stderr_text().contains("taskgate::audit"),
        "audit events went to the file only: {}",
        server.stderr_text()
    );
}

/// With the default sink (stderr), a log filter that silences everything
/// (`TASKGATE_LOG=off`, or `warn`) does not silence the audit trail, and the
/// filter still holds for everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_filter_does_not_silence_the_audit_trail() {
    for filter in ["off", "warn"] {
        let mut setup = Setup::new();
        setup.extra_env.extend([
            ("TASKGATE_LOG".to_owned(), filter.to_owned()),
            ("TASKGATE_LOG_FORMAT".to_owned(), "json".to_owned()),
        ]);
        let server = Server::start(&setup).await;
        let c = server.client();
        let task = c
            .start_task("work", json!({ "label": "quiet", "seconds": 0 }))
            .await;
        c.get(&task).await;
        let lines = || -> Vec<Value> {
            server
                .stderr_text()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect()
        };
        wait_for(
            &format!("audit events on stderr with TASKGATE_LOG={filter}"),
            LIMIT,
            async || {
                let all = lines();
                let audit: Vec<Value> = all
                    .iter()
                    .filter(|l| l["target"] == "taskgate::audit")
                    .map(|l| l["fields"].clone())
                    .collect();
                if find(&audit, &[("action", "start")]).is_some()
                    && find(&audit, &[("action", "read"), ("method", "tasks/get")]).is_some()
                {
                    Ok(())
                } else {
                    Err(format!("{all:?}"))
                }
            },
        )
        .await;
        let others: Vec<Value> = lines()
            .into_iter()
            .filter(|l| l["target"] != "taskgate::audit" && l["level"] == "INFO")
            .collect();
        assert!(
            others.is_empty(),
            "TASKGATE_LOG={filter} still holds for the log: {others:?}"
        );
    }
}
