//! What every dialect that waits for a run shares: the result of a call that
//! waited, progress notifications while it waits, and the status words.

use std::time::Duration;

use serde_json::{json, Value};
use taskgate_engine::{RunState, Snapshot};

use super::wire::{call_tool_result, Outbound, Version};
use crate::core::Tool;
use crate::rpc::{self, RpcError};

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

/// Sends `notifications/progress` for a working run. MCP requires the progress
/// value to increase with every notification, so a snapshot that does not move
/// it past the last one sent (`last`) sends nothing — a run whose status file
/// drops its counter (a closing "finishing" message) cannot make it go back.
pub fn notify_progress(
    out: &Outbound,
    token: &Value,
    snapshot: &Snapshot,
    version: Version,
    last: &mut Option<f64>,
) {
    let RunState::Working { message, progress } = &snapshot.state else {
        return;
    };
    let done = progress.map_or(0.0, |p| p.done);
    if last.is_some_and(|sent| done <= sent) {
        return;
    }
    *last = Some(done);
    let mut params = json!({ "progressToken": token, "progress": done });
    if let Some(total) = progress.and_then(|p| p.total) {
        params["total"] = json!(total);
    }
    if version >= Version::V2025_03_26 {
        if let Some(m) = message {
            params["message"] = json!(m);
        }
    }
    let _ = out.send(rpc::notification("notifications/progress", params).into());
}

/// The status word of SEP-1391 operations and of the `handles` companion tools.
#[must_use]
pub fn status_word(state: &RunState) -> &'static str {
    match state {
        RunState::Working { .. } => "working",
        RunState::InputRequired { .. } => "input_required",
        RunState::Completed(_) => "completed",
        RunState::Failed { .. } => "failed",
        RunState::Cancelled { .. } => "canceled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_engine::Progress;

    fn working(done: Option<f64>, message: &str) -> Snapshot {
        Snapshot::new(RunState::Working {
            message: Some(message.to_owned()),
            progress: done.map(|d| Progress {
                done: d,
                total: Some(5.0),
            }),
        })
    }

    #[test]
    fn progress_only_ever_increases() {
        let (tx, mut rx) = crate::dialect::wire::outbound();
        let token = json!("p");
        let mut last = None;
        for (done, message) in [
            (Some(0.0), "step 0"),
            (Some(0.0), "still step 0"),
            (Some(2.0), "step 2"),
            (Some(1.0), "a counter that went back"),
            (None, "finishing"),
            (Some(3.0), "step 3"),
        ] {
            notify_progress(
                &tx,
                &token,
                &working(done, message),
                Version::V2025_06_18,
                &mut last,
            );
        }
        let mut sent = Vec::new();
        while let Some(m) = rx.try_recv() {
            let m = m.into_value();
            sent.push(m["params"]["progress"].as_f64().unwrap());
        }
        assert_eq!(sent, vec![0.0, 2.0, 3.0]);
    }
}
