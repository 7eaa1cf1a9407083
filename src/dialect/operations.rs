//! SEP-1391 long-running operations, an opt-in overlay on legacy sessions (the
//! founding proposal of taskgate).
//!
//! The client chooses the operation token. taskgate keeps no table from tokens to
//! runs: the native run name is derived from (sealing key, caller, tool, token),
//! so a retry with the same token reaches the same run, and a status request finds
//! it again by deriving the name for each long-running tool and asking the engines
//! in parallel.

use std::collections::HashSet;
use std::time::SystemTime;

use serde_json::{json, Map, Value};
use taskgate_engine::{EngineError, RunState, Snapshot};

use super::input;
use super::outcome::status_word;
use super::wire::{call_tool_result, Outbound, Version};
use crate::core::config::ToolMode;
use crate::core::handle::Dialect;
use crate::core::{Caller, CoreError, Gateway, Tool};
use crate::rpc::RpcError;

const NOT_FOUND: &str = "Failed to retrieve operation: Operation not found";
const EXPIRED: &str = "Failed to retrieve operation: Operation has expired";

/// A core failure in this dialect's words ("Operation not found").
fn op_error(e: CoreError) -> RpcError {
    RpcError::from_core(e, NOT_FOUND)
}

/// How long past its `keepAlive` an operation's run is kept in its engine, so
/// that requests for it are answered "Operation has expired"; after that they
/// are answered "Operation not found" (which SEP-1391 allows once purged).
const EXPIRED_NOTICE: std::time::Duration = std::time::Duration::from_secs(600);

/// `invocationMode` of a tool for opted-in clients.
#[must_use]
pub fn invocation_mode(tool: &Tool) -> &'static str {
    match tool.config.mode {
        ToolMode::Sync => "sync",
        ToolMode::Async | ToolMode::Hybrid => "async",
    }
}

/// The client's token, or a fresh one when the request left it out.
fn token_of(operation: &Value) -> Result<String, RpcError> {
    match operation.get("token") {
        None | Some(Value::Null) => Ok(format!(
            "op-{}",
            &crate::core::handle::random_run_name()[3..]
        )),
        Some(Value::String(t)) if !t.is_empty() && t.len() <= 256 => Ok(t.clone()),
        Some(_) => Err(RpcError::InvalidParams(
            "operation.token must be a non-empty string of at most 256 characters".into(),
        )),
    }
}

/// `tools/call` with `params.operation`.
///
/// # Errors
///
/// -32602 for a token already used with other arguments; engine errors.
pub async fn call(
    gw: &Gateway,
    caller: &Caller,
    tool: &Tool,
    args: Value,
    operation: &Value,
) -> Result<Value, RpcError> {
    let token = token_of(operation)?;
    if !tool.capabilities.locate {
        return Err(RpcError::InvalidParams(format!(
            "Tool {} cannot run as a SEP-1391 operation: its engine cannot find a run again from its token \
             (for GitHub Actions, set correlate = \"always\" in the tool's target)",
            tool.name()
        )));
    }
    let run_name = gw.keys.derive_run_name(caller, tool.name(), &token);
    // Engines without idempotent starts (GitHub dispatch) are asked first.
    let existing = if !tool.capabilities.idempotent_start && tool.capabilities.locate {
        tool.pipeline.locate(&run_name).await?
    } else {
        None
    };
    let native = match existing {
        Some(native) => native,
        None => {
            // The engine keeps the run EXPIRED_NOTICE past keepAlive, so a late
            // request hears "expired" (see `read`) before it hears "not found".
            let retention = tool.config.keep_alive.saturating_add(EXPIRED_NOTICE);
            match gw
                .start_retained(caller, tool, args, Dialect::PlainHandle, Some(run_name), retention)
                .await
            {
                Ok(started) => started.claims.native,
                Err(CoreError::Engine(EngineError::Conflict { .. })) => {
                    return Err(RpcError::InvalidParams(format!(
                        "Operation token {token:?} is already used by another operation (with other arguments)"
                    )))
                }
                Err(e) => return Err(op_error(e)),
            }
        }
    };
    // A retry with the token of an expired operation reaches that (ended) run
    // again: refuse it rather than answer as if a new run had started.
    let snapshot = gw.read(tool, &native).await.map_err(op_error)?;
    if expired(tool, &snapshot) {
        return Err(RpcError::NotFound(EXPIRED.into()));
    }
    let keep_alive = tool.config.keep_alive.as_secs();
    let poll = tool.config.poll_interval.as_secs_f64().ceil().max(1.0) as u64;
    Ok(json!({
        "content": [{ "type": "text", "text": format!(
            "Started {} as operation {token}. Poll tools/async/status with this token, then fetch tools/async/result.",
            tool.name()) }],
        "isError": false,
        "operation": { "token": token, "keepAlive": keep_alive, "pollFrequency": poll, "status": "submitted" },
    }))
}

/// Finds the run of `token` across the long-running tools, asking the engines in
/// parallel (one `locate` per tool).
async fn find<'g>(
    gw: &'g Gateway,
    caller: &Caller,
    token: &str,
) -> Result<(&'g Tool, String), RpcError> {
    let candidates: Vec<&Tool> = gw
        .tools()
        .iter()
        .filter(|t| t.is_long_running() && t.capabilities.locate)
        .collect();
    let lookups = candidates.iter().map(|tool| {
        let name = gw.keys.derive_run_name(caller, tool.name(), token);
        async move { (*tool, tool.pipeline.locate(&name).await) }
    });
    let mut first_error = None;
    for (tool, outcome) in futures::future::join_all(lookups).await {
        match outcome {
            Ok(Some(native)) => return Ok((tool, native)),
            Ok(None) | Err(EngineError::NotFound) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(RpcError::Engine(e)),
        None => Err(RpcError::NotFound(NOT_FOUND.into())),
    }
}

fn token_param(params: &Value) -> Result<&str, RpcError> {
    params
        .get("token")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::InvalidParams("token is required".into()))
}

/// Reads the run of `token`, refusing it once its keepAlive has passed.
async fn read<'g>(
    gw: &'g Gateway,
    caller: &Caller,
    token: &str,
) -> Result<(&'g Tool, String, Snapshot), RpcError> {
    let (tool, native) = find(gw, caller, token).await?;
    let snapshot = gw.read(tool, &native).await.map_err(op_error)?;
    if expired(tool, &snapshot) {
        return Err(RpcError::NotFound(EXPIRED.into()));
    }
    Ok((tool, native, snapshot))
}

/// True once the run ended more than the tool's keepAlive ago.
fn expired(tool: &Tool, snapshot: &Snapshot) -> bool {
    snapshot.state.is_terminal()
        && snapshot
            .ended_at
            .is_some_and(|ended| ended + tool.config.keep_alive <= SystemTime::now())
}

/// Handles `tools/async/status` and `tools/async/result`.
///
/// # Errors
///
/// -32602 for unknown or expired tokens and results of unfinished operations.
pub async fn handle(
    gw: &Gateway,
    caller: &Caller,
    version: Version,
    out: Option<&Outbound>,
    method: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    let token = token_param(params)?;
    let (tool, native, snapshot) = read(gw, caller, token).await?;
    match method {
        "tools/async/status" => {
            let mut status = json!({ "status": status_word(&snapshot.state) });
            match &snapshot.state {
                RunState::Failed { message } => status["error"] = json!(message),
                RunState::InputRequired { requests, .. } => {
                    if let Some(out) = out {
                        let token = token.to_owned();
                        let decorate = move |p: &mut Map<String, Value>| {
                            p.insert("_operation".into(), json!({ "token": token }));
                        };
                        let mut sent = HashSet::new();
                        input::ask(
                            gw, caller, out, tool, &native, requests, version, &mut sent, &decorate,
                        );
                    }
                }
                _ => {}
            }
            Ok(status)
        }
        _ => match &snapshot.state {
            RunState::Completed(output) => {
                Ok(json!({ "result": call_tool_result(output, version) }))
            }
            RunState::Failed { message } => Ok(json!({ "result": {
                "content": [{ "type": "text", "text": message }], "isError": true } })),
            other => Err(RpcError::InvalidParams(format!(
                "Failed to retrieve operation result: the operation is {}",
                status_word(other)
            ))),
        },
    }
}

/// Cancels the run of `token`.
///
/// # Errors
///
/// As [`handle`].
pub async fn cancel(gw: &Gateway, caller: &Caller, token: &str) -> Result<(), RpcError> {
    let (tool, native) = find(gw, caller, token).await?;
    gw.cancel(caller, Dialect::PlainHandle, tool, &native)
        .await
        .map_err(op_error)?;
    Ok(())
}
