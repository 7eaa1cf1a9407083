//! `taskgate discover` on Airflow: the DAGs the API lists, each as a tool
//! entry whose input schema comes from the DAG's `params`.
//!
//! Only reads, each call through [`Client`] (its connect and read timeouts),
//! and bounded: at most [`MAX_DAGS`] DAGs ([`PAGE`] per listing page), then two
//! calls per DAG (its details for the params, its tasks for human steps).

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use taskgate_engine::http::percent_encode;
use taskgate_engine::{DiscoverOptions, Discovered, EngineError};

use crate::api::{action, Client};
use crate::translate;

/// The most DAGs one discover reads.
const MAX_DAGS: usize = 200;

/// DAGs per listing page (Airflow's largest page is 100 by default).
const PAGE: usize = 100;

/// The operators of Airflow's human-in-the-loop provider: a task of one of
/// them waits for a person.
const HITL_OPERATORS: &[&str] = &[
    "ApprovalOperator",
    "HITLOperator",
    "HITLEntryOperator",
    "HITLBranchOperator",
];

#[derive(Debug, Deserialize)]
struct DagList {
    dags: Vec<Dag>,
    total_entries: u64,
}

#[derive(Debug, Deserialize)]
struct Dag {
    dag_id: String,
    #[serde(default)]
    dag_display_name: Option<String>,
    #[serde(default)]
    is_paused: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    relative_fileloc: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Tasks {
    tasks: Vec<Task>,
}

#[derive(Debug, Deserialize)]
struct Task {
    task_id: String,
    #[serde(default)]
    operator_name: Option<String>,
}

/// The DAGs Airflow lists (not paused ones unless `options.all`), as tools.
///
/// # Errors
///
/// Any refused or failed read: the listing, a DAG's details or its tasks.
pub(crate) async fn discover(
    client: &Client,
    options: &DiscoverOptions,
) -> Result<Vec<Discovered>, EngineError> {
    let mut dags: Vec<Dag> = Vec::new();
    loop {
        let mut path = format!("/api/v2/dags?limit={PAGE}&offset={}", dags.len());
        if !options.all {
            path.push_str("&paused=false");
        }
        let page: DagList = client
            .call(Method::GET, &path, None, action::DAG_READ)
            .await?;
        let got = page.dags.len();
        dags.extend(page.dags);
        if got < PAGE || dags.len() as u64 >= page.total_entries {
            break;
        }
        if dags.len() >= MAX_DAGS {
            tracing::warn!(
                total = page.total_entries,
                "discover: only the first {MAX_DAGS} DAGs are read"
            );
            break;
        }
    }
    dags.truncate(MAX_DAGS);
    let mut found = Vec::new();
    for dag in dags {
        let base = format!("/api/v2/dags/{}", percent_encode(&dag.dag_id));
        let details: Value = client
            .call(
                Method::GET,
                &format!("{base}/details"),
                None,
                action::DAG_READ,
            )
            .await?;
        let tasks: Tasks = client
            .call(
                Method::GET,
                &format!("{base}/tasks"),
                None,
                action::DAG_READ,
            )
            .await?;
        let params = details
            .get("params")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        found.push(tool_for(&dag, &params, &tasks.tasks));
    }
    Ok(found)
}

/// The tool for one DAG. Pure.
fn tool_for(dag: &Dag, params: &Map<String, Value>, tasks: &[Task]) -> Discovered {
    let mut notes = Vec::new();
    if dag.is_paused {
        notes.push(
            "the DAG is paused: taskgate refuses to trigger it until it is unpaused".to_owned(),
        );
    }
    let human: Vec<String> = tasks
        .iter()
        .filter_map(|t| {
            let op = t.operator_name.as_deref()?;
            HITL_OPERATORS
                .contains(&op)
                .then(|| format!("{} ({op})", t.task_id))
        })
        .collect();
    if !human.is_empty() {
        notes.push(format!(
            "human-in-the-loop: {} wait(s) for a person, asked through the client (an ApprovalOperator is an approval); consider four_eyes = true and mode = \"async\"",
            human.join(", ")
        ));
    }
    let untyped: Vec<&str> = params
        .iter()
        .filter(|(_, p)| {
            p.get("schema")
                .and_then(Value::as_object)
                .is_none_or(|s| !s.contains_key("type") && !s.contains_key("enum"))
        })
        .map(|(n, _)| n.as_str())
        .collect();
    if !untyped.is_empty() {
        notes.push(format!(
            "params without a schema type, typed from their value: {}",
            untyped.join(", ")
        ));
    }
    let display = dag.dag_display_name.as_deref().filter(|d| *d != dag.dag_id);
    let description = dag
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map_or_else(
            || format!("Triggers the Airflow DAG {}", dag.dag_id),
            str::to_owned,
        );
    let mut origin = format!("Airflow DAG {}", dag.dag_id);
    if let Some(display) = display {
        origin.push_str(&format!(" {display:?}"));
    }
    if let Some(file) = &dag.relative_fileloc {
        origin.push_str(&format!(" ({file})"));
    }
    Discovered {
        name: dag.dag_id.clone(),
        description,
        origin,
        target: json!({ "dag_id": dag.dag_id }),
        input_schema: translate::suggest_input_schema(params),
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dag_becomes_a_tool() {
        let dag = Dag {
            dag_id: "tg_approval".into(),
            dag_display_name: Some("Release".into()),
            is_paused: true,
            description: None,
            relative_fileloc: Some("taskgate_dags.py".into()),
        };
        let params = json!({"version": {"value": null, "schema": {"type": "string"}, "description": "What", "source": null}, "n": {"value": 2, "schema": {}, "description": null, "source": null}});
        let tasks = [
            Task {
                task_id: "approve_release".into(),
                operator_name: Some("ApprovalOperator".into()),
            },
            Task {
                task_id: "release".into(),
                operator_name: Some("@task".into()),
            },
        ];
        let tool = tool_for(&dag, params.as_object().unwrap(), &tasks);
        assert_eq!(tool.name, "tg_approval");
        assert_eq!(tool.target, json!({"dag_id": "tg_approval"}));
        assert_eq!(tool.description, "Triggers the Airflow DAG tg_approval");
        assert_eq!(
            tool.origin,
            "Airflow DAG tg_approval \"Release\" (taskgate_dags.py)"
        );
        assert_eq!(tool.input_schema["required"], json!(["version"]));
        assert_eq!(tool.input_schema["properties"]["n"]["type"], "integer");
        let notes = tool.notes.join("\n");
        assert!(notes.contains("paused"), "{notes}");
        assert!(
            notes.contains("approve_release (ApprovalOperator)"),
            "{notes}"
        );
        assert!(notes.contains("typed from their value: n"), "{notes}");
    }
}
