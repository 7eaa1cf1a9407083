//! The Kubernetes engine of taskgate: a tool call creates a `batch/v1` Job from
//! the tool's template; status, result, cancel and approval read or act on that
//! Job (and, once it finished, its pod) on each client request. Nothing is kept
//! between requests: the native reference is the Job's name, the namespace comes
//! from the engine settings.
//!
//! See `README.md` beside this crate for settings, the tool target, the API calls
//! per request and the RBAC Role (`deploy/`).

mod api;
mod config;
mod discover;
mod logs;
mod resource;
mod translate;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use serde_json::{json, Value};
use taskgate_engine::{
    async_trait, Capabilities, ConfigError, DiscoverOptions, Discovered, Engine, EngineError,
    InputAction, InputResponse, LogPage, NativeRef, Pipeline, Snapshot, StartRequest, ToolDecl,
};

pub use config::{Approval, CancelMode, EngineSettings, InlineTemplate, ToolTarget};
pub use resource::{ArgumentPlace, PhaseMapping, Preset, ResourceTarget};

use api::{Created, KubeClient};
use config::{check_dns_label, Bound, Source};
use translate::{
    canonical, cronjob_job, label, label_value, missing_permissions, permission_name, phase,
    render_job, result_pod, same_job, snapshot, terminated, Phase, PodOutcome, ANN_APPROVAL,
    ANN_APPROVAL_ANSWER, ANN_CANCELLED, APPROVAL_ACCEPTED, APPROVAL_KEY, LABEL_TOOL,
    LOG_LIMIT_BYTES, REQUIRED_PERMISSIONS,
};

/// The engine kind written in `[engines.NAME]`.
pub const KIND: &str = "kubernetes";

/// The most containers whose log one `logs` read asks for.
pub(crate) const MAX_LOG_SOURCES_PER_READ: usize = 8;

/// The largest approval answer (as JSON) kept on the Job.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// Builds a Kubernetes engine from its settings (the `[engines.NAME]` table
/// without `kind` and `call_timeout`). Reads the kubeconfig (or the in-cluster
/// service account); makes no API call.
///
/// # Errors
///
/// A [`ConfigError`] keyed by the offending setting.
pub async fn build(settings: Value) -> Result<Arc<dyn Engine>, ConfigError> {
    let settings = EngineSettings::from_value(settings)?;
    choose_tls_backend();
    let client = KubeClient::new(&settings).await?;
    Ok(Arc::new(KubernetesEngine { client }))
}

/// Chooses rustls' aws-lc-rs backend for the process unless one was chosen
/// already. Should a dependency bring a second TLS crypto backend into the
/// program, rustls could not pick one by itself and a Kubernetes client would
/// panic. Call it before building any `kube::Client` of your own.
pub fn choose_tls_backend() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// A configured Kubernetes engine: one API server, one namespace. Built by
/// [`build`].
#[derive(Debug)]
pub struct KubernetesEngine {
    client: KubeClient,
}

#[async_trait]
impl Engine for KubernetesEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError> {
        if resource::is_resource_target(&tool.target) {
            return resource::ResourcePipeline::bind(&self.client, tool);
        }
        let target: ToolTarget = tool.target()?;
        let bound = target.validate(self.client.namespace())?;
        Ok(Arc::new(KubernetesPipeline {
            client: self.client.clone(),
            tool: tool.name.clone(),
            tool_label: label_value(&tool.name),
            keep_alive: tool.keep_alive,
            bound,
        }))
    }

    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        let review = self.client.rules().await?;
        let status = review.status.unwrap_or_default();
        let missing = missing_permissions(&status.resource_rules);
        let ns = self.client.namespace();
        if let Some(first) = missing.first() {
            return Err(EngineError::PermissionDenied {
                action: format!("{first} in namespace {ns}"),
                message: format!(
                    "the Role of taskgate's identity lacks: {} (see deploy/rbac.yaml)",
                    missing.join(", ")
                ),
            });
        }
        let mut findings = vec![format!(
            "the API server answers; in namespace {ns} taskgate may {}",
            REQUIRED_PERMISSIONS
                .iter()
                .map(|(v, g, r)| permission_name(v, g, r))
                .collect::<Vec<_>>()
                .join(", ")
        )];
        if status.incomplete {
            findings.push(format!(
                "the rules review is incomplete (an authorizer other than RBAC is in use): {}",
                status.evaluation_error.unwrap_or_default()
            ));
        }
        Ok(findings)
    }

    /// CronJobs (one list of at most [`discover::MAX_CRONJOBS`]; suspended
    /// ones only with `all`) and Argo WorkflowTemplates (one list of at most
    /// [`discover::MAX_WORKFLOW_TEMPLATES`]; none when the API server does not
    /// serve them or taskgate may not list them) of the engine's namespace,
    /// each list under a deadline of [`discover::CALL_TIMEOUT`].
    async fn discover(&self, options: &DiscoverOptions) -> Result<Vec<Discovered>, EngineError> {
        let ns = self.client.namespace();
        let (cronjobs, more) = within(
            "list cronjobs",
            self.client.list_cronjobs(discover::MAX_CRONJOBS),
        )
        .await?;
        let mut found: Vec<Discovered> = cronjobs
            .iter()
            .filter_map(|c| discover::cronjob_tool(c, ns, options))
            .collect();
        if more {
            if let Some(last) = found.last_mut() {
                last.notes.push(format!(
                    "only the first {} CronJobs of namespace {ns} were read",
                    discover::MAX_CRONJOBS
                ));
            }
        }
        let templates = kube::core::ApiResource {
            group: "argoproj.io".into(),
            version: "v1alpha1".into(),
            api_version: "argoproj.io/v1alpha1".into(),
            kind: "WorkflowTemplate".into(),
            plural: "workflowtemplates".into(),
        };
        match within(
            "list workflowtemplates",
            self.client
                .list_objects(&templates, discover::MAX_WORKFLOW_TEMPLATES),
        )
        .await
        {
            Ok((items, more)) => {
                let start = found.len();
                found.extend(
                    items
                        .iter()
                        .filter_map(|t| discover::workflow_template_tool(t, ns)),
                );
                if more && found.len() > start {
                    if let Some(last) = found.last_mut() {
                        last.notes.push(format!(
                            "only the first {} WorkflowTemplates of namespace {ns} were read",
                            discover::MAX_WORKFLOW_TEMPLATES
                        ));
                    }
                }
            }
            // No Argo here, or no permission to list its templates: CronJobs only.
            Err(EngineError::NotFound) => {}
            Err(e @ EngineError::PermissionDenied { .. }) => {
                tracing::warn!(error = %e, "discover skips Argo WorkflowTemplates");
            }
            Err(e) => return Err(e),
        }
        Ok(found)
    }
}

/// `call` under the deadline of a discover read.
async fn within<T>(
    operation: &'static str,
    call: impl std::future::Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    tokio::time::timeout(discover::CALL_TIMEOUT, call)
        .await
        .map_err(|_| EngineError::DeadlineExceeded {
            operation,
            after: discover::CALL_TIMEOUT,
        })?
}

/// A tool bound to a Job template. Made by [`KubernetesEngine`]'s
/// [`Engine::bind`].
#[derive(Debug)]
pub struct KubernetesPipeline {
    client: KubeClient,
    tool: String,
    tool_label: String,
    keep_alive: Option<Duration>,
    bound: Bound,
}

impl KubernetesPipeline {
    /// Reads the Job named `run` when it is one of this tool's; anything else
    /// reads as not found (a malformed name without asking upstream).
    async fn own_job(&self, run: &str) -> Result<Job, EngineError> {
        check_dns_label(run).map_err(|_| EngineError::NotFound)?;
        let job = self.client.get_job(run).await?;
        self.check_own(job)
    }

    fn check_own(&self, job: Job) -> Result<Job, EngineError> {
        if label(&job, LABEL_TOOL) == Some(self.tool_label.as_str()) {
            Ok(job)
        } else {
            Err(EngineError::NotFound)
        }
    }

    /// The snapshot of `job`, reading its pod (and the pod's log) when it finished.
    async fn snapshot_of(&self, job: &Job) -> Result<Snapshot, EngineError> {
        let phase = phase(job);
        let outcome = if phase.is_finished() {
            self.outcome(job, matches!(phase, Phase::Succeeded)).await?
        } else {
            None
        };
        Ok(snapshot(
            job,
            self.bound.approval.as_ref(),
            outcome.as_ref(),
        ))
    }

    /// The finished Job's pod outcome: 1 list call, plus 1 log call. Trouble with
    /// the log never hides the result; it is noted instead.
    async fn outcome(&self, job: &Job, succeeded: bool) -> Result<Option<PodOutcome>, EngineError> {
        let Some(uid) = job.metadata.uid.as_deref() else {
            return Ok(None);
        };
        let container = self.container_of(job);
        let pods = match self.client.job_pods(uid).await {
            Ok(pods) => pods,
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                tracing::warn!(tool = %self.tool, error = %e, "cannot list the pods of a finished Job");
                return Ok(Some(PodOutcome {
                    pod: "(unknown)".into(),
                    container,
                    log_note: Some(format!("cannot list the Job's pods: {e}")),
                    ..PodOutcome::default()
                }));
            }
        };
        let Some(pod) = result_pod(&pods, succeeded, &container) else {
            return Ok(None);
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let mut outcome = PodOutcome {
            pod: name.clone(),
            terminated: terminated(pod, &container).cloned(),
            container: container.clone(),
            log: None,
            log_note: None,
        };
        if self.bound.log_lines > 0 {
            match self
                .client
                .pod_log(&name, &container, self.bound.log_lines, LOG_LIMIT_BYTES)
                .await
            {
                Ok(log) => outcome.log = Some(log),
                Err(EngineError::NotFound) => outcome.log_note = Some("the pod is gone".into()),
                Err(e) => {
                    tracing::warn!(tool = %self.tool, error = %e, "cannot read the log of a finished Job's pod");
                    outcome.log_note = Some(format!("not available: {e}"));
                }
            }
        }
        Ok(Some(outcome))
    }

    /// Cancel by `stop`: one merge patch, conditional on the Job's
    /// `resourceVersion` (re-read and retried when the Job moved meanwhile),
    /// that marks the Job cancelled and ends it through its own deadline with
    /// no pod (see [`CancelMode::Stop`]). A finished Job is a conflict; an
    /// already cancelled one is left as it is.
    async fn stop_job(&self, run: &str) -> Result<(), EngineError> {
        for _ in 0..3 {
            let job = self.own_job(run).await?;
            match phase(&job) {
                Phase::Cancelled(_) => return Ok(()),
                p if p.is_finished() => {
                    return Err(EngineError::Conflict {
                        message: "the Job has already finished".into(),
                    })
                }
                _ => {}
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": job.metadata.resource_version,
                    "annotations": {ANN_CANCELLED: "true"},
                },
                "spec": {"activeDeadlineSeconds": 1, "parallelism": 0, "suspend": false},
            });
            match self.client.patch_job(run, &patch).await {
                Ok(_) => {
                    tracing::info!(tool = %self.tool, "job stopped by a cancel");
                    return Ok(());
                }
                Err(EngineError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(EngineError::Conflict {
            message: "the Job kept changing while it was being cancelled".into(),
        })
    }

    /// The container whose result and log a run reports: the configured or
    /// resolved one, else (a CronJob's Job) the first of the Job's pod.
    fn container_of(&self, job: &Job) -> String {
        self.bound.container.clone().unwrap_or_else(|| {
            job.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.containers.first())
                .map(|c| c.name.clone())
                .unwrap_or_default()
        })
    }

    /// The Job template of a call and the container that receives the
    /// arguments: the configured template, or the CronJob's job template,
    /// read now (one GET) and checked against the target.
    async fn template(&self) -> Result<(Cow<'_, Job>, String), EngineError> {
        match &self.bound.source {
            Source::Template(template) => Ok((
                Cow::Borrowed(template.as_ref()),
                self.bound.container.clone().unwrap_or_default(),
            )),
            Source::CronJob(name) => {
                let ns = self.client.namespace();
                let cronjob = match self.client.get_cronjob(name).await {
                    Ok(cronjob) => cronjob,
                    Err(EngineError::NotFound) => {
                        return Err(EngineError::internal(format!(
                            "the tool's CronJob {name} is not in namespace {ns}; ask the operator"
                        )))
                    }
                    Err(e) => return Err(e),
                };
                let job = cronjob_job(&cronjob).map_err(EngineError::internal)?;
                let container = self
                    .bound
                    .target
                    .check_template(&job, "target.from_cronjob")
                    .map_err(|e| {
                        EngineError::internal(format!(
                            "the job template of CronJob {name} does not fit the tool's target \
                             ({e}); ask the operator"
                        ))
                    })?;
                Ok((Cow::Owned(job), container))
            }
        }
    }

    fn not_outstanding(key: &str) -> EngineError {
        EngineError::Conflict {
            message: format!("input request {key:?} is not outstanding"),
        }
    }
}

#[async_trait]
impl Pipeline for KubernetesPipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: self.bound.approval.is_some(),
            idempotent_start: true,
            locate: true,
            logs: true,
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        check_dns_label(&request.run_name)
            .map_err(|message| EngineError::InvalidInput { message })?;
        let keep_alive = request.keep_alive.or(self.keep_alive);
        let (template, container) = self.template().await?;
        let job = render_job(
            &self.bound,
            &template,
            &container,
            &self.tool,
            self.client.namespace(),
            &request,
            keep_alive,
        )?;
        for _ in 0..2 {
            match self.client.create_job(&job, false).await? {
                Created::Job => {
                    tracing::info!(tool = %self.tool, run_name = %request.run_name, "job created");
                    return Ok(request.run_name);
                }
                Created::AlreadyExists => match self.client.get_job(&request.run_name).await {
                    Ok(existing) if same_job(&existing, &job) => {
                        tracing::info!(tool = %self.tool, run_name = %request.run_name, "job already created with the same spec");
                        return Ok(request.run_name);
                    }
                    Ok(_) => {
                        return Err(EngineError::Conflict {
                            message: format!(
                                "a Job named {} already exists with another spec",
                                request.run_name
                            ),
                        })
                    }
                    // Deleted in between: create it again (once).
                    Err(EngineError::NotFound) => {}
                    Err(e) => return Err(e),
                },
            }
        }
        Err(EngineError::Conflict {
            message: format!(
                "a Job named {} keeps appearing and disappearing",
                request.run_name
            ),
        })
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let job = self.own_job(run).await?;
        self.snapshot_of(&job).await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        match self.bound.cancel {
            CancelMode::Stop => self.stop_job(run).await,
            CancelMode::Suspend => {
                let job = self.own_job(run).await?;
                if phase(&job).is_finished() {
                    return Err(EngineError::Conflict {
                        message: "the Job has already finished".into(),
                    });
                }
                let patch = json!({
                    "metadata": {"annotations": {ANN_CANCELLED: "true"}},
                    "spec": {"suspend": true},
                });
                self.client.patch_job(run, &patch).await?;
                tracing::info!(tool = %self.tool, "job suspended by a cancel");
                Ok(())
            }
        }
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        if self.bound.approval.is_none() {
            return Err(EngineError::unsupported("answer input"));
        }
        if key != APPROVAL_KEY {
            return Err(Self::not_outstanding(key));
        }
        let job = self.own_job(run).await?;
        if phase(&job) != Phase::AwaitingApproval {
            return Err(Self::not_outstanding(key));
        }
        match response.action {
            InputAction::Accept => {
                let answer = response
                    .content
                    .as_ref()
                    .filter(|c| c.as_object().is_none_or(|o| !o.is_empty()))
                    .map(|c| canonical(c).to_string());
                if answer.as_ref().is_some_and(|a| a.len() > MAX_ANSWER_BYTES) {
                    return Err(EngineError::InvalidInput {
                        message: format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"),
                    });
                }
                let mut patch = json!({
                    "metadata": {
                        "resourceVersion": job.metadata.resource_version,
                        "annotations": {ANN_APPROVAL: APPROVAL_ACCEPTED},
                    },
                    "spec": {"suspend": false},
                });
                if let Some(answer) = answer {
                    // A suspended Job that never started may change its pod
                    // template's annotations: the pods can read the answer through
                    // the downward API.
                    patch["metadata"]["annotations"][ANN_APPROVAL_ANSWER] = json!(answer);
                    patch["spec"]["template"] =
                        json!({"metadata": {"annotations": {ANN_APPROVAL_ANSWER: answer}}});
                }
                match self.client.patch_job(run, &patch).await {
                    Ok(_) => {}
                    // The Job moved on meanwhile (cancelled, deleted, answered).
                    Err(EngineError::Conflict { .. } | EngineError::NotFound) => {
                        return Err(Self::not_outstanding(key))
                    }
                    Err(e) => return Err(e),
                }
                tracing::info!(tool = %self.tool, "approval accepted; job resumed");
            }
            InputAction::Decline | InputAction::Cancel => {
                self.client
                    .delete_job(run, job.metadata.uid.as_deref())
                    .await?;
                tracing::info!(tool = %self.tool, action = ?response.action, "approval refused; job deleted");
            }
        }
        Ok(())
    }

    /// The Job's containers' logs: 1 Job read, 1 pod list, then 1 log read per
    /// container visited (at most [`MAX_LOG_SOURCES_PER_READ`]).
    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let start = cursor.map(logs::LogCursor::parse).transpose()?;
        let job = self.own_job(run).await?;
        let finished = phase(&job).is_finished();
        let selector = job.metadata.uid.as_deref().map(api::job_pod_selector);
        logs::read_page(
            &self.client,
            selector.as_deref(),
            start.unwrap_or_default(),
            finished,
            limit,
        )
        .await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        match self.own_job(run_name).await {
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
        let job = self.own_job(run).await?;
        if phase(&job).is_finished() {
            return self.snapshot_of(&job).await;
        }
        let current = snapshot(&job, self.bound.approval.as_ref(), None);
        if current.state != last.state || wait.is_zero() {
            return Ok(current);
        }
        let version = job.metadata.resource_version.clone().unwrap_or_default();
        let stream = self.client.watch_job(run, &version, wait).await?;
        let on_change = |changed: Job| async move {
            let job = self.check_own(changed)?;
            if phase(&job).is_finished() {
                return Ok((self.snapshot_of(&job).await?, true));
            }
            Ok((snapshot(&job, self.bound.approval.as_ref(), None), false))
        };
        match api::follow(stream, deadline, &last.state, current, on_change).await? {
            api::Followed::Latest(snapshot) => Ok(snapshot),
            api::Followed::Interrupted => self.read(run).await,
        }
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let request = StartRequest {
            run_name: "taskgate-check".into(),
            arguments: Value::Object(serde_json::Map::new()),
            caller_tag: "0".repeat(16),
            keep_alive: None,
            trace: None,
        };
        let (template, container) = self.template().await?;
        let mut job = render_job(
            &self.bound,
            &template,
            &container,
            &self.tool,
            self.client.namespace(),
            &request,
            self.keep_alive,
        )?;
        job.metadata.name = None;
        job.metadata.generate_name = Some("taskgate-check-".into());
        match self.client.create_job(&job, true).await {
            Ok(_) => Ok(vec![format!(
                "the Job template renders and passes a server-side dry run in namespace {}",
                self.client.namespace()
            )]),
            Err(EngineError::InvalidInput { message }) => Err(EngineError::InvalidInput {
                message: format!("the API server rejects the rendered Job: {message}"),
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 9 of the security issue: a Job that is not this tool's (another
    /// tool's label, or none) reads as not found, and a name that cannot be a
    /// Job is refused by read, cancel and answer without asking the API server
    /// (the one configured here does not answer).
    #[tokio::test]
    async fn a_reference_outside_the_tool_is_not_found() {
        let dir = std::env::temp_dir().join(format!("tg-k8s-own-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: a\n  context: {cluster: c, user: u, namespace: jobs}\n",
        )
        .unwrap();
        let settings = EngineSettings::from_value(json!({"kubeconfig": path})).unwrap();
        choose_tls_backend();
        let client = KubeClient::new(&settings).await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let template = "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: x}]\n";
        let bound = serde_json::from_value::<ToolTarget>(
            json!({"template": template, "approval": {"message": "Go?"}}),
        )
        .unwrap()
        .validate("jobs")
        .unwrap();
        let pipeline = KubernetesPipeline {
            client,
            tool: "deploy".into(),
            tool_label: label_value("deploy"),
            keep_alive: None,
            bound,
        };
        let job = |labels: Value| -> Job {
            serde_json::from_value(json!({"metadata": {"name": "tg-x", "labels": labels}})).unwrap()
        };
        assert!(pipeline
            .check_own(job(json!({LABEL_TOOL: "deploy"})))
            .is_ok());
        for foreign in [
            json!({LABEL_TOOL: "other"}),
            json!({}),
            json!({"app": "deploy"}),
        ] {
            assert!(
                matches!(
                    pipeline.check_own(job(foreign.clone())),
                    Err(EngineError::NotFound)
                ),
                "{foreign}"
            );
        }
        let yes = InputResponse {
            action: taskgate_engine::InputAction::Accept,
            content: None,
        };
        for bad in ["Not_A-Name", "../other-namespace/tg-x", "jobs/tg-x", ""] {
            let bad = bad.to_owned();
            assert!(
                matches!(pipeline.read(&bad).await, Err(EngineError::NotFound)),
                "{bad}"
            );
            assert!(
                matches!(pipeline.cancel(&bad).await, Err(EngineError::NotFound)),
                "{bad}"
            );
            assert!(
                matches!(
                    pipeline.answer(&bad, APPROVAL_KEY, &yes).await,
                    Err(EngineError::NotFound)
                ),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn build_validates_settings_before_reading_any_config() {
        let err = build(json!({"bogus": 1})).await.err().unwrap();
        assert_eq!(err.key, "bogus");
        let err = build(json!({"kubeconfig": "/nonexistent/kubeconfig"}))
            .await
            .err()
            .unwrap();
        assert_eq!(err.key, "kubeconfig");
        assert!(err.message.contains("/nonexistent/kubeconfig"), "{err}");
    }

    #[tokio::test]
    async fn a_kubeconfig_file_builds_an_engine_without_calling_it() {
        let dir = std::env::temp_dir().join(format!("tg-k8s-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: a\n  context: {cluster: c, user: u, namespace: from-context}\n- name: b\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let engine = build(json!({"kubeconfig": p})).await.unwrap();
        assert_eq!(engine.kind(), KIND);
        let tool = |target: Value| ToolDecl {
            name: "t".into(),
            target,
            input_schema: json!({"type": "object"}),
            keep_alive: None,
        };
        let template = "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: x}]\n";
        // The context's namespace applies; a template naming another is refused.
        let err = engine
            .bind(&tool(
                json!({"template": format!("metadata: {{namespace: other}}\n{template}")}),
            ))
            .err()
            .unwrap();
        assert!(err.message.contains("from-context"), "{err}");
        let pipeline = engine.bind(&tool(json!({"template": template}))).unwrap();
        let caps = pipeline.capabilities();
        assert!(caps.cancel && caps.idempotent_start && caps.locate && !caps.input);
        // A malformed reference is not found without asking upstream (the
        // server above does not answer).
        assert!(matches!(
            pipeline.read(&"Not_A-Name".to_owned()).await,
            Err(EngineError::NotFound)
        ));
        // Unreachable API server: unavailable (retryable).
        let err = pipeline.read(&"tg-x".to_owned()).await.unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        let engine = build(json!({"kubeconfig": p, "context": "b", "namespace": "jobs"}))
            .await
            .unwrap();
        assert!(engine.bind(&tool(json!({"template": template}))).is_ok());
        let err = build(json!({"kubeconfig": p, "context": "nope"}))
            .await
            .err()
            .unwrap();
        assert_eq!(err.key, "context");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
