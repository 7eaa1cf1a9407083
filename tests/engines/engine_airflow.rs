//! The Airflow engine through the server binary: each test writes a config whose
//! engine points at the Airflow of `scripts/airflow/up.sh` (DAGs from
//! `tests/airflow/dags`), runs `taskgate serve`, and drives it as an MCP client over
//! HTTP with the 2026-07-28 tasks extension. Upstream effects are checked through
//! Airflow's API and its access log.
//!
//! Skipped when `TASKGATE_AIRFLOW_URL` is unset, failed when `TASKGATE_REQUIRE_E2E=1`.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use common::airflow::{self, Access};
use common::{wait_for as until, Legacy, Server, Setup};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

const LIMIT: Duration = Duration::from_secs(180);

fn airflow() -> Option<String> {
    e2e_endpoint("TASKGATE_AIRFLOW_URL")
}

fn password() -> String {
    std::env::var("TASKGATE_AIRFLOW_PASSWORD").unwrap_or_else(|_| "taskgate-test-password".into())
}

fn setup(url: &str, dag: &str, extra_target: &str) -> Setup {
    let body = format!(
        r#"[engines.af]
kind = "airflow"
base_url = "{url}"
username = "taskgate"
password_env = "TG_TEST_AIRFLOW_PASSWORD"
connect_timeout = "20s"
read_timeout = "40s"

[[tools]]
name = "pipeline"
description = "Run a DAG on Airflow"
engine = "af"
mode = "hybrid"
poll_interval = "200ms"
keep_alive = "1h"
input_schema = {{ type = "object", properties = {{ dataset = {{ type = "string" }}, rows = {{ type = "integer" }}, version = {{ type = "string" }} }} }}
target = {{ dag_id = "{dag}"{extra_target} }}
"#
    );
    let pw = password();
    // A loaded Airflow answers slowly while the scheduler and the other tests
    // write to it (a trigger took over 10 s in a CI run, on SQLite): give each call
    // more room than the shared test default (and its connects and reads more than
    // the engine's defaults: a loaded api-server was seen refusing a trigger POST).
    Setup::config(
        &body,
        &[
            ("TG_TEST_AIRFLOW_PASSWORD", pw.as_str()),
            ("TASKGATE__SERVER__CALL_TIMEOUT", "45s"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_run_completes_with_the_xcom_as_structured_content() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_success", r#", result = { task_id = "load" }"#);
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c
        .start_task("pipeline", json!({"dataset": "bin", "rows": 2}))
        .await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"dataset": "bin", "total": 2, "count": 2}),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dag_run_is_a_tool_error_naming_the_task() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_fail", "");
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c.start_task("pipeline", json!({})).await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("explode") && text.contains("taskgate-log-line 5 of 5"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_run_and_the_task_reads_cancelled() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_long", "");
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c.start_task("pipeline", json!({})).await;
    until("sleep_long running", LIMIT, || async {
        let r = c.get_reply(&task).await.result().clone();
        match r["statusMessage"].as_str() {
            Some(m) if m.contains("running: sleep_long") => Ok(()),
            _ => Err(r.to_string()),
        }
    })
    .await;
    assert!(c.cancel_reply(&task).await.is_ok());
    let r = c.until_status(&task, "cancelled", LIMIT).await;
    assert_eq!(r["status"], "cancelled", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_accepted_through_tasks_update() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_approval", r#", result = { task_id = "release" }"#);
    let server = Server::start(&s).await;
    let c = server.client();
    let task = c.start_task("pipeline", json!({"version": "5.0"})).await;
    let r = c.until_status(&task, "input_required", LIMIT).await;
    let (key, request) = r["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["option"]["enum"],
        json!(["Approve", "Reject"]),
        "{request}"
    );
    let ok = c
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"option": "Approve"}} }),
        )
        .await;
    assert!(ok.is_ok(), "{:?}", ok.body);
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"released": "5.0"}),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_loses_nothing() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_success", r#", result = { task_id = "load" }"#);
    let mut first = Server::start(&s).await;
    let c = first.client();
    let task = c
        .start_task("pipeline", json!({"dataset": "restart", "rows": 1}))
        .await;
    assert_eq!(c.get_reply(&task).await.result()["status"], "working");
    first.kill();
    let second = Server::start(&s).await;
    let c = c.at(&second.url());
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"]["dataset"], "restart",
        "{done}"
    );
}

/// Counted in Airflow's access log, by when each request was made (see
/// `common::airflow`): after a read of a running run, the server asks Airflow
/// nothing about it for two seconds (ten poll intervals) until the client asks
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_makes_no_airflow_calls() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_idle", "");
    let server = Server::start(&s).await;
    let c = server.client();
    let marker = token("idle");
    let task = c.start_task("pipeline", json!({"dataset": marker})).await;
    let r: Value = c.get_reply(&task).await.result().clone();
    assert_eq!(r["status"], "working", "{r}");
    // The read has answered: every request it made was taken by the api-server
    // before this moment (their lines may be written a little later).
    let opened = SystemTime::now();
    let watched = Instant::now();
    until(
        "two seconds of idleness (ten poll intervals)",
        LIMIT,
        || async {
            if watched.elapsed() >= Duration::from_secs(2) {
                Ok(())
            } else {
                Err(format!("{:?}", watched.elapsed()))
            }
        },
    )
    .await;
    let closed = SystemTime::now();
    // The test's own look-up (a listing of the DAG's runs, made after the window).
    let run = run_id(&url, "tg_idle", &marker).await;
    // This server's requests: the DAG's own paths (`…/tg_idle`, `…/details`, …)
    // and this run's; not the DAG's run list (where runs are triggered and
    // looked up) nor other runs (other tests use the DAG too).
    let runs = "/api/v2/dags/tg_idle/dagRuns";
    let this_run = format!("{runs}/{run}");
    let of_run = |a: &Access| a.path == this_run || a.path.starts_with(&format!("{this_run}/"));
    let ours = |a: &Access| !a.path.starts_with(runs) || of_run(a);
    // Not a log that shows nothing: the read's request is in it, made before
    // the window.
    until("the read's request in the access log", LIMIT, || async {
        if airflow::requests_for("tg_idle")
            .iter()
            .any(|a| of_run(a) && a.started < opened)
        {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    assert!(c.cancel_reply(&task).await.is_ok());
    // Lines are written as requests end: once the cancel's PATCH, made after
    // the window, is in the log, a request made inside the window has had the
    // whole cancel to end and be written too.
    until("the cancel's PATCH in the access log", LIMIT, || async {
        if airflow::requests_for("tg_idle")
            .iter()
            .any(|a| a.method == "PATCH" && a.path == this_run && a.started >= closed)
        {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    let logged = airflow::requests_for("tg_idle");
    let late = logged
        .iter()
        .filter(|a| ours(a) && a.started < opened && a.written >= opened)
        .count();
    eprintln!("[airflow idle] {late} request(s) made before the window logged after it opened");
    let idle: Vec<String> = logged
        .into_iter()
        .filter(|a| ours(a) && a.made_in(opened, closed))
        .map(|a| a.line)
        .collect();
    assert!(
        idle.is_empty(),
        "the idle server called Airflow between {} and {}:\n{}",
        humantime::format_rfc3339_micros(opened),
        humantime::format_rfc3339_micros(closed),
        idle.join("\n")
    );
}

/// A token unique to this test process and call.
fn token(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{nanos}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_token_retry_is_one_run_other_arguments_conflict_and_the_xcom_is_the_result() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_success", r#", result = { task_id = "load" }"#);
    let server = Server::start(&s).await;
    let c = Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let op = token("af-op");
    let dataset = token("sep");
    let args = json!({"dataset": dataset, "rows": 3});
    let first = c.call_op("pipeline", args.clone(), &op, 3600).await;
    assert_eq!(
        first.result()["operation"]["token"],
        op.as_str(),
        "{:?}",
        first.body
    );
    // The same token and arguments again: the same operation (the same DAG run id).
    let again = c.call_op("pipeline", args.clone(), &op, 3600).await;
    assert_eq!(
        again.result()["operation"]["token"],
        op.as_str(),
        "{:?}",
        again.body
    );
    // The same token with other arguments: a conflict, and no second run.
    let other = c
        .call_op(
            "pipeline",
            json!({"dataset": "other", "rows": 1}),
            &op,
            3600,
        )
        .await;
    assert_eq!(other.error()["code"], -32602, "{:?}", other.body);
    c.until_op_status(&op, "completed", LIMIT).await;
    let result = c.op_result(&op).await;
    assert_eq!(
        result.result()["result"]["structuredContent"],
        json!({"dataset": dataset, "total": 6, "count": 3}),
        "{:?}",
        result.body
    );
    assert_eq!(
        runs_with(&url, "tg_success", "dataset", &dataset)
            .await
            .len(),
        1,
        "one DAG run for one token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_failure_is_a_tool_error_and_cancel_reads_cancelled() {
    let Some(url) = airflow() else { return };
    let fail = setup(&url, "tg_fail", "");
    let long = setup(&url, "tg_long", "");
    let (fs, ls) = (Server::start(&fail).await, Server::start(&long).await);
    let f = Legacy::connect(&fs.url(), "2025-11-25", json!({"tasks": {}})).await;
    let l = Legacy::connect(&ls.url(), "2025-11-25", json!({"tasks": {}})).await;
    let failing = f.start_task("pipeline", json!({})).await;
    let sleeping = l.start_task("pipeline", json!({})).await;
    // tasks/result blocks until the failed run's end.
    let done = f.request("tasks/result", json!({"taskId": failing})).await;
    assert_eq!(done.result()["isError"], true, "{:?}", done.body);
    assert!(
        common::text(done.result()).contains("explode"),
        "{:?}",
        done.body
    );
    until("sleep_long running", LIMIT, || async {
        let r = l.request("tasks/get", json!({"taskId": sleeping})).await;
        match r.result()["statusMessage"].as_str() {
            Some(m) if m.contains("running: sleep_long") => Ok(()),
            _ => Err(r.result().to_string()),
        }
    })
    .await;
    let cancelled = l.request("tasks/cancel", json!({"taskId": sleeping})).await;
    assert!(cancelled.is_ok(), "{:?}", cancelled.body);
    until("cancelled", LIMIT, || async {
        let r = l.request("tasks/get", json!({"taskId": sleeping})).await;
        if r.result()["status"] == "cancelled" {
            Ok(())
        } else {
            Err(r.result().to_string())
        }
    })
    .await;
}

/// GET `path` of Airflow's REST API (`/api/v2` + `path`) as the tests' user, to
/// check what a test did upstream.
async fn airflow_get(url: &str, path: &str) -> Value {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(45))
        .build()
        .unwrap();
    let token: Value = http
        .post(format!("{url}/auth/token"))
        .json(&json!({"username": "taskgate", "password": password()}))
        .send()
        .await
        .expect("POST /auth/token")
        .error_for_status()
        .expect("a token")
        .json()
        .await
        .expect("token JSON");
    http.get(format!("{url}/api/v2{path}"))
        .bearer_auth(token["access_token"].as_str().expect("access_token"))
        .send()
        .await
        .expect("GET")
        .error_for_status()
        .expect("Airflow answered")
        .json()
        .await
        .expect("JSON")
}

/// The runs of `dag` whose `conf[field]` is `value` (among its latest 100).
async fn runs_with(url: &str, dag: &str, field: &str, value: &str) -> Vec<Value> {
    let runs = airflow_get(
        url,
        &format!("/dags/{dag}/dagRuns?limit=100&order_by=-run_after"),
    )
    .await;
    runs["dag_runs"]
        .as_array()
        .expect("dag_runs")
        .iter()
        .filter(|r| r["conf"][field] == value)
        .cloned()
        .collect()
}

/// A 2025-11-25 session that can take tasks and answer elicitations.
async fn tasks_2025(server: &Server) -> Legacy {
    Legacy::connect(
        &server.url(),
        "2025-11-25",
        json!({"elicitation": {}, "tasks": {}}),
    )
    .await
}

/// Polls 2025-11-25 `tasks/get` until the task reads `status`.
async fn until_2025(c: &Legacy, task: &str, status: &str) -> Value {
    until(&format!("task {task} {status}"), LIMIT, || async {
        let t = c
            .request("tasks/get", json!({"taskId": task}))
            .await
            .result()
            .clone();
        if t["status"] == status {
            Ok(t)
        } else {
            Err(t.to_string())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_a_dag_run_completes_with_the_xcom() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_success", r#", result = { task_id = "load" }"#);
    let server = Server::start(&s).await;
    let c = tasks_2025(&server).await;
    let task = c
        .start_task("pipeline", json!({"dataset": "t2025", "rows": 3}))
        .await;
    until_2025(&c, &task, "completed").await;
    let result = c.request("tasks/result", json!({"taskId": task})).await;
    let result = result.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"dataset": "t2025", "total": 6, "count": 3}),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_an_approval_declined_through_elicitation_takes_the_reject_option() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_approval", "");
    let server = Server::start(&s).await;
    let c = tasks_2025(&server).await;
    let version = token("decline");
    let task = c.start_task("pipeline", json!({"version": version})).await;
    until_2025(&c, &task, "input_required").await;
    let (reply, asked) = c
        .request_answering("tasks/result", json!({"taskId": task}), |request| {
            assert_eq!(request["method"], "elicitation/create", "{request}");
            json!({"action": "decline"})
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["params"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("Release {version}?")),
        "{message}"
    );
    assert_eq!(reply.result()["isError"], false, "{:?}", reply.body);
    let runs = runs_with(&url, "tg_approval", "version", &version).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = runs[0]["dag_run_id"].as_str().unwrap();
    let base = format!("/dags/tg_approval/dagRuns/{run}/taskInstances");
    let detail = airflow_get(&url, &format!("{base}/approve_release/-1/hitlDetails")).await;
    assert_eq!(detail["chosen_options"], json!(["Reject"]), "{detail}");
    let tis = airflow_get(&url, &base).await;
    let release = tis["task_instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == "release")
        .cloned()
        .unwrap();
    assert_eq!(release["state"], "skipped", "{release}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_a_form_answered_through_elicitation_reaches_the_dag() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_form", r#", result = { task_id = "use_details" }"#);
    let server = Server::start(&s).await;
    let c = tasks_2025(&server).await;
    let task = c.start_task("pipeline", json!({})).await;
    until_2025(&c, &task, "input_required").await;
    let (reply, asked) = c
        .request_answering("tasks/result", json!({"taskId": task}), |request| {
            assert_eq!(request["method"], "elicitation/create", "{request}");
            json!({"action": "accept", "content": {"region": "us-east-1", "replicas": 5}})
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let schema = &asked[0]["params"]["requestedSchema"];
    assert_eq!(
        schema["properties"]["replicas"]["type"], "integer",
        "{schema}"
    );
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"chosen": ["OK"], "details": {"region": "us-east-1", "replicas": 5}}),
        "{result}"
    );
}

/// A 2025-06-18 session that opted in to SEP-1391 operations.
async fn sep1391(server: &Server) -> Legacy {
    Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"elicitation": {}, "experimental": {"taskgate/sep-1391": {}}}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_a_failed_dag_run_is_an_error_result_naming_the_task() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_fail", "");
    let server = Server::start(&s).await;
    let c = sep1391(&server).await;
    let token = token("op");
    let started = c.call_op("pipeline", json!({}), &token, 3600).await;
    assert!(started.is_ok(), "{:?}", started.body);
    // A tool error is a completed operation whose result is an error.
    c.until_op_status(&token, "completed", LIMIT).await;
    let result = c.op_result(&token).await;
    let result = &result.result()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert!(common::text(result).contains("explode"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_an_approval_accepted_through_the_status_elicitation() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_approval", r#", result = { task_id = "release" }"#);
    let server = Server::start(&s).await;
    let c = sep1391(&server).await;
    let token = token("op-approve");
    let version = token.clone();
    let started = c
        .call_op("pipeline", json!({"version": version}), &token, 3600)
        .await;
    assert!(started.is_ok(), "{:?}", started.body);
    // The status answer that reads input_required carries the question first, on
    // its SSE stream.
    let request = until("input_required", LIMIT, || async {
        let answer = c.op_status(&token).await;
        if !answer.is_ok() && answer.error()["data"]["retryable"] == true {
            // Airflow answered too slowly under load: a retryable error, read again.
            return Err(answer.message());
        }
        match answer.result()["status"].as_str() {
            Some("input_required") => Ok(answer.messages[0].clone()),
            Some("working") => Err(answer.result().to_string()),
            _ => panic!("{:?}", answer.body),
        }
    })
    .await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let message = request["params"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("Release {version}?")),
        "{message}"
    );
    let code = c
        .respond(
            &request["id"],
            json!({"action": "accept", "content": {"option": "Approve"},
                   "_operation": {"token": token}}),
        )
        .await;
    assert_eq!(code, 202);
    c.until_op_status(&token, "completed", LIMIT).await;
    let result = c.op_result(&token).await;
    assert_eq!(
        result.result()["result"]["structuredContent"],
        json!({"released": version}),
        "{:?}",
        result.body
    );
}

/// A cancel notification gets no reply, so nothing but taskgate can send it
/// again: the read before the cancel and the cancel's PATCH each meet a server
/// error (answered by a proxy in front of Airflow, as a loaded Airflow answered
/// them), and the run still ends, cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_cancel_by_token_ends_the_dag_run_through_server_errors() {
    let Some(url) = airflow() else { return };
    let proxy = Proxy::start(&url).await;
    let s = setup(&proxy.url, "tg_long", "");
    let server = Server::start(&s).await;
    let c = sep1391(&server).await;
    let token = token("op-cancel");
    let marker = token.clone();
    start_op(&c, json!({"dataset": marker}), &token).await;
    let run = run_id(&url, "tg_long", &marker).await;
    // SEP-1391 status carries no message: watch the task in Airflow instead.
    until("sleep_long running", LIMIT, || async {
        let ti = airflow_get(
            &url,
            &format!("/dags/tg_long/dagRuns/{run}/taskInstances/sleep_long"),
        )
        .await;
        if ti["state"] == "running" {
            Ok(())
        } else {
            Err(ti.to_string())
        }
    })
    .await;
    let path = format!("/api/v2/dags/tg_long/dagRuns/{run}");
    proxy.fail_next("GET", &path);
    proxy.fail_next("PATCH", &path);
    let posted = c
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"reason": "not needed", "_operation": {"token": token}}}),
        )
        .await
        .status;
    assert_eq!(posted, 202);
    assert_eq!(
        proxy.failed(),
        vec![format!("GET {path}"), format!("PATCH {path}")],
        "both faults were met"
    );
    let runs = runs_with(&url, "tg_long", "dataset", &marker).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["state"], "failed", "{:?}", runs[0]);
    assert!(
        runs[0]["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("taskgate: cancelled")),
        "{:?}",
        runs[0]
    );
    c.until_op_status(&token, "canceled", LIMIT).await;
}

/// A request the [`Proxy`] answers itself with HTTP 500 `Database error` (what a
/// busy Airflow answered in CI when its database was SQLite) instead of forwarding it, once.
struct Fault {
    method: String,
    path: String,
}

#[derive(Default)]
struct ProxyLog {
    /// `METHOD path` of every request received, in order.
    seen: Vec<String>,
    faults: Vec<Fault>,
    /// `METHOD path` of the requests answered with a fault.
    failed: Vec<String>,
}

/// A plain forwarding HTTP proxy in front of Airflow's api-server that counts the
/// requests taskgate makes (where Airflow receives them), and can answer chosen
/// ones with a server error, as a loaded Airflow does.
struct Proxy {
    url: String,
    log: std::sync::Arc<std::sync::Mutex<ProxyLog>>,
    served: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Self {
        use axum::body::{to_bytes, Body};
        use axum::extract::{Request, State};
        use axum::response::Response;
        use std::sync::{Arc, Mutex};

        type Shared = (Arc<Mutex<ProxyLog>>, reqwest::Client, String);
        async fn forward(State((log, http, upstream)): State<Shared>, req: Request) -> Response {
            let method = req.method().clone();
            let path = req.uri().path().to_owned();
            let query = req
                .uri()
                .query()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            let line = format!("{method} {path}");
            let fault = {
                let mut log = log.lock().unwrap();
                log.seen.push(line.clone());
                let at = log
                    .faults
                    .iter()
                    .position(|f| f.method == method.as_str() && f.path == path);
                at.map(|i| {
                    log.faults.remove(i);
                    log.failed.push(line.clone());
                })
            };
            if fault.is_some() {
                return Response::builder()
                    .status(500)
                    .header("content-type", "application/json")
                    .body(Body::from(r#"{"detail":"Database error"}"#))
                    .unwrap();
            }
            let headers = req.headers().clone();
            let body = to_bytes(req.into_body(), usize::MAX).await.unwrap();
            let mut out = http.request(
                reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
                format!("{upstream}{path}{query}"),
            );
            for name in ["authorization", "content-type", "accept"] {
                if let Some(v) = headers.get(name) {
                    out = out.header(name, v.to_str().unwrap());
                }
            }
            let answer = match out.body(body.to_vec()).send().await {
                Ok(answer) => answer,
                Err(e) => {
                    return Response::builder()
                        .status(502)
                        .body(Body::from(e.to_string()))
                        .unwrap()
                }
            };
            let mut back = Response::builder().status(answer.status().as_u16());
            for name in ["content-type", "date", "retry-after"] {
                if let Some(v) = answer.headers().get(name) {
                    back = back.header(name, v.to_str().unwrap());
                }
            }
            back.body(Body::from(answer.bytes().await.unwrap_or_default()))
                .unwrap()
        }

        let log = Arc::new(Mutex::new(ProxyLog::default()));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let app = axum::Router::new().fallback(forward).with_state((
            log.clone(),
            http,
            upstream.trim_end_matches('/').to_owned(),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, log, served }
    }

    /// Answers the next `method path` request with HTTP 500, once.
    fn fail_next(&self, method: &str, path: &str) {
        self.log.lock().unwrap().faults.push(Fault {
            method: method.to_owned(),
            path: path.to_owned(),
        });
    }

    /// Requests received so far whose path starts with `prefix`.
    fn count(&self, prefix: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, p)| p.starts_with(prefix))
            })
            .count()
    }

    /// Requests received so far that are exactly `method path`.
    fn count_exact(&self, method: &str, path: &str) -> usize {
        let line = format!("{method} {path}");
        self.log
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|l| **l == line)
            .count()
    }

    fn failed(&self) -> Vec<String> {
        self.log.lock().unwrap().failed.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.served.abort();
    }
}

/// The run id of the one run of `dag` whose `conf.dataset` is `marker`, once
/// Airflow lists it.
async fn run_id(url: &str, dag: &str, marker: &str) -> String {
    until(&format!("the run of {dag} for {marker}"), LIMIT, || async {
        let runs = runs_with(url, dag, "dataset", marker).await;
        match runs.as_slice() {
            [run] => Ok(run["dag_run_id"].as_str().unwrap().to_owned()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// Starts (or finds) the SEP-1391 operation `token`, sending the call again while
/// it meets a retryable error (a loaded Airflow answers "Database error" now and
/// then): the same token reaches the same run.
async fn start_op(c: &Legacy, args: Value, token: &str) {
    until(&format!("operation {token} started"), LIMIT, || async {
        let started = c.call_op("pipeline", args.clone(), token, 3600).await;
        if started.is_ok() {
            Ok(())
        } else if started.error()["data"]["retryable"] == true {
            Err(started.message())
        } else {
            panic!("{:?}", started.body)
        }
    })
    .await;
}

/// Reads SEP-1391 status until the operation asks its question (carried first on
/// the status answer's stream); returns that `elicitation/create` request.
async fn op_question(c: &Legacy, token: &str) -> Value {
    until("input_required", LIMIT, || async {
        let answer = c.op_status(token).await;
        if !answer.is_ok() && answer.error()["data"]["retryable"] == true {
            // Airflow answered too slowly under load: a retryable error, read again.
            return Err(answer.message());
        }
        match answer.result()["status"].as_str() {
            Some("input_required") => Ok(answer.messages[0].clone()),
            Some("working") => Err(answer.result().to_string()),
            _ => panic!("{:?}", answer.body),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_an_approval_accepted_after_the_server_was_killed_mid_run() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_approval", r#", result = { task_id = "release" }"#);
    let mut first = Server::start(&s).await;
    let c = tasks_2025(&first).await;
    let version = token("accept");
    let task = c.start_task("pipeline", json!({"version": version})).await;
    until_2025(&c, &task, "input_required").await;
    first.kill();
    // Another process, the same keys: the session and the task handle still open.
    let second = Server::start(&s).await;
    let c = c.at(&second.url());
    let (reply, asked) = c
        .request_answering("tasks/result", json!({"taskId": task}), |request| {
            assert_eq!(request["method"], "elicitation/create", "{request}");
            json!({"action": "accept", "content": {"option": "Approve"}})
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["params"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("Release {version}?")),
        "{message}"
    );
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"released": version}),
        "{result}"
    );
    assert_eq!(
        runs_with(&url, "tg_approval", "version", &version)
            .await
            .len(),
        1,
        "one DAG run across the restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_an_approval_declined_takes_the_reject_option() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_approval", "");
    let server = Server::start(&s).await;
    let c = sep1391(&server).await;
    let token = token("op-decline");
    let version = token.clone();
    start_op(&c, json!({"version": version}), &token).await;
    let request = op_question(&c, &token).await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let code = c
        .respond(
            &request["id"],
            json!({"action": "decline", "_operation": {"token": token}}),
        )
        .await;
    assert_eq!(code, 202);
    c.until_op_status(&token, "completed", LIMIT).await;
    let result = c.op_result(&token).await;
    assert_eq!(
        result.result()["result"]["isError"],
        false,
        "{:?}",
        result.body
    );
    let runs = runs_with(&url, "tg_approval", "version", &version).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = runs[0]["dag_run_id"].as_str().unwrap();
    let base = format!("/dags/tg_approval/dagRuns/{run}/taskInstances");
    let detail = airflow_get(&url, &format!("{base}/approve_release/-1/hitlDetails")).await;
    assert_eq!(detail["chosen_options"], json!(["Reject"]), "{detail}");
    let release = airflow_get(&url, &format!("{base}/release")).await;
    assert_eq!(release["state"], "skipped", "{release}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_a_form_answered_after_the_server_was_killed_mid_run() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_form", r#", result = { task_id = "use_details" }"#);
    let mut first = Server::start(&s).await;
    let c = sep1391(&first).await;
    let token = token("op-form");
    start_op(&c, json!({}), &token).await;
    first.kill();
    let second = Server::start(&s).await;
    let c = c.at(&second.url());
    let request = op_question(&c, &token).await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let schema = &request["params"]["requestedSchema"];
    assert_eq!(
        schema["properties"]["replicas"]["type"], "integer",
        "{schema}"
    );
    let code = c
        .respond(
            &request["id"],
            json!({"action": "accept", "content": {"region": "us-east-1", "replicas": 4},
                   "_operation": {"token": token}}),
        )
        .await;
    assert_eq!(code, 202);
    c.until_op_status(&token, "completed", LIMIT).await;
    let result = c.op_result(&token).await;
    assert_eq!(
        result.result()["result"]["structuredContent"],
        json!({"chosen": ["OK"], "details": {"region": "us-east-1", "replicas": 4}}),
        "{:?}",
        result.body
    );
}

/// A SEP-1391 answer is a JSON-RPC response: it gets no reply that could carry
/// a retryable error. Its write to Airflow meets a server error (answered by a
/// proxy, as a loaded Airflow answered one in CI when its SQLite was locked for 30 s), and
/// the answer still reaches the DAG: taskgate sends it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_a_form_answer_that_meets_a_server_error_still_reaches_the_dag() {
    let Some(url) = airflow() else { return };
    let proxy = Proxy::start(&url).await;
    let s = setup(
        &proxy.url,
        "tg_form",
        r#", result = { task_id = "use_details" }"#,
    );
    let server = Server::start(&s).await;
    let c = sep1391(&server).await;
    let token = token("op-form-fault");
    let marker = token.clone();
    start_op(&c, json!({"dataset": marker}), &token).await;
    let request = op_question(&c, &token).await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let run = run_id(&url, "tg_form", &marker).await;
    let path =
        format!("/api/v2/dags/tg_form/dagRuns/{run}/taskInstances/ask_details/-1/hitlDetails");
    proxy.fail_next("PATCH", &path);
    let code = c
        .respond(
            &request["id"],
            json!({"action": "accept", "content": {"region": "eu-west-1", "replicas": 2},
                   "_operation": {"token": token}}),
        )
        .await;
    assert_eq!(code, 202);
    assert_eq!(
        proxy.failed(),
        vec![format!("PATCH {path}")],
        "the fault was met"
    );
    c.until_op_status(&token, "completed", LIMIT).await;
    let result = c.op_result(&token).await;
    assert_eq!(
        result.result()["result"]["structuredContent"],
        json!({"chosen": ["OK"], "details": {"region": "eu-west-1", "replicas": 2}}),
        "{:?}",
        result.body
    );
}

/// Counted at a proxy in front of Airflow: after a task was read, no request
/// for its run reaches Airflow, while a 2025-11-25 `tasks/result` waiting on
/// another task of the same server reads that one every poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_an_idle_task_costs_no_airflow_calls_while_another_is_awaited() {
    let Some(url) = airflow() else { return };
    let proxy = Proxy::start(&url).await;
    let s = setup(&proxy.url, "tg_idle", "");
    let server = Server::start(&s).await;
    let c = tasks_2025(&server).await;
    let (quiet, awaited) = (token("quiet"), token("awaited"));
    let idle = c.start_task("pipeline", json!({"dataset": quiet})).await;
    let busy = c.start_task("pipeline", json!({"dataset": awaited})).await;
    let idle_run = run_id(&url, "tg_idle", &quiet).await;
    let busy_run = run_id(&url, "tg_idle", &awaited).await;
    let idle_path = format!("/api/v2/dags/tg_idle/dagRuns/{idle_run}");
    let busy_path = format!("/api/v2/dags/tg_idle/dagRuns/{busy_run}");
    let t = until_2025(&c, &idle, "working").await;
    assert_eq!(t["pollInterval"], 200, "{t}");
    // The idle task was read (its reply is in, so its requests reached the proxy).
    let idle_calls = proxy.count(&idle_path);
    assert!(idle_calls > 0, "the proxy saw no read of the idle run");
    let waiter = {
        let c = c.clone();
        let busy = busy.clone();
        tokio::spawn(async move { c.request("tasks/result", json!({"taskId": busy})).await })
    };
    // Four reads of the awaited run: at least three poll intervals have passed.
    let reads = proxy.count_exact("GET", &busy_path);
    until("three poll intervals of tasks/result", LIMIT, || async {
        let n = proxy.count_exact("GET", &busy_path);
        if n >= reads + 4 {
            Ok(())
        } else {
            Err(format!("{n} reads of the awaited run"))
        }
    })
    .await;
    assert_eq!(
        proxy.count(&idle_path),
        idle_calls,
        "Airflow was called for the idle run"
    );
    assert!(!waiter.is_finished(), "tasks/result returned early");
    let cancelled = c.request("tasks/cancel", json!({"taskId": busy})).await;
    assert!(cancelled.is_ok(), "{:?}", cancelled.body);
    // The waiting tasks/result ends with the cancel (a cancelled task's result is
    // an error).
    let result = waiter.await.unwrap();
    assert!(result.message().contains("cancelled"), "{:?}", result.body);
    let cancelled = c.request("tasks/cancel", json!({"taskId": idle})).await;
    assert!(cancelled.is_ok(), "{:?}", cancelled.body);
    assert!(
        proxy.count_exact("PATCH", &idle_path) > 0,
        "the proxy does not show the idle run's cancel"
    );
}

/// One `taskgate_logs` page: `(source, text)` lines, the cursor, `complete`.
fn logs_page(reply: &common::Reply) -> (Vec<(String, String)>, String, bool) {
    let s = &reply.result()["structuredContent"];
    let lines = s["lines"]
        .as_array()
        .unwrap_or_else(|| panic!("no lines: {}", reply.raw))
        .iter()
        .map(|l| {
            (
                l["source"].as_str().unwrap().to_owned(),
                l["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (
        lines,
        s["cursor"].as_str().unwrap().to_owned(),
        s["complete"].as_bool().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taskgate_logs_reads_the_task_logs_while_the_run_runs_each_line_once_in_order() {
    let Some(url) = airflow() else { return };
    let s = setup(&url, "tg_logs", "");
    let server = Server::start(&s).await;
    let c = server.client();
    let listed = c.request("tools/list", json!({})).await;
    assert!(
        listed.result()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "taskgate_logs"),
        "{}",
        listed.raw
    );
    let task = c.start_task("pipeline", json!({})).await;
    let mut cursor: Option<String> = None;
    let mut pages: Vec<Vec<(String, String)>> = Vec::new();
    let end = Instant::now() + LIMIT;
    loop {
        // The default limit: each page holds everything printed so far.
        let mut args = json!({"taskId": task});
        if let Some(cur) = &cursor {
            args["cursor"] = json!(cur);
        }
        let reply = c.call("taskgate_logs", args).await;
        let (lines, next, complete) = logs_page(&reply);
        let empty = lines.is_empty();
        pages.push(lines);
        cursor = Some(next);
        if complete {
            break;
        }
        assert!(Instant::now() < end, "not complete in time: {pages:?}");
        if empty {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let all: Vec<&(String, String)> = pages.iter().flatten().collect();
    let first_talk = all.iter().position(|(s, _)| s == "talk try 1").unwrap();
    assert!(all[..first_talk]
        .iter()
        .any(|(s, t)| s == "begin try 1" && t == "tg-logs begin"));
    let numbered: Vec<&str> = all
        .iter()
        .filter(|(s, t)| s == "talk try 1" && t.starts_with("tg-logs line "))
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(
        numbered,
        (1..=5)
            .map(|i| format!("tg-logs line {i} of 5"))
            .collect::<Vec<_>>(),
        "each line once, in order"
    );
    assert_eq!(all.iter().filter(|(_, t)| t == "tg-logs done").count(), 1);
    // Read while it ran: the first numbered line came on an earlier page than the
    // last line, though every page held all there was.
    let page_of = |text: &str| {
        pages
            .iter()
            .position(|p| p.iter().any(|(_, t)| t == text))
            .unwrap()
    };
    assert!(page_of("tg-logs line 1 of 5") < page_of("tg-logs done"));
    // The end stays the end; the task itself completed.
    let reply = c
        .call(
            "taskgate_logs",
            json!({"taskId": task, "cursor": cursor.clone().unwrap()}),
        )
        .await;
    let (lines, _, complete) = logs_page(&reply);
    assert!(lines.is_empty() && complete, "{}", reply.raw);
    c.until_status(&task, "completed", LIMIT).await;
    // A forged cursor is invalid params, and reaches no engine.
    let reply = c
        .call(
            "taskgate_logs",
            json!({"taskId": task, "cursor": "a1/p/-1/1/talk"}),
        )
        .await;
    assert_eq!(reply.code(), -32602, "{}", reply.raw);
}
