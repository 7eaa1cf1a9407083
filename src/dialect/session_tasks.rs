//! MCP 2025-11-25 tasks (SEP-1686, "experimental tasks"), for clients that
//! negotiated 2025-11-25 at `initialize`: `task` on `tools/call`, `tasks/get`,
//! a blocking `tasks/result` (input requests arrive on its stream), `tasks/cancel`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskgate_engine::{RunState, Snapshot};

use super::input;
use super::task_ref::open_task;
use super::wire::Request;
use super::wire::{call_tool_result, task_times, Outbound, Version};
use crate::core::config::ToolMode;
use crate::core::handle::{Dialect, TaskClaims};
use crate::core::{Caller, Gateway, Tool};
use crate::rpc::{Body, RpcError};

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The `tasks` server capability: only what is implemented (no `list`: tasks are
/// read from the engines, which cannot list one caller's tasks cheaply).
#[must_use]
pub fn capability() -> Value {
    json!({ "cancel": {}, "requests": { "tools": { "call": {} } } })
}

/// `execution` of a tool in tools/list.
#[must_use]
pub fn execution(tool: &Tool) -> Option<Value> {
    match tool.config.mode {
        ToolMode::Async => Some(json!({ "taskSupport": "required" })),
        ToolMode::Hybrid => Some(json!({ "taskSupport": "optional" })),
        ToolMode::Sync => None,
    }
}

/// `tools/call` with `params.task`: starts the run and returns `{task}`.
///
/// # Errors
///
/// -32601 when the tool cannot run as a task; argument and engine errors.
pub async fn call_as_task(
    gw: &Gateway,
    caller: &Caller,
    tool: &Tool,
    args: Value,
) -> Result<Value, RpcError> {
    if tool.config.mode == ToolMode::Sync {
        return Err(RpcError::MethodNotFound(format!(
            "tool {} does not support task-augmented calls (taskSupport is forbidden)",
            tool.name()
        )));
    }
    let started = gw
        .start(caller, tool, args, Dialect::TasksSep1686, None)
        .await?;
    let snapshot = Snapshot::new(RunState::Working {
        message: None,
        progress: None,
    });
    Ok(json!({
        "task": task_view(&started.handle, &started.claims, tool, &snapshot),
        "_meta": { "io.modelcontextprotocol/model-immediate-response":
            format!("{} started; its result will be available when the task completes.", tool.name()) },
    }))
}

/// The `Task` object.
#[must_use]
pub fn task_view(task_id: &str, claims: &TaskClaims, tool: &Tool, snapshot: &Snapshot) -> Value {
    serde_json::to_value(TaskView::of(task_id, claims, tool, snapshot)).unwrap_or(Value::Null)
}

/// The members of a 2025-11-25 `Task`, serialized in place: a `tasks/get`
/// reply is written from it straight to bytes. Fields are in alphabetical
/// order, the order a `serde_json::Map` would give them.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView<'a> {
    created_at: String,
    last_updated_at: String,
    poll_interval: u64,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<std::borrow::Cow<'a, str>>,
    task_id: &'a str,
    /// `null` for a run kept as long as its engine keeps it.
    ttl: Option<u64>,
}

impl<'a> TaskView<'a> {
    /// The view of `snapshot`, the run of task `task_id`.
    #[must_use]
    pub fn of(task_id: &'a str, claims: &TaskClaims, tool: &Tool, snapshot: &'a Snapshot) -> Self {
        use std::borrow::Cow;
        let (created_at, last_updated_at, poll_interval) = task_times(claims, tool, snapshot);
        let (status, message) = match &snapshot.state {
            RunState::Working { message, .. } => ("working", message.as_deref().map(Cow::Borrowed)),
            RunState::InputRequired { message, .. } => {
                ("input_required", message.as_deref().map(Cow::Borrowed))
            }
            RunState::Completed(out) if out.is_error => {
                ("failed", Some(Cow::Borrowed("The tool reported an error")))
            }
            RunState::Completed(_) => ("completed", None),
            RunState::Failed { message } => ("failed", Some(Cow::Borrowed(message.as_str()))),
            RunState::Cancelled { message } => ("cancelled", message.as_deref().map(Cow::Borrowed)),
        };
        Self {
            created_at,
            last_updated_at,
            poll_interval,
            status,
            status_message: message,
            task_id,
            ttl: claims.ttl_ms,
        }
    }

    /// The JSON text of the view: what `serde_json` writes for it (tested),
    /// written member by member so that the task id and the timestamps are
    /// copied rather than scanned for escapes.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        use super::wire::json;
        let mut out = Vec::with_capacity(192 + self.task_id.len());
        json::key(&mut out, "createdAt", true);
        json::string(&mut out, &self.created_at);
        json::key(&mut out, "lastUpdatedAt", false);
        json::string(&mut out, &self.last_updated_at);
        json::key(&mut out, "pollInterval", false);
        json::number(&mut out, Some(self.poll_interval));
        json::key(&mut out, "status", false);
        json::string(&mut out, self.status);
        if let Some(message) = &self.status_message {
            json::key(&mut out, "statusMessage", false);
            json::string(&mut out, message);
        }
        json::key(&mut out, "taskId", false);
        json::string(&mut out, self.task_id);
        json::key(&mut out, "ttl", false);
        json::number(&mut out, self.ttl);
        out.push(b'}');
        out
    }
}

/// Serves `tasks/get`, `tasks/result` and `tasks/cancel`.
///
/// # Errors
///
/// -32602 for unknown tasks (alike for every reason), cancelling a terminal task;
/// -32603 for a failed or cancelled task's result; engine errors.
pub async fn serve(req: Request<'_>) -> Result<Body, RpcError> {
    let Request {
        gw,
        caller,
        out,
        method,
        params,
        ..
    } = req;
    let (task_id, claims, tool) = open_task(gw, caller, Dialect::TasksSep1686, params)?;
    match method {
        "tasks/get" => {
            let snapshot = gw.read(tool, &claims.native).await?;
            // Written straight to bytes: the hot path of every poll.
            Ok(Body::Written(
                TaskView::of(task_id, &claims, tool, &snapshot).to_json(),
            ))
        }
        "tasks/cancel" => {
            let snapshot = gw
                .cancel(caller, Dialect::TasksSep1686, tool, &claims.native)
                .await?;
            if snapshot.state.is_terminal() {
                let status = task_view(task_id, &claims, tool, &snapshot)["status"].clone();
                return Err(RpcError::InvalidParams(format!(
                    "Cannot cancel task: already in terminal status {status}"
                )));
            }
            let cancelled = Snapshot::new(RunState::Cancelled {
                message: Some("Cancelled by the client".into()),
            });
            Ok(task_view(task_id, &claims, tool, &cancelled).into())
        }
        "tasks/result" => result(gw, caller, out, task_id, &claims, tool)
            .await
            .map(Body::Value),
        other => Err(RpcError::MethodNotFound(other.to_owned())),
    }
}

/// `tasks/result`: waits (within this request, up to the wait limit) until the
/// run is terminal; input requests go to the client on this request's stream.
async fn result(
    gw: &Gateway,
    caller: &Caller,
    out: Option<&Outbound>,
    task_id: &str,
    claims: &TaskClaims,
    tool: &Tool,
) -> Result<Value, RpcError> {
    let _slot = gw.hold_wait(caller)?;
    let limit = tool.config.max_wait.unwrap_or(gw.server.max_wait);
    let deadline = Instant::now() + limit;
    let mut sent = HashSet::new();
    let related = json!({ "taskId": task_id });
    // The client negotiated tasks: each new status goes to it on this stream
    // as `notifications/tasks/status` (the `Task`, no related-task).
    let mut last_status: Option<Value> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let snapshot = gw
            .wait(tool, &claims.native, left, |s| {
                if let Some(out) = out {
                    notify_status(out, task_id, claims, tool, s, &mut last_status);
                }
            })
            .await?;
        match &snapshot.state {
            RunState::Completed(output) => {
                let mut result = call_tool_result(output, Version::V2025_11_25);
                result["_meta"] = json!({ RELATED_TASK: related });
                return Ok(result);
            }
            RunState::Failed { message } => return Err(RpcError::Internal(message.clone())),
            RunState::Cancelled { .. } => {
                return Err(RpcError::Internal(format!("Task {task_id} was cancelled")))
            }
            RunState::InputRequired { requests, .. } => {
                if let Some(out) = out {
                    let decorate = |p: &mut serde_json::Map<String, Value>| {
                        p.insert("_meta".into(), json!({ RELATED_TASK: related }));
                    };
                    input::ask(
                        gw,
                        caller,
                        out,
                        tool,
                        &claims.native,
                        requests,
                        Version::V2025_11_25,
                        &mut sent,
                        &decorate,
                        false,
                    );
                }
            }
            RunState::Working { .. } => {}
        }
        if Instant::now() >= deadline {
            return Err(RpcError::Engine(
                taskgate_engine::EngineError::DeadlineExceeded {
                    operation: "tasks/result (the task is still running; call tasks/result again)",
                    after: limit,
                },
            ));
        }
        // Input requested and sent: give the client a poll interval to answer.
        tokio::time::sleep(
            tool.config
                .poll_interval
                .min(Duration::from_secs(1))
                .min(deadline - Instant::now()),
        )
        .await;
    }
}

/// Sends `notifications/tasks/status` when the task's status or message
/// differs from the last one sent on this stream (`last`: what was sent,
/// `Some(Null)` once a first read found the task already terminal).
fn notify_status(
    out: &Outbound,
    task_id: &str,
    claims: &TaskClaims,
    tool: &Tool,
    snapshot: &Snapshot,
    last: &mut Option<Value>,
) {
    // A task already terminal at the first read answers at once: no status first.
    if last.is_none() && snapshot.state.is_terminal() {
        *last = Some(Value::Null);
        return;
    }
    let task = task_view(task_id, claims, tool, snapshot);
    let key = json!([task["status"], task["statusMessage"]]);
    if last.as_ref() == Some(&key) {
        return;
    }
    *last = Some(key);
    let _ = out.send(
        json!({
            "jsonrpc": "2.0",
            "method": "notifications/tasks/status",
            "params": task,
        })
        .into(),
    );
}

#[cfg(test)]
mod view_tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn the_written_view_is_what_serde_json_writes() {
        let view = |message: Option<&'static str>, ttl: Option<u64>| TaskView {
            created_at: "2026-12-04T22:15:00.123Z".into(),
            last_updated_at: "2026-12-04T22:16:00.000Z".into(),
            poll_interval: 5000,
            status: "working",
            status_message: message.map(Cow::Borrowed),
            task_id: "tg2.k.AbC-_9",
            ttl,
        };
        for v in [
            view(Some("step 2 of 3"), Some(60_000)),
            view(None, None),
            view(Some("quote \" backslash \\ newline \n \u{1} é ✓"), Some(1)),
        ] {
            assert_eq!(
                String::from_utf8(v.to_json()).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
        }
    }
}
