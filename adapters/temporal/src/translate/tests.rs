//! Table tests on payloads captured from the test server
//! (`tests/fixtures/`, canonical protobuf JSON written by
//! `scripts/temporal/capture-fixtures.py`). The parts Temporal's Rust types read
//! as canonical JSON (payloads and failures) are read from the files as they
//! are; the descriptions around them are built from the fixtures' values.

use super::*;
use temporalio_common::protos::temporal::api::history::v1::WorkflowExecutionCompletedEventAttributes;
use temporalio_common::protos::temporal::api::history::v1::WorkflowExecutionFailedEventAttributes;
use temporalio_common::protos::temporal::api::workflow::v1::{
    PendingActivityInfo, WorkflowExecutionInfo,
};

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The close event's attributes of a captured history (`<case>.history.json`).
fn close_attributes(case: &str, field: &str) -> Value {
    let history = fixture(&format!("{case}.history.json"));
    let last = history["history"]["events"]
        .as_array()
        .and_then(|e| e.last())
        .cloned()
        .unwrap();
    last[field].clone()
}

fn payloads(v: &Value) -> Payloads {
    serde_json::from_value(v.clone()).expect("canonical Payloads JSON")
}

fn failure(v: &Value) -> Failure {
    serde_json::from_value(v.clone()).expect("canonical Failure JSON")
}

fn described(status: WorkflowExecutionStatus) -> DescribeWorkflowExecutionResponse {
    DescribeWorkflowExecutionResponse {
        workflow_execution_info: Some(WorkflowExecutionInfo {
            status: status as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn event(attributes: Attributes) -> HistoryEvent {
    HistoryEvent {
        event_id: 16,
        attributes: Some(attributes),
        ..Default::default()
    }
}

#[test]
fn a_completed_workflow_s_close_event_is_its_structured_result() {
    let attrs = close_attributes("succeed", "workflowExecutionCompletedEventAttributes");
    let result = payloads(&attrs["result"]);
    let close = event(Attributes::WorkflowExecutionCompletedEventAttributes(
        WorkflowExecutionCompletedEventAttributes {
            result: Some(result),
            ..Default::default()
        },
    ));
    let snap = snapshot(
        &described(WorkflowExecutionStatus::Completed),
        &Observed {
            close: Some(&close),
            ..Observed::default()
        },
    );
    let RunState::Completed(out) = snap.state else {
        panic!("{snap:?}")
    };
    assert!(!out.is_error);
    assert_eq!(
        out.structured,
        Some(
            json!({"greeting": "hello taskgate", "input": {"name": "taskgate", "wait_seconds": 1.5}})
        )
    );
}

#[test]
fn a_failed_workflow_names_the_failed_activity_and_the_cause() {
    let attrs = close_attributes("fail", "workflowExecutionFailedEventAttributes");
    let f = failure(&attrs["failure"]);
    let close = event(Attributes::WorkflowExecutionFailedEventAttributes(
        WorkflowExecutionFailedEventAttributes {
            failure: Some(f),
            ..Default::default()
        },
    ));
    let snap = snapshot(
        &described(WorkflowExecutionStatus::Failed),
        &Observed {
            close: Some(&close),
            ..Observed::default()
        },
    );
    let RunState::Completed(out) = snap.state else {
        panic!("{snap:?}")
    };
    assert!(out.is_error);
    let s = out.structured.unwrap();
    assert_eq!(s["activity"], json!({"type": "explode", "id": "1"}));
    assert_eq!(s["failure"]["type"], "ActivityFailure");
    assert_eq!(
        s["causes"],
        json!([{"message": "the deploy exploded", "type": "TaskgateExploded"}])
    );
    let taskgate_engine::Content::Text(text) = &out.content[0] else {
        panic!()
    };
    assert!(
        text.contains("explode") && text.contains("TaskgateExploded"),
        "{text}"
    );
    assert!(!text.contains("site-packages"), "no stack trace: {text}");
}

#[test]
fn a_declined_question_is_a_tool_error_of_its_type() {
    let attrs = close_attributes("declined", "workflowExecutionFailedEventAttributes");
    let out = failure_output(&failure(&attrs["failure"]));
    assert!(out.is_error);
    assert_eq!(
        out.structured.unwrap()["failure"]["type"],
        "taskgate.Declined"
    );
}

#[test]
fn other_ends_map_to_their_states() {
    let terminated = event(Attributes::WorkflowExecutionTerminatedEventAttributes(
        temporalio_common::protos::temporal::api::history::v1::WorkflowExecutionTerminatedEventAttributes {
            reason: "operator".into(),
            ..Default::default()
        },
    ));
    for (status, close, want) in [
        (WorkflowExecutionStatus::Canceled, None, "cancelled"),
        (
            WorkflowExecutionStatus::Terminated,
            Some(&terminated),
            "terminated: operator",
        ),
        (WorkflowExecutionStatus::TimedOut, None, "timed out"),
        (
            WorkflowExecutionStatus::ContinuedAsNew,
            None,
            "continued as new",
        ),
        (WorkflowExecutionStatus::Unspecified, None, "no status"),
    ] {
        let snap = snapshot(
            &described(status),
            &Observed {
                close,
                ..Observed::default()
            },
        );
        let text = format!("{:?}", snap.state);
        assert!(text.contains(want), "{status:?}: {text}");
    }
    // A completed run whose close event could not be read is not a result.
    let snap = snapshot(
        &described(WorkflowExecutionStatus::Completed),
        &Observed::default(),
    );
    assert!(matches!(snap.state, RunState::Failed { .. }));
}

#[test]
fn the_input_query_s_answer_becomes_a_question() {
    let answer = fixture("ask-waiting.query-input.json");
    let value = payloads_value(Some(&payloads(&answer["queryResult"]))).unwrap();
    let snap = snapshot(
        &described(WorkflowExecutionStatus::Running),
        &Observed {
            question: Some(Ok(value)),
            ..Observed::default()
        },
    );
    let RunState::InputRequired { requests, .. } = snap.state else {
        panic!("{snap:?}")
    };
    let request = &requests["step-1"];
    assert_eq!(request.message, "Approve release step 1 of 2?");
    assert_eq!(request.requested_schema["required"], json!(["approved"]));
    // `null` (nothing asked, as after completion): working.
    let closed = fixture("ask.query-input-closed.json");
    let value = payloads_value(Some(&payloads(&closed["queryResult"]))).unwrap();
    assert_eq!(question(&value), Ok(None));
}

#[test]
fn questions_taskgate_cannot_show_are_refused() {
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    for (answer, why) in [
        (json!("ask me"), "not an object"),
        (json!({"message": "m", "schema": schema}), "no string key"),
        (
            json!({"key": "a b", "message": "m", "schema": schema}),
            "key must",
        ),
        (json!({"key": "k", "schema": schema}), "no string message"),
        (json!({"key": "k", "message": "m"}), "no schema"),
        (
            json!({"key": "k", "message": "m", "schema": {"type": "array"}}),
            "type must",
        ),
        (
            json!({"key": "k", "message": "m", "schema": {"type": "object", "properties": {"n": {"type": "object"}}}}),
            "flat form",
        ),
        (
            json!({"key": "k", "message": "m", "schema": {"type": "object", "properties": {}, "required": ["x"]}}),
            "required",
        ),
        (
            json!({"key": "k", "message": "x".repeat(MAX_MESSAGE_CHARS + 1), "schema": schema}),
            "longer than",
        ),
    ] {
        let e = question(&answer).unwrap_err();
        assert!(e.contains(why), "{answer:.80}: {e}");
        let snap = snapshot(
            &described(WorkflowExecutionStatus::Running),
            &Observed {
                question: Some(Ok(answer.clone())),
                ..Observed::default()
            },
        );
        let RunState::Working { message, .. } = &snap.state else {
            panic!("{snap:?}")
        };
        assert!(
            message.as_deref().unwrap().contains("refused"),
            "{message:?}"
        );
    }
    // The progress query's answer is no question (asked as one by mistake).
    let progress = fixture("progress-running.query-progress.json");
    let value = payloads_value(Some(&payloads(&progress["queryResult"]))).unwrap();
    assert!(question(&value).is_err());
}

#[test]
fn progress_comes_from_the_progress_query() {
    let answer = fixture("progress-running.query-progress.json");
    let value = payloads_value(Some(&payloads(&answer["queryResult"]))).unwrap();
    let snap = snapshot(
        &described(WorkflowExecutionStatus::Running),
        &Observed {
            progress: Some(Ok(value)),
            ..Observed::default()
        },
    );
    assert_eq!(
        snap.state,
        RunState::Working {
            message: Some("step 1 of 3".into()),
            progress: Some(Progress {
                done: 1.0,
                total: Some(3.0)
            }),
        }
    );
}

#[test]
fn without_queries_a_running_workflow_names_its_pending_activities() {
    let mut d = described(WorkflowExecutionStatus::Running);
    assert_eq!(
        snapshot(&d, &Observed::default()).state,
        RunState::working("running")
    );
    d.pending_activities.push(PendingActivityInfo {
        activity_type: Some(
            temporalio_common::protos::temporal::api::common::v1::ActivityType {
                name: "greet".into(),
            },
        ),
        attempt: 2,
        ..Default::default()
    });
    assert_eq!(
        snapshot(&d, &Observed::default()).state,
        RunState::working("running: greet (attempt 2)")
    );
}

#[test]
fn update_refusals_tell_stale_from_invalid() {
    for (name, stale, text) in [
        ("ask.update-stale.json", true, "step-1"),
        ("ask.update-invalid.json", false, "approved"),
    ] {
        let answer = fixture(name);
        let (is_stale, message) = refusal(&failure(&answer["outcome"]["failure"]));
        assert_eq!(is_stale, stale, "{name}");
        assert!(message.contains(text), "{message}");
    }
}

#[test]
fn payloads_decode_json_and_describe_the_rest() {
    let mut p = json_payload(&json!({"a": 1}));
    assert_eq!(payload_value(&p), Ok(json!({"a": 1})));
    p.metadata
        .insert("encoding".into(), b"binary/encrypted".to_vec());
    assert!(payload_value(&p).unwrap_err().contains("binary/encrypted"));
    let out = result_output(Some(&Payloads { payloads: vec![p] }));
    assert!(!out.is_error && out.structured.is_none());
    let out = result_output(Some(&Payloads {
        payloads: vec![json_payload(&json!("done"))],
    }));
    assert_eq!(out.structured, Some(json!({"result": "done"})));
    assert_eq!(
        input_payloads(
            &json!({"name": "x", "times": 2}),
            Some(&["name".into(), "times".into(), "gone".into()])
        )
        .payloads
        .iter()
        .map(|p| payload_value(p).unwrap())
        .collect::<Vec<_>>(),
        vec![json!("x"), json!(2), Value::Null]
    );
}

#[test]
fn history_events_become_log_lines_without_payloads() {
    let scheduled = event(Attributes::ActivityTaskScheduledEventAttributes(
        temporalio_common::protos::temporal::api::history::v1::ActivityTaskScheduledEventAttributes {
            activity_id: "1".into(),
            activity_type: Some(temporalio_common::protos::temporal::api::common::v1::ActivityType {
                name: "greet".into(),
            }),
            input: Some(Payloads {
                payloads: vec![json_payload(&json!({"secret": "argument"}))],
            }),
            ..Default::default()
        },
    ));
    let mut scheduled = scheduled;
    scheduled.event_type = EventType::ActivityTaskScheduled as i32;
    let line = event_line(&scheduled).unwrap();
    assert_eq!(line.source, "activity_task_scheduled");
    assert_eq!(line.text, "#16 activity greet (id 1) scheduled");
    let task = event(Attributes::WorkflowTaskScheduledEventAttributes(
        Default::default(),
    ));
    assert_eq!(event_line(&task), None);
}

#[test]
fn the_trace_context_is_the_interceptors_tracer_data_header() {
    let trace = TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("vendor=abc"),
    )
    .unwrap();
    let header = trace_header(&trace);
    assert_eq!(header.fields.len(), 1);
    let payload = &header.fields[TRACE_HEADER_KEY];
    assert_eq!(payload.metadata["encoding"], b"json/plain");
    assert_eq!(
        payload_value(payload).unwrap(),
        json!({"traceparent": trace.traceparent(), "tracestate": "vendor=abc"})
    );
}
