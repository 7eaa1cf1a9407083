//! Items 7 and 8: SEP-1391 look-ups are bounded and checked; per-caller quotas.
//!
//! The attacker is a caller: one allowed a single tool (or none) who sends
//! status requests with made-up tokens to make taskgate search every engine,
//! one who starts runs, waits or watches without end, and a client of one
//! transport that reuses another transport's operation token. Each test
//! asserts the refusal, and that nothing reached an engine for it.

use std::time::Duration;

use serde_json::{json, Value};

use super::common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// `dialect_tools` where only `work` admits the anonymous HTTP caller; every
/// other tool admits only `alice` (who has no token here).
fn only_work_for_anonymous(env: &[(&str, &str)]) -> Setup {
    let mut setup = Setup::with_tools(&dialect_tools());
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let text = text
        .replacen(
            "[engines.local]",
            "[auth]\ndefault_access = [{ callers = [\"alice\"] }]\n\n[engines.local]",
            1,
        )
        .replacen(
            "name = \"work\"\n",
            "name = \"work\"\naccess = [{ callers = [\"anonymous\"] }]\n",
            1,
        );
    std::fs::write(&setup.config, text).unwrap();
    setup
        .extra_env
        .extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    setup
}

/// A 2025-06-18 session that opted in to SEP-1391.
async fn opted(server: &Server) -> Legacy {
    Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({ "elicitation": {}, "experimental": { SEP1391: {} } }),
    )
    .await
}

fn with_env(env: &[(&str, &str)]) -> Setup {
    let mut setup = Setup::with_tools(&dialect_tools());
    setup
        .extra_env
        .extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    setup
}

/// Item 7: a status request for an unknown token searches only the tools the
/// caller may use. Today's main asked every long-running tool (five here), a
/// caller allowed none of them included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_lookup_searches_only_the_callers_tools() {
    let setup = only_work_for_anonymous(&[]);
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let names: Vec<String> = names(&c.tools().await)
        .into_iter()
        .filter(|n| n != "taskgate_logs")
        .collect();
    assert_eq!(names, ["work"], "the anonymous caller may use only work");

    const LOOKUPS: u64 = 4;
    let before = server.engine_calls().await;
    for i in 0..LOOKUPS {
        let reply = c.op_status(&format!("op-made-up-{i}")).await;
        assert_eq!(reply.code(), -32602, "{}", reply.raw);
        assert!(
            reply.message().contains("Operation not found"),
            "{}",
            reply.raw
        );
    }
    let calls = server.engine_calls().await - before;
    assert_eq!(
        calls, LOOKUPS,
        "one locate per look-up, on the one tool the caller may use (five long-running tools are configured)"
    );

    // The caller's own operations are still found.
    let started = c
        .call_op(
            "work",
            json!({ "label": "mine", "steps": 0 }),
            "op-mine",
            60,
        )
        .await;
    assert!(started.is_ok(), "{}", started.raw);
    c.until_op_status("op-mine", "completed", LIMIT).await;
}

/// Item 7: look-ups count against a per-caller rate; past it a status request
/// is refused, retryably and naming the key, before any engine call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_past_the_callers_rate_are_refused_before_any_engine_call() {
    let setup = with_env(&[("TASKGATE__SERVER__MAX_LOOKUPS_PER_MINUTE", "3")]);
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    for i in 0..3 {
        let reply = c.op_status(&format!("op-unknown-{i}")).await;
        assert_eq!(reply.code(), -32602, "{}", reply.raw);
    }
    let before = server.engine_calls().await;
    let refused = c.op_status("op-unknown-3").await;
    assert_bound_refusal(refused.error(), "server.max_lookups_per_minute");
    let result = c.op_result("op-unknown-4").await;
    assert_bound_refusal(result.error(), "server.max_lookups_per_minute");
    assert_eq!(
        server.engine_calls().await,
        before,
        "a refused look-up reaches no engine"
    );
}

/// Item 7, with the shipped default (`max_lookups_per_minute = 300`): a caller
/// that sends made-up tokens without end is stopped after a minute's worth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_lookup_rate_stops_a_token_scan() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let mut refused = None;
    // 300 at once, then one more every 200 ms: the scan is stopped soon
    // after its 300th look-up (a little later on a slow machine).
    for i in 0..400 {
        let reply = c.op_status(&format!("op-scan-{i}")).await;
        if reply.code() != -32602 {
            refused = Some((i, reply));
            break;
        }
    }
    let (at, reply) = refused.expect("a scan of 400 made-up tokens is stopped");
    assert!(
        at >= 300,
        "not before a minute's worth: {at}: {}",
        reply.raw
    );
    assert_bound_refusal(reply.error(), "server.max_lookups_per_minute");
}

/// Item 8: runs started per minute are bounded per caller; the refusal is
/// retryable, names the key, and starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_past_the_callers_rate_are_refused() {
    let setup = with_env(&[("TASKGATE__SERVER__MAX_STARTS_PER_MINUTE", "2")]);
    let server = Server::start(&setup).await;
    let c = server.client();
    c.start_task("sleeper", json!({})).await;
    c.start_task("sleeper", json!({})).await;
    let before = server.engine_calls().await;
    let refused = c.call("sleeper", json!({})).await;
    assert_bound_refusal(refused.error(), "server.max_starts_per_minute");
    assert_eq!(
        server.engine_calls().await,
        before,
        "nothing reached the engine"
    );
    assert_eq!(setup.runs().len(), 2, "no third run: {:?}", setup.runs());
}

/// Opens a listen stream on `tasks`; returns its first message (the
/// acknowledgement, or the error that refused it).
async fn listen_first(server: &Server, tasks: &[&str]) -> (Value, Option<SseReader>) {
    let listen = json!({ "jsonrpc": "2.0", "id": "watch", "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": tasks }, "_meta": modern_meta(true) } });
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(listen.to_string())
        .send()
        .await
        .unwrap();
    let is_sse = header(&response, "content-type").is_some_and(|t| t.contains("event-stream"));
    if !is_sse {
        let body: Value = response.json().await.unwrap();
        return (body, None);
    }
    let mut stream = SseReader::new(response);
    let first = stream.next(LIMIT).await.expect("a first message");
    (first, Some(stream))
}

/// Item 8: the runs one caller's listen streams watch at once are bounded; a
/// listen that would pass the bound is refused, retryably, naming the key, and
/// a stream's runs are given back when it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_watch_at_most_the_callers_quota() {
    let setup = with_env(&[("TASKGATE__SERVER__MAX_WATCHED_RUNS_PER_CALLER", "2")]);
    let server = Server::start(&setup).await;
    let c = server.client();
    let a = c.start_task("sleeper", json!({})).await;
    let b = c.start_task("sleeper", json!({})).await;
    let d = c.start_task("sleeper", json!({})).await;

    let (refused, _) = listen_first(&server, &[&a, &b, &d]).await;
    assert_bound_refusal(&refused["error"], "server.max_watched_runs_per_caller");

    let (ack, stream) = listen_first(&server, &[&a, &b]).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let (refused, _) = listen_first(&server, &[&d]).await;
    assert_bound_refusal(&refused["error"], "server.max_watched_runs_per_caller");
    drop(stream);
    wait_for("the closed stream's runs given back", LIMIT, async || {
        let (first, _s) = listen_first(&server, &[&d]).await;
        if first["method"] == "notifications/subscriptions/acknowledged" {
            Ok(())
        } else {
            Err(first.to_string())
        }
    })
    .await;
}

/// Item 8: the reads of a waiting request count against the caller's budget
/// of wait reads (`max_engine_calls` leaves them out); past it the wait ends
/// with a retryable error naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_count_their_reads_against_the_callers_budget() {
    let setup = with_env(&[("TASKGATE__SERVER__MAX_WAIT_READS_PER_MINUTE", "3")]);
    let server = Server::start(&setup).await;
    let c = Legacy::connect(&server.url(), "2025-06-18", json!({})).await;
    let began = std::time::Instant::now();
    let reply = c
        .call("work", json!({ "label": "long", "steps": 100 }))
        .await;
    assert_bound_refusal(reply.error(), "server.max_wait_reads_per_minute");
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "refused long before the 20 s run or the 30 s max_wait: {:?}",
        began.elapsed()
    );
}

/// The stdio caller's name (`local:USER`), as the server derives it.
fn stdio_caller() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "local".to_owned());
    format!("local:{user}")
}

/// Item 8: an HTTP caller can never be named as the stdio caller (or as the
/// anonymous HTTP caller): today's main accepted a bearer token for
/// `local:USER`, whose holder then shared the stdio client's SEP-1391 token
/// namespace and read its operations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_caller_cannot_take_a_transports_name() {
    for name in [stdio_caller(), "anonymous".to_owned()] {
        let setup = Setup::with(Options {
            bearer: vec![Bearer {
                caller: name.clone(),
                var: "TASKGATE_TEST_TOKEN_X".into(),
                token: "token-of-x-0123456789".into(),
            }],
            ..Options::default()
        });
        let out = setup
            .command(&["check-config", "--config", setup.config.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("auth.bearer[0].caller"),
            "a token caller named {name:?} is refused, naming the key: {} {stderr}",
            out.status
        );
    }
}

/// Item 8: two local clients using the same operation token, one on stdio and
/// one on anonymous HTTP, do not reach each other's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_and_http_clients_do_not_share_operation_tokens() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let mut s = StdioServer::start(&setup);
    let init = s
        .request_raw(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": { "experimental": { SEP1391: {} } },
                    "clientInfo": { "name": "security-tests", "version": "1" } }),
        )
        .await;
    assert!(init.get("result").is_some(), "{init}");
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    let id = s
        .send_request(
            "tools/call",
            json!({ "name": "sleeper", "arguments": {}, "operation": { "token": "op-1" } }),
        )
        .await;
    let started = s.response(&id, LIMIT).await;
    assert_eq!(
        started["result"]["operation"]["status"], "submitted",
        "{started}"
    );

    let http = opted(&server).await;
    let status = http.op_status("op-1").await;
    assert_eq!(status.code(), -32602, "{}", status.raw);
    assert!(
        status.message().contains("Operation not found"),
        "{}",
        status.raw
    );
    // Nor can the HTTP client cancel it: the stdio run still works.
    http.notify(
        "notifications/cancelled",
        json!({ "_operation": { "token": "op-1" } }),
    )
    .await;
    let id = s
        .send_request("tools/async/status", json!({ "token": "op-1" }))
        .await;
    let status = s.response(&id, LIMIT).await;
    assert_eq!(status["result"]["status"], "working", "{status}");
    assert_eq!(setup.runs().len(), 1);
}
