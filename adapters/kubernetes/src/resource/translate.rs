//! The pure half of a `resource` target: the object a start creates, an object
//! read back as a snapshot (phase, progress, message, result, failed nodes),
//! Argo's suspended nodes as input requests and the patch that answers one.
//! No I/O here: every function is a table test away.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};
use taskgate_engine::{
    spec_hash, EngineError, Progress, RunState, Snapshot, StartRequest, ToolOutput, TraceContext,
};

use super::config::{at_path, parse_place, BoundResource};
use crate::translate::{
    canonical, label_value, ANN_CANCELLED, ANN_SPEC_HASH, ANN_TRACEPARENT, ANN_TRACESTATE,
    LABEL_CALLER, LABEL_RUN, LABEL_TOOL,
};

/// The most bytes of one argument value placed into an object.
const MAX_ARGUMENT_BYTES: usize = 64 * 1024;

/// Sets the value at `keys` (objects made on the way).
pub(super) fn set_path(root: &mut Value, keys: &[String], value: Value) {
    let mut at = root;
    for k in keys {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        at = at
            .as_object_mut()
            .expect("an object")
            .entry(k.clone())
            .or_insert(Value::Null);
    }
    *at = value;
}

fn argument_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => canonical(other).to_string(),
    }
}

/// The object a start creates: the template with the arguments at their places,
/// the run name, namespace, labels, spec hash and TTL. An argument with no
/// declared place, or a string holding `{{` (template syntax a controller would
/// expand), is refused before anything reaches the cluster.
pub(crate) fn render_object(
    bound: &BoundResource,
    tool: &str,
    namespace: &str,
    request: &StartRequest,
    keep_alive: Option<Duration>,
) -> Result<Value, EngineError> {
    let mut object = bound.template.clone();
    let empty = Map::new();
    let arguments = request.arguments.as_object().unwrap_or(&empty);
    for (name, value) in arguments {
        let Some(places) = bound.places.get(name) else {
            return Err(EngineError::InvalidInput {
                message: format!("argument {name:?} has no declared place in the object"),
            });
        };
        let text = argument_text(value);
        if text.contains("{{") {
            return Err(EngineError::InvalidInput {
                message: format!("argument {name:?} holds template syntax (`{{{{`)"),
            });
        }
        if text.len() > MAX_ARGUMENT_BYTES {
            return Err(EngineError::InvalidInput {
                message: format!("argument {name:?} is larger than {MAX_ARGUMENT_BYTES} bytes"),
            });
        }
        for place in places {
            match &place.named {
                None => set_path(&mut object, &place.keys, canonical(value)),
                Some(element) => {
                    let mut list = place
                        .keys
                        .iter()
                        .try_fold(&object, |v, k| v.get(k))
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    match list
                        .iter_mut()
                        .find(|e| e.get("name").and_then(Value::as_str) == Some(element))
                    {
                        Some(e) => e["value"] = json!(text),
                        None => list.push(json!({"name": element, "value": text})),
                    }
                    set_path(&mut object, &place.keys, Value::Array(list));
                }
            }
        }
    }
    if let (Some(path), Some(keep)) = (&bound.ttl_path, keep_alive) {
        if let Ok(place) = parse_place(path) {
            set_path(&mut object, &place.keys, json!(keep.as_secs()));
        }
    }
    let hash = spec_hash(canonical(&object["spec"]).to_string().as_bytes());
    let meta = &mut object["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["name"] = json!(request.run_name);
    meta["namespace"] = json!(namespace);
    if let Some(m) = meta.as_object_mut() {
        m.remove("generateName");
    }
    for (k, v) in [
        (LABEL_TOOL, label_value(tool)),
        (LABEL_CALLER, request.caller_tag.clone()),
        (LABEL_RUN, request.run_name.clone()),
    ] {
        set_path(meta, &["labels".into(), k.into()], json!(v));
    }
    set_path(
        meta,
        &["annotations".into(), ANN_SPEC_HASH.into()],
        json!(hash),
    );
    add_trace(bound, &mut object, request.trace.as_ref());
    Ok(object)
}

/// Carries the trace context into a rendered object, after its spec hash is
/// taken (a retried start under another trace finds the same object): the
/// annotations `taskgate.io/traceparent` and `taskgate.io/tracestate`, and the
/// `trace_parameter` (the `traceparent`, or empty without one). Never a label.
fn add_trace(bound: &BoundResource, object: &mut Value, trace: Option<&TraceContext>) {
    if let Some(trace) = trace {
        let meta = &mut object["metadata"];
        set_path(
            meta,
            &["annotations".into(), ANN_TRACEPARENT.into()],
            json!(trace.traceparent()),
        );
        if let Some(state) = trace.tracestate() {
            set_path(
                meta,
                &["annotations".into(), ANN_TRACESTATE.into()],
                json!(state),
            );
        }
    }
    if let Some(name) = &bound.trace_parameter {
        let keys: Vec<String> = vec!["spec".into(), "arguments".into(), "parameters".into()];
        let value = trace.map_or("", TraceContext::traceparent);
        let mut list = keys
            .iter()
            .try_fold(&*object, |v, k| v.get(k))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        list.retain(|e| e.get("name").and_then(Value::as_str) != Some(name.as_str()));
        list.push(json!({"name": name, "value": value}));
        set_path(object, &keys, Value::Array(list));
    }
}

/// An annotation of an object.
pub(super) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(key)?
        .as_str()
}

/// A label of an object.
pub(super) fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.get("metadata")?.get("labels")?.get(key)?.as_str()
}

/// "3/5" → 3 of 5.
fn progress(text: &str) -> Option<Progress> {
    let (done, total) = text.split_once('/')?;
    Some(Progress {
        done: done.trim().parse().ok()?,
        total: Some(total.trim().parse().ok()?),
    })
}

/// The result at `result_path`: a list of `{name, value}` becomes an object.
fn result_value(value: &Value) -> Option<Value> {
    match value {
        Value::Array(items) => {
            let mut out = Map::new();
            for item in items {
                let name = item.get("name")?.as_str()?;
                out.insert(
                    name.to_owned(),
                    item.get("value").cloned().unwrap_or(Value::Null),
                );
            }
            Some(Value::Object(out))
        }
        Value::Object(_) => Some(value.clone()),
        _ => None,
    }
}

/// The failed leaf nodes, "`step` (Failed): message", in name order.
fn failed_nodes(nodes: &Value) -> Vec<String> {
    let Some(nodes) = nodes.as_object() else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = nodes
        .values()
        .filter(|n| {
            matches!(
                n.get("phase").and_then(Value::as_str),
                Some("Failed" | "Error")
            ) && n
                .get("children")
                .is_none_or(|c| c.as_array().is_none_or(Vec::is_empty))
        })
        .map(|n| {
            let name = n
                .get("displayName")
                .or_else(|| n.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let phase = n.get("phase").and_then(Value::as_str).unwrap_or_default();
            let message = n.get("message").and_then(Value::as_str).unwrap_or_default();
            (name.clone(), format!("step `{name}` {phase}: {message}"))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, m)| m).collect()
}

/// Argo's running `Suspend` nodes, by node id.
fn waiting_nodes(object: &Value) -> Vec<(&String, &Value)> {
    at_path(object, "status.nodes")
        .and_then(Value::as_object)
        .map(|nodes| {
            nodes
                .iter()
                .filter(|(_, n)| {
                    n.get("type").and_then(Value::as_str) == Some("Suspend")
                        && n.get("phase").and_then(Value::as_str) == Some("Running")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The parameters a suspended node waits for (`valueFrom.supplied`).
fn supplied_parameters(node: &Value) -> Vec<&Value> {
    node.get("outputs")
        .and_then(|o| o.get("parameters"))
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter(|p| p.get("valueFrom").and_then(|v| v.get("supplied")).is_some())
                .collect()
        })
        .unwrap_or_default()
}

/// One input request per running `Suspend` node (key: the node id): a flat
/// object schema of its supplied parameters — strings, with the parameter's
/// `enum`, `description` and `default`. An approval: the server's approver
/// rules (`answer_access`, `four_eyes`) apply.
fn suspend_requests(object: &Value) -> BTreeMap<String, taskgate_engine::InputRequest> {
    let mut out = BTreeMap::new();
    for (id, node) in waiting_nodes(object) {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for p in supplied_parameters(node) {
            let Some(name) = p.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut prop = json!({"type": "string"});
            if let Some(e) = p.get("enum").filter(|e| e.is_array()) {
                prop["enum"] = e.clone();
            }
            if let Some(d) = p.get("description").and_then(Value::as_str) {
                prop["description"] = json!(d);
            }
            match p.get("default").and_then(Value::as_str) {
                Some(d) => prop["default"] = json!(d),
                None => required.push(json!(name)),
            }
            properties.insert(name.to_owned(), prop);
        }
        let step = node
            .get("displayName")
            .and_then(Value::as_str)
            .unwrap_or(id.as_str());
        let message = match node.get("message").and_then(Value::as_str) {
            Some(m) if !m.is_empty() => format!("Workflow step `{step}` waits for a person: {m}"),
            _ => format!("Workflow step `{step}` waits for a person"),
        };
        out.insert(
            id.clone(),
            taskgate_engine::InputRequest {
                message,
                requested_schema: json!({"type": "object", "properties": properties, "required": required}),
                approval: true,
            },
        );
    }
    out
}

/// The merge patch that answers the suspended node `id` as Argo's own `resume`
/// (accept: the supplied parameters set, the node `Succeeded`) or `stop` of the
/// node (decline: the node `Failed`) does. The answer must give a string for
/// each parameter without a default, within its `enum`.
pub(crate) fn answer_patch(
    object: &Value,
    id: &str,
    accept: Option<&Value>,
    now: &str,
) -> Result<Value, EngineError> {
    let Some((_, node)) = waiting_nodes(object)
        .into_iter()
        .find(|(k, _)| k.as_str() == id)
    else {
        return Err(EngineError::Conflict {
            message: format!("input request {id:?} is not outstanding"),
        });
    };
    let version = at_path(object, "metadata.resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let Some(content) = accept else {
        return Ok(json!({
            "metadata": {"resourceVersion": version},
            "status": {"nodes": {id: {"phase": "Failed", "finishedAt": now,
                                       "message": "declined through taskgate"}}},
        }));
    };
    let out = answered_parameters(node, content)?;
    Ok(json!({
        "metadata": {"resourceVersion": version},
        "status": {"nodes": {id: {"phase": "Succeeded", "finishedAt": now,
                                   "message": "resumed through taskgate",
                                   "outputs": {"parameters": out}}}},
    }))
}

/// The node's output parameters with the answer's values set where the node
/// asks for one (`valueFrom.supplied`); a key it does not ask for is refused.
fn answered_parameters(node: &Value, content: &Value) -> Result<Vec<Value>, EngineError> {
    let empty = Map::new();
    let given = content.as_object().unwrap_or(&empty);
    let params: Vec<Value> = node
        .get("outputs")
        .and_then(|o| o.get("parameters"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let supplied: Vec<&str> = supplied_parameters(node)
        .iter()
        .filter_map(|p| p.get("name").and_then(Value::as_str))
        .collect();
    for key in given.keys() {
        if !supplied.contains(&key.as_str()) {
            return Err(EngineError::InvalidInput {
                message: format!("the step does not ask for {key:?}"),
            });
        }
    }
    let mut out = Vec::new();
    for mut p in params {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if supplied.contains(&name.as_str()) {
            let value = answered_value(&p, &name, given)?;
            p["value"] = json!(value);
            if let Some(o) = p.as_object_mut() {
                o.remove("valueFrom");
            }
        }
        out.push(p);
    }
    Ok(out)
}

/// The answer's value for the supplied parameter `p` (named `name`): a string
/// (else its default), within its `enum`, without template syntax.
fn answered_value(
    p: &Value,
    name: &str,
    given: &Map<String, Value>,
) -> Result<String, EngineError> {
    let value = match (given.get(name), p.get("default").and_then(Value::as_str)) {
        (Some(Value::String(v)), _) => v.clone(),
        (Some(_), _) => {
            return Err(EngineError::InvalidInput {
                message: format!("{name:?} must be a string"),
            })
        }
        (None, Some(d)) => d.to_owned(),
        (None, None) => {
            return Err(EngineError::InvalidInput {
                message: format!("{name:?} is required"),
            })
        }
    };
    if let Some(allowed) = p.get("enum").and_then(Value::as_array) {
        if !allowed.iter().any(|a| a.as_str() == Some(value.as_str())) {
            return Err(EngineError::InvalidInput {
                message: format!("{name:?} must be one of {}", Value::Array(allowed.clone())),
            });
        }
    }
    if value.contains("{{") {
        return Err(EngineError::InvalidInput {
            message: format!("{name:?} holds template syntax (`{{{{`)"),
        });
    }
    Ok(value)
}

/// Translates an object into a snapshot (pure).
#[must_use]
pub(crate) fn snapshot_of(bound: &BoundResource, object: &Value) -> Snapshot {
    let message = bound
        .message_path
        .as_deref()
        .and_then(|p| at_path(object, p))
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_owned);
    let phase = at_path(object, &bound.phase.path)
        .and_then(Value::as_str)
        .unwrap_or_default();
    let state = if annotation(object, ANN_CANCELLED) == Some("true") {
        RunState::Cancelled {
            message: Some("stopped by a cancel".into()),
        }
    } else if bound.phase.cancelled.iter().any(|v| v == phase) {
        RunState::Cancelled { message }
    } else if bound.phase.completed.iter().any(|v| v == phase) {
        let name = at_path(object, "metadata.name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let structured = bound
            .result_path
            .as_deref()
            .and_then(|p| at_path(object, &p.replace("{name}", name)))
            .and_then(result_value);
        let text = match &structured {
            Some(v) => v.to_string(),
            None => message.unwrap_or_else(|| phase.to_owned()),
        };
        RunState::Completed(ToolOutput {
            structured,
            ..ToolOutput::text(text)
        })
    } else if bound.phase.failed.iter().any(|v| v == phase) {
        let mut lines = vec![match &message {
            Some(m) => format!("{phase}: {m}"),
            None => phase.to_owned(),
        }];
        if let Some(nodes) = bound.nodes_path.as_deref().and_then(|p| at_path(object, p)) {
            lines.extend(failed_nodes(nodes));
        }
        RunState::Completed(ToolOutput::error(lines.join("\n")))
    } else if let Some(requests) = bound
        .suspend_nodes
        .then(|| suspend_requests(object))
        .filter(|r| !r.is_empty())
    {
        RunState::InputRequired {
            requests,
            message: Some(match message {
                Some(m) => format!("waiting for a person: {m}"),
                None => "waiting for a person".to_owned(),
            }),
        }
    } else {
        let progress = bound
            .progress_path
            .as_deref()
            .and_then(|p| at_path(object, p))
            .and_then(Value::as_str)
            .and_then(progress);
        let base = if phase.is_empty() { "pending" } else { phase };
        RunState::Working {
            message: Some(match message {
                Some(m) => format!("{base}: {m}"),
                None => base.to_owned(),
            }),
            progress,
        }
    };
    Snapshot::new(state)
}

/// Completed, failed or cancelled: nothing more will change.
pub(super) fn is_finished(state: &RunState) -> bool {
    matches!(
        state,
        RunState::Completed(_) | RunState::Cancelled { .. } | RunState::Failed { .. }
    )
}

#[cfg(test)]
mod tests {
    use kube::core::DynamicObject;

    use super::super::config::tests::{bound, WF};
    use super::*;

    fn request(arguments: Value) -> StartRequest {
        StartRequest {
            run_name: "tg-run-1".into(),
            arguments,
            caller_tag: "0123456789abcdef".into(),
            keep_alive: Some(Duration::from_secs(600)),
            trace: None,
        }
    }

    #[test]
    fn arguments_enter_only_at_their_places() {
        let b = bound(json!({"preset": "argo-workflow", "template": WF})).unwrap();
        let o = render_object(
            &b,
            "build",
            "jobs",
            &request(json!({"limit": 5, "dataset": "sales"})),
            Some(Duration::from_secs(600)),
        )
        .unwrap();
        assert_eq!(
            o["spec"]["arguments"]["parameters"],
            json!([{"name": "dataset", "value": "sales"}, {"name": "limit", "value": "5"}])
        );
        assert_eq!(o["metadata"]["name"], "tg-run-1");
        assert_eq!(o["metadata"]["namespace"], "jobs");
        assert_eq!(o["metadata"]["labels"][LABEL_TOOL], "build");
        assert_eq!(o["spec"]["ttlStrategy"]["secondsAfterCompletion"], 600);
        let hash = o["metadata"]["annotations"][ANN_SPEC_HASH].clone();
        // The same arguments in another order: the same hash; others: another.
        let again = render_object(
            &b,
            "build",
            "jobs",
            &request(json!({"dataset": "sales", "limit": 5})),
            Some(Duration::from_secs(600)),
        )
        .unwrap();
        assert_eq!(again["metadata"]["annotations"][ANN_SPEC_HASH], hash);
        let other = render_object(
            &b,
            "build",
            "jobs",
            &request(json!({"dataset": "x"})),
            Some(Duration::from_secs(600)),
        )
        .unwrap();
        assert_ne!(other["metadata"]["annotations"][ANN_SPEC_HASH], hash);
        // Refused before reaching the cluster.
        for bad in [
            json!({"serviceAccountName": "admin"}),
            json!({"dataset": "{{workflow.name}}"}),
            json!({"dataset": ["{{=sprig.env('X')}}"]}),
            json!({"dataset": "x".repeat(MAX_ARGUMENT_BYTES + 1)}),
        ] {
            assert!(
                matches!(
                    render_object(&b, "build", "jobs", &request(bad.clone()), None),
                    Err(EngineError::InvalidInput { .. })
                ),
                "{bad}"
            );
        }
    }

    /// The trace context goes into annotations and, when the tool names one,
    /// the Argo parameter; never into a label or the spec hash. A parameter an
    /// argument fills, or one without an Argo preset, is refused at bind.
    #[test]
    fn the_trace_context_enters_annotations_and_the_declared_parameter() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let b = bound(
            json!({"preset": "argo-workflow", "template": WF, "trace_parameter": "traceparent"}),
        )
        .unwrap();
        let plain =
            render_object(&b, "build", "jobs", &request(json!({"dataset": "s"})), None).unwrap();
        let mut traced = request(json!({"dataset": "s"}));
        traced.trace = Some(TraceContext::new(TP, Some("vendor=abc")).unwrap());
        let o = render_object(&b, "build", "jobs", &traced, None).unwrap();
        assert_eq!(o["metadata"]["annotations"][ANN_TRACEPARENT], TP);
        assert_eq!(o["metadata"]["annotations"][ANN_TRACESTATE], "vendor=abc");
        assert_eq!(
            o["spec"]["arguments"]["parameters"],
            json!([{"name": "dataset", "value": "s"}, {"name": "traceparent", "value": TP}])
        );
        assert_eq!(
            plain["spec"]["arguments"]["parameters"][1],
            json!({"name": "traceparent", "value": ""})
        );
        assert!(plain["metadata"]["annotations"]
            .get(ANN_TRACEPARENT)
            .is_none());
        assert_eq!(
            o["metadata"]["annotations"][ANN_SPEC_HASH],
            plain["metadata"]["annotations"][ANN_SPEC_HASH]
        );
        assert!(!o["metadata"]["labels"].to_string().contains("4bf92f35"));
        // Without a parameter: annotations only, spec untouched.
        let b = bound(json!({"preset": "argo-workflow", "template": WF})).unwrap();
        let o = render_object(&b, "build", "jobs", &traced, None).unwrap();
        assert_eq!(o["metadata"]["annotations"][ANN_TRACEPARENT], TP);
        assert!(!o["spec"].to_string().contains(TP));
        for bad in [
            json!({"preset": "argo-workflow", "template": WF, "trace_parameter": "dataset"}),
            json!({"preset": "argo-workflow", "template": WF, "trace_parameter": "a b"}),
            json!({"preset": "argo-workflow", "template": WF, "trace_parameter": "t",
                   "arguments": [{"argument": "dataset", "path": "spec.arguments.parameters[t]"}]}),
            json!({"api_version": "ray.io/v1", "kind": "RayJob", "template": "spec: {}",
                   "phase": {"path": "status.jobStatus", "completed": ["SUCCEEDED"]},
                   "trace_parameter": "t"}),
        ] {
            let err = bound(bad.clone()).unwrap_err();
            assert!(err.to_string().contains("trace_parameter"), "{bad}: {err}");
        }
    }

    #[test]
    fn argo_states_translate() {
        let b = bound(json!({"preset": "argo-workflow", "template": WF})).unwrap();
        let state = |o: Value| snapshot_of(&b, &o).state;
        match state(json!({"status": {"phase": "Running", "progress": "3/5"}})) {
            RunState::Working { message, progress } => {
                assert_eq!(message.as_deref(), Some("Running"));
                assert_eq!(
                    progress,
                    Some(Progress {
                        done: 3.0,
                        total: Some(5.0)
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(state(json!({})), RunState::Working { .. }));
        match state(
            json!({"metadata": {"name": "wf"}, "status": {"phase": "Succeeded", "nodes": {"wf": {"outputs": {"parameters": [{"name": "report", "value": "42"}]}}}}}),
        ) {
            RunState::Completed(out) => {
                assert!(!out.is_error);
                assert_eq!(out.structured, Some(json!({"report": "42"})));
            }
            other => panic!("{other:?}"),
        }
        match state(
            json!({"status": {"phase": "Failed", "message": "child 'x' failed", "nodes": {
            "a": {"displayName": "wf", "phase": "Failed", "children": ["b"]},
            "b": {"displayName": "build", "phase": "Failed", "message": "Error (exit code 3)"},
            "c": {"displayName": "ok", "phase": "Succeeded"}}}}),
        ) {
            RunState::Completed(out) => {
                assert!(out.is_error);
                let text = format!("{:?}", out.content);
                assert!(
                    text.contains("step `build` Failed: Error (exit code 3)"),
                    "{text}"
                );
                assert!(!text.contains("`wf`") && !text.contains("`ok`"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        // The cancel's mark wins over what the controller makes of the stop.
        assert!(matches!(
            state(
                json!({"metadata": {"annotations": {ANN_CANCELLED: "true"}}, "status": {"phase": "Failed", "message": "Stopped with strategy 'Stop'"}})
            ),
            RunState::Cancelled { .. }
        ));
    }

    #[test]
    fn a_suspended_node_asks_and_the_answer_resumes_or_fails_it() {
        let b = bound(json!({"preset": "argo-workflow", "template": WF})).unwrap();
        let object = json!({"metadata": {"resourceVersion": "7"}, "status": {"phase": "Running", "nodes": {
            "wf-1": {"displayName": "approve", "type": "Suspend", "phase": "Running",
                     "outputs": {"parameters": [
                        {"name": "decision", "enum": ["ship", "hold"], "description": "Ship?", "valueFrom": {"supplied": {}}},
                        {"name": "note", "default": "none", "valueFrom": {"supplied": {}}},
                        {"name": "fixed", "value": "x"}]}},
            "wf-0": {"displayName": "wf", "type": "Steps", "phase": "Running"}}}});
        let RunState::InputRequired { requests, .. } = snapshot_of(&b, &object).state else {
            panic!("not input required");
        };
        let r = &requests["wf-1"];
        assert!(r.approval);
        assert!(r.message.contains("`approve`"));
        assert_eq!(
            r.requested_schema["properties"]["decision"],
            json!({"type": "string", "enum": ["ship", "hold"], "description": "Ship?"})
        );
        assert_eq!(r.requested_schema["properties"]["note"]["default"], "none");
        assert_eq!(r.requested_schema["required"], json!(["decision"]));
        assert!(r.requested_schema["properties"].get("fixed").is_none());

        let now = "2026-12-07T00:00:00Z";
        let patch = answer_patch(&object, "wf-1", Some(&json!({"decision": "ship"})), now).unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let node = &patch["status"]["nodes"]["wf-1"];
        assert_eq!(node["phase"], "Succeeded");
        assert_eq!(
            node["outputs"]["parameters"],
            json!([
            {"name": "decision", "enum": ["ship", "hold"], "description": "Ship?", "value": "ship"},
            {"name": "note", "default": "none", "value": "none"},
            {"name": "fixed", "value": "x"}])
        );
        let declined = answer_patch(&object, "wf-1", None, now).unwrap();
        assert_eq!(declined["status"]["nodes"]["wf-1"]["phase"], "Failed");
        for bad in [
            json!({"decision": "maybe"}),
            json!({}),
            json!({"decision": 1}),
            json!({"decision": "ship", "fixed": "y"}),
            json!({"decision": "ship", "note": "{{x}}"}),
        ] {
            assert!(
                matches!(
                    answer_patch(&object, "wf-1", Some(&bad), now),
                    Err(EngineError::InvalidInput { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            answer_patch(&object, "wf-0", None, now),
            Err(EngineError::Conflict { .. })
        ));
    }

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/argo/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn captured_workflows_translate() {
        let b = bound(json!({"preset": "argo-workflow", "template": WF})).unwrap();
        let object = fixture("workflow-suspended.json");
        // Through DynamicObject, as the pipeline reads it.
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        let object = serde_json::to_value(dynamic).unwrap();
        match snapshot_of(&b, &object).state {
            RunState::InputRequired { requests, .. } => {
                let (key, r) = requests.iter().next().unwrap();
                assert!(key.ends_with("-57393458"), "{key}");
                assert_eq!(
                    r.requested_schema["properties"]["decision"]["enum"],
                    json!(["ship", "hold"])
                );
            }
            other => panic!("{other:?}"),
        }
        // Captured from the controller after taskgate's test acted as the
        // executor (WorkflowTaskResult): the root node carries the outputs.
        match snapshot_of(&b, &fixture("workflow-ok.json")).state {
            RunState::Completed(out) => {
                assert!(!out.is_error);
                assert_eq!(out.structured, Some(json!({"report": "42 rows"})));
            }
            other => panic!("{other:?}"),
        }
        // A step failed with exit code 3 under kwok: the step is named.
        match snapshot_of(&b, &fixture("workflow-failed.json")).state {
            RunState::Completed(out) => {
                assert!(out.is_error);
                let text = format!("{:?}", out.content);
                assert!(
                    text.contains("step `build` Failed: main: Error (exit code 3)"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
