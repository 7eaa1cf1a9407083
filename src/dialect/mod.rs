//! The dialects: thin translators between each generation's wire shapes and the
//! core. The front door decides the era of a message once ([`crate::server::Era`])
//! and calls one of the entry points here; this module routes a session's
//! request to the dialect that speaks it (2026-07-28 requests go straight to
//! [`stateless::serve`]). Dialects never import one another: what two of them
//! share lives in the shared modules (`session`, `outcome`, `input`,
//! `task_ref`, `wire`, `logs`).
//!
//! A dialect's file is named `<era>[_<what long calls become>]`, the era being
//! the front door's: `stateless` (2026-07-28, every request carries its version)
//! or `session_*` (an `initialize`-based session, 2024-11-05 … 2025-11-25).
//!
//! | module | who speaks it |
//! |---|---|
//! | [`stateless`] | 2026-07-28 clients, with or without the tasks extension |
//! | [`session_tasks`] | 2025-11-25 sessions that declared tasks (SEP-1686) |
//! | [`session_operations`] | sessions that opt in to SEP-1391 operations |
//! | [`session_plain`] | sessions with neither: each tool's `legacy` policy |
//!
//! Each dialect's entry point is `serve(`[`wire::Request`]`) -> Result<Body, RpcError>`:
//! it answers the methods the dialect owns, every failure an [`RpcError`]. The
//! session dialects also take part in `tools/list` and `tools/call` through the
//! routing below.
//!
//! `taskgate_logs` ([`logs`]) is offered to every generation alike.
//!
//! # Adding a dialect
//!
//! 1. If its task handles must not open in another dialect, add a variant to
//!    [`crate::core::handle::Dialect`] with a new one-letter tag (never reuse
//!    or change one: they are sealed into handles already handed out), its
//!    audit label in `Dialect::label`, and the tag in the claims reader
//!    (`TaskClaims::from_canonical`, `core/handle/claims.rs`).
//! 2. Write `src/dialect/<era>_<mechanism>.rs` with `pub async fn serve(req:
//!    Request<'_>) -> Result<Body, RpcError>`,
//!    built on the shared modules, importing no other dialect; declare it below.
//! 3. Route to it: a session dialect from [`in_session`] (its methods) and from
//!    `list_tools`/`call_tool` here; a new era from `route` in `src/server.rs`
//!    (and [`crate::server::Era`] when the front door must tell it apart).
//! 4. If it negotiates something at `initialize`, record it in
//!    [`session::Session`] and answer it in [`initialize`].
//! 5. If the protocol version is new, add it to [`wire::Version`] (the metrics
//!    label comes from there).
//! 6. Tests: a `tests/dialects_<name>.rs` over the real server (see
//!    `tests/dialects_sep1391.rs`), including a handle of another dialect
//!    refused as not found.

pub mod input;
pub mod logs;
pub mod outcome;
pub mod session;
pub mod session_operations;
pub mod session_plain;
pub mod session_tasks;
pub mod stateless;
pub mod task_ref;
pub mod wire;

use serde_json::{json, Value};

use crate::core::config::ToolMode;
use crate::core::handle::Dialect;
use crate::core::{Caller, CoreError, Gateway};
use crate::rpc::{Body, Params, RpcError};
use session::Session;
use wire::{server_info, tool_entry, Outbound, Request, INSTRUCTIONS, SEP1391_CAPABILITY};

/// Answers `initialize`: the session it opens and the result.
#[must_use]
pub fn initialize(params: &Value) -> (Session, Value) {
    let session = Session::negotiate(params);
    let mut capabilities = json!({ "tools": { "listChanged": false } });
    if session.tasks() {
        capabilities["tasks"] = session_tasks::capability();
    }
    if session.operations {
        capabilities["experimental"] = json!({ SEP1391_CAPABILITY: {} });
    }
    let result = json!({
        "protocolVersion": session.version().as_str(),
        "capabilities": capabilities,
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    });
    (session, result)
}

/// Serves one request of a legacy session, routing it to the dialect the
/// session negotiated: 2025-11-25 tasks, SEP-1391 operations, or plain.
///
/// # Errors
///
/// Every failure as an [`RpcError`].
pub async fn in_session(
    gw: &Gateway,
    caller: &Caller,
    session: &Session,
    out: Option<&Outbound>,
    method: &str,
    params: &Params,
) -> Result<Body, RpcError> {
    let request = Request {
        gw,
        caller,
        version: session.version(),
        headers: None,
        out,
        method,
        params,
    };
    match method {
        "ping" => Ok(json!({}).into()),
        "tools/list" => Ok(list_tools(gw, caller, session).into()),
        "tools/call" => call_tool(gw, caller, session, out, params)
            .await
            .map(Body::Value),
        "tasks/get" | "tasks/result" | "tasks/cancel" if session.tasks() => {
            session_tasks::serve(request).await
        }
        "tools/async/status" | "tools/async/result" if session.operations => {
            session_operations::serve(request).await
        }
        other => Err(RpcError::MethodNotFound(other.to_owned())),
    }
}

fn list_tools(gw: &Gateway, caller: &Caller, session: &Session) -> Value {
    let version = session.version();
    let mut tools: Vec<Value> = gw
        .tools()
        .iter()
        .filter(|t| session_plain::visible(t, session) && gw.visible_to(caller, t))
        .map(|t| {
            let extra = if session.operations {
                Some((
                    "invocationMode",
                    json!(session_operations::invocation_mode(t)),
                ))
            } else if session.tasks() {
                session_tasks::execution(t).map(|e| ("execution", e))
            } else {
                None
            };
            tool_entry(t, version, extra)
        })
        .collect();
    let companions = session_plain::companion_entries(gw, session);
    // taskgate_logs goes to clients that can hold a task: tasks, operations,
    // or the handles of the `handles` policy.
    let holds_tasks = session.tasks() || session.operations || !companions.is_empty();
    tools.extend(companions);
    if holds_tasks && logs::listed(gw, caller) {
        tools.push(logs::entry(version));
    }
    json!({ "tools": tools })
}

async fn call_tool(
    gw: &Gateway,
    caller: &Caller,
    session: &Session,
    out: Option<&Outbound>,
    params: &Value,
) -> Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::InvalidParams("name is required".into()))?;
    if let Some(result) = session_plain::companion(gw, caller, session, name, params).await? {
        return Ok(result);
    }
    if name == logs::TOOL && logs::listed(gw, caller) {
        return session_logs(gw, caller, session, params).await;
    }
    let dialect = if session.tasks() {
        Dialect::TasksSep1686
    } else {
        Dialect::PlainHandle
    };
    let tool = match gw.tool_for(caller, name, dialect) {
        Ok(tool) => Some(tool),
        Err(e @ CoreError::InsufficientScope { .. }) => return Err(e.into()),
        Err(_) => None,
    };
    let tool = tool
        .filter(|t| session_plain::visible(t, session) || t.config.mode == ToolMode::Async)
        .ok_or_else(|| RpcError::InvalidParams(format!("Unknown tool: {name}")))?;
    if !session_plain::visible(tool, session) {
        // SEP-1391: an outdated client calling an async-only tool.
        return Err(RpcError::InvalidRequest(format!(
            "Tool {name} runs only as a long-running operation, which this client did not opt in to"
        )));
    }
    let args = gw.check_arguments(tool, params.get("arguments"))?;

    if session.operations && tool.is_long_running() {
        return match params.get("operation") {
            Some(operation) => session_operations::call(gw, caller, tool, args, operation).await,
            None => Err(RpcError::InvalidRequest(format!(
                "Tool {name} is invocationMode async: call it with params.operation {{token, keepAlive}}"
            ))),
        };
    }
    if session.tasks() {
        match (params.get("task"), tool.config.mode) {
            (Some(_), _) => return session_tasks::call_as_task(gw, caller, tool, args).await,
            (None, ToolMode::Async) => {
                return Err(RpcError::MethodNotFound(format!(
                    "tool {name} requires a task-augmented call (taskSupport is required)"
                )))
            }
            _ => {}
        }
    }
    session_plain::call(gw, caller, session, out, tool, args, params).await
}

/// `taskgate_logs` in a legacy session: the argument is a task id or handle
/// (any dialect's), or, for a SEP-1391 session, an operation token.
async fn session_logs(
    gw: &Gateway,
    caller: &Caller,
    session: &Session,
    params: &Value,
) -> Result<Value, RpcError> {
    let args = logs::args(params)?;
    let (tool, native) = match gw.open_for_logs(caller, &args.task) {
        Ok((claims, tool)) => (tool, claims.native),
        Err(CoreError::NotFound) if session.operations => {
            session_operations::find(gw, caller, &args.task).await?
        }
        Err(e) => return Err(e.into()),
    };
    logs::page(gw, caller, session.version(), tool, &native, &args).await
}

/// The SEP-1391 operation token a `tools/call` names (`params.operation.token`).
#[must_use]
pub fn call_operation_token<'p>(method: &str, params: &'p Value) -> Option<&'p str> {
    if method != "tools/call" {
        return None;
    }
    params
        .get("operation")
        .and_then(|o| o.get("token"))
        .and_then(Value::as_str)
}

/// The SEP-1391 operation a `notifications/cancelled` names by token
/// (`params._operation.token`).
#[must_use]
pub fn cancelled_operation_token(params: &Value) -> Option<&str> {
    params
        .get("_operation")
        .and_then(|o| o.get("token"))
        .and_then(Value::as_str)
}

/// Cancels the SEP-1391 operation of `token`.
///
/// # Errors
///
/// As [`session_operations::cancel`].
pub async fn cancel_operation(gw: &Gateway, caller: &Caller, token: &str) -> Result<(), RpcError> {
    session_operations::cancel(gw, caller, token).await
}

/// Forwards a client's response to one of taskgate's own requests (an answer to
/// an input request); `false` when it answers nothing taskgate asked.
///
/// # Errors
///
/// Engine errors while forwarding.
pub async fn client_response(
    gw: &Gateway,
    caller: &Caller,
    id: &Value,
    result: Option<&Value>,
    error: Option<&Value>,
) -> Result<bool, RpcError> {
    input::route_response(gw, caller, id, result, error).await
}
