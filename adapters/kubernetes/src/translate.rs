//! Pure functions between taskgate and batch/v1 Jobs: rendering a Job from the
//! tool's template and a call's arguments (structured edits of the Job object,
//! never text templating), and translating a Job (its conditions, counts and
//! annotations) and its pod into the canonical [`RunState`]. Table-tested on Job and
//! Pod JSON captured from a real control plane (`tests/fixtures/`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authorization::v1::ResourceRule;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobCondition};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;
use taskgate_engine::{
    arg_env_value, arguments_env, spec_hash, EngineError, InputRequest, Progress, RunState,
    Snapshot, StartRequest, ToolOutput, TraceContext,
};

use crate::config::{ApprovalGate, Bound, Source};

/// Label: the tool that started the Job.
pub(crate) const LABEL_TOOL: &str = "taskgate.io/tool";
/// Label: the caller's tag (a hash, never the identity).
pub(crate) const LABEL_CALLER: &str = "taskgate.io/caller";
/// Label: the run name (equal to the Job name).
pub(crate) const LABEL_RUN: &str = "taskgate.io/run";
/// Annotation: the hash of the rendered Job spec, compared on a retried start.
pub(crate) const ANN_SPEC_HASH: &str = "taskgate.io/spec-hash";
/// Annotation: `pending` while an approval gate waits, `accepted` once resumed.
pub(crate) const ANN_APPROVAL: &str = "taskgate.io/approval";
/// Annotation (Job and pod template): the approval's answer as JSON.
pub(crate) const ANN_APPROVAL_ANSWER: &str = "taskgate.io/approval-answer";
/// Annotation: set to `true` by a cancel (either mode); the Job then reads cancelled.
pub(crate) const ANN_CANCELLED: &str = "taskgate.io/cancelled";
/// Annotation: the W3C `traceparent` the run was started under (Jobs and
/// resource objects).
pub(crate) const ANN_TRACEPARENT: &str = "taskgate.io/traceparent";
/// Annotation: the W3C `tracestate` the run was started under, when there is one.
pub(crate) const ANN_TRACESTATE: &str = "taskgate.io/tracestate";
/// The environment variable that carries `traceparent` into every container.
pub(crate) const ENV_TRACEPARENT: &str = "TRACEPARENT";
/// The environment variable that carries `tracestate` into every container.
pub(crate) const ENV_TRACESTATE: &str = "TRACESTATE";
/// The input request key of an approval gate.
pub(crate) const APPROVAL_KEY: &str = "approval";
/// The approval annotation's value while waiting.
pub(crate) const APPROVAL_PENDING: &str = "pending";
/// The approval annotation's value once accepted.
pub(crate) const APPROVAL_ACCEPTED: &str = "accepted";
/// The most bytes of log a result carries.
pub(crate) const LOG_LIMIT_BYTES: i64 = 16 * 1024;

/// A label-safe form of `value`: itself when it is a valid label value, else a
/// hash of it (`h-<16 hex>`).
#[must_use]
pub(crate) fn label_value(value: &str) -> String {
    let valid = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && value
            .chars()
            .next()
            .is_none_or(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .last()
            .is_none_or(|c| c.is_ascii_alphanumeric());
    if valid {
        value.to_owned()
    } else {
        format!("h-{}", spec_hash(value.as_bytes()))
    }
}

pub(crate) use taskgate_engine::canonical_json as canonical;

/// The environment variables that carry `arguments` into the container: one
/// per top-level argument under `args_env_prefix` (the shared mapping of
/// [`taskgate_engine::arguments_env`]), and all of them as JSON in
/// `args_json_env`.
///
/// # Errors
///
/// [`EngineError::InvalidInput`] for two arguments on one name or a value with
/// a NUL byte (nothing is created).
pub(crate) fn argument_env(bound: &Bound, arguments: &Value) -> Result<Vec<EnvVar>, EngineError> {
    let arguments = canonical(arguments);
    let mut env = Vec::new();
    if let Some(prefix) = &bound.args_env_prefix {
        env.extend(
            arguments_env(prefix, &arguments)?
                .into_iter()
                .map(|(name, value)| EnvVar {
                    name,
                    value: Some(value),
                    value_from: None,
                }),
        );
    }
    if let Some(name) = &bound.args_json_env {
        // Configuration keeps this name off the prefix: no argument has it.
        env.retain(|e: &EnvVar| &e.name != name);
        env.push(EnvVar {
            name: name.clone(),
            value: Some(arguments.to_string()),
            value_from: None,
        });
    }
    Ok(env)
}

/// Renders the Job of one call: the template with the run's name, namespace,
/// labels, arguments (environment of the chosen container), suspension (approval
/// gate) and TTL set, and the spec hash annotated. Argument variables are
/// added to the container's own and never replace one of them (configuration
/// keeps the template's names off the prefix; a clash would keep the
/// template's).
///
/// The trace context, when the request has one, is added after the spec hash
/// is taken ([`add_trace`]): a retried start under another trace finds the Job
/// the first one made instead of a conflict.
///
/// # Errors
///
/// [`EngineError::InvalidInput`] from [`argument_env`].
pub(crate) fn render_job(
    bound: &Bound,
    template: &Job,
    container: &str,
    tool: &str,
    namespace: &str,
    request: &StartRequest,
    keep_alive: Option<Duration>,
) -> Result<Job, EngineError> {
    let mut job = template.clone();
    // A CronJob's Job keeps the owner reference `cronjob_job` made; a
    // configured template never brings one.
    let owners = match &bound.source {
        Source::CronJob(_) => job.metadata.owner_references.take(),
        Source::Template(_) => None,
    };
    let meta = &mut job.metadata;
    meta.name = Some(request.run_name.clone());
    meta.generate_name = None;
    meta.namespace = Some(namespace.to_owned());
    meta.resource_version = None;
    meta.uid = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.owner_references = owners;
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(LABEL_TOOL.into(), label_value(tool));
    labels.insert(LABEL_CALLER.into(), label_value(&request.caller_tag));
    labels.insert(LABEL_RUN.into(), request.run_name.clone());
    let spec = job.spec.get_or_insert_with(Default::default);
    if let Some(keep) = keep_alive {
        let secs = i32::try_from(keep.as_secs()).unwrap_or(i32::MAX);
        spec.ttl_seconds_after_finished = Some(secs);
    }
    if bound.approval.is_some() {
        spec.suspend = Some(true);
    }
    let env = argument_env(bound, &request.arguments)?;
    if let Some(pod) = spec.template.spec.as_mut() {
        if let Some(container) = pod.containers.iter_mut().find(|c| c.name == container) {
            let existing = container.env.get_or_insert_with(Vec::new);
            // The variables the operator opened to arguments (env_arguments):
            // literal values only (checked with the template).
            for var in existing.iter_mut() {
                if var.value_from.is_none() && bound.env_arguments.contains(&var.name) {
                    if let Some(value) = request.arguments.get(&var.name) {
                        var.value = Some(arg_env_value(value));
                    }
                }
            }
            let own: BTreeSet<String> = existing.iter().map(|e| e.name.clone()).collect();
            existing.extend(env.into_iter().filter(|e| !own.contains(&e.name)));
        }
    }
    let hash = match &bound.source {
        Source::Template(_) => spec_hash(&serde_json::to_vec(&job.spec).unwrap_or_default()),
        // What the call decides: the CronJob's template may be edited between
        // a start and its retry, which still finds the Job it made.
        Source::CronJob(name) => {
            let decided = serde_json::json!({
                "from_cronjob": name,
                "arguments": canonical(&request.arguments),
                "approval": bound.approval.is_some(),
            });
            spec_hash(decided.to_string().as_bytes())
        }
    };
    let annotations = job.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANN_SPEC_HASH.into(), hash);
    if bound.approval.is_some() {
        annotations.insert(ANN_APPROVAL.into(), APPROVAL_PENDING.into());
    }
    if let Some(trace) = &request.trace {
        add_trace(&mut job, trace);
    }
    Ok(job)
}

/// Carries `trace` into a rendered Job: the annotations `taskgate.io/traceparent`
/// (and `taskgate.io/tracestate`) on the Job, and `TRACEPARENT` (and
/// `TRACESTATE`) in the environment of every container and init container of
/// its pod template. A container that already sets either variable (its
/// template, or an argument variable) keeps its own and gets neither. Never a
/// label: a `tracestate` does not fit a label's syntax.
pub(crate) fn add_trace(job: &mut Job, trace: &TraceContext) {
    let annotations = job.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANN_TRACEPARENT.into(), trace.traceparent().to_owned());
    if let Some(state) = trace.tracestate() {
        annotations.insert(ANN_TRACESTATE.into(), state.to_owned());
    }
    let Some(pod) = job
        .spec
        .as_mut()
        .and_then(|spec| spec.template.spec.as_mut())
    else {
        return;
    };
    let init = pod.init_containers.iter_mut().flatten();
    for container in pod.containers.iter_mut().chain(init) {
        let env = container.env.get_or_insert_with(Vec::new);
        if env
            .iter()
            .any(|e| e.name == ENV_TRACEPARENT || e.name == ENV_TRACESTATE)
        {
            continue;
        }
        env.push(EnvVar {
            name: ENV_TRACEPARENT.into(),
            value: Some(trace.traceparent().to_owned()),
            value_from: None,
        });
        if let Some(state) = trace.tracestate() {
            env.push(EnvVar {
                name: ENV_TRACESTATE.into(),
                value: Some(state.to_owned()),
                value_from: None,
            });
        }
    }
}

/// The annotation `kubectl create job --from=cronjob/NAME` sets on the Job.
pub(crate) const ANN_INSTANTIATE: &str = "cronjob.kubernetes.io/instantiate";

/// The Job that runs `cronjob`'s job template once, now, as `kubectl create
/// job --from=cronjob/NAME` makes it: the template's labels, annotations and
/// spec, the annotation `cronjob.kubernetes.io/instantiate: manual`, and the
/// CronJob as controlling owner. [`render_job`] names and fills it in.
///
/// # Errors
///
/// What is wrong with the CronJob (no uid, no job template, no containers).
pub(crate) fn cronjob_job(cronjob: &CronJob) -> Result<Job, String> {
    let name = cronjob.metadata.name.clone().unwrap_or_default();
    let uid = cronjob
        .metadata
        .uid
        .clone()
        .ok_or_else(|| format!("the CronJob {name} has no uid"))?;
    let spec = &cronjob.spec;
    let template = &spec.job_template;
    let job_spec = template
        .spec
        .clone()
        .ok_or_else(|| format!("the job template of CronJob {name} has no spec"))?;
    if job_spec
        .template
        .spec
        .as_ref()
        .is_none_or(|p| p.containers.is_empty())
    {
        return Err(format!(
            "the job template of CronJob {name} has no containers"
        ));
    }
    let from = template.metadata.clone().unwrap_or_default();
    let mut annotations = from.annotations.unwrap_or_default();
    annotations.insert(ANN_INSTANTIATE.into(), "manual".into());
    Ok(Job {
        metadata: ObjectMeta {
            labels: from.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "CronJob".into(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(job_spec),
        status: None,
    })
}

/// The value of annotation `key` of `job`.
#[must_use]
pub(crate) fn annotation<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The value of label `key` of `job`.
#[must_use]
pub(crate) fn label<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .labels
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// True when `existing` (found under the name of a start) is the Job that
/// `rendered` would be: same tool and same spec hash.
#[must_use]
pub(crate) fn same_job(existing: &Job, rendered: &Job) -> bool {
    label(existing, LABEL_TOOL) == label(rendered, LABEL_TOOL)
        && annotation(existing, ANN_SPEC_HASH).is_some()
        && annotation(existing, ANN_SPEC_HASH) == annotation(rendered, ANN_SPEC_HASH)
}

/// The condition of `type_` when its status is `True`.
#[must_use]
pub(crate) fn condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Where a Job stands, from the Job object alone.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Phase {
    /// `Complete` is true.
    Succeeded,
    /// `Failed` is true.
    Failed {
        /// The condition's reason: `BackoffLimitExceeded`, `DeadlineExceeded`,
        /// `PodFailurePolicy`, `MaxFailedIndexesExceeded`, …
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// Created suspended behind an approval gate that is not answered yet.
    AwaitingApproval,
    /// Suspended by a cancel, or being deleted.
    Cancelled(String),
    /// Anything else: pending, running, finishing or suspended by someone else.
    Working {
        /// "2/5 completions, 3 active", "suspended", …
        message: String,
        /// Completions so far out of the total, when the Job has a fixed count.
        progress: Option<Progress>,
    },
}

impl Phase {
    /// True for [`Phase::Succeeded`] and [`Phase::Failed`]: the result needs the pod.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed { .. })
    }
}

fn count(value: Option<i32>) -> i32 {
    value.unwrap_or(0)
}

/// "2/5 completions, 3 active" (and ", 1 failed", ", 1 terminating").
#[must_use]
pub(crate) fn counts_message(job: &Job) -> String {
    let status = job.status.clone().unwrap_or_default();
    let succeeded = count(status.succeeded);
    let active = count(status.active);
    let mut message = match job.spec.as_ref().and_then(|s| s.completions) {
        Some(total) => format!("{succeeded}/{total} completions, {active} active"),
        None => format!("{succeeded} succeeded, {active} active"),
    };
    let failed = count(status.failed);
    if failed > 0 {
        message.push_str(&format!(", {failed} failed"));
    }
    let terminating = count(status.terminating);
    if terminating > 0 {
        message.push_str(&format!(", {terminating} terminating"));
    }
    message
}

/// Translates the Job object alone (conditions, counts, suspension, taskgate's
/// annotations) into a [`Phase`].
#[must_use]
pub(crate) fn phase(job: &Job) -> Phase {
    // A cancel marks the Job before the Job controller ends it (through its
    // deadline): the mark wins over the `Failed` condition that follows, and
    // over a `Complete` that raced with it (the client was told cancelled).
    if annotation(job, ANN_CANCELLED) == Some("true") {
        return Phase::Cancelled("the Job was stopped by a cancel".into());
    }
    if condition(job, "Complete").is_some() {
        return Phase::Succeeded;
    }
    if let Some(c) = condition(job, "Failed") {
        return Phase::Failed {
            reason: c.reason.clone().unwrap_or_else(|| "Failed".into()),
            message: c.message.clone().unwrap_or_default(),
        };
    }
    if job.metadata.deletion_timestamp.is_some() {
        return Phase::Cancelled("the Job is being deleted".into());
    }
    let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    if suspended && annotation(job, ANN_APPROVAL) == Some(APPROVAL_PENDING) {
        return Phase::AwaitingApproval;
    }
    let progress = job
        .spec
        .as_ref()
        .and_then(|s| s.completions)
        .map(|total| Progress {
            done: f64::from(count(job.status.as_ref().and_then(|s| s.succeeded))),
            total: Some(f64::from(total)),
        });
    let counts = counts_message(job);
    let message = if suspended {
        format!("suspended ({counts})")
    } else if let Some(c) = condition(job, "FailureTarget") {
        format!(
            "failing ({}), waiting for pods to terminate; {counts}",
            c.reason.as_deref().unwrap_or("FailureTarget")
        )
    } else if condition(job, "SuccessCriteriaMet").is_some() {
        format!("succeeded, waiting for pods to terminate; {counts}")
    } else if job
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .is_none()
    {
        format!("pending ({counts})")
    } else {
        counts
    };
    Phase::Working { message, progress }
}

/// The input request of an approval gate.
#[must_use]
pub(crate) fn approval_request(gate: &ApprovalGate) -> BTreeMap<String, InputRequest> {
    BTreeMap::from([(
        APPROVAL_KEY.to_owned(),
        InputRequest {
            message: gate.message.clone(),
            requested_schema: gate.schema.clone(),
            approval: true,
        },
    )])
}

/// The pod whose outcome is the result: among pods that ended the way the Job did
/// (`Succeeded` / `Failed`), the one whose `container` finished last; else any pod
/// whose container terminated; else the newest pod.
#[must_use]
pub(crate) fn result_pod<'a>(pods: &'a [Pod], succeeded: bool, container: &str) -> Option<&'a Pod> {
    let wanted = if succeeded { "Succeeded" } else { "Failed" };
    let finished = |p: &&Pod| {
        terminated(p, container)
            .and_then(|t| t.finished_at.clone())
            .map(|t| t.0)
    };
    let phase_of = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    pods.iter()
        .filter(|p| phase_of(p).as_deref() == Some(wanted))
        .max_by_key(finished)
        .or_else(|| {
            pods.iter()
                .filter(|p| terminated(p, container).is_some())
                .max_by_key(finished)
        })
        .or_else(|| {
            pods.iter()
                .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
        })
}

/// The terminated state of `container` in `pod` (the last one, if it restarted).
#[must_use]
pub(crate) fn terminated<'a>(
    pod: &'a Pod,
    container: &str,
) -> Option<&'a ContainerStateTerminated> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?;
    status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| status.last_state.as_ref()?.terminated.as_ref())
}

/// What a finished Job's pod says: its name, the container's termination, and
/// the tail of its log.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodOutcome {
    /// The pod's name.
    pub pod: String,
    /// The container.
    pub container: String,
    /// The container's termination state, when it terminated.
    pub terminated: Option<ContainerStateTerminated>,
    /// The last lines of the container's log, when read.
    pub log: Option<String>,
    /// Why the log is missing, when it could not be read.
    pub log_note: Option<String>,
}

fn log_block(outcome: &PodOutcome) -> Option<String> {
    if let Some(log) = outcome.log.as_deref().map(str::trim_end) {
        if !log.is_empty() {
            return Some(format!(
                "log of pod {} (container {}), last lines:\n{log}",
                outcome.pod, outcome.container
            ));
        }
    }
    outcome
        .log_note
        .as_ref()
        .map(|note| format!("log of pod {}: {note}", outcome.pod))
}

/// The tool result of a finished Job. Success: the container's termination
/// message (a JSON object also becomes structured content), else a summary; then
/// the log tail. Failure: a tool error with the condition's reason and message,
/// the container's exit code and termination message, and the log tail.
#[must_use]
pub(crate) fn finished_output(
    job: &Job,
    phase: &Phase,
    outcome: Option<&PodOutcome>,
) -> ToolOutput {
    let name = job.metadata.name.as_deref().unwrap_or("?");
    let message = outcome
        .and_then(|o| o.terminated.as_ref())
        .and_then(|t| t.message.as_deref())
        .map(str::trim)
        .filter(|m| !m.is_empty());
    let mut output = match phase {
        Phase::Failed {
            reason,
            message: why,
        } => {
            let mut text = format!("Job {name} failed: {reason}");
            if !why.is_empty() {
                text.push_str(&format!(": {why}"));
            }
            if let Some(o) = outcome {
                if let Some(t) = &o.terminated {
                    text.push_str(&format!(
                        "\ncontainer {} of pod {} exited with code {}",
                        o.container, o.pod, t.exit_code
                    ));
                    if let Some(r) = &t.reason {
                        text.push_str(&format!(" ({r})"));
                    }
                    if let Some(m) = message {
                        text.push_str(&format!(": {m}"));
                    }
                }
            }
            ToolOutput::error(text)
        }
        _ => match message {
            Some(m) => match serde_json::from_str::<Value>(m) {
                Ok(value @ Value::Object(_)) => ToolOutput {
                    content: vec![taskgate_engine::Content::Text(m.to_owned())],
                    structured: Some(value),
                    is_error: false,
                },
                _ => ToolOutput::text(m),
            },
            None => ToolOutput::text(format!("Job {name} succeeded: {}", counts_message(job))),
        },
    };
    if let Some(block) = outcome.and_then(log_block) {
        output.content.push(taskgate_engine::Content::Text(block));
    }
    output
}

fn system_time(t: &Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// The snapshot of a Job: its state (from [`phase`], with the pod outcome for a
/// finished Job) and its times.
#[must_use]
pub(crate) fn snapshot(
    job: &Job,
    approval: Option<&ApprovalGate>,
    outcome: Option<&PodOutcome>,
) -> Snapshot {
    let phase = phase(job);
    let state = match &phase {
        Phase::Succeeded | Phase::Failed { .. } => {
            RunState::Completed(finished_output(job, &phase, outcome))
        }
        Phase::Cancelled(message) => RunState::Cancelled {
            message: Some(message.clone()),
        },
        Phase::AwaitingApproval => match approval {
            Some(gate) => RunState::InputRequired {
                requests: approval_request(gate),
                message: Some("waiting for approval; the Job is suspended".into()),
            },
            None => RunState::working("suspended, waiting for an approval"),
        },
        Phase::Working { message, progress } => RunState::Working {
            message: Some(message.clone()),
            progress: *progress,
        },
    };
    let status = job.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let updated_at = conditions
        .iter()
        .filter_map(|c| c.last_transition_time.as_ref())
        .chain(status.and_then(|s| s.start_time.as_ref()))
        .map(|t| t.0)
        .max()
        .map(SystemTime::from);
    let ended_at = match &phase {
        Phase::Succeeded => status
            .and_then(|s| s.completion_time.as_ref())
            .or_else(|| condition(job, "Complete")?.last_transition_time.as_ref())
            .map(system_time),
        Phase::Failed { .. } => condition(job, "Failed")
            .and_then(|c| c.last_transition_time.as_ref())
            .map(system_time),
        _ => None,
    };
    Snapshot {
        state,
        created_at: job.metadata.creation_timestamp.as_ref().map(system_time),
        updated_at,
        ended_at,
        poll_hint: None,
        revision: None,
    }
}

/// The API permissions the engine needs in its namespace: (verb, API group,
/// resource), as `deploy/rbac.yaml` grants them.
pub(crate) const REQUIRED_PERMISSIONS: &[(&str, &str, &str)] = &[
    ("create", "batch", "jobs"),
    ("get", "batch", "jobs"),
    ("list", "batch", "jobs"),
    ("watch", "batch", "jobs"),
    ("patch", "batch", "jobs"),
    ("delete", "batch", "jobs"),
    ("get", "", "pods"),
    ("list", "", "pods"),
    ("get", "", "pods/log"),
];

/// The name of a permission as Kubernetes writes it: `create jobs.batch`, `get pods/log`.
#[must_use]
pub(crate) fn permission_name(verb: &str, group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("{verb} {resource}")
    } else {
        format!("{verb} {resource}.{group}")
    }
}

/// The required permissions (named by [`permission_name`]) that the rules of a
/// SelfSubjectRulesReview do not grant.
#[must_use]
pub(crate) fn missing_permissions(rules: &[ResourceRule]) -> Vec<String> {
    let has = |list: &Option<Vec<String>>, want: &str| {
        list.as_ref()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == want))
    };
    let covers_resource = |list: &Option<Vec<String>>, want: &str| {
        has(list, want)
            || want.split_once('/').is_some_and(|(base, _)| {
                list.as_ref()
                    .is_some_and(|l| l.iter().any(|x| *x == format!("{base}/*")))
            })
    };
    REQUIRED_PERMISSIONS
        .iter()
        .filter(|(verb, group, resource)| {
            !rules.iter().any(|r| {
                (r.verbs.iter().any(|v| v == "*" || v == verb))
                    && has(&r.api_groups, group)
                    && covers_resource(&r.resources, resource)
                    && r.resource_names.as_ref().is_none_or(Vec::is_empty)
            })
        })
        .map(|(verb, group, resource)| permission_name(verb, group, resource))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CancelMode, ToolTarget};
    use serde_json::json;
    use taskgate_engine::Content;

    fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn pods(name: &str) -> Vec<Pod> {
        let list: Value = fixture(name);
        serde_json::from_value(list["items"].clone()).unwrap()
    }

    fn gate() -> ApprovalGate {
        ApprovalGate {
            message: "Run it?".into(),
            schema: json!({"type": "object", "properties": {}}),
        }
    }

    fn with_annotation(mut job: Job, key: &str, value: &str) -> Job {
        job.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        job
    }

    fn texts(output: &ToolOutput) -> Vec<String> {
        output
            .content
            .iter()
            .map(|c| match c {
                Content::Text(t) => t.clone(),
                Content::Link { uri, .. } => uri.clone(),
            })
            .collect()
    }

    #[test]
    fn phases_of_real_jobs() {
        let working = |m: &str, p: Option<(f64, f64)>| Phase::Working {
            message: m.into(),
            progress: p.map(|(done, total)| Progress {
                done,
                total: Some(total),
            }),
        };
        let cases: Vec<(&str, Phase)> = vec![
            (
                "job-running.json",
                working("0/1 completions, 1 active", Some((0.0, 1.0))),
            ),
            (
                "job-parallel-running.json",
                working("0/5 completions, 2 active", Some((0.0, 5.0))),
            ),
            (
                "job-parallel-progress.json",
                working("2/5 completions, 2 active", Some((2.0, 5.0))),
            ),
            (
                "job-retrying.json",
                working("0/1 completions, 0 active, 1 failed", Some((0.0, 1.0))),
            ),
            (
                "job-suspended-new.json",
                working("suspended (0/1 completions, 0 active)", Some((0.0, 1.0))),
            ),
            (
                "job-suspended-running.json",
                working(
                    "suspended (0/1 completions, 0 active, 1 terminating)",
                    Some((0.0, 1.0)),
                ),
            ),
            ("job-complete.json", Phase::Succeeded),
            ("job-parallel-complete.json", Phase::Succeeded),
            (
                "job-failed-backoff.json",
                Phase::Failed {
                    reason: "BackoffLimitExceeded".into(),
                    message: "Job has reached the specified backoff limit".into(),
                },
            ),
            (
                "job-failed-deadline.json",
                Phase::Failed {
                    reason: "DeadlineExceeded".into(),
                    message: "Job was active longer than specified deadline".into(),
                },
            ),
        ];
        for (file, expected) in cases {
            let job: Job = fixture(file);
            let got = phase(&job);
            assert_eq!(got, expected, "{file}");
        }
        let policy: Job = fixture("job-failed-podfailurepolicy.json");
        match phase(&policy) {
            Phase::Failed { reason, message } => {
                assert_eq!(reason, "PodFailurePolicy");
                assert!(message.contains("exit code 42"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn suspension_means_approval_cancel_or_plain_suspension() {
        let new: Job = fixture("job-suspended-new.json");
        assert!(matches!(phase(&new), Phase::Working { .. }));
        let gated = with_annotation(new.clone(), ANN_APPROVAL, APPROVAL_PENDING);
        assert_eq!(phase(&gated), Phase::AwaitingApproval);
        let snap = snapshot(&gated, Some(&gate()), None);
        match snap.state {
            RunState::InputRequired { requests, .. } => {
                assert_eq!(requests[APPROVAL_KEY].message, "Run it?");
                assert!(requests[APPROVAL_KEY].approval, "the gate is an approval");
            }
            other => panic!("{other:?}"),
        }
        // Accepted: the annotation says so, even before the controller resumes it.
        let accepted = with_annotation(new, ANN_APPROVAL, APPROVAL_ACCEPTED);
        assert!(matches!(phase(&accepted), Phase::Working { .. }));
        let paused: Job = fixture("job-suspended-running.json");
        let cancelled = with_annotation(paused, ANN_CANCELLED, "true");
        assert!(matches!(
            snapshot(&cancelled, None, None).state,
            RunState::Cancelled { .. }
        ));
        // A cancel marks the Job, then the Job controller ends it through its
        // deadline: the mark wins over `Failed` (and over a `Complete` that
        // raced with the cancel: the client was told cancelled).
        let stopped = with_annotation(fixture("job-failed-deadline.json"), ANN_CANCELLED, "true");
        assert!(matches!(phase(&stopped), Phase::Cancelled(_)));
        let raced = with_annotation(fixture("job-complete.json"), ANN_CANCELLED, "true");
        assert!(matches!(phase(&raced), Phase::Cancelled(_)));
        // Other annotations of taskgate do not end anything.
        let done = with_annotation(fixture("job-complete.json"), ANN_APPROVAL, APPROVAL_PENDING);
        assert_eq!(phase(&done), Phase::Succeeded);
        let mut deleting: Job = fixture("job-running.json");
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        assert!(matches!(phase(&deleting), Phase::Cancelled(_)));
    }

    #[test]
    fn finishing_jobs_are_still_working() {
        let mut job: Job = fixture("job-failed-backoff.json");
        let status = job.status.as_mut().unwrap();
        status
            .conditions
            .as_mut()
            .unwrap()
            .retain(|c| c.type_ != "Failed");
        status.terminating = Some(1);
        match phase(&job) {
            Phase::Working { message, .. } => assert_eq!(
                message,
                "failing (BackoffLimitExceeded), waiting for pods to terminate; 0/1 completions, 0 active, 1 failed, 1 terminating"
            ),
            other => panic!("{other:?}"),
        }
        let mut job: Job = fixture("job-complete.json");
        job.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .retain(|c| c.type_ != "Complete");
        assert!(
            matches!(phase(&job), Phase::Working { message, .. } if message.starts_with("succeeded, waiting"))
        );
    }

    #[test]
    fn a_success_carries_the_termination_message_and_the_log() {
        let job: Job = fixture("job-complete.json");
        let pods = pods("pods-complete.json");
        let pod = result_pod(&pods, true, "main").unwrap();
        let outcome = PodOutcome {
            pod: pod.metadata.name.clone().unwrap(),
            container: "main".into(),
            terminated: terminated(pod, "main").cloned(),
            log: Some(
                std::fs::read_to_string(format!(
                    "{}/tests/fixtures/pod-log.txt",
                    env!("CARGO_MANIFEST_DIR")
                ))
                .unwrap(),
            ),
            log_note: None,
        };
        let snap = snapshot(&job, None, Some(&outcome));
        let RunState::Completed(output) = &snap.state else {
            panic!("{:?}", snap.state)
        };
        assert!(!output.is_error);
        assert_eq!(
            output.structured,
            Some(json!({"rows": 42, "table": "sales"}))
        );
        let t = texts(output);
        assert_eq!(t[0], r#"{"rows": 42, "table": "sales"}"#);
        assert!(
            t[1].contains("taskgate kwok pod log line 3 (stderr)"),
            "{}",
            t[1]
        );
        assert!(t[1].starts_with(&format!("log of pod {} (container main)", outcome.pod)));
        assert!(snap.created_at.is_some() && snap.ended_at.is_some());
        assert!(snap.ended_at >= snap.created_at);
        // Text and JSON that is not an object stay text.
        let mut plain = outcome.clone();
        plain.terminated.as_mut().unwrap().message = Some("all good\n".into());
        plain.log = None;
        let out = finished_output(&job, &Phase::Succeeded, Some(&plain));
        assert_eq!(texts(&out), vec!["all good".to_owned()]);
        assert_eq!(out.structured, None);
        // No message, no pod: a summary.
        let out = finished_output(&job, &Phase::Succeeded, None);
        assert_eq!(
            texts(&out)[0],
            format!(
                "Job {} succeeded: 1/1 completions, 0 active",
                job.metadata.name.clone().unwrap()
            )
        );
    }

    #[test]
    fn a_failure_is_a_tool_error_with_reason_exit_code_and_log() {
        let job: Job = fixture("job-failed-backoff.json");
        let pods = pods("pods-failed.json");
        let pod = result_pod(&pods, false, "main").unwrap();
        let outcome = PodOutcome {
            pod: pod.metadata.name.clone().unwrap(),
            container: "main".into(),
            terminated: terminated(pod, "main").cloned(),
            log: Some("line 1\nline 2\n".into()),
            log_note: None,
        };
        let RunState::Completed(output) = snapshot(&job, None, Some(&outcome)).state else {
            panic!()
        };
        assert!(output.is_error);
        let t = texts(&output);
        assert!(t[0].starts_with("Job boom failed: BackoffLimitExceeded: Job has reached the specified backoff limit"), "{}", t[0]);
        assert!(
            t[0].contains("exited with code 3 (Error): kaboom: disk on fire"),
            "{}",
            t[0]
        );
        assert!(t[1].ends_with("line 1\nline 2"), "{}", t[1]);
        // A log that could not be read is said so.
        let mut noted = outcome.clone();
        noted.log = None;
        noted.log_note = Some("permission denied".into());
        let out = finished_output(&job, &phase(&job), Some(&noted));
        assert!(texts(&out)[1].ends_with("permission denied"));
    }

    #[test]
    fn the_result_pod_is_the_last_to_finish_the_way_the_job_did() {
        let mut pods = pods("pods-complete.json");
        assert!(result_pod(&pods, false, "main").is_some()); // falls back to a terminated one
        let mut failed = pods[0].clone();
        failed.metadata.name = Some("other".into());
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        pods.push(failed);
        assert_eq!(
            result_pod(&pods, false, "main")
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("other")
        );
        assert_ne!(
            result_pod(&pods, true, "main")
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("other")
        );
        assert!(result_pod(&[], true, "main").is_none());
        assert!(terminated(&pods[0], "nope").is_none());
    }

    fn bound(extra: Value) -> Bound {
        let mut target = json!({"template": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  labels: {team: data}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: busybox\n        env:\n        - {name: KEEP, value: \"1\"}\n        - {name: DB_TOKEN, valueFrom: {secretKeyRef: {name: db, key: token}}}\n      - name: side\n        image: busybox\n"});
        for (k, v) in extra.as_object().unwrap() {
            target[k] = v.clone();
        }
        serde_json::from_value::<ToolTarget>(target)
            .unwrap()
            .validate("jobs")
            .unwrap()
    }

    /// [`render_job`] of a tool with a configured template.
    fn render_tpl(
        bound: &Bound,
        tool: &str,
        namespace: &str,
        request: &StartRequest,
        keep_alive: Option<Duration>,
    ) -> Result<Job, EngineError> {
        let Source::Template(template) = &bound.source else {
            panic!("not a template")
        };
        let container = bound.container.clone().unwrap();
        render_job(
            bound, template, &container, tool, namespace, request, keep_alive,
        )
    }

    fn request(arguments: Value) -> StartRequest {
        StartRequest {
            run_name: "tg-abc".into(),
            arguments,
            caller_tag: "0123456789abcdef".into(),
            keep_alive: None,
            trace: None,
        }
    }

    #[test]
    fn rendering_edits_the_job_object() {
        let b = bound(json!({"args_env_prefix": "ARG_", "args_json_env": "ARGS"}));
        let args = json!({"dataset": "sales", "limit": 5, "opts": {"b": 1, "a": 2}, "x-y": true});
        let job = render_tpl(
            &b,
            "analyze",
            "jobs",
            &request(args),
            Some(Duration::from_secs(3600)),
        )
        .unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("tg-abc"));
        assert_eq!(job.metadata.namespace.as_deref(), Some("jobs"));
        assert_eq!(label(&job, LABEL_TOOL), Some("analyze"));
        assert_eq!(label(&job, LABEL_CALLER), Some("0123456789abcdef"));
        assert_eq!(label(&job, LABEL_RUN), Some("tg-abc"));
        assert_eq!(label(&job, "team"), Some("data"));
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
        assert_eq!(spec.suspend, None);
        let pod = spec.template.spec.as_ref().unwrap();
        let env: Vec<(String, String)> = pod.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_else(|| "<from>".into())))
            .collect();
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            env,
            vec![
                s("KEEP", "1"),
                s("DB_TOKEN", "<from>"),
                s("ARG_DATASET", "sales"),
                s("ARG_LIMIT", "5"),
                s("ARG_OPTS", r#"{"a":2,"b":1}"#),
                s("ARG_X_Y", "true"),
                s(
                    "ARGS",
                    r#"{"dataset":"sales","limit":5,"opts":{"a":2,"b":1},"x-y":true}"#
                ),
            ]
        );
        assert_eq!(pod.containers[1].env, None);
        assert_eq!(annotation(&job, ANN_SPEC_HASH).unwrap().len(), 16);
        assert_eq!(annotation(&job, ANN_APPROVAL), None);
    }

    /// An argument never replaces a variable of the template's own, even when a
    /// bound target would let its name through (configuration refuses such a
    /// prefix; rendering still keeps the template's), and two arguments on one
    /// name are refused.
    #[test]
    fn arguments_never_replace_the_templates_variables() {
        let mut b = bound(json!({"args_env_prefix": "ARG_"}));
        b.args_env_prefix = Some(String::new());
        let job = render_tpl(
            &b,
            "t",
            "jobs",
            &request(json!({"db_token": "attacker", "keep": "2", "new": "x"})),
            None,
        )
        .unwrap();
        let env = job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        let token: Vec<_> = env.iter().filter(|e| e.name == "DB_TOKEN").collect();
        assert_eq!(token.len(), 1);
        assert!(token[0].value.is_none() && token[0].value_from.is_some());
        let keep: Vec<_> = env.iter().filter(|e| e.name == "KEEP").collect();
        assert_eq!(keep.len(), 1);
        assert_eq!(keep[0].value.as_deref(), Some("1"));
        assert!(env.iter().any(|e| e.name == "NEW"));

        let b = bound(json!({"args_env_prefix": "ARG_"}));
        let err = render_tpl(
            &b,
            "t",
            "jobs",
            &request(json!({"targetEnv": "staging", "targetenv": "production"})),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(&err, EngineError::InvalidInput { message } if message.contains("ARG_TARGETENV")),
            "{err}"
        );
    }

    #[test]
    fn the_spec_hash_tells_equal_calls_from_different_ones() {
        let b = bound(json!({}));
        let one = render_tpl(&b, "t", "jobs", &request(json!({"a": 1, "b": 2})), None).unwrap();
        let same: Value = serde_json::from_str(r#"{"b": 2, "a": 1}"#).unwrap();
        let two = render_tpl(&b, "t", "jobs", &request(same), None).unwrap();
        let other = render_tpl(&b, "t", "jobs", &request(json!({"a": 2})), None).unwrap();
        let other_tool =
            render_tpl(&b, "u", "jobs", &request(json!({"a": 1, "b": 2})), None).unwrap();
        assert!(same_job(&one, &two));
        assert!(!same_job(&one, &other));
        assert!(!same_job(&one, &other_tool));
        // The server's copy keeps the annotation: compare against a captured Job.
        let captured: Job = fixture("job-complete.json");
        assert!(!same_job(&captured, &one));
        // Default: the JSON variable only.
        let env = one.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        assert_eq!(
            env.last().unwrap().name,
            crate::config::DEFAULT_ARGS_JSON_ENV
        );
    }

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn env_of(job: &Job, i: usize) -> Vec<(String, Option<String>)> {
        job.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[i]
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect()
    }

    /// The trace context reaches every container and the Job's annotations,
    /// never a label, never replaces a container's own variable, and leaves the
    /// spec hash alone: a retried start under another trace is the same Job.
    #[test]
    fn the_trace_context_enters_every_container_but_not_the_spec_hash() {
        let b = bound(json!({"args_env_prefix": "ARG_"}));
        let plain = render_tpl(&b, "t", "jobs", &request(json!({"a": 1})), None).unwrap();
        let mut traced = request(json!({"a": 1}));
        traced.trace = Some(TraceContext::new(TRACEPARENT, Some("vendor=abc")).unwrap());
        let job = render_tpl(&b, "t", "jobs", &traced, None).unwrap();
        for i in [0, 1] {
            let env = env_of(&job, i);
            assert!(
                env.contains(&("TRACEPARENT".into(), Some(TRACEPARENT.into()))),
                "{env:?}"
            );
            assert!(
                env.contains(&("TRACESTATE".into(), Some("vendor=abc".into()))),
                "{env:?}"
            );
        }
        assert_eq!(annotation(&job, ANN_TRACEPARENT), Some(TRACEPARENT));
        assert_eq!(annotation(&job, ANN_TRACESTATE), Some("vendor=abc"));
        assert!(job
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .values()
            .all(|v| !v.contains("vendor") && !v.contains("4bf92f35")));
        assert!(same_job(&plain, &job));
        traced.trace = Some(
            TraceContext::new(
                "00-11111111111111111111111111111111-2222222222222222-00",
                None,
            )
            .unwrap(),
        );
        let other_trace = render_tpl(&b, "t", "jobs", &traced, None).unwrap();
        assert!(same_job(&job, &other_trace));
        assert_eq!(annotation(&other_trace, ANN_TRACESTATE), None);
        assert_eq!(annotation(&plain, ANN_TRACEPARENT), None);
        assert!(env_of(&plain, 0).iter().all(|(n, _)| n != "TRACEPARENT"));

        // A container that sets the variable itself keeps its own.
        let mut own = bound(json!({"args_env_prefix": "ARG_"}));
        let Source::Template(template) = &mut own.source else {
            panic!("not a template")
        };
        let pod = template
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap();
        pod.containers[1].env = Some(vec![EnvVar {
            name: "TRACEPARENT".into(),
            value: Some("operator".into()),
            value_from: None,
        }]);
        traced.trace = Some(TraceContext::new(TRACEPARENT, Some("vendor=abc")).unwrap());
        let job = render_tpl(&own, "t", "jobs", &traced, None).unwrap();
        assert_eq!(
            env_of(&job, 1),
            vec![("TRACEPARENT".into(), Some("operator".into()))]
        );
        assert!(env_of(&job, 0).contains(&("TRACEPARENT".into(), Some(TRACEPARENT.into()))));
    }

    #[test]
    fn an_approval_gate_creates_the_job_suspended() {
        let b = bound(
            json!({"approval": {"message": "Go?"}, "cancel": "suspend", "container": "side"}),
        );
        assert_eq!(b.cancel, CancelMode::Suspend);
        let job = render_tpl(&b, "t", "jobs", &request(json!({})), None).unwrap();
        assert_eq!(job.spec.as_ref().unwrap().suspend, Some(true));
        assert_eq!(annotation(&job, ANN_APPROVAL), Some(APPROVAL_PENDING));
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            pod.containers[1].env.as_ref().unwrap()[0].value.as_deref(),
            Some("{}")
        );
    }

    #[test]
    fn label_values_are_safe() {
        assert_eq!(label_value("analyze_dataset.v2"), "analyze_dataset.v2");
        for bad in ["-x", "x-", "a b", &"a".repeat(64), "ü"] {
            let v = label_value(bad);
            assert!(v.starts_with("h-") && v.len() == 18, "{bad} -> {v}");
        }
    }

    /// `kubectl create job --from=cronjob/NAME`'s Job: the job template, the
    /// manual annotation, the CronJob as controller; `env_arguments` replace
    /// only the variables named; a retry finds the same Job even after the
    /// CronJob's template changed.
    #[test]
    fn a_cronjob_job_is_made_like_kubectl_does() {
        let cronjob = |image: &str| -> CronJob {
            serde_json::from_value(json!({
                "metadata": {"name": "nightly", "uid": "u-1", "namespace": "jobs"},
                "spec": {"schedule": "@daily", "jobTemplate": {
                    "metadata": {"labels": {"team": "data"}},
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "main", "image": image, "env": [
                            {"name": "REGION", "value": "eu"},
                            {"name": "KEEP", "value": "k"},
                            {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
                        ]}
                    ]}}}
                }}
            }))
            .unwrap()
        };
        let b = serde_json::from_value::<ToolTarget>(
            json!({"from_cronjob": "nightly", "env_arguments": ["REGION"]}),
        )
        .unwrap()
        .validate("jobs")
        .unwrap();
        let render = |cj: &CronJob, args: Value| {
            let template = cronjob_job(cj).unwrap();
            let container = b.target.check_template(&template, "t").unwrap();
            render_job(&b, &template, &container, "t", "jobs", &request(args), None).unwrap()
        };
        let job = render(&cronjob("a"), json!({"REGION": "us", "KEEP": "x"}));
        assert_eq!(annotation(&job, ANN_INSTANTIATE), Some("manual"));
        assert_eq!(label(&job, "team"), Some("data"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str(),
                owner.controller
            ),
            ("CronJob", "nightly", "u-1", Some(true))
        );
        let env = job
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .env
            .clone()
            .unwrap();
        let value = |n: &str| env.iter().find(|e| e.name == n).unwrap().value.clone();
        assert_eq!(value("REGION").as_deref(), Some("us"));
        assert_eq!(value("KEEP").as_deref(), Some("k"));
        assert_eq!(value("DB"), None);
        // The same call after the CronJob's image changed: the same Job.
        let again = render(&cronjob("b"), json!({"KEEP": "x", "REGION": "us"}));
        assert!(same_job(&job, &again));
        let other = render(&cronjob("a"), json!({"REGION": "ap"}));
        assert!(!same_job(&job, &other));
        // A variable from a Secret may not be opened to arguments.
        let bad = serde_json::from_value::<ToolTarget>(
            json!({"from_cronjob": "nightly", "env_arguments": ["DB"]}),
        )
        .unwrap()
        .validate("jobs")
        .unwrap();
        let err = bad
            .target
            .check_template(&cronjob_job(&cronjob("a")).unwrap(), "target.from_cronjob")
            .unwrap_err();
        assert_eq!(err.key, "target.env_arguments[0]");
    }
}
