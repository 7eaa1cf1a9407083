//! The configuration of a `resource` target: the TOML keys (their doc comments
//! are the documentation), the presets, the argument paths, and the validation
//! that turns a target into a [`BoundResource`] when the server starts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::core::{ApiResource, GroupVersionKind};
use serde::Deserialize;
use serde_json::{json, Value};
use taskgate_engine::{ConfigError, ToolDecl};

use crate::config::check_dns_label;

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
    /// Argo presets only: the workflow parameter that receives the W3C
    /// `traceparent` the run was started under (`spec.arguments.parameters[NAME]`,
    /// empty when the call has no trace context), so the workflow's steps can
    /// read `{{workflow.parameters.NAME}}`. Unset (the default): no parameter;
    /// the trace context is then only in the annotations `taskgate.io/traceparent`
    /// and `taskgate.io/tracestate`, which every resource object gets. Must not
    /// be a parameter an argument fills. With `argo-workflow-template`, declare it
    /// in the WorkflowTemplate's `spec.arguments.parameters`.
    pub trace_parameter: Option<String>,
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
    /// See [`ResourceTarget::trace_parameter`].
    pub(crate) trace_parameter: Option<String>,
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
        self.check_workflow_template()?;
        let t = self.with_preset(tool);
        let (api, api_version, kind) = t.api_resource()?;
        let mut template = t.load_template(&api_version, &kind, namespace)?;
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
        if let Some(name) = &t.trace_parameter {
            if preset.is_none() {
                return Err(ConfigError::new(
                    "trace_parameter",
                    "only with an Argo preset (argo-workflow, argo-workflow-template)",
                ));
            }
            if !key_ok(name) {
                return Err(ConfigError::new(
                    "trace_parameter",
                    "a parameter name (letters, digits, `_`, `-`; at most 63)",
                ));
            }
            let taken = places.values().any(|list| {
                list.iter().any(|p| {
                    p.keys == ["spec", "arguments", "parameters"]
                        && p.named.as_deref() == Some(name.as_str())
                })
            }) || places.contains_key(name);
            if taken {
                return Err(ConfigError::new(
                    "trace_parameter",
                    format!("{name:?} is filled by an argument; choose another parameter name"),
                ));
            }
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
            trace_parameter: t.trace_parameter,
        })
    }

    /// `workflow_template`: only with, and required by, preset
    /// `argo-workflow-template`, which takes no template of its own.
    fn check_workflow_template(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// The resource (group, version, kind, plural), its `apiVersion` and its `kind`.
    fn api_resource(&self) -> Result<(ApiResource, String, String), ConfigError> {
        let api_version = self
            .api_version
            .clone()
            .ok_or_else(|| ConfigError::new("api_version", "required without a preset"))?;
        let kind = self
            .kind
            .clone()
            .ok_or_else(|| ConfigError::new("kind", "required"))?;
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), api_version.clone()),
        };
        let plural = self
            .plural
            .clone()
            .unwrap_or_else(|| format!("{}s", kind.to_ascii_lowercase()));
        let api = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, &version, &kind),
            &plural,
        );
        Ok((api, api_version, kind))
    }

    /// The template, read and parsed: an object of this kind, in this namespace.
    fn load_template(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Value, ConfigError> {
        let text = match (&self.template, &self.template_file) {
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
        let template: Value = serde_yaml::from_str(&text)
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
        Ok(template)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn decl(target: Value) -> ToolDecl {
        ToolDecl {
            name: "build".into(),
            target,
            input_schema: json!({"type": "object", "properties": {"dataset": {"type": "string"}, "limit": {"type": "integer"}}}),
            keep_alive: None,
        }
    }

    pub(crate) const WF: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec:\n  entrypoint: main\n  arguments:\n    parameters: [{name: dataset, value: none}]\n  templates: [{name: main, suspend: {}}]\n";

    pub(crate) fn bound(target: Value) -> Result<BoundResource, ConfigError> {
        let d = decl(target);
        let t: ResourceTarget = d.target()?;
        t.validate(&d, "jobs")
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
}
