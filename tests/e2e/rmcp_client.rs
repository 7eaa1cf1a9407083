//! rmcp 3.x (the Rust MCP SDK) as a real client of the built binary, over
//! stdio (child process) and Streamable HTTP, in both eras it speaks:
//! - 2026-07-28 through `server/discover`, with the tasks extension declared:
//!   a long-running call becomes a task that rmcp polls with `tasks/get`,
//!   answers with `tasks/update` and cancels with `tasks/cancel`;
//! - the legacy `initialize` handshake (2025-06-18): the same hybrid tool runs
//!   synchronously and async-only tools are hidden.

use crate::common;

use std::time::{Duration, Instant};

use common::{Server, Setup};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, ProtocolVersion, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{json, Map, Value};

type Client = RunningService<RoleClient, ClientConfig>;

const LONG: Duration = Duration::from_secs(30);

fn tasks_client() -> ClientConfig {
    ClientConfig::new(
        // The builder needs rmcp's server feature; the wire form says the same.
        serde_json::from_value(
            json!({ "extensions": { common::TASKS: {} }, "elicitation": { "form": {} } }),
        )
        .unwrap(),
        Implementation::new("taskgate-rmcp-test", "0.0.0"),
    )
}

fn legacy_client() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("taskgate-rmcp-legacy-test", "0.0.0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_06_18)
}

fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn stdio_transport(setup: &Setup) -> TokioChildProcess {
    let cmd = tokio::process::Command::from(setup.command(&[
        "serve",
        "--stdio",
        "--config",
        setup.config.to_str().unwrap(),
    ]));
    let log = std::fs::File::create(setup.dir.path().join("rmcp-stdio.stderr")).unwrap();
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(log)
        .spawn()
        .expect("spawn taskgate --stdio");
    transport
}

async fn tool_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// Polls `tasks/get` through rmcp until `done` holds.
async fn poll(client: &Client, task_id: &str, done: impl Fn(TaskStatus) -> bool) -> TaskPayload {
    let deadline = Instant::now() + LONG;
    loop {
        let got = client
            .get_task(GetTaskParams::new(task_id))
            .await
            .expect("tasks/get");
        assert_eq!(got.task.task.task_id, task_id);
        if done(got.task.status()) {
            return got.task.payload;
        }
        assert!(
            Instant::now() < deadline,
            "task stuck at {:?}",
            got.task.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start(client: &Client, tool: &'static str, arguments: Value) -> String {
    let response = client
        .call_tool_once(CallToolRequestParams::new(tool).with_arguments(args(arguments)))
        .await
        .expect("tools/call");
    match response {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working);
            assert_eq!(created.task.poll_interval_ms, Some(200));
            assert_eq!(created.task.ttl_ms, Some(3_600_000));
            created.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

/// The whole 2026-07-28 tasks flow through rmcp's task API.
async fn tasks_flow(client: &Client) {
    let info = client.peer_info().expect("peer info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    assert!(
        info.capabilities.supports_tasks(),
        "server declares the tasks extension"
    );
    assert_eq!(
        tool_names(client).await,
        ["ask", "brief", "fail", "sleeper", "taskgate_logs", "work"]
    );

    // Long-running call to completion.
    let task_id = start(client, "work", json!({ "label": "rmcp", "seconds": 1 })).await;
    let payload = poll(client, &task_id, |s| s.is_terminal()).await;
    let TaskPayload::Completed { result } = payload else {
        panic!("expected completed, got {payload:?}")
    };
    let result: rmcp::model::CallToolResult =
        serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(result.is_error, Some(false));
    assert_eq!(
        result.structured_content,
        Some(json!({ "label": "rmcp", "seconds": 1, "rows": 42 }))
    );
    assert!(!result.content.is_empty());

    // Input round trip.
    let task_id = start(client, "ask", json!({ "label": "r1" })).await;
    let payload = poll(client, &task_id, |s| s == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = payload else {
        panic!("expected input_required, got {payload:?}")
    };
    let request = serde_json::to_value(&input_requests["approve"]).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Deploy r1?", "{request}");
    let mut responses = std::collections::BTreeMap::new();
    responses.insert(
        "approve".to_owned(),
        json!({ "action": "accept", "content": { "ok": true } }),
    );
    client
        .update_task(UpdateTaskParams::new(task_id.clone(), responses))
        .await
        .expect("tasks/update");
    let payload = poll(client, &task_id, |s| s.is_terminal()).await;
    let TaskPayload::Completed { result } = payload else {
        panic!("expected completed, got {payload:?}")
    };
    assert_eq!(
        result["structuredContent"]["answer"]["content"],
        json!({ "ok": true })
    );

    // Cancel.
    let task_id = start(client, "sleeper", json!({})).await;
    client
        .cancel_task(CancelTaskParams::new(task_id.clone()))
        .await
        .expect("tasks/cancel");
    let payload = poll(client, &task_id, |s| s.is_terminal()).await;
    assert!(matches!(payload, TaskPayload::Cancelled), "{payload:?}");

    // Unknown task: a JSON-RPC error, -32602.
    let err = client
        .get_task(GetTaskParams::new("tsk_unknown"))
        .await
        .expect_err("unknown task");
    assert!(format!("{err:?}").contains("-32602"), "{err:?}");
}

/// The legacy flow: async-only tools hidden, the hybrid tool runs synchronously.
async fn legacy_flow(client: &Client) {
    let info = client.peer_info().expect("peer info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_06_18);
    assert_eq!(tool_names(client).await, ["brief", "fail", "work"]);
    let started = Instant::now();
    let result = client
        .call_tool(
            CallToolRequestParams::new("work")
                .with_arguments(args(json!({ "label": "legacy", "seconds": 1 }))),
        )
        .await
        .expect("tools/call");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "it waited for the run"
    );
    assert_eq!(result.is_error, Some(false));
    assert_eq!(
        result.structured_content.as_ref().unwrap()["label"],
        "legacy"
    );

    let failed = client
        .call_tool(CallToolRequestParams::new("fail").with_arguments(args(json!({ "label": "x" }))))
        .await
        .expect("tools/call");
    assert_eq!(failed.is_error, Some(true));
}

#[tokio::test]
async fn rmcp_2026_tasks_over_stdio() {
    let setup = Setup::new();
    let started = Instant::now();
    let client = tasks_client()
        .serve_with_lifecycle(stdio_transport(&setup), discover())
        .await
        .expect("rmcp discover over stdio");
    tasks_flow(&client).await;
    client.cancel().await.expect("close");
    eprintln!("rmcp 2026-07-28 over stdio: {:?}", started.elapsed());
}

#[tokio::test]
async fn rmcp_2026_tasks_over_http() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let started = Instant::now();
    let client = tasks_client()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(server.url()),
            discover(),
        )
        .await
        .expect("rmcp discover over HTTP");
    tasks_flow(&client).await;
    client.cancel().await.expect("close");
    eprintln!("rmcp 2026-07-28 over HTTP: {:?}", started.elapsed());
}

#[tokio::test]
async fn rmcp_legacy_initialize_over_stdio() {
    let setup = Setup::new();
    let client = legacy_client()
        .serve(stdio_transport(&setup))
        .await
        .expect("rmcp initialize over stdio");
    legacy_flow(&client).await;
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn rmcp_legacy_initialize_over_http() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = legacy_client()
        .serve(StreamableHttpClientTransport::from_uri(server.url()))
        .await
        .expect("rmcp initialize over HTTP");
    legacy_flow(&client).await;
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn rmcp_auto_lifecycle_picks_2026_and_gets_tasks() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = tasks_client()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(server.url()),
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_06_18),
            },
        )
        .await
        .expect("rmcp auto lifecycle");
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    let task_id = start(&client, "work", json!({ "label": "auto", "seconds": 0 })).await;
    let payload = poll(&client, &task_id, |s| s.is_terminal()).await;
    assert!(
        matches!(payload, TaskPayload::Completed { .. }),
        "{payload:?}"
    );
    client.cancel().await.expect("close");
}
