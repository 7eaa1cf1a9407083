//! Clients with no long-running dialect (neither 2025-11-25 tasks nor SEP-1391
//! operations): each long-running tool's `legacy` policy decides what they get —
//! `hide` (not listed), `wait` (the call waits for the run, with progress
//! notifications and, on 2025-06-18+, elicitation), or `handles` (a handle at
//! once, read through the companion tools).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Map, Value};
use taskgate_engine::RunState;

use super::input;
use super::outcome::{notify_progress, status_word, sync_outcome};
use super::session::Session;
use super::wire::{call_tool_result, Outbound};
use crate::core::config::{LegacyPolicy, ToolMode};
use crate::core::handle::Dialect;
use crate::core::{Caller, CoreError, Gateway, Tool};
use crate::rpc::RpcError;

/// True when `tool` is listed for a client of `session`.
#[must_use]
pub fn visible(tool: &Tool, session: &Session) -> bool {
    session.long_running()
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
    !session.long_running()
        && gw
            .tools()
            .iter()
            .any(|t| t.is_long_running() && t.config.legacy_policy() == LegacyPolicy::Companions)
}

/// The `tools/list` entries of the companion tools, when this client gets them.
#[must_use]
pub fn companion_entries(gw: &Gateway, session: &Session) -> Vec<Value> {
    if !companions_listed(gw, session) {
        return Vec::new();
    }
    COMPANIONS
        .iter()
        .map(|(name, description)| json!({ "name": name, "description": description, "inputSchema": {
            "type": "object", "required": ["handle"],
            "properties": { "handle": { "type": "string", "description": "The handle a call returned" } } } }))
        .collect()
}

/// A `tools/call` of a long-running or plain tool by a client without a
/// long-running dialect: a handle at once (`handles`), or a call that waits.
///
/// # Errors
///
/// Engine errors; a failed run → -32603.
pub async fn call(
    gw: &Gateway,
    caller: &Caller,
    session: &Session,
    out: Option<&Outbound>,
    tool: &Tool,
    args: Value,
    params: &Value,
) -> Result<Value, RpcError> {
    let name = tool.name();
    match (tool.is_long_running(), tool.config.legacy_policy()) {
        (true, LegacyPolicy::Companions) => {
            let started = gw
                .start(caller, tool, args, Dialect::PlainHandle, None)
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
    caller: &Caller,
    session: &Session,
    out: Option<&Outbound>,
    tool: &Tool,
    args: Value,
    params: &Value,
) -> Result<Value, RpcError> {
    // The wait is bounded before anything starts: a refused call starts nothing.
    let _slot = gw.hold_wait(caller)?;
    let started = gw
        .start(caller, tool, args, Dialect::PlainHandle, None)
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
            .wait(tool, &started.claims.native, left, |s| {
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
                    // The call that started the run: approvals are not taken here.
                    true,
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

/// The companion tools of the `handles` policy; `None` when `name` is not one.
pub async fn companion(
    gw: &Gateway,
    caller: &Caller,
    session: &Session,
    name: &str,
    params: &Value,
) -> Result<Option<Value>, RpcError> {
    if !companions_listed(gw, session) || !COMPANIONS.iter().any(|(n, _)| *n == name) {
        return Ok(None);
    }
    let text_result = |text: String, is_error: bool| json!({ "content": [{ "type": "text", "text": text }], "isError": is_error });
    let handle = params
        .get("arguments")
        .and_then(|a| a.get("handle"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    const MADE_UP: &str = "Unknown handle. Only a handle returned by an earlier call is valid: copy it exactly from that call's result; never make one up.";
    let Ok((claims, tool)) = gw.open(caller, Dialect::PlainHandle, handle) else {
        return Ok(Some(text_result(MADE_UP.into(), true)));
    };
    let snapshot = match gw.read(tool, &claims.native).await {
        Ok(s) => s,
        Err(CoreError::NotFound) => return Ok(Some(text_result(MADE_UP.into(), true))),
        Err(e) => return Err(e.into()),
    };
    let status = status_word(&snapshot.state);
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
            gw.cancel(caller, Dialect::PlainHandle, tool, &claims.native)
                .await?;
            text_result(format!("Cancellation of {} requested.", tool.name()), false)
        }
    }))
}
