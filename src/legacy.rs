//! Legacy sessions: clients that `initialize` (2024-11-05 … 2025-11-25), with the
//! long-running dialects layered on them: 2025-11-25 tasks ([`crate::tasks2025`]),
//! SEP-1391 operations for clients that opt in ([`crate::operations`]), and, for
//! clients with neither, each tool's `legacy` policy (hide, wait, handles).
//!
//! What a client negotiated travels in a sealed `Mcp-Session-Id` over HTTP, so any
//! replica can serve the next request without a session table; on stdio it lives
//! with the connection.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use taskgate_engine::{RunState, Snapshot};

use crate::config::{LegacyPolicy, ToolMode};
use crate::gateway::{Gateway, Tool, TASK_NOT_FOUND};
use crate::handle::Dialect;
use crate::input::{self, Outbound};
use crate::operations;
use crate::rpc::RpcError;
use crate::tasks2025;
use crate::wire::{call_tool_result, server_info, tool_entry, Version, INSTRUCTIONS};

/// What a legacy client negotiated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The negotiated version.
    #[serde(rename = "v")]
    pub version: String,
    /// The client declared `elicitation`.
    #[serde(rename = "e", default)]
    pub elicitation: bool,
    /// The client opted in to SEP-1391 operations.
    #[serde(rename = "o", default)]
    pub operations: bool,
}

impl Session {
    /// The session a request without one is served as (no `initialize` seen):
    /// the version from the `MCP-Protocol-Version` header, else 2025-03-26.
    #[must_use]
    pub fn assumed(version: Option<Version>) -> Self {
        Self {
            version: version.unwrap_or(Version::V2025_03_26).as_str().to_owned(),
            elicitation: false,
            operations: false,
        }
    }

    /// The negotiated version.
    #[must_use]
    pub fn version(&self) -> Version {
        Version::parse(&self.version).unwrap_or(Version::V2025_03_26)
    }

    /// The session speaks 2025-11-25 tasks.
    #[must_use]
    pub fn tasks(&self) -> bool {
        self.version() == Version::V2025_11_25
    }
}

/// Answers `initialize`: the session it opens and the result.
#[must_use]
pub fn initialize(params: &Value) -> (Session, Value) {
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = Version::parse(requested)
        .filter(|v| Version::LEGACY.contains(v))
        .unwrap_or(Version::LEGACY[0]);
    let caps = params.get("capabilities").cloned().unwrap_or(Value::Null);
    let session = Session {
        version: version.as_str().to_owned(),
        elicitation: caps.get("elicitation").is_some() && version.has_structured(),
        operations: caps
            .get("experimental")
            .and_then(|e| e.get(operations::CAPABILITY))
            .is_some(),
    };
    let mut capabilities = json!({ "tools": { "listChanged": false } });
    if session.tasks() {
        capabilities["tasks"] = tasks2025::capability();
    }
    if session.operations {
        capabilities["experimental"] = json!({ operations::CAPABILITY: {} });
    }
    let result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    });
    (session, result)
}

/// True when the client can hold a task or an operation for `tool`.
fn long_running_client(session: &Session) -> bool {
    session.tasks() || session.operations
}

/// True when `tool` is listed for a client of `session`.
#[must_use]
pub fn visible(tool: &Tool, session: &Session) -> bool {
    long_running_client(session)
        || !(tool.config.mode == ToolMode::Async
            && tool.config.legacy_policy() == LegacyPolicy::Hide)
}

/// The companion tools of the `handles` policy.
const COMPANIONS: [(&str, &str); 3] = [
    (
        "taskgate_task_status",
        "Check the status of a long-running call, given the handle that call returned.",
    ),
    (
        "taskgate_task_result",
        "Fetch the result of a finished long-running call, given the handle that call returned.",
    ),
    (
        "taskgate_task_cancel",
        "Cancel a long-running call, given the handle that call returned.",
    ),
];

fn companions_listed(gw: &Gateway, session: &Session) -> bool {
    !long_running_client(session)
        && gw
            .tools()
            .iter()
            .any(|t| t.is_long_running() && t.config.legacy_policy() == LegacyPolicy::Handles)
}

/// Handles one request of a legacy session.
///
/// # Errors
///
/// Every failure as an [`RpcError`].
pub async fn handle(
    gw: &Gateway,
    caller: &str,
    session: &Session,
    out: Option<&Outbound>,
    method: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    let version = session.version();
    match method {
        "ping" => Ok(json!({})),
        "tools/list" => {
            let mut tools: Vec<Value> = gw
                .tools()
                .iter()
                .filter(|t| visible(t, session))
                .map(|t| {
                    let extra = if session.operations {
                        Some(("invocationMode", json!(operations::invocation_mode(t))))
                    } else if session.tasks() {
                        tasks2025::execution(t).map(|e| ("execution", e))
                    } else {
                        None
                    };
                    tool_entry(t, version, extra)
                })
                .collect();
            if companions_listed(gw, session) {
                for (name, description) in COMPANIONS {
                    tools.push(json!({ "name": name, "description": description, "inputSchema": {
                        "type": "object", "required": ["handle"],
                        "properties": { "handle": { "type": "string", "description": "The handle a call returned" } } } }));
                }
            }
            Ok(json!({ "tools": tools }))
        }
        "tools/call" => call(gw, caller, session, out, params).await,
        "tasks/get" | "tasks/result" | "tasks/cancel" if session.tasks() => {
            tasks2025::handle(gw, caller, out, method, params).await
        }
        "tools/async/status" | "tools/async/result" if session.operations => {
            operations::handle(gw, caller, session, out, method, params).await
        }
        other => Err(RpcError::MethodNotFound(other.to_owned())),
    }
}

async fn call(
    gw: &Gateway,
    caller: &str,
    session: &Session,
    out: Option<&Outbound>,
    params: &Value,
) -> Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::InvalidParams("name is required".into()))?;
    if companions_listed(gw, session) {
        if let Some(result) = companion(gw, caller, session, name, params).await? {
            return Ok(result);
        }
    }
    let tool = gw
        .tool(name)
        .ok()
        .filter(|t| visible(t, session) || t.config.mode == ToolMode::Async)
        .ok_or_else(|| RpcError::InvalidParams(format!("Unknown tool: {name}")))?;
    if !visible(tool, session) {
        // SEP-1391: an outdated client calling an async-only tool.
        return Err(RpcError::InvalidRequest(format!(
            "Tool {name} runs only as a long-running operation, which this client did not opt in to"
        )));
    }
    let args = gw.check_arguments(tool, params.get("arguments"))?;

    if session.operations && tool.is_long_running() {
        return match params.get("operation") {
            Some(operation) => operations::call(gw, caller, tool, args, operation).await,
            None => Err(RpcError::InvalidRequest(format!(
                "Tool {name} is invocationMode async: call it with params.operation {{token, keepAlive}}"
            ))),
        };
    }
    if session.tasks() {
        match (params.get("task"), tool.config.mode) {
            (Some(_), _) => return tasks2025::call_as_task(gw, caller, tool, args).await,
            (None, ToolMode::Async) => {
                return Err(RpcError::MethodNotFound(format!(
                    "tool {name} requires a task-augmented call (taskSupport is required)"
                )))
            }
            _ => {}
        }
    }
    match (tool.is_long_running(), tool.config.legacy_policy()) {
        (true, LegacyPolicy::Handles) => {
            let started = gw
                .start(caller, tool, args, Dialect::LegacyHandle, None)
                .await?;
            let text = format!(
                "{name} started. Its handle is {}. Check it with taskgate_task_status, fetch the result with \
                 taskgate_task_result, or stop it with taskgate_task_cancel, passing this exact handle.",
                started.handle
            );
            let mut result =
                json!({ "content": [{ "type": "text", "text": text }], "isError": false });
            if version_structured(session) {
                result["structuredContent"] =
                    json!({ "handle": started.handle, "status": "working" });
            }
            Ok(result)
        }
        _ => wait_call(gw, caller, session, out, tool, args, params).await,
    }
}

fn version_structured(session: &Session) -> bool {
    session.version().has_structured()
}

/// A call that waits for its run: progress notifications when the client gave a
/// progress token, input requests when it declared elicitation (2025-06-18+).
async fn wait_call(
    gw: &Gateway,
    caller: &str,
    session: &Session,
    out: Option<&Outbound>,
    tool: &Tool,
    args: Value,
    params: &Value,
) -> Result<Value, RpcError> {
    let started = gw
        .start(caller, tool, args, Dialect::LegacyHandle, None)
        .await?;
    let limit = tool.config.max_wait.unwrap_or(gw.server.max_wait);
    let deadline = std::time::Instant::now() + limit;
    let progress_token = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .cloned();
    let mut sent = HashSet::new();
    let mut last_progress = None;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let snapshot = gw
            .wait(tool, &started.claims.native, left, TASK_NOT_FOUND, |s| {
                if let (Some(out), Some(token)) = (out, &progress_token) {
                    notify_progress(out, token, s, session.version(), &mut last_progress);
                }
            })
            .await?;
        match &snapshot.state {
            RunState::InputRequired { requests, .. } if session.elicitation && out.is_some() => {
                let none = |_: &mut Map<String, Value>| {};
                input::ask(
                    gw,
                    caller,
                    out.expect("checked"),
                    tool,
                    &started.claims.native,
                    requests,
                    session.version(),
                    &mut sent,
                    &none,
                );
                if std::time::Instant::now() >= deadline {
                    return sync_outcome(
                        tool,
                        &snapshot,
                        session.version(),
                        limit,
                        Some(&started.handle),
                    );
                }
                let pause = tool.config.poll_interval.min(Duration::from_secs(1));
                tokio::time::sleep(
                    pause.min(deadline.saturating_duration_since(std::time::Instant::now())),
                )
                .await;
            }
            _ => {
                return sync_outcome(
                    tool,
                    &snapshot,
                    session.version(),
                    limit,
                    Some(&started.handle),
                )
            }
        }
    }
}

pub(crate) fn notify_progress(
    out: &Outbound,
    token: &Value,
    snapshot: &Snapshot,
    version: Version,
    last: &mut Option<(f64, Option<String>)>,
) {
    let RunState::Working { message, progress } = &snapshot.state else {
        return;
    };
    let done = progress.map_or(0.0, |p| p.done);
    let current = (done, message.clone());
    if last.as_ref() == Some(&current) {
        return;
    }
    *last = Some(current);
    let mut params = json!({ "progressToken": token, "progress": done });
    if let Some(total) = progress.and_then(|p| p.total) {
        params["total"] = json!(total);
    }
    if version >= Version::V2025_03_26 {
        if let Some(m) = message {
            params["message"] = json!(m);
        }
    }
    let _ = out.send(crate::rpc::notification("notifications/progress", params));
}

/// The companion tools of the `handles` policy; `None` when `name` is not one.
async fn companion(
    gw: &Gateway,
    caller: &str,
    session: &Session,
    name: &str,
    params: &Value,
) -> Result<Option<Value>, RpcError> {
    if !COMPANIONS.iter().any(|(n, _)| *n == name) {
        return Ok(None);
    }
    let text_result = |text: String, is_error: bool| json!({ "content": [{ "type": "text", "text": text }], "isError": is_error });
    let handle = params
        .get("arguments")
        .and_then(|a| a.get("handle"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    const MADE_UP: &str = "Unknown handle. Only a handle returned by an earlier call is valid: copy it exactly from that call's result; never make one up.";
    let Ok((claims, tool)) = gw.open(caller, Dialect::LegacyHandle, handle, TASK_NOT_FOUND) else {
        return Ok(Some(text_result(MADE_UP.into(), true)));
    };
    let snapshot = match gw.read(tool, &claims.native, TASK_NOT_FOUND).await {
        Ok(s) => s,
        Err(RpcError::NotFound(_)) => return Ok(Some(text_result(MADE_UP.into(), true))),
        Err(e) => return Err(e),
    };
    let status = operations::status_of(&snapshot.state);
    Ok(Some(match name {
        "taskgate_task_status" => {
            let detail = match &snapshot.state {
                RunState::Working {
                    message: Some(m), ..
                } => format!(" ({m})"),
                RunState::Failed { message } => format!(" ({message})"),
                _ => String::new(),
            };
            let mut r = text_result(format!("{}: {status}{detail}", tool.name()), false);
            if version_structured(session) {
                r["structuredContent"] = json!({ "status": status });
            }
            r
        }
        "taskgate_task_result" => match &snapshot.state {
            RunState::Completed(output) => call_tool_result(output, session.version()),
            _ => text_result(
                format!("{} is {status}; there is no result yet.", tool.name()),
                !matches!(snapshot.state, RunState::Working { .. }),
            ),
        },
        _ => {
            gw.cancel(tool, &claims.native, TASK_NOT_FOUND).await?;
            text_result(format!("Cancellation of {} requested.", tool.name()), false)
        }
    }))
}

/// The result of a call that waited for its run, for a client that cannot hold
/// a task: the tool result when the run finished, a clear tool error otherwise
/// (carrying the handle when there is one, for the `handles` companion tools).
///
/// # Errors
///
/// A failed run (protocol-level failure) → -32603.
pub fn sync_outcome(
    tool: &Tool,
    snapshot: &Snapshot,
    version: Version,
    limit: Duration,
    handle: Option<&str>,
) -> Result<Value, RpcError> {
    let text = |t: String| json!({ "content": [{ "type": "text", "text": t }], "isError": true });
    let handle_note = handle
        .map(|h| format!(" Its handle is {h}."))
        .unwrap_or_default();
    match &snapshot.state {
        RunState::Completed(output) => Ok(call_tool_result(output, version)),
        RunState::Failed { message } => Err(RpcError::Internal(message.clone())),
        RunState::Cancelled { .. } => Ok(text(format!("The {} run was cancelled.", tool.name()))),
        RunState::InputRequired { .. } => Ok(text(format!(
            "The {} run is waiting for input, which this client cannot give. Use a client with MCP tasks or elicitation support.{handle_note}",
            tool.name()
        ))),
        RunState::Working { message, .. } => Ok(text(format!(
            "The {} run is still going after {}{}; it continues in its engine.{handle_note}",
            tool.name(),
            humantime::format_duration(limit),
            message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default(),
        ))),
    }
}
