//! SEP-1391 long-running operations (dialect D4) over raw JSON-RPC on
//! Streamable HTTP, against the real binary and the exec engine: the opt-in,
//! the filtered tool list, token retries, every status (submitted, working,
//! input_required, completed, failed, canceled), results, and each error path.
//! The last test measures what a status lookup by token costs.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// A 2025-06-18 session that opted in to SEP-1391.
async fn opted(server: &Server) -> Legacy {
    let mut c = server.legacy();
    let result = c
        .initialize(
            "2025-06-18",
            json!({ "elicitation": {}, "experimental": { SEP1391: {} } }),
        )
        .await;
    assert_eq!(
        result["capabilities"]["experimental"][SEP1391],
        json!({}),
        "the opt-in is echoed: {result}"
    );
    c
}

/// A 2025-06-18 session that did not opt in.
async fn plain(server: &Server) -> Legacy {
    let mut c = server.legacy();
    let result = c
        .initialize("2025-06-18", json!({ "elicitation": {} }))
        .await;
    assert!(
        result["capabilities"].get("experimental").is_none(),
        "{result}"
    );
    c
}

async fn start_op(c: &Legacy, tool: &str, arguments: Value, token: &str) -> Value {
    c.call_op(tool, arguments, token, 120)
        .await
        .result()
        .clone()
}

/// Polls `tools/async/status` until `done` holds for its result; returns every
/// status word seen, in order (repeats collapsed), and the last result.
async fn poll_until(
    c: &Legacy,
    token: &str,
    done: impl Fn(&Value) -> bool,
) -> (Vec<String>, Value) {
    let mut seen: Vec<String> = Vec::new();
    let result = wait_for(&format!("operation {token}"), LIMIT, async || {
        let answer = c.op_status(token).await;
        let result = answer.result().clone();
        let word = result["status"].as_str().expect("status").to_owned();
        if seen.last() != Some(&word) {
            seen.push(word);
        }
        if done(&result) {
            Ok(result)
        } else {
            Err(format!("seen {seen:?}, last {result}"))
        }
    })
    .await;
    (seen, result)
}

fn is(word: &'static str) -> impl Fn(&Value) -> bool {
    move |r: &Value| r["status"] == word
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opt_in_session_and_filtered_tool_list() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;

    let c = opted(&server).await;
    let session = c.session.clone().unwrap();
    assert!(
        session.len() > 40,
        "a sealed session id, not a counter: {session}"
    );
    let tools = c.tools().await;
    let listed: BTreeSet<String> = names(&tools).into_iter().collect();
    for name in ["work", "fail", "ask", "sleeper", "brief", "quick"] {
        assert!(
            listed.contains(name),
            "{name} listed for an opted-in client: {listed:?}"
        );
    }
    assert_eq!(tool(&tools, "ask")["invocationMode"], "async");
    assert_eq!(
        tool(&tools, "work")["invocationMode"],
        "async",
        "hybrid tools are called the LRO way"
    );
    assert_eq!(tool(&tools, "quick")["invocationMode"], "sync");
    for t in &tools {
        assert!(
            t.get("execution").is_none(),
            "no 2025-11-25 execution in D4: {t}"
        );
    }

    // The opt-in lives in the sealed session id only: the same request
    // without it is an ordinary legacy request.
    let mut anonymous = c.clone();
    anonymous.session = None;
    let tools = anonymous.tools().await;
    assert!(
        tools.iter().all(|t| t.get("invocationMode").is_none()),
        "{tools:?}"
    );
    // A session id that was not sealed by the server is refused.
    let mut forged = c.clone();
    forged.session = Some(format!("{}x", &session[..session.len() - 1]));
    assert_eq!(forged.request("tools/list", json!({})).await.status, 404);

    let p = plain(&server).await;
    let tools = p.tools().await;
    let listed: BTreeSet<String> = names(&tools).into_iter().collect();
    assert_eq!(
        listed,
        ["brief", "fail", "quick", "work"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        "async-only tools are hidden from a client that did not opt in"
    );
    assert!(
        tools.iter().all(|t| t.get("invocationMode").is_none()),
        "{tools:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_retry_status_to_completed_and_result() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-retry-1";
    let args = json!({ "label": "alpha", "steps": 5 });

    let first = start_op(&c, "work", args.clone(), token).await;
    let op = &first["operation"];
    assert_eq!(op["token"], token);
    assert_eq!(op["status"], "submitted");
    assert_eq!(
        op["keepAlive"], 120,
        "the requested keepAlive, within the tool's 1h: {first}"
    );
    assert_eq!(
        op["pollFrequency"], 1,
        "poll_interval 200ms rounds up to 1 s"
    );
    assert_eq!(first["isError"], false);

    // The same token and arguments: the same operation, the same run.
    let again = start_op(&c, "work", json!({ "steps": 5, "label": "alpha" }), token).await;
    assert_eq!(again["operation"], first["operation"]);
    assert_eq!(
        setup.runs_of("work").len(),
        1,
        "one run folder: {:?}",
        setup.runs()
    );
    // The same token with other arguments is refused, and starts nothing.
    let other = c
        .request(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "beta", "steps": 5 }, "operation": { "token": token } }),
        )
        .await;
    assert_eq!(other.code(), -32602, "{:?}", other.response());
    assert!(
        other.message().contains("already used"),
        "{}",
        other.message()
    );
    assert_eq!(setup.runs().len(), 1);

    let (seen, last) = poll_until(&c, token, is("completed")).await;
    assert_eq!(
        seen.first().map(String::as_str),
        Some("working"),
        "{seen:?}"
    );
    assert_eq!(seen, vec!["working", "completed"], "statuses seen in order");
    assert!(last.get("error").is_none(), "{last}");

    let result = c.op_result(token).await;
    let result = &result.result()["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({ "label": "alpha", "steps": 5 })
    );
    assert!(
        result.get("operation").is_none(),
        "the result holds no operation part: {result}"
    );
}

/// The client's keepAlive is honoured within the tool's `keep_alive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requested_keep_alive_within_the_tools() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let short = c
        .call_op("work", json!({ "label": "s", "steps": 1 }), "op-short", 30)
        .await;
    assert_eq!(
        short.result()["operation"]["keepAlive"],
        30,
        "{:?}",
        short.response()
    );
    // More than the tool's keep_alive (1h) is cut to it; `null` (unlimited) too.
    for asked in [json!(86_400), Value::Null] {
        let long = c
            .request(
                "tools/call",
                json!({ "name": "work", "arguments": { "label": "long", "steps": 1 },
                        "operation": { "token": format!("op-long-{asked}"), "keepAlive": asked } }),
            )
            .await;
        assert_eq!(
            long.result()["operation"]["keepAlive"],
            3600,
            "{:?}",
            long.response()
        );
    }
    let bad = c
        .request(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "x" }, "operation": { "token": "op-bad-keep", "keepAlive": "1h" } }),
        )
        .await;
    assert_eq!(bad.code(), -32602, "{:?}", bad.response());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_required_round_trip() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-ask-1";
    start_op(&c, "ask", json!({ "label": "v42" }), token).await;

    // Poll until a status request finds the run asking: that request's SSE
    // stream carries the server's elicitation request, and stays open until
    // the answer (posted while it is open) moved the run on.
    let deadline = Instant::now() + LIMIT;
    let (answer, asked) = loop {
        let (answer, asked) = c
            .request_answering("tools/async/status", json!({ "token": token }), |_| {
                json!({ "action": "accept", "content": { "ok": true }, "_operation": { "token": token } })
            })
            .await;
        if !asked.is_empty() {
            break (answer, asked);
        }
        assert_eq!(
            answer.result()["status"],
            "working",
            "{:?}",
            answer.response()
        );
        assert!(Instant::now() < deadline, "never asked for input");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(answer.is_sse(), "{answer:?}");
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    let request = &asked[0];
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["_operation"]["token"], token, "{request}");
    assert_eq!(request["params"]["message"], "Approve v42?");
    assert!(request["params"]["requestedSchema"]["properties"]["ok"].is_object());
    assert!(request["id"].is_string(), "{request}");
    assert_ne!(
        answer.result()["status"],
        "input_required",
        "the status answered after the answer arrived: {:?}",
        answer.response()
    );

    let (seen, _) = poll_until(&c, token, is("completed")).await;
    assert!(
        !seen.contains(&"input_required".to_owned()),
        "answered: {seen:?}"
    );
    let result = c.op_result(token).await;
    let result = &result.result()["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["label"], "v42");
    assert_eq!(result["structuredContent"]["answer"]["action"], "accept");
    assert_eq!(result["structuredContent"]["answer"]["content"]["ok"], true);
}

/// A client that keeps polling while its person thinks must not be asked the
/// same question again by every poll (a host would show a new prompt each
/// time): the status request that asked stays open until the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_asked_once_while_the_client_polls() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-ask-once";
    start_op(&c, "ask", json!({ "label": "v7" }), token).await;

    let status = json!({ "token": token });
    let deadline = Instant::now() + LIMIT;
    let (first, mut stream) = loop {
        let (code, _, mut reader) = c.open_stream("tools/async/status", status.clone()).await;
        assert_eq!(code, 200);
        let message = reader.next(LIMIT).await.expect("an answer");
        if message["method"] == "elicitation/create" {
            break (message, reader);
        }
        assert_eq!(message["result"]["status"], "working", "{message}");
        assert!(Instant::now() < deadline, "never asked for input");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The person takes a moment (think time, not a wait for the server);
    // meanwhile the client polls again whenever a status answer has ended,
    // at the operation's pollFrequency-like pace.
    let mut asked = vec![first.clone()];
    let think = tokio::time::Instant::now() + Duration::from_millis(2500);
    let mut polls = 1;
    loop {
        match tokio::time::timeout_at(think, stream.next(LIMIT)).await {
            Err(_) => break,
            Ok(Some(m)) if m["method"] == "elicitation/create" => asked.push(m),
            Ok(Some(m)) => {
                assert_eq!(m["result"]["status"], "input_required", "{m}");
            }
            Ok(None) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                polls += 1;
                stream = c.open_stream("tools/async/status", status.clone()).await.2;
            }
        }
    }
    assert_eq!(
        asked.len(),
        1,
        "one elicitation/create for one question over {polls} polls: {asked:?}"
    );
    let code = c
        .respond(
            &first["id"],
            json!({ "action": "accept", "content": { "ok": true }, "_operation": { "token": token } }),
        )
        .await;
    assert_eq!(code, 202);
    let last = stream.next(LIMIT).await.expect("the status answer");
    assert!(
        matches!(
            last["result"]["status"].as_str(),
            Some("working" | "completed")
        ),
        "the open status request answers once the run moved on: {last}"
    );
    poll_until(&c, token, is("completed")).await;
}

/// `tools/async/status` carries the run's progress and message while it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_carries_progress_and_message() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-progress-1";
    start_op(&c, "work", json!({ "label": "p", "steps": 20 }), token).await;
    let (_, working) = poll_until(&c, token, |r| {
        r["status"] == "working" && r["progress"].as_f64().is_some_and(|p| p >= 1.0)
    })
    .await;
    assert_eq!(working["total"].as_f64(), Some(20.0), "{working}");
    assert!(
        working["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{working}"
    );
    let (_, done) = poll_until(&c, token, is("completed")).await;
    assert!(done.get("progress").is_none(), "{done}");
}

/// One token names one operation: the same token on another tool is refused
/// and starts nothing there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_on_two_tools_is_refused() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-shared-1";
    start_op(&c, "sleeper", json!({}), token).await;
    let other = c
        .call_op("work", json!({ "label": "w", "steps": 1 }), token, 60)
        .await;
    assert_eq!(other.code(), -32602, "{:?}", other.response());
    assert!(
        other.message().contains("already used"),
        "{}",
        other.message()
    );
    assert!(setup.runs_of("work").is_empty(), "{:?}", setup.runs());
    assert_eq!(setup.runs_of("sleeper").len(), 1);
    // The token still names the first operation.
    assert_eq!(c.op_status(token).await.result()["status"], "working");
    c.notify(
        "notifications/cancelled",
        json!({ "_operation": { "token": token } }),
    )
    .await;
}

/// After a key rotation (a new key first, the old one still listed) a retried
/// token finds the operation the old key named, instead of a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_token_finds_its_run_after_a_key_rotation() {
    let setup = Setup::with_tools(&dialect_tools());
    let token = "op-rotate-1";
    let args = json!({ "label": "r", "steps": 3 });
    {
        let server = Server::start(&setup).await;
        let c = opted(&server).await;
        start_op(&c, "work", args.clone(), token).await;
        poll_until(&c, token, is("completed")).await;
    }
    let text = std::fs::read_to_string(&setup.config).expect("config");
    let rotated = text.replacen(
        "seal = [{",
        "seal = [{ id = \"k2\", dev_secret = \"/i++vH8f+X1EreRoMBBHzHpPpHepmOUZjwahkZGq6tQ=\" }, {",
        1,
    );
    assert_ne!(rotated, text);
    std::fs::write(&setup.config, rotated).expect("rotate");
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let again = start_op(&c, "work", args, token).await;
    assert_eq!(again["operation"]["token"], token, "{again}");
    assert_eq!(
        setup.runs_of("work").len(),
        1,
        "the retry found the run: {:?}",
        setup.runs()
    );
    assert_eq!(c.op_status(token).await.result()["status"], "completed");
    let other = c
        .call_op("work", json!({ "label": "s", "steps": 3 }), token, 60)
        .await;
    assert_eq!(other.code(), -32602, "{:?}", other.response());
}

/// Over HTTP a cancel naming only the call's request id cannot reach an
/// operation (no table of request ids): it is refused clearly, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_cancel_by_request_id_only_is_refused_clearly() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-cancel-id";
    let call_id = c.next_id();
    let started = c
        .post(&json!({ "jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                       "params": { "name": "sleeper", "arguments": {}, "operation": { "token": token } } }))
        .await;
    assert_eq!(started.result()["operation"]["status"], "submitted");
    let refused = c
        .post(
            &json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": { "requestId": call_id, "reason": "user abort" } }),
        )
        .await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(refused.response()["id"], Value::Null, "{refused:?}");
    assert!(
        refused.response()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("_operation.token")),
        "{refused:?}"
    );
    assert_eq!(c.op_status(token).await.result()["status"], "working");
    let code = c
        .notify(
            "notifications/cancelled",
            json!({ "requestId": call_id, "_operation": { "token": token } }),
        )
        .await;
    assert_eq!(code, 202);
    poll_until(&c, token, is("canceled")).await;
}

/// Waits until the run folder of a sleeper holds its pids; returns the folder.
async fn sleeper_run(setup: &Setup) -> (std::path::PathBuf, i32, i32) {
    wait_for("the sleeper's pids", LIMIT, || async {
        let dir = setup.runs_of("sleeper").into_iter().next()?;
        let text = std::fs::read_to_string(dir.join("sleeper.pids")).ok()?;
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().ok());
        let (shell, child) = (it.next()??, it.next()??);
        Some((dir, shell, child))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceled_by_operation_token_stops_the_process() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-cancel-1";
    let call_id = c.next_id();
    let started = c
        .post(&json!({ "jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                       "params": { "name": "sleeper", "arguments": {}, "operation": { "token": token } } }))
        .await;
    assert_eq!(started.result()["operation"]["status"], "submitted");
    let (_dir, shell, child) = sleeper_run(&setup).await;
    assert!(alive(shell) && alive(child));

    // Not finished: no result yet.
    let early = c.op_result(token).await;
    assert_eq!(early.code(), -32602);
    assert!(early.message().contains("working"), "{}", early.message());

    let code = c
        .notify(
            "notifications/cancelled",
            json!({ "requestId": call_id, "reason": "user abort", "_operation": { "token": token } }),
        )
        .await;
    assert_eq!(code, 202);
    let (_, last) = poll_until(&c, token, is("canceled")).await;
    assert_eq!(last["status"], "canceled", "one l in D4");
    wait_for("the sleeper's processes to end", LIMIT, || async {
        (!alive(shell) && !alive(child)).then_some(())
    })
    .await;
    // Canceled stays canceled; its result is refused, never silent.
    assert_eq!(c.op_status(token).await.result()["status"], "canceled");
    let refused = c.op_result(token).await;
    assert_eq!(refused.code(), -32602);
    assert!(
        refused.message().contains("canceled"),
        "{}",
        refused.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_when_the_run_is_lost() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-lost-1";
    start_op(&c, "sleeper", json!({}), token).await;
    let (dir, shell, child) = sleeper_run(&setup).await;
    // The host loses the run: its supervisor and process die without a
    // record of how (as after a reboot or an OOM kill).
    let supervisor = recorded_pid(&dir.join("supervisor.json")).expect("supervisor pid");
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).expect("kill supervisor");
    wait_for("the supervisor to die", LIMIT, || async {
        (!alive(supervisor)).then_some(())
    })
    .await;
    killpg(Pid::from_raw(shell), Signal::SIGKILL).expect("kill the process group");
    wait_for("the process to die", LIMIT, || async {
        (!alive(shell) && !alive(child)).then_some(())
    })
    .await;

    // A run the engine lost is `unknown` (the SEP's terminal fallback), with
    // the reason in `error`; "failed" would claim the tool ran and failed.
    let (_, last) = poll_until(&c, token, is("unknown")).await;
    let error = last["error"].as_str().expect("unknown carries error");
    assert!(error.contains("lost"), "{error}");
    let result = c.op_result(token).await;
    let result = &result.result()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(result).contains("lost"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_error_is_completed_with_is_error() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-fail-1";
    start_op(&c, "fail", json!({ "label": "ds9" }), token).await;
    let (_, last) = poll_until(&c, token, |r| r["status"] != "working").await;
    assert_eq!(
        last["status"], "completed",
        "a tool error is completed in D4: {last}"
    );
    let result = c.op_result(token).await;
    let result = &result.result()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let t = text(result);
    assert!(
        t.contains("exited with code 3") && t.contains("dataset ds9 not found"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_token_and_call_errors() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;

    for method in ["tools/async/status", "tools/async/result"] {
        let answer = c.request(method, json!({ "token": "never-issued" })).await;
        assert_eq!(answer.code(), -32602, "{method}");
        assert_eq!(
            answer.message(),
            "Failed to retrieve operation: Operation not found",
            "{method}"
        );
    }
    // No token at all.
    let missing = c.request("tools/async/status", json!({})).await;
    assert_eq!(missing.code(), -32602);

    // Opted in, but an async tool called without operation.
    let bare = c.call("work", json!({ "label": "x" })).await;
    assert_eq!(bare.code(), -32600, "{:?}", bare.response());
    assert!(bare.message().contains("operation"), "{}", bare.message());
    // Bad arguments never reach the engine.
    let bad = c
        .request(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "no spaces" }, "operation": { "token": "op-bad" } }),
        )
        .await;
    assert_eq!(bad.code(), -32602);

    // A client that did not opt in calls an async-only tool.
    let p = plain(&server).await;
    let refused = p.call("ask", json!({ "label": "x" })).await;
    assert_eq!(refused.code(), -32600, "{:?}", refused.response());
    // ... and has no tools/async/* methods.
    assert_eq!(
        p.request("tools/async/status", json!({ "token": "t" }))
            .await
            .code(),
        -32601
    );
    assert!(
        setup.runs().is_empty(),
        "nothing started: {:?}",
        setup.runs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_expiry() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let token = "op-brief-1";
    let started = start_op(&c, "brief", json!({ "label": "b", "steps": 1 }), token).await;
    assert_eq!(started["operation"]["keepAlive"], 2);
    poll_until(&c, token, is("completed")).await;
    assert_eq!(
        c.op_result(token).await.result()["result"]["isError"],
        false
    );
    // The run's end as its engine recorded it; expiry is exactly keepAlive (2 s)
    // after it, to the millisecond.
    let exit = setup.runs_of("brief")[0].join("exit.json");
    let exit: Value = serde_json::from_slice(&std::fs::read(exit).unwrap()).unwrap();
    let expires_ms = exit["ended_at_ms"].as_u64().expect("ended_at_ms") + 2000;
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let answer = wait_for("the operation to expire", LIMIT, || async {
        let sent = now_ms();
        let a = c.op_status(token).await;
        let answered = now_ms();
        let expired = a.response().get("error").is_some();
        // The server decided between `sent` and `answered`.
        assert!(
            !expired || answered >= expires_ms,
            "expired {} ms before keepAlive ended",
            expires_ms - answered
        );
        assert!(
            expired || sent < expires_ms,
            "still served {} ms after keepAlive ended: {:?}",
            sent - expires_ms,
            a.response()
        );
        expired.then_some(a)
    })
    .await;
    assert_eq!(answer.code(), -32602);
    assert_eq!(
        answer.message(),
        "Failed to retrieve operation: Operation has expired"
    );
    let r = c.op_result(token).await;
    assert_eq!(r.code(), -32602);
    assert_eq!(
        r.message(),
        "Failed to retrieve operation: Operation has expired"
    );
    // A retry with the expired token is refused too, and starts nothing.
    let retry = c
        .request(
            "tools/call",
            json!({ "name": "brief", "arguments": { "label": "b", "steps": 1 }, "operation": { "token": token } }),
        )
        .await;
    assert_eq!(retry.code(), -32602, "{:?}", retry.response());
    assert_eq!(
        retry.message(),
        "Failed to retrieve operation: Operation has expired"
    );
    assert_eq!(setup.runs_of("brief").len(), 1);
}

fn many_tools(n: usize) -> Vec<Tool> {
    (1..=n)
        .map(|i| Tool::new(&format!("work{i:02}"), "hybrid", "work.sh", WORK_SCHEMA).arg("steps"))
        .collect()
}

/// Not an assertion of speed: prints what one status lookup by token costs
/// with 1 and with 20 long-running tools configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lookup_cost() {
    const LOOKUPS: u32 = 50;
    let mut report = Vec::new();
    for n in [1usize, 20] {
        let setup = Setup::with_tools(&many_tools(n));
        let server = Server::start(&setup).await;
        let c = opted(&server).await;
        // The operation lives in the last tool configured.
        let last = format!("work{n:02}");
        let token = format!("op-cost-{n}");
        start_op(&c, &last, json!({ "label": "cost", "steps": 0 }), &token).await;
        poll_until(&c, &token, is("completed")).await;
        // Warm up, then measure.
        c.op_status(&token).await;
        let calls_before = server.engine_calls().await;
        let t0 = Instant::now();
        for _ in 0..LOOKUPS {
            assert_eq!(c.op_status(&token).await.result()["status"], "completed");
        }
        let per_lookup = t0.elapsed() / LOOKUPS;
        let calls = server.engine_calls().await - calls_before;
        // The unknown-token case asks every tool too, and reads nothing.
        let calls_before = server.engine_calls().await;
        let t0 = Instant::now();
        for _ in 0..LOOKUPS {
            assert_eq!(c.op_status(&c.next_id().to_string()).await.code(), -32602);
        }
        let per_miss = t0.elapsed() / LOOKUPS;
        let miss_calls = server.engine_calls().await - calls_before;
        report.push(format!(
            "SEP-1391 lookup cost, {n:>2} long-running tool(s): {per_lookup:>10.2?} per status lookup, \
             {:.1} engine calls per lookup; unknown token: {per_miss:>10.2?}, {:.1} engine calls",
            f64::from(u32::try_from(calls).unwrap()) / f64::from(LOOKUPS),
            f64::from(u32::try_from(miss_calls).unwrap()) / f64::from(LOOKUPS),
        ));
        // The README's figure: 1 locate per long-running tool + 1 read.
        let tools = u64::try_from(n).unwrap();
        assert_eq!(
            calls,
            u64::from(LOOKUPS) * (tools + 1),
            "engine calls for {LOOKUPS} found lookups with {n} tools"
        );
        assert_eq!(
            miss_calls,
            u64::from(LOOKUPS) * tools,
            "engine calls for {LOOKUPS} unknown tokens with {n} tools"
        );
    }
    for line in report {
        println!("{line}");
    }
}

/// On stdio the connection remembers which call started which operation, so a
/// `notifications/cancelled` naming the original `tools/call` id cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_cancel_by_request_id() {
    let setup = Setup::with_tools(&dialect_tools());
    let mut s = StdioServer::start(&setup);
    let init = s
        .request_raw(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": { "experimental": { SEP1391: {} } },
                    "clientInfo": { "name": "dialect-tests", "version": "1" } }),
        )
        .await;
    assert_eq!(
        init["result"]["capabilities"]["experimental"][SEP1391],
        json!({}),
        "{init}"
    );
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    let call_id = s
        .send_request(
            "tools/call",
            json!({ "name": "sleeper", "arguments": {}, "operation": { "token": "op-stdio-1" } }),
        )
        .await;
    let started = s.response(&call_id, LIMIT).await;
    assert_eq!(
        started["result"]["operation"]["status"], "submitted",
        "{started}"
    );
    let (_dir, shell, child) = sleeper_run(&setup).await;

    s.send(
        &json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": { "requestId": call_id, "reason": "user abort" } }),
    )
    .await;
    wait_for("canceled", LIMIT, async || {
        let r = s
            .request_raw("tools/async/status", json!({ "token": "op-stdio-1" }))
            .await;
        (r["result"]["status"] == "canceled").then_some(())
    })
    .await;
    wait_for("the sleeper's processes to end", LIMIT, || async {
        (!alive(shell) && !alive(child)).then_some(())
    })
    .await;
}

/// A status lookup asks every long-running tool (1 locate each) and reads the
/// run: with 3 tools that is 4 engine calls, past a `max_engine_calls` of 3, so
/// the request gets a retryable error rather than a fan-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_lookup_past_max_engine_calls_is_retryable() {
    // A start looks the token up under every tool first (3 locates + 1 start), as
    // costly as a found status lookup: the operation starts on a replica without the
    // bound, and the bounded replica (same keys, same spool) is asked about it.
    let mut setup = Setup::with_tools(&many_tools(3));
    let unbounded = Server::start(&setup).await;
    let token = "op-bounded";
    start_op(
        &opted(&unbounded).await,
        "work03",
        json!({ "label": "bounded", "steps": 0 }),
        token,
    )
    .await;
    setup.extra_env = vec![("TASKGATE__SERVER__MAX_ENGINE_CALLS".into(), "3".into())];
    let server = Server::start(&setup).await;
    let c = opted(&server).await;
    let refused = c.op_status(token).await;
    assert_bound_refusal(refused.error(), "server.max_engine_calls");
    // An unknown token costs 3 locates and fits.
    assert_eq!(c.op_status("op-unknown").await.code(), -32602);
}
