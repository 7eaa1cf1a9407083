//! The only module that talks to the Kubernetes API server: builds the `kube`
//! client from the engine settings, makes each call once (kube's own retry layer
//! is off: throttling is reported, not waited out), and maps every API error to an
//! [`EngineError`] naming the refused verb and resource. It also holds the one
//! watch-following loop (`follow`) Jobs and resource targets wait through;
//! `logs::read_page` reads logs through these calls.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, Preconditions,
    WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use serde_json::Value;
use taskgate_engine::http::status_error;
use taskgate_engine::{ConfigError, EngineError, RunState, Snapshot};

use crate::config::EngineSettings;

/// How long to wait for a TCP/TLS connection to the API server.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a response may stay silent (a watch is bounded by its own timeout,
/// always shorter).
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(300);
/// The field manager named on every write.
pub(crate) const FIELD_MANAGER: &str = "taskgate";

/// What a create answered.
#[derive(Debug, Clone)]
pub(crate) enum Created {
    /// The Job was created (or, with a dry run, would be).
    Job,
    /// A Job of that name exists already.
    AlreadyExists,
}

/// The label selector of the pods of the Job with uid `uid`.
pub(crate) fn job_pod_selector(uid: &str) -> String {
    format!("batch.kubernetes.io/controller-uid={uid}")
}

/// A client for the Jobs and pods of one namespace.
#[derive(Clone)]
pub(crate) struct KubeClient {
    client: kube::Client,
    namespace: String,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KubeClient {
    /// Builds the client from validated settings: reads the kubeconfig (or the
    /// in-cluster service account). Makes no API call.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed `kubeconfig` or `context` when no usable
    /// configuration is found.
    pub async fn new(settings: &EngineSettings) -> Result<Self, ConfigError> {
        let options = KubeConfigOptions {
            context: settings.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &settings.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|e| {
                    ConfigError::new(
                        "kubeconfig",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| ConfigError::new(context_key(settings), e.to_string()))?
            }
            None if settings.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| ConfigError::new("context", e.to_string()))?,
            None => kube::Config::infer().await.map_err(|e| {
                ConfigError::new(
                    "kubeconfig",
                    format!("no Kubernetes configuration found (in-cluster, $KUBECONFIG or ~/.kube/config): {e}"),
                )
            })?,
        };
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        config.default_retry = false;
        let namespace = settings
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config)
            .map_err(|e| ConfigError::new("kubeconfig", format!("cannot build a client: {e}")))?;
        Ok(Self { client, namespace })
    }

    /// The namespace of this engine's Jobs.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn action(&self, verb: &str, resource: &str) -> String {
        format!("{verb} {resource} in namespace {}", self.namespace)
    }

    /// Creates a Job (`dry_run`: validated by the server, not persisted).
    ///
    /// # Errors
    ///
    /// See [`map_error`]; an existing name is [`Created::AlreadyExists`].
    pub async fn create_job(&self, job: &Job, dry_run: bool) -> Result<Created, EngineError> {
        let params = PostParams {
            dry_run,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        match self.jobs().create(&params, job).await {
            Ok(_) => Ok(Created::Job),
            Err(kube::Error::Api(status))
                if status.code == 409 && status.reason == "AlreadyExists" =>
            {
                Ok(Created::AlreadyExists)
            }
            Err(e) => Err(map_error(&self.action("create", "jobs.batch"), e)),
        }
    }

    /// Reads a Job.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`]; see [`map_error`].
    pub async fn get_job(&self, name: &str) -> Result<Job, EngineError> {
        self.jobs()
            .get(name)
            .await
            .map_err(|e| map_error(&self.action("get", "jobs.batch"), e))
    }

    /// Lists the pods of the Job with uid `uid` (label `batch.kubernetes.io/controller-uid`).
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn job_pods(&self, uid: &str) -> Result<Vec<Pod>, EngineError> {
        self.pods_labelled(&job_pod_selector(uid)).await
    }

    /// The last `lines` lines (at most `limit_bytes`) of a container's log.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn pod_log(
        &self,
        pod: &str,
        container: &str,
        lines: u32,
        limit_bytes: i64,
    ) -> Result<String, EngineError> {
        let params = LogParams {
            container: Some(container.to_owned()),
            tail_lines: Some(i64::from(lines)),
            limit_bytes: Some(limit_bytes),
            ..LogParams::default()
        };
        self.pods()
            .logs(pod, &params)
            .await
            .map_err(|e| map_error(&self.action("get", "pods/log"), e))
    }

    /// A container's log with a timestamp on each line, from the whole second
    /// `since` on (all of it without), at most `limit_bytes`. A container that
    /// has not started reads as an empty log.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] when the pod is gone; see [`map_error`].
    pub async fn pod_log_since(
        &self,
        pod: &str,
        container: &str,
        since: Option<k8s_openapi::jiff::Timestamp>,
        limit_bytes: i64,
    ) -> Result<String, EngineError> {
        let params = LogParams {
            container: Some(container.to_owned()),
            since_time: since,
            timestamps: true,
            limit_bytes: Some(limit_bytes),
            ..LogParams::default()
        };
        match self.pods().logs(pod, &params).await {
            Ok(body) => Ok(body),
            // "container ... is waiting to start" / "... ContainerCreating".
            Err(kube::Error::Api(status)) if status.code == 400 => Ok(String::new()),
            Err(e) => Err(map_error(&self.action("get", "pods/log"), e)),
        }
    }

    /// Deletes a Job with background propagation, only if its uid is `uid`.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`]; [`EngineError::Conflict`] when the uid differs;
    /// see [`map_error`].
    pub async fn delete_job(&self, name: &str, uid: Option<&str>) -> Result<(), EngineError> {
        let mut params = DeleteParams::background();
        params.preconditions = uid.map(|uid| Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        });
        self.jobs()
            .delete(name, &params)
            .await
            .map(|_| ())
            .map_err(|e| map_error(&self.action("delete", "jobs.batch"), e))
    }

    /// Applies a JSON merge patch to a Job (put `metadata.resourceVersion` in it
    /// to make it conditional).
    ///
    /// # Errors
    ///
    /// [`EngineError::Conflict`] when the resource version moved on; see
    /// [`map_error`].
    pub async fn patch_job(&self, name: &str, patch: &Value) -> Result<Job, EngineError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.jobs()
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| map_error(&self.action("patch", "jobs.batch"), e))
    }

    /// Watches one Job from `resource_version` for at most `timeout` (the server
    /// ends the watch then). Yields the Job after each change; `None` when it was
    /// deleted.
    ///
    /// # Errors
    ///
    /// See [`map_error`]; errors inside the stream likewise.
    pub async fn watch_job(
        &self,
        name: &str,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<impl Stream<Item = Result<Option<Job>, EngineError>> + Send + use<>, EngineError>
    {
        let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(secs);
        let action = self.action("watch", "jobs.batch");
        let stream = self
            .jobs()
            .watch(&params, resource_version)
            .await
            .map_err(|e| map_error(&action, e))?;
        Ok(stream.filter_map(move |event| {
            let action = action.clone();
            async move {
                match event {
                    Ok(WatchEvent::Added(job) | WatchEvent::Modified(job)) => Some(Ok(Some(job))),
                    Ok(WatchEvent::Deleted(_)) => Some(Ok(None)),
                    Ok(WatchEvent::Bookmark(_)) => None,
                    Ok(WatchEvent::Error(status)) => {
                        Some(Err(map_error(&action, kube::Error::Api(status))))
                    }
                    Err(e) => Some(Err(map_error(&action, e))),
                }
            }
        }))
    }

    /// What this identity may do in the namespace (SelfSubjectRulesReview).
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn rules(&self) -> Result<SelfSubjectRulesReview, EngineError> {
        let review = SelfSubjectRulesReview {
            spec: SelfSubjectRulesReviewSpec {
                namespace: Some(self.namespace.clone()),
            },
            ..SelfSubjectRulesReview::default()
        };
        Api::<SelfSubjectRulesReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| map_error("create selfsubjectrulesreviews.authorization.k8s.io", e))
    }
}

/// Calls on objects of any kind (`resource` targets, issue 38). New functions
/// beside the Job ones; errors map like theirs.
impl KubeClient {
    fn objects(&self, ar: &kube::core::ApiResource) -> Api<kube::core::DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, ar)
    }

    /// Creates an object (`dry_run`: validated by the server, not persisted).
    ///
    /// # Errors
    ///
    /// See [`map_error`]; an existing name is [`Created::AlreadyExists`].
    pub async fn create_object(
        &self,
        ar: &kube::core::ApiResource,
        object: &kube::core::DynamicObject,
        dry_run: bool,
    ) -> Result<Created, EngineError> {
        let params = PostParams {
            dry_run,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        match self.objects(ar).create(&params, object).await {
            Ok(_) => Ok(Created::Job),
            Err(kube::Error::Api(status))
                if status.code == 409 && status.reason == "AlreadyExists" =>
            {
                Ok(Created::AlreadyExists)
            }
            Err(e) => Err(map_error(&self.action("create", &resource_name(ar)), e)),
        }
    }

    /// Reads one object.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn get_object(
        &self,
        ar: &kube::core::ApiResource,
        name: &str,
    ) -> Result<kube::core::DynamicObject, EngineError> {
        self.objects(ar)
            .get(name)
            .await
            .map_err(|e| map_error(&self.action("get", &resource_name(ar)), e))
    }

    /// Applies a JSON merge patch to an object.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn patch_object(
        &self,
        ar: &kube::core::ApiResource,
        name: &str,
        patch: &Value,
    ) -> Result<kube::core::DynamicObject, EngineError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.objects(ar)
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| map_error(&self.action("patch", &resource_name(ar)), e))
    }

    /// The pods matching a label selector.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn pods_labelled(&self, selector: &str) -> Result<Vec<Pod>, EngineError> {
        self.pods()
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .map_err(|e| map_error(&self.action("list", "pods"), e))
    }

    /// Watches one object from `resource_version` for at most `timeout`.
    /// Yields the object after each change; `None` when it was deleted.
    ///
    /// # Errors
    ///
    /// See [`map_error`]; errors inside the stream likewise.
    pub async fn watch_object(
        &self,
        ar: &kube::core::ApiResource,
        name: &str,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<
        impl Stream<Item = Result<Option<kube::core::DynamicObject>, EngineError>> + Send + use<>,
        EngineError,
    > {
        let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(secs);
        let action = self.action("watch", &resource_name(ar));
        let stream = self
            .objects(ar)
            .watch(&params, resource_version)
            .await
            .map_err(|e| map_error(&action, e))?;
        Ok(stream.filter_map(move |event| {
            let action = action.clone();
            async move {
                match event {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => Some(Ok(Some(o))),
                    Ok(WatchEvent::Deleted(_)) => Some(Ok(None)),
                    Ok(WatchEvent::Bookmark(_)) => None,
                    Ok(WatchEvent::Error(status)) => {
                        Some(Err(map_error(&action, kube::Error::Api(status))))
                    }
                    Err(e) => Some(Err(map_error(&action, e))),
                }
            }
        }))
    }
}

/// Reads for CronJob targets and `taskgate discover`.
impl KubeClient {
    /// Reads a CronJob of the namespace.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`]; see [`map_error`].
    pub async fn get_cronjob(&self, name: &str) -> Result<CronJob, EngineError> {
        Api::<CronJob>::namespaced(self.client.clone(), &self.namespace)
            .get(name)
            .await
            .map_err(|e| map_error(&self.action("get", "cronjobs.batch"), e))
    }

    /// One page of at most `limit` CronJobs of the namespace, and whether the
    /// API server has more.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn list_cronjobs(&self, limit: u32) -> Result<(Vec<CronJob>, bool), EngineError> {
        Api::<CronJob>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().limit(limit))
            .await
            .map(|l| {
                let more = l.metadata.continue_.as_ref().is_some_and(|c| !c.is_empty());
                (l.items, more)
            })
            .map_err(|e| map_error(&self.action("list", "cronjobs.batch"), e))
    }

    /// One page of at most `limit` objects of resource `ar` in the namespace,
    /// and whether the API server has more.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] when the API server does not serve the
    /// resource (its CRD is not installed); see [`map_error`].
    pub async fn list_objects(
        &self,
        ar: &kube::core::ApiResource,
        limit: u32,
    ) -> Result<(Vec<kube::core::DynamicObject>, bool), EngineError> {
        self.objects(ar)
            .list(&ListParams::default().limit(limit))
            .await
            .map(|l| {
                let more = l.metadata.continue_.as_ref().is_some_and(|c| !c.is_empty());
                (l.items, more)
            })
            .map_err(|e| map_error(&self.action("list", &resource_name(ar)), e))
    }
}

impl KubeClient {
    /// Whether this identity may `verb` the resource `ar` in the namespace
    /// (SelfSubjectAccessReview, allowed to every authenticated identity).
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn may(&self, verb: &str, ar: &kube::core::ApiResource) -> Result<bool, EngineError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(self.namespace.clone()),
                    verb: Some(verb.into()),
                    group: Some(ar.group.clone()),
                    resource: Some(ar.plural.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map(|r| r.status.is_some_and(|s| s.allowed))
            .map_err(|e| map_error("create selfsubjectaccessreviews.authorization.k8s.io", e))
    }
}

/// `workflows.argoproj.io`: the resource as RBAC names it.
fn resource_name(ar: &kube::core::ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

fn context_key(settings: &EngineSettings) -> &'static str {
    if settings.context.is_some() {
        "context"
    } else {
        "kubeconfig"
    }
}

/// Maps an error of the call `action` ("create jobs.batch in namespace x") to an
/// [`EngineError`]: 401/403 → permission denied naming the action; 404 → not
/// found; 409 → conflict; 400/422 → invalid input with the server's message;
/// 429 → throttled (with the server's retry-after); 5xx, 410 and transport
/// trouble → unavailable; the rest → internal.
#[must_use]
pub(crate) fn map_error(action: &str, error: kube::Error) -> EngineError {
    match error {
        kube::Error::Api(status) => map_status(action, &status),
        e @ (kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::ReadEvents(_)
        | kube::Error::Auth(_)) => EngineError::unavailable(format!("{action}: {e}"), e),
        e @ kube::Error::SerdeError(_) => EngineError::Internal {
            message: format!("{action}: cannot read the answer"),
            source: Some(Box::new(e)),
        },
        e => EngineError::Internal {
            message: format!("{action}: {e}"),
            source: Some(Box::new(e)),
        },
    }
}

/// Who answers, as messages name it.
const UPSTREAM: &str = "the API server";

/// Maps an API server `Status` with the shared mapping
/// ([`taskgate_engine::http::status_error`]; see [`map_error`]).
#[must_use]
fn map_status(action: &str, status: &Status) -> EngineError {
    let message = if status.message.is_empty() {
        status.reason.clone()
    } else {
        status.message.clone()
    };
    let retry_after = status
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(u64::from(s)));
    status_error(UPSTREAM, status.code, action, message, retry_after)
}

/// How following a watch ended.
pub(crate) enum Followed {
    /// The first snapshot whose state differs from the last one the caller
    /// saw, or (the deadline passed, the server closed the watch) the latest.
    Latest(Snapshot),
    /// The watch could not go on (410 Gone: the version is too old): a fresh
    /// read answers.
    Interrupted,
}

/// Follows a watch of one object (`watch_job`, `watch_object`) until the
/// snapshot `on_change` makes of a changed object has a state other than
/// `last` (or `on_change` says it is final: a finished Job), or `deadline`;
/// `current` is the snapshot before the watch. Jobs and resource targets wait
/// through this one loop.
///
/// # Errors
///
/// [`EngineError::NotFound`] when the object is deleted; `on_change`'s errors
/// and the watch's errors that are not retryable.
pub(crate) async fn follow<T, S, F, Fut>(
    stream: S,
    deadline: tokio::time::Instant,
    last: &RunState,
    mut current: Snapshot,
    mut on_change: F,
) -> Result<Followed, EngineError>
where
    S: Stream<Item = Result<Option<T>, EngineError>>,
    F: FnMut(T) -> Fut,
    Fut: std::future::Future<Output = Result<(Snapshot, bool), EngineError>>,
{
    let mut stream = std::pin::pin!(stream);
    loop {
        let event = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) | Ok(None) => return Ok(Followed::Latest(current)),
            Ok(Some(event)) => event,
        };
        match event {
            Ok(Some(changed)) => {
                let (snapshot, is_final) = on_change(changed).await?;
                current = snapshot;
                if is_final || current.state != *last {
                    return Ok(Followed::Latest(current));
                }
            }
            Ok(None) => return Err(EngineError::NotFound),
            Err(e) if e.is_retryable() => return Ok(Followed::Interrupted),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: &str) -> Status {
        serde_json::from_str(json).unwrap()
    }

    fn captured(name: &str) -> Status {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        status(&std::fs::read_to_string(path).unwrap())
    }

    #[test]
    fn api_errors_map_to_engine_errors() {
        // Status bodies captured from the API server (tests/fixtures/capture.sh).
        match map_status(
            "list jobs.batch in namespace x",
            &captured("status-403.json"),
        ) {
            EngineError::PermissionDenied { action, message } => {
                assert_eq!(action, "list jobs.batch in namespace x");
                assert!(
                    message.contains("cannot list resource \"jobs\""),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            map_status("get", &captured("status-401.json")),
            EngineError::PermissionDenied { action, .. } if action == "authentication"
        ));
        assert!(matches!(
            map_status("get", &captured("status-404.json")),
            EngineError::NotFound
        ));
        assert!(matches!(
            map_status("create", &captured("status-409.json")),
            EngineError::Conflict { message } if message.contains("already exists")
        ));
        assert!(matches!(
            map_status("create", &captured("status-422.json")),
            EngineError::InvalidInput { message } if message.contains("spec.template.spec.restartPolicy")
        ));
        // 429 as the API server's priority and fairness sends it (not captured:
        // this control plane cannot be made to throttle on demand).
        let throttled = status(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":7},"code":429}"#,
        );
        let e = map_status("get jobs.batch", &throttled);
        assert!(matches!(e, EngineError::Throttled { .. }));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(
            map_status("x", &status(r#"{"code":429}"#)).retry_after(),
            None
        );
        assert!(map_status("x", &status(r#"{"code":503,"message":"etcd down"}"#)).is_retryable());
        assert!(map_status("x", &status(r#"{"code":410,"reason":"Expired"}"#)).is_retryable());
        assert!(matches!(
            map_status("x", &status(r#"{"code":418}"#)),
            EngineError::Internal { .. }
        ));
    }
}
