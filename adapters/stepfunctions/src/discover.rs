//! `taskgate discover` for Step Functions, the pure half: a state machine
//! becomes a tool (target `state_machine_arn`), described by its description
//! or its definition's `Comment`; with samples, its input schema is inferred
//! from the inputs of recent executions — their types and the keys every one
//! had, never a value. The reads are `crate::api`'s; `lib.rs` makes them.

use serde_json::{json, Map, Value};
use taskgate_engine::Discovered;

/// The most state machines one discover reads (ListStateMachines pages of
/// [`PAGE`]); each one costs a DescribeStateMachine, and with samples a
/// ListExecutions and a DescribeExecution per sample.
pub(crate) const MAX_STATE_MACHINES: usize = 200;
/// ListStateMachines' page size (the API's maximum).
pub(crate) const PAGE: i32 = 100;
/// The most executions sampled per state machine, whatever `--sample` asks.
pub(crate) const MAX_SAMPLE: usize = 50;
/// How deep an inferred schema describes nested objects and arrays; deeper
/// values are left open (`{}`).
const MAX_DEPTH: usize = 8;
/// The most properties an inferred object schema lists; past it the object
/// is left open.
const MAX_PROPERTIES: usize = 100;
/// The longest description taken from the state machine.
const MAX_DESCRIPTION: usize = 1024;

/// What DescribeStateMachine told about one state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    /// Its ARN.
    pub arn: String,
    /// Its name.
    pub name: String,
    /// Its description, when it has one.
    pub description: Option<String>,
    /// Its Amazon States Language definition.
    pub definition: String,
}

/// The tool of one (Standard) state machine; `samples` are the inputs of its
/// most recent executions (already parsed; unparsable ones left out), of
/// which `sampled` were read.
#[must_use]
pub(crate) fn state_machine_tool(sm: &Described, samples: &[Value], sampled: usize) -> Discovered {
    let comment = serde_json::from_str::<Value>(&sm.definition)
        .ok()
        .and_then(|d| d.get("Comment").and_then(Value::as_str).map(str::to_owned));
    let mut description = sm
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .or(comment.filter(|c| !c.trim().is_empty()))
        .map(|d| d.trim().chars().take(MAX_DESCRIPTION).collect::<String>())
        .unwrap_or_else(|| {
            format!(
                "Starts an execution of the Step Functions state machine {}.",
                sm.name
            )
        });
    let mut notes = Vec::new();
    let input_schema = match infer(samples) {
        Some(schema) if schema.get("type") == Some(&json!("object")) => {
            let n = samples.len();
            description.push_str(&format!(
                " (Input schema inferred from the inputs of its {n} most recent execution{}: \
                 types and required keys only.)",
                if n == 1 { "" } else { "s" }
            ));
            notes.push(format!(
                "input schema inferred from {n} recent execution input{}; check it before use",
                if n == 1 { "" } else { "s" }
            ));
            schema
        }
        Some(_) => {
            notes.push(format!(
                "the {} sampled execution inputs are not all JSON objects: no schema inferred; \
                 set `input_key` to pass the arguments under one key",
                samples.len()
            ));
            open_object()
        }
        None if sampled > 0 => {
            notes.push(format!(
                "{sampled} execution(s) read, none with a JSON input: no schema inferred"
            ));
            open_object()
        }
        None => {
            notes.push(
                "no input schema: write one, or rerun with --sample N to infer it from recent executions"
                    .to_owned(),
            );
            open_object()
        }
    };
    Discovered {
        name: sm.name.clone(),
        description,
        origin: format!("Step Functions state machine {}", sm.arn),
        target: json!({ "state_machine_arn": sm.arn }),
        input_schema,
        notes,
    }
}

fn open_object() -> Value {
    json!({ "type": "object" })
}

/// The schema that every sample fits: types, object properties and the keys
/// present in every sample (`required`); never a value (no `enum`, `const`,
/// `default` or example). `None` without samples.
#[must_use]
pub(crate) fn infer(samples: &[Value]) -> Option<Value> {
    samples
        .iter()
        .map(|s| shape(s, 0))
        .reduce(|a, b| merge(&a, &b, 0))
}

/// The schema of one value.
fn shape(value: &Value, depth: usize) -> Value {
    if depth >= MAX_DEPTH {
        return json!({});
    }
    match value {
        Value::Null => json!({"type": "null"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"type": "integer"}),
        Value::Number(_) => json!({"type": "number"}),
        Value::String(_) => json!({"type": "string"}),
        Value::Array(items) => {
            let mut schema = json!({"type": "array"});
            if let Some(items) = items
                .iter()
                .map(|v| shape(v, depth + 1))
                .reduce(|a, b| merge(&a, &b, depth + 1))
            {
                schema["items"] = items;
            }
            schema
        }
        Value::Object(map) if map.len() > MAX_PROPERTIES => json!({"type": "object"}),
        Value::Object(map) => {
            let properties: Map<String, Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), shape(v, depth + 1)))
                .collect();
            let required: Vec<Value> = map.keys().map(|k| json!(k)).collect();
            json!({"type": "object", "properties": properties, "required": required})
        }
    }
}

fn types(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// The schema both `a` and `b` fit.
fn merge(a: &Value, b: &Value, depth: usize) -> Value {
    let (ta, tb) = (types(a), types(b));
    // `{}` (left open) absorbs everything.
    if ta.is_empty() || tb.is_empty() {
        return json!({});
    }
    if ta == tb && ta.len() == 1 {
        return match ta[0].as_str() {
            "object" => merge_objects(a, b, depth),
            "array" => {
                let mut schema = json!({"type": "array"});
                match (a.get("items"), b.get("items")) {
                    (Some(x), Some(y)) => schema["items"] = merge(x, y, depth + 1),
                    (Some(x), None) | (None, Some(x)) => schema["items"] = x.clone(),
                    (None, None) => {}
                }
                schema
            }
            _ => a.clone(),
        };
    }
    let mut all: Vec<String> = ta.into_iter().chain(tb).collect();
    // An integer is a number too.
    if all.iter().any(|t| t == "number") {
        all.retain(|t| t != "integer");
    }
    all.sort();
    all.dedup();
    if all.len() == 1 {
        return json!({"type": all[0]});
    }
    json!({"type": all})
}

fn merge_objects(a: &Value, b: &Value, depth: usize) -> Value {
    let (Some(pa), Some(pb)) = (
        a.get("properties").and_then(Value::as_object),
        b.get("properties").and_then(Value::as_object),
    ) else {
        return json!({"type": "object"});
    };
    let mut properties = pa.clone();
    for (k, vb) in pb {
        let merged = match pa.get(k) {
            Some(va) => merge(va, vb, depth + 1),
            None => vb.clone(),
        };
        properties.insert(k.clone(), merged);
    }
    if properties.len() > MAX_PROPERTIES {
        return json!({"type": "object"});
    }
    let req = |s: &Value| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let rb = req(b);
    let required: Vec<Value> = req(a)
        .into_iter()
        .filter(|k| rb.contains(k))
        .map(Value::String)
        .collect();
    json!({"type": "object", "properties": properties, "required": required})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_required_keys_are_inferred() {
        let samples = [
            json!({"dataset": "sales", "limit": 5, "opts": {"dry": true}, "tags": ["a"]}),
            json!({"dataset": "hr", "limit": 2.5, "tags": [], "extra": null}),
        ];
        let schema = infer(&samples).unwrap();
        assert_eq!(
            schema,
            json!({"type": "object",
                   "properties": {
                       "dataset": {"type": "string"},
                       "limit": {"type": "number"},
                       "opts": {"type": "object", "properties": {"dry": {"type": "boolean"}}, "required": ["dry"]},
                       "tags": {"type": "array", "items": {"type": "string"}},
                       "extra": {"type": "null"}
                   },
                   "required": ["dataset", "limit", "tags"]})
        );
        assert_eq!(infer(&[]), None);
        assert_eq!(
            infer(&[json!("x"), json!(1)]).unwrap(),
            json!({"type": ["integer", "string"]})
        );
    }

    #[test]
    fn no_sampled_value_is_in_the_tool() {
        let secret = "AKIAIOSFODNN7EXAMPLE-wJalrXUtnFEMI";
        let samples = [json!({"api_key": secret, "n": 97531864, "nested": [{"token": secret}]})];
        let sm = Described {
            arn: "arn:aws:states:us-east-1:123456789012:stateMachine:Load".into(),
            name: "Load".into(),
            description: None,
            definition: r#"{"Comment": "Loads the data", "StartAt": "A", "States": {}}"#.into(),
        };
        let d = state_machine_tool(&sm, &samples, 1);
        let all =
            serde_json::to_string(&(&d.description, &d.input_schema, &d.notes, &d.target)).unwrap();
        assert!(!all.contains(secret) && !all.contains("97531864"), "{all}");
        assert!(d.description.starts_with("Loads the data"));
        assert!(d
            .description
            .contains("inferred from the inputs of its 1 most recent execution"));
        assert_eq!(
            d.input_schema["required"],
            json!(["api_key", "n", "nested"])
        );
    }

    #[test]
    fn deep_or_wide_inputs_stay_bounded() {
        let mut deep = json!("leaf");
        for _ in 0..20 {
            deep = json!({ "a": deep });
        }
        let schema = infer(&[deep]).unwrap();
        assert!(schema.to_string().matches("properties").count() <= MAX_DEPTH);
        let wide: Map<String, Value> = (0..500).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(
            infer(&[Value::Object(wide)]).unwrap(),
            json!({"type": "object"})
        );
    }

    #[test]
    fn without_samples_the_schema_is_open_and_noted() {
        let sm = Described {
            arn: "arn:aws:states:us-east-1:123456789012:stateMachine:X".into(),
            name: "X".into(),
            description: Some("The X pipeline".into()),
            definition: "{}".into(),
        };
        let d = state_machine_tool(&sm, &[], 0);
        assert_eq!(d.description, "The X pipeline");
        assert_eq!(d.input_schema, json!({"type": "object"}));
        assert!(d.notes[0].contains("--sample"));
        let d = state_machine_tool(&sm, &[json!([1])], 1);
        assert_eq!(d.input_schema, json!({"type": "object"}));
        assert!(d.notes[0].contains("input_key"));
    }
}
