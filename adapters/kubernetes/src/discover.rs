//! `taskgate discover` for Kubernetes, the pure half: a CronJob becomes a
//! tool that runs its job template on demand (target `from_cronjob`), an Argo
//! WorkflowTemplate a tool of the `argo-workflow-template` preset. The reads
//! are `crate::api`'s (`list_cronjobs`, `list_objects`); `lib.rs` makes them.
//!
//! Names, descriptions, variable and parameter names are the cluster's text,
//! not taskgate's: they go out as values (the CLI writes them through a TOML
//! serializer), and what becomes a comment line ([`Discovered::origin`],
//! notes) is made one line here.

use std::time::Duration;

use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Container;
use kube::core::DynamicObject;
use serde_json::{json, Map, Value};
use taskgate_engine::{DiscoverOptions, Discovered};

/// The most CronJobs one discover reads (one list call).
pub(crate) const MAX_CRONJOBS: u32 = 500;
/// The most Argo WorkflowTemplates one discover reads (one list call).
pub(crate) const MAX_WORKFLOW_TEMPLATES: u32 = 500;
/// The deadline of each list call of a discover.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Annotations whose value describes an object, the first one set wins.
const DESCRIPTION_ANNOTATIONS: &[&str] = &["description", "kubernetes.io/description"];
/// The annotations Argo's UI shows as a WorkflowTemplate's description.
const ARGO_DESCRIPTION_ANNOTATIONS: &[&str] = &[
    "workflows.argoproj.io/description",
    "workflows.argoproj.io/title",
];
/// The longest description taken from an annotation.
const MAX_DESCRIPTION: usize = 1024;

/// `text` on one line: control characters (newlines among them) become
/// spaces, and it is cut to `max` characters.
#[must_use]
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    line.trim().to_owned()
}

fn annotated_description(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    keys: &[&str],
) -> Option<String> {
    let annotations = annotations?;
    keys.iter()
        .filter_map(|k| annotations.get(*k))
        .map(|d| d.trim())
        .find(|d| !d.is_empty())
        .map(|d| d.chars().take(MAX_DESCRIPTION).collect())
}

/// True for a name an environment variable mapping can use
/// (`[A-Za-z_][A-Za-z0-9_]*`, as `env_arguments` requires).
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The tool of one CronJob, or `None` for a suspended one unless
/// `options.all`. Its target is `{ from_cronjob = NAME }`; with
/// `options.args_from_env`, the literal variables of the first container of
/// the job template become string arguments (`env_arguments`, the template's
/// value as default) and the others are noted, never read.
#[must_use]
pub(crate) fn cronjob_tool(
    cronjob: &CronJob,
    namespace: &str,
    options: &DiscoverOptions,
) -> Option<Discovered> {
    let name = cronjob.metadata.name.clone()?;
    let spec = &cronjob.spec;
    let suspended = spec.suspend == Some(true);
    if suspended && !options.all {
        return None;
    }
    let schedule = one_line(&spec.schedule, 100);
    let mut notes = Vec::new();
    if suspended {
        notes.push(
            "the CronJob is suspended (its schedule does not run); the tool runs its job \
             template all the same"
                .to_owned(),
        );
    }
    let pod = spec
        .job_template
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref());
    let containers: &[Container] = pod.map(|p| p.containers.as_slice()).unwrap_or_default();
    let mut target = json!({ "from_cronjob": name });
    let mut properties = Map::new();
    if let Some(first) = containers.first() {
        if containers.len() > 1 {
            target["container"] = json!(first.name);
            notes.push(one_line(
                &format!(
                    "the job template has {} containers; arguments and the result are \
                     container {}'s",
                    containers.len(),
                    first.name
                ),
                300,
            ));
        }
        let (declared, env_notes) = env_arguments(first, options.args_from_env);
        notes.extend(env_notes);
        if !declared.is_empty() {
            target["env_arguments"] =
                Value::Array(declared.iter().map(|(n, _)| json!(n)).collect());
        }
        for (var, value) in declared {
            properties.insert(
                var.clone(),
                json!({
                    "type": "string",
                    "description": format!(
                        "Environment variable {var} of the job (default: the CronJob's value)"
                    ),
                    "default": value,
                }),
            );
        }
    } else {
        notes.push("the job template has no containers: a start will fail".to_owned());
    }
    let description = annotated_description(
        cronjob.metadata.annotations.as_ref(),
        DESCRIPTION_ANNOTATIONS,
    )
    .unwrap_or_else(|| {
        format!("Runs the job template of CronJob {name} (schedule {schedule}) once, now.")
    });
    Some(Discovered {
        origin: one_line(
            &format!("Kubernetes CronJob {name} in namespace {namespace} (schedule {schedule})"),
            300,
        ),
        name,
        description,
        target,
        input_schema: json!({
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
        }),
        notes,
    })
}

/// The container's variables that may become arguments (name, literal
/// value) when `wanted`, and the notes on the rest. A variable from a
/// Secret, ConfigMap or field is never read: only its name is noted.
fn env_arguments(container: &Container, wanted: bool) -> (Vec<(String, String)>, Vec<String>) {
    let mut declared = Vec::new();
    let mut notes = Vec::new();
    let env = container.env.as_deref().unwrap_or_default();
    if !wanted {
        let literal = env.iter().filter(|e| e.value_from.is_none()).count();
        if literal > 0 {
            notes.push(format!(
                "the job template sets {literal} environment variable(s) with literal values; \
                 `--args-from-env` makes them arguments"
            ));
        }
        return (declared, notes);
    }
    for var in env {
        let source = var.value_from.as_ref().map(|from| {
            if from.secret_key_ref.is_some() {
                "a Secret"
            } else if from.config_map_key_ref.is_some() {
                "a ConfigMap"
            } else {
                "a field or resource of the pod"
            }
        });
        if let Some(source) = source {
            notes.push(one_line(
                &format!(
                    "variable {} takes its value from {source}: not an argument (its value is not read)",
                    var.name
                ),
                300,
            ));
        } else if !is_env_name(&var.name) || var.name == "TASKGATE_ARGUMENTS" {
            notes.push(one_line(
                &format!("variable {:?} cannot be an argument (its name)", var.name),
                300,
            ));
        } else if declared.iter().all(|(n, _)| n != &var.name) {
            declared.push((var.name.clone(), var.value.clone().unwrap_or_default()));
        }
    }
    if container.env_from.as_ref().is_some_and(|f| !f.is_empty()) {
        notes.push(
            "the container also takes variables from envFrom sources: not arguments".to_owned(),
        );
    }
    (declared, notes)
}

/// The tool of one Argo WorkflowTemplate: target `{ preset =
/// "argo-workflow-template", workflow_template = NAME }`; each parameter of
/// `spec.arguments.parameters` a string argument with its `enum`,
/// `description` and default (`value`, else `default`), required when it has
/// neither.
#[must_use]
pub(crate) fn workflow_template_tool(
    template: &DynamicObject,
    namespace: &str,
) -> Option<Discovered> {
    let name = template.metadata.name.clone()?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut notes = Vec::new();
    let parameters = template
        .data
        .pointer("/spec/arguments/parameters")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for parameter in &parameters {
        let Some(pname) = parameter.get("name").and_then(Value::as_str) else {
            continue;
        };
        if !parameter_name_ok(pname) {
            notes.push(one_line(
                &format!("parameter {pname:?} cannot be an argument (its name)"),
                300,
            ));
            continue;
        }
        if parameter.get("valueFrom").is_some() {
            notes.push(one_line(
                &format!(
                    "parameter {pname} takes its value from a source (valueFrom): not an argument"
                ),
                300,
            ));
            continue;
        }
        let mut schema = json!({ "type": "string" });
        if let Some(d) = parameter.get("description").and_then(Value::as_str) {
            schema["description"] = json!(d.chars().take(MAX_DESCRIPTION).collect::<String>());
        }
        if let Some(values) = parameter.get("enum").and_then(Value::as_array) {
            let values: Vec<Value> = values.iter().map(|v| json!(scalar_text(v))).collect();
            if !values.is_empty() {
                schema["enum"] = Value::Array(values);
            }
        }
        let default = parameter
            .get("value")
            .or_else(|| parameter.get("default"))
            .filter(|v| !v.is_null());
        match default {
            Some(v) => schema["default"] = json!(scalar_text(v)),
            None => required.push(json!(pname)),
        }
        properties.insert(pname.to_owned(), schema);
    }
    let description = annotated_description(
        template.metadata.annotations.as_ref(),
        ARGO_DESCRIPTION_ANNOTATIONS,
    )
    .unwrap_or_else(|| format!("Runs the Argo WorkflowTemplate {name}."));
    let mut input_schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        input_schema["required"] = Value::Array(required);
    }
    Some(Discovered {
        origin: one_line(
            &format!("Argo WorkflowTemplate {name} in namespace {namespace}"),
            300,
        ),
        target: json!({ "preset": "argo-workflow-template", "workflow_template": name }),
        name,
        description,
        input_schema,
        notes,
    })
}

/// A parameter name the preset can place (`spec.arguments.parameters[NAME]`).
fn parameter_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

/// A parameter's value as Argo passes it: a string (YAML may have made a
/// number or boolean of it).
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cronjob(v: Value) -> CronJob {
        serde_json::from_value(v).unwrap()
    }

    const SECRET: &str = "s3cr3t-value-never-shown";

    fn nightly(suspend: bool) -> CronJob {
        cronjob(json!({
            "metadata": {"name": "nightly-report", "uid": "u1",
                         "annotations": {"description": "Builds the nightly report"}},
            "spec": {"schedule": "0 3 * * *", "suspend": suspend, "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox",
                    "env": [
                        {"name": "REGION", "value": "eu-west-1"},
                        {"name": "LIMIT", "value": "10"},
                        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": SECRET}}},
                        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                        {"name": "bad.name", "value": "x"}
                    ]}]
            }}}}}
        }))
    }

    #[test]
    fn a_cronjob_without_args_from_env_takes_no_arguments() {
        let d = cronjob_tool(&nightly(false), "jobs", &DiscoverOptions::default()).unwrap();
        assert_eq!(d.name, "nightly-report");
        assert_eq!(d.description, "Builds the nightly report");
        assert_eq!(d.target, json!({"from_cronjob": "nightly-report"}));
        assert_eq!(
            d.input_schema,
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        );
        assert!(d.origin.contains("schedule 0 3 * * *"), "{}", d.origin);
        assert!(d.notes.iter().any(|n| n.contains("--args-from-env")));
    }

    #[test]
    fn args_from_env_declares_literal_variables_only() {
        let options = DiscoverOptions {
            args_from_env: true,
            ..DiscoverOptions::default()
        };
        let d = cronjob_tool(&nightly(false), "jobs", &options).unwrap();
        assert_eq!(d.target["env_arguments"], json!(["REGION", "LIMIT"]));
        assert_eq!(
            d.input_schema["properties"]["REGION"]["default"],
            "eu-west-1"
        );
        assert_eq!(d.input_schema["properties"]["LIMIT"]["type"], "string");
        assert!(d.input_schema.get("required").is_none());
        let all = serde_json::to_string(&(&d.target, &d.input_schema, &d.notes)).unwrap();
        assert!(!all.contains(SECRET), "{all}");
        assert!(!d.input_schema["properties"]
            .as_object()
            .unwrap()
            .contains_key("DB_PASSWORD"));
        assert!(d
            .notes
            .iter()
            .any(|n| n.contains("DB_PASSWORD") && n.contains("a Secret")));
        assert!(d
            .notes
            .iter()
            .any(|n| n.contains("MODE") && n.contains("a ConfigMap")));
        assert!(d.notes.iter().any(|n| n.contains("bad.name")));
    }

    #[test]
    fn suspended_cronjobs_only_with_all() {
        assert!(cronjob_tool(&nightly(true), "jobs", &DiscoverOptions::default()).is_none());
        let all = DiscoverOptions {
            all: true,
            ..DiscoverOptions::default()
        };
        let d = cronjob_tool(&nightly(true), "jobs", &all).unwrap();
        assert!(d.notes.iter().any(|n| n.contains("suspended")));
    }

    #[test]
    fn hostile_text_stays_on_one_line() {
        let evil = "a\"]\n[server]\nlisten=\"0.0.0.0:1\"\r\u{1b}[31m";
        let mut c = nightly(false);
        c.spec.schedule = evil.into();
        let d = cronjob_tool(&c, "jobs", &DiscoverOptions::default()).unwrap();
        assert!(!d.origin.chars().any(char::is_control), "{:?}", d.origin);
        for n in &d.notes {
            assert!(!n.chars().any(char::is_control), "{n:?}");
        }
    }

    #[test]
    fn workflow_template_parameters_become_a_schema() {
        let wt: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
            "metadata": {"name": "etl", "annotations": {"workflows.argoproj.io/description": "Loads the warehouse"}},
            "spec": {"entrypoint": "main", "arguments": {"parameters": [
                {"name": "env", "value": "staging", "enum": ["staging", "prod"], "description": "Where to load"},
                {"name": "date"},
                {"name": "retries", "default": 3},
                {"name": "token", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                {"name": "a.b", "value": "x"}
            ]}}
        }))
        .unwrap();
        let d = workflow_template_tool(&wt, "argo").unwrap();
        assert_eq!(d.description, "Loads the warehouse");
        assert_eq!(
            d.target,
            json!({"preset": "argo-workflow-template", "workflow_template": "etl"})
        );
        let p = &d.input_schema["properties"];
        assert_eq!(p["env"]["enum"], json!(["staging", "prod"]));
        assert_eq!(p["env"]["default"], "staging");
        assert_eq!(p["env"]["description"], "Where to load");
        assert_eq!(p["retries"]["default"], "3");
        assert_eq!(d.input_schema["required"], json!(["date"]));
        assert!(p.get("token").is_none() && p.get("a.b").is_none());
        assert_eq!(d.notes.len(), 2, "{:?}", d.notes);
    }
}
