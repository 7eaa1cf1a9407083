//! Pure functions: Airflow's payloads (DAG runs, task instances, HITL details, logs,
//! XComs, DAG params) → taskgate's [`RunState`] and back (answers, `conf`).
//! Table-tested on payloads captured from Airflow 3.3 (`tests/fixtures/`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{json, Map, Value};
use taskgate_engine::{
    InputAction, InputRequest, InputResponse, Progress, RunState, Snapshot, ToolOutput,
    TraceContext,
};

/// The start of the note taskgate writes on a DAG run it cancels. A failed run
/// whose note starts with it reads as cancelled.
pub const CANCEL_NOTE: &str = "taskgate: cancelled";

/// The content property that carries the chosen option of a single-choice question.
pub const OPTION_FIELD: &str = "option";

/// The content property that carries the chosen options of a multiple-choice
/// question.
pub const OPTIONS_FIELD: &str = "options";

/// How long after a HITL request was written it is shown to clients. Airflow 3.3
/// parks the task in `awaiting_input` and only then reports the first process's exit
/// to the scheduler; an answer that resumes the task before that report makes the
/// scheduler fail the task ("state changed externally"). Seen on 3.3.2 with answers
/// sent one to six seconds after the request (the scheduler was busy).
pub const HITL_SETTLE: Duration = Duration::from_secs(10);

/// A DAG run (`DAGRunResponse`), the fields taskgate reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DagRun {
    /// The run id (taskgate's run name).
    pub dag_run_id: String,
    /// The DAG.
    pub dag_id: String,
    /// `queued`, `running`, `success` or `failed`.
    pub state: String,
    /// The run's `conf`.
    #[serde(default)]
    pub conf: Option<Value>,
    /// The run's note.
    #[serde(default)]
    pub note: Option<String>,
    /// When it was queued.
    #[serde(default)]
    pub queued_at: Option<String>,
    /// When it started.
    #[serde(default)]
    pub start_date: Option<String>,
    /// When it ended.
    #[serde(default)]
    pub end_date: Option<String>,
}

/// A task instance (`TaskInstanceResponse`), the fields taskgate reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskInstance {
    /// The task.
    pub task_id: String,
    /// The map index (-1 for unmapped tasks).
    #[serde(default = "unmapped")]
    pub map_index: i64,
    /// The state; null before the scheduler looked at it.
    #[serde(default)]
    pub state: Option<String>,
    /// The current try.
    #[serde(default)]
    pub try_number: u64,
    /// The operator's class name (`ApprovalOperator`, `HITLOperator`, …).
    #[serde(default)]
    pub operator: Option<String>,
    /// The operator's display name.
    #[serde(default)]
    pub operator_name: Option<String>,
}

fn unmapped() -> i64 {
    -1
}

/// A page of task instances.
#[derive(Debug, Clone, Deserialize)]
pub struct TaskInstances {
    /// The task instances.
    pub task_instances: Vec<TaskInstance>,
}

/// A human-in-the-loop request (`HITLDetail`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HitlDetail {
    /// The options the person chooses from.
    pub options: Vec<String>,
    /// The question's subject.
    pub subject: String,
    /// Its body.
    #[serde(default)]
    pub body: Option<String>,
    /// The options taken when nobody chooses.
    #[serde(default)]
    pub defaults: Option<Vec<String>>,
    /// Whether several options may be chosen.
    #[serde(default)]
    pub multiple: bool,
    /// The form's params (serialized Airflow `Param`s).
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Whether somebody already answered.
    #[serde(default)]
    pub response_received: bool,
    /// When the task wrote the request.
    #[serde(default)]
    pub created_at: Option<String>,
    /// The waiting task instance.
    pub task_instance: TaskInstance,
}

/// A list of HITL details.
#[derive(Debug, Clone, Deserialize)]
pub struct HitlDetails {
    /// The details.
    pub hitl_details: Vec<HitlDetail>,
}

/// What a failed run's result says about one failed task.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedTask {
    /// The task.
    pub task_id: String,
    /// The try that failed.
    pub try_number: u64,
    /// The tail of that try's log (empty when it was not read).
    pub log_tail: Vec<String>,
}

/// Task instance states after which a task does nothing more.
#[must_use]
pub fn task_done(state: Option<&str>) -> bool {
    matches!(
        state,
        Some("success" | "failed" | "skipped" | "upstream_failed" | "removed")
    )
}

/// Task instance states that may be a human step waiting: `awaiting_input` (3.3) and
/// `deferred` (3.1 and 3.2 defer HITL operators to the triggerer).
#[must_use]
pub fn may_await_input(state: Option<&str>) -> bool {
    matches!(state, Some("awaiting_input" | "deferred"))
}

/// Whether taskgate cancelled this run (its note says so).
#[must_use]
pub fn is_cancelled(run: &DagRun) -> bool {
    run.note
        .as_deref()
        .is_some_and(|n| n.trim_start().starts_with(CANCEL_NOTE))
}

/// The note taskgate writes when it cancels a run.
#[must_use]
pub fn cancel_note() -> String {
    format!("{CANCEL_NOTE} by an MCP client through taskgate")
}

/// The run's `conf` for the tool's arguments: the arguments object itself, or
/// `{ key: arguments }`.
///
/// # Errors
///
/// A message when the arguments are not an object and no key is set (a run's conf
/// is an object).
pub fn conf_for(arguments: &Value, conf_key: Option<&str>) -> Result<Value, String> {
    match conf_key {
        Some(key) => Ok(json!({ key: arguments })),
        None if arguments.is_object() => Ok(arguments.clone()),
        None if arguments.is_null() => Ok(json!({})),
        None => Err("the tool's arguments must be an object (or set target.conf_key)".to_owned()),
    }
}

/// The `conf` a start sends: `conf` with the trace context under `trace_key`
/// (`{ "traceparent": ..., "tracestate": ... }`) when both are there.
///
/// # Errors
///
/// A message when the arguments already hold `trace_key` (it is reserved for
/// the trace context, with or without one).
pub fn conf_with_trace(
    conf: &Value,
    trace_key: Option<&str>,
    trace: Option<&TraceContext>,
) -> Result<Value, String> {
    let Some(key) = trace_key else {
        return Ok(conf.clone());
    };
    if conf.get(key).is_some() {
        return Err(format!(
            "the argument {key:?} is reserved for the trace context (target.trace_conf_key)"
        ));
    }
    let mut sent = conf.clone();
    if let (Some(trace), Some(object)) = (trace, sent.as_object_mut()) {
        let mut carrier = json!({ "traceparent": trace.traceparent() });
        if let Some(state) = trace.tracestate() {
            carrier["tracestate"] = json!(state);
        }
        object.insert(key.to_owned(), carrier);
    }
    Ok(sent)
}

/// An existing run's `conf` without the trace context's key, for comparing it
/// with a retried start's (which may run under another trace).
#[must_use]
pub fn conf_without_trace(existing: Option<&Value>, trace_key: Option<&str>) -> Option<Value> {
    let mut conf = existing.cloned();
    if let (Some(Value::Object(object)), Some(key)) = (conf.as_mut(), trace_key) {
        object.remove(key);
    }
    conf
}

/// Whether an existing run was started with this `conf` (an absent conf equals `{}`).
#[must_use]
pub fn same_conf(existing: Option<&Value>, conf: &Value) -> bool {
    let empty = json!({});
    let existing = match existing {
        None | Some(Value::Null) => &empty,
        Some(v) => v,
    };
    existing == conf
}

/// `3 of 7 tasks done; running: transform` and the counts as progress.
#[must_use]
pub fn progress(tasks: &[TaskInstance]) -> (String, Progress) {
    let total = tasks.len();
    let done = tasks
        .iter()
        .filter(|t| task_done(t.state.as_deref()))
        .count();
    let mut running: Vec<&str> = tasks
        .iter()
        .filter(|t| {
            matches!(
                t.state.as_deref(),
                Some("running" | "deferred" | "awaiting_input" | "restarting")
            )
        })
        .map(|t| t.task_id.as_str())
        .collect();
    running.dedup();
    let mut message = format!("{done} of {total} tasks done");
    if !running.is_empty() {
        message.push_str("; running: ");
        message.push_str(&running.join(", "));
    }
    let retrying: Vec<&str> = tasks
        .iter()
        .filter(|t| t.state.as_deref() == Some("up_for_retry"))
        .map(|t| t.task_id.as_str())
        .collect();
    if !retrying.is_empty() {
        message.push_str("; retrying: ");
        message.push_str(&retrying.join(", "));
    }
    #[allow(clippy::cast_precision_loss)]
    let p = Progress {
        done: done as f64,
        total: Some(total as f64),
    };
    (message, p)
}

/// The stable key of an input request: the task instance and its try.
#[must_use]
pub fn request_key(ti: &TaskInstance) -> String {
    format!("hitl:{}:{}:{}", ti.map_index, ti.try_number, ti.task_id)
}

/// The task instance a [`request_key`] names: `(task_id, map_index, try_number)`.
#[must_use]
pub fn parse_request_key(key: &str) -> Option<(String, i64, u64)> {
    let rest = key.strip_prefix("hitl:")?;
    let mut parts = rest.splitn(3, ':');
    let map_index = parts.next()?.parse().ok()?;
    let try_number = parts.next()?.parse().ok()?;
    let task_id = parts.next()?;
    (!task_id.is_empty()).then(|| (task_id.to_owned(), map_index, try_number))
}

/// Whether a HITL question is only a form (`HITLEntryOperator`: the single option
/// `OK`), so the client is not asked to choose.
fn form_only(detail: &HitlDetail) -> bool {
    detail.options.len() == 1
}

/// The name of the content property that carries the choice, avoiding a param of
/// the same name.
fn choice_field(detail: &HitlDetail) -> String {
    let base = if detail.multiple {
        OPTIONS_FIELD
    } else {
        OPTION_FIELD
    };
    let mut name = base.to_owned();
    while detail.params.contains_key(&name) {
        name.insert(0, '_');
    }
    name
}

/// A JSON Schema property for one serialized Airflow `Param`
/// (`{value, description, schema}`): its schema, its value as the default, its
/// description.
#[must_use]
pub fn param_property(param: &Value) -> Value {
    let mut prop = param
        .get("schema")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(d) = param.get("description").and_then(Value::as_str) {
        prop.entry("description").or_insert_with(|| json!(d));
    }
    if let Some(v) = param.get("value").filter(|v| !v.is_null()) {
        prop.entry("default").or_insert_with(|| v.clone());
    }
    if !prop.contains_key("type") && !prop.contains_key("enum") {
        let t = match param.get("value") {
            Some(Value::Bool(_)) => Some("boolean"),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some("integer"),
            Some(Value::Number(_)) => Some("number"),
            Some(Value::String(_)) => Some("string"),
            _ => None,
        };
        if let Some(t) = t {
            prop.insert("type".to_owned(), json!(t));
        }
    }
    Value::Object(prop)
}

/// The input request for a waiting HITL question: its subject and body as the
/// message; its options (unless it is only a form) and params as the schema.
#[must_use]
pub fn input_request(detail: &HitlDetail) -> InputRequest {
    let mut properties = Map::new();
    let mut required = Vec::new();
    if !form_only(detail) {
        let field = choice_field(detail);
        let mut prop = if detail.multiple {
            json!({"type": "array", "items": {"type": "string", "enum": detail.options}, "minItems": 1})
        } else {
            json!({"type": "string", "enum": detail.options})
        };
        prop["description"] = json!("your choice");
        match detail.defaults.as_deref() {
            Some(d) if !d.is_empty() => {
                prop["default"] = if detail.multiple {
                    json!(d)
                } else {
                    json!(d[0])
                };
            }
            _ => required.push(Value::String(field.clone())),
        }
        properties.insert(field, prop);
    }
    for (name, param) in &detail.params {
        properties.insert(name.clone(), param_property(param));
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    let message = match detail.body.as_deref().map(str::trim) {
        Some(body) if !body.is_empty() => format!("{}\n\n{body}", detail.subject),
        _ => detail.subject.clone(),
    };
    InputRequest {
        message,
        requested_schema: schema,
        approval: is_approval_operator(detail),
    }
}

/// True when the waiting task is an `ApprovalOperator` (or a subclass Airflow
/// names as one): its question is an approval gate, not a form.
#[must_use]
pub fn is_approval_operator(detail: &HitlDetail) -> bool {
    let ti = &detail.task_instance;
    [ti.operator.as_deref(), ti.operator_name.as_deref()]
        .into_iter()
        .flatten()
        .any(|name| name == "ApprovalOperator")
}

/// The option a decline picks: one named like a rejection (`Reject`, `Decline`,
/// `No`, `Deny`), case-insensitively.
#[must_use]
pub fn reject_option(detail: &HitlDetail) -> Option<&str> {
    detail
        .options
        .iter()
        .find(|o| {
            matches!(
                o.trim().to_ascii_lowercase().as_str(),
                "reject" | "decline" | "no" | "deny" | "rejected"
            )
        })
        .map(String::as_str)
}

/// The body of `PATCH …/hitlDetails` for the client's answer.
///
/// # Errors
///
/// A message when the answer does not fit the question (an unknown option, a decline
/// where there is no reject option).
pub fn answer_body(detail: &HitlDetail, response: &InputResponse) -> Result<Value, String> {
    match response.action {
        InputAction::Decline | InputAction::Cancel => {
            let Some(reject) = reject_option(detail) else {
                return Err(format!(
                    "this question has no reject option to decline with; accept with one of {:?}",
                    detail.options
                ));
            };
            Ok(json!({"chosen_options": [reject], "params_input": {}}))
        }
        InputAction::Accept => {
            let content = response
                .content
                .as_ref()
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let field = choice_field(detail);
            let chosen: Vec<String> = if form_only(detail) {
                detail.options.clone()
            } else {
                match content.get(&field) {
                    Some(Value::String(s)) => vec![s.clone()],
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|v| v.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| format!("{field} must be a list of option names"))?,
                    Some(_) => return Err(format!("{field} must be one of {:?}", detail.options)),
                    None => match detail.defaults.as_deref() {
                        Some(d) if !d.is_empty() => d.to_vec(),
                        _ => return Err(format!("choose {field}: one of {:?}", detail.options)),
                    },
                }
            };
            if let Some(bad) = chosen.iter().find(|c| !detail.options.contains(c)) {
                return Err(format!("{bad:?} is not one of {:?}", detail.options));
            }
            if chosen.is_empty() || (!detail.multiple && chosen.len() > 1) {
                return Err(format!("choose exactly one of {:?}", detail.options));
            }
            let mut params = Map::new();
            for name in detail.params.keys() {
                if let Some(v) = content.get(name) {
                    params.insert(name.clone(), v.clone());
                } else if let Some(v) = detail.params[name].get("value").filter(|v| !v.is_null()) {
                    params.insert(name.clone(), v.clone());
                }
            }
            Ok(json!({"chosen_options": chosen, "params_input": params}))
        }
    }
}

/// The readable lines of a task log (`TaskInstancesLogResponse.content`): each
/// entry's `event`, with the exception of an error entry, without the group markers.
/// Returns the last `lines`.
#[must_use]
pub fn log_tail(log: &Value, lines: usize) -> Vec<String> {
    let mut out = Vec::new();
    let entries = match log.get("content") {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::String(s)) => s.lines().map(|l| json!({"event": l})).collect(),
        _ => Vec::new(),
    };
    for entry in &entries {
        let event = entry.get("event").and_then(Value::as_str).unwrap_or("");
        if event.starts_with("::group::") || event.starts_with("::endgroup::") {
            continue;
        }
        let mut line = event.to_owned();
        if let Some(errors) = entry.get("error_detail").and_then(Value::as_array) {
            for e in errors {
                let kind = e.get("exc_type").and_then(Value::as_str).unwrap_or("error");
                let value = e.get("exc_value").and_then(Value::as_str).unwrap_or("");
                line = format!("{line}: {kind}: {value}");
            }
        }
        if !line.trim().is_empty() {
            out.push(line);
        }
    }
    let skip = out.len().saturating_sub(lines);
    out.split_off(skip)
}

/// The failed tasks of a run: task instances in state `failed` (not those
/// `upstream_failed`).
#[must_use]
pub fn failed_tasks(tasks: &[TaskInstance]) -> Vec<&TaskInstance> {
    tasks
        .iter()
        .filter(|t| t.state.as_deref() == Some("failed"))
        .collect()
}

/// The result of a failed run: `isError`, naming the failed tasks, with the log
/// tail of the first.
#[must_use]
pub fn failure_output(run: &DagRun, failed: &[FailedTask]) -> ToolOutput {
    let names: Vec<&str> = failed.iter().map(|f| f.task_id.as_str()).collect();
    let mut text = if names.is_empty() {
        format!("DAG run {} of {} failed", run.dag_run_id, run.dag_id)
    } else {
        format!(
            "DAG run {} of {} failed; failed task(s): {}",
            run.dag_run_id,
            run.dag_id,
            names.join(", ")
        )
    };
    if let Some(first) = failed.first().filter(|f| !f.log_tail.is_empty()) {
        text.push_str(&format!(
            "\n\nlast log lines of {} (try {}):\n{}",
            first.task_id,
            first.try_number,
            first.log_tail.join("\n")
        ));
    }
    let structured = json!({
        "dag_id": run.dag_id,
        "dag_run_id": run.dag_run_id,
        "state": "failed",
        "failed_tasks": failed.iter().map(|f| json!({
            "task_id": f.task_id,
            "try_number": f.try_number,
            "log_tail": f.log_tail,
        })).collect::<Vec<_>>(),
    });
    ToolOutput {
        content: vec![taskgate_engine::Content::Text(text)],
        structured: Some(structured),
        is_error: true,
    }
}

/// The result of a successful run: the configured XCom value as structured
/// content (an object as it is, anything else as `{"result": value}`), or a summary
/// of the run when no XCom is configured.
#[must_use]
pub fn success_output(run: &DagRun, xcom: Option<&Value>) -> ToolOutput {
    match xcom {
        Some(value @ Value::Object(_)) => ToolOutput::from_json(value.clone(), false),
        Some(other) => {
            let mut out = ToolOutput::from_json(other.clone(), false);
            out.structured = Some(json!({ "result": other }));
            out
        }
        None => {
            let summary =
                json!({"dag_id": run.dag_id, "dag_run_id": run.dag_run_id, "state": "success"});
            let mut out = ToolOutput::text(format!(
                "DAG run {} of {} succeeded",
                run.dag_run_id, run.dag_id
            ));
            out.structured = Some(summary);
            out
        }
    }
}

/// Parses Airflow's timestamps (`2026-12-03T07:04:05.394332Z`).
#[must_use]
pub fn timestamp(text: Option<&str>) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text?.trim_end_matches('Z'))
        .ok()
        .or_else(|| humantime::parse_rfc3339(text?).ok())
}

/// What one read gathered besides the run itself.
#[derive(Debug, Clone, Default)]
pub struct Observed<'a> {
    /// The run's task instances (read while it runs, or after it failed).
    pub tasks: Option<&'a [TaskInstance]>,
    /// The HITL questions not answered yet (read when a task may await input).
    pub questions: &'a [HitlDetail],
    /// The configured XCom of a successful run.
    pub xcom: Option<&'a Value>,
    /// The failed tasks of a failed run, with their log tails.
    pub failed: &'a [FailedTask],
    /// Airflow's clock when it answered the HITL query (see [`HITL_SETTLE`]).
    pub now: Option<SystemTime>,
}

/// Whether a HITL request is old enough to be answered safely (see
/// [`HITL_SETTLE`]); true when either time is unknown.
#[must_use]
pub fn settled(detail: &HitlDetail, now: Option<SystemTime>) -> bool {
    match (timestamp(detail.created_at.as_deref()), now) {
        (Some(created), Some(now)) => now
            .duration_since(created)
            .is_ok_and(|age| age >= HITL_SETTLE),
        _ => true,
    }
}

/// Translates one read into a [`Snapshot`].
#[must_use]
pub fn snapshot(run: &DagRun, seen: &Observed<'_>) -> Snapshot {
    let state = run_state(run, seen);
    let mut snap = Snapshot::new(state);
    snap.created_at = timestamp(run.queued_at.as_deref());
    snap.updated_at = timestamp(run.end_date.as_deref().or(run.start_date.as_deref()));
    if snap.state.is_terminal() {
        snap.ended_at = timestamp(run.end_date.as_deref());
    }
    snap
}

/// Translates one read into a [`RunState`].
#[must_use]
pub fn run_state(run: &DagRun, seen: &Observed<'_>) -> RunState {
    if is_cancelled(run) {
        return RunState::Cancelled {
            message: Some(format!("DAG run {} was cancelled", run.dag_run_id)),
        };
    }
    match run.state.as_str() {
        "queued" => RunState::Working {
            message: Some("queued, waiting for the scheduler".to_owned()),
            progress: None,
        },
        "running" => {
            let tasks = seen.tasks.unwrap_or_default();
            let waiting: BTreeMap<String, InputRequest> = seen
                .questions
                .iter()
                .filter(|q| !q.response_received && settled(q, seen.now))
                .filter(|q| {
                    tasks.iter().any(|t| {
                        t.task_id == q.task_instance.task_id
                            && t.map_index == q.task_instance.map_index
                            && may_await_input(t.state.as_deref())
                    })
                })
                .map(|q| (request_key(&q.task_instance), input_request(q)))
                .collect();
            let (message, progress) = progress(tasks);
            if waiting.is_empty() {
                RunState::Working {
                    message: Some(if tasks.is_empty() {
                        "running".to_owned()
                    } else {
                        message
                    }),
                    progress: (!tasks.is_empty()).then_some(progress),
                }
            } else {
                RunState::InputRequired {
                    requests: waiting,
                    message: Some(message),
                }
            }
        }
        "success" => RunState::Completed(success_output(run, seen.xcom)),
        "failed" => RunState::Completed(failure_output(run, seen.failed)),
        other => RunState::Failed {
            message: format!(
                "Airflow reports DAG run state {other:?}, which taskgate cannot interpret"
            ),
        },
    }
}

/// A tool input schema suggested from a DAG's `params` (`DAGDetailsResponse.params`).
/// A param is required when it has no value and its schema does not take `null`
/// (Airflow refuses to trigger the DAG without it).
#[must_use]
pub fn suggest_input_schema(params: &Map<String, Value>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, param) in params {
        let prop = param_property(param);
        let nullable = match prop.get("type") {
            Some(Value::String(t)) => t == "null",
            Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
            _ => false,
        };
        if param.get("value").is_none_or(Value::is_null) && !nullable {
            required.push(json!(name));
        }
        properties.insert(name.clone(), prop);
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// Where a tool's input schema and a DAG's params disagree: properties the DAG does
/// not declare, params the schema lacks, and types that differ.
#[must_use]
pub fn compare_params(input_schema: &Value, params: &Map<String, Value>) -> Vec<String> {
    let mut problems = Vec::new();
    let empty = Map::new();
    let props = input_schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for name in props.keys() {
        if !params.contains_key(name) {
            problems.push(format!("the DAG declares no param {name:?}"));
        }
    }
    for (name, param) in params {
        let Some(prop) = props.get(name) else {
            problems.push(format!("the input schema lacks the DAG param {name:?}"));
            continue;
        };
        let want = param_property(param);
        let (Some(a), Some(b)) = (prop.get("type"), want.get("type")) else {
            continue;
        };
        let types = |v: &Value| -> Vec<String> {
            match v {
                Value::String(s) => vec![s.clone()],
                Value::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            }
        };
        let (ta, tb) = (types(a), types(b));
        let compatible = ta
            .iter()
            .all(|t| tb.contains(t) || (t == "integer" && tb.iter().any(|x| x == "number")));
        if !compatible {
            problems.push(format!(
                "{name:?} is {a} in the input schema but {b} in the DAG's params"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_engine::Content;

    #[test]
    fn the_trace_context_goes_under_its_conf_key_only() {
        let trace = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        )
        .unwrap();
        let conf = json!({"a": 1});
        assert_eq!(conf_with_trace(&conf, None, Some(&trace)).unwrap(), conf);
        let sent = conf_with_trace(&conf, Some("trace"), Some(&trace)).unwrap();
        assert_eq!(
            sent,
            json!({"a": 1, "trace": {"traceparent": trace.traceparent()}})
        );
        assert_eq!(conf_with_trace(&conf, Some("trace"), None).unwrap(), conf);
        assert!(conf_with_trace(&json!({"trace": "x"}), Some("trace"), None).is_err());
        let back = conf_without_trace(Some(&sent), Some("trace"));
        assert!(same_conf(back.as_ref(), &conf));
        assert!(!same_conf(Some(&sent), &conf));
    }

    fn body(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["body"].clone()
    }

    fn run(name: &str) -> DagRun {
        serde_json::from_value(body(name)).unwrap()
    }

    fn tis(name: &str) -> Vec<TaskInstance> {
        serde_json::from_value::<TaskInstances>(body(name))
            .unwrap()
            .task_instances
    }

    fn hitl(name: &str) -> Vec<HitlDetail> {
        serde_json::from_value::<HitlDetails>(body(name))
            .unwrap()
            .hitl_details
    }

    fn text(out: &ToolOutput) -> String {
        out.content
            .iter()
            .map(|c| match c {
                Content::Text(t) => t.clone(),
                Content::Link { uri, .. } => uri.clone(),
            })
            .collect()
    }

    #[test]
    fn state_table_on_captured_runs() {
        let xcom = body("xcom_success")["value"].clone();
        let long_tis = tis("tis_running");
        let approval_tis = tis("tis_awaiting_input");
        let questions = hitl("hitl_approval");
        let failed = [FailedTask {
            task_id: "explode".into(),
            try_number: 1,
            log_tail: log_tail(&body("log_failed"), 3),
        }];
        let cases: Vec<(&str, Observed<'_>, &str)> = vec![
            ("trigger_queued", Observed::default(), "working"),
            ("run_running", Observed::default(), "working"),
            (
                "run_running_with_task",
                Observed {
                    tasks: Some(&long_tis),
                    ..Observed::default()
                },
                "working",
            ),
            (
                "run_awaiting_input",
                Observed {
                    tasks: Some(&approval_tis),
                    questions: &questions,
                    ..Observed::default()
                },
                "input",
            ),
            (
                "run_success",
                Observed {
                    xcom: Some(&xcom),
                    ..Observed::default()
                },
                "completed",
            ),
            (
                "run_failed",
                Observed {
                    failed: &failed,
                    ..Observed::default()
                },
                "error",
            ),
            ("run_cancelled", Observed::default(), "cancelled"),
            ("run_rejected", Observed::default(), "completed"),
        ];
        for (name, seen, want) in cases {
            let r = run(name);
            let got = match run_state(&r, &seen) {
                RunState::Working { .. } => "working",
                RunState::InputRequired { .. } => "input",
                RunState::Completed(o) if o.is_error => "error",
                RunState::Completed(_) => "completed",
                RunState::Cancelled { .. } => "cancelled",
                RunState::Failed { .. } => "failed",
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn running_reports_task_counts() {
        let r = run("run_running_with_task");
        let tasks = tis("tis_running");
        let RunState::Working { message, progress } = run_state(
            &r,
            &Observed {
                tasks: Some(&tasks),
                ..Observed::default()
            },
        ) else {
            panic!("not working");
        };
        assert_eq!(
            message.as_deref(),
            Some("1 of 2 tasks done; running: sleep_long")
        );
        assert_eq!(
            progress,
            Some(Progress {
                done: 1.0,
                total: Some(2.0)
            })
        );
        let snap = snapshot(&r, &Observed::default());
        assert!(snap.created_at.is_some() && snap.ended_at.is_none());
    }

    #[test]
    fn success_carries_the_xcom() {
        let xcom = body("xcom_success")["value"].clone();
        let RunState::Completed(out) = run_state(
            &run("run_success"),
            &Observed {
                xcom: Some(&xcom),
                ..Observed::default()
            },
        ) else {
            panic!()
        };
        assert_eq!(
            out.structured,
            Some(json!({"count": 4, "dataset": "sales", "total": 12}))
        );
        let out = success_output(&run("run_success"), Some(&json!(12)));
        assert_eq!(out.structured, Some(json!({"result": 12})));
        let out = success_output(&run("run_success"), None);
        assert_eq!(out.structured.unwrap()["state"], "success");
        let snap = snapshot(
            &run("run_success"),
            &Observed {
                xcom: Some(&xcom),
                ..Observed::default()
            },
        );
        assert!(snap.ended_at.is_some());
    }

    #[test]
    fn failure_names_the_task_and_its_log() {
        let tasks = tis("tis_failed");
        let failed: Vec<&str> = failed_tasks(&tasks)
            .iter()
            .map(|t| t.task_id.as_str())
            .collect();
        assert_eq!(failed, ["explode"]);
        let tail = log_tail(&body("log_failed"), 20);
        assert!(
            tail.iter().any(|l| l == "taskgate-log-line 5 of 5"),
            "{tail:?}"
        );
        assert!(
            tail.iter()
                .any(|l| l.contains("RuntimeError: taskgate test failure")),
            "{tail:?}"
        );
        assert!(!tail.iter().any(|l| l.starts_with("::")));
        assert_eq!(log_tail(&body("log_failed"), 2).len(), 2);
        assert!(log_tail(&body("log_failed"), 0).is_empty());
        let out = failure_output(
            &run("run_failed"),
            &[FailedTask {
                task_id: "explode".into(),
                try_number: 1,
                log_tail: tail,
            }],
        );
        assert!(out.is_error);
        let t = text(&out);
        assert!(
            t.contains("failed task(s): explode") && t.contains("taskgate-log-line 3 of 5"),
            "{t}"
        );
    }

    #[test]
    fn cancel_is_read_from_the_note() {
        assert!(is_cancelled(&run("run_cancelled")));
        assert!(!is_cancelled(&run("run_failed")));
        let mut r = run("run_failed");
        r.note = Some(cancel_note());
        assert!(matches!(
            run_state(&r, &Observed::default()),
            RunState::Cancelled { .. }
        ));
        assert_eq!(body("patch_cancel")["state"], "failed");
    }

    #[test]
    fn approval_becomes_an_input_request() {
        let q = &hitl("hitl_approval")[0];
        let key = request_key(&q.task_instance);
        assert_eq!(key, "hitl:-1:1:approve_release");
        assert_eq!(
            parse_request_key(&key),
            Some(("approve_release".into(), -1, 1))
        );
        assert_eq!(
            parse_request_key("hitl:-1:1:group.task:x"),
            Some(("group.task:x".into(), -1, 1))
        );
        for bad in ["", "hitl:", "hitl:a:1:t", "hitl:-1:1:", "x:-1:1:t"] {
            assert_eq!(parse_request_key(bad), None, "{bad}");
        }
        let req = input_request(q);
        assert!(
            req.approval,
            "an ApprovalOperator's question is an approval gate"
        );
        let mut form = q.clone();
        form.task_instance.operator = Some("HITLEntryOperator".into());
        form.task_instance.operator_name = Some("HITLEntryOperator".into());
        assert!(!input_request(&form).approval, "a form is not an approval");
        assert_eq!(
            req.message,
            "Release 1.2.3?\n\nApprove the release of version 1.2.3."
        );
        assert_eq!(
            req.requested_schema,
            json!({"type": "object", "required": ["option"], "properties": {
                "option": {"type": "string", "enum": ["Approve", "Reject"], "description": "your choice"}}})
        );
        let accept = |c: Value| InputResponse {
            action: InputAction::Accept,
            content: Some(c),
        };
        assert_eq!(
            answer_body(q, &accept(json!({"option": "Approve"}))).unwrap(),
            json!({"chosen_options": ["Approve"], "params_input": {}})
        );
        let decline = InputResponse {
            action: InputAction::Decline,
            content: None,
        };
        assert_eq!(
            answer_body(q, &decline).unwrap(),
            json!({"chosen_options": ["Reject"], "params_input": {}})
        );
        assert!(answer_body(q, &accept(json!({"option": "Maybe"}))).is_err());
        assert!(answer_body(q, &accept(json!({}))).is_err());
    }

    #[test]
    fn fresh_requests_wait_until_airflow_settles() {
        let r = run("run_awaiting_input");
        let tasks = tis("tis_awaiting_input");
        let questions = hitl("hitl_approval");
        let created = timestamp(questions[0].created_at.as_deref()).unwrap();
        let at = |after: u64| Observed {
            tasks: Some(&tasks),
            questions: &questions,
            now: Some(created + Duration::from_secs(after)),
            ..Observed::default()
        };
        assert!(matches!(run_state(&r, &at(9)), RunState::Working { .. }));
        assert!(matches!(
            run_state(&r, &at(11)),
            RunState::InputRequired { .. }
        ));
        assert!(settled(&questions[0], None));
    }

    #[test]
    fn form_becomes_a_schema_of_its_params() {
        let q = &hitl("hitl_form")[0];
        let req = input_request(q);
        assert_eq!(
            req.requested_schema,
            json!({"type": "object", "properties": {
                "region": {"type": "string", "enum": ["eu-west-1", "us-east-1"], "default": "eu-west-1"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2}}})
        );
        let answer = InputResponse {
            action: InputAction::Accept,
            content: Some(json!({"region": "us-east-1"})),
        };
        assert_eq!(
            answer_body(q, &answer).unwrap(),
            json!({"chosen_options": ["OK"], "params_input": {"region": "us-east-1", "replicas": 2}})
        );
        let decline = InputResponse {
            action: InputAction::Decline,
            content: None,
        };
        assert!(answer_body(q, &decline)
            .unwrap_err()
            .contains("no reject option"));
        assert_eq!(
            body("xcom_form")["value"]["details"],
            json!({"region": "us-east-1", "replicas": 3})
        );
    }

    #[test]
    fn multiple_choice_and_defaults() {
        let mut q = hitl("hitl_approval")[0].clone();
        q.options = vec!["a".into(), "b".into(), "c".into()];
        q.multiple = true;
        q.defaults = Some(vec!["b".into()]);
        let req = input_request(&q);
        assert_eq!(
            req.requested_schema["properties"]["options"]["default"],
            json!(["b"])
        );
        assert!(req.requested_schema.get("required").is_none());
        let accept = |c: Value| InputResponse {
            action: InputAction::Accept,
            content: Some(c),
        };
        assert_eq!(
            answer_body(&q, &accept(json!({}))).unwrap()["chosen_options"],
            json!(["b"])
        );
        assert_eq!(
            answer_body(&q, &accept(json!({"options": ["a", "c"]}))).unwrap()["chosen_options"],
            json!(["a", "c"])
        );
        assert!(answer_body(&q, &accept(json!({"options": ["z"]}))).is_err());
    }

    #[test]
    fn conf_and_idempotency() {
        let args = json!({"dataset": "x", "rows": 4});
        assert_eq!(conf_for(&args, None).unwrap(), args);
        assert_eq!(
            conf_for(&args, Some("input")).unwrap(),
            json!({"input": args})
        );
        assert!(conf_for(&json!(3), None).is_err());
        let queued = run("trigger_queued");
        assert!(same_conf(
            queued.conf.as_ref(),
            &json!({"dataset": "sales", "rows": 4})
        ));
        assert!(!same_conf(
            queued.conf.as_ref(),
            &json!({"dataset": "sales", "rows": 5})
        ));
        assert!(same_conf(None, &json!({})));
    }

    #[test]
    fn params_suggest_and_check_the_input_schema() {
        let details = body("dag_details_success");
        let params = details["params"].as_object().unwrap();
        let suggested = suggest_input_schema(params);
        assert_eq!(
            suggested,
            json!({"type": "object", "properties": {
                "dataset": {"type": "string", "description": "The dataset to process", "default": "demo"},
                "rows": {"type": "integer", "minimum": 0, "default": 3}}})
        );
        assert!(compare_params(&suggested, params).is_empty());
        // A param without a value is required, unless its schema takes null.
        let nullable = json!({
            "owner": {"value": null, "schema": {"type": ["null", "string"]}, "description": null},
            "ticket": {"value": null, "schema": {"type": "string"}, "description": null},
        });
        assert_eq!(
            suggest_input_schema(nullable.as_object().unwrap())["required"],
            json!(["ticket"])
        );
        let wrong = json!({"type": "object", "properties": {"dataset": {"type": "integer"}, "extra": {"type": "string"}}});
        let problems = compare_params(&wrong, params);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(body("dag_paused")["is_paused"], true);
    }

    #[test]
    fn unknown_states_are_failures() {
        let mut r = run("run_success");
        r.state = "exploded".into();
        assert!(matches!(
            run_state(&r, &Observed::default()),
            RunState::Failed { .. }
        ));
    }
}
