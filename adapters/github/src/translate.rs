//! Pure translation between GitHub's payloads and taskgate's canonical state: a
//! workflow run's `status` + `conclusion` (and, when needed, its jobs, artifacts and
//! pending deployments) become a [`RunState`]; tool arguments become dispatch
//! `inputs`; an answer becomes a deployment review. No I/O here.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use taskgate_engine::{
    Content, EngineError, InputAction, InputRequest, InputResponse, Progress, RunState, Snapshot,
    ToolOutput,
};

use crate::config::ApprovalSettings;

/// A workflow run (`GET /repos/{owner}/{repo}/actions/runs/{run_id}`), the fields
/// taskgate reads.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct WorkflowRun {
    /// The run id.
    pub id: u64,
    /// The workflow's name.
    #[serde(default)]
    pub name: Option<String>,
    /// The run's title (the workflow's `run-name`, when it has one).
    #[serde(default)]
    pub display_title: Option<String>,
    /// `requested`, `queued`, `pending`, `waiting`, `in_progress`, `completed`, …
    #[serde(default)]
    pub status: Option<String>,
    /// Set once completed: `success`, `failure`, `cancelled`, `timed_out`, …
    #[serde(default)]
    pub conclusion: Option<String>,
    /// The run's page.
    #[serde(default)]
    pub html_url: Option<String>,
    /// The run's number in its workflow.
    #[serde(default)]
    pub run_number: Option<u64>,
    /// The attempt (re-runs increase it).
    #[serde(default)]
    pub run_attempt: Option<u64>,
    /// The event that started it.
    #[serde(default)]
    pub event: Option<String>,
    /// When it was created.
    #[serde(default)]
    pub created_at: Option<String>,
    /// When it last changed.
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// `GET …/runs?…` (a page of runs).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RunList {
    /// The runs, newest first.
    #[serde(default)]
    pub workflow_runs: Vec<WorkflowRun>,
}

/// A job of a run.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct Job {
    /// The job id.
    pub id: u64,
    /// The job's name.
    pub name: String,
    /// `queued`, `in_progress`, `completed`, `waiting`, …
    #[serde(default)]
    pub status: Option<String>,
    /// Set once completed.
    #[serde(default)]
    pub conclusion: Option<String>,
    /// The job's page.
    #[serde(default)]
    pub html_url: Option<String>,
    /// Its steps.
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// A step of a job.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct Step {
    /// The step's name.
    pub name: String,
    /// `queued`, `in_progress`, `completed`.
    #[serde(default)]
    pub status: Option<String>,
    /// Set once completed.
    #[serde(default)]
    pub conclusion: Option<String>,
    /// Its position, from 1.
    #[serde(default)]
    pub number: Option<u64>,
}

/// `GET …/runs/{id}/jobs`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct JobList {
    /// The jobs.
    #[serde(default)]
    pub jobs: Vec<Job>,
}

/// An artifact of a run.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct Artifact {
    /// Its name.
    pub name: String,
    /// Its size.
    #[serde(default)]
    pub size_in_bytes: Option<u64>,
    /// Where to download it (needs a token with `actions: read`).
    #[serde(default)]
    pub archive_download_url: Option<String>,
    /// True once retention removed it.
    #[serde(default)]
    pub expired: bool,
}

/// `GET …/runs/{id}/artifacts`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ArtifactList {
    /// The artifacts.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

/// An entry of `GET …/runs/{id}/pending_deployments`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct PendingDeployment {
    /// The protected environment.
    pub environment: Environment,
    /// Minutes of the environment's wait timer.
    #[serde(default)]
    pub wait_timer: Option<u64>,
    /// Whether taskgate's token may review it.
    #[serde(default)]
    pub current_user_can_approve: bool,
}

/// A deployment environment.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct Environment {
    /// Its id (what a review names).
    pub id: u64,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
}

/// The 200 answer of a dispatch with `return_run_details: true`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct DispatchResponse {
    /// The run the dispatch created.
    pub workflow_run_id: u64,
    /// Its API URL.
    #[serde(default)]
    pub run_url: Option<String>,
    /// Its page.
    #[serde(default)]
    pub html_url: Option<String>,
}

/// Which extra reads a run needs before it can be translated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Needs {
    /// The run's jobs.
    pub jobs: bool,
    /// The run's artifacts.
    pub artifacts: bool,
    /// The run's pending deployments.
    pub pending: bool,
}

/// What the extra reads found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Details {
    /// The run's jobs, when read.
    pub jobs: Option<Vec<Job>>,
    /// The run's artifacts, when read.
    pub artifacts: Option<Vec<Artifact>>,
    /// The run's pending deployments, when read.
    pub pending: Option<Vec<PendingDeployment>>,
}

const FAILED: &[&str] = &[
    "failure",
    "timed_out",
    "startup_failure",
    "action_required",
    "stale",
];
const SUCCEEDED: &[&str] = &["success", "neutral", "skipped"];

/// Decides which extra calls [`translate`] needs for `run`: at most two (jobs and
/// artifacts of a successful run), one otherwise.
#[must_use]
pub(crate) fn needs(run: &WorkflowRun) -> Needs {
    let status = run.status.as_deref().unwrap_or("");
    let conclusion = run.conclusion.as_deref().unwrap_or("");
    match status {
        "in_progress" => Needs {
            jobs: true,
            ..Needs::default()
        },
        "waiting" => Needs {
            pending: true,
            ..Needs::default()
        },
        "completed" if SUCCEEDED.contains(&conclusion) => Needs {
            jobs: true,
            artifacts: true,
            pending: false,
        },
        "completed" if FAILED.contains(&conclusion) => Needs {
            jobs: true,
            ..Needs::default()
        },
        _ => Needs::default(),
    }
}

/// Translates a run (and what [`needs`] asked for) into the canonical state.
/// `approval` is the tool's `environment_approval`, when the human step is on.
#[must_use]
pub(crate) fn translate(
    run: &WorkflowRun,
    details: &Details,
    approval: Option<&ApprovalSettings>,
) -> RunState {
    let status = run.status.as_deref().unwrap_or("");
    match status {
        "queued" => RunState::working("queued, waiting for a runner"),
        "requested" => RunState::working("requested, about to be queued"),
        "pending" => RunState::working("pending, waiting for a concurrency slot"),
        "waiting" => waiting(details.pending.as_deref().unwrap_or(&[]), approval),
        "in_progress" => in_progress(details.jobs.as_deref()),
        "completed" => completed(run, details),
        other => RunState::Failed {
            message: format!("the workflow run reports an unknown status {other:?}"),
        },
    }
}

/// Builds the snapshot of `run` in `state`, with the run's timestamps.
#[must_use]
pub(crate) fn snapshot(run: &WorkflowRun, state: RunState) -> Snapshot {
    let created_at = run.created_at.as_deref().and_then(parse_time);
    let updated_at = run.updated_at.as_deref().and_then(parse_time);
    let ended_at = state.is_terminal().then_some(updated_at).flatten();
    Snapshot {
        state,
        created_at,
        updated_at,
        ended_at,
        poll_hint: None,
        revision: None,
    }
}

/// Parses an RFC 3339 timestamp as GitHub writes them (`Z` or an offset).
#[must_use]
pub(crate) fn parse_time(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(SystemTime::from)
}

fn waiting(pending: &[PendingDeployment], approval: Option<&ApprovalSettings>) -> RunState {
    let names = |list: &[&PendingDeployment]| {
        list.iter()
            .map(|p| env_name(p).to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let all: Vec<&PendingDeployment> = pending.iter().collect();
    if all.is_empty() {
        return RunState::working("waiting for a deployment protection rule");
    }
    let reviewable: Vec<&PendingDeployment> = pending
        .iter()
        .filter(|p| p.current_user_can_approve)
        .collect();
    match approval {
        Some(settings) if !reviewable.is_empty() => {
            let requests: BTreeMap<String, InputRequest> = reviewable
                .iter()
                .map(|p| {
                    (
                        request_key(p.environment.id),
                        InputRequest {
                            message: approval_message(settings, env_name(p)),
                            requested_schema: approval_schema(settings),
                            approval: true,
                        },
                    )
                })
                .collect();
            RunState::InputRequired {
                requests,
                message: Some(format!(
                    "waiting for approval of the deployment to {}",
                    names(&reviewable)
                )),
            }
        }
        _ => {
            let timer = all
                .iter()
                .filter_map(|p| p.wait_timer.filter(|m| *m > 0))
                .max();
            let mut message = format!(
                "waiting for a reviewer on GitHub to approve the deployment to {}",
                names(&all)
            );
            if let Some(minutes) = timer {
                message.push_str(&format!(" (wait timer: {minutes} min)"));
            }
            RunState::working(message)
        }
    }
}

fn env_name(p: &PendingDeployment) -> &str {
    p.environment.name.as_deref().unwrap_or("an environment")
}

/// The input request key of a pending deployment to environment `id`.
#[must_use]
pub(crate) fn request_key(environment_id: u64) -> String {
    format!("environment-{environment_id}")
}

/// The environment id of an input request key made by [`request_key`].
#[must_use]
pub(crate) fn parse_request_key(key: &str) -> Option<u64> {
    key.strip_prefix("environment-")?.parse().ok()
}

fn approval_message(settings: &ApprovalSettings, environment: &str) -> String {
    settings
        .message
        .as_deref()
        .unwrap_or("Approve deployment to {environment}?")
        .replace("{environment}", environment)
}

fn approval_schema(settings: &ApprovalSettings) -> Value {
    settings.schema.clone().unwrap_or_else(|| {
        json!({
            "type": "object",
            "properties": {
                "comment": {
                    "type": "string",
                    "description": "A comment for the deployment review"
                }
            }
        })
    })
}

/// The body of `POST …/runs/{id}/pending_deployments` answering request `key`:
/// accept approves (unless the content says `approve: false`); decline and cancel
/// reject.
///
/// # Errors
///
/// [`EngineError::InvalidInput`] when `key` is not one this engine made.
pub(crate) fn review_body(key: &str, response: &InputResponse) -> Result<Value, EngineError> {
    let environment_id = parse_request_key(key).ok_or_else(|| EngineError::InvalidInput {
        message: format!("unknown input request {key:?}"),
    })?;
    let content = response.content.as_ref();
    let vetoed = content
        .and_then(|c| c.get("approve").or_else(|| c.get("approved")))
        .and_then(Value::as_bool)
        == Some(false);
    let approved = response.action == InputAction::Accept && !vetoed;
    let comment = content
        .and_then(|c| c.get("comment"))
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
        .map_or_else(
            || {
                if approved {
                    "Approved through taskgate".to_owned()
                } else {
                    "Rejected through taskgate".to_owned()
                }
            },
            str::to_owned,
        );
    Ok(json!({
        "environment_ids": [environment_id],
        "state": if approved { "approved" } else { "rejected" },
        "comment": comment,
    }))
}

fn in_progress(jobs: Option<&[Job]>) -> RunState {
    let Some(jobs) = jobs.filter(|j| !j.is_empty()) else {
        return RunState::working("in progress");
    };
    let done = jobs
        .iter()
        .filter(|j| j.status.as_deref() == Some("completed"))
        .count();
    let progress = Some(Progress {
        #[allow(clippy::cast_precision_loss)]
        done: done as f64,
        #[allow(clippy::cast_precision_loss)]
        total: Some(jobs.len() as f64),
    });
    let running = jobs
        .iter()
        .find(|j| j.status.as_deref() == Some("in_progress"));
    let message = match running {
        Some(job) => {
            let step = job
                .steps
                .iter()
                .find(|s| s.status.as_deref() == Some("in_progress"));
            match step {
                Some(step) => format!(
                    "running job {}, step {}/{}: {}",
                    job.name,
                    step.number.unwrap_or(0),
                    job.steps.len(),
                    step.name
                ),
                None => format!("running job {}", job.name),
            }
        }
        None if jobs.iter().any(|j| j.status.as_deref() == Some("waiting")) => {
            "a job is waiting for a deployment protection rule".to_owned()
        }
        None => "in progress, waiting for a runner".to_owned(),
    };
    RunState::Working {
        message: Some(message),
        progress,
    }
}

fn completed(run: &WorkflowRun, details: &Details) -> RunState {
    let conclusion = run.conclusion.as_deref().unwrap_or("");
    let html_url = run.html_url.clone().unwrap_or_default();
    let jobs = details.jobs.as_deref().unwrap_or(&[]);
    let job_list: Vec<Value> = jobs
        .iter()
        .map(|j| json!({"name": j.name, "conclusion": j.conclusion}))
        .collect();
    if conclusion == "cancelled" {
        return RunState::Cancelled {
            message: Some("the workflow run was cancelled".to_owned()),
        };
    }
    let link = Content::Link {
        uri: html_url.clone(),
        name: format!("workflow run {}", run.id),
        mime_type: Some("text/html".to_owned()),
    };
    if SUCCEEDED.contains(&conclusion) {
        let artifacts: Vec<Value> = details
            .artifacts
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .filter(|a| !a.expired)
            .map(|a| {
                json!({
                    "name": a.name,
                    "size_in_bytes": a.size_in_bytes,
                    "archive_download_url": a.archive_download_url,
                })
            })
            .collect();
        let structured = json!({
            "run_id": run.id,
            "conclusion": conclusion,
            "html_url": html_url,
            "jobs": job_list,
            "artifacts": artifacts,
        });
        let mut output = ToolOutput::from_json(structured, false);
        output.content.push(link);
        return RunState::Completed(output);
    }
    if FAILED.contains(&conclusion) {
        let failed: Vec<&Job> = jobs
            .iter()
            .filter(|j| {
                !matches!(
                    j.conclusion.as_deref(),
                    None | Some("success" | "skipped" | "neutral")
                )
            })
            .collect();
        let failed_jobs: Vec<Value> = failed
            .iter()
            .map(|j| {
                let steps: Vec<Value> = j
                    .steps
                    .iter()
                    .filter(|s| {
                        !matches!(
                            s.conclusion.as_deref(),
                            None | Some("success" | "skipped" | "neutral")
                        )
                    })
                    .map(
                        |s| json!({"number": s.number, "name": s.name, "conclusion": s.conclusion}),
                    )
                    .collect();
                json!({
                    "name": j.name,
                    "conclusion": j.conclusion,
                    "html_url": j.html_url,
                    "failed_steps": steps,
                })
            })
            .collect();
        let summary = if failed.is_empty() {
            format!("The workflow run ended with {conclusion}.")
        } else {
            let parts: Vec<String> = failed
                .iter()
                .map(|j| {
                    let step = j.steps.iter().find(|s| {
                        matches!(
                            s.conclusion.as_deref(),
                            Some("failure" | "timed_out" | "cancelled")
                        )
                    });
                    match step {
                        Some(s) => format!("job {} failed at step {:?}", j.name, s.name),
                        None => format!(
                            "job {} ended with {}",
                            j.name,
                            j.conclusion.as_deref().unwrap_or("?")
                        ),
                    }
                })
                .collect();
            format!(
                "The workflow run ended with {conclusion}: {}.",
                parts.join("; ")
            )
        };
        let structured = json!({
            "run_id": run.id,
            "conclusion": conclusion,
            "html_url": html_url,
            "jobs": job_list,
            "failed_jobs": failed_jobs,
        });
        return RunState::Completed(ToolOutput {
            content: vec![Content::Text(summary), link],
            structured: Some(structured),
            is_error: true,
        });
    }
    RunState::Failed {
        message: format!("the workflow run completed with an unknown conclusion {conclusion:?}"),
    }
}

/// Turns tool arguments into workflow_dispatch `inputs`. GitHub inputs are strings:
/// numbers and booleans are written out, arrays and objects become JSON text, nulls
/// are left out.
///
/// # Errors
///
/// [`EngineError::InvalidInput`] when the arguments are not an object, hold more
/// than the 25 inputs GitHub accepts (less the ones taskgate adds: the
/// correlation input and the `trace_input`), or use one of their names.
pub(crate) fn dispatch_inputs(
    arguments: &Value,
    correlation_input: &str,
    trace_input: Option<&str>,
) -> Result<Map<String, Value>, EngineError> {
    let object = match arguments {
        Value::Object(o) => o,
        Value::Null => return Ok(Map::new()),
        _ => {
            return Err(EngineError::InvalidInput {
                message: "workflow inputs must be an object".to_owned(),
            })
        }
    };
    let mut inputs = Map::new();
    for (name, value) in object {
        if name == correlation_input || Some(name.as_str()) == trace_input {
            return Err(EngineError::InvalidInput {
                message: format!("the input {name:?} is reserved for taskgate"),
            });
        }
        let text = match value {
            Value::Null => continue,
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            other => other.to_string(),
        };
        inputs.insert(name.clone(), Value::String(text));
    }
    let room = 25 - 1 - usize::from(trace_input.is_some());
    if inputs.len() > room {
        return Err(EngineError::InvalidInput {
            message: format!(
                "GitHub accepts at most 25 workflow inputs (taskgate may need {}); got {}",
                25 - room,
                inputs.len()
            ),
        });
    }
    Ok(inputs)
}

/// True when `title` (a run's `display_title` or `name`) carries `run_name` as a
/// whole word (run names are lowercase letters, digits and `-`).
#[must_use]
pub(crate) fn title_mentions(title: &str, run_name: &str) -> bool {
    !run_name.is_empty()
        && title
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .any(|word| word == run_name)
}

/// A short tag of the dispatch inputs (their JSON with sorted keys), written
/// after the run name in the correlation input: `tg-….<tag>`.
#[must_use]
pub(crate) fn inputs_tag(inputs: &Map<String, Value>) -> String {
    let text = serde_json::to_string(inputs).unwrap_or_default();
    taskgate_engine::spec_hash(text.as_bytes())[..12].to_owned()
}

/// The inputs tag a run's title carries after `run_name` (`deploy tg-abc.<tag>`),
/// if it has one (runs dispatched before tags existed have none).
#[must_use]
pub(crate) fn title_tag<'a>(run: &'a WorkflowRun, run_name: &str) -> Option<&'a str> {
    let marker = format!("{run_name}.");
    [run.display_title.as_deref(), run.name.as_deref()]
        .into_iter()
        .flatten()
        .find_map(|title| {
            let at = title.find(&marker)? + marker.len();
            let rest = &title[at..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
}

/// The newest run in `runs` whose title carries `run_name`.
#[must_use]
pub(crate) fn find_by_run_name<'a>(
    runs: &'a [WorkflowRun],
    run_name: &str,
) -> Option<&'a WorkflowRun> {
    runs.iter().find(|r| {
        [r.display_title.as_deref(), r.name.as_deref()]
            .into_iter()
            .flatten()
            .any(|t| title_mentions(t, run_name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    fn run(status: &str, conclusion: Option<&str>) -> WorkflowRun {
        let mut v = fixture("workflow-run.json");
        v["status"] = json!(status);
        v["conclusion"] = json!(conclusion);
        serde_json::from_value(v).unwrap()
    }

    fn jobs() -> Vec<Job> {
        serde_json::from_value::<JobList>(fixture("job-paginated.json"))
            .unwrap()
            .jobs
    }

    fn artifacts() -> Vec<Artifact> {
        serde_json::from_value::<ArtifactList>(fixture("artifact-paginated.json"))
            .unwrap()
            .artifacts
    }

    fn pending() -> Vec<PendingDeployment> {
        serde_json::from_value(fixture("pending-deployment-items.json")).unwrap()
    }

    fn all_details() -> Details {
        Details {
            jobs: Some(jobs()),
            artifacts: Some(artifacts()),
            pending: Some(pending()),
        }
    }

    fn message(state: &RunState) -> String {
        match state {
            RunState::Working { message, .. } | RunState::InputRequired { message, .. } => {
                message.clone().unwrap_or_default()
            }
            other => panic!("not working: {other:?}"),
        }
    }

    #[test]
    fn the_published_run_parses_with_its_timestamps() {
        let r = run("queued", None);
        assert_eq!(r.id, 30_433_642);
        let snap = snapshot(&r, RunState::working("x"));
        assert!(snap.created_at.is_some());
        assert_eq!(snap.ended_at, None);
        let done = snapshot(&r, RunState::Cancelled { message: None });
        assert_eq!(done.ended_at, done.updated_at);
        // Step timestamps use an offset rather than Z.
        assert!(parse_time("2020-01-20T09:42:40.000-08:00").is_some());
    }

    #[test]
    fn status_and_conclusion_table() {
        type Check = fn(&RunState) -> bool;
        let table: &[(&str, Option<&str>, Needs, Check)] = &[
            ("queued", None, Needs::default(), |s| {
                message(s).contains("queued")
            }),
            ("requested", None, Needs::default(), |s| {
                message(s).contains("requested")
            }),
            ("pending", None, Needs::default(), |s| {
                message(s).contains("pending")
            }),
            (
                "in_progress",
                None,
                Needs {
                    jobs: true,
                    artifacts: false,
                    pending: false,
                },
                |s| matches!(s, RunState::Working { .. }),
            ),
            (
                "waiting",
                None,
                Needs {
                    jobs: false,
                    artifacts: false,
                    pending: true,
                },
                |s| matches!(s, RunState::InputRequired { .. }),
            ),
            (
                "completed",
                Some("success"),
                Needs {
                    jobs: true,
                    artifacts: true,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if !o.is_error),
            ),
            (
                "completed",
                Some("neutral"),
                Needs {
                    jobs: true,
                    artifacts: true,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if !o.is_error),
            ),
            (
                "completed",
                Some("skipped"),
                Needs {
                    jobs: true,
                    artifacts: true,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if !o.is_error),
            ),
            (
                "completed",
                Some("failure"),
                Needs {
                    jobs: true,
                    artifacts: false,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if o.is_error),
            ),
            (
                "completed",
                Some("timed_out"),
                Needs {
                    jobs: true,
                    artifacts: false,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if o.is_error),
            ),
            (
                "completed",
                Some("startup_failure"),
                Needs {
                    jobs: true,
                    artifacts: false,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if o.is_error),
            ),
            (
                "completed",
                Some("action_required"),
                Needs {
                    jobs: true,
                    artifacts: false,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if o.is_error),
            ),
            (
                "completed",
                Some("stale"),
                Needs {
                    jobs: true,
                    artifacts: false,
                    pending: false,
                },
                |s| matches!(s, RunState::Completed(o) if o.is_error),
            ),
            ("completed", Some("cancelled"), Needs::default(), |s| {
                matches!(s, RunState::Cancelled { .. })
            }),
            ("completed", Some("mystery"), Needs::default(), |s| {
                matches!(s, RunState::Failed { .. })
            }),
            ("completed", None, Needs::default(), |s| {
                matches!(s, RunState::Failed { .. })
            }),
            ("exploded", None, Needs::default(), |s| {
                matches!(s, RunState::Failed { .. })
            }),
        ];
        let approval = ApprovalSettings::default();
        for (status, conclusion, want_needs, check) in table {
            let r = run(status, *conclusion);
            assert_eq!(needs(&r), *want_needs, "{status}/{conclusion:?}");
            let state = translate(&r, &all_details(), Some(&approval));
            assert!(check(&state), "{status}/{conclusion:?} -> {state:?}");
        }
    }

    #[test]
    fn success_carries_jobs_artifacts_and_a_link() {
        let r = run("completed", Some("success"));
        let RunState::Completed(out) = translate(&r, &all_details(), None) else {
            panic!()
        };
        let s = out.structured.unwrap();
        assert_eq!(s["conclusion"], "success");
        assert_eq!(
            s["html_url"],
            "https://github.com/octo-org/octo-repo/actions/runs/30433642"
        );
        assert_eq!(
            s["jobs"],
            json!([{"name": "build", "conclusion": "success"}])
        );
        assert_eq!(s["artifacts"][0]["name"], "Rails");
        assert_eq!(s["artifacts"][0]["size_in_bytes"], 556);
        assert_eq!(
            s["artifacts"][1]["archive_download_url"],
            "https://api.github.com/repos/octo-org/octo-docs/actions/artifacts/13/zip"
        );
        assert!(out.content.iter().any(|c| matches!(c,
            Content::Link { uri, .. } if uri == "https://github.com/octo-org/octo-repo/actions/runs/30433642")));
    }

    #[test]
    fn failure_names_failed_jobs_and_steps() {
        let mut failing = jobs();
        failing[0].conclusion = Some("failure".into());
        failing[0].steps[6].conclusion = Some("failure".into());
        let details = Details {
            jobs: Some(failing),
            ..Details::default()
        };
        let RunState::Completed(out) =
            translate(&run("completed", Some("failure")), &details, None)
        else {
            panic!()
        };
        assert!(out.is_error);
        let s = out.structured.unwrap();
        assert_eq!(s["failed_jobs"][0]["name"], "build");
        assert_eq!(s["failed_jobs"][0]["failed_steps"][0]["name"], "Run Tests");
        let Content::Text(text) = &out.content[0] else {
            panic!()
        };
        assert!(
            text.contains("job build failed at step \"Run Tests\""),
            "{text}"
        );
    }

    #[test]
    fn in_progress_names_the_current_job_and_step() {
        let mut running = jobs();
        running[0].status = Some("in_progress".into());
        running[0].conclusion = None;
        for s in &mut running[0].steps[2..] {
            s.status = Some("queued".into());
            s.conclusion = None;
        }
        running[0].steps[2].status = Some("in_progress".into());
        let details = Details {
            jobs: Some(running),
            ..Details::default()
        };
        let state = translate(&run("in_progress", None), &details, None);
        let RunState::Working { message, progress } = state else {
            panic!()
        };
        assert_eq!(
            message.unwrap(),
            "running job build, step 3/10: Set up Ruby"
        );
        assert_eq!(
            progress,
            Some(Progress {
                done: 0.0,
                total: Some(1.0)
            })
        );
        // No jobs read (or none yet): still working.
        assert_eq!(
            translate(&run("in_progress", None), &Details::default(), None),
            RunState::working("in progress")
        );
    }

    #[test]
    fn a_protected_environment_asks_when_approval_is_on() {
        let r = run("waiting", None);
        let settings = ApprovalSettings {
            message: Some("Ship to {environment}?".into()),
            schema: None,
        };
        let RunState::InputRequired { requests, .. } =
            translate(&r, &all_details(), Some(&settings))
        else {
            panic!()
        };
        let req = &requests["environment-161088068"];
        assert_eq!(req.message, "Ship to staging?");
        assert!(req.approval, "an environment review is an approval gate");
        assert_eq!(req.requested_schema["type"], "object");
        // Without the setting: working, naming the environment and its timer.
        let state = translate(&r, &all_details(), None);
        assert!(
            message(&state).contains("staging (wait timer: 30 min)"),
            "{state:?}"
        );
        // A token that may not review it: working too.
        let mut p = pending();
        p[0].current_user_can_approve = false;
        let details = Details {
            pending: Some(p),
            ..Details::default()
        };
        assert!(matches!(
            translate(&r, &details, Some(&settings)),
            RunState::Working { .. }
        ));
        // Nothing pending: a custom protection rule.
        assert!(
            message(&translate(&r, &Details::default(), Some(&settings)))
                .contains("protection rule")
        );
    }

    #[test]
    fn reviews_from_answers() {
        let accept = InputResponse {
            action: InputAction::Accept,
            content: Some(json!({"comment": "ship it"})),
        };
        assert_eq!(
            review_body("environment-161088068", &accept).unwrap(),
            json!({"environment_ids": [161_088_068], "state": "approved", "comment": "ship it"})
        );
        let decline = InputResponse {
            action: InputAction::Decline,
            content: None,
        };
        assert_eq!(
            review_body("environment-7", &decline).unwrap()["state"],
            "rejected"
        );
        let veto = InputResponse {
            action: InputAction::Accept,
            content: Some(json!({"approve": false})),
        };
        assert_eq!(
            review_body("environment-7", &veto).unwrap()["state"],
            "rejected"
        );
        assert!(matches!(
            review_body("job-7", &decline),
            Err(EngineError::InvalidInput { .. })
        ));
    }

    #[test]
    fn arguments_become_string_inputs() {
        let inputs = dispatch_inputs(
            &json!({"name": "Mona", "count": 3, "dry_run": true, "tags": ["a"], "skip": null}),
            "taskgate_run",
            None,
        )
        .unwrap();
        assert_eq!(
            Value::Object(inputs),
            json!({"name": "Mona", "count": "3", "dry_run": "true", "tags": "[\"a\"]"})
        );
        assert!(dispatch_inputs(&json!([1]), "taskgate_run", None).is_err());
        assert!(dispatch_inputs(&json!({"taskgate_run": "x"}), "taskgate_run", None).is_err());
        // The trace input is taskgate's too, and takes one of the 25 places.
        let trace = Some("traceparent");
        assert!(dispatch_inputs(&json!({"traceparent": "x"}), "taskgate_run", trace).is_err());
        let many: Map<String, Value> = (0..24).map(|i| (format!("i{i}"), json!("v"))).collect();
        assert!(dispatch_inputs(&Value::Object(many.clone()), "taskgate_run", None).is_ok());
        assert!(dispatch_inputs(&Value::Object(many), "taskgate_run", trace).is_err());
        assert!(dispatch_inputs(&Value::Null, "taskgate_run", None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn runs_are_found_by_their_name() {
        let mut runs = serde_json::from_value::<RunList>(fixture("workflow-run-paginated.json"))
            .unwrap()
            .workflow_runs;
        assert!(find_by_run_name(&runs, "tg-abc").is_none());
        runs[0].display_title = Some("deploy tg-abc".into());
        assert_eq!(find_by_run_name(&runs, "tg-abc").unwrap().id, runs[0].id);
        assert!(find_by_run_name(&runs, "tg-ab").is_none());
        assert!(title_mentions("deploy (tg-abc)", "tg-abc"));
        assert!(!title_mentions("deploy tg-abcd", "tg-abc"));
        runs[0].display_title = Some("deploy tg-abc.0123abcd4567".into());
        assert_eq!(find_by_run_name(&runs, "tg-abc").unwrap().id, runs[0].id);
        assert_eq!(title_tag(&runs[0], "tg-abc"), Some("0123abcd4567"));
        assert_eq!(title_tag(&runs[0], "tg-ab"), None);
        runs[0].display_title = Some("deploy tg-abc".into());
        assert_eq!(title_tag(&runs[0], "tg-abc"), None);
    }

    #[test]
    fn the_inputs_tag_ignores_order() {
        let a =
            dispatch_inputs(&serde_json::json!({"a": 1, "b": "x"}), "taskgate_run", None).unwrap();
        let b =
            dispatch_inputs(&serde_json::json!({"b": "x", "a": 1}), "taskgate_run", None).unwrap();
        let c =
            dispatch_inputs(&serde_json::json!({"a": 2, "b": "x"}), "taskgate_run", None).unwrap();
        assert_eq!(inputs_tag(&a), inputs_tag(&b));
        assert_ne!(inputs_tag(&a), inputs_tag(&c));
        assert_eq!(inputs_tag(&a).len(), 12);
    }

    #[test]
    fn the_dispatch_answer_parses() {
        let d: DispatchResponse =
            serde_json::from_value(fixture("workflow-dispatch-response.json")).unwrap();
        assert_eq!(d.workflow_run_id, 1);
    }
}
