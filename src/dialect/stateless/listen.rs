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

use std::time::SystemTime;

use axum::body::Bytes;

use super::super::wire::{json, timestamp, Outbound, Outgoing};
use super::{check_headers, check_meta, missing_tasks, require_header, DetailedTask};
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
///
/// A notification is written in three pieces: the stream's own head (its
/// subscription id, the task's id, creation time and TTL: made once, when
/// the stream opens), the run's last update time, and the run's state. The
/// last two are written once per change of the run, by the first of its
/// streams to see the change, and shared by the others (see
/// [`crate::core::watch::Change::rendered`]).
async fn follow(
    gw: &Gateway,
    to: Subscriber<'_>,
    task_id: &str,
    claims: TaskClaims,
    tool: &Tool,
    first: taskgate_engine::Snapshot,
) {
    let own = Own::new(to, task_id, &claims);
    let rendered = render(tool, &Seen::Run(first.clone()));
    let mut last = own.pieces(&first, &rendered);
    let _ = to.out.send(Outgoing::Pieces(last.to_vec()));
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
    drop((first, rendered, claims));
    while rx.changed().await.is_ok() {
        let change = rx.borrow_and_update().clone();
        let Seen::Run(snapshot) = change.seen() else {
            return;
        };
        let rendered = change.rendered(|seen| render(tool, seen));
        let next = own.pieces(snapshot, rendered);
        if !same_pieces(&next, &last) {
            let _ = to.out.send(Outgoing::Pieces(next.to_vec()));
            last = next;
        }
        if snapshot.state.is_terminal() {
            return;
        }
    }
}

/// What a stream's notifications hold of its own request and task.
struct Own {
    /// `{"jsonrpc":"2.0","method":"notifications/tasks","params":{` and the
    /// members `_meta` (the subscription id), `createdAt`, `taskId`, `ttlMs`.
    head: Bytes,
    /// `,"lastUpdatedAt":` the creation time: for a state without an update
    /// time, or one from before the task was made.
    created: Bytes,
    created_at: SystemTime,
    /// The request declared elicitation.
    elicitation: bool,
}

impl Own {
    fn new(to: Subscriber<'_>, task_id: &str, claims: &TaskClaims) -> Self {
        let created_at = claims.created_at();
        let created_text = timestamp(created_at);
        let mut head = Vec::with_capacity(192 + task_id.len());
        head.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"_meta":{""#);
        head.extend_from_slice(SUBSCRIPTION_ID.as_bytes());
        head.extend_from_slice(b"\":");
        json::value(&mut head, to.id);
        head.push(b'}');
        json::key(&mut head, "createdAt", false);
        json::string(&mut head, &created_text);
        json::key(&mut head, "taskId", false);
        json::string(&mut head, task_id);
        json::key(&mut head, "ttlMs", false);
        json::number(&mut head, claims.ttl_ms);
        let mut created = Vec::with_capacity(48);
        json::key(&mut created, "lastUpdatedAt", false);
        json::string(&mut created, &created_text);
        Self {
            head: Bytes::from(head),
            created: Bytes::from(created),
            created_at,
            elicitation: to.elicitation,
        }
    }

    /// The pieces of this stream's notification of `snapshot`, whose shared
    /// text is `rendered` (see [`render`]).
    fn pieces(&self, snapshot: &taskgate_engine::Snapshot, rendered: &[Bytes]) -> [Bytes; 3] {
        let [updated, plain, asking] = rendered else {
            unreachable!("a run's state renders in three pieces")
        };
        let updated = match snapshot.updated_at {
            Some(at) if at >= self.created_at => updated.clone(),
            _ => self.created.clone(),
        };
        let state = if self.elicitation { asking } else { plain };
        [self.head.clone(), updated, state.clone()]
    }
}

/// Whether two notifications hold the same text (pieces shared from one
/// change are compared by address first).
fn same_pieces(a: &[Bytes; 3], b: &[Bytes; 3]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| (x.as_ptr() == y.as_ptr() && x.len() == y.len()) || x == y)
}

/// The text a run's state gives every listen stream on it: the member
/// `lastUpdatedAt` (empty without an update time), then the rest of the
/// task's state, closing the notification, for a request without
/// elicitation and for one with it (the same bytes unless the task asks for
/// input). Nothing here depends on a stream's request or task handle.
fn render(tool: &Tool, seen: &Seen) -> Vec<Bytes> {
    let Seen::Run(snapshot) = seen else {
        return Vec::new();
    };
    let view = DetailedTask::of_run(tool, snapshot);
    let updated = snapshot.updated_at.map_or_else(Bytes::new, |at| {
        let mut text = Vec::with_capacity(48);
        json::key(&mut text, "lastUpdatedAt", false);
        json::string(&mut text, &timestamp(at));
        Bytes::from(text)
    });
    let asking = Bytes::from(state_members(&view, true));
    let plain = if view.input_requests.is_some() {
        Bytes::from(state_members(&view, false))
    } else {
        asking.clone()
    };
    vec![updated, plain, asking]
}

/// What a stream whose request did not declare elicitation sees as the status
/// message of a task that asks for input: it is never shown the question
/// (`tasks/get` would answer -32021 for the same reason).
const UNDECLARED_INPUT: &str = "the task waits for input of a type this stream's request did not declare (elicitation); a request that declares it reads the question with tasks/get";

/// The members of `view` that depend on the run's state, each `,"key":value`,
/// and the closing braces of `params` and of the notification.
fn state_members(view: &DetailedTask<'_>, elicitation: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    if let Some(error) = &view.error {
        json::key(&mut out, "error", false);
        json::value(&mut out, error);
    }
    let mut message = view.status_message;
    if let Some(requests) = &view.input_requests {
        if elicitation {
            json::key(&mut out, "inputRequests", false);
            json::value(&mut out, requests);
        } else {
            message = Some(UNDECLARED_INPUT);
        }
    }
    if let Some(poll) = view.poll_interval_ms {
        json::key(&mut out, "pollIntervalMs", false);
        json::number(&mut out, Some(poll));
    }
    if let Some(result) = &view.result {
        json::key(&mut out, "result", false);
        json::value(&mut out, result);
    }
    json::key(&mut out, "status", false);
    json::string(&mut out, view.status);
    if let Some(message) = message {
        json::key(&mut out, "statusMessage", false);
        json::string(&mut out, message);
    }
    out.extend_from_slice(b"}}");
    out
}

fn send(out: &Outbound, method: &str, params: Value) {
    let _ = out.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }).into());
}
