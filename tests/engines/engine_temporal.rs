//! The Temporal engine through the server binary: each test writes a config
//! whose engine points at the Temporal server of `scripts/temporal/up.sh`, starts
//! a real Python worker (`tests/temporal/worker.py`, the workflows of
//! `tests/temporal/workflows.py`) on a task queue of its own, runs `taskgate
//! serve`, and drives it as an MCP client over HTTP (2026-07-28 tasks, 2025-11-25
//! tasks, SEP-1391). Upstream requests are counted at the server's metrics
//! endpoint (`service_requests_total`, counted when a request starts).
//!
//! Needs `TASKGATE_TEMPORAL_ADDRESS`, `TASKGATE_TEMPORAL_METRICS`,
//! `TASKGATE_TEMPORAL_PYTHON` and `TASKGATE_TEMPORAL_WORKER` (up.sh prints
//! them): skipped when the address is unset, failed when
//! `TASKGATE_REQUIRE_E2E=1`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{wait_for as until, Bearer, Legacy, Options, Server, Setup};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

const LIMIT: Duration = Duration::from_secs(90);
/// The namespace most tests use.
const NS: &str = "taskgate-test";

fn address() -> Option<String> {
    e2e_endpoint("TASKGATE_TEMPORAL_ADDRESS")
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} (scripts/temporal/up.sh prints it)"))
}

/// A name unique to this test process and call.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

/// A Python worker polling one task queue; stopped on drop.
struct Worker {
    child: Child,
    queue: String,
}

impl Worker {
    fn start(address: &str, namespace: &str, test: &str) -> Self {
        let queue = unique(&format!("tq-{test}"));
        let mut child = Command::new(env("TASKGATE_TEMPORAL_PYTHON"))
            .arg(env("TASKGATE_TEMPORAL_WORKER"))
            .args(["--address", address, "--namespace", namespace])
            .args(["--task-queue", &queue])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python worker");
        let stdout = child.stdout.take().expect("worker stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("worker ready") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(LIMIT)
            .expect("the worker did not print `worker ready`");
        Self { child, queue }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// One tool `wf` of engine `tp` on `workflow_type`, with `extra` target keys and
/// `tool_extra` tool keys.
fn tool(queue: &str, workflow_type: &str, extra: &str, tool_extra: &str) -> String {
    format!(
        r#"[[tools]]
name = "wf"
description = "Run a Temporal workflow"
engine = "tp"
mode = "async"
poll_interval = "200ms"
keep_alive = "1h"
input_schema = {{ type = "object", additionalProperties = true }}
target = {{ workflow_type = "{workflow_type}", task_queue = "{queue}"{extra} }}
{tool_extra}
"#
    )
}

fn engine(address: &str, namespace: &str) -> String {
    format!(
        "[engines.tp]\nkind = \"temporal\"\naddress = \"{address}\"\nnamespace = \"{namespace}\"\n\n"
    )
}

fn setup(address: &str, namespace: &str, tools: &str) -> Setup {
    Setup::config(&format!("{}{tools}", engine(address, namespace)), &[])
}

/// The question-and-answer target keys of `TaskgateAsk`.
const ASK: &str = r#", input_query = "taskgate_input", input_update = "taskgate_answer""#;

/// Requests taskgate's operations made in `namespace` so far, by the server's
/// count.
async fn temporal_requests(namespace: &str, operations: &[&str]) -> u64 {
    let text = reqwest::get(env("TASKGATE_TEMPORAL_METRICS"))
        .await
        .expect("GET metrics")
        .text()
        .await
        .expect("metrics text");
    operations
        .iter()
        .map(|op| {
            common::metric_sum(
                &text,
                "service_requests_total",
                &[("namespace", namespace), ("operation", op)],
            )
        })
        .sum()
}

/// The operations taskgate sends (the workers' own calls share the namespace).
const TASKGATE_OPS: &[&str] = &[
    "StartWorkflowExecution",
    "DescribeWorkflowExecution",
    "GetWorkflowExecutionHistory",
    "PollWorkflowExecutionHistory",
    "QueryWorkflow",
    "UpdateWorkflowExecution",
    "SignalWorkflowExecution",
    "RequestCancelWorkflowExecution",
    "TerminateWorkflowExecution",
];

/// The one open question of a task: its key and request.
fn question(task: &Value) -> (String, Value) {
    task["inputRequests"]
        .as_object()
        .and_then(|o| o.iter().next())
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap_or_else(|| panic!("no question: {task}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_completes_with_its_result_and_its_history_pages_in_order() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "ok");
    let s = setup(&addr, NS, &tool(&w.queue, "TaskgateSucceed", "", ""));
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c
        .start_task("wf", json!({"name": "binary", "wait_seconds": 0.2}))
        .await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"greeting": "hello binary", "input": {"name": "binary", "wait_seconds": 0.2}}),
        "{done}"
    );
    // The history as log lines, two at a time, in order, to the end.
    let mut cursor: Option<String> = None;
    let mut seen: Vec<(String, String)> = Vec::new();
    for _ in 0..50 {
        let mut args = json!({"taskId": task, "limit": 2});
        if let Some(cur) = &cursor {
            args["cursor"] = json!(cur);
        }
        let reply = c.call("taskgate_logs", args).await;
        assert!(reply.is_ok(), "{}", reply.raw);
        let page = &reply.result()["structuredContent"];
        let lines = page["lines"].as_array().unwrap();
        assert!(lines.len() <= 2, "{page}");
        for l in lines {
            seen.push((
                l["source"].as_str().unwrap().to_owned(),
                l["text"].as_str().unwrap().to_owned(),
            ));
        }
        cursor = Some(page["cursor"].as_str().unwrap().to_owned());
        if page["complete"] == true {
            break;
        }
    }
    let sources: Vec<&str> = seen.iter().map(|(s, _)| s.as_str()).collect();
    for expected in [
        "workflow_execution_started",
        "timer_started",
        "activity_task_scheduled",
        "activity_task_completed",
        "workflow_execution_completed",
    ] {
        assert!(sources.contains(&expected), "{expected} missing: {seen:?}");
    }
    let ids: Vec<i64> = seen
        .iter()
        .map(|(_, t)| t[1..].split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "out of order: {ids:?}");
    assert!(
        seen.iter().all(|(_, t)| !t.contains("binary")),
        "an argument value reached the log lines: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_is_a_tool_error_naming_the_failed_activity() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "fail");
    let s = setup(&addr, NS, &tool(&w.queue, "TaskgateFail", "", ""));
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c.start_task("wf", json!({"message": "disk on fire"})).await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("disk on fire") && text.contains("TaskgateExploded"),
        "{text}"
    );
    let structured = &done["result"]["structuredContent"];
    assert_eq!(structured["activity"]["type"], "explode", "{structured}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_requests_the_workflow_to_stop_and_terminate_is_an_option() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "cancel");
    let s = setup(
        &addr,
        NS,
        &format!(
            "{}{}",
            tool(&w.queue, "TaskgateRunUntilCancelled", "", ""),
            tool(
                &w.queue,
                "TaskgateRunUntilCancelled",
                r#", cancel = "terminate""#,
                ""
            )
            .replace("name = \"wf\"", "name = \"wf_term\"")
        ),
    );
    let server = Server::start(&s).await;
    let c = server.client();
    let graceful = c.start_task("wf", json!({})).await;
    let hard = c.start_task("wf_term", json!({})).await;
    for task in [&graceful, &hard] {
        assert_eq!(c.get(task).await["status"], "working");
        assert!(c.cancel_reply(task).await.is_ok());
    }
    let r = c.until_status(&graceful, "cancelled", LIMIT).await;
    assert!(
        r["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("cancelled")),
        "{r}"
    );
    let r = c.until_status(&hard, "cancelled", LIMIT).await;
    assert!(
        r["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("terminated")),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_answered_through_updates_and_a_stale_answer_changes_nothing() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "ask");
    let s = setup(&addr, NS, &tool(&w.queue, "TaskgateAsk", ASK, ""));
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c
        .start_task("wf", json!({"steps": 2, "title": "release"}))
        .await;
    let asked = c.until_status(&task, "input_required", LIMIT).await;
    let (key, request) = question(&asked);
    assert_eq!(key, "step-1", "{asked}");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["approved"]["type"], "boolean",
        "{request}"
    );
    // An answer the workflow's validator refuses (a wrong type): invalid, and
    // the question stays.
    let bad = c
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"approved": "yes"}} }),
        )
        .await;
    assert!(!bad.is_ok(), "{}", bad.raw);
    assert_eq!(c.get(&task).await["status"], "input_required");
    let ok = c
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"approved": true}} }),
        )
        .await;
    assert!(ok.is_ok(), "{}", ok.raw);
    let second = until("the second question", LIMIT, || async {
        let t = c.get(&task).await;
        let k = t["inputRequests"]
            .as_object()
            .and_then(|o| o.keys().next().cloned());
        if k.as_deref() == Some("step-2") {
            Ok(t)
        } else {
            Err(t.to_string())
        }
    })
    .await;
    assert_eq!(second["status"], "input_required");
    // The first question's key again: stale. The core drops an answer to a
    // key that is not outstanding (it never reaches Temporal; a stale key that
    // races past it meets the workflow's validator, a conflict); the result
    // below shows it changed nothing.
    let stale = c
        .update(
            &task,
            json!({ "step-1": {"action": "accept", "content": {"approved": false}} }),
        )
        .await;
    assert_eq!(stale.status, 200, "{}", stale.raw);
    assert_eq!(
        c.get(&task).await["inputRequests"]["step-2"]["params"]["message"]
            .as_str()
            .map(|m| m.contains("step 2")),
        Some(true)
    );
    let ok = c
        .update(
            &task,
            json!({ "step-2": {"action": "accept", "content": {"approved": true, "note": "go"}} }),
        )
        .await;
    assert!(ok.is_ok(), "{}", ok.raw);
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"]["answers"],
        json!([{"approved": true}, {"approved": true, "note": "go"}]),
        "{done}"
    );
}

/// A SEP-1391 session.
async fn sep1391(server: &Server) -> Legacy {
    Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"elicitation": {}, "experimental": {"taskgate/sep-1391": {}}}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_a_declined_question_fails_the_workflow_and_a_token_retry_is_one_execution() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "sep");
    let s = setup(&addr, NS, &tool(&w.queue, "TaskgateAsk", ASK, ""));
    let server = Server::start(&s).await;
    let c = sep1391(&server).await;
    let op = unique("op");
    let args = json!({"steps": 1, "title": op});
    let first = c.call_op("wf", args.clone(), &op, 3600).await;
    assert_eq!(
        first.result()["operation"]["token"],
        op.as_str(),
        "{:?}",
        first.body
    );
    let starts = temporal_requests(NS, &["StartWorkflowExecution"]).await;
    // The same token and arguments: the same execution.
    let again = c.call_op("wf", args.clone(), &op, 3600).await;
    assert_eq!(
        again.result()["operation"]["token"],
        op.as_str(),
        "{:?}",
        again.body
    );
    // The same token, other arguments: a conflict.
    let other = c
        .call_op("wf", json!({"steps": 3, "title": "other"}), &op, 3600)
        .await;
    assert_eq!(other.error()["code"], -32602, "{:?}", other.body);
    assert!(
        temporal_requests(NS, &["StartWorkflowExecution"]).await >= starts,
        "the metrics went backwards"
    );
    // Decline the question: the workflow fails with taskgate.Declined.
    let request = until("input_required", LIMIT, || async {
        let answer = c.op_status(&op).await;
        match answer.result()["status"].as_str() {
            Some("input_required") => Ok(answer.messages[0].clone()),
            _ => Err(format!("{:?}", answer.body)),
        }
    })
    .await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let code = c
        .respond(
            &request["id"],
            json!({"action": "decline", "_operation": {"token": op}}),
        )
        .await;
    assert_eq!(code, 202);
    c.until_op_status(&op, "completed", LIMIT).await;
    let result = c.op_result(&op).await;
    let result = &result.result()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        common::text(result).contains("taskgate.Declined"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_a_killed_server_and_a_second_replica_read_the_same_task() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "restart");
    let s = setup(&addr, NS, &tool(&w.queue, "TaskgateAsk", ASK, ""));
    let mut first = Server::start_isolated(&s).await;
    let c = Legacy::connect(
        &first.url(),
        "2025-11-25",
        json!({"elicitation": {}, "tasks": {}}),
    )
    .await;
    let task = c
        .start_task("wf", json!({"steps": 1, "title": "restart"}))
        .await;
    first.kill();
    // Another process with its own HOME, and a second replica beside it.
    let second = Server::start_isolated(&s).await;
    let third = Server::start_isolated(&s).await;
    let r2 = c.at(&second.url());
    let r3 = c.at(&third.url());
    for r in [&r2, &r3] {
        until("input_required on each replica", LIMIT, || async {
            let t = r.request("tasks/get", json!({"taskId": task})).await;
            if t.result()["status"] == "input_required" {
                Ok(())
            } else {
                Err(format!("{:?}", t.body))
            }
        })
        .await;
    }
    let (reply, asked) = r3
        .request_answering("tasks/result", json!({"taskId": task}), |request| {
            assert_eq!(request["method"], "elicitation/create", "{request}");
            json!({"action": "accept", "content": {"approved": true}})
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(reply.result()["isError"], false, "{:?}", reply.body);
    assert_eq!(
        reply.result()["structuredContent"]["answers"],
        json!([{"approved": true}]),
        "{:?}",
        reply.body
    );
    let t = r2.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(t.result()["status"], "completed", "{:?}", t.body);
}

/// Opens `subscriptions/listen` for `task` on `server`.
async fn listen(server: &Server, task: &str) -> common::SseReader {
    let body = json!({ "jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": [task] }, "_meta": common::modern_meta(true) } });
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", common::MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("POST /mcp");
    common::SseReader::new(response)
}

/// Alone in the `default` namespace (the other tests use `taskgate-test`), so
/// every taskgate request there is this test's: a listened workflow whose
/// history does not move costs no request while its long poll waits, and its
/// completion arrives as a notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listened_workflow_costs_no_requests_while_nothing_changes() {
    let Some(addr) = address() else { return };
    let ns = "default";
    let w = Worker::start(&addr, ns, "listen");
    // A poll interval longer than the quiet window below: the watch's long poll
    // lasts that long (or until the server ends it, after its long-poll expiry
    // of 20 s, and taskgate renews it); a change still arrives at once.
    let s = setup(
        &addr,
        ns,
        &tool(&w.queue, "TaskgateSucceed", "", "").replace("\"200ms\"", "\"120s\""),
    );
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c
        .start_task("wf", json!({"name": "listener", "wait_seconds": 60}))
        .await;
    // The workflow's first task is done (its timer started) once a worker
    // completed a workflow task; from then on its history stays still.
    until("the timer started", LIMIT, || async {
        let n = temporal_requests(ns, &["RespondWorkflowTaskCompleted"]).await;
        (n >= 1).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    let polls = temporal_requests(ns, &["PollWorkflowExecutionHistory"]).await;
    let mut stream = listen(&server, &task).await;
    let opened = Instant::now();
    stream.next(LIMIT).await.expect("ack");
    until("the watch's long poll", LIMIT, || async {
        let n = temporal_requests(ns, &["PollWorkflowExecutionHistory"]).await;
        (n > polls).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    // A quiet window longer than the server's long-poll expiry (20 s), so a
    // renewed long poll shows, and than a read-per-interval watch would need.
    const QUIET: Duration = Duration::from_secs(45);
    let reads: Vec<&str> = TASKGATE_OPS
        .iter()
        .copied()
        .filter(|op| *op != "PollWorkflowExecutionHistory")
        .collect();
    let reads_before = temporal_requests(ns, &reads).await;
    let polls_before = temporal_requests(ns, &["PollWorkflowExecutionHistory"]).await;
    // Sample the server's counter through the window: when each renewed long
    // poll began.
    let watched = Instant::now();
    let mut renewals = Vec::new();
    let mut seen = polls_before;
    while watched.elapsed() < QUIET {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let n = temporal_requests(ns, &["PollWorkflowExecutionHistory"]).await;
        if n > seen {
            renewals.push(watched.elapsed());
            seen = n;
        }
    }
    let reads_during = temporal_requests(ns, &reads).await - reads_before;
    let polls_during =
        temporal_requests(ns, &["PollWorkflowExecutionHistory"]).await - polls_before;
    println!(
        "taskgate requests to Temporal during {QUIET:?} of a listened, quiet workflow: \
         {reads_during} reads, {polls_during} history long-poll requests, made at {renewals:?}"
    );
    assert_eq!(reads_during, 0, "the listened, quiet workflow was read");
    // The server ends a long poll after its expiry (20 s) and taskgate renews
    // it: the server counts two requests at each renewal (measured on
    // v1.32.1), so at most two per moment the count moved.
    assert!(
        polls_during as usize <= 2 * (renewals.len() + 1),
        "{polls_during} long-poll requests at {renewals:?}"
    );
    // Never a renewal within a few seconds of the last (a watch polling at a
    // pace rather than waiting).
    for pair in renewals.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_secs(5),
            "history long polls renewed at {renewals:?}: the watch is polling, not waiting"
        );
    }
    let done = loop {
        let n = stream
            .next(LIMIT)
            .await
            .expect("notifications until the result");
        if n["method"] == "notifications/tasks" && n["params"]["status"] == "completed" {
            break n;
        }
    };
    assert_eq!(
        done["params"]["result"]["structuredContent"]["greeting"], "hello listener",
        "{done}"
    );
    // The history long poll ends with the workflow's events: the completion
    // (about 60 s after the start) arrives long before the 120 s poll interval
    // would have read again.
    assert!(
        opened.elapsed() < Duration::from_secs(100),
        "the completion came late: {:?}",
        opened.elapsed()
    );
}

/// A question the workflow asks that taskgate cannot show (oversized, or not a
/// question at all) is refused: the task stays working and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_oversized_question_is_refused_cleanly() {
    let Some(addr) = address() else { return };
    let w = Worker::start(&addr, NS, "hostile");
    let s = Setup::config_with(
        Options {
            max_body_bytes: Some(1 << 20),
            ..Options::default()
        },
        &format!(
            "{}{}{}",
            engine(&addr, NS),
            tool(&w.queue, "TaskgateAsk", ASK, ""),
            tool(
                &w.queue,
                "TaskgateProgress",
                r#", input_query = "taskgate_progress", input_update = "taskgate_answer""#,
                ""
            )
            .replace("name = \"wf\"", "name = \"wf_progress\"")
        ),
        &[],
    );
    let server = Server::start(&s).await;
    let c = server.client();
    let huge = c
        .start_task("wf", json!({"steps": 1, "title": "x".repeat(70_000)}))
        .await;
    let odd = c
        .start_task("wf_progress", json!({"steps": 2, "manual": true}))
        .await;
    for (task, why) in [(&huge, "bytes"), (&odd, "no string key")] {
        until(&format!("the refusal of {why}"), LIMIT, || async {
            let t = c.get(task).await;
            assert_ne!(t["status"], "input_required", "{t}");
            match t["statusMessage"].as_str() {
                Some(m) if m.contains("refused") || m.contains(why) => Ok(()),
                _ => Err(t.to_string()),
            }
        })
        .await;
        c.cancel(task).await;
    }
}

/// An answer from a caller whom the tool's `answer_access` does not admit is
/// refused before anything reaches Temporal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_from_a_caller_the_approver_rules_forbid_never_reaches_temporal() {
    let Some(addr) = address() else { return };
    let ns = NS;
    let w = Worker::start(&addr, ns, "approvers");
    let s = Setup::config_with(
        Options {
            bearer: vec![Bearer::new("alice"), Bearer::new("bob")],
            ..Options::default()
        },
        &format!(
            "{}{}",
            engine(&addr, ns),
            tool(
                &w.queue,
                "TaskgateAsk",
                ASK,
                "access = [{ callers = [\"alice\", \"bob\"] }]\nanswer_access = [{ callers = [\"bob\"] }]"
            )
        ),
        &[],
    );
    let server = Server::start(&s).await;
    let alice = server.client().with_token(&Bearer::new("alice").token);
    let task = alice
        .start_task("wf", json!({"steps": 1, "title": "guarded"}))
        .await;
    let asked = alice.until_status(&task, "input_required", LIMIT).await;
    let (key, _) = question(&asked);
    let answers = || async {
        common::metric_sum(
            &server.metrics().await,
            "taskgate_engine_calls_total",
            &[("operation", "answer")],
        )
    };
    let before = answers().await;
    let refused = alice
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"approved": true}} }),
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.raw);
    assert_eq!(refused.error()["code"], -32602, "{}", refused.raw);
    assert_eq!(
        answers().await,
        before,
        "a refused answer reached the engine"
    );
    assert_eq!(alice.get(&task).await["status"], "input_required");
    alice.cancel(&task).await;
}
