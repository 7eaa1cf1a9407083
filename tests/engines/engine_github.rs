//! The GitHub Actions engine through the server binary: the GitHub double
//! (`taskgate_github_double`, payloads from GitHub's published examples, every
//! request checked) on a loopback port, a config whose engine's `base_url` points
//! at it, `taskgate serve`, and MCP clients over HTTP — 2026-07-28 with the tasks
//! extension, 2025-11-25 tasks, and SEP-1391 operations. Each test drives the
//! run's state in the double explicitly.

use crate::common;

use std::time::Duration;

use common::{more_fields, tool_entry, wait_for, Client, Legacy, Server, Setup};
use serde_json::{json, Value};
use taskgate_github_double::{Double, Throttle, OWNER, REF, REPO, TOKEN, WORKFLOW};

const LIMIT: Duration = Duration::from_secs(30);
const TOKEN_VAR: &str = "TASKGATE_E2E_GITHUB_TOKEN";
const RUNS: &str = "/repos/octo-org/octo-repo/actions/runs";
const DISPATCH: &str = "POST /repos/octo-org/octo-repo/actions/workflows/deploy.yml/dispatches";

/// One tool `deploy` on the double's workflow; `extra_target` is added to the
/// target table.
fn setup(d: &Double, extra_target: &str) -> Setup {
    let body = format!(
        r#"[engines.gh]
kind = "github"
token_env = "{TOKEN_VAR}"
base_url = "{url}"
lookup_delay = "10ms"

{tool}"#,
        url = d.url,
        tool = tool_entry(
            "deploy",
            "Deploy a version through GitHub Actions",
            "gh",
            r#"{ type = "object", required = ["version"], properties = { version = { type = "string" }, environment = { type = "string", enum = ["staging", "production"] }, replicas = { type = "integer" } } }"#,
            &format!(
                r#"owner = "{OWNER}", repo = "{REPO}", workflow = "{WORKFLOW}", ref = "{REF}"{}"#,
                more_fields(extra_target)
            ),
        ),
    );
    Setup::config(&body, &[(TOKEN_VAR, TOKEN)])
}

/// The id of the only run the double has.
fn only_run(d: &Double) -> u64 {
    let ids = d.run_ids();
    assert_eq!(ids.len(), 1, "expected one run: {ids:?}");
    ids[0]
}

/// Reads the task once: its status and message.
async fn status(c: &Client, task: &str) -> Value {
    c.get(task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_queued_in_progress_then_success_with_jobs_and_artifacts() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    let task = c
        .start_task(
            "deploy",
            json!({"version": "1.2.3", "replicas": 3, "environment": "staging"}),
        )
        .await;
    let id = only_run(&d);
    let seen = d.seen();
    assert_eq!(d.lines(), [DISPATCH]);
    assert_eq!(
        seen[0].body,
        Some(
            json!({"ref": "main", "inputs": {"version": "1.2.3", "replicas": "3", "environment": "staging"}, "return_run_details": true})
        )
    );
    assert!(
        !task.contains(&id.to_string()),
        "the handle shows the run id in clear"
    );

    let queued = status(&c, &task).await;
    assert_eq!(queued["status"], "working", "{queued}");
    assert!(
        queued["statusMessage"].as_str().unwrap().contains("queued"),
        "{queued}"
    );
    assert_eq!(queued["pollIntervalMs"], 200, "{queued}");

    d.set_run(id, "in_progress", None);
    let running = status(&c, &task).await;
    assert_eq!(running["status"], "working");
    assert_eq!(
        running["statusMessage"], "running job build, step 7/10: Run Tests",
        "{running}"
    );

    d.set_run(id, "completed", Some("success"));
    let done = status(&c, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    assert_eq!(result["isError"], false);
    let st = &result["structuredContent"];
    assert_eq!(st["conclusion"], "success");
    assert_eq!(st["run_id"], id);
    let page = format!("https://github.com/{OWNER}/{REPO}/actions/runs/{id}");
    assert_eq!(st["html_url"], page.as_str());
    assert_eq!(
        st["jobs"],
        json!([{"name": "build", "conclusion": "success"}])
    );
    assert_eq!(st["artifacts"].as_array().unwrap().len(), 2, "{st}");
    assert_eq!(st["artifacts"][0]["name"], "Rails");
    assert!(
        result["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "resource_link" && c["uri"] == page.as_str()),
        "{result}"
    );
    // Reading a finished run again asks GitHub again, and answers the same.
    d.clear_seen();
    assert_eq!(status(&c, &task).await["result"], *result);
    assert!(d.lines().contains(&format!("GET {RUNS}/{id}")));
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_a_tool_error_naming_failed_jobs_and_steps() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "2"})).await;
    let id = only_run(&d);
    d.set_run(id, "completed", Some("failure"));
    let done = status(&c, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    assert_eq!(result["isError"], true, "{done}");
    assert_eq!(result["structuredContent"]["conclusion"], "failure");
    assert_eq!(
        result["structuredContent"]["failed_jobs"][0]["name"],
        "build"
    );
    assert_eq!(
        result["structuredContent"]["failed_jobs"][0]["failed_steps"][0]["name"],
        "Run Tests"
    );
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("job build"),
        "{result}"
    );
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_cancels_the_run_upstream() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "3"})).await;
    let id = only_run(&d);
    d.set_run(id, "in_progress", None);
    d.clear_seen();
    let reply = c.cancel_reply(&task).await;
    assert_eq!(reply.result()["resultType"], "complete", "{:?}", reply.body);
    assert!(
        d.lines().contains(&format!("POST {RUNS}/{id}/cancel")),
        "{:?}",
        d.lines()
    );
    assert_eq!(d.run(id)["conclusion"], "cancelled");
    let cancelled = status(&c, &task).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    // Cancelling a finished run does not post another cancel.
    d.clear_seen();
    assert!(c.cancel_reply(&task).await.is_ok());
    assert!(
        !d.lines().iter().any(|l| l.ends_with("/cancel")),
        "{:?}",
        d.lines()
    );
    d.assert_clean();
}

/// Single-flight, counted by the double itself: 50 clients polling one run at
/// once (every answer held 1 s, a slow GitHub, so the polls overlap) make far
/// fewer than 50 run reads, and all get the right answer; two polls one after
/// another read twice. This is what keeps a crowd of pollers from spending the
/// rate budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_polls_of_one_run_share_one_read() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "9"})).await;
    let id = only_run(&d);
    d.set_run(id, "queued", None);
    let reads = |d: &Double| {
        d.lines()
            .iter()
            .filter(|l| **l == format!("GET {RUNS}/{id}"))
            .count()
    };

    d.slow_down(Duration::from_secs(1));
    d.clear_seen();
    let polls: Vec<_> = (0..50)
        .map(|_| {
            let (c, task) = (c.clone(), task.clone());
            tokio::spawn(async move { c.get(&task).await })
        })
        .collect();
    for poll in polls {
        let read = poll.await.unwrap();
        assert_eq!(read["status"], "working", "{read}");
    }
    let crowd = reads(&d);
    assert!(
        (1..=10).contains(&crowd),
        "50 concurrent polls made {crowd} run reads: {:?}",
        d.lines()
    );

    d.slow_down(Duration::ZERO);
    d.clear_seen();
    for _ in 0..2 {
        assert_eq!(status(&c, &task).await["status"], "working");
    }
    assert_eq!(
        reads(&d),
        2,
        "polls one after another each read: {:?}",
        d.lines()
    );
    d.assert_clean();
}

const APPROVAL: &str = r#"environment_approval = { message = "Deploy to {environment}?" }"#;

async fn waiting_for_approval(c: &Client, d: &Double, task: &str) -> String {
    let id = only_run(d);
    d.wait_on_environment(id);
    let asked = status(c, task).await;
    assert_eq!(asked["status"], "input_required", "{asked}");
    let requests = asked["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{asked}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(key, "environment-161088068");
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Deploy to staging?");
    assert_eq!(request["params"]["requestedSchema"]["type"], "object");
    key.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_approval_accepted_through_tasks_update() {
    let d = Double::start().await;
    let s = setup(&d, APPROVAL);
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "4"})).await;
    let key = waiting_for_approval(&c, &d, &task).await;
    let reply = c
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"comment": "ship it"}} }),
        )
        .await;
    assert!(reply.is_ok(), "{:?}", reply.body);
    assert_eq!(
        d.reviews(),
        [json!({"environment_ids": [161_088_068], "state": "approved", "comment": "ship it"})]
    );
    let id = only_run(&d);
    assert_eq!(status(&c, &task).await["status"], "working");
    d.set_run(id, "completed", Some("success"));
    let done = status(&c, &task).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["isError"], false, "{done}");
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_approval_declined_through_tasks_update() {
    let d = Double::start().await;
    let s = setup(&d, APPROVAL);
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "5"})).await;
    let key = waiting_for_approval(&c, &d, &task).await;
    let reply = c
        .update(&task, json!({ &key: {"action": "decline"} }))
        .await;
    assert!(reply.is_ok(), "{:?}", reply.body);
    let reviews = d.reviews();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["state"], "rejected", "{reviews:?}");
    let done = status(&c, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    // Answering again: no review is pending any more, nothing is posted.
    let again = c.update(&task, json!({ &key: {"action": "accept"} })).await;
    assert!(again.is_ok(), "{:?}", again.body);
    assert_eq!(d.reviews().len(), 1);
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_retryable_errors_and_raise_the_poll_interval() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    // A throttled dispatch: a retryable error, and no run.
    d.throttle_next(Throttle::Secondary { retry_after: 5 });
    let refused = c.call("deploy", json!({"version": "6"})).await;
    let e = refused.error();
    assert_eq!(e["data"]["retryable"], true, "{e}");
    assert_eq!(e["data"]["retryAfterMs"], 5000, "{e}");
    assert!(d.run_ids().is_empty());

    let task = c.start_task("deploy", json!({"version": "6"})).await;

    // A secondary rate limit: retryable, with GitHub's retry-after.
    d.throttle_next(Throttle::Secondary { retry_after: 7 });
    let refused = c.get_reply(&task).await;
    let e = refused.error();
    assert_eq!(e["code"], -32603, "{e}");
    assert_eq!(e["data"]["retryable"], true, "{e}");
    assert_eq!(e["data"]["retryAfterMs"], 7000, "{e}");

    // A primary limit (429, nothing left until the reset): retryable too.
    d.throttle_next(Throttle::Primary {
        status: 429,
        reset_in: 30,
    });
    let refused = c.get_reply(&task).await;
    let e = refused.error();
    assert_eq!(e["data"]["retryable"], true, "{e}");
    let after = e["data"]["retryAfterMs"].as_u64().unwrap();
    assert!((25_000..=32_000).contains(&after), "{e}");

    // The task is untouched.
    let read = status(&c, &task).await;
    assert_eq!(read["status"], "working", "{read}");
    assert_eq!(read["pollIntervalMs"], 200, "{read}");

    // A low budget: later reads tell the client to poll less often.
    d.set_budget(20, 600);
    let slow = status(&c, &task).await;
    assert_eq!(slow["status"], "working", "{slow}");
    let poll = slow["pollIntervalMs"].as_u64().unwrap();
    assert!(poll >= 10_000, "{slow}");
    d.set_budget(5000, 3600);
    let normal = status(&c, &task).await;
    assert_eq!(normal["pollIntervalMs"], 200, "{normal}");

    d.set_run(only_run(&d), "completed", Some("success"));
    assert_eq!(status(&c, &task).await["status"], "completed");
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_between_start_and_result_loses_nothing() {
    let d = Double::start().await;
    let s = setup(&d, "");
    // Own HOME, working directory and TMPDIR each: nothing but the double is shared.
    let mut first = s.isolated_server().await;
    let c = first.client();
    let task = c.start_task("deploy", json!({"version": "7"})).await;
    assert_eq!(status(&c, &task).await["status"], "working");
    first.kill();

    let id = only_run(&d);
    d.set_run(id, "in_progress", None);
    let second = Server::start_isolated(&s).await;
    let c = c.at(&second.url());
    assert_eq!(
        status(&c, &task).await["statusMessage"],
        "running job build, step 7/10: Run Tests"
    );
    d.set_run(id, "completed", Some("success"));
    let done = status(&c, &task).await;
    assert_eq!(done["result"]["structuredContent"]["run_id"], id, "{done}");
    assert_eq!(d.run_ids().len(), 1, "a restart must not dispatch again");
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_token_retry_finds_the_run_it_dispatched() {
    let d = Double::start().await;
    let s = setup(&d, r#"correlate = "always""#);
    let server = s.server().await;
    let c = Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let call = |args: Value| c.call_op("deploy", args, "release-8", 3600);
    let first = call(json!({"version": "8"})).await;
    assert_eq!(
        first.result()["operation"]["token"],
        "release-8",
        "{:?}",
        first.body
    );
    let id = only_run(&d);
    let inputs = d
        .seen()
        .iter()
        .find(|s| s.line() == DISPATCH)
        .unwrap()
        .body
        .clone()
        .unwrap()["inputs"]
        .clone();
    assert_eq!(inputs["version"], "8");
    assert!(
        inputs["taskgate_run"]
            .as_str()
            .is_some_and(|n| n.starts_with("tg-")),
        "{inputs}"
    );

    // The retry finds the run by its correlation: no second dispatch.
    let again = call(json!({"version": "8"})).await;
    assert_eq!(
        again.result()["operation"]["token"],
        "release-8",
        "{:?}",
        again.body
    );
    assert_eq!(d.run_ids(), [id]);

    // The same token with other arguments is refused like on every other
    // engine (the run's title carries a tag of its inputs), and never dispatches.
    let other = call(json!({"version": "9"})).await;
    assert_eq!(other.error()["code"], -32602, "{:?}", other.body);
    assert!(
        other.message().contains("already used"),
        "{}",
        other.message()
    );
    assert_eq!(d.run_ids(), [id]);

    let working = c.op_status("release-8").await;
    assert_eq!(working.result()["status"], "working", "{:?}", working.body);
    d.set_run(id, "completed", Some("success"));
    let done = c.op_status("release-8").await;
    assert_eq!(done.result()["status"], "completed", "{:?}", done.body);
    let result = c.op_result("release-8").await;
    assert_eq!(
        result.result()["result"]["structuredContent"]["run_id"],
        id,
        "{:?}",
        result.body
    );
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_result_blocks_until_the_run_finishes() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let task = c.start_task("deploy", json!({"version": "10"})).await;
    let id = only_run(&d);
    d.clear_seen();

    let waiting = {
        let c = c.clone();
        let task = task.clone();
        tokio::spawn(async move { c.request("tasks/result", json!({"taskId": task})).await })
    };
    // Once tasks/result has read the run (still queued), finish it.
    wait_for("tasks/result reading the run", LIMIT, || async {
        if d.lines().contains(&format!("GET {RUNS}/{id}")) {
            Ok(())
        } else {
            Err(format!("{:?}", d.lines()))
        }
    })
    .await;
    assert!(
        !waiting.is_finished(),
        "tasks/result answered before the run finished"
    );
    d.set_run(id, "completed", Some("success"));
    let reply = tokio::time::timeout(LIMIT, waiting)
        .await
        .expect("tasks/result answered")
        .unwrap();
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["conclusion"], "success");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let got = c.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(got.result()["status"], "completed");
    d.assert_clean();
}

/// A job of GitHub's published example with the given id, name, status and
/// steps (`(status, conclusion)` each).
fn job(id: u64, name: &str, status: &str, steps: &[(&str, Option<&str>)]) -> Value {
    let mut j = taskgate_github_double::fixture("job-paginated.json")["jobs"][0].clone();
    j["id"] = json!(id);
    j["name"] = json!(name);
    j["status"] = json!(status);
    j["conclusion"] = if status == "completed" {
        json!("success")
    } else {
        Value::Null
    };
    j["steps"] = steps
        .iter()
        .enumerate()
        .map(|(i, (status, conclusion))| {
            json!({"name": format!("step {}", i + 1), "number": i + 1, "status": status, "conclusion": conclusion})
        })
        .collect();
    j
}

/// Opens `subscriptions/listen` for `task` on `server`.
async fn listen(server: &Server, id: &str, task: &str) -> common::SseReader {
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listened_run_that_does_not_change_spends_no_rate_budget() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "1.0.0"})).await;
    let id = only_run(&d);
    d.set_run(id, "in_progress", None);
    let mut stream = listen(&server, "watch", &task).await;
    let ack = stream.next(LIMIT).await.expect("an acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let first = stream.next(LIMIT).await.expect("the task as it is");
    assert_eq!(first["params"]["status"], "working", "{first}");
    // From here on the watch asks GitHub "changed?" at the poll interval
    // (200 ms): watch it at GitHub's side over many intervals.
    let budget = d.remaining();
    d.clear_seen();
    wait_for("twelve conditional requests", LIMIT, || async {
        let n = d.not_modified();
        if n >= 12 {
            Ok(())
        } else {
            Err(format!("{n} so far"))
        }
    })
    .await;
    let seen = d.seen();
    assert!(
        seen.iter()
            .all(|r| r.method == "GET" && r.if_none_match.is_some() && r.not_modified),
        "only conditional reads, all answered 304: {:?}",
        d.lines()
    );
    assert_eq!(d.remaining(), budget, "a 304 spends no rate budget");

    // The run ends: the next ask sees it, and the stream says so and closes.
    d.set_run(id, "completed", Some("success"));
    let mut statuses = Vec::new();
    let closing = loop {
        let m = stream.next(LIMIT).await.expect("a notification or the end");
        if m.get("method").is_none() {
            break m;
        }
        statuses.push(m["params"]["status"].as_str().unwrap().to_owned());
    };
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("completed"),
        "{statuses:?}"
    );
    assert_eq!(closing["result"]["resultType"], "complete", "{closing}");
    assert!(d.remaining() < budget, "the change was read in full");
    d.assert_clean();
}

/// One page of `taskgate_logs`: its lines as `source: text`, its cursor and
/// whether it is complete.
async fn logs_page(c: &Client, task: &str, cursor: Option<&str>) -> (Vec<String>, String, bool) {
    let mut args = json!({"taskId": task});
    if let Some(cursor) = cursor {
        args["cursor"] = json!(cursor);
    }
    let reply = c.call("taskgate_logs", args).await;
    assert!(reply.is_ok(), "{}", reply.raw);
    let page = &reply.result()["structuredContent"];
    let lines = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            format!(
                "{}: {}",
                l["source"].as_str().unwrap(),
                l["text"].as_str().unwrap()
            )
        })
        .collect();
    (
        lines,
        page["cursor"].as_str().unwrap().to_owned(),
        page["complete"].as_bool().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_steps_and_finished_jobs_logs_are_read_while_it_runs_each_once_in_order() {
    let d = Double::start().await;
    let s = setup(&d, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "2.0.0"})).await;
    let id = only_run(&d);
    d.set_run(id, "in_progress", None);
    d.set_jobs(
        id,
        json!([
            job(
                11,
                "build",
                "in_progress",
                &[("completed", Some("success")), ("in_progress", None)]
            ),
            job(12, "deploy", "queued", &[])
        ]),
    );
    let (first, cursor, complete) = logs_page(&c, &task, None).await;
    assert_eq!(
        first,
        [
            "build: started step 1: step 1",
            "build: finished step 1: step 1 (success)",
            "build: started step 2: step 2"
        ]
    );
    assert!(!complete);
    let (none, cursor, _) = logs_page(&c, &task, Some(&cursor)).await;
    assert!(none.is_empty(), "nothing new, nothing again: {none:?}");

    d.set_job_log(
        11,
        "2026-12-04T07:00:00.0000000Z ##[group]Run cargo build\n2026-12-04T07:00:09.0000000Z Finished release\n",
    );
    d.set_jobs(
        id,
        json!([
            job(
                11,
                "build",
                "completed",
                &[
                    ("completed", Some("success")),
                    ("completed", Some("success"))
                ]
            ),
            job(12, "deploy", "in_progress", &[("in_progress", None)])
        ]),
    );
    let (second, cursor, complete) = logs_page(&c, &task, Some(&cursor)).await;
    assert_eq!(
        second,
        [
            "build: finished step 2: step 2 (success)",
            "build: 2026-12-04T07:00:00.0000000Z ##[group]Run cargo build",
            "build: 2026-12-04T07:00:09.0000000Z Finished release",
            "deploy: started step 1: step 1",
        ]
    );
    assert!(!complete);

    d.set_job_log(12, "2026-12-04T07:01:00.0000000Z deployed 2.0.0\n");
    d.set_jobs(
        id,
        json!([
            job(
                11,
                "build",
                "completed",
                &[
                    ("completed", Some("success")),
                    ("completed", Some("success"))
                ]
            ),
            job(12, "deploy", "completed", &[("completed", Some("success"))])
        ]),
    );
    d.set_run(id, "completed", Some("success"));
    let (third, end, complete) = logs_page(&c, &task, Some(&cursor)).await;
    assert_eq!(
        third,
        [
            "deploy: finished step 1: step 1 (success)",
            "deploy: 2026-12-04T07:01:00.0000000Z deployed 2.0.0",
        ]
    );
    assert!(complete);
    let (after, _, complete) = logs_page(&c, &task, Some(&end)).await;
    assert!(after.is_empty() && complete);
    assert!(
        !d.downloads().is_empty(),
        "the finished jobs' logs were downloaded"
    );
    d.assert_clean();
}
