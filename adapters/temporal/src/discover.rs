//! `taskgate discover` for Temporal, the pure half: the workflow types seen in
//! the namespace's most recent executions, one tool per (workflow type, task
//! queue) pair, most recently started first. Temporal declares no workflow
//! inputs, so each tool's schema is left open (an object with any keys) and
//! a note says to write one. The reads (ListWorkflowExecutions pages) are
//! `crate::api`'s; `lib.rs` makes them.

use serde_json::json;
use taskgate_engine::Discovered;

/// ListWorkflowExecutions' page size in a discover.
pub(crate) const PAGE: i32 = 100;
/// The most pages one discover reads: the [`PAGE`] × `MAX_PAGES` most
/// recent executions.
pub(crate) const MAX_PAGES: usize = 5;
/// The most tools one discover returns.
pub(crate) const MAX_TOOLS: usize = 200;

/// One execution as the listing showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The workflow type.
    pub workflow_type: String,
    /// The task queue it ran on.
    pub task_queue: String,
}

/// A workflow name (type or task queue) the engine's `bind` accepts.
fn usable(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && !name.chars().any(char::is_control)
}

/// One tool per (workflow type, task queue) in `seen` (newest first), in the
/// order first seen; `namespace` and `executions` (how many were read) go
/// into the origin and notes. Pairs whose names `bind` would refuse are
/// left out.
#[must_use]
pub(crate) fn workflow_tools(seen: &[Seen], namespace: &str, executions: usize) -> Vec<Discovered> {
    let mut pairs: Vec<(&Seen, usize)> = Vec::new();
    for s in seen {
        if !usable(&s.workflow_type) || !usable(&s.task_queue) {
            continue;
        }
        match pairs.iter_mut().find(|(p, _)| *p == s) {
            Some((_, n)) => *n += 1,
            None => pairs.push((s, 1)),
        }
    }
    pairs.truncate(MAX_TOOLS);
    pairs
        .iter()
        .map(|(s, n)| {
            let mut notes = vec![
                "no input schema: Temporal does not declare a workflow's input; write one \
                 (the arguments are the workflow's one input, a JSON object)"
                    .to_owned(),
            ];
            let queues: Vec<&str> = pairs
                .iter()
                .filter(|(o, _)| o.workflow_type == s.workflow_type && o.task_queue != s.task_queue)
                .map(|(o, _)| o.task_queue.as_str())
                .collect();
            if !queues.is_empty() {
                notes.push(format!(
                    "the same workflow type also ran on task queue(s) {}",
                    queues.join(", ")
                ));
            }
            Discovered {
                name: s.workflow_type.clone(),
                description: format!(
                    "Starts the Temporal workflow {} on task queue {}.",
                    s.workflow_type, s.task_queue
                ),
                origin: format!(
                    "Temporal workflow type {} on task queue {} in namespace {namespace} \
                     ({n} of the {executions} most recent executions)",
                    s.workflow_type, s.task_queue
                ),
                target: json!({ "workflow_type": s.workflow_type, "task_queue": s.task_queue }),
                input_schema: json!({ "type": "object" }),
                notes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(t: &str, q: &str) -> Seen {
        Seen {
            workflow_type: t.into(),
            task_queue: q.into(),
        }
    }

    #[test]
    fn one_tool_per_type_and_queue_newest_first() {
        let list = [
            seen("Release", "deploy"),
            seen("Report", "batch"),
            seen("Release", "deploy"),
            seen("Release", "canary"),
            seen("", "q"),
            seen("Bad\nType", "q"),
        ];
        let tools = workflow_tools(&list, "prod", 6);
        let targets: Vec<_> = tools.iter().map(|t| t.target.clone()).collect();
        assert_eq!(
            targets,
            [
                json!({"workflow_type": "Release", "task_queue": "deploy"}),
                json!({"workflow_type": "Report", "task_queue": "batch"}),
                json!({"workflow_type": "Release", "task_queue": "canary"}),
            ]
        );
        assert!(
            tools[0].origin.contains("2 of the 6"),
            "{}",
            tools[0].origin
        );
        assert!(tools[0].notes.iter().any(|n| n.contains("canary")));
        assert_eq!(tools[1].input_schema, json!({"type": "object"}));
    }
}
