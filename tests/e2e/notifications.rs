//! Push notifications through the built binary:
//! - 2026-07-28 `subscriptions/listen` with `notifications.taskIds` over HTTP
//!   (a per-request SSE stream) and stdio: the acknowledgement, one
//!   `notifications/tasks` per change (the `DetailedTask` of `tasks/get`), the
//!   end at terminal, at `server.max_listen`, or when the client cancels, and
//!   the refusals (no extension; ids that do not open, alike);
//! - a cancelled stream leaves no engine calls behind;
//! - 2025-11-25 `notifications/tasks/status` on the `tasks/result` stream.

use crate::common;

use std::time::Duration;

use common::{
    assert_detailed_task, dialect_tools, metric_sum, modern_meta, wait_for, Bearer, Options,
    Server, Setup, SseReader, StdioServer, MODERN,
};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Opens `subscriptions/listen` (request id `id`) for `task_ids`; `tasks`
/// declares the extension. Returns the HTTP status and the stream.
async fn open_listen(
    url: &str,
    token: Option<&str>,
    id: &str,
    task_ids: &[&str],
    tasks: bool,
) -> (u16, SseReader) {
    let response = post_listen(url, token, id, task_ids, tasks).await;
    (response.status().as_u16(), SseReader::new(response))
}

/// POSTs `subscriptions/listen` and returns the raw response.
async fn post_listen(
    url: &str,
    token: Option<&str>,
    id: &str,
    task_ids: &[&str],
    tasks: bool,
) -> reqwest::Response {
    post_listen_meta(url, token, id, task_ids, modern_meta(tasks)).await
}

/// [`post_listen`] with the request's own `_meta`.
async fn post_listen_meta(
    url: &str,
    token: Option<&str>,
    id: &str,
    task_ids: &[&str],
    meta: Value,
) -> reqwest::Response {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": task_ids }, "_meta": meta },
    });
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen");
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.body(body.to_string()).send().await.expect("POST /mcp")
}

/// Reads the rest of a listen stream: its notifications and its closing
/// response (the stream must end after it).
async fn rest_of(stream: &mut SseReader) -> (Vec<Value>, Value) {
    let mut notes = Vec::new();
    loop {
        let m = stream
            .next(LIMIT)
            .await
            .expect("the stream ends with a response");
        if m.get("method").is_none() {
            assert!(
                stream.next(LIMIT).await.is_none(),
                "nothing after the response"
            );
            return (notes, m);
        }
        notes.push(m);
    }
}

fn assert_ack(ack: &Value, id: &str, accepted: &[&str]) {
    assert_eq!(
        ack,
        &json!({ "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": { "_meta": { SUBSCRIPTION_ID: id }, "notifications": { "taskIds": accepted } } }),
    );
}

fn assert_closing(response: &Value, id: &str) {
    assert_eq!(
        response,
        &json!({ "jsonrpc": "2.0", "id": id,
            "result": { "resultType": "complete", "_meta": { SUBSCRIPTION_ID: id } } }),
    );
}

/// The `DetailedTask` a notification carries, checked to be for `task_id` and
/// this subscription.
fn task_of(note: &Value, id: &str, task_id: &str) -> Value {
    assert_eq!(note["method"], "notifications/tasks", "{note}");
    let mut task = note["params"].clone();
    assert_eq!(task["_meta"], json!({ SUBSCRIPTION_ID: id }), "{note}");
    task.as_object_mut().unwrap().remove("_meta");
    assert!(
        task.get("resultType").is_none(),
        "a notification, not a result: {note}"
    );
    task["resultType"] = json!("complete");
    assert_detailed_task(&task, task_id);
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_acknowledges_then_notifies_each_change_until_terminal() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c
        .start_task("work", json!({ "label": "pushed", "steps": 6 }))
        .await;

    let (status, mut stream) =
        open_listen(&server.url(), None, "listen-1", &[&task_id], true).await;
    assert_eq!(status, 200);
    let ack = stream.next(LIMIT).await.expect("ack");
    assert_ack(&ack, "listen-1", &[&task_id]);
    let (notes, response) = rest_of(&mut stream).await;
    assert_closing(&response, "listen-1");

    let tasks: Vec<Value> = notes
        .iter()
        .map(|n| task_of(n, "listen-1", &task_id))
        .collect();
    let last = tasks.last().expect("notifications");
    assert_eq!(last["status"], "completed", "{notes:?}");
    assert_eq!(last["result"]["structuredContent"]["label"], "pushed");
    assert_eq!(last["result"]["isError"], false);
    // Several working states with their step messages came before, each one
    // different from the one before it (a notification per change).
    let messages: Vec<&str> = tasks
        .iter()
        .filter(|t| t["status"] == "working")
        .filter_map(|t| t["statusMessage"].as_str())
        .collect();
    assert!(messages.len() >= 2, "working steps notified: {notes:?}");
    for pair in tasks.windows(2) {
        assert_ne!(pair[0], pair[1], "no notification repeats the one before");
    }
    // The completed task is the one tasks/get returns.
    let got = c.get(&task_id).await;
    assert_eq!(got["result"], last["result"]);
    assert_eq!(got["status"], "completed");
}

/// Streams on one run are sent the same text for its changes (written once
/// and shared): byte for byte the same for the same request, and only their
/// own subscription id apart for two requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_on_one_run_get_the_same_text_apart_from_their_own_ids() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c.start_task("sleeper", json!({})).await;
    let mut streams = Vec::new();
    for id in ["same", "same", "other"] {
        let (status, mut stream) = open_listen(&server.url(), None, id, &[&task_id], true).await;
        assert_eq!(status, 200);
        assert_ack(&stream.next(LIMIT).await.expect("ack"), id, &[&task_id]);
        let first = stream.next(LIMIT).await.expect("the current state");
        assert_eq!(task_of(&first, id, &task_id)["status"], "working");
        streams.push((id, stream));
    }
    // The change every stream sees from the run's one watch.
    c.cancel(&task_id).await;
    for (id, stream) in &mut streams {
        let (notes, response) = rest_of(stream).await;
        assert_closing(&response, id);
        let last = notes.last().expect("the terminal notification");
        assert_eq!(
            task_of(last, id, &task_id)["status"],
            "cancelled",
            "{notes:?}"
        );
    }
    let raw: Vec<&str> = streams.iter().map(|(_, s)| s.raw.as_str()).collect();
    assert_eq!(raw[0], raw[1], "the same request, the same bytes");
    assert_ne!(raw[0], raw[2]);
    assert_eq!(
        raw[2].replace("\"other\"", "\"same\""),
        raw[0],
        "another request: only its own id differs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_do_not_open_or_whose_run_is_gone_are_left_out_alike() {
    let (alice, bob) = (Bearer::new("alice"), Bearer::new("bob"));
    let setup = Setup::with(Options {
        bearer: vec![alice.clone(), bob.clone()],
        ..Options::default()
    });
    let server = Server::start(&setup).await;
    let a = server.client().with_token(&alice.token);
    let b = server.client().with_token(&bob.token);
    // `gone`: a handle of alice's whose run its engine no longer knows.
    let gone = a.start_task("sleeper", json!({})).await;
    let gone_run = setup.only_run();
    a.cancel(&gone).await;
    wait_for("the cancelled run", LIMIT, async || {
        (a.get(&gone).await["status"] == "cancelled").then_some(())
    })
    .await;
    // Its supervisor may still be writing its last record: retry until empty.
    wait_for("the run folder removed", LIMIT, async || {
        std::fs::remove_dir_all(&gone_run).map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(
        a.get_reply(&gone).await.code(),
        -32602,
        "unknown to tasks/get"
    );
    let mine = a.start_task("sleeper", json!({})).await;
    let theirs = b.start_task("sleeper", json!({})).await;
    let mut forged = mine.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });

    // Each refused id alone: the same acknowledgement (none accepted) and the
    // same closing result, whatever the reason.
    let mut seen = Vec::new();
    for refused in [
        theirs.as_str(),
        forged.as_str(),
        gone.as_str(),
        "tg1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "not-a-handle",
    ] {
        let (status, mut stream) =
            open_listen(&server.url(), Some(&alice.token), "l", &[refused], true).await;
        assert_eq!(status, 200);
        let ack = stream.next(LIMIT).await.expect("ack");
        let (notes, response) = rest_of(&mut stream).await;
        assert!(notes.is_empty(), "{notes:?}");
        assert_closing(&response, "l");
        seen.push((ack, response));
    }
    for s in &seen {
        assert_eq!(s, &seen[0], "refused ids are answered alike");
    }
    assert_ack(&seen[0].0, "l", &[]);

    // Mixed with a readable one: only that one is accepted and followed.
    let (_, mut stream) = open_listen(
        &server.url(),
        Some(&alice.token),
        "m",
        &[&theirs, &mine, &forged],
        true,
    )
    .await;
    assert_ack(&stream.next(LIMIT).await.expect("ack"), "m", &[&mine]);
    let first = stream.next(LIMIT).await.expect("the current state");
    assert_eq!(task_of(&first, "m", &mine)["status"], "working");
    drop(stream);
    a.cancel(&mine).await;
    b.cancel(&theirs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_for_tasks_without_the_extension_is_refused_like_tasks_get() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c.start_task("sleeper", json!({})).await;
    let response = post_listen(&server.url(), None, "x", &[&task_id], false).await;
    let status = response.status().as_u16();
    let refusal: Value = response.json().await.expect("a JSON error");
    let get = c.clone().without_tasks().get_reply(&task_id).await;
    assert_eq!(status, get.status);
    assert_eq!(status, 400);
    assert_eq!(refusal["error"]["code"], -32021, "{refusal}");
    assert_eq!(refusal["error"], get.error().clone());
    assert_eq!(refusal["id"], "x");
    c.cancel(&task_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_at_server_max_listen() {
    let mut setup = Setup::with_tools(&dialect_tools());
    setup
        .extra_env
        .push(("TASKGATE__SERVER__MAX_LISTEN".into(), "1s".into()));
    let server = Server::start(&setup).await;
    let c = server.client();
    // The sleeper never ends by itself: only the bound ends the stream.
    let task_id = c.start_task("sleeper", json!({})).await;
    let (_, mut stream) = open_listen(&server.url(), None, "bounded", &[&task_id], true).await;
    assert_ack(
        &stream.next(LIMIT).await.expect("ack"),
        "bounded",
        &[&task_id],
    );
    let (notes, response) = rest_of(&mut stream).await;
    assert_closing(&response, "bounded");
    assert!(notes
        .iter()
        .all(|n| task_of(n, "bounded", &task_id)["status"] == "working"));
    assert_eq!(c.get(&task_id).await["status"], "working");
    c.cancel(&task_id).await;
}

async fn waits_and_calls(server: &Server) -> (u64, u64) {
    let text = server.metrics().await;
    (
        metric_sum(&text, "taskgate_waits_in_flight", &[]),
        metric_sum(&text, "taskgate_engine_calls_total", &[]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_leaves_no_engine_calls_behind() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c.start_task("sleeper", json!({})).await;
    // Two streams on one run, then both closed by the client.
    let (_, mut one) = open_listen(&server.url(), None, "one", &[&task_id], true).await;
    let (_, mut two) = open_listen(&server.url(), None, "two", &[&task_id], true).await;
    for (s, id) in [(&mut one, "one"), (&mut two, "two")] {
        assert_ack(&s.next(LIMIT).await.expect("ack"), id, &[&task_id]);
        s.next(LIMIT).await.expect("the current state");
    }
    let (waits, before) = waits_and_calls(&server).await;
    assert_eq!(waits, 2, "each open stream holds a wait slot");
    // While open, the run is watched (read at its poll interval).
    wait_for("the watch reading the run", LIMIT, async || {
        (waits_and_calls(&server).await.1 > before).then_some(())
    })
    .await;
    drop(one);
    drop(two);
    wait_for("the slots given back", LIMIT, async || {
        let (waits, _) = waits_and_calls(&server).await;
        (waits == 0).then_some(())
    })
    .await;
    let (_, settled) = waits_and_calls(&server).await;
    // Five poll intervals (200 ms) later: not one more engine call.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (_, after) = waits_and_calls(&server).await;
    assert_eq!(after, settled, "no engine call after the streams closed");
    c.cancel(&task_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_listen_notifies_on_stdout_and_stops_on_cancel() {
    let setup = Setup::with_tools(&dialect_tools());
    let mut s = StdioServer::start(&setup);
    let started = s
        .result(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "io", "steps": 3 } }),
        )
        .await;
    let task_id = started["taskId"].as_str().unwrap().to_owned();
    let id = s
        .send_request(
            "subscriptions/listen",
            json!({ "notifications": { "taskIds": [task_id] }, "_meta": modern_meta(true) }),
        )
        .await;
    let response = s.response(&id, LIMIT).await;
    assert_eq!(
        response,
        json!({ "jsonrpc": "2.0", "id": id, "result": { "resultType": "complete", "_meta": { SUBSCRIPTION_ID: id } } })
    );
    let lines: Vec<Value> = s
        .seen
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ack = lines
        .iter()
        .find(|m| m["method"] == "notifications/subscriptions/acknowledged")
        .expect("ack");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task_id]));
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], id);
    let notes: Vec<&Value> = lines
        .iter()
        .filter(|m| m["method"] == "notifications/tasks")
        .collect();
    assert_eq!(notes.last().unwrap()["params"]["status"], "completed");
    assert!(notes
        .iter()
        .all(|n| n["params"]["_meta"][SUBSCRIPTION_ID] == id));

    // A listen stream the client cancels ends without a response.
    let sleeper = s
        .result("tools/call", json!({ "name": "sleeper", "arguments": {} }))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let listen = s
        .send_request(
            "subscriptions/listen",
            json!({ "notifications": { "taskIds": [sleeper] }, "_meta": modern_meta(true) }),
        )
        .await;
    s.send(
        &json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": listen, "_meta": modern_meta(true) } }),
    )
    .await;
    s.result("tasks/cancel", json!({ "taskId": sleeper })).await;
    s.close(LIMIT).await;
    assert!(
        !s.seen.iter().any(|l| {
            let m: Value = serde_json::from_str(l).unwrap();
            m.get("method").is_none() && m["id"] == listen
        }),
        "a cancelled stream sends no response"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_status_notifications_on_the_result_stream() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let mut c = server.legacy();
    c.initialize("2025-11-25", json!({})).await;
    let task_id = c
        .start_task("work", json!({ "label": "d2push", "steps": 5 }))
        .await;
    let (status, content_type, mut stream) = c
        .open_stream("tasks/result", json!({ "taskId": task_id }))
        .await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    let mut notes = Vec::new();
    let response = loop {
        let m = stream.next(LIMIT).await.expect("the result");
        if m.get("method").is_none() {
            break m;
        }
        notes.push(m);
    };
    assert_eq!(
        response["result"]["structuredContent"]["label"], "d2push",
        "{response}"
    );
    assert!(notes.len() >= 2, "{notes:?}");
    for n in &notes {
        assert_eq!(n["method"], "notifications/tasks/status", "{n}");
        let task = &n["params"];
        assert_eq!(task["taskId"], task_id.as_str());
        assert!(
            task["ttl"].is_number() && task["createdAt"].is_string(),
            "{n}"
        );
        assert!(
            task.get("_meta").is_none(),
            "no related-task on status: {n}"
        );
    }
    assert!(notes.iter().any(|n| n["params"]["statusMessage"]
        .as_str()
        .is_some_and(|m| m.starts_with("step"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_stream_carries_keep_alive_comments() {
    let mut setup = Setup::with_tools(&dialect_tools());
    setup
        .extra_env
        .push(("TASKGATE__SERVER__LISTEN_KEEP_ALIVE".into(), "100ms".into()));
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c.start_task("sleeper", json!({})).await;
    let mut response = post_listen(&server.url(), None, "quiet", &[&task_id], true).await;
    assert_eq!(
        common::header(&response, "x-accel-buffering").as_deref(),
        Some("no")
    );
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !text.contains("\n\n: keep-alive\n\n") {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no keep-alive comment; got {text:?}"))
            .expect("SSE body")
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);
    c.cancel(&task_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_holds_a_wait_slot() {
    let mut setup = Setup::with_tools(&dialect_tools());
    setup
        .extra_env
        .push(("TASKGATE__SERVER__MAX_WAITS_PER_CALLER".into(), "1".into()));
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c.start_task("sleeper", json!({})).await;
    let (_, mut first) = open_listen(&server.url(), None, "first", &[&task_id], true).await;
    assert_ack(&first.next(LIMIT).await.expect("ack"), "first", &[&task_id]);
    let refused: Value = post_listen(&server.url(), None, "second", &[&task_id], true)
        .await
        .json()
        .await
        .expect("a JSON error");
    common::assert_bound_refusal(&refused["error"], "max_waits_per_caller");
    drop(first);
    // The slot comes back with the closed stream.
    wait_for("the slot given back", LIMIT, async || {
        let response = post_listen(&server.url(), None, "third", &[&task_id], true).await;
        let mut stream = SseReader::new(response);
        // Until the server has seen the first stream close, the third is
        // refused as the second was: a JSON answer, no stream message.
        let Some(first) = stream.next(LIMIT).await else {
            return Err("no stream message yet (still refused)".to_owned());
        };
        (first["method"] == "notifications/subscriptions/acknowledged")
            .then_some(())
            .ok_or_else(|| first.to_string())
    })
    .await;
    c.cancel(&task_id).await;
}

/// A listen request that declared the tasks extension but no input type sees
/// the task wait for input, never the question itself (issue 16 item 3 for the
/// push path); a request that declares elicitation gets the input request.
#[tokio::test]
async fn a_stream_without_elicitation_never_carries_an_input_request() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let c = server.client();
    let task_id = c.start_task("ask", json!({ "label": "pushed-ask" })).await;
    let mut meta = modern_meta(true);
    meta["io.modelcontextprotocol/clientCapabilities"]
        .as_object_mut()
        .unwrap()
        .remove("elicitation");
    let response = post_listen_meta(&server.url(), None, "quiet", &[&task_id], meta).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut quiet = SseReader::new(response);
    let ack = quiet.next(LIMIT).await.expect("ack");
    assert_ack(&ack, "quiet", &[&task_id]);
    let waiting = loop {
        let note = quiet.next(LIMIT).await.expect("a notification");
        let task = note["params"].clone();
        assert!(
            task.get("inputRequests").is_none() && !note.to_string().contains("elicitation/create"),
            "an input request reached a stream that did not declare elicitation: {note}"
        );
        if task["status"] == "input_required" {
            break task;
        }
    };
    assert!(
        waiting["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("elicitation")),
        "{waiting}"
    );
    drop(quiet);
    // The same task on a stream that declared it: the question is there.
    let (_, mut asking) = open_listen(&server.url(), None, "asking", &[&task_id], true).await;
    let _ = asking.next(LIMIT).await.expect("ack");
    let note = asking.next(LIMIT).await.expect("the current state");
    assert_eq!(note["params"]["status"], "input_required", "{note}");
    assert_eq!(
        note["params"]["inputRequests"]["approve"]["method"], "elicitation/create",
        "{note}"
    );
}
