//! SEP-1391 long-running operations, an opt-in overlay on legacy sessions (the
//! founding proposal of taskgate).
//!
//! The client chooses the operation token. taskgate keeps no table from tokens to
//! runs: the native run name is derived from (sealing key, caller, tool, token),
//! so a retry with the same token reaches the same run, and a status request finds
//! it again by deriving the name for each long-running tool and asking the engines
//! in parallel.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};
use taskgate_engine::{EngineError, RunState, Snapshot};

use super::input;
use super::outcome::status_word;
use super::wire::Request;
use super::wire::{call_tool_result, Outbound, Version};
use crate::core::audit::{self, Action, Outcome};
use crate::core::config::ToolMode;
use crate::core::handle::Dialect;
use crate::core::{Caller, CoreError, Gateway, Tool};
use crate::rpc::{Body, RpcError};

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

/// The keepAlive an operation gets: the client's `operation.keepAlive`
/// (seconds) within the tool's `keep_alive`, which is also what it gets when it
/// asks for none or for `null` (unlimited). Its engine keeps the run that long
/// (plus the expiry notice); a run the engine has removed is "not found".
fn keep_alive_of(tool: &Tool, operation: &Value) -> Result<Duration, RpcError> {
    let most = tool.config.keep_alive;
    match operation.get("keepAlive") {
        None | Some(Value::Null) => Ok(most),
        Some(v) => match v.as_u64() {
            Some(secs) => Ok(Duration::from_secs(secs).min(most)),
            None => Err(RpcError::InvalidParams(
                "operation.keepAlive must be a whole number of seconds, or null".into(),
            )),
        },
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
    let keep_alive = keep_alive_of(tool, operation)?;
    if !tool.capabilities.locate {
        return Err(RpcError::InvalidParams(format!(
            "Tool {} cannot run as a SEP-1391 operation: its engine cannot find a run again from its token \
             (for GitHub Actions, set correlate = \"always\" in the tool's target)",
            tool.name()
        )));
    }
    // One token names one operation: look for it under every long-running
    // tool and every configured key first (a token used on another tool, or a
    // retry after a key rotation, must not start a second run).
    let existing = match locate(gw, caller, token.as_str()).await? {
        Some(found) if found.tool.name() != tool.name() => {
            return Err(RpcError::InvalidParams(format!(
                "Operation token {token:?} is already used by another operation (of another tool)"
            )))
        }
        other => other,
    };
    let native = match existing {
        // An engine that cannot compare arguments on start: the run it found is
        // the operation (the engine README says how far that goes).
        Some(found) if !tool.capabilities.idempotent_start => found.native,
        found => {
            // Idempotent engines compare the arguments on start: retry under the
            // name the run was found by (an older key's, after a rotation).
            let run_name = found
                .map(|f| f.run_name)
                .unwrap_or_else(|| gw.keys.derive_run_name(caller, tool.name(), &token));
            // The engine keeps the run EXPIRED_NOTICE past keepAlive, so a late
            // request hears "expired" (see `read`) before it hears "not found".
            let retention = keep_alive.saturating_add(EXPIRED_NOTICE);
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
    let poll = tool.config.poll_interval.as_secs_f64().ceil().max(1.0) as u64;
    Ok(json!({
        "content": [{ "type": "text", "text": format!(
            "Started {} as operation {token}. Poll tools/async/status with this token, then fetch tools/async/result.",
            tool.name()) }],
        "isError": false,
        "operation": { "token": token, "keepAlive": keep_alive.as_secs(), "pollFrequency": poll, "status": "submitted" },
    }))
}

/// Where a token's run was found.
struct Found<'g> {
    tool: &'g Tool,
    run_name: String,
    native: String,
}

/// Looks for the run of `token` across the long-running tools the caller may
/// use, under the run name every configured key derives (so a rotation does
/// not lose it), asking the engines in parallel: one `locate` per tool and key
/// (one key: one per tool). Each look-up counts against the caller's
/// `server.max_lookups_per_minute`; a tool the caller may not use is never
/// searched (its runs could not have been started by this caller anyway).
///
/// # Errors
///
/// The first engine error when no engine found the run; a retryable refusal
/// past the caller's look-up rate, before any engine call.
async fn locate<'g>(
    gw: &'g Gateway,
    caller: &Caller,
    token: &str,
) -> Result<Option<Found<'g>>, RpcError> {
    gw.count_lookup(caller.id()).map_err(op_error)?;
    let mut lookups = Vec::new();
    for tool in gw
        .tools()
        .iter()
        .filter(|t| t.is_long_running() && t.capabilities.locate && gw.visible_to(caller, t))
    {
        for run_name in gw.keys.derive_run_names(caller, tool.name(), token) {
            lookups.push(async move {
                let outcome = tool.pipeline.locate(&run_name).await;
                (tool, run_name, outcome)
            });
        }
    }
    let mut first_error = None;
    for (tool, run_name, outcome) in futures::future::join_all(lookups).await {
        match outcome {
            Ok(Some(native)) => {
                return Ok(Some(Found {
                    tool,
                    run_name,
                    native,
                }))
            }
            Ok(None) | Err(EngineError::NotFound) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(RpcError::Engine(e)),
        None => Ok(None),
    }
}

/// Finds the run of `token`; "Operation not found" when there is none.
///
/// # Errors
///
/// "Operation not found" (-32602); engine errors.
pub async fn find<'g>(
    gw: &'g Gateway,
    caller: &Caller,
    token: &str,
) -> Result<(&'g Tool, String), RpcError> {
    match locate(gw, caller, token).await? {
        Some(found) => {
            audit::record(
                Action::Read,
                caller.id(),
                Some(found.tool.name()),
                Some(Dialect::PlainHandle),
                Some(&audit::run_ref(found.tool.name(), &found.native)),
                Outcome::Ok,
            );
            Ok((found.tool, found.native))
        }
        None => {
            audit::record(
                Action::Read,
                caller.id(),
                None,
                Some(Dialect::PlainHandle),
                None,
                Outcome::Refused("unknown_token"),
            );
            Err(RpcError::NotFound(NOT_FOUND.into()))
        }
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

/// Serves `tools/async/status` and `tools/async/result`.
///
/// # Errors
///
/// -32602 for unknown or expired tokens and results of unfinished operations.
pub async fn serve(req: Request<'_>) -> Result<Body, RpcError> {
    let Request {
        gw,
        caller,
        version,
        out,
        method,
        params,
        ..
    } = req;
    operation(gw, caller, version, out, method, params)
        .await
        .map(Body::Value)
}

/// [`serve`], its result a value.
async fn operation(
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
            let snapshot = match (&snapshot.state, out) {
                (RunState::InputRequired { requests, .. }, Some(out)) => {
                    ask_and_wait(gw, caller, version, out, tool, &native, token, requests).await?
                }
                _ => snapshot,
            };
            Ok(status_of(&snapshot.state))
        }
        _ => match &snapshot.state {
            RunState::Completed(output) => {
                Ok(json!({ "result": call_tool_result(output, version) }))
            }
            RunState::Failed { message } => Ok(json!({ "result": {
                "content": [{ "type": "text", "text": message }], "isError": true } })),
            other => Err(RpcError::InvalidParams(format!(
                "Failed to retrieve operation result: the operation is {}",
                operation_status(other)
            ))),
        },
    }
}

/// The SEP-1391 status word. A run the engine lost or reports in a way taskgate
/// cannot interpret is `unknown` (the SEP's fallback for unexpected conditions,
/// terminal); a run that ran and failed is `completed` with a tool error.
fn operation_status(state: &RunState) -> &'static str {
    match state {
        RunState::Failed { .. } => "unknown",
        other => status_word(other),
    }
}

/// A `tools/async/status` result: the status, and the run's message and
/// progress while it works (the fields of `notifications/progress`), its error
/// when it is `unknown`.
fn status_of(state: &RunState) -> Value {
    let mut status = json!({ "status": operation_status(state) });
    match state {
        RunState::Failed { message } => status["error"] = json!(message),
        RunState::Working { message, progress } => {
            if let Some(p) = progress {
                status["progress"] = json!(p.done);
                if let Some(total) = p.total {
                    status["total"] = json!(total);
                }
            }
            if let Some(m) = message {
                status["message"] = json!(m);
            }
        }
        RunState::InputRequired {
            message: Some(m), ..
        } => status["message"] = json!(m),
        _ => {}
    }
    status
}

/// A status request that finds the run asking for input sends each question
/// once, as `elicitation/create` on this request's stream, and then keeps the
/// request open (up to the tool's wait limit) until the run has moved on — so a
/// client polling one request after another is asked once, not once per poll.
/// Returns the run's latest snapshot.
#[allow(clippy::too_many_arguments)]
async fn ask_and_wait(
    gw: &Gateway,
    caller: &Caller,
    version: Version,
    out: &Outbound,
    tool: &Tool,
    native: &str,
    token: &str,
    requests: &BTreeMap<String, taskgate_engine::InputRequest>,
) -> Result<Snapshot, RpcError> {
    let _slot = gw.hold_wait(caller)?;
    let owned = token.to_owned();
    let decorate = move |p: &mut Map<String, Value>| {
        p.insert("_operation".into(), json!({ "token": owned }));
    };
    let mut sent = HashSet::new();
    input::ask(
        gw, caller, out, tool, native, requests, version, &mut sent, &decorate, false,
    );
    let limit = tool.config.max_wait.unwrap_or(gw.server.max_wait);
    let deadline = Instant::now() + limit;
    let mut snapshot = Snapshot::new(RunState::InputRequired {
        requests: requests.clone(),
        message: None,
    });
    loop {
        let now = Instant::now();
        if now >= deadline || out.is_closed() {
            return Ok(snapshot);
        }
        let step = tool
            .config
            .poll_interval
            .min(Duration::from_secs(1))
            .min(deadline - now);
        snapshot = tool
            .pipeline
            .wait_for_change(&native.to_owned(), &snapshot, step)
            .await
            .map_err(|e| op_error(e.into()))?;
        match &snapshot.state {
            // A new question (another key) is sent too; answered ones are not.
            RunState::InputRequired { requests, .. }
                if requests.keys().all(|k| sent.contains(k)) => {}
            RunState::InputRequired { requests, .. } => input::ask(
                gw, caller, out, tool, native, requests, version, &mut sent, &decorate, false,
            ),
            _ => return Ok(snapshot),
        }
    }
}

/// Cancels the run of `token`.
///
/// # Errors
///
/// As [`handle`].
pub async fn cancel(gw: &Gateway, caller: &Caller, token: &str) -> Result<(), RpcError> {
    // A cancel notification has no reply to carry a retryable error: finding the
    // run is tried again within one call timeout (the cancel itself is retried by
    // the pipeline's `RetryCancel` layer).
    let found = crate::core::stack::retrying(gw.server.call_timeout, || async {
        match find(gw, caller, token).await {
            Err(RpcError::Engine(e)) if e.is_retryable() => Err(e),
            other => Ok(other),
        }
    })
    .await;
    let (tool, native) = found.map_err(RpcError::Engine)??;
    gw.cancel(caller, Dialect::PlainHandle, tool, &native)
        .await
        .map_err(op_error)?;
    Ok(())
}
