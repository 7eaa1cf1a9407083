//! Pure translation: Temporal's payloads, descriptions, close events and history
//! events → taskgate's [`Snapshot`]s, tool outputs, questions and log lines. No
//! I/O; table-tested on payloads captured from a real Temporal server
//! (`tests/fixtures/`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use taskgate_engine::{
    InputRequest, LogLine, Progress, RunState, Snapshot, ToolOutput, TraceContext,
};
use temporalio_common::protos::temporal::api::common::v1::{Header, Payload, Payloads};
use temporalio_common::protos::temporal::api::enums::v1::{EventType, WorkflowExecutionStatus};
use temporalio_common::protos::temporal::api::failure::v1::{failure::FailureInfo, Failure};
use temporalio_common::protos::temporal::api::history::v1::{
    history_event::Attributes, HistoryEvent,
};
use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeWorkflowExecutionResponse;

/// The most bytes of a query's answer taskgate reads (a question or progress);
/// a larger answer is refused.
pub(crate) const MAX_QUERY_BYTES: usize = 64 * 1024;
/// The longest question message shown.
const MAX_MESSAGE_CHARS: usize = 4000;
/// The most properties a question's schema may have.
const MAX_PROPERTIES: usize = 50;

/// A payload holding `value` as JSON (`json/plain`), as every Temporal SDK
/// decodes by default.
pub(crate) fn json_payload(value: &Value) -> Payload {
    let mut metadata = HashMap::new();
    metadata.insert("encoding".to_owned(), b"json/plain".to_vec());
    Payload {
        metadata,
        data: serde_json::to_vec(value).unwrap_or_default(),
        ..Payload::default()
    }
}

/// The header key under which the Temporal SDKs' OpenTelemetry interceptors
/// (Go, Java, Python, TypeScript) carry the trace context.
pub(crate) const TRACE_HEADER_KEY: &str = "_tracer-data";

/// The workflow start's header for a trace context: under `_tracer-data`, a
/// `json/plain` payload of the propagator carrier `{"traceparent": ...,
/// "tracestate": ...}`, as the SDKs' OpenTelemetry interceptors write it and
/// read it back, so a worker running one continues the trace.
pub(crate) fn trace_header(trace: &TraceContext) -> Header {
    let mut carrier = json!({ "traceparent": trace.traceparent() });
    if let Some(state) = trace.tracestate() {
        carrier["tracestate"] = json!(state);
    }
    let mut fields = HashMap::new();
    fields.insert(TRACE_HEADER_KEY.to_owned(), json_payload(&carrier));
    Header { fields }
}

/// The JSON value of a payload: `json/plain` parsed, `binary/null` as `null`;
/// anything else (protobuf, encrypted, binary) is described, not decoded.
///
/// # Errors
///
/// A description of a payload that is not JSON.
pub(crate) fn payload_value(payload: &Payload) -> Result<Value, String> {
    let encoding = payload
        .metadata
        .get("encoding")
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .unwrap_or_default();
    match encoding.as_str() {
        "json/plain" => serde_json::from_slice(&payload.data)
            .map_err(|e| format!("a json/plain payload that is not JSON ({e})")),
        "binary/null" => Ok(Value::Null),
        other => Err(format!(
            "a payload in encoding {other:?} ({} bytes), which taskgate does not decode",
            payload.data.len()
        )),
    }
}

/// The JSON value of a payload list: nothing → `null`, one → its value, more →
/// an array.
///
/// # Errors
///
/// As [`payload_value`].
pub(crate) fn payloads_value(payloads: Option<&Payloads>) -> Result<Value, String> {
    let list = payloads.map(|p| p.payloads.as_slice()).unwrap_or_default();
    match list {
        [] => Ok(Value::Null),
        [one] => payload_value(one),
        many => many
            .iter()
            .map(payload_value)
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
    }
}

/// The bytes of a payload list's data.
pub(crate) fn payloads_len(payloads: Option<&Payloads>) -> usize {
    payloads.map_or(0, |p| p.payloads.iter().map(|x| x.data.len()).sum())
}

/// The workflow's input from the tool's arguments: the arguments object as one
/// payload, or one payload per named argument (`args`), `null` when missing.
pub(crate) fn input_payloads(arguments: &Value, args: Option<&[String]>) -> Payloads {
    let payloads = match args {
        None => vec![json_payload(arguments)],
        Some(names) => names
            .iter()
            .map(|n| json_payload(arguments.get(n).unwrap_or(&Value::Null)))
            .collect(),
    };
    Payloads { payloads }
}

fn time_of(ts: Option<&prost_wkt_types::Timestamp>) -> Option<SystemTime> {
    let ts = ts?;
    let secs = u64::try_from(ts.seconds).ok()?;
    let nanos = u32::try_from(ts.nanos).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// The kind of a failure: an application failure's own type, else the kind of
/// failure info.
fn failure_type(f: &Failure) -> String {
    match &f.failure_info {
        Some(FailureInfo::ApplicationFailureInfo(a)) => a.r#type.clone(),
        Some(FailureInfo::TimeoutFailureInfo(_)) => "TimeoutFailure".into(),
        Some(FailureInfo::CanceledFailureInfo(_)) => "CanceledFailure".into(),
        Some(FailureInfo::TerminatedFailureInfo(_)) => "TerminatedFailure".into(),
        Some(FailureInfo::ServerFailureInfo(_)) => "ServerFailure".into(),
        Some(FailureInfo::ActivityFailureInfo(_)) => "ActivityFailure".into(),
        Some(FailureInfo::ChildWorkflowExecutionFailureInfo(_)) => "ChildWorkflowFailure".into(),
        Some(_) => "Failure".into(),
        None => String::new(),
    }
}

/// A failed workflow's tool error: the failure's message and type, the failed
/// activity (type and id) when an activity's failure caused it, and the causes
/// below.
pub(crate) fn failure_output(failure: &Failure) -> ToolOutput {
    let mut activity = None;
    let mut causes = Vec::new();
    let mut next = Some(failure);
    while let Some(f) = next {
        if let Some(FailureInfo::ActivityFailureInfo(a)) = &f.failure_info {
            activity.get_or_insert_with(|| {
                json!({
                    "type": a.activity_type.as_ref().map(|t| t.name.clone()).unwrap_or_default(),
                    "id": a.activity_id,
                })
            });
        }
        causes.push(json!({"message": f.message, "type": failure_type(f)}));
        next = f.cause.as_deref();
    }
    let top = causes.remove(0);
    let mut text = format!("the workflow failed: {}", failure.message);
    let kind = failure_type(failure);
    if !kind.is_empty() {
        text.push_str(&format!(" ({kind})"));
    }
    if let Some(a) = &activity {
        text.push_str(&format!(
            "; failed activity: {} (id {})",
            a["type"].as_str().unwrap_or_default(),
            a["id"].as_str().unwrap_or_default()
        ));
    }
    for c in &causes {
        text.push_str(&format!(
            "; caused by: {} ({})",
            c["message"].as_str().unwrap_or_default(),
            c["type"].as_str().unwrap_or_default()
        ));
    }
    let mut structured = Map::new();
    structured.insert("failure".into(), top);
    if let Some(a) = activity {
        structured.insert("activity".into(), a);
    }
    if !causes.is_empty() {
        structured.insert("causes".into(), Value::Array(causes));
    }
    ToolOutput {
        content: vec![taskgate_engine::Content::Text(text)],
        structured: Some(Value::Object(structured)),
        is_error: true,
    }
}

/// A completed workflow's result: an object as `structuredContent` as it is,
/// anything else as `{"result": value}`; a payload taskgate cannot decode is a
/// text result saying what it is.
pub(crate) fn result_output(result: Option<&Payloads>) -> ToolOutput {
    match payloads_value(result) {
        Ok(value @ Value::Object(_)) => ToolOutput::from_json(value, false),
        Ok(other) => {
            let mut out = ToolOutput::from_json(json!({ "result": other }), false);
            out.content = vec![taskgate_engine::Content::Text(match other {
                Value::String(s) => s,
                v => v.to_string(),
            })];
            out
        }
        Err(why) => ToolOutput::text(format!("the workflow completed with {why}")),
    }
}

/// What a read learnt beyond the description.
#[derive(Debug, Default)]
pub(crate) struct Observed<'a> {
    /// The close event of the current run, when it has closed.
    pub(crate) close: Option<&'a HistoryEvent>,
    /// The input query's answer: the JSON, or why there is none.
    pub(crate) question: Option<Result<Value, String>>,
    /// The progress query's answer: the JSON, or why there is none.
    pub(crate) progress: Option<Result<Value, String>>,
}

/// A question the workflow asks, checked: `{"key", "message", "schema",
/// "approval"?}`; `null` when it asks nothing.
///
/// # Errors
///
/// Why the answer is not a question taskgate can show.
pub(crate) fn question(value: &Value) -> Result<Option<(String, InputRequest)>, String> {
    let obj = match value {
        Value::Null => return Ok(None),
        Value::Object(o) => o,
        _ => return Err("the question is not an object".into()),
    };
    let id = obj
        .get("key")
        .and_then(Value::as_str)
        .ok_or("the question has no string key")?;
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
    {
        return Err("the question's key must be 1-64 of A-Z a-z 0-9 - _ . :".into());
    }
    let message = obj
        .get("message")
        .and_then(Value::as_str)
        .ok_or("the question has no string message")?;
    if message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(format!(
            "the question's message is longer than {MAX_MESSAGE_CHARS} characters"
        ));
    }
    let schema = obj.get("schema").ok_or("the question has no schema")?;
    check_schema(schema)?;
    let approval = match obj.get("approval") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("the question's approval must be a boolean".into()),
    };
    Ok(Some((
        id.to_owned(),
        InputRequest {
            message: message.to_owned(),
            requested_schema: schema.clone(),
            approval,
        },
    )))
}

/// MCP elicitation's schemas: a flat object of string, number, integer, boolean
/// (or enum) properties.
fn check_schema(schema: &Value) -> Result<(), String> {
    let obj = schema.as_object().ok_or("the schema is not an object")?;
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the schema's type must be \"object\"".into());
    }
    let props = match obj.get("properties") {
        None => return Ok(()),
        Some(Value::Object(p)) => p,
        Some(_) => return Err("the schema's properties must be an object".into()),
    };
    if props.len() > MAX_PROPERTIES {
        return Err(format!(
            "the schema has more than {MAX_PROPERTIES} properties"
        ));
    }
    for (name, prop) in props {
        let kind = prop.get("type").and_then(Value::as_str);
        if !matches!(kind, Some("string" | "number" | "integer" | "boolean")) {
            return Err(format!(
                "the schema's property {name:?} is not a string, number, integer or boolean (a flat form is required)"
            ));
        }
    }
    match obj.get("required") {
        None => Ok(()),
        Some(Value::Array(names))
            if names
                .iter()
                .all(|n| n.as_str().is_some_and(|n| props.contains_key(n))) =>
        {
            Ok(())
        }
        Some(_) => Err("the schema's required must list its properties".into()),
    }
}

/// Progress from the progress query's answer `{"message", "progress", "total"}`.
fn progress_of(value: &Value) -> (Option<String>, Option<Progress>) {
    let message = value
        .get("message")
        .and_then(Value::as_str)
        .map(|m| m.chars().take(MAX_MESSAGE_CHARS).collect());
    let progress = value
        .get("progress")
        .and_then(Value::as_f64)
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map(|done| Progress {
            done,
            total: value
                .get("total")
                .and_then(Value::as_f64)
                .filter(|t| t.is_finite() && *t >= done),
        });
    (message, progress)
}

/// The status message of a running workflow without a progress query: its
/// pending activities.
fn running_message(d: &DescribeWorkflowExecutionResponse) -> String {
    let cancel = d
        .workflow_extended_info
        .as_ref()
        .is_some_and(|i| i.cancel_requested);
    let mut parts: Vec<String> = d
        .pending_activities
        .iter()
        .take(5)
        .map(|a| {
            let name = a.activity_type.as_ref().map_or("?", |t| t.name.as_str());
            if a.attempt > 1 {
                format!("{name} (attempt {})", a.attempt)
            } else {
                name.to_owned()
            }
        })
        .collect();
    if d.pending_activities.len() > 5 {
        parts.push(format!("{} more", d.pending_activities.len() - 5));
    }
    let mut text = if parts.is_empty() {
        "running".to_owned()
    } else {
        format!("running: {}", parts.join(", "))
    };
    if cancel {
        text.push_str(" (cancel requested)");
    }
    text
}

/// The run's status.
pub(crate) fn status(d: &DescribeWorkflowExecutionResponse) -> WorkflowExecutionStatus {
    d.workflow_execution_info
        .as_ref()
        .and_then(|i| WorkflowExecutionStatus::try_from(i.status).ok())
        .unwrap_or(WorkflowExecutionStatus::Unspecified)
}

/// Translates one read: the description of the current run, and what else the
/// read learnt ([`Observed`]).
pub(crate) fn snapshot(d: &DescribeWorkflowExecutionResponse, seen: &Observed<'_>) -> Snapshot {
    let info = d.workflow_execution_info.as_ref();
    let state = match status(d) {
        WorkflowExecutionStatus::Running => running_state(d, seen),
        WorkflowExecutionStatus::Completed => {
            match seen.close.and_then(|e| e.attributes.as_ref()) {
                Some(Attributes::WorkflowExecutionCompletedEventAttributes(a)) => {
                    RunState::Completed(result_output(a.result.as_ref()))
                }
                _ => RunState::Failed {
                    message: "the workflow completed but its close event could not be read".into(),
                },
            }
        }
        WorkflowExecutionStatus::Failed => match seen.close.and_then(|e| e.attributes.as_ref()) {
            Some(Attributes::WorkflowExecutionFailedEventAttributes(a)) => RunState::Completed(
                a.failure
                    .as_ref()
                    .map_or_else(|| ToolOutput::error("the workflow failed"), failure_output),
            ),
            _ => RunState::Completed(ToolOutput::error("the workflow failed")),
        },
        WorkflowExecutionStatus::TimedOut => RunState::Completed(ToolOutput::error(
            "the workflow timed out (its run or execution timeout passed)",
        )),
        WorkflowExecutionStatus::Canceled => RunState::Cancelled {
            message: Some("the workflow was cancelled".into()),
        },
        WorkflowExecutionStatus::Terminated => {
            let reason = match seen.close.and_then(|e| e.attributes.as_ref()) {
                Some(Attributes::WorkflowExecutionTerminatedEventAttributes(a))
                    if !a.reason.is_empty() =>
                {
                    format!("the workflow was terminated: {}", a.reason)
                }
                _ => "the workflow was terminated".to_owned(),
            };
            RunState::Cancelled {
                message: Some(reason),
            }
        }
        // Describing by workflow id names the latest run of the chain: a
        // continued-as-new status means the next run is not there yet.
        WorkflowExecutionStatus::ContinuedAsNew => {
            RunState::working("continued as new; the next run is starting")
        }
        WorkflowExecutionStatus::Paused => RunState::working("paused"),
        WorkflowExecutionStatus::Unspecified => RunState::Failed {
            message: "Temporal reports no status for the workflow".into(),
        },
    };
    let ended_at = if state.is_terminal() {
        info.and_then(|i| time_of(i.close_time.as_ref()))
    } else {
        None
    };
    let mut snap = Snapshot::new(state);
    snap.created_at = info.and_then(|i| time_of(i.start_time.as_ref()));
    snap.ended_at = ended_at;
    snap.updated_at = ended_at;
    snap
}

fn running_state(d: &DescribeWorkflowExecutionResponse, seen: &Observed<'_>) -> RunState {
    let (mut message, progress) = match &seen.progress {
        Some(Ok(v)) => progress_of(v),
        Some(Err(why)) => (Some(format!("{} ({why})", running_message(d))), None),
        None => (None, None),
    };
    if message.is_none() {
        message = Some(running_message(d));
    }
    match &seen.question {
        Some(Ok(v)) => match question(v) {
            Ok(Some((key, request))) => {
                let mut requests = BTreeMap::new();
                requests.insert(key, request);
                RunState::InputRequired { requests, message }
            }
            Ok(None) => RunState::Working { message, progress },
            Err(why) => RunState::Working {
                message: Some(format!(
                    "{}; the workflow's question is refused: {why}",
                    message.unwrap_or_default()
                )),
                progress,
            },
        },
        Some(Err(why)) => RunState::Working {
            message: Some(format!(
                "{}; the workflow's question could not be read: {why}",
                message.unwrap_or_default()
            )),
            progress,
        },
        None => RunState::Working { message, progress },
    }
}

/// The failure of an update's outcome, as an answer's refusal: a failure whose
/// type names a stale or conflicting answer is a conflict (`true`), any other a
/// refused answer (`false`); with its message.
pub(crate) fn refusal(failure: &Failure) -> (bool, String) {
    let kind = failure_type(failure);
    let lower = kind.to_ascii_lowercase();
    let stale = lower.contains("stale") || lower.contains("conflict");
    let message = if kind.is_empty() {
        failure.message.clone()
    } else {
        format!("{} ({kind})", failure.message)
    };
    (stale, message)
}

/// The short name of an event type: `activity_task_scheduled`.
fn event_name(event: &HistoryEvent) -> String {
    EventType::try_from(event.event_type)
        .map(|t| {
            t.as_str_name()
                .trim_start_matches("EVENT_TYPE_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| format!("event_{}", event.event_type))
}

/// One history event as a log line, or `None` for the workflow-task
/// bookkeeping events. Lines never carry payloads (inputs, results, signal or
/// update arguments): names, ids and failure messages only.
pub(crate) fn event_line(event: &HistoryEvent) -> Option<LogLine> {
    use Attributes as A;
    let text = match event.attributes.as_ref()? {
        A::WorkflowTaskScheduledEventAttributes(_)
        | A::WorkflowTaskStartedEventAttributes(_)
        | A::WorkflowTaskCompletedEventAttributes(_) => return None,
        A::WorkflowExecutionStartedEventAttributes(a) => format!(
            "workflow {} started on task queue {}",
            a.workflow_type.as_ref().map_or("?", |t| t.name.as_str()),
            a.task_queue.as_ref().map_or("?", |t| t.name.as_str())
        ),
        A::WorkflowExecutionCompletedEventAttributes(_) => "workflow completed".into(),
        A::WorkflowExecutionFailedEventAttributes(a) => format!(
            "workflow failed: {}",
            a.failure.as_ref().map_or("", |f| f.message.as_str())
        ),
        A::WorkflowExecutionTimedOutEventAttributes(_) => "workflow timed out".into(),
        A::WorkflowExecutionCanceledEventAttributes(_) => "workflow cancelled".into(),
        A::WorkflowExecutionCancelRequestedEventAttributes(a) => {
            format!("cancel requested by {}", a.identity)
        }
        A::WorkflowExecutionTerminatedEventAttributes(a) => {
            format!("workflow terminated: {}", a.reason)
        }
        A::WorkflowExecutionContinuedAsNewEventAttributes(a) => {
            format!("continued as new: run {}", a.new_execution_run_id)
        }
        A::WorkflowTaskTimedOutEventAttributes(_) => "workflow task timed out".into(),
        A::WorkflowTaskFailedEventAttributes(a) => format!(
            "workflow task failed: {}",
            a.failure.as_ref().map_or("", |f| f.message.as_str())
        ),
        A::ActivityTaskScheduledEventAttributes(a) => format!(
            "activity {} (id {}) scheduled",
            a.activity_type.as_ref().map_or("?", |t| t.name.as_str()),
            a.activity_id
        ),
        A::ActivityTaskStartedEventAttributes(a) => format!(
            "activity of event {} started (attempt {})",
            a.scheduled_event_id, a.attempt
        ),
        A::ActivityTaskCompletedEventAttributes(a) => {
            format!("activity of event {} completed", a.scheduled_event_id)
        }
        A::ActivityTaskFailedEventAttributes(a) => format!(
            "activity of event {} failed: {}",
            a.scheduled_event_id,
            a.failure.as_ref().map_or("", |f| f.message.as_str())
        ),
        A::ActivityTaskTimedOutEventAttributes(a) => {
            format!("activity of event {} timed out", a.scheduled_event_id)
        }
        A::ActivityTaskCancelRequestedEventAttributes(a) => {
            format!(
                "activity of event {} cancel requested",
                a.scheduled_event_id
            )
        }
        A::ActivityTaskCanceledEventAttributes(a) => {
            format!("activity of event {} cancelled", a.scheduled_event_id)
        }
        A::TimerStartedEventAttributes(a) => format!(
            "timer {} started ({}s)",
            a.timer_id,
            a.start_to_fire_timeout.as_ref().map_or(0, |d| d.seconds)
        ),
        A::TimerFiredEventAttributes(a) => format!("timer {} fired", a.timer_id),
        A::TimerCanceledEventAttributes(a) => format!("timer {} cancelled", a.timer_id),
        A::WorkflowExecutionSignaledEventAttributes(a) => {
            format!("signal {} received", a.signal_name)
        }
        A::WorkflowExecutionUpdateAcceptedEventAttributes(a) => format!(
            "update {} accepted",
            a.accepted_request
                .as_ref()
                .and_then(|r| r.input.as_ref())
                .map_or("?", |i| i.name.as_str())
        ),
        A::WorkflowExecutionUpdateCompletedEventAttributes(a) => format!(
            "update {} completed",
            a.meta.as_ref().map_or("?", |m| m.update_id.as_str())
        ),
        A::WorkflowExecutionUpdateRejectedEventAttributes(a) => format!(
            "update rejected: {}",
            a.failure.as_ref().map_or("", |f| f.message.as_str())
        ),
        A::MarkerRecordedEventAttributes(a) => format!("marker {} recorded", a.marker_name),
        A::StartChildWorkflowExecutionInitiatedEventAttributes(a) => format!(
            "child workflow {} ({}) started",
            a.workflow_type.as_ref().map_or("?", |t| t.name.as_str()),
            a.workflow_id
        ),
        _ => String::new(),
    };
    Some(LogLine::new(
        event_name(event),
        format!("#{} {text}", event.event_id).trim_end(),
    ))
}

#[cfg(test)]
mod tests;
