//! Reading a workflow file's `on.workflow_dispatch.inputs`: suggesting a tool
//! input schema from them, and comparing a tool's input schema with them. Pure.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// A workflow file that cannot be read as a dispatchable workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WorkflowError {
    /// Not YAML, or not a mapping.
    #[error("the workflow file is not valid YAML: {0}")]
    Yaml(String),
    /// No `workflow_dispatch` trigger: the workflow cannot be started through the API.
    #[error("the workflow has no workflow_dispatch trigger")]
    NotDispatchable,
}

/// One declared `workflow_dispatch` input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeclaredInput {
    /// `string`, `boolean`, `number`, `choice` or `environment`.
    pub kind: String,
    /// Whether the workflow requires it.
    pub required: bool,
    /// Its default, when it has one.
    pub default: Option<Value>,
    /// The options of a `choice` input.
    pub options: Vec<String>,
    /// Its description.
    pub description: Option<String>,
}

/// The `workflow_dispatch` inputs a workflow file declares, by name.
///
/// # Errors
///
/// [`WorkflowError`] when the file is not YAML or has no `workflow_dispatch` trigger.
pub(crate) fn declared_inputs(
    workflow_yaml: &str,
) -> Result<BTreeMap<String, DeclaredInput>, WorkflowError> {
    let doc = parse(workflow_yaml)?;
    // `on` may also have been read as the YAML 1.1 boolean `true`.
    let on = doc.get("on").or_else(|| doc.get("true"));
    let dispatch = match on {
        Some(Value::String(event)) if event == "workflow_dispatch" => Value::Null,
        Some(Value::Array(events)) if events.iter().any(|e| e == "workflow_dispatch") => {
            Value::Null
        }
        Some(Value::Object(events)) if events.contains_key("workflow_dispatch") => {
            events["workflow_dispatch"].clone()
        }
        _ => return Err(WorkflowError::NotDispatchable),
    };
    let mut out = BTreeMap::new();
    if let Some(Value::Object(inputs)) = dispatch.get("inputs") {
        for (name, spec) in inputs {
            let kind = spec
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("string")
                .to_owned();
            let required = match spec.get("required") {
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) => s == "true",
                _ => false,
            };
            let options = spec
                .get("options")
                .and_then(Value::as_array)
                .map(|o| o.iter().map(scalar_text).collect())
                .unwrap_or_default();
            out.insert(
                name.clone(),
                DeclaredInput {
                    kind,
                    required,
                    default: spec.get("default").filter(|d| !d.is_null()).cloned(),
                    options,
                    description: spec
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                },
            );
        }
    }
    Ok(out)
}

/// A workflow file as a JSON object.
fn parse(workflow_yaml: &str) -> Result<Map<String, Value>, WorkflowError> {
    let doc: Value = serde_yaml::from_str::<serde_yaml::Value>(workflow_yaml)
        .map_err(|e| WorkflowError::Yaml(e.to_string()))
        .and_then(|v| {
            serde_json::to_value(yaml_to_json(v)).map_err(|e| WorkflowError::Yaml(e.to_string()))
        })?;
    match doc {
        Value::Object(doc) => Ok(doc),
        _ => Err(WorkflowError::Yaml(
            "the document is not a mapping".to_owned(),
        )),
    }
}

/// The environments the workflow's jobs name (`jobs.*.environment`, a name or
/// `{name, url}`), as written: an expression such as
/// `${{ inputs.environment }}` stays an expression. Empty for a file that is
/// not a workflow.
#[must_use]
pub(crate) fn job_environments(workflow_yaml: &str) -> Vec<String> {
    let Ok(doc) = parse(workflow_yaml) else {
        return Vec::new();
    };
    let Some(Value::Object(jobs)) = doc.get("jobs") else {
        return Vec::new();
    };
    let mut names: Vec<String> = jobs
        .values()
        .filter_map(|job| match job.get("environment") {
            Some(Value::String(name)) => Some(name.clone()),
            Some(Value::Object(e)) => e.get("name").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn yaml_to_json(v: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        Y::Bool(b) => b.to_string(),
                        Y::Number(n) => n.to_string(),
                        other => serde_yaml::to_string(&other)
                            .unwrap_or_default()
                            .trim()
                            .to_owned(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => yaml_to_json(t.value),
    }
}

/// Suggests a tool `input_schema` from the workflow's declared inputs,
/// leaving out the `reserved` ones (the correlation input, the trace input).
///
/// # Errors
///
/// [`WorkflowError`] when the file is not YAML or has no `workflow_dispatch` trigger.
pub(crate) fn suggest_input_schema(
    workflow_yaml: &str,
    reserved: &[&str],
) -> Result<Value, WorkflowError> {
    let inputs = declared_inputs(workflow_yaml)?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, input) in inputs
        .iter()
        .filter(|(n, _)| !reserved.contains(&n.as_str()))
    {
        let mut prop = Map::new();
        let json_type = match input.kind.as_str() {
            "boolean" => "boolean",
            "number" => "number",
            _ => "string",
        };
        prop.insert("type".into(), json!(json_type));
        if let Some(d) = &input.description {
            prop.insert("description".into(), json!(d));
        }
        if input.kind == "choice" && !input.options.is_empty() {
            prop.insert("enum".into(), json!(input.options));
        }
        if let Some(default) = &input.default {
            prop.insert("default".into(), default.clone());
        }
        if input.required && input.default.is_none() {
            required.push(json!(name));
        }
        properties.insert(name.clone(), Value::Object(prop));
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

/// Compares a tool's `input_schema` with the workflow's declared inputs (names,
/// required, types, choice options) and returns the findings, empty when they
/// match. The `reserved` inputs (the correlation input, the trace input) are
/// expected in the workflow only.
#[must_use]
pub(crate) fn compare_inputs(
    schema: &Value,
    workflow_yaml: &str,
    reserved: &[&str],
) -> Vec<String> {
    let declared = match declared_inputs(workflow_yaml) {
        Ok(d) => d,
        Err(e) => return vec![e.to_string()],
    };
    let mut findings = Vec::new();
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for name in properties.keys() {
        if reserved.contains(&name.as_str()) {
            findings.push(format!(
                "argument {name:?} is reserved for taskgate's correlation or trace input; rename it"
            ));
        } else if !declared.contains_key(name) {
            findings.push(format!(
                "argument {name:?} is not a workflow_dispatch input of the workflow (GitHub rejects undeclared inputs)"
            ));
        }
    }
    for (name, input) in &declared {
        if reserved.contains(&name.as_str()) {
            continue;
        }
        let Some(prop) = properties.get(name) else {
            if input.required && input.default.is_none() {
                findings.push(format!(
                    "input {name:?} is required by the workflow but missing from the input schema"
                ));
            }
            continue;
        };
        if input.required && input.default.is_none() && !required.contains(&name.as_str()) {
            findings.push(format!(
                "input {name:?} is required by the workflow but optional in the input schema"
            ));
        }
        let ty = prop.get("type").and_then(Value::as_str).unwrap_or("");
        match input.kind.as_str() {
            "boolean" if ty != "boolean" => findings.push(format!(
                "input {name:?} is a boolean in the workflow but {ty:?} in the input schema"
            )),
            "number" if ty != "number" && ty != "integer" => findings.push(format!(
                "input {name:?} is a number in the workflow but {ty:?} in the input schema"
            )),
            "choice" => {
                let allowed: Option<Vec<String>> = prop
                    .get("enum")
                    .and_then(Value::as_array)
                    .map(|e| e.iter().map(scalar_text).collect());
                match allowed {
                    None => findings.push(format!(
                        "input {name:?} is a choice of {:?} in the workflow; give the argument that enum",
                        input.options
                    )),
                    Some(values) => {
                        let extra: Vec<&String> =
                            values.iter().filter(|v| !input.options.contains(v)).collect();
                        if !extra.is_empty() {
                            findings.push(format!(
                                "argument {name:?} allows {extra:?}, which are not among the workflow's options {:?}",
                                input.options
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_CORRELATION_INPUT;

    const WORKFLOW: &str = r#"
name: Deploy
run-name: "deploy ${{ inputs.taskgate_run }}"
on:
  push:
    branches: [main]
  workflow_dispatch:
    inputs:
      environment:
        description: Where to deploy
        type: choice
        required: true
        options: [staging, production]
      version:
        type: string
        required: true
      dry_run:
        type: boolean
        default: false
      replicas:
        type: number
        required: true
        default: 2
      taskgate_run:
        type: string
jobs:
  deploy:
    runs-on: ubuntu-latest
    steps:
      - run: echo hi
"#;

    /// The schema suggested for the GitHub double's workflow is the one the
    /// double states, and declares exactly the inputs that workflow declares.
    #[test]
    fn the_doubles_workflow_matches_its_suggested_schema() {
        use taskgate_github_double as double;
        let schema =
            suggest_input_schema(double::WORKFLOW_YAML, &[DEFAULT_CORRELATION_INPUT]).unwrap();
        assert_eq!(schema, double::suggested_input_schema());
        assert_eq!(schema["required"], json!(["version"]));
        assert!(
            compare_inputs(&schema, double::WORKFLOW_YAML, &[DEFAULT_CORRELATION_INPUT]).is_empty()
        );
    }

    #[test]
    fn job_environments_are_read() {
        let yaml = "on: workflow_dispatch\njobs:\n  a:\n    environment: staging\n  b:\n    environment:\n      name: ${{ inputs.target }}\n      url: https://x\n  c:\n    runs-on: x\n  d:\n    environment: staging\n";
        assert_eq!(job_environments(yaml), ["${{ inputs.target }}", "staging"]);
        assert!(job_environments("on: [").is_empty());
        assert!(job_environments("on: push").is_empty());
    }

    #[test]
    fn inputs_are_read_in_every_trigger_form() {
        let d = declared_inputs(WORKFLOW).unwrap();
        assert_eq!(d.len(), 5);
        assert_eq!(d["environment"].options, ["staging", "production"]);
        assert!(d["version"].required);
        assert_eq!(d["replicas"].default, Some(json!(2)));
        assert!(declared_inputs("on: workflow_dispatch\njobs: {}")
            .unwrap()
            .is_empty());
        assert!(declared_inputs("on: [push, workflow_dispatch]")
            .unwrap()
            .is_empty());
        assert_eq!(
            declared_inputs("on: [push]").unwrap_err(),
            WorkflowError::NotDispatchable
        );
        assert!(matches!(
            declared_inputs("on: [").unwrap_err(),
            WorkflowError::Yaml(_)
        ));
    }

    #[test]
    fn a_schema_is_suggested() {
        let s = suggest_input_schema(WORKFLOW, &[DEFAULT_CORRELATION_INPUT]).unwrap();
        assert_eq!(s["required"], json!(["environment", "version"]));
        assert_eq!(
            s["properties"]["environment"]["enum"],
            json!(["staging", "production"])
        );
        assert_eq!(s["properties"]["dry_run"]["type"], "boolean");
        assert_eq!(s["properties"]["replicas"]["type"], "number");
        assert!(s["properties"].get("taskgate_run").is_none());
        // The suggestion matches its own workflow.
        assert_eq!(
            compare_inputs(&s, WORKFLOW, &[DEFAULT_CORRELATION_INPUT]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn mismatches_are_found() {
        let schema = json!({
            "type": "object",
            "required": [],
            "properties": {
                "environment": {"type": "string", "enum": ["staging", "prod"]},
                "dry_run": {"type": "string"},
                "extra": {"type": "string"},
            }
        });
        let findings = compare_inputs(&schema, WORKFLOW, &[DEFAULT_CORRELATION_INPUT]);
        let all = findings.join("\n");
        assert!(
            all.contains("\"extra\" is not a workflow_dispatch input"),
            "{all}"
        );
        assert!(
            all.contains("\"environment\" is required by the workflow but optional"),
            "{all}"
        );
        assert!(all.contains("allows [\"prod\"]"), "{all}");
        assert!(all.contains("\"dry_run\" is a boolean"), "{all}");
        assert!(
            all.contains("\"version\" is required by the workflow but missing"),
            "{all}"
        );
        assert_eq!(findings.len(), 5, "{all}");
        assert_eq!(
            compare_inputs(&schema, "on: push", &[DEFAULT_CORRELATION_INPUT]),
            vec!["the workflow has no workflow_dispatch trigger".to_owned()]
        );
    }
}
