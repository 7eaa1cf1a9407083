//! The text of a listen stream's `notifications/tasks`: a task's
//! `DetailedTask`, as `tasks/get` builds it, written in pieces so that what
//! depends on the run alone is written once per change and shared by every
//! stream on the run (`listen` writes a stream's first notification,
//! `following` the rest).

use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use serde_json::Value;

use super::super::wire::{json, timestamp};
use super::DetailedTask;
use crate::core::handle::TaskClaims;
use crate::core::watch::Seen;

/// The `_meta` key every message of a listen stream carries.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What a stream's notifications hold of its own request and task.
///
/// A notification is written in three pieces: the stream's own head (its
/// subscription id, the task's id, creation time and TTL: made once, when
/// the stream opens), the run's last update time, and the run's state. The
/// last two are written once per change of the run, by the first of its
/// streams to see the change, and shared by the others (see
/// [`crate::core::watch::Change::rendered`]).
pub(super) struct Own {
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
    /// The head of the notifications of `task_id` on the stream of request
    /// `id`, which declared elicitation or not.
    pub(super) fn new(id: &Value, elicitation: bool, task_id: &str, claims: &TaskClaims) -> Self {
        let created_at = claims.created_at();
        let created_text = timestamp(created_at);
        let mut head = Vec::with_capacity(192 + task_id.len());
        head.extend_from_slice(
            br#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"_meta":{""#,
        );
        head.extend_from_slice(SUBSCRIPTION_ID.as_bytes());
        head.extend_from_slice(b"\":");
        json::value(&mut head, id);
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
        // Held by the stream for its life: no spare capacity.
        head.shrink_to_fit();
        created.shrink_to_fit();
        Self {
            head: Bytes::from(head),
            created: Bytes::from(created),
            created_at,
            elicitation,
        }
    }

    /// The pieces of this stream's notification of `snapshot`, whose shared
    /// text is `rendered` (see [`render`]).
    pub(super) fn pieces(
        &self,
        snapshot: &taskgate_engine::Snapshot,
        rendered: &[Bytes],
    ) -> [Bytes; 3] {
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
pub(super) fn same_pieces(a: &[Bytes; 3], b: &[Bytes; 3]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| (x.as_ptr() == y.as_ptr() && x.len() == y.len()) || x == y)
}

/// The text a run's state gives every listen stream on it: the member
/// `lastUpdatedAt` (empty without an update time), then the rest of the
/// task's state, closing the notification, for a request without
/// elicitation and for one with it (the same bytes unless the task asks for
/// input). Nothing here depends on a stream's request or task handle; the
/// tool's `poll_interval` is the only setting it reads.
pub(super) fn render(poll_interval: Duration, seen: &Seen) -> Vec<Bytes> {
    let Seen::Run(snapshot) = seen else {
        return Vec::new();
    };
    let view = DetailedTask::of_run(poll_interval, snapshot);
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
pub(super) const UNDECLARED_INPUT: &str = "the task waits for input of a type this stream's request did not declare (elicitation); a request that declares it reads the question with tasks/get";

/// The members of `view` that depend on the run's state, each `,"key":value`,
/// and the closing braces of `params` and of the notification.
pub(super) fn state_members(view: &DetailedTask<'_>, elicitation: bool) -> Vec<u8> {
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
