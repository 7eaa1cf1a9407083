//! Legacy sessions over raw JSON-RPC on Streamable HTTP, against the real
//! binary and the exec engine:
//! - a 2025-06-18 client and each per-tool `legacy` policy (hide, wait with
//!   progress over SSE and a timeout carrying the handle, handles with the
//!   companion tools);
//! - a sealed session id served by a second replica;
//! - 2025-11-25 tasks (SEP-1686) over raw HTTP.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// The tools of the legacy-policy tests.
fn legacy_tools() -> Vec<Tool> {
    vec![
        // async only, default policy: hide
        Tool::new("hidden", "async", "ask.sh", LABEL_SCHEMA).arg("Approve"),
        // hybrid, default policy: wait
        Tool::new("work", "hybrid", "work.sh", WORK_SCHEMA).arg("steps"),
        // wait, but at most 2 s
        Tool::new("slow", "hybrid", "work.sh", WORK_SCHEMA)
            .arg("steps")
            .max_wait("2s"),
        // an async tool whose legacy clients wait, answering its question by elicitation
        Tool::new("approve", "async", "ask.sh", LABEL_SCHEMA)
            .arg("Approve")
            .legacy("wait"),
        // handles
        Tool::new("jobs", "hybrid", "work.sh", WORK_SCHEMA)
            .arg("steps")
            .legacy("handles"),
        Tool::new("daemon", "async", "sleeper.sh", r#"{ type = "object" }"#).legacy("handles"),
        Tool::new("broken", "hybrid", "fail.sh", LABEL_SCHEMA).legacy("handles"),
    ]
}

async fn legacy_client(server: &Server) -> Legacy {
    let mut c = server.legacy();
    let result = c
        .initialize("2025-06-18", json!({ "elicitation": {} }))
        .await;
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert!(result["capabilities"].get("tasks").is_none(), "{result}");
    c
}

fn handle_in(text: &str) -> String {
    let start = text
        .find("tg3.")
        .unwrap_or_else(|| panic!("no handle in {text:?}"));
    text[start..]
        .split(|c: char| c.is_whitespace())
        .next()
        .unwrap()
        .trim_end_matches('.')
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hide_policy() {
    let setup = Setup::with_tools(&legacy_tools());
    let server = Server::start(&setup).await;
    let c = legacy_client(&server).await;
    let tools = c.tools().await;
    let listed = names(&tools);
    assert!(!listed.contains(&"hidden".to_owned()), "{listed:?}");
    for name in ["work", "slow", "approve", "jobs", "daemon", "broken"] {
        assert!(listed.contains(&name.to_owned()), "{name} in {listed:?}");
    }
    for t in &tools {
        assert!(
            t.get("execution").is_none() && t.get("invocationMode").is_none(),
            "{t}"
        );
    }
    let refused = c.call("hidden", json!({ "label": "x" })).await;
    assert_eq!(refused.code(), -32600, "{:?}", refused.response());
    assert!(setup.runs().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_policy_blocks_until_done() {
    let setup = Setup::with_tools(&legacy_tools());
    let server = Server::start(&setup).await;
    let mut c = legacy_client(&server).await;
    c.accept_sse = false;
    let t0 = Instant::now();
    let answer = c.call("work", json!({ "label": "w1", "steps": 3 })).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(550),
        "it waited for the run: {:?}",
        t0.elapsed()
    );
    assert_eq!(answer.content_type, "application/json");
    let result = answer.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({ "label": "w1", "steps": 3 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_policy_streams_progress_then_the_result() {
    let setup = Setup::with_tools(&legacy_tools());
    let server = Server::start(&setup).await;
    let c = legacy_client(&server).await;
    let answer = c
        .request(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "w2", "steps": 5 }, "_meta": { "progressToken": "p-1" } }),
        )
        .await;
    assert!(answer.is_sse(), "{answer:?}");
    let (progress, rest) = answer.messages.split_at(answer.messages.len() - 1);
    assert!(
        !progress.is_empty(),
        "progress before the result: {:?}",
        answer.messages
    );
    let mut last = -1.0;
    for n in progress {
        assert_eq!(n["method"], "notifications/progress", "{n}");
        assert_eq!(n["params"]["progressToken"], "p-1");
        let p = n["params"]["progress"].as_f64().unwrap();
        assert!(p > last, "progress increases: {progress:?}");
        last = p;
    }
    assert!(
        progress
            .iter()
            .any(|n| n["params"]["total"] == 5.0 && n["params"]["message"].is_string()),
        "total and message (2025-06-18): {progress:?}"
    );
    assert_eq!(
        rest[0]["result"]["structuredContent"],
        json!({ "label": "w2", "steps": 5 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_policy_asks_by_elicitation_on_the_call_stream() {
    let setup = Setup::with_tools(&legacy_tools());
    let server = Server::start(&setup).await;
    let c = legacy_client(&server).await;
    let (status, content_type, mut stream) = c
        .open_stream(
            "tools/call",
            json!({ "name": "approve", "arguments": { "label": "r7" } }),
        )
        .await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    let request = stream.next(LIMIT).await.expect("an elicitation request");
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Approve r7?");
    assert!(
        request["params"].get("mode").is_none(),
        "no mode before 2025-11-25: {request}"
    );
    assert_eq!(
        c.respond(
            &request["id"],
            json!({ "action": "accept", "content": { "ok": true } })
        )
        .await,
        202
    );
    let response = loop {
        let m = stream.next(LIMIT).await.expect("the response");
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(
        response["result"]["structuredContent"]["answer"]["content"]["ok"], true,
        "{response}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_policy_timeout_carries_the_handle() {
    let setup = Setup::with_tools(&legacy_tools());
    let server = Server::start(&setup).await;
    let mut c = legacy_client(&server).await;
    c.accept_sse = false;
    let t0 = Instant::now();
    let answer = c.call("slow", json!({ "label": "s1", "steps": 100 })).await;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let result = answer.result();
    assert_eq!(result["isError"], true, "{result}");
    let t = text(result);
    assert!(t.contains("still going after 2s"), "{t}");
    let handle = handle_in(&t);
    // The handle works with the companion tools.
    let s = c
        .call("taskgate_task_status", json!({ "handle": handle }))
        .await;
    assert_eq!(
        s.result()["structuredContent"]["status"],
        "working",
        "{:?}",
        s.response()
    );
    let cancelled = c
        .call("taskgate_task_cancel", json!({ "handle": handle }))
        .await;
    assert_eq!(cancelled.result()["isError"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_policy_and_companion_tools() {
    let setup = Setup::with_tools(&legacy_tools());
    let server = Server::start(&setup).await;
    let c = legacy_client(&server).await;
    let listed = names(&c.tools().await);
    for companion in [
        "taskgate_task_status",
        "taskgate_task_result",
        "taskgate_task_cancel",
    ] {
        assert!(listed.contains(&companion.to_owned()), "{listed:?}");
    }

    let started = c.call("jobs", json!({ "label": "h1", "steps": 5 })).await;
    // It returned at once: the run has not ended yet.
    let run = setup.runs_of("jobs").pop().expect("the run folder");
    assert!(
        !run.join("exit.json").exists(),
        "the call returned before the run ended"
    );
    let started = started.result().clone();
    assert_eq!(started["isError"], false);
    let handle = started["structuredContent"]["handle"]
        .as_str()
        .expect("handle")
        .to_owned();
    assert_eq!(started["structuredContent"]["status"], "working");
    assert_eq!(
        handle_in(&text(&started)),
        handle,
        "the text carries the same handle"
    );

    let early = c
        .call("taskgate_task_result", json!({ "handle": handle }))
        .await;
    assert!(
        text(early.result()).contains("no result yet"),
        "{:?}",
        early.response()
    );
    let done = wait_for("the job to complete", LIMIT, || async {
        let s = c
            .call("taskgate_task_status", json!({ "handle": handle }))
            .await;
        let r = s.result().clone();
        assert!(text(&r).starts_with("jobs: "), "{r}");
        (r["structuredContent"]["status"] == "completed").then_some(r)
    })
    .await;
    assert_eq!(done["isError"], false);
    let result = c
        .call("taskgate_task_result", json!({ "handle": handle }))
        .await;
    assert_eq!(
        result.result()["structuredContent"],
        json!({ "label": "h1", "steps": 5 })
    );

    // A tool error comes back through the result companion.
    let broken = c.call("broken", json!({ "label": "b1" })).await;
    let bh = broken.result()["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for("the broken job to end", LIMIT, || async {
        let s = c
            .call("taskgate_task_status", json!({ "handle": bh }))
            .await;
        (s.result()["structuredContent"]["status"] == "completed").then_some(())
    })
    .await;
    let r = c
        .call("taskgate_task_result", json!({ "handle": bh }))
        .await;
    assert_eq!(r.result()["isError"], true);
    assert!(
        text(r.result()).contains("dataset b1 not found"),
        "{:?}",
        r.response()
    );

    // Cancel.
    let daemon = c.call("daemon", json!({})).await;
    let dh = daemon.result()["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let (shell, child) = wait_for("the daemon's pids", LIMIT, || async {
        let dir = setup.runs_of("daemon").into_iter().next()?;
        let text = std::fs::read_to_string(dir.join("sleeper.pids")).ok()?;
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().ok());
        Some((it.next()??, it.next()??))
    })
    .await;
    let cancel = c
        .call("taskgate_task_cancel", json!({ "handle": dh }))
        .await;
    assert_eq!(cancel.result()["isError"], false);
    assert!(text(cancel.result()).contains("Cancellation of daemon requested"));
    wait_for("the daemon to be cancelled", LIMIT, || async {
        let s = c
            .call("taskgate_task_status", json!({ "handle": dh }))
            .await;
        (s.result()["structuredContent"]["status"] == "canceled").then_some(())
    })
    .await;
    wait_for("the daemon's processes to end", LIMIT, || async {
        (!alive(shell) && !alive(child)).then_some(())
    })
    .await;

    // Made-up handles, and a real one altered by one character.
    let mut altered = handle.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == 'A' { 'B' } else { 'A' });
    for fake in ["job-12345", "tg1.k1.bm90IGEgaGFuZGxl", altered.as_str(), ""] {
        for companion in [
            "taskgate_task_status",
            "taskgate_task_result",
            "taskgate_task_cancel",
        ] {
            let r = c.call(companion, json!({ "handle": fake })).await;
            let r = r.result();
            assert_eq!(r["isError"], true, "{companion} {fake}: {r}");
            let t = text(r);
            assert!(
                t.contains("Only a handle returned by an earlier call is valid")
                    && t.contains("never make one up"),
                "{t}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_serves_the_same_session() {
    let setup = Setup::with_tools(&legacy_tools());
    let a = Server::start(&setup).await;
    let b = Server::start(&setup).await;

    // 2025-06-18: opened on A, served by B.
    let on_a = legacy_client(&a).await;
    let on_b = on_a.at(&b.url());
    assert_eq!(on_b.tools().await, on_a.tools().await);
    assert!(!names(&on_b.tools().await).contains(&"hidden".to_owned()));
    assert_eq!(
        on_b.call("hidden", json!({ "label": "x" })).await.code(),
        -32600
    );
    let started = on_b
        .call("jobs", json!({ "label": "r1", "steps": 1 }))
        .await;
    let handle = started.result()["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let status = on_a
        .call("taskgate_task_status", json!({ "handle": handle }))
        .await;
    assert_eq!(status.result()["isError"], false, "A reads what B started");

    // 2025-11-25: opened on A, tasks created and read on B and A.
    let mut d2 = a.legacy();
    let init = d2
        .initialize("2025-11-25", json!({ "elicitation": { "form": {} } }))
        .await;
    assert!(init["capabilities"]["tasks"].is_object());
    let d2_b = d2.at(&b.url());
    let tools_b = d2_b.tools().await;
    assert_eq!(tools_b, d2.tools().await);
    assert_eq!(
        tool(&tools_b, "hidden")["execution"]["taskSupport"],
        "required",
        "B knows the session is 2025-11-25"
    );
    let created = d2_b
        .request("tools/call", json!({ "name": "work", "arguments": { "label": "r2", "steps": 1 }, "task": { "ttl": 60000 } }))
        .await;
    let task_id = created.result()["task"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    for client in [&d2_b, &d2] {
        let got = client
            .request("tasks/get", json!({ "taskId": task_id }))
            .await;
        assert_eq!(got.result()["taskId"], task_id.as_str());
    }
    let done = d2
        .request("tasks/result", json!({ "taskId": task_id }))
        .await;
    assert_eq!(
        done.result()["structuredContent"],
        json!({ "label": "r2", "steps": 1 })
    );
    let got = d2_b
        .request("tasks/get", json!({ "taskId": task_id }))
        .await;
    assert_eq!(got.result()["status"], "completed");
    // A session id sealed with other keys means nothing to either replica.
    let mut stranger = d2_b.clone();
    stranger.session =
        Some("tg1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into());
    assert_eq!(stranger.request("tools/list", json!({})).await.status, 404);
}

// ----- 2025-11-25 tasks over raw HTTP -----

async fn d2_client(server: &Server) -> Legacy {
    let mut c = server.legacy();
    let result = c
        .initialize("2025-11-25", json!({ "elicitation": { "form": {} } }))
        .await;
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(
        result["capabilities"]["tasks"],
        json!({ "cancel": {}, "requests": { "tools": { "call": {} } } }),
        "only what is implemented (no list): {result}"
    );
    c
}

async fn task_get(c: &Legacy, id: &str) -> Value {
    c.request("tasks/get", json!({ "taskId": id }))
        .await
        .result()
        .clone()
}

fn d2_tools() -> Vec<Tool> {
    dialect_tools()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_tools_call_get_result() {
    let setup = Setup::with_tools(&d2_tools());
    let server = Server::start(&setup).await;
    let c = d2_client(&server).await;
    let tools = c.tools().await;
    assert_eq!(
        tool(&tools, "work")["execution"],
        json!({ "taskSupport": "optional" })
    );
    assert_eq!(
        tool(&tools, "ask")["execution"],
        json!({ "taskSupport": "required" })
    );
    assert!(tool(&tools, "quick").get("execution").is_none());
    assert!(tools.iter().all(|t| t.get("invocationMode").is_none()));

    let id = c
        .start_task("work", json!({ "label": "t1", "steps": 5 }))
        .await;
    let got = task_get(&c, &id).await;
    assert_eq!(got["taskId"], id.as_str());
    assert_eq!(got["status"], "working");
    assert_eq!(
        got["ttl"], 3_600_000,
        "the tool's keep_alive overrides the requested ttl"
    );
    assert!(got.get("task").is_none(), "flat: {got}");

    // The task was working just above; tasks/result waits until it ends.
    let result = c.request("tasks/result", json!({ "taskId": id })).await;
    let result = result.result();
    assert_eq!(
        result["structuredContent"],
        json!({ "label": "t1", "steps": 5 })
    );
    assert_eq!(result["_meta"][RELATED_TASK], json!({ "taskId": id }));
    assert_eq!(task_get(&c, &id).await["status"], "completed");
    // Cancelling a terminal task fails.
    let late = c.request("tasks/cancel", json!({ "taskId": id })).await;
    assert_eq!(late.code(), -32602);
    assert!(late.message().contains("terminal"), "{}", late.message());

    // A tool error: failed, yet tasks/result succeeds with isError.
    let id = c.start_task("fail", json!({ "label": "f1" })).await;
    let r = c.request("tasks/result", json!({ "taskId": id })).await;
    assert_eq!(r.result()["isError"], true);
    assert_eq!(task_get(&c, &id).await["status"], "failed");

    // Unknown task; an async-only tool without task; a sync tool with one.
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = c
            .request(method, json!({ "taskId": "tg1.k1.bm90LWEtdGFzaw" }))
            .await;
        assert_eq!(r.code(), -32602, "{method}");
    }
    assert_eq!(c.call("ask", json!({ "label": "x" })).await.code(), -32601);
    let sync_task = c
        .request(
            "tools/call",
            json!({ "name": "quick", "arguments": { "label": "q" }, "task": {} }),
        )
        .await;
    assert_eq!(sync_task.code(), -32601);
    // A hybrid tool called without a task runs synchronously.
    let plain = c.call("work", json!({ "label": "p", "steps": 1 })).await;
    assert_eq!(
        plain.result()["structuredContent"],
        json!({ "label": "p", "steps": 1 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_cancel() {
    let setup = Setup::with_tools(&d2_tools());
    let server = Server::start(&setup).await;
    let c = d2_client(&server).await;
    let id = c.start_task("sleeper", json!({})).await;
    let (shell, child) = wait_for("the sleeper's pids", LIMIT, || async {
        let dir = setup.runs_of("sleeper").into_iter().next()?;
        let text = std::fs::read_to_string(dir.join("sleeper.pids")).ok()?;
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().ok());
        Some((it.next()??, it.next()??))
    })
    .await;
    let cancelled = c.request("tasks/cancel", json!({ "taskId": id })).await;
    assert_eq!(
        cancelled.result()["status"],
        "cancelled",
        "{:?}",
        cancelled.response()
    );
    assert_eq!(cancelled.result()["taskId"], id.as_str());
    assert_eq!(task_get(&c, &id).await["status"], "cancelled");
    wait_for("the sleeper's processes to end", LIMIT, || async {
        (!alive(shell) && !alive(child)).then_some(())
    })
    .await;
    let again = c.request("tasks/cancel", json!({ "taskId": id })).await;
    assert_eq!(again.code(), -32602);
    let r = c.request("tasks/result", json!({ "taskId": id })).await;
    assert_eq!(r.code(), -32603);
    assert!(r.message().contains("cancelled"), "{}", r.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_input_required_on_the_result_stream() {
    let setup = Setup::with_tools(&d2_tools());
    let server = Server::start(&setup).await;
    let c = d2_client(&server).await;
    let id = c.start_task("ask", json!({ "label": "d2" })).await;
    wait_for("input_required", LIMIT, || async {
        (task_get(&c, &id).await["status"] == "input_required").then_some(())
    })
    .await;

    let (status, content_type, mut stream) =
        c.open_stream("tasks/result", json!({ "taskId": id })).await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    // The task's status comes first (notifications/tasks/status), then the question.
    let request = loop {
        let m = stream.next(LIMIT).await.expect("elicitation");
        if m["method"] != "notifications/tasks/status" {
            break m;
        }
        assert_eq!(m["params"]["status"], "input_required", "{m}");
    };
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["mode"], "form");
    assert_eq!(request["params"]["message"], "Approve d2?");
    assert_eq!(
        request["params"]["_meta"][RELATED_TASK],
        json!({ "taskId": id })
    );
    let code = c
        .respond(
            &request["id"],
            json!({ "action": "accept", "content": { "ok": true }, "_meta": { RELATED_TASK: { "taskId": id } } }),
        )
        .await;
    assert_eq!(code, 202);
    let response = loop {
        let m = stream.next(LIMIT).await.expect("the tasks/result response");
        if m.get("method").is_none() {
            break m;
        }
        assert_ne!(m["method"], "elicitation/create", "asked once only: {m}");
    };
    let result = &response["result"];
    assert_eq!(
        result["structuredContent"]["answer"]["content"]["ok"], true,
        "{response}"
    );
    assert_eq!(result["_meta"][RELATED_TASK], json!({ "taskId": id }));
    assert_eq!(task_get(&c, &id).await["status"], "completed");
}
