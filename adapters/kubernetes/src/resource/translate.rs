//! `resource` targets of the Kubernetes engine (issue 38): a tool runs an object
//! of any kind — an Argo Workflow first — described by configuration: where the
//! arguments go, where the phase, progress, message and result are, and what
//! patch cancels it. Jobs keep their own target (`lib.rs`): their pod-level
//! results, approval gate and deadline-based cancel are specific to them.
//!
//! A tool target is a resource target when it names `preset` or `kind`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use taskgate_engine::{
    async_trait, spec_hash, Capabilities, ConfigError, EngineError, LogLine, LogPage, NativeRef,
    Pipeline, Progress, RunState, Snapshot, StartRequest, ToolDecl, ToolOutput, MAX_PAGE_BYTES,
};

use crate::api::{Created, KubeClient};
use crate::config::check_dns_label;
use crate::logs;
use crate::translate::{
    canonical, label_value, ANN_CANCELLED, ANN_SPEC_HASH, LABEL_CALLER, LABEL_RUN, LABEL_TOOL,
};
use crate::MAX_LOG_SOURCES_PER_READ;

/// The most bytes of one argument value placed into an object.
const MAX_ARGUMENT_BYTES: usize = 64 * 1024;

/// True when a tool target is a `resource` target (it names `preset` or `kind`).
#[must_use]
pub(crate) fn is_resource_target(target: &Value) -> bool {
    target.get("preset").is_some() || target.get("kind").is_some()
}

/// Named configurations of well-known resource kinds.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Preset {
    /// An Argo `Workflow` (`argoproj.io/v1alpha1`) from the tool's template.
    #[serde(rename = "argo-workflow")]
    ArgoWorkflow,
    /// An Argo `Workflow` that runs a `WorkflowTemplate` by reference
    /// (`spec.workflowTemplateRef.name` = `workflow_template`).
    #[serde(rename = "argo-workflow-template")]
    ArgoWorkflowTemplate,
}

/// Where one argument enters the object.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArgumentPlace {
    /// The argument (a top-level property of the tool's input).
    pub argument: String,
    /// A dotted path under `spec`: `spec.a.b` sets the value there (as JSON);
    /// `spec.a.list[NAME]` sets the `value` of the element of the array `list`
    /// whose `name` is NAME (made when missing) to the value as a string —
    /// Argo's `spec.arguments.parameters[NAME]`.
    pub path: String,
}

/// Which values of the phase mean what.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PhaseMapping {
    /// The dotted path of the phase (`status.phase`).
    pub path: String,
    /// Values meaning the run finished well.
    #[serde(default)]
    pub completed: Vec<String>,
    /// Values meaning the run finished badly (a tool error).
    #[serde(default)]
    pub failed: Vec<String>,
    /// Values meaning the run was cancelled (besides taskgate's own mark).
    #[serde(default)]
    pub cancelled: Vec<String>,
}

/// A resource tool target (`target = { preset = "argo-workflow", template_file = … }`).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ResourceTarget {
    /// `argo-workflow` or `argo-workflow-template`: fills every key below that is
    /// not set.
    pub preset: Option<Preset>,
    /// The object's `apiVersion` (`argoproj.io/v1alpha1`).
    pub api_version: Option<String>,
    /// The object's `kind` (`Workflow`).
    pub kind: Option<String>,
    /// The resource's plural name (default: the kind lower-cased, plus `s`).
    pub plural: Option<String>,
    /// A YAML (or JSON) file holding the object (relative to the folder taskgate
    /// starts in).
    pub template_file: Option<PathBuf>,
    /// The object inline, as YAML text. Exactly one of `template_file`,
    /// `template` and (preset `argo-workflow-template`) `workflow_template`.
    pub template: Option<String>,
    /// Preset `argo-workflow-template`: the `WorkflowTemplate` to run.
    pub workflow_template: Option<String>,
    /// Where each argument enters the object; an argument with no place is
    /// refused. Argo presets: every top-level property of the input schema →
    /// `spec.arguments.parameters[NAME]`.
    pub arguments: Option<Vec<ArgumentPlace>>,
    /// The phase and its values; anything else reads as working.
    pub phase: Option<PhaseMapping>,
    /// The dotted path of a progress value "done/total" (Argo `status.progress`).
    pub progress_path: Option<String>,
    /// The dotted path of a status message (Argo `status.message`).
    pub message_path: Option<String>,
    /// The dotted path of the result; `{name}` stands for the object's name
    /// (Argo `status.nodes.{name}.outputs.parameters`, the root node's outputs:
    /// a list of `{name, value}` becomes an object).
    pub result_path: Option<String>,
    /// The dotted path of a map of nodes whose failed ones explain a failure
    /// (Argo `status.nodes`: each node's `displayName`, `phase`, `message`).
    pub nodes_path: Option<String>,
    /// The merge patch that cancels a run (Argo: `{ spec = { shutdown = "Stop" } }`);
    /// taskgate adds the annotation `taskgate.io/cancelled: "true"` to it.
    pub cancel_patch: Option<Value>,
    /// The dotted path under `spec` that receives the keep_alive in seconds
    /// (Argo `spec.ttlStrategy.secondsAfterCompletion`).
    pub ttl_path: Option<String>,
    /// The label that the run's pods carry with the object's name as value
    /// (Argo `workflows.argoproj.io/workflow`): logs read those pods.
    pub pod_label: Option<String>,
}

/// A validated resource target.
#[derive(Debug, Clone)]
pub(crate) struct BoundResource {
    pub(crate) api: ApiResource,
    pub(crate) template: Value,
    pub(crate) places: BTreeMap<String, Vec<Place>>,
    pub(crate) phase: PhaseMapping,
    pub(crate) progress_path: Option<String>,
    pub(crate) message_path: Option<String>,
    pub(crate) result_path: Option<String>,
    pub(crate) nodes_path: Option<String>,
    pub(crate) cancel_patch: Value,
    pub(crate) ttl_path: Option<String>,
    pub(crate) pod_label: Option<String>,
    /// Argo presets: a running `Suspend` node is a question for a person.
    pub(crate) suspend_nodes: bool,
}

/// A parsed argument path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Place {
    /// Object keys from the root.
    pub(crate) keys: Vec<String>,
    /// `list[NAME]` at the end: the named element of the array at `keys`.
    pub(crate) named: Option<String>,
}

fn key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 63
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

/// Parses `spec.a.b` or `spec.a.list[NAME]`; only paths under `spec`.
pub(crate) fn parse_place(path: &str) -> Result<Place, String> {
    let mut keys: Vec<String> = Vec::new();
    let mut named = None;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if let Some((key, rest)) = part.split_once('[') {
            let name = rest
                .strip_suffix(']')
                .filter(|n| key_ok(n))
                .ok_or_else(|| format!("{path:?}: a selector is `list[NAME]`"))?;
            if i + 1 != parts.len() {
                return Err(format!("{path:?}: `[NAME]` may only end a path"));
            }
            if !key_ok(key) {
                return Err(format!("{path:?}: {key:?} is not a plain key"));
            }
            keys.push(key.to_owned());
            named = Some(name.to_owned());
        } else if key_ok(part) {
            keys.push((*part).to_owned());
        } else {
            return Err(format!("{path:?}: {part:?} is not a plain key"));
        }
    }
    if keys.first().map(String::as_str) != Some("spec") || keys.len() < 2 {
        return Err(format!(
            "{path:?}: arguments may only go under `spec` (never metadata or status)"
        ));
    }
    Ok(Place { keys, named })
}

/// The value at a dotted path (`status.outputs.parameters`).
#[must_use]
pub(crate) fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(value, |v, k| v.as_object().and_then(|o| o.get(k)))
}

fn set_path(root: &mut Value, keys: &[String], value: Value) {
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

impl ResourceTarget {
    fn with_preset(mut self, tool: &ToolDecl) -> Self {
        let Some(preset) = self.preset else {
            return self;
        };
        self.api_version
            .get_or_insert_with(|| "argoproj.io/v1alpha1".into());
        self.kind.get_or_insert_with(|| "Workflow".into());
        self.plural.get_or_insert_with(|| "workflows".into());
        if self.arguments.is_none() {
            let names = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default();
            self.arguments = Some(
                names
                    .into_iter()
                    .map(|n| ArgumentPlace {
                        path: format!("spec.arguments.parameters[{n}]"),
                        argument: n,
                    })
                    .collect(),
            );
        }
        self.phase.get_or_insert_with(|| PhaseMapping {
            path: "status.phase".into(),
            completed: vec!["Succeeded".into()],
            failed: vec!["Failed".into(), "Error".into()],
            cancelled: vec![],
        });
        self.progress_path
            .get_or_insert_with(|| "status.progress".into());
        self.message_path
            .get_or_insert_with(|| "status.message".into());
        // Argo keeps the entrypoint's outputs on the root node (id = the name).
        self.result_path
            .get_or_insert_with(|| "status.nodes.{name}.outputs.parameters".into());
        self.nodes_path.get_or_insert_with(|| "status.nodes".into());
        self.cancel_patch
            .get_or_insert_with(|| json!({"spec": {"shutdown": "Stop"}}));
        self.ttl_path
            .get_or_insert_with(|| "spec.ttlStrategy.secondsAfterCompletion".into());
        self.pod_label
            .get_or_insert_with(|| "workflows.argoproj.io/workflow".into());
        if preset == Preset::ArgoWorkflowTemplate && self.template.is_none() {
            if let Some(name) = &self.workflow_template {
                self.template = Some(
                    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                           "spec": {"workflowTemplateRef": {"name": name}}})
                    .to_string(),
                );
            }
        }
        self
    }

    /// Resolves the preset, reads the template and checks every path.
    pub(crate) fn validate(
        self,
        tool: &ToolDecl,
        namespace: &str,
    ) -> Result<BoundResource, ConfigError> {
        let preset = self.preset;
        if self.workflow_template.is_some() && preset != Some(Preset::ArgoWorkflowTemplate) {
            return Err(ConfigError::new(
                "workflow_template",
                "only with preset = \"argo-workflow-template\"",
            ));
        }
        if preset == Some(Preset::ArgoWorkflowTemplate) {
            match &self.workflow_template {
                Some(n)
                    if check_dns_label(n).is_ok()
                        || n.split('.').all(|p| check_dns_label(p).is_ok()) => {}
                Some(_) => {
                    return Err(ConfigError::new(
                        "workflow_template",
                        "not a Kubernetes object name",
                    ))
                }
                None => {
                    return Err(ConfigError::new(
                        "workflow_template",
                        "the WorkflowTemplate to run is required",
                    ))
                }
            }
            if self.template.is_some() || self.template_file.is_some() {
                return Err(ConfigError::new(
                    "template",
                    "preset \"argo-workflow-template\" takes `workflow_template`, not a template",
                ));
            }
        }
        let t = self.with_preset(tool);
        let api_version = t
            .api_version
            .clone()
            .ok_or_else(|| ConfigError::new("api_version", "required without a preset"))?;
        let kind = t
            .kind
            .clone()
            .ok_or_else(|| ConfigError::new("kind", "required"))?;
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), api_version.clone()),
        };
        let plural = t
            .plural
            .clone()
            .unwrap_or_else(|| format!("{}s", kind.to_ascii_lowercase()));
        let api = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, &version, &kind),
            &plural,
        );
        let text = match (&t.template, &t.template_file) {
            (Some(text), None) => text.clone(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                ConfigError::new(
                    "template_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?,
            _ => {
                return Err(ConfigError::new(
                    "template_file",
                    "exactly one of `template_file` and `template` is required",
                ))
            }
        };
        let mut template: Value = serde_yaml::from_str(&text)
            .map_err(|e| ConfigError::new("template", format!("not a YAML object: {e}")))?;
        if !template.is_object() {
            return Err(ConfigError::new("template", "not a YAML object"));
        }
        if template
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k != kind)
            || template
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|v| v != api_version)
        {
            return Err(ConfigError::new(
                "template",
                format!("the template is not a {api_version} {kind}"),
            ));
        }
        if let Some(ns) = at_path(&template, "metadata.namespace").and_then(Value::as_str) {
            if ns != namespace {
                return Err(ConfigError::new(
                    "template",
                    format!("the template names namespace {ns}; the engine's is {namespace}"),
                ));
            }
        }
        template["apiVersion"] = json!(api_version);
        template["kind"] = json!(kind);
        let mut places: BTreeMap<String, Vec<Place>> = BTreeMap::new();
        for p in t.arguments.clone().unwrap_or_default() {
            let place = parse_place(&p.path).map_err(|m| ConfigError::new("arguments", m))?;
            places.entry(p.argument).or_default().push(place);
        }
        let phase = t
            .phase
            .clone()
            .ok_or_else(|| ConfigError::new("phase", "required without a preset"))?;
        if let Some(ttl) = &t.ttl_path {
            parse_place(ttl).map_err(|m| ConfigError::new("ttl_path", m))?;
        }
        let cancel_patch = t.cancel_patch.clone().unwrap_or_else(|| json!({}));
        if !cancel_patch.is_object() {
            return Err(ConfigError::new(
                "cancel_patch",
                "a table (a JSON merge patch)",
            ));
        }
        Ok(BoundResource {
            api,
            template,
            places,
            phase,
            progress_path: t.progress_path,
            message_path: t.message_path,
            result_path: t.result_path,
            nodes_path: t.nodes_path,
            cancel_patch,
            ttl_path: t.ttl_path,
            pod_label: t.pod_label,
            suspend_nodes: preset.is_some(),
        })
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
    Ok(object)
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(key)?
        .as_str()
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
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
            let value = match (given.get(&name), p.get("default").and_then(Value::as_str)) {
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
                        message: format!(
                            "{name:?} must be one of {}",
                            Value::Array(allowed.clone())
                        ),
                    });
                }
            }
            if value.contains("{{") {
                return Err(EngineError::InvalidInput {
                    message: format!("{name:?} holds template syntax (`{{{{`)"),
                });
            }
            p["value"] = json!(value);
            if let Some(o) = p.as_object_mut() {
                o.remove("valueFrom");
            }
        }
        out.push(p);
    }
    Ok(json!({
        "metadata": {"resourceVersion": version},
        "status": {"nodes": {id: {"phase": "Succeeded", "finishedAt": now,
                                   "message": "resumed through taskgate",
                                   "outputs": {"parameters": out}}}},
    }))
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

fn is_finished(state: &RunState) -> bool {
    matches!(
        state,
        RunState::Completed(_) | RunState::Cancelled { .. } | RunState::Failed { .. }
    )
}

/// A tool bound to a resource target.
#[derive(Debug)]
pub(crate) struct ResourcePipeline {
    pub(crate) client: KubeClient,
    pub(crate) tool: String,
    pub(crate) tool_label: String,
    pub(crate) keep_alive: Option<Duration>,
    pub(crate) bound: BoundResource,
}

impl ResourcePipeline {
    pub(crate) fn bind(
        client: &KubeClient,
        tool: &ToolDecl,
    ) -> Result<Arc<dyn Pipeline>, ConfigError> {
        let target: ResourceTarget = tool.target()?;
        let bound = target
            .validate(tool, client.namespace())
            .map_err(|e| e.within("target"))?;
        Ok(Arc::new(Self {
            client: client.clone(),
            tool: tool.name.clone(),
            tool_label: label_value(&tool.name),
            keep_alive: tool.keep_alive,
            bound,
        }))
    }

    fn to_value(object: DynamicObject) -> Value {
        serde_json::to_value(object).unwrap_or(Value::Null)
    }

    fn own(&self, object: Value) -> Result<Value, EngineError> {
        if label(&object, LABEL_TOOL) == Some(self.tool_label.as_str()) {
            Ok(object)
        } else {
            Err(EngineError::NotFound)
        }
    }

    async fn own_object(&self, run: &str) -> Result<Value, EngineError> {
        check_dns_label(run).map_err(|_| EngineError::NotFound)?;
        let object = self.client.get_object(&self.bound.api, run).await?;
        self.own(Self::to_value(object))
    }

    fn kind(&self) -> &str {
        &self.bound.api.kind
    }
}

#[async_trait]
impl Pipeline for ResourcePipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: self.bound.suspend_nodes,
            idempotent_start: true,
            locate: true,
            logs: self.bound.pod_label.is_some(),
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        check_dns_label(&request.run_name)
            .map_err(|message| EngineError::InvalidInput { message })?;
        let keep_alive = request.keep_alive.or(self.keep_alive);
        let rendered = render_object(
            &self.bound,
            &self.tool,
            self.client.namespace(),
            &request,
            keep_alive,
        )?;
        let object: DynamicObject =
            serde_json::from_value(rendered.clone()).map_err(|e| EngineError::InvalidInput {
                message: format!("the rendered object is not a Kubernetes object: {e}"),
            })?;
        match self
            .client
            .create_object(&self.bound.api, &object, false)
            .await?
        {
            Created::Job => {
                tracing::info!(tool = %self.tool, kind = %self.kind(), "object created");
                Ok(request.run_name)
            }
            Created::AlreadyExists => {
                let existing = Self::to_value(
                    self.client
                        .get_object(&self.bound.api, &request.run_name)
                        .await?,
                );
                let same = label(&existing, LABEL_TOOL) == label(&rendered, LABEL_TOOL)
                    && annotation(&existing, ANN_SPEC_HASH).is_some()
                    && annotation(&existing, ANN_SPEC_HASH) == annotation(&rendered, ANN_SPEC_HASH);
                if same {
                    Ok(request.run_name)
                } else {
                    Err(EngineError::Conflict {
                        message: format!(
                            "a {} named {} already exists with other arguments",
                            self.kind(),
                            request.run_name
                        ),
                    })
                }
            }
        }
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let object = self.own_object(run).await?;
        Ok(snapshot_of(&self.bound, &object))
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let object = self.own_object(run).await?;
        match snapshot_of(&self.bound, &object).state {
            RunState::Cancelled { .. } => return Ok(()),
            s if is_finished(&s) => {
                return Err(EngineError::Conflict {
                    message: format!("the {} has already finished", self.kind()),
                })
            }
            _ => {}
        }
        let mut patch = self.bound.cancel_patch.clone();
        set_path(
            &mut patch,
            &[
                "metadata".into(),
                "annotations".into(),
                ANN_CANCELLED.into(),
            ],
            json!("true"),
        );
        self.client
            .patch_object(&self.bound.api, run, &patch)
            .await?;
        tracing::info!(tool = %self.tool, kind = %self.kind(), "object cancelled");
        Ok(())
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &taskgate_engine::InputResponse,
    ) -> Result<(), EngineError> {
        if !self.bound.suspend_nodes {
            return Err(EngineError::unsupported("answer input"));
        }
        let object = self.own_object(run).await?;
        let accept = match response.action {
            taskgate_engine::InputAction::Accept => {
                Some(response.content.clone().unwrap_or_else(|| json!({})))
            }
            taskgate_engine::InputAction::Decline | taskgate_engine::InputAction::Cancel => None,
        };
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let patch = answer_patch(&object, key, accept.as_ref(), &now)?;
        match self.client.patch_object(&self.bound.api, run, &patch).await {
            Ok(_) => {}
            Err(EngineError::Conflict { .. } | EngineError::NotFound) => {
                return Err(EngineError::Conflict {
                    message: format!("input request {key:?} is not outstanding"),
                })
            }
            Err(e) => return Err(e),
        }
        tracing::info!(tool = %self.tool, kind = %self.kind(), action = ?response.action, "suspended step answered");
        Ok(())
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let Some(pod_label) = &self.bound.pod_label else {
            return Err(EngineError::unsupported("logs"));
        };
        let start = cursor.map(logs::LogCursor::parse).transpose()?;
        let object = self.own_object(run).await?;
        let finished = is_finished(&snapshot_of(&self.bound, &object).state);
        let pods = self
            .client
            .pods_labelled(&format!("{pod_label}={run}"))
            .await?;
        let sources = logs::sources(&pods);
        let start = start.unwrap_or_default();
        let (mut i, mut after) = start.position(&sources);
        let mut cursor = start;
        let mut lines: Vec<LogLine> = Vec::new();
        let mut visited = 0;
        while i < sources.len() && lines.len() < limit && visited < MAX_LOG_SOURCES_PER_READ {
            let source = &sources[i];
            if !source.started {
                break;
            }
            visited += 1;
            let limit_bytes = i64::try_from(MAX_PAGE_BYTES).unwrap_or(i64::MAX);
            let body = match self
                .client
                .pod_log_since(
                    &source.pod,
                    &source.container,
                    logs::since(after),
                    limit_bytes,
                )
                .await
            {
                Ok(body) => body,
                Err(EngineError::NotFound) => {
                    lines.push(LogLine::note(&format!(
                        "{}: the pod is gone",
                        source.name()
                    )));
                    cursor = logs::LogCursor {
                        done: true,
                        ..logs::LogCursor::at(source)
                    };
                    i += 1;
                    after = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let cut = body.len() >= MAX_PAGE_BYTES;
            let chunk = logs::chunk(&body, &source.name(), after, limit - lines.len(), cut);
            lines.extend(chunk.lines);
            cursor = logs::LogCursor {
                after: chunk.after,
                ..logs::LogCursor::at(source)
            };
            if !(chunk.at_end && source.terminated) {
                break;
            }
            cursor.done = true;
            i += 1;
            after = None;
        }
        let complete = finished && i >= sources.len() && sources.iter().all(|s| s.terminated);
        Ok(LogPage {
            lines,
            cursor: cursor.encode(),
            complete,
        })
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        match self.own_object(run_name).await {
            Ok(_) => Ok(Some(run_name.to_owned())),
            Err(EngineError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        let deadline = tokio::time::Instant::now() + wait;
        let object = self.own_object(run).await?;
        let mut current = snapshot_of(&self.bound, &object);
        if current.state != last.state || wait.is_zero() || is_finished(&current.state) {
            return Ok(current);
        }
        let version = at_path(&object, "metadata.resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let stream = self
            .client
            .watch_object(&self.bound.api, run, &version, wait)
            .await?;
        let mut stream = std::pin::pin!(stream);
        loop {
            let event = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) | Ok(None) => break,
                Ok(Some(event)) => event,
            };
            match event {
                Ok(Some(changed)) => {
                    let object = self.own(Self::to_value(changed))?;
                    current = snapshot_of(&self.bound, &object);
                    if current.state != last.state {
                        return Ok(current);
                    }
                }
                Ok(None) => return Err(EngineError::NotFound),
                Err(e) if e.is_retryable() => return self.read(run).await,
                Err(e) => return Err(e),
            }
        }
        Ok(current)
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let request = StartRequest {
            run_name: "taskgate-check".into(),
            arguments: Value::Object(Map::new()),
            caller_tag: "0".repeat(16),
            keep_alive: None,
        };
        let rendered = render_object(
            &self.bound,
            &self.tool,
            self.client.namespace(),
            &request,
            self.keep_alive,
        )?;
        let object: DynamicObject =
            serde_json::from_value(rendered).map_err(|e| EngineError::InvalidInput {
                message: e.to_string(),
            })?;
        let mut missing = Vec::new();
        for verb in ["create", "get", "list", "watch", "patch"] {
            if !self.client.may(verb, &self.bound.api).await? {
                missing.push(verb);
            }
        }
        let resource = format!("{}.{}", self.bound.api.plural, self.bound.api.group);
        if !missing.is_empty() {
            return Err(EngineError::PermissionDenied {
                action: format!(
                    "{} {resource} in namespace {}",
                    missing[0],
                    self.client.namespace()
                ),
                message: format!(
                    "the Role of taskgate's identity lacks: {} on {resource}",
                    missing.join(", ")
                ),
            });
        }
        match self
            .client
            .create_object(&self.bound.api, &object, true)
            .await
        {
            Err(EngineError::NotFound) => Err(EngineError::InvalidInput {
                message: format!(
                    "the API server does not serve {resource} ({} {}): is its CRD installed?",
                    self.bound.api.api_version, self.bound.api.kind
                ),
            }),
            Ok(_) => Ok(vec![format!(
                "the {} template renders and passes a server-side dry run in namespace {}",
                self.kind(),
                self.client.namespace()
            )]),
            Err(EngineError::InvalidInput { message }) => Err(EngineError::InvalidInput {
                message: format!(
                    "the API server rejects the rendered {}: {message}",
                    self.kind()
                ),
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(target: Value) -> ToolDecl {
        ToolDecl {
            name: "build".into(),
            target,
            input_schema: json!({"type": "object", "properties": {"dataset": {"type": "string"}, "limit": {"type": "integer"}}}),
            keep_alive: None,
        }
    }

    const WF: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: main\n  arguments:\n    parameters: [{name: dataset, value: none}]\n  templates: [{name: main, suspend: {}}]\n";

    fn bound(target: Value) -> Result<BoundResource, ConfigError> {
        let d = decl(target);
        let t: ResourceTarget = d.target()?;
        t.validate(&d, "jobs")
    }

    fn request(arguments: Value) -> StartRequest {
        StartRequest {
            run_name: "tg-run-1".into(),
            arguments,
            caller_tag: "0123456789abcdef".into(),
            keep_alive: Some(Duration::from_secs(600)),
        }
    }

    #[test]
    fn places_are_only_plain_paths_under_spec() {
        assert_eq!(
            parse_place("spec.arguments.parameters[dataset]").unwrap(),
            Place {
                keys: vec!["spec".into(), "arguments".into(), "parameters".into()],
                named: Some("dataset".into())
            }
        );
        for bad in [
            "metadata.labels.x",
            "status.phase",
            "spec",
            "spec..a",
            "spec.a[b].c",
            "spec.a[]",
            "spec.a[{{x}}]",
            "spec.a b",
            "spec.$x",
        ] {
            assert!(parse_place(bad).is_err(), "{bad}");
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

    #[test]
    fn targets_are_checked_when_bound() {
        assert!(bound(json!({"preset": "argo-workflow", "template": WF, "arguments": [{"argument": "dataset", "path": "metadata.name"}]})).is_err());
        assert!(
            bound(json!({"preset": "argo-workflow", "template": "kind: Job\nspec: {}\n"})).is_err()
        );
        assert!(bound(json!({"preset": "argo-workflow", "template": "metadata: {namespace: other}\nspec: {}\n"})).is_err());
        assert!(bound(json!({"preset": "argo-workflow"})).is_err());
        assert!(bound(json!({"preset": "argo-workflow", "template": WF, "bogus": 1})).is_err());
        assert!(
            bound(json!({"kind": "Thing", "template": "spec: {}"})).is_err(),
            "api_version and phase are required without a preset"
        );
        let b =
            bound(json!({"preset": "argo-workflow-template", "workflow_template": "etl"})).unwrap();
        assert_eq!(b.template["spec"]["workflowTemplateRef"]["name"], "etl");
        assert!(bound(json!({"preset": "argo-workflow-template"})).is_err());
        assert!(bound(
            json!({"preset": "argo-workflow-template", "workflow_template": "etl", "template": WF})
        )
        .is_err());
        let generic = bound(json!({"api_version": "ray.io/v1", "kind": "RayJob", "template": "spec: {}",
            "arguments": [{"argument": "dataset", "path": "spec.entrypoint"}],
            "phase": {"path": "status.jobStatus", "completed": ["SUCCEEDED"], "failed": ["FAILED"], "cancelled": ["STOPPED"]}})).unwrap();
        assert_eq!(generic.api.plural, "rayjobs");
        assert_eq!(generic.api.group, "ray.io");
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
