//! The Step Functions engine through the server binary: each test creates its own
//! state machine in moto (execution on, `scripts/moto/up.sh`), writes a config
//! whose engine points at moto (or at a throttling proxy in front of it), runs
//! `taskgate serve`, and drives it as an MCP client over HTTP — 2026-07-28 with
//! the tasks extension, 2025-11-25 tasks, and SEP-1391 operations. Upstream
//! effects are checked with the AWS SDK.
//!
//! Skipped when `TASKGATE_MOTO_URL` is unset, failed when `TASKGATE_REQUIRE_E2E=1`.

use crate::common;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sfn::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sfn::types::{ExecutionStatus, StateMachineType};
use common::{more_fields, tool_entry, wait_for, Client, Legacy, Setup};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

const ROLE: &str = "arn:aws:iam::123456789012:role/taskgate-tests";
const LIMIT: Duration = Duration::from_secs(40);

/// The fake credentials the server child gets (moto accepts anything).
const AWS_ENV: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

fn moto() -> Option<String> {
    e2e_endpoint("TASKGATE_MOTO_URL")
}

fn sfn(url: &str) -> aws_sdk_sfn::Client {
    let conf = aws_sdk_sfn::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
        .build();
    aws_sdk_sfn::Client::from_conf(conf)
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("e2e-{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

async fn state_machine(url: &str, prefix: &str, definition: Value) -> String {
    sfn(url)
        .create_state_machine()
        .name(unique(prefix))
        .definition(definition.to_string())
        .role_arn(ROLE)
        .r#type(StateMachineType::Standard)
        .send()
        .await
        .expect("create state machine")
        .state_machine_arn()
        .to_owned()
}

/// The executions of a state machine, as (ARN, status).
async fn executions(url: &str, machine: &str) -> Vec<(String, ExecutionStatus)> {
    sfn(url)
        .list_executions()
        .state_machine_arn(machine)
        .send()
        .await
        .expect("list executions")
        .executions()
        .iter()
        .map(|e| (e.execution_arn().to_owned(), e.status().clone()))
        .collect()
}

/// The status DescribeExecution gives for the only execution of `machine`.
async fn only_execution_status(url: &str, machine: &str) -> ExecutionStatus {
    let all = executions(url, machine).await;
    assert_eq!(all.len(), 1, "expected one execution: {all:?}");
    sfn(url)
        .describe_execution()
        .execution_arn(&all[0].0)
        .send()
        .await
        .expect("describe execution")
        .status()
        .clone()
}

fn pass_wait_succeed(seconds: u64) -> Value {
    json!({"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Result": {"prepared": true}, "ResultPath": "$.prep", "Next": "Pause"},
        "Pause": {"Type": "Wait", "Seconds": seconds, "Next": "Done"},
        "Done": {"Type": "Succeed"}}})
}

fn sleeper() -> Value {
    json!({"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 300, "End": true}}})
}

async fn queue(url: &str) -> String {
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "tests",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
        .create_queue()
        .queue_name(unique("human"))
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_owned()
}

fn human_definition(queue_url: &str) -> Value {
    json!({"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Next": "Approve"},
        "Approve": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl": queue_url, "MessageBody": {"taskToken.$": "$$.Task.Token", "input.$": "$"}},
            "ResultPath": "$.approval", "Next": "Done"},
        "Done": {"Type": "Succeed"}}})
}

const HUMAN_STEP: &str = r#"human_step = { state = "Approve", message = "Approve the analysis?", schema = { type = "object", required = ["approved"], properties = { approved = { type = "boolean" }, note = { type = "string" } } } }"#;

/// One tool `analyze` on the state machine `arn`, through an engine whose
/// endpoint is `endpoint`; `extra_target` is added to the target table.
fn setup(endpoint: &str, arn: &str, extra_target: &str) -> Setup {
    let body = format!(
        r#"[engines.aws]
kind = "stepfunctions"
region = "us-east-1"
endpoint_url = "{endpoint}"

{tool}"#,
        tool = tool_entry(
            "analyze",
            "Analyze a dataset on Step Functions",
            "aws",
            r#"{ type = "object", required = ["dataset"], properties = { dataset = { type = "string" }, depth = { type = "integer" } } }"#,
            &format!(
                r#"state_machine_arn = "{arn}", input_key = "args"{}"#,
                more_fields(extra_target)
            ),
        ),
    );
    Setup::config(&body, &AWS_ENV)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_wait_succeed_completes_with_structured_output() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "pws", pass_wait_succeed(2)).await;
    let s = setup(&url, &arn, "state_in_status = true");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;

    // While it waits, the task is working and names the current state.
    let working = wait_for("working in the Wait state", LIMIT, || async {
        let r = c.get(&task).await;
        match r["status"].as_str() {
            Some("working")
                if r["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("Pause")) =>
            {
                Ok(r)
            }
            Some("completed") => panic!("completed before the Wait state was seen: {r}"),
            _ => Err(r.to_string()),
        }
    })
    .await;
    assert_eq!(working["pollIntervalMs"], 200, "{working}");

    let done = c.until_status(&task, "completed", LIMIT).await;
    let result = &done["result"];
    assert_eq!(result["isError"], false, "{done}");
    assert_eq!(
        result["structuredContent"],
        json!({"args": {"dataset": "d1"}, "prep": {"prepared": true}}),
        "{done}"
    );
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("prepared"),
        "{done}"
    );
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_state_is_a_tool_error_with_error_and_cause() {
    let Some(url) = moto() else { return };
    let arn = state_machine(
        &url,
        "fail",
        json!({"StartAt": "Check", "States": {
            "Check": {"Type": "Fail", "Error": "Dataset.Missing", "Cause": "no dataset named d1"}}}),
    )
    .await;
    let s = setup(&url, &arn, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    let result = &done["result"];
    assert_eq!(result["isError"], true, "{done}");
    assert_eq!(
        result["structuredContent"],
        json!({"error": "Dataset.Missing", "cause": "no dataset named d1"})
    );
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Dataset.Missing") && text.contains("no dataset named d1"),
        "{text}"
    );
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_aborts_the_execution_upstream() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "cancel", sleeper()).await;
    let s = setup(&url, &arn, "state_in_status = true");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    wait_for("in the Sleep state", LIMIT, || async {
        let r = c.get(&task).await;
        if r["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("Sleep"))
        {
            Ok(())
        } else {
            Err(r.to_string())
        }
    })
    .await;
    let cancelled = c.cancel_reply(&task).await;
    assert_eq!(
        cancelled.result()["resultType"],
        "complete",
        "{:?}",
        cancelled.body
    );
    c.until_status(&task, "cancelled", LIMIT).await;
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Aborted
    );
    // Cancelling again is harmless: the task stays cancelled.
    assert!(c.cancel_reply(&task).await.is_ok());
    assert_eq!(c.get(&task).await["status"], "cancelled");
}

async fn human_task(url: &str) -> (String, Setup) {
    let queue_url = queue(url).await;
    let arn = state_machine(url, "human", human_definition(&queue_url)).await;
    (arn.clone(), setup(url, &arn, HUMAN_STEP))
}

/// Polls until the task asks; returns the request key and the request.
async fn asked(c: &Client, task: &str) -> (String, Value) {
    let r = c.until_status(task, "input_required", LIMIT).await;
    let requests = r["inputRequests"]
        .as_object()
        .expect("inputRequests")
        .clone();
    assert_eq!(requests.len(), 1, "{r}");
    let (key, request) = requests.into_iter().next().unwrap();
    assert!(key.starts_with("Approve#"), "{key}");
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Approve the analysis?");
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["approved"])
    );
    let text = r.to_string();
    assert!(
        !text.contains("taskToken") && !text.contains(":execution:"),
        "token or ARN leaked: {text}"
    );
    (key, request)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_human_step_accepted_through_tasks_update() {
    let Some(url) = moto() else { return };
    let (arn, s) = human_task(&url).await;
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    let (key, _) = asked(&c, &task).await;

    // An answer that does not fit the schema never reaches the engine.
    let bad = c
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"approved": "yes"}} }),
        )
        .await;
    assert_eq!(bad.error()["code"], -32602, "{:?}", bad.body);
    assert_eq!(c.get(&task).await["status"], "input_required");

    let ok = c
        .update(
            &task,
            json!({ &key: {"action": "accept", "content": {"approved": true, "note": "fine"}} }),
        )
        .await;
    assert_eq!(ok.result()["resultType"], "complete", "{:?}", ok.body);
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["approval"],
        json!({"approved": true, "note": "fine"}),
        "{done}"
    );
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_human_step_declined_through_tasks_update() {
    let Some(url) = moto() else { return };
    let (arn, s) = human_task(&url).await;
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    let (key, _) = asked(&c, &task).await;
    let reply = c
        .update(&task, json!({ &key: {"action": "decline"} }))
        .await;
    assert!(reply.is_ok(), "{:?}", reply.body);
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["error"], "taskgate.Declined",
        "{done}"
    );
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_between_start_and_result_loses_nothing() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "restart", pass_wait_succeed(3)).await;
    let s = setup(&url, &arn, "");
    // Own HOME, working directory and TMPDIR each.
    let mut first = s.isolated_server().await;
    let c = first.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    assert_eq!(c.get(&task).await["status"], "working");
    first.kill();

    let second = s.isolated_server().await;
    let c = c.at(&second.url());
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"]["args"],
        json!({"dataset": "d1"})
    );
    assert_eq!(executions(&url, &arn).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_token_retry_is_idempotent_and_other_arguments_conflict() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "sep1391", pass_wait_succeed(2)).await;
    let s = setup(&url, &arn, "");
    let server = s.server().await;
    let c = Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let tools = c.request("tools/list", json!({})).await;
    assert_eq!(
        tools.result()["tools"][0]["invocationMode"],
        "async",
        "{:?}",
        tools.body
    );

    let token = unique("op");
    let call = |args: Value| c.call_op("analyze", args, &token, 3600);
    let first = call(json!({"dataset": "d1", "depth": 2})).await;
    assert_eq!(
        first.result()["operation"]["token"],
        token.as_str(),
        "{:?}",
        first.body
    );
    assert_eq!(first.result()["operation"]["status"], "submitted");
    // A retry with the same token and arguments is the same operation.
    let again = call(json!({"depth": 2, "dataset": "d1"})).await;
    assert_eq!(
        again.result()["operation"]["token"],
        token.as_str(),
        "{:?}",
        again.body
    );
    assert_eq!(executions(&url, &arn).await.len(), 1);
    // The same token with other arguments is a conflict.
    let other = call(json!({"dataset": "d2"})).await;
    assert_eq!(other.error()["code"], -32602, "{:?}", other.body);
    assert!(
        other.error()["message"]
            .as_str()
            .unwrap()
            .contains("already used"),
        "{:?}",
        other.body
    );
    assert_eq!(executions(&url, &arn).await.len(), 1);

    // Not finished yet: no result.
    let early = c.op_result(&token).await;
    if early.is_ok() {
        // It may have finished already on a slow machine; then it is the result.
        assert_eq!(
            early.result()["result"]["isError"],
            false,
            "{:?}",
            early.body
        );
    } else {
        assert_eq!(early.error()["code"], -32602, "{:?}", early.body);
    }
    c.until_op_status(&token, "completed", LIMIT).await;
    let result = c.op_result(&token).await;
    assert_eq!(
        result.result()["result"]["structuredContent"]["args"],
        json!({"dataset": "d1", "depth": 2}),
        "{:?}",
        result.body
    );
    // After completion, a retry with the same token is still the same operation.
    let late = call(json!({"dataset": "d1", "depth": 2})).await;
    assert!(late.is_ok(), "{:?}", late.body);
    assert_eq!(executions(&url, &arn).await.len(), 1);
    // An unknown token is not found.
    let unknown = c.op_status(&unique("nope")).await;
    assert_eq!(unknown.error()["code"], -32602, "{:?}", unknown.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_cancel_by_operation_token_aborts_upstream() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "sep1391-cancel", sleeper()).await;
    let s = setup(&url, &arn, "");
    let server = s.server().await;
    let c = Legacy::connect(
        &server.url(),
        "2025-03-26",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let token = unique("op");
    let started = c
        .request(
            "tools/call",
            json!({"name": "analyze", "arguments": {"dataset": "d1"}, "operation": {"token": token}}),
        )
        .await;
    assert!(started.is_ok(), "{:?}", started.body);
    let status = c.op_status(&token).await;
    assert_eq!(status.result()["status"], "working", "{:?}", status.body);
    let posted = c
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"reason": "no longer needed", "_operation": {"token": token}}}),
        )
        .await
        .status;
    assert_eq!(posted, 202);
    c.until_op_status(&token, "canceled", LIMIT).await;
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Aborted
    );
    let result = c.op_result(&token).await;
    assert_eq!(result.error()["code"], -32602, "{:?}", result.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_result_blocks_until_done_and_elicits_the_human_step() {
    let Some(url) = moto() else { return };
    let (arn, s) = human_task(&url).await;
    let server = s.server().await;
    let c = Legacy::connect(
        &server.url(),
        "2025-11-25",
        json!({"elicitation": {}, "tasks": {}}),
    )
    .await;
    let tools = c.request("tools/list", json!({})).await;
    assert_eq!(
        tools.result()["tools"][0]["execution"]["taskSupport"],
        "optional",
        "{:?}",
        tools.body
    );
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;

    let polled = wait_for("input_required", LIMIT, || async {
        let r = c.request("tasks/get", json!({"taskId": task})).await;
        let t = r.result().clone();
        if t["status"] == "input_required" {
            Ok(t)
        } else {
            Err(t.to_string())
        }
    })
    .await;
    assert_eq!(polled["taskId"], task.as_str());

    // tasks/result blocks; the question arrives on its stream and is answered
    // while the stream is open; then the result follows.
    let (reply, asked) = c
        .request_answering("tasks/result", json!({"taskId": task}), |request| {
            assert_eq!(request["method"], "elicitation/create");
            assert_eq!(request["params"]["message"], "Approve the analysis?");
            assert_eq!(
                request["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
                task.as_str()
            );
            json!({"action": "accept", "content": {"approved": true}})
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["approval"],
        json!({"approved": true})
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let status = c.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(status.result()["status"], "completed");
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Succeeded
    );
}

/// A proxy in front of moto that answers AWS's throttling payload (HTTP 400,
/// `ThrottlingException`, "Rate exceeded") to the next `n` requests of one
/// action, can hold one action's requests for a while (a slow upstream), and
/// passes everything else through; it records every action it sees.
struct ThrottlingProxy {
    url: String,
    remaining: Arc<AtomicU32>,
    action: Arc<Mutex<String>>,
    throttled: Arc<AtomicU32>,
    actions: Arc<Mutex<Vec<String>>>,
    slow: Arc<Mutex<(String, Duration)>>,
}

impl ThrottlingProxy {
    async fn start(upstream: &str) -> Self {
        use axum::body::Bytes;
        use axum::http::{HeaderMap, Method, StatusCode, Uri};
        use axum::response::{IntoResponse, Response};

        let remaining = Arc::new(AtomicU32::new(0));
        let action = Arc::new(Mutex::new(String::new()));
        let throttled = Arc::new(AtomicU32::new(0));
        let actions = Arc::new(Mutex::new(Vec::new()));
        let slow = Arc::new(Mutex::new((String::new(), Duration::ZERO)));
        let http = reqwest::Client::new();
        let upstream = upstream.trim_end_matches('/').to_owned();
        let (r, a, t, seen, held) = (
            remaining.clone(),
            action.clone(),
            throttled.clone(),
            actions.clone(),
            slow.clone(),
        );
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (r, a, t, seen, held, http, upstream) = (
                    r.clone(),
                    a.clone(),
                    t.clone(),
                    seen.clone(),
                    held.clone(),
                    http.clone(),
                    upstream.clone(),
                );
                async move {
                    let target = headers
                        .get("x-amz-target")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    let name = target.rsplit('.').next().unwrap_or("").to_owned();
                    seen.lock().unwrap().push(name.clone());
                    let hold = {
                        let (slow_action, pause) = &*held.lock().unwrap();
                        (*slow_action == name).then_some(*pause)
                    };
                    if let Some(pause) = hold {
                        tokio::time::sleep(pause).await;
                    }
                    let matches = *a.lock().unwrap() == name;
                    if matches
                        && r.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok()
                    {
                        t.fetch_add(1, Ordering::SeqCst);
                        return (
                            StatusCode::BAD_REQUEST,
                            [
                                ("content-type", "application/x-amz-json-1.0"),
                                ("x-amzn-requestid", "0e8a2f4c-throttle-e2e"),
                                ("x-amzn-errortype", "ThrottlingException"),
                            ],
                            json!({"__type": "ThrottlingException", "message": "Rate exceeded"})
                                .to_string(),
                        )
                            .into_response();
                    }
                    let path = uri.path_and_query().map_or("/", |p| p.as_str());
                    let mut req = http.request(method, format!("{upstream}{path}"));
                    for (k, v) in &headers {
                        if !matches!(k.as_str(), "host" | "content-length" | "connection") {
                            req = req.header(k, v);
                        }
                    }
                    let answer = req.body(body).send().await.expect("moto answers the proxy");
                    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
                    let mut out = HeaderMap::new();
                    for (k, v) in answer.headers() {
                        if !matches!(
                            k.as_str(),
                            "content-length" | "transfer-encoding" | "connection"
                        ) {
                            out.insert(k, v.clone());
                        }
                    }
                    let bytes = answer.bytes().await.unwrap();
                    let mut response: Response = (status, bytes).into_response();
                    response.headers_mut().extend(out);
                    response
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            remaining,
            action,
            throttled,
            actions,
            slow,
        }
    }

    /// Holds every request of `action` for `pause` before passing it on.
    fn slow_down(&self, action: &str, pause: Duration) {
        *self.slow.lock().unwrap() = (action.to_owned(), pause);
    }

    /// How many requests of `action` reached the proxy so far.
    fn count(&self, action: &str) -> usize {
        self.actions
            .lock()
            .unwrap()
            .iter()
            .filter(|a| *a == action)
            .count()
    }

    /// Throttles the next `n` requests of `action` (`DescribeExecution`, …).
    fn throttle(&self, action: &str, n: u32) {
        *self.action.lock().unwrap() = action.to_owned();
        self.remaining.store(n, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_a_retryable_error_and_never_fails_the_task() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "throttle", pass_wait_succeed(1)).await;
    let proxy = ThrottlingProxy::start(&url).await;
    let s = setup(&proxy.url, &arn, "");
    let server = s.server().await;
    let c = server.client();

    // A throttled start: a retryable error, and no execution.
    proxy.throttle("StartExecution", 10);
    let refused = c.call("analyze", json!({"dataset": "d1"})).await;
    let e = refused.error();
    assert_eq!(e["data"]["retryable"], true, "{e}");
    assert!(
        e["data"]["retryAfterMs"].as_u64().is_some_and(|ms| ms > 0),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("throttl"), "{e}");
    assert!(executions(&url, &arn).await.is_empty());
    assert_eq!(proxy.throttled.swap(0, Ordering::SeqCst), 2);
    proxy.throttle("", 0);

    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    // Every attempt of the next status read is throttled (the SDK's retry too).
    proxy.throttle("DescribeExecution", 10);
    let refused = c.get_reply(&task).await;
    let e = refused.error();
    assert_eq!(e["code"], -32603, "{e}");
    assert_eq!(e["data"]["retryable"], true, "{e}");
    assert!(
        e["data"]["retryAfterMs"].as_u64().is_some_and(|ms| ms > 0),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("unaffected"), "{e}");
    let throttled = proxy.throttled.swap(0, Ordering::SeqCst);
    assert_eq!(throttled, 2, "the engine retries once, then answers");
    let left = proxy.remaining.swap(0, Ordering::SeqCst);
    assert_eq!(
        left, 8,
        "two attempts (the engine's single retry), then the error"
    );

    // One throttled attempt is absorbed by the engine's single retry.
    proxy.throttle("DescribeExecution", 1);
    let absorbed = c.get_reply(&task).await;
    assert!(absorbed.is_ok(), "{:?}", absorbed.body);
    assert_eq!(proxy.remaining.load(Ordering::SeqCst), 0);

    // The task itself was never failed by it.
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        only_execution_status(&url, &arn).await,
        ExecutionStatus::Succeeded
    );
    assert!(proxy
        .actions
        .lock()
        .unwrap()
        .iter()
        .any(|a| a == "DescribeExecution"));
}

/// Single-flight, counted where Step Functions receives it: 50 clients polling
/// one execution at once make far fewer than 50 DescribeExecution calls (the
/// proxy holds each for 1 s, a slow upstream, so the 50 overlap), every one
/// gets the right answer; and two polls one after another read twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_polls_of_one_execution_share_one_describe_call() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "crowd", sleeper()).await;
    let proxy = ThrottlingProxy::start(&url).await;
    let s = setup(&proxy.url, &arn, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "crowd"})).await;

    proxy.slow_down("DescribeExecution", Duration::from_secs(1));
    let before = proxy.count("DescribeExecution");
    let polls: Vec<_> = (0..50)
        .map(|_| {
            let (c, task) = (c.clone(), task.clone());
            tokio::spawn(async move { c.get(&task).await })
        })
        .collect();
    for poll in polls {
        let read = poll.await.unwrap();
        assert_eq!(read["status"], "working", "{read}");
        assert_eq!(read["taskId"], task.as_str(), "{read}");
    }
    let crowd = proxy.count("DescribeExecution") - before;
    assert!(
        (1..=10).contains(&crowd),
        "50 concurrent polls made {crowd} DescribeExecution calls"
    );

    proxy.slow_down("", Duration::ZERO);
    let before = proxy.count("DescribeExecution");
    for _ in 0..2 {
        assert_eq!(c.get(&task).await["status"], "working");
    }
    assert_eq!(
        proxy.count("DescribeExecution") - before,
        2,
        "polls one after another each read the engine"
    );
    c.cancel(&task).await;
}

/// Upstream calls per poll of a running execution, counted at the proxy: one
/// `DescribeExecution` and no history by default; one history page more when
/// the tool names the current state or has a human step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_reads_the_history_only_when_it_needs_it() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "percall", sleeper()).await;
    let proxy = ThrottlingProxy::start(&url).await;
    let queue = queue(&url).await;
    let human_arn = state_machine(&url, "percall-human", human_definition(&queue)).await;
    for (target_arn, extra, history_per_poll) in [
        (&arn, "", 0),
        (&arn, "state_in_status = true", 1),
        (&human_arn, HUMAN_STEP, 1),
    ] {
        let s = setup(&proxy.url, target_arn, extra);
        let server = s.server().await;
        let c = server.client();
        let task = c.start_task("analyze", json!({"dataset": "percall"})).await;
        let (describe, history) = (
            proxy.count("DescribeExecution"),
            proxy.count("GetExecutionHistory"),
        );
        for _ in 0..3 {
            let read = c.get(&task).await;
            assert!(
                matches!(read["status"].as_str(), Some("working" | "input_required")),
                "{extra}: {read}"
            );
        }
        assert_eq!(
            proxy.count("DescribeExecution") - describe,
            3,
            "{extra}: one DescribeExecution per poll"
        );
        assert_eq!(
            proxy.count("GetExecutionHistory") - history,
            3 * history_per_poll,
            "{extra}: history pages per poll"
        );
        c.cancel(&task).await;
    }
}

// The idle proof counted at the upstream (after a read, while another task's
// tasks/result waits) is `stepfunctions_idle_task_gets_no_upstream_request_while_another_waits`
// in tests/faults/main.rs.

/// One `taskgate_logs` page: its lines (source, text), cursor and completeness.
fn logs_page(reply: &common::Reply) -> (Vec<(String, String)>, String, bool) {
    assert!(reply.is_ok(), "{}", reply.raw);
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
async fn history_events_are_read_as_logs_each_once_in_order() {
    let Some(url) = moto() else { return };
    let arn = state_machine(&url, "logs", pass_wait_succeed(2)).await;
    let s = setup(&url, &arn, "");
    let server = s.server().await;
    let c = server.client();
    let task = c
        .start_task("analyze", json!({"dataset": "do-not-log-me"}))
        .await;

    // While the execution waits, the first page already has its start.
    let first = logs_page(&c.call("taskgate_logs", json!({"taskId": task})).await);
    assert!(!first.2, "complete while the Wait state runs: {first:?}");
    assert_eq!(
        first.0.first().map(|l| l.0.as_str()),
        Some("ExecutionStarted"),
        "{first:?}"
    );

    // Two lines a page, following the cursor, until the history is complete.
    let mut lines = first.0.clone();
    let mut cursor = first.1.clone();
    wait_for("the whole history", LIMIT, async || {
        let (page, next, complete) = logs_page(
            &c.call(
                "taskgate_logs",
                json!({"taskId": task, "cursor": cursor, "limit": 2}),
            )
            .await,
        );
        assert!(page.len() <= 2, "{page:?}");
        lines.extend(page);
        cursor = next;
        if complete {
            Ok(())
        } else {
            Err(format!("{lines:?}"))
        }
    })
    .await;

    let sources: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(sources.first(), Some(&"ExecutionStarted"), "{lines:?}");
    assert_eq!(sources.last(), Some(&"ExecutionSucceeded"), "{lines:?}");
    assert_eq!(
        sources.iter().filter(|s| **s == "ExecutionStarted").count(),
        1,
        "each event once: {lines:?}"
    );
    for state in ["Prepare", "Pause", "Done"] {
        assert!(
            lines
                .iter()
                .any(|l| l.1.ends_with(&format!("state {state}"))),
            "state {state} entered: {lines:?}"
        );
    }
    // Timestamps never go back: the events come oldest first, each once.
    let times: Vec<&str> = lines.iter().map(|l| &l.1[..24]).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let mut unique = lines.clone();
    unique.dedup();
    assert_eq!(unique.len(), lines.len(), "a line read twice: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.1.contains("do-not-log-me")),
        "the arguments are not in the log: {lines:?}"
    );

    // From the last cursor: nothing more, and complete.
    let last = logs_page(
        &c.call("taskgate_logs", json!({"taskId": task, "cursor": cursor}))
            .await,
    );
    assert!(last.0.is_empty() && last.2, "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_execution_logs_its_error_and_cause() {
    let Some(url) = moto() else { return };
    let arn = state_machine(
        &url,
        "logsfail",
        json!({"StartAt": "Check", "States": {
            "Check": {"Type": "Fail", "Error": "Dataset.Missing", "Cause": "no dataset named d1"}}}),
    )
    .await;
    let s = setup(&url, &arn, "");
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    c.until_status(&task, "completed", LIMIT).await;
    // The run has ended: one page holds the whole history, and says so.
    let (lines, _, complete) = logs_page(&c.call("taskgate_logs", json!({"taskId": task})).await);
    assert!(complete, "{lines:?}");
    let last = lines.last().expect("lines");
    assert_eq!(last.0, "ExecutionFailed", "{lines:?}");
    assert!(
        last.1
            .ends_with(" error Dataset.Missing: no dataset named d1"),
        "{lines:?}"
    );
}
