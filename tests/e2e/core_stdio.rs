//! The core over stdio (`taskgate serve --stdio`): newline-delimited JSON-RPC,
//! the 2026-07-28 tasks flow, the legacy handshake, and a stdout that carries
//! nothing but JSON-RPC (logs go to stderr).

use crate::common;

use std::time::Duration;

use common::{Setup, StdioServer};
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(30);

fn is_terminal(t: &Value) -> bool {
    matches!(
        t["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// Every stdout line is one JSON-RPC 2.0 response (the server never writes
/// requests on stdio in these flows).
fn assert_all_json_rpc(lines: &[String]) {
    assert!(!lines.is_empty());
    for line in lines {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        assert!(v.get("id").is_some(), "{line}");
        assert!(
            v.get("result").is_some() ^ v.get("error").is_some(),
            "exactly one of result/error: {line}"
        );
    }
}

#[tokio::test]
async fn long_running_flow_over_stdio() {
    let setup = Setup::new();
    let mut server = StdioServer::start(&setup);

    let discover = server.result("server/discover", json!({})).await;
    assert_eq!(
        discover["supportedVersions"][0],
        common::MODERN,
        "{discover}"
    );
    assert!(discover["capabilities"]["extensions"][common::TASKS].is_object());

    let list = server.result("tools/list", json!({})).await;
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut expected = common::TOOL_NAMES.to_vec();
    expected.push("taskgate_logs");
    assert_eq!(names, expected, "D1 lists every tool, and taskgate_logs");
    assert_eq!(list["resultType"], "complete");

    // A long-running call: a task, an immediate get, then the result.
    let created = server
        .result(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "stdio", "seconds": 1 } }),
        )
        .await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working");
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    let first = server
        .result("tasks/get", json!({ "taskId": task_id }))
        .await;
    common::assert_detailed_task(&first, &task_id);
    let done = server.poll_until(&task_id, LONG, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({ "label": "stdio", "seconds": 1, "rows": 42 })
    );
    assert_eq!(done["result"]["isError"], false);

    // Input round trip.
    let created = server
        .result(
            "tools/call",
            json!({ "name": "ask", "arguments": { "label": "v9" } }),
        )
        .await;
    let ask_id = created["taskId"].as_str().unwrap().to_owned();
    let waiting = server
        .poll_until(&ask_id, LONG, |t| t["status"] == "input_required")
        .await;
    assert_eq!(
        waiting["inputRequests"]["approve"]["params"]["message"],
        "Deploy v9?"
    );
    let ack = server
        .result(
            "tasks/update",
            json!({ "taskId": ask_id, "inputResponses": { "approve": { "action": "accept", "content": { "ok": true } } } }),
        )
        .await;
    assert_eq!(ack, json!({ "resultType": "complete" }));
    let done = server.poll_until(&ask_id, LONG, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["answer"]["content"],
        json!({ "ok": true })
    );

    // Cancel.
    let created = server
        .result("tools/call", json!({ "name": "sleeper", "arguments": {} }))
        .await;
    let sleeper_id = created["taskId"].as_str().unwrap().to_owned();
    server
        .result("tasks/cancel", json!({ "taskId": sleeper_id }))
        .await;
    let cancelled = server.poll_until(&sleeper_id, LONG, is_terminal).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    // An unknown handle: -32602 like on HTTP.
    let unknown = server
        .request("tasks/get", json!({ "taskId": "tsk_nope" }))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // A line that is not JSON gets a parse error, still as JSON-RPC on stdout.
    server.send_line("this is not json").await;
    let parse_error = server.response(&Value::Null, LONG).await;
    assert_eq!(parse_error["error"]["code"], -32700, "{parse_error}");

    let status = server.close(LONG).await;
    assert!(status.success(), "exit on stdin EOF: {status}");
    assert_all_json_rpc(&server.seen);
    let stderr = server.stderr_text();
    assert!(
        stderr.contains("run started"),
        "logs go to stderr: {stderr}"
    );
    assert!(
        !server.seen.iter().any(|l| l.contains("run started")),
        "no log line on stdout"
    );
}

#[tokio::test]
async fn legacy_handshake_over_stdio_calls_synchronously() {
    let setup = Setup::new();
    let mut server = StdioServer::start(&setup);
    let init = server
        .request_raw(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "legacy-stdio", "version": "1" } }),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    server
        .send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;

    let list = server.request_raw("tools/list", json!({})).await;
    let names = common::names(list["result"]["tools"].as_array().unwrap());
    assert_eq!(
        names,
        ["work", "fail", "brief"],
        "async-only tools are hidden"
    );

    let call = server
        .request_raw(
            "tools/call",
            json!({ "name": "work", "arguments": { "label": "old", "seconds": 1 } }),
        )
        .await;
    assert_eq!(call["result"]["isError"], false, "{call}");
    assert_eq!(
        call["result"]["structuredContent"]["label"], "old",
        "{call}"
    );

    let status = server.close(LONG).await;
    assert!(status.success());
    assert_all_json_rpc(&server.seen);
}
