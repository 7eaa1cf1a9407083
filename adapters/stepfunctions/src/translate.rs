//! Pure translation from Step Functions payloads to taskgate's canonical run state.
//!
//! The types here have the shape of the AWS JSON wire payloads (DescribeExecution,
//! GetExecutionHistory), so the table tests feed them the exact payloads captured
//! from the emulator (`tests/fixtures/`, made by `scripts/moto/capture-sfn-fixtures.py`);
//! `api.rs` fills them from the SDK's types.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Map, Value};
use taskgate_engine::{
    Content, EngineError, InputRequest, LogLine, LogPage, RunState, Snapshot, ToolOutput,
    TraceContext, MAX_CURSOR_BYTES,
};

use crate::config::HumanStep;

/// The X-Ray trace header of StartExecution's `traceHeader` for a W3C trace
/// context, as X-Ray maps the two: the trace id's first 8 hex digits become the
/// epoch part and the other 24 the unique part (`Root=1-xxxxxxxx-yyyy…`), the
/// span id is the `Parent`, and the sampled flag is `Sampled`. Step Functions
/// passes it on to the services its states call, so their segments join the
/// trace. The execution's input, and so the idempotence of a retried start,
/// does not depend on it.
#[must_use]
pub(crate) fn xray_trace_header(trace: &TraceContext) -> String {
    let trace_id = trace.trace_id();
    let parts: Vec<&str> = trace.traceparent().split('-').collect();
    let (span_id, flags) = (parts[2], parts[3]);
    let sampled = u8::from_str_radix(flags, 16).unwrap_or(0) & 1;
    format!(
        "Root=1-{}-{};Parent={span_id};Sampled={sampled}",
        &trace_id[..8],
        &trace_id[8..]
    )
}

/// The error sent with SendTaskFailure when the person declines or dismisses the
/// human step.
pub const DECLINED_ERROR: &str = "taskgate.Declined";

/// The part of a DescribeExecution answer taskgate reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Execution {
    /// RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED or PENDING_REDRIVE.
    pub status: String,
    /// The execution input (JSON text), when included.
    #[serde(default)]
    pub input: Option<String>,
    /// The execution output (JSON text), when it succeeded and the output is included.
    #[serde(default)]
    pub output: Option<String>,
    /// The error code of a failed execution.
    #[serde(default)]
    pub error: Option<String>,
    /// The cause of a failed execution.
    #[serde(default)]
    pub cause: Option<String>,
    /// When it started (seconds since the epoch).
    #[serde(default)]
    pub start_date: Option<f64>,
    /// When it ended (seconds since the epoch).
    #[serde(default)]
    pub stop_date: Option<f64>,
}

/// One page of GetExecutionHistory.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryPage {
    /// The events of the page (newest first when asked with `reverseOrder`).
    #[serde(default)]
    pub events: Vec<HistoryEvent>,
    /// Set when more events exist beyond this page.
    #[serde(default)]
    pub next_token: Option<String>,
}

/// One history event (only the fields taskgate reads).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryEvent {
    /// The event id (ascending over the execution's life).
    pub id: i64,
    /// The event this one follows from (0 when none).
    #[serde(default)]
    pub previous_event_id: i64,
    /// When it happened (seconds since the epoch).
    #[serde(default)]
    pub timestamp: Option<f64>,
    /// The event type, such as `TaskStateEntered` or `TaskScheduled`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Details of a `…StateEntered` event.
    #[serde(default)]
    pub state_entered_event_details: Option<StateDetails>,
    /// Details of a `…StateExited` event.
    #[serde(default)]
    pub state_exited_event_details: Option<StateDetails>,
    /// Details of a `TaskScheduled` event.
    #[serde(default)]
    pub task_scheduled_event_details: Option<TaskScheduled>,
}

/// The state named by a state entered/exited event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StateDetails {
    /// The state's name.
    pub name: String,
}

/// Details of a `TaskScheduled` event. Its parameters hold the task token of a
/// `.waitForTaskToken` task, so they are never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct TaskScheduled {
    /// The resolved `Parameters` of the task (JSON text).
    #[serde(default)]
    pub parameters: String,
    /// The integration's resource, such as `sendMessage.waitForTaskToken`.
    #[serde(default)]
    pub resource: String,
}

impl std::fmt::Debug for TaskScheduled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskScheduled")
            .field("parameters", &"<redacted: may hold a task token>")
            .field("resource", &self.resource)
            .finish()
    }
}

/// A task token: a bearer secret for the waiting task. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct TaskToken(pub String);

impl std::fmt::Debug for TaskToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskToken(<redacted>)")
    }
}

/// A `.waitForTaskToken` task of the human step that is waiting now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingHumanTask {
    /// The input request key: `STATE#SCHEDULED_EVENT_ID` (unique for the run's
    /// life, even when a loop enters the state again).
    pub key: String,
    /// The id of the `TaskScheduled` event.
    pub scheduled_id: i64,
    /// The task's resolved parameters (may hold the token).
    pub scheduled: TaskScheduled,
}

/// The input request key of a human step waiting in `state`, scheduled by event
/// `scheduled_id`.
#[must_use]
pub(crate) fn request_key(state: &str, scheduled_id: i64) -> String {
    format!("{state}#{scheduled_id}")
}

/// Splits an input request key made by [`request_key`].
#[must_use]
pub(crate) fn parse_request_key(key: &str) -> Option<(&str, i64)> {
    let (state, id) = key.rsplit_once('#')?;
    Some((state, id.parse().ok()?))
}

/// The events of a page in ascending id order, when the page holds the newest
/// events of the execution (a full history, or a newest-first page). `None` when
/// the page is the oldest part of a longer history, which says nothing about now.
fn newest_events(page: &HistoryPage) -> Option<Vec<&HistoryEvent>> {
    let mut events: Vec<&HistoryEvent> = page.events.iter().collect();
    let newest_first = match (events.first(), events.last()) {
        (Some(a), Some(b)) => a.id > b.id,
        _ => false,
    };
    if page.next_token.is_some() && !newest_first {
        return None;
    }
    events.sort_by_key(|e| e.id);
    Some(events)
}

fn entered_name(e: &HistoryEvent) -> Option<&str> {
    e.kind
        .ends_with("StateEntered")
        .then_some(e.state_entered_event_details.as_ref()?.name.as_str())
}

fn exited_name(e: &HistoryEvent) -> Option<&str> {
    e.kind
        .ends_with("StateExited")
        .then_some(e.state_exited_event_details.as_ref()?.name.as_str())
}

/// For each state entered and not yet exited in the page: its name and the id of
/// its entered event, oldest first.
fn open_states<'a>(events: &[&'a HistoryEvent]) -> Vec<(&'a str, i64)> {
    let mut open: Vec<(&str, i64)> = Vec::new();
    for e in events {
        if let Some(name) = entered_name(e) {
            open.retain(|(n, _)| *n != name);
            open.push((name, e.id));
        } else if let Some(name) = exited_name(e) {
            open.retain(|(n, _)| *n != name);
        }
    }
    open
}

/// The state the execution is in now (the most recently entered state not yet
/// exited), when the page shows it.
#[must_use]
pub(crate) fn current_state(page: &HistoryPage) -> Option<String> {
    let events = newest_events(page)?;
    open_states(&events).last().map(|(n, _)| (*n).to_owned())
}

/// The human step's task when it waits for its token now: the state `state` was
/// entered and not exited, its task was scheduled, and no event ended that task.
#[must_use]
pub(crate) fn pending_human_task(page: &HistoryPage, state: &str) -> Option<PendingHumanTask> {
    let events = newest_events(page)?;
    let (_, entered_id) = open_states(&events)
        .into_iter()
        .rev()
        .find(|(n, _)| *n == state)?;
    let parents: HashMap<i64, i64> = events.iter().map(|e| (e.id, e.previous_event_id)).collect();
    // Whether `e` descends from event `ancestor` (following previousEventId within
    // the page; a chain leaving the page counts as descending when it leaves above
    // the ancestor).
    let descends = |e: &HistoryEvent, ancestor: i64| {
        let mut id = e.previous_event_id;
        for _ in 0..events.len() + 1 {
            if id == ancestor {
                return true;
            }
            if id < ancestor {
                return false;
            }
            match parents.get(&id) {
                Some(&parent) => id = parent,
                None => return true,
            }
        }
        false
    };
    let scheduled = events
        .iter()
        .filter(|e| e.kind == "TaskScheduled" && e.id > entered_id && descends(e, entered_id))
        .max_by_key(|e| e.id)?;
    let ended = events.iter().any(|e| {
        e.id > scheduled.id
            && matches!(
                e.kind.as_str(),
                "TaskSucceeded"
                    | "TaskFailed"
                    | "TaskTimedOut"
                    | "TaskStartFailed"
                    | "TaskSubmitFailed"
            )
            && descends(e, scheduled.id)
    });
    if ended {
        return None;
    }
    Some(PendingHumanTask {
        key: request_key(state, scheduled.id),
        scheduled_id: scheduled.id,
        scheduled: scheduled
            .task_scheduled_event_details
            .clone()
            .unwrap_or_default(),
    })
}

/// Finds the task token in a `TaskScheduled` event's resolved parameters: at
/// `pointer` when given, else in the first field named like a token.
#[must_use]
pub(crate) fn find_token(parameters: &str, pointer: Option<&str>) -> Option<TaskToken> {
    let value: Value = serde_json::from_str(parameters).ok()?;
    match pointer {
        Some(pointer) => at_pointer(&value, pointer).map(TaskToken),
        None => search_token(&value, 0).map(TaskToken),
    }
}

/// Parses JSON held in a string (`MessageBody` is often a JSON string).
fn as_json(value: &Value) -> Option<Value> {
    match value {
        Value::String(s) if s.trim_start().starts_with(['{', '[']) => serde_json::from_str(s).ok(),
        _ => None,
    }
}

fn at_pointer(value: &Value, pointer: &str) -> Option<String> {
    let mut current = value.clone();
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        if let Some(parsed) = as_json(&current) {
            current = parsed;
        }
        current = match &current {
            Value::Object(map) => map.get(&token)?.clone(),
            Value::Array(items) => items.get(token.parse::<usize>().ok()?)?.clone(),
            _ => return None,
        };
    }
    token_value(&current)
}

/// A token field's value: a string, or an SQS message attribute `{StringValue}`.
fn token_value(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Object(map) => map
            .get("StringValue")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

fn is_token_field(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "tasktoken" | "token" | "task_token"
    )
}

fn search_token(value: &Value, depth: usize) -> Option<String> {
    if depth > 16 {
        return None;
    }
    if let Some(parsed) = as_json(value) {
        return search_token(&parsed, depth + 1);
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if is_token_field(k) {
                    if let Some(token) = token_value(v) {
                        return Some(token);
                    }
                }
            }
            map.values().find_map(|v| search_token(v, depth + 1))
        }
        Value::Array(items) => items.iter().find_map(|v| search_token(v, depth + 1)),
        _ => None,
    }
}

/// Seconds since the epoch as a time.
#[must_use]
pub(crate) fn epoch_seconds(seconds: f64) -> Option<SystemTime> {
    (seconds.is_finite() && seconds >= 0.0).then(|| UNIX_EPOCH + Duration::from_secs_f64(seconds))
}

/// True when two execution inputs (JSON text) are the same JSON value (Step
/// Functions may reformat the text).
#[must_use]
pub(crate) fn same_input(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Builds the execution input from the tool arguments: as they are, or wrapped
/// under `input_key`.
#[must_use]
pub(crate) fn execution_input(arguments: &Value, input_key: Option<&str>) -> String {
    match input_key {
        Some(key) => {
            let mut map = Map::new();
            map.insert(key.to_owned(), arguments.clone());
            Value::Object(map).to_string()
        }
        None => arguments.to_string(),
    }
}

/// Translates one DescribeExecution (plus, for a running execution, the newest
/// history page when it was read) into a snapshot.
#[must_use]
pub(crate) fn snapshot(
    execution: &Execution,
    history: Option<&HistoryPage>,
    human: Option<&HumanStep>,
) -> Snapshot {
    let state = run_state(execution, history, human);
    let latest_event = history.and_then(|h| {
        h.events
            .iter()
            .max_by_key(|e| e.id)
            .and_then(|e| e.timestamp)
    });
    let created_at = execution.start_date.and_then(epoch_seconds);
    let ended_at = execution.stop_date.and_then(epoch_seconds);
    let updated_at = ended_at
        .or_else(|| latest_event.and_then(epoch_seconds))
        .or(created_at);
    Snapshot {
        state,
        created_at,
        updated_at,
        ended_at,
        poll_hint: None,
        revision: None,
    }
}

/// Translates the execution's status into a run state.
#[must_use]
pub(crate) fn run_state(
    execution: &Execution,
    history: Option<&HistoryPage>,
    human: Option<&HumanStep>,
) -> RunState {
    match execution.status.as_str() {
        "RUNNING" => {
            if let (Some(step), Some(page)) = (human, history) {
                if let Some(task) = pending_human_task(page, &step.state) {
                    let mut requests = BTreeMap::new();
                    requests.insert(
                        task.key,
                        InputRequest {
                            message: step.message.clone(),
                            requested_schema: step.schema.clone(),
                            // A task token waiting for a person is the
                            // state machine's approval gate.
                            approval: true,
                        },
                    );
                    return RunState::InputRequired {
                        requests,
                        message: Some(format!("waiting for an answer in state {}", step.state)),
                    };
                }
            }
            let message = match history.and_then(current_state) {
                Some(state) => format!("running: in state {state}"),
                None => "running".to_owned(),
            };
            RunState::working(message)
        }
        "PENDING_REDRIVE" => RunState::working("failed; a redrive is pending"),
        "SUCCEEDED" => RunState::Completed(success_output(execution.output.as_deref())),
        "FAILED" => RunState::Completed(failure_output(
            "failed",
            execution.error.as_deref(),
            execution.cause.as_deref(),
        )),
        "TIMED_OUT" => RunState::Completed(failure_output(
            "timed out",
            Some(execution.error.as_deref().unwrap_or("States.Timeout")),
            execution.cause.as_deref(),
        )),
        "ABORTED" => RunState::Cancelled {
            message: Some(match execution.cause.as_deref() {
                Some(cause) if !cause.is_empty() => {
                    format!("the execution was stopped: {cause}")
                }
                _ => "the execution was stopped".to_owned(),
            }),
        },
        other => RunState::Failed {
            message: format!(
                "Step Functions reported an execution status taskgate does not know: {other:?}"
            ),
        },
    }
}

fn success_output(output: Option<&str>) -> ToolOutput {
    match output {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(value) => ToolOutput::from_json(value, false),
            Err(_) => ToolOutput::text(text),
        },
        None => ToolOutput::text(
            "The execution succeeded; Step Functions did not include its output in the answer (it is too large).",
        ),
    }
}

fn failure_output(what: &str, error: Option<&str>, cause: Option<&str>) -> ToolOutput {
    let mut text = format!("The Step Functions execution {what}");
    let mut structured = Map::new();
    if let Some(error) = error.filter(|e| !e.is_empty()) {
        text.push_str(&format!(" with error {error}"));
        structured.insert("error".into(), Value::String(error.to_owned()));
    }
    if let Some(cause) = cause.filter(|c| !c.is_empty()) {
        text.push_str(&format!(": {cause}"));
        structured.insert("cause".into(), Value::String(cause.to_owned()));
    }
    text.push('.');
    ToolOutput {
        content: vec![Content::Text(text)],
        structured: Some(Value::Object(structured)),
        is_error: true,
    }
}

/// One history event as a log line shows it: its id, time, type, and the few
/// details that say what happened. Never its input, output or parameters
/// (they carry the tool's arguments and task tokens).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LogEvent {
    /// The event id (ascending over the execution's life).
    pub id: i64,
    /// When it happened (seconds since the epoch).
    pub timestamp: f64,
    /// The event type, such as `TaskStateEntered`.
    pub kind: String,
    /// The state entered or exited.
    pub state: Option<String>,
    /// The resource of a scheduled task, such as `sendMessage.waitForTaskToken`.
    pub resource: Option<String>,
    /// The error of a failed, aborted or timed-out event.
    pub error: Option<String>,
    /// Its cause.
    pub cause: Option<String>,
}

/// Event types that end an execution: nothing follows them.
pub(crate) fn ends_execution(kind: &str) -> bool {
    matches!(
        kind,
        "ExecutionSucceeded" | "ExecutionFailed" | "ExecutionAborted" | "ExecutionTimedOut"
    )
}

/// The line of one event: source = its type; text = its time (RFC 3339, UTC)
/// and what happened.
pub(crate) fn log_line(event: &LogEvent) -> LogLine {
    let at = UNIX_EPOCH + Duration::from_secs_f64(event.timestamp.max(0.0));
    let mut text = humantime::format_rfc3339_millis(at).to_string();
    let mut say = |part: String| {
        text.push(' ');
        text.push_str(&part);
    };
    if let Some(state) = &event.state {
        say(format!("state {state}"));
    }
    if let Some(resource) = &event.resource {
        say(format!("resource {resource}"));
    }
    match (&event.error, &event.cause) {
        (Some(e), Some(c)) if !c.is_empty() => say(format!("error {e}: {c}")),
        (Some(e), _) => say(format!("error {e}")),
        (None, Some(c)) if !c.is_empty() => say(format!("cause {c}")),
        _ => {}
    }
    LogLine::new(event.kind.clone(), &text)
}

/// The id of the last event a client has read, from the engine cursor (the
/// decimal event id); `0` without a cursor.
///
/// # Errors
///
/// [`EngineError::InvalidInput`] for anything else.
pub(crate) fn parse_log_cursor(cursor: Option<&str>) -> Result<i64, EngineError> {
    let Some(cursor) = cursor else { return Ok(0) };
    cursor
        .parse::<i64>()
        .ok()
        .filter(|id| *id >= 0 && cursor.len() <= MAX_CURSOR_BYTES)
        .ok_or_else(|| EngineError::InvalidInput {
            message: "the log cursor is not one this engine made".to_owned(),
        })
}

/// A page from the events read past the cursor (`after`), oldest first: at
/// most `limit` lines, the cursor at the last one returned. Complete when the
/// history was read to its end, it ends the execution, and every event fits.
pub(crate) fn log_page(
    events: &[LogEvent],
    after: i64,
    limit: usize,
    history_end: bool,
) -> LogPage {
    let fresh: Vec<&LogEvent> = events.iter().filter(|e| e.id > after).collect();
    let shown = &fresh[..fresh.len().min(limit)];
    let last = shown.last().map_or(after, |e| e.id);
    let ended = history_end && events.last().is_some_and(|e| ends_execution(&e.kind));
    LogPage {
        lines: shown.iter().map(|e| log_line(e)).collect(),
        cursor: last.to_string(),
        complete: ended && shown.len() == fresh.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_w3c_context_becomes_an_xray_trace_header() {
        let t = TraceContext::new(
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01",
            Some("vendor=abc"),
        )
        .unwrap();
        assert_eq!(
            xray_trace_header(&t),
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
        );
        let unsampled = TraceContext::new(
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00",
            None,
        )
        .unwrap();
        assert!(xray_trace_header(&unsampled).ends_with(";Sampled=0"));
    }

    fn ev(id: i64, kind: &str) -> LogEvent {
        LogEvent {
            id,
            timestamp: 1_764_800_000.25 + id as f64,
            kind: kind.to_owned(),
            ..LogEvent::default()
        }
    }

    #[test]
    fn history_events_become_lines_without_payloads() {
        let mut entered = ev(2, "PassStateEntered");
        entered.state = Some("Prepare".into());
        let mut scheduled = ev(3, "TaskScheduled");
        scheduled.resource = Some("sendMessage.waitForTaskToken".into());
        let mut failed = ev(4, "ExecutionFailed");
        failed.error = Some("Boom".into());
        failed.cause = Some("it broke".into());
        let mut bare_error = ev(5, "TaskTimedOut");
        bare_error.error = Some("States.Timeout".into());
        let cases = [
            (
                ev(1, "ExecutionStarted"),
                "ExecutionStarted",
                "2025-12-03T22:13:21.250Z",
            ),
            (
                entered,
                "PassStateEntered",
                "2025-12-03T22:13:22.250Z state Prepare",
            ),
            (
                scheduled,
                "TaskScheduled",
                "2025-12-03T22:13:23.250Z resource sendMessage.waitForTaskToken",
            ),
            (
                failed,
                "ExecutionFailed",
                "2025-12-03T22:13:24.250Z error Boom: it broke",
            ),
            (
                bare_error,
                "TaskTimedOut",
                "2025-12-03T22:13:25.250Z error States.Timeout",
            ),
        ];
        for (event, source, text) in cases {
            let line = log_line(&event);
            assert_eq!((line.source.as_str(), line.text.as_str()), (source, text));
        }
    }

    #[test]
    fn log_pages_follow_the_event_ids() {
        let running = [ev(1, "ExecutionStarted"), ev(2, "WaitStateEntered")];
        let ended = [
            ev(1, "ExecutionStarted"),
            ev(2, "WaitStateEntered"),
            ev(3, "WaitStateExited"),
            ev(4, "ExecutionSucceeded"),
        ];
        // (events, after, limit, history read to its end) → (sources, cursor, complete)
        type Case<'a> = (
            &'a [LogEvent],
            i64,
            usize,
            bool,
            &'a [&'a str],
            &'a str,
            bool,
        );
        let cases: [Case; 6] = [
            (
                &running,
                0,
                10,
                true,
                &["ExecutionStarted", "WaitStateEntered"],
                "2",
                false,
            ),
            (&running, 2, 10, true, &[], "2", false),
            (
                &ended,
                2,
                10,
                true,
                &["WaitStateExited", "ExecutionSucceeded"],
                "4",
                true,
            ),
            (
                &ended,
                0,
                2,
                true,
                &["ExecutionStarted", "WaitStateEntered"],
                "2",
                false,
            ),
            (&ended, 4, 10, true, &[], "4", true),
            (
                &ended,
                0,
                10,
                false,
                &[
                    "ExecutionStarted",
                    "WaitStateEntered",
                    "WaitStateExited",
                    "ExecutionSucceeded",
                ],
                "4",
                false,
            ),
        ];
        for (events, after, limit, end, sources, cursor, complete) in cases {
            let page = log_page(events, after, limit, end);
            let got: Vec<&str> = page.lines.iter().map(|l| l.source.as_str()).collect();
            assert_eq!(got, sources, "after {after} limit {limit}");
            assert_eq!(page.cursor, cursor, "after {after} limit {limit}");
            assert_eq!(page.complete, complete, "after {after} limit {limit}");
        }
    }

    #[test]
    fn log_cursors_are_event_ids() {
        assert_eq!(parse_log_cursor(None).unwrap(), 0);
        assert_eq!(parse_log_cursor(Some("17")).unwrap(), 17);
        for bad in ["", "-1", "x", "1.5", "9999999999999999999999"] {
            assert!(
                matches!(
                    parse_log_cursor(Some(bad)),
                    Err(EngineError::InvalidInput { .. })
                ),
                "{bad:?}"
            );
        }
    }
    use serde_json::json;

    fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn human() -> HumanStep {
        HumanStep {
            state: "Approve".into(),
            message: "Approve the dataset?".into(),
            schema: json!({"type": "object", "properties": {"approved": {"type": "boolean"}}}),
            token_pointer: None,
        }
    }

    fn text_of(output: &ToolOutput) -> &str {
        match &output.content[0] {
            Content::Text(t) => t,
            Content::Link { .. } => panic!("link"),
        }
    }

    #[test]
    fn statuses_translate_as_the_table_says() {
        // (describe fixture, history fixture, human step?, expected)
        type Check = fn(&RunState);
        let table: Vec<(&str, Option<&str>, bool, Check)> = vec![
            (
                "describe_running.json",
                Some("history_in_wait.json"),
                false,
                |s| {
                    assert_eq!(s, &RunState::working("running: in state Pause"));
                },
            ),
            ("describe_running.json", None, false, |s| {
                assert_eq!(s, &RunState::working("running"));
            }),
            (
                "describe_succeeded.json",
                Some("history_succeeded.json"),
                false,
                |s| {
                    let RunState::Completed(out) = s else {
                        panic!("{s:?}")
                    };
                    assert!(!out.is_error);
                    assert_eq!(
                        out.structured,
                        Some(json!({"dataset": "d1", "prep": {"prepared": true}}))
                    );
                    let text: Value = serde_json::from_str(text_of(out)).unwrap();
                    assert_eq!(Some(text), out.structured);
                },
            ),
            ("describe_succeeded_scalar.json", None, false, |s| {
                // moto hands back a Pass state's string result without JSON quoting.
                assert_eq!(s, &RunState::Completed(ToolOutput::text("just text")));
            }),
            (
                "describe_failed.json",
                Some("history_failed.json"),
                false,
                |s| {
                    let RunState::Completed(out) = s else {
                        panic!("{s:?}")
                    };
                    assert!(out.is_error);
                    assert_eq!(
                        out.structured,
                        Some(json!({"error": "Dataset.Missing", "cause": "no dataset named d1"}))
                    );
                    assert_eq!(
                    text_of(out),
                    "The Step Functions execution failed with error Dataset.Missing: no dataset named d1."
                );
                },
            ),
            ("describe_timed_out_moto.json", None, false, |s| {
                let RunState::Completed(out) = s else {
                    panic!("{s:?}")
                };
                assert!(out.is_error);
                assert_eq!(out.structured, Some(json!({"error": "States.Timeout"})));
            }),
            (
                "describe_aborted.json",
                Some("history_aborted.json"),
                false,
                |s| {
                    assert!(matches!(s, RunState::Cancelled { .. }), "{s:?}");
                },
            ),
            (
                "describe_human_waiting.json",
                Some("history_human_waiting.json"),
                true,
                |s| {
                    let RunState::InputRequired { requests, .. } = s else {
                        panic!("{s:?}")
                    };
                    let (key, request) = requests.iter().next().unwrap();
                    assert_eq!(key, "Approve#5");
                    assert_eq!(request.message, "Approve the dataset?");
                    assert!(request.approval, "a human step is an approval gate");
                    assert_eq!(request.requested_schema["type"], "object");
                },
            ),
            (
                "describe_human_waiting.json",
                Some("history_human_waiting.json"),
                false,
                |s| {
                    // Without a declared human step it is just a running task.
                    assert_eq!(s, &RunState::working("running: in state Approve"));
                },
            ),
            (
                "describe_human_accepted.json",
                Some("history_human_accepted.json"),
                true,
                |s| {
                    let RunState::Completed(out) = s else {
                        panic!("{s:?}")
                    };
                    assert!(!out.is_error);
                    assert_eq!(
                        out.structured.as_ref().unwrap()["approval"],
                        json!({"approved": true, "note": "ok"})
                    );
                },
            ),
            (
                "describe_human_declined.json",
                Some("history_human_declined.json"),
                true,
                |s| {
                    let RunState::Completed(out) = s else {
                        panic!("{s:?}")
                    };
                    assert!(out.is_error);
                    assert_eq!(out.structured.as_ref().unwrap()["error"], DECLINED_ERROR);
                },
            ),
        ];
        let step = human();
        for (describe, history, with_human, check) in table {
            let execution: Execution = fixture(describe);
            let page: Option<HistoryPage> = history.map(fixture);
            let state = run_state(&execution, page.as_ref(), with_human.then_some(&step));
            eprintln!("{describe} + {history:?} -> {state:?}");
            check(&state);
        }
    }

    #[test]
    fn synthetic_statuses_from_the_api_reference() {
        let e = |status: &str| Execution {
            status: status.into(),
            ..Execution::default()
        };
        assert_eq!(
            run_state(&e("PENDING_REDRIVE"), None, None),
            RunState::working("failed; a redrive is pending")
        );
        assert!(matches!(
            run_state(&e("EXPLODED"), None, None),
            RunState::Failed { .. }
        ));
        let RunState::Completed(out) = run_state(&e("SUCCEEDED"), None, None) else {
            panic!()
        };
        assert!(!out.is_error && out.structured.is_none());
        let timed_out = Execution {
            status: "TIMED_OUT".into(),
            error: Some("States.Timeout".into()),
            cause: Some("The execution timed out after 300 seconds".into()),
            ..Execution::default()
        };
        let RunState::Completed(out) = run_state(&timed_out, None, None) else {
            panic!()
        };
        assert!(out.is_error);
        assert_eq!(
            out.structured.unwrap()["cause"],
            "The execution timed out after 300 seconds"
        );
    }

    #[test]
    fn snapshots_carry_times() {
        let execution: Execution = fixture("describe_succeeded.json");
        let snap = snapshot(&execution, None, None);
        assert!(snap.created_at.is_some());
        assert!(snap.ended_at.is_some());
        assert!(snap.created_at <= snap.ended_at);
        assert_eq!(snap.updated_at, snap.ended_at);
        let running: Execution = fixture("describe_running.json");
        let page: HistoryPage = fixture("history_in_wait.json");
        let snap = snapshot(&running, Some(&page), None);
        assert!(snap.ended_at.is_none());
        assert!(snap.updated_at >= snap.created_at);
    }

    #[test]
    fn the_token_is_found_and_never_debug_printed() {
        let page: HistoryPage = fixture("history_human_waiting.json");
        let task = pending_human_task(&page, "Approve").unwrap();
        assert_eq!(task.scheduled_id, 5);
        let token = find_token(&task.scheduled.parameters, None).unwrap();
        let by_pointer =
            find_token(&task.scheduled.parameters, Some("/MessageBody/taskToken")).unwrap();
        assert_eq!(token, by_pointer);
        assert!(!token.0.is_empty());
        assert!(!format!("{task:?}").contains(&token.0));
        assert!(!format!("{token:?}").contains(&token.0));
        assert!(!format!("{page:?}").contains(&token.0));
    }

    #[test]
    fn tokens_are_found_where_integrations_put_them() {
        let cases = [
            (
                json!({"MessageBody": {"taskToken": "t1"}}),
                None,
                Some("t1"),
            ),
            (
                json!({"MessageBody": "{\"TaskToken\":\"t2\",\"x\":1}"}),
                None,
                Some("t2"),
            ),
            (
                json!({"MessageBody": "hi", "MessageAttributes": {"TaskToken": {"DataType": "String", "StringValue": "t3"}}}),
                None,
                Some("t3"),
            ),
            (
                json!({"Payload": {"deep": [{"token": "t4"}]}}),
                None,
                Some("t4"),
            ),
            (
                json!({"MessageBody": "{\"approval\":{\"tok\":\"t5\"}}"}),
                Some("/MessageBody/approval/tok"),
                Some("t5"),
            ),
            (json!({"MessageBody": {"x": 1}}), None, None),
            (
                json!({"MessageBody": {"taskToken": "t6"}}),
                Some("/MessageBody/other"),
                None,
            ),
        ];
        for (params, pointer, want) in cases {
            let got = find_token(&params.to_string(), pointer);
            assert_eq!(
                got.map(|t| t.0),
                want.map(str::to_owned),
                "{params} {pointer:?}"
            );
        }
    }

    #[test]
    fn a_finished_or_foreign_task_is_not_pending() {
        let accepted: HistoryPage = fixture("history_human_accepted.json");
        assert!(pending_human_task(&accepted, "Approve").is_none());
        let declined: HistoryPage = fixture("history_human_declined.json");
        assert!(pending_human_task(&declined, "Approve").is_none());
        let waiting: HistoryPage = fixture("history_human_waiting.json");
        assert!(pending_human_task(&waiting, "Other").is_none());
        // A newest-first page (as AWS answers reverseOrder) reads the same.
        let mut reversed = waiting.clone();
        reversed.events.reverse();
        reversed.next_token = Some("more".into());
        assert_eq!(
            pending_human_task(&reversed, "Approve").unwrap().key,
            "Approve#5"
        );
        // The oldest page of a long history says nothing about now.
        let mut oldest = waiting;
        oldest.next_token = Some("more".into());
        assert!(pending_human_task(&oldest, "Approve").is_none());
        assert!(current_state(&oldest).is_none());
    }

    #[test]
    fn a_loop_that_enters_the_state_again_gets_a_new_key() {
        let ev = |id: i64, prev: i64, kind: &str, name: Option<&str>| HistoryEvent {
            id,
            previous_event_id: prev,
            kind: kind.into(),
            state_entered_event_details: name
                .filter(|_| kind.ends_with("Entered"))
                .map(|n| StateDetails { name: n.into() }),
            state_exited_event_details: name
                .filter(|_| kind.ends_with("Exited"))
                .map(|n| StateDetails { name: n.into() }),
            task_scheduled_event_details: (kind == "TaskScheduled").then(|| TaskScheduled {
                parameters: json!({"token": format!("tok{id}")}).to_string(),
                resource: "sendMessage.waitForTaskToken".into(),
            }),
            ..HistoryEvent::default()
        };
        let page = HistoryPage {
            events: vec![
                ev(2, 0, "TaskStateEntered", Some("Approve")),
                ev(3, 2, "TaskScheduled", None),
                ev(4, 3, "TaskSucceeded", None),
                ev(5, 4, "TaskStateExited", Some("Approve")),
                ev(6, 5, "TaskStateEntered", Some("Approve")),
                ev(7, 6, "TaskScheduled", None),
                ev(8, 7, "TaskStarted", None),
            ],
            next_token: None,
        };
        let task = pending_human_task(&page, "Approve").unwrap();
        assert_eq!(task.key, "Approve#7");
        assert_eq!(
            find_token(&task.scheduled.parameters, None).unwrap().0,
            "tok7"
        );
        assert_eq!(parse_request_key(&task.key), Some(("Approve", 7)));
        assert_eq!(parse_request_key("Approve"), None);
    }

    #[test]
    fn inputs_are_built_and_compared_as_json() {
        let args = json!({"dataset": "d1"});
        assert_eq!(execution_input(&args, None), r#"{"dataset":"d1"}"#);
        assert_eq!(
            execution_input(&args, Some("args")),
            r#"{"args":{"dataset":"d1"}}"#
        );
        let running: Execution = fixture("describe_running.json");
        assert!(same_input(
            running.input.as_deref().unwrap(),
            r#"{"dataset":"d1"}"#
        ));
        assert!(!same_input(
            running.input.as_deref().unwrap(),
            r#"{"dataset":"d2"}"#
        ));
    }
}
