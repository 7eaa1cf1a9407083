//! `subscriptions/listen` with `notifications.taskIds` (the tasks extension's
//! push): a request that stays open and sends `notifications/tasks` — the
//! task's `DetailedTask`, exactly as `tasks/get` builds it — whenever a watched
//! task changes, then ends with its result.
//!
//! The stream is a client request like any other: it holds a wait slot for its
//! life, reads the engines only while open (through the shared watches of
//! [`crate::core::watch`]), and leaves nothing behind when it ends. It ends when
//! every watched task is terminal, at `server.max_listen`, or when the client
//! cancels it (HTTP: closes the stream; stdio: `notifications/cancelled`).

use axum::http::HeaderMap;
use futures::stream::{FuturesUnordered, StreamExt as _};
use serde_json::{json, Value};

use super::super::wire::Outbound;
use super::{check_headers, check_meta, detailed_task, missing_tasks, require_header};
use crate::core::handle::{Dialect, TaskClaims};
use crate::core::watch::Seen;
use crate::core::{Caller, CoreError, Gateway, Tool};
use crate::rpc::header;
use crate::rpc::{Params, RpcError};

/// The `_meta` key every message of a listen stream carries.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Most task ids one listen request may name; more is refused with -32602.
pub const MAX_TASK_IDS: usize = 32;

/// Serves `subscriptions/listen` (request `id`): acknowledges the task ids the
/// caller may read, sends each one's `DetailedTask` now and on every change on
/// `out`, and returns the closing result once the stream ends by itself.
///
/// Ids that do not open for this caller (forged, altered, expired, another
/// caller's) and ids of runs the engine does not know are left out of the
/// acknowledgement alike: no oracle.
///
/// # Errors
///
/// As every 2026-07-28 request for `_meta` and headers; -32021 when `taskIds`
/// is sent without the tasks extension; -32602 for a malformed filter or too
/// many ids; -32600 without a stream to send on; a retryable error when the
/// wait bounds are full or an engine cannot be read.
pub async fn listen(
    gw: &Gateway,
    caller: &Caller,
    headers: Option<&HeaderMap>,
    out: Option<&Outbound>,
    id: &Value,
    params: &Params,
) -> Result<Value, RpcError> {
    if let (Some(headers), Some(version)) = (headers, params.meta_version()) {
        require_header(headers, &header::PROTOCOL_VERSION, version)?;
    }
    let declared = check_meta(params)?;
    if let Some(headers) = headers {
        check_headers(gw, headers, "subscriptions/listen", params)?;
    }
    let ids = task_ids(params, declared.tasks)?;
    let out = out.ok_or_else(|| {
        RpcError::InvalidRequest(
            "subscriptions/listen needs a stream: send Accept: text/event-stream".into(),
        )
    })?;
    let _slot = gw.hold_wait(caller)?;
    let _listening = gw.metrics.listening();

    // Each id that opens for this caller and names a run its engine knows;
    // the runs it opens count against server.max_watched_runs_per_caller
    // (before any engine call) for the life of the stream.
    let opened: Vec<_> = ids
        .into_iter()
        .filter_map(|task_id| {
            gw.open(caller, Dialect::TasksExtension, task_id)
                .ok()
                .map(|(claims, tool)| (task_id, claims, tool))
        })
        .collect();
    let _watching = gw.hold_watched(caller.id(), opened.len())?;
    let mut watched = Vec::new();
    for (task_id, claims, tool) in opened {
        match gw.read(tool, &claims.native).await {
            Ok(snapshot) => watched.push((task_id, claims, tool, snapshot)),
            Err(CoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let meta = json!({ SUBSCRIPTION_ID: id });
    let accepted: Vec<&str> = watched.iter().map(|(t, ..)| *t).collect();
    send(
        out,
        "notifications/subscriptions/acknowledged",
        json!({ "_meta": meta, "notifications": { "taskIds": accepted } }),
    );

    let streams: FuturesUnordered<_> = watched
        .into_iter()
        .map(|(task_id, claims, tool, snapshot)| {
            let to = Subscriber {
                out,
                id,
                elicitation: declared.elicitation,
            };
            follow(gw, to, task_id, claims, tool, snapshot)
        })
        .collect();
    let all_ended = streams.collect::<Vec<()>>();
    if tokio::time::timeout(gw.server.max_listen, all_ended)
        .await
        .is_err()
    {
        tracing::debug!("a listen stream reached server.max_listen");
    }
    Ok(json!({ "resultType": "complete", "_meta": meta }))
}

/// Where a listen stream's notifications go, and what its request declared.
#[derive(Clone, Copy)]
struct Subscriber<'a> {
    out: &'a Outbound,
    /// The listen request's id: the subscription id.
    id: &'a Value,
    /// The request declared elicitation (it may be shown input requests).
    elicitation: bool,
}

/// The task ids of the subscription filter `notifications.taskIds`, each
/// once; naming them needs the tasks extension (`tasks`).
fn task_ids(params: &Params, tasks: bool) -> Result<Vec<&str>, RpcError> {
    let filter = match params.get("notifications") {
        Some(Value::Object(f)) => f,
        _ => {
            return Err(RpcError::InvalidParams(
                "notifications must be an object (a subscription filter)".into(),
            ))
        }
    };
    match filter.get("taskIds") {
        None => Ok(Vec::new()),
        Some(Value::Array(ids)) => {
            if !tasks {
                return Err(missing_tasks());
            }
            let mut seen = Vec::new();
            for v in ids {
                let id = v.as_str().ok_or_else(|| {
                    RpcError::InvalidParams("notifications.taskIds must hold strings".into())
                })?;
                if !seen.contains(&id) {
                    seen.push(id);
                }
            }
            if seen.len() > MAX_TASK_IDS {
                return Err(RpcError::InvalidParams(format!(
                    "notifications.taskIds names {} tasks; one listen stream watches at most {MAX_TASK_IDS}",
                    seen.len()
                )));
            }
            Ok(seen)
        }
        Some(_) => Err(RpcError::InvalidParams(
            "notifications.taskIds must be an array".into(),
        )),
    }
}

/// Sends the task's `DetailedTask` now and on each change, until it is terminal
/// or its run is gone.
async fn follow(
    gw: &Gateway,
    to: Subscriber<'_>,
    task_id: &str,
    claims: TaskClaims,
    tool: &Tool,
    first: taskgate_engine::Snapshot,
) {
    let Subscriber {
        out,
        id,
        elicitation,
    } = to;
    let mut last = notification(id, elicitation, task_id, &claims, tool, &first);
    let _ = out.send(last.clone());
    if first.state.is_terminal() {
        return;
    }
    let poll = first
        .poll_hint
        .unwrap_or_default()
        .max(tool.config.poll_interval);
    let mut rx = gw
        .watches
        .subscribe(tool.name(), &tool.pipeline, &claims.native, poll, &first);
    while rx.changed().await.is_ok() {
        let seen = rx.borrow_and_update().clone();
        let Seen::Run(snapshot) = seen else {
            return;
        };
        let next = notification(id, elicitation, task_id, &claims, tool, &snapshot);
        if next != last {
            let _ = out.send(next.clone());
            last = next;
        }
        if snapshot.state.is_terminal() {
            return;
        }
    }
}

/// `notifications/tasks` for one snapshot: the `DetailedTask` of `tasks/get`
/// (without its `resultType`) plus the subscription id. A stream whose request
/// did not declare elicitation never carries an input request: it sees the
/// task's `input_required` status with a message saying why the question is
/// not shown (`tasks/get` would answer -32021 for the same reason).
fn notification(
    id: &Value,
    elicitation: bool,
    task_id: &str,
    claims: &TaskClaims,
    tool: &Tool,
    snapshot: &taskgate_engine::Snapshot,
) -> Value {
    let mut task = detailed_task(task_id, claims, tool, snapshot, &super::no_tickets);
    if let Some(t) = task.as_object_mut() {
        t.remove("resultType");
        if !elicitation && t.remove("inputRequests").is_some() {
            t.insert(
                "statusMessage".into(),
                json!("the task waits for input of a type this stream's request did not declare (elicitation); a request that declares it reads the question with tasks/get"),
            );
        }
        t.insert("_meta".into(), json!({ SUBSCRIPTION_ID: id }));
    }
    json!({ "jsonrpc": "2.0", "method": "notifications/tasks", "params": task })
}

fn send(out: &Outbound, method: &str, params: Value) {
    let _ = out.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
}
