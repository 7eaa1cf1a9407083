//! The core over Streamable HTTP, with raw JSON-RPC against the real binary:
//! the 2026-07-28 tasks flow, statelessness (restart, replicas, no idle reads),
//! sealed handles, argument checks, the transport's guards and error codes, the
//! legacy handshake, and configuration errors.

use crate::common;

use std::time::{Duration, Instant};

use common::{Bearer, Client, Options, Server, Setup, MODERN};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LONG: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------- tasks flow

#[tokio::test]
async fn long_running_call_becomes_a_task_that_completes_with_its_result() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();

    let reply = client
        .call("work", json!({ "label": "alpha", "seconds": 1 }))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let created = reply.result();
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    assert_eq!(created["ttlMs"], 3_600_000, "{created}");
    assert_eq!(created["pollIntervalMs"], 200, "{created}");
    assert!(created["createdAt"].is_string() && created["lastUpdatedAt"].is_string());
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    assert!(
        task_id.len() >= 32,
        "task id too short to be unguessable: {task_id}"
    );

    // The run exists before the handle leaves: an immediate tasks/get resolves.
    let first = client.get(&task_id).await;
    common::assert_detailed_task(&first, &task_id);
    assert!(
        matches!(first["status"].as_str(), Some("working" | "completed")),
        "{first}"
    );
    // A task still going tells the tool's poll interval (200 ms) on every read.
    if first["status"] == "working" {
        assert_eq!(first["pollIntervalMs"], 200, "{first}");
    }
    assert_eq!(setup.runs().len(), 1, "exactly one run started");

    let done = client
        .poll_until(&task_id, LONG, |t| t["status"] != "working")
        .await;
    common::assert_detailed_task(&done, &task_id);
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(result["isError"], false, "{done}");
    assert_eq!(
        result["structuredContent"],
        json!({ "label": "alpha", "seconds": 1, "rows": 42 }),
        "{done}"
    );
    assert!(
        result["content"].as_array().is_some_and(|c| !c.is_empty()),
        "content must mirror the structured result: {done}"
    );
    // A finished task has nothing left to poll for.
    assert!(done.get("pollIntervalMs").is_none(), "{done}");
}

#[tokio::test]
async fn a_failing_tool_is_completed_with_is_error() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();

    let task_id = client.start_task("fail", json!({ "label": "ds7" })).await;
    let done = client.wait_terminal(&task_id, LONG).await;
    assert_eq!(
        done["status"], "completed",
        "a tool error is not a failed task: {done}"
    );
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(done.get("error").is_none(), "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("code 3"), "{done}");
    assert!(
        text.contains("dataset ds7 not found"),
        "stderr tail missing: {done}"
    );
}

#[tokio::test]
async fn input_round_trip_through_tasks_get_and_tasks_update() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();

    let task_id = client.start_task("ask", json!({ "label": "v2" })).await;
    let waiting = client
        .poll_until(&task_id, LONG, |t| t["status"] == "input_required")
        .await;
    let request = &waiting["inputRequests"]["approve"];
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Deploy v2?", "{waiting}");
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["ok"]),
        "{waiting}"
    );

    // An answer that does not fit the requested schema is refused before the engine.
    let bad = client
        .request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": { "approve": { "action": "accept", "content": { "ok": "yes" } } } }),
        )
        .await;
    assert_eq!(bad.code(), -32602, "{}", bad.raw);
    assert!(
        !setup
            .only_run()
            .join("input/approve.response.json")
            .exists(),
        "a refused answer must not reach the run"
    );
    assert_eq!(client.get(&task_id).await["status"], "input_required");

    // Unknown keys are dropped; the real answer goes through.
    let ack = client
        .request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": {
                "approve": { "action": "accept", "content": { "ok": true } },
                "nonsense": { "action": "accept", "content": {} } } }),
        )
        .await;
    assert_eq!(ack.status, 200, "{}", ack.raw);
    assert_eq!(ack.result(), &json!({ "resultType": "complete" }));

    let done = client.wait_terminal(&task_id, LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    let answer = &done["result"]["structuredContent"]["answer"];
    assert_eq!(answer["action"], "accept", "{done}");
    assert_eq!(answer["content"], json!({ "ok": true }), "{done}");
}

#[tokio::test]
async fn a_client_that_declared_no_input_type_never_receives_an_input_request() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let plain = server.client().without_elicitation();
    // Exec tools may all ask, so the call itself is served: a task.
    let task_id = plain.start_task("ask", json!({ "label": "quiet" })).await;
    let refused = common::wait_for("the run's question", LONG, async || {
        let reply = plain.get_reply(&task_id).await;
        assert!(
            !reply.raw.contains("inputRequests") && !reply.raw.contains("elicitation/create"),
            "an input request reached a client that did not declare elicitation: {}",
            reply.raw
        );
        if reply.code() == -32021 {
            Ok(reply)
        } else {
            Err(reply.raw)
        }
    })
    .await;
    assert_eq!(refused.status, 400, "{}", refused.raw);
    assert_eq!(
        refused.error()["data"]["requiredCapabilities"],
        json!({ "elicitation": {} }),
        "{}",
        refused.raw
    );
    // A request that declares it sees the question; anyone may answer it.
    let asking = server.client().get(&task_id).await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    assert_eq!(
        asking["inputRequests"]["approve"]["method"],
        "elicitation/create"
    );
    let ack = plain
        .update(
            &task_id,
            json!({ "approve": { "action": "accept", "content": { "ok": true } } }),
        )
        .await;
    assert_eq!(ack.status, 200, "{}", ack.raw);
    let done = plain.wait_terminal(&task_id, LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test]
async fn cancel_ends_the_task_and_its_whole_process_group() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();

    let task_id = client.start_task("sleeper", json!({})).await;
    let run = setup.only_run();
    let grandchild: i32 = common::wait_for("the grandchild pid", LONG, || {
        let path = run.join("grandchild.pid");
        async move { std::fs::read_to_string(path).ok()?.trim().parse().ok() }
    })
    .await;
    let pgid = common::recorded_pid(&run.join("pid.json")).expect("pid.json");
    assert!(
        common::alive(grandchild),
        "the grandchild runs before cancel"
    );
    assert!(
        common::group_members(pgid).len() >= 2,
        "the script and its grandchild share the process group"
    );
    assert_eq!(client.get(&task_id).await["status"], "working");

    let ack = client.cancel(&task_id).await;
    assert_eq!(ack, json!({ "resultType": "complete" }));
    let cancelled = client
        .poll_until(&task_id, LONG, |t| t["status"] != "working")
        .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(cancelled.get("result").is_none(), "{cancelled}");

    common::wait_for("the process group to be gone", LONG, || async {
        (common::group_members(pgid).is_empty() && !common::alive(grandchild)).then_some(())
    })
    .await;

    // Cancelling again (a terminal task) is acknowledged and changes nothing.
    assert_eq!(
        client.cancel(&task_id).await,
        json!({ "resultType": "complete" })
    );
    assert_eq!(client.get(&task_id).await["status"], "cancelled");
}

#[tokio::test]
async fn async_only_tool_without_the_extension_is_refused() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let plain = server.client().without_tasks();

    let reply = plain.call("ask", json!({ "label": "x" })).await;
    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.code(), -32021, "{}", reply.raw);
    assert_eq!(
        reply.error()["data"]["requiredCapabilities"],
        json!({ "extensions": { common::TASKS: {} } })
    );
    assert!(setup.runs().is_empty(), "nothing may start");

    // tasks/* without the extension: -32021 too, even for a real task.
    let task_id = server
        .client()
        .start_task("ask", json!({ "label": "x" }))
        .await;
    let get = plain.get_reply(&task_id).await;
    assert_eq!((get.status, get.code()), (400, -32021), "{}", get.raw);
}

#[tokio::test]
async fn hybrid_tool_without_the_extension_answers_synchronously() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let plain = server.client().without_tasks();

    let started = Instant::now();
    let reply = plain
        .call("work", json!({ "label": "sync", "seconds": 1 }))
        .await;
    let took = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let result = reply.result();
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("taskId").is_none(), "{result}");
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["label"], "sync", "{result}");
    assert!(
        took >= Duration::from_millis(900),
        "the call waited for the run ({took:?})"
    );
    eprintln!("synchronous 1 s call took {took:?}");
}

// ---------------------------------------------------------------- statelessness

#[tokio::test]
async fn restart_loses_nothing() {
    let setup = Setup::new();
    // Each server has its own HOME, working directory and TMPDIR: the spool
    // is all they share.
    let mut first = Server::start_isolated(&setup).await;
    let client = first.client();
    let task_id = client
        .start_task("work", json!({ "label": "survivor", "seconds": 20 }))
        .await;
    let started = Instant::now();
    assert_eq!(client.get(&task_id).await["status"], "working");
    let run = setup.only_run();
    let pid = common::wait_for("pid.json", LONG, || {
        let p = run.join("pid.json");
        async move { common::recorded_pid(&p) }
    })
    .await;

    first.kill(); // SIGKILL
    assert!(common::alive(pid), "the run outlives its server");

    let second = Server::start_isolated(&setup).await;
    let client = second.client();
    let after = client.get(&task_id).await;
    common::assert_detailed_task(&after, &task_id);
    assert_eq!(after["status"], "working", "{after}");
    // The run's own progress reaches the new server.
    client
        .poll_until(&task_id, LONG, |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("step "))
        })
        .await;

    let done = client
        .poll_until(&task_id, Duration::from_secs(60), |t| {
            t["status"] != "working"
        })
        .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({ "label": "survivor", "seconds": 20, "rows": 42 })
    );
    assert!(
        started.elapsed() >= Duration::from_secs(19),
        "it really ran 20 s"
    );
    eprintln!(
        "restart: 20 s task completed {:?} after start",
        started.elapsed()
    );
}

#[tokio::test]
async fn two_replicas_with_the_same_keys_serve_one_client() {
    let setup = Setup::new();
    // Own HOME, working directory and TMPDIR each; the spool is shared.
    let a = Server::start_isolated(&setup).await;
    let b = Server::start_isolated(&setup).await;
    let (on_a, on_b) = (a.client(), b.client());

    // Started on A, followed to the end on B.
    let task_id = on_a
        .start_task("work", json!({ "label": "ab", "seconds": 1 }))
        .await;
    let done = on_b.wait_terminal(&task_id, LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["label"], "ab");

    // Started on A, read and cancelled on B, seen cancelled on A.
    let task_id = on_a.start_task("sleeper", json!({})).await;
    assert_eq!(on_b.get(&task_id).await["status"], "working");
    assert_eq!(
        on_b.cancel(&task_id).await,
        json!({ "resultType": "complete" })
    );
    let seen = on_a
        .poll_until(&task_id, LONG, |t| t["status"] != "working")
        .await;
    assert_eq!(seen["status"], "cancelled", "{seen}");
}

#[tokio::test]
async fn no_engine_reads_while_no_request_is_in_flight() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();

    let task_id = client
        .start_task("work", json!({ "label": "idle", "seconds": 1 }))
        .await;
    let before = server.engine_calls().await;
    assert!(before >= 1, "starting the run is an engine call");

    // Idle: the run goes on and finishes, the server is asked nothing. Its end
    // is observed on the spool folder, not through the server.
    let idle_from = Instant::now();
    let run = setup.only_run();
    common::wait_for("the run to finish", LONG, || {
        let exit = run.join("exit.json");
        async move { exit.exists().then_some(()) }
    })
    .await;
    let rest = Duration::from_secs(3).saturating_sub(idle_from.elapsed());
    tokio::time::sleep(rest).await; // the idle period under test
    assert_eq!(
        server.engine_calls().await,
        before,
        "the engine was read while no request was in flight"
    );

    let done = client.get(&task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        server.engine_calls().await,
        before + 1,
        "one tasks/get = one engine read"
    );
}

// ---------------------------------------------------------------- sealed handles

/// Flips one character in the middle of the handle's sealed part.
/// Milliseconds since the Unix epoch.
fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn altered(handle: &str) -> String {
    let mut chars: Vec<char> = handle.chars().collect();
    let i = chars.len() * 2 / 3;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[tokio::test]
async fn forged_altered_foreign_and_expired_handles_read_as_unknown() {
    let (alice, bob) = (Bearer::new("alice"), Bearer::new("bob"));
    let setup = Setup::with(Options {
        bearer: vec![alice.clone(), bob.clone()],
        ..Options::default()
    });
    let server = Server::start(&setup).await;
    let as_alice = server.client().with_token(&alice.token);
    let as_bob = server.client().with_token(&bob.token);

    let handle = as_alice.start_task("sleeper", json!({})).await;
    assert!(handle.starts_with("tg3.k1."), "{handle}");
    let start = as_alice
        .call("brief", json!({ "label": "short", "seconds": 0 }))
        .await;
    let start = start.result();
    let expiring = start["taskId"].as_str().expect("taskId").to_owned();
    // The handle stops opening exactly createdAt + ttlMs (1 s) on.
    let created_at = humantime::parse_rfc3339(start["createdAt"].as_str().unwrap()).unwrap();
    let expires_ms = unix_ms(created_at) + start["ttlMs"].as_u64().unwrap();
    assert_eq!(start["ttlMs"], 1000, "{start}");

    // The same request id everywhere, so whole bodies can be compared.
    let probe = |client: Client, method: &'static str, task: String| async move {
        let mut params = json!({ "taskId": task });
        if method == "tasks/update" {
            params["inputResponses"] = json!({});
        }
        client.request_with_id(json!("same"), method, params).await
    };

    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let unknown = probe(as_alice.clone(), method, "tsk_unknown".into()).await;
        assert_eq!(unknown.code(), -32602, "{method}: {}", unknown.raw);
        assert_eq!(
            unknown.error()["message"],
            "Failed to retrieve task: Task not found"
        );
        let payload = handle.rsplit('.').next().unwrap();
        let forged = format!("tg3.k1.{}", "A".repeat(payload.len()));
        let other_key = handle.replacen("tg3.k1.", "tg3.k9.", 1);
        let truncated = handle[..handle.len() - 4].to_owned();
        let cases: Vec<(&str, Client, String)> = vec![
            ("forged", as_alice.clone(), forged),
            ("altered", as_alice.clone(), altered(&handle)),
            ("unknown key id", as_alice.clone(), other_key),
            ("truncated", as_alice.clone(), truncated),
            ("foreign caller", as_bob.clone(), handle.clone()),
        ];
        for (what, client, task) in cases {
            let reply = probe(client, method, task).await;
            assert_eq!(
                (reply.status, &reply.raw),
                (unknown.status, &unknown.raw),
                "{method} with a {what} handle must read exactly like an unknown one"
            );
        }
    }

    // Bob's cancel did nothing: the task still runs for Alice.
    assert_eq!(as_alice.get(&handle).await["status"], "working");

    // Expired (keep_alive = 1s): once it no longer opens, it reads as unknown.
    let unknown = probe(as_alice.clone(), "tasks/get", "tsk_unknown".into()).await;
    let mut readable = 0;
    let expired = common::wait_for("the handle to expire", LONG, async || {
        let sent = unix_ms(std::time::SystemTime::now());
        let reply = probe(as_alice.clone(), "tasks/get", expiring.clone()).await;
        let answered = unix_ms(std::time::SystemTime::now());
        let gone = reply.body.get("error").is_some();
        // The server decided between `sent` and `answered`.
        assert!(
            !gone || answered >= expires_ms,
            "unknown {} ms before its ttl ended: {}",
            expires_ms.saturating_sub(answered),
            reply.raw
        );
        assert!(
            gone || sent < expires_ms,
            "still readable {} ms after its ttl ended",
            sent.saturating_sub(expires_ms)
        );
        if gone {
            Ok(reply)
        } else {
            readable += 1;
            Err(reply.raw)
        }
    })
    .await;
    assert!(
        readable > 0,
        "the handle was read at least once before its ttl ended"
    );
    assert_eq!(
        (expired.status, &expired.raw),
        (unknown.status, &unknown.raw)
    );
}

// ---------------------------------------------------------------- arguments

#[tokio::test]
async fn invalid_arguments_name_the_field_and_start_nothing() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();

    let reply = client
        .call("work", json!({ "label": 5, "seconds": "many" }))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.code(), -32602, "{}", reply.raw);
    let message = reply.error()["message"].as_str().unwrap();
    assert!(message.contains("/label"), "{message}");
    assert!(message.contains("/seconds"), "{message}");

    let missing = client.call("work", json!({ "seconds": 1 })).await;
    assert_eq!(missing.code(), -32602);
    assert!(
        missing.error()["message"]
            .as_str()
            .unwrap()
            .contains("\"label\""),
        "{}",
        missing.raw
    );

    let pattern = client
        .clone()
        .without_tasks()
        .call("work", json!({ "label": "$(rm -rf /)" }))
        .await;
    assert_eq!(pattern.code(), -32602, "{}", pattern.raw);
    assert!(pattern.error()["message"]
        .as_str()
        .unwrap()
        .contains("/label"));

    let unknown = client.call("nope", json!({})).await;
    assert_eq!(unknown.code(), -32602, "{}", unknown.raw);
    assert!(unknown.error()["message"]
        .as_str()
        .unwrap()
        .contains("nope"));

    assert!(
        setup.runs().is_empty(),
        "no run folder may exist: {:?}",
        setup.runs()
    );
    assert!(setup.spool_has_no_files(), "nothing may be staged either");
}

// ---------------------------------------------------------------- transport guards

#[tokio::test]
async fn oversized_body_is_413() {
    const LIMIT_BYTES: usize = 65536;
    let setup = Setup::new(); // max_body_bytes = 65536
    let server = Server::start(&setup).await;
    let client = server.client();
    // A valid request padded with trailing white space (which JSON allows) to
    // exactly `len` bytes.
    let sized = |len: usize| {
        let mut body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "work", "arguments": { "label": "edge", "seconds": 0 },
                        "_meta": common::modern_meta(true) } })
        .to_string();
        assert!(body.len() < len);
        body.push_str(&" ".repeat(len - body.len()));
        body
    };
    let headers = Client::headers_for("tools/call", &json!({ "name": "work" }));

    let over = client.post_raw(&headers, sized(LIMIT_BYTES + 1)).await;
    assert_eq!(over.status, 413, "one byte over the limit: {}", over.raw);
    assert!(over.raw.contains("server.max_body_bytes"), "{}", over.raw);
    assert!(setup.runs().is_empty(), "nothing ran");
    assert_eq!(server.engine_calls().await, 0);

    let at = client.post_raw(&headers, sized(LIMIT_BYTES)).await;
    assert_eq!(at.status, 200, "exactly at the limit is served: {}", at.raw);
    assert_eq!(at.body["result"]["resultType"], "task", "{}", at.raw);
    assert_eq!(setup.runs().len(), 1);
}

#[tokio::test]
async fn foreign_origin_is_403_and_local_origin_is_served() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": { "_meta": common::modern_meta(false) } })
    .to_string();
    let mut headers = Client::headers_for("server/discover", &json!({}));
    headers.push(("origin", "http://evil.example".to_owned()));
    let bad = client.post_raw(&headers, body.clone()).await;
    assert_eq!(bad.status, 403, "{}", bad.raw);

    headers.pop();
    headers.push(("origin", format!("http://localhost:{}", server.port)));
    let good = client.post_raw(&headers, body).await;
    assert_eq!(good.status, 200, "{}", good.raw);
}

/// Sends a raw HTTP/1.1 request (to choose the Host header freely).
async fn raw_http(port: u16, host: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\n\
         Mcp-Method: server/discover\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("response within 10 s")
    .unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

#[tokio::test]
async fn foreign_host_is_403() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": { "_meta": common::modern_meta(false) } })
    .to_string();
    let (status, response) =
        raw_http(server.port, &format!("evil.example:{}", server.port), &body).await;
    assert_eq!(status, 403, "{response}");
    let (status, response) =
        raw_http(server.port, &format!("localhost:{}", server.port), &body).await;
    assert_eq!(status, 200, "{response}");
}

#[tokio::test]
async fn get_and_delete_on_mcp_are_405() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let http = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = http
            .request(method.clone(), server.url())
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405, "{method}");
        assert_eq!(r.headers()["allow"], "POST");
    }
}

#[tokio::test]
async fn unknown_methods_are_32601_with_404() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    for method in ["frobnicate", "tasks/result", "tasks/list"] {
        let reply = client.request(method, json!({ "taskId": "x" })).await;
        assert_eq!(
            (reply.status, reply.code()),
            (404, -32601),
            "{method}: {}",
            reply.raw
        );
    }
}

#[tokio::test]
async fn header_mismatches_are_32020_with_400() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    let params = json!({ "name": "work", "arguments": { "label": "h" }, "_meta": common::modern_meta(true) });
    let body =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
    let good = Client::headers_for("tools/call", &params);
    let without = |name: &str| -> Vec<(&'static str, String)> {
        good.iter().filter(|(k, _)| *k != name).cloned().collect()
    };
    let replace = |name: &str, value: &str| -> Vec<(&'static str, String)> {
        good.iter()
            .map(|(k, v)| {
                (
                    *k,
                    if *k == name {
                        value.to_owned()
                    } else {
                        v.clone()
                    },
                )
            })
            .collect()
    };
    let cases = vec![
        ("no Mcp-Method", without("mcp-method")),
        ("no Mcp-Name", without("mcp-name")),
        ("no MCP-Protocol-Version", without("mcp-protocol-version")),
        ("Mcp-Method differs", replace("mcp-method", "tools/list")),
        ("Mcp-Name differs", replace("mcp-name", "fail")),
        (
            "MCP-Protocol-Version differs",
            replace("mcp-protocol-version", "2025-06-18"),
        ),
    ];
    for (what, headers) in cases {
        let reply = client.post_raw(&headers, body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, -32020),
            "{what}: {}",
            reply.raw
        );
    }
    assert!(
        setup.runs().is_empty(),
        "no run may start on a header mismatch"
    );

    // tasks/*: Mcp-Name must equal the taskId.
    let task_id = client
        .start_task("work", json!({ "label": "h", "seconds": 0 }))
        .await;
    let params = json!({ "taskId": task_id, "_meta": common::modern_meta(true) });
    let body =
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": params }).to_string();
    let mut headers = Client::headers_for("tasks/get", &params);
    headers.retain(|(k, _)| *k != "mcp-name");
    headers.push(("mcp-name", "tsk_other".to_owned()));
    let reply = client.post_raw(&headers, body).await;
    assert_eq!((reply.status, reply.code()), (400, -32020), "{}", reply.raw);
}

#[tokio::test]
async fn missing_client_capabilities_is_32602_with_400() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    let params = json!({ "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN } });
    let body =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params }).to_string();
    let reply = client
        .post_raw(&Client::headers_for("tools/list", &params), body)
        .await;
    assert_eq!((reply.status, reply.code()), (400, -32602), "{}", reply.raw);
    assert!(reply.error()["message"]
        .as_str()
        .unwrap()
        .contains("clientCapabilities"));
}

#[tokio::test]
async fn unsupported_versions_are_32022_naming_the_supported_ones() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    for version in ["2025-11-25", "2026-06-30", "1999-01-01"] {
        let mut meta = common::modern_meta(true);
        meta["io.modelcontextprotocol/protocolVersion"] = json!(version);
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": { "_meta": meta } })
            .to_string();
        let headers = vec![
            ("mcp-protocol-version", version.to_owned()),
            ("mcp-method", "server/discover".to_owned()),
        ];
        let reply = client.post_raw(&headers, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, -32022),
            "{version}: {}",
            reply.raw
        );
        let data = &reply.error()["data"];
        assert_eq!(
            data["supported"],
            json!([MODERN]),
            "{version}: {}",
            reply.raw
        );
        assert_eq!(data["requested"], version);
    }

    // server/discover itself lists every version.
    let discover = client.request("server/discover", json!({})).await;
    let versions = &discover.result()["supportedVersions"];
    assert_eq!(versions[0], MODERN, "{}", discover.raw);
    assert!(versions.as_array().unwrap().contains(&json!("2025-06-18")));
    assert!(discover.result()["capabilities"]["extensions"][common::TASKS].is_object());
}

#[tokio::test]
async fn bearer_auth_is_required_when_configured() {
    let alice = Bearer::new("alice");
    let setup = Setup::with(Options {
        bearer: vec![alice.clone()],
        ..Options::default()
    });
    let server = Server::start(&setup).await;
    for (what, client) in [
        ("no token", server.client()),
        (
            "a wrong token",
            server.client().with_token("token-of-mallory-0123456789"),
        ),
    ] {
        let reply = client.request("server/discover", json!({})).await;
        assert_eq!(reply.status, 401, "{what}: {}", reply.raw);
        let challenge = reply
            .headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(
            challenge
                .as_deref()
                .is_some_and(|c| c.starts_with("Bearer")),
            "{what}: WWW-Authenticate: {challenge:?}"
        );
    }
    let ok = server
        .client()
        .with_token(&alice.token)
        .request("server/discover", json!({}))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.raw);
}

// ---------------------------------------------------------------- legacy

#[tokio::test]
async fn legacy_initialize_hides_async_tools_and_calls_synchronously() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    let post = |headers: Vec<(&'static str, String)>, body: Value| {
        let client = client.clone();
        async move { client.post_raw(&headers, body.to_string()).await }
    };

    let init = post(
        vec![],
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "legacy-test", "version": "1" } } }),
    )
    .await;
    assert_eq!(init.status, 200, "{}", init.raw);
    assert_eq!(init.result()["protocolVersion"], "2025-06-18");
    assert!(init.result()["capabilities"]["tools"].is_object());
    let session = init
        .headers
        .get("mcp-session-id")
        .expect("Mcp-Session-Id")
        .to_str()
        .unwrap()
        .to_owned();
    let headers = vec![
        ("mcp-session-id", session),
        ("mcp-protocol-version", "2025-06-18".to_owned()),
    ];

    let note = post(
        headers.clone(),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    assert_eq!(note.status, 202);

    let list = post(
        headers.clone(),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }),
    )
    .await;
    let names = common::names(list.result()["tools"].as_array().unwrap());
    assert_eq!(
        names,
        ["work", "fail", "brief"],
        "async-only tools are hidden"
    );
    for tool in list.result()["tools"].as_array().unwrap() {
        assert!(
            tool.get("execution").is_none() && tool.get("invocationMode").is_none(),
            "{tool}"
        );
    }

    let call = post(
        headers.clone(),
        json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "work", "arguments": { "label": "old", "seconds": 1 } } }),
    )
    .await;
    let result = call.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["label"], "old", "{result}");
    assert!(
        result.get("resultType").is_none() && result.get("taskId").is_none(),
        "{result}"
    );

    let hidden = post(
        headers,
        json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "ask", "arguments": { "label": "x" } } }),
    )
    .await;
    // Hidden: refused as an unknown tool (-32602) or, per SEP-1391's rule for
    // clients that did not opt in, as an invalid request (-32600).
    assert!(matches!(hidden.code(), -32600 | -32602), "{}", hidden.raw);
    assert!(
        hidden.error()["message"].as_str().unwrap().contains("ask"),
        "{}",
        hidden.raw
    );
    assert_eq!(setup.runs().len(), 1, "only the work call started a run");
}

// ---------------------------------------------------------------- configuration

/// Runs `serve` on a config text; returns (exit code, stderr). `env` adds the key
/// variable unless told not to.
async fn serve_bad_config(setup: &Setup, text: &str, with_key: bool) -> (Option<i32>, String) {
    let path = setup.dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let mut cmd = setup.command(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{}", common::free_port()),
    ]);
    if !with_key {
        cmd.env_remove(common::KEY_VAR);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_for("taskgate to exit", LONG, || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await;
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

#[tokio::test]
async fn bad_configs_exit_2_naming_the_key_and_the_file() {
    let setup = Setup::new();
    let good = std::fs::read_to_string(&setup.config).unwrap();
    let file = setup.dir.path().join("bad.toml").display().to_string();

    let unknown = good.replacen("max_body_bytes", "max_body_bites", 1);
    let tool_unknown = good.replacen(
        "description = \"test tool work\"",
        "description = \"x\"\nfrobnicate = 1",
        1,
    );
    let bad_schema = format!(
        "{good}[[tools]]\nname = \"broken\"\nengine = \"local\"\n\
         input_schema = {{ type = \"object\", properties = {{ x = {{ type = 12 }} }} }}\n\
         target = {{ command = [\"/bin/true\"] }}\n"
    );
    let not_object = format!(
        "{good}[[tools]]\nname = \"broken\"\nengine = \"local\"\n\
         input_schema = {{ type = \"string\" }}\ntarget = {{ command = [\"/bin/true\"] }}\n"
    );
    let cases: Vec<(&str, String, bool, Vec<&str>)> = vec![
        ("unknown key", unknown, true, vec!["server.max_body_bites"]),
        ("unknown tool key", tool_unknown, true, vec!["frobnicate"]),
        (
            "missing key variable",
            good.clone(),
            false,
            vec!["keys.seal[0]", common::KEY_VAR],
        ),
        (
            "bad schema",
            bad_schema,
            true,
            vec!["tools[5].input_schema"],
        ),
        (
            "schema root not an object",
            not_object,
            true,
            vec!["tools[5].input_schema"],
        ),
    ];
    for (what, text, with_key, needles) in cases {
        let (code, stderr) = serve_bad_config(&setup, &text, with_key).await;
        assert_eq!(code, Some(2), "{what}: exit code; stderr: {stderr}");
        assert!(
            stderr.contains(&file),
            "{what}: the file is named: {stderr}"
        );
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{what}: {needle:?} is named: {stderr}"
            );
        }
    }
}
