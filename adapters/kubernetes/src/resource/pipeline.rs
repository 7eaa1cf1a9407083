//! The [`Pipeline`] of a `resource` target: each request reads or acts on the
//! one object once through [`KubeClient`] (`api.rs`) and translates what the
//! API server says with the pure functions of `translate.rs`.

use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use serde_json::{json, Map, Value};
use taskgate_engine::{
    async_trait, Capabilities, ConfigError, EngineError, LogPage, NativeRef, Pipeline, RunState,
    Snapshot, StartRequest, ToolDecl,
};

use super::config::{at_path, BoundResource, ResourceTarget};
use super::translate::{
    annotation, answer_patch, is_finished, label, render_object, set_path, snapshot_of,
};
use crate::api::{self, Created, KubeClient};
use crate::config::check_dns_label;
use crate::logs;
use crate::translate::{label_value, ANN_CANCELLED, ANN_SPEC_HASH, LABEL_TOOL};

#[derive(Debug)]
pub(crate) struct ResourcePipeline {
    pub(crate) client: KubeClient,
    pub(crate) tool: String,
    pub(crate) tool_label: String,
    pub(crate) keep_alive: Option<Duration>,
    pub(crate) bound: BoundResource,
}

impl ResourcePipeline {
    pub(crate) fn bind(
        client: &KubeClient,
        tool: &ToolDecl,
    ) -> Result<Arc<dyn Pipeline>, ConfigError> {
        let target: ResourceTarget = tool.target()?;
        let bound = target
            .validate(tool, client.namespace())
            .map_err(|e| e.within("target"))?;
        Ok(Arc::new(Self {
            client: client.clone(),
            tool: tool.name.clone(),
            tool_label: label_value(&tool.name),
            keep_alive: tool.keep_alive,
            bound,
        }))
    }

    fn to_value(object: DynamicObject) -> Value {
        serde_json::to_value(object).unwrap_or(Value::Null)
    }

    fn own(&self, object: Value) -> Result<Value, EngineError> {
        if label(&object, LABEL_TOOL) == Some(self.tool_label.as_str()) {
            Ok(object)
        } else {
            Err(EngineError::NotFound)
        }
    }

    async fn own_object(&self, run: &str) -> Result<Value, EngineError> {
        check_dns_label(run).map_err(|_| EngineError::NotFound)?;
        let object = self.client.get_object(&self.bound.api, run).await?;
        self.own(Self::to_value(object))
    }

    fn kind(&self) -> &str {
        &self.bound.api.kind
    }
}

#[async_trait]
impl Pipeline for ResourcePipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: self.bound.suspend_nodes,
            idempotent_start: true,
            locate: true,
            logs: self.bound.pod_label.is_some(),
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        check_dns_label(&request.run_name)
            .map_err(|message| EngineError::InvalidInput { message })?;
        let keep_alive = request.keep_alive.or(self.keep_alive);
        let rendered = render_object(
            &self.bound,
            &self.tool,
            self.client.namespace(),
            &request,
            keep_alive,
        )?;
        let object: DynamicObject =
            serde_json::from_value(rendered.clone()).map_err(|e| EngineError::InvalidInput {
                message: format!("the rendered object is not a Kubernetes object: {e}"),
            })?;
        match self
            .client
            .create_object(&self.bound.api, &object, false)
            .await?
        {
            Created::Job => {
                tracing::info!(tool = %self.tool, kind = %self.kind(), "object created");
                Ok(request.run_name)
            }
            Created::AlreadyExists => {
                let existing = Self::to_value(
                    self.client
                        .get_object(&self.bound.api, &request.run_name)
                        .await?,
                );
                let same = label(&existing, LABEL_TOOL) == label(&rendered, LABEL_TOOL)
                    && annotation(&existing, ANN_SPEC_HASH).is_some()
                    && annotation(&existing, ANN_SPEC_HASH) == annotation(&rendered, ANN_SPEC_HASH);
                if same {
                    Ok(request.run_name)
                } else {
                    Err(EngineError::Conflict {
                        message: format!(
                            "a {} named {} already exists with other arguments",
                            self.kind(),
                            request.run_name
                        ),
                    })
                }
            }
        }
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let object = self.own_object(run).await?;
        Ok(snapshot_of(&self.bound, &object))
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let object = self.own_object(run).await?;
        match snapshot_of(&self.bound, &object).state {
            RunState::Cancelled { .. } => return Ok(()),
            s if is_finished(&s) => {
                return Err(EngineError::Conflict {
                    message: format!("the {} has already finished", self.kind()),
                })
            }
            _ => {}
        }
        let mut patch = self.bound.cancel_patch.clone();
        set_path(
            &mut patch,
            &[
                "metadata".into(),
                "annotations".into(),
                ANN_CANCELLED.into(),
            ],
            json!("true"),
        );
        self.client
            .patch_object(&self.bound.api, run, &patch)
            .await?;
        tracing::info!(tool = %self.tool, kind = %self.kind(), "object cancelled");
        Ok(())
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &taskgate_engine::InputResponse,
    ) -> Result<(), EngineError> {
        if !self.bound.suspend_nodes {
            return Err(EngineError::unsupported("answer input"));
        }
        let object = self.own_object(run).await?;
        let accept = match response.action {
            taskgate_engine::InputAction::Accept => {
                Some(response.content.clone().unwrap_or_else(|| json!({})))
            }
            taskgate_engine::InputAction::Decline | taskgate_engine::InputAction::Cancel => None,
        };
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let patch = answer_patch(&object, key, accept.as_ref(), &now)?;
        match self.client.patch_object(&self.bound.api, run, &patch).await {
            Ok(_) => {}
            Err(EngineError::Conflict { .. } | EngineError::NotFound) => {
                return Err(EngineError::Conflict {
                    message: format!("input request {key:?} is not outstanding"),
                })
            }
            Err(e) => return Err(e),
        }
        tracing::info!(tool = %self.tool, kind = %self.kind(), action = ?response.action, "suspended step answered");
        Ok(())
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let Some(pod_label) = &self.bound.pod_label else {
            return Err(EngineError::unsupported("logs"));
        };
        let start = cursor.map(logs::LogCursor::parse).transpose()?;
        let object = self.own_object(run).await?;
        let finished = is_finished(&snapshot_of(&self.bound, &object).state);
        let selector = format!("{pod_label}={run}");
        logs::read_page(
            &self.client,
            Some(&selector),
            start.unwrap_or_default(),
            finished,
            limit,
        )
        .await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        match self.own_object(run_name).await {
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
        let object = self.own_object(run).await?;
        let current = snapshot_of(&self.bound, &object);
        if current.state != last.state || wait.is_zero() || is_finished(&current.state) {
            return Ok(current);
        }
        let version = at_path(&object, "metadata.resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let stream = self
            .client
            .watch_object(&self.bound.api, run, &version, wait)
            .await?;
        let on_change = |changed: DynamicObject| async move {
            let object = self.own(Self::to_value(changed))?;
            Ok((snapshot_of(&self.bound, &object), false))
        };
        match api::follow(stream, deadline, &last.state, current, on_change).await? {
            api::Followed::Latest(snapshot) => Ok(snapshot),
            api::Followed::Interrupted => self.read(run).await,
        }
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let request = StartRequest {
            run_name: "taskgate-check".into(),
            arguments: Value::Object(Map::new()),
            caller_tag: "0".repeat(16),
            keep_alive: None,
            trace: None,
        };
        let rendered = render_object(
            &self.bound,
            &self.tool,
            self.client.namespace(),
            &request,
            self.keep_alive,
        )?;
        let object: DynamicObject =
            serde_json::from_value(rendered).map_err(|e| EngineError::InvalidInput {
                message: e.to_string(),
            })?;
        let mut missing = Vec::new();
        for verb in ["create", "get", "list", "watch", "patch"] {
            if !self.client.may(verb, &self.bound.api).await? {
                missing.push(verb);
            }
        }
        let resource = format!("{}.{}", self.bound.api.plural, self.bound.api.group);
        if !missing.is_empty() {
            return Err(EngineError::PermissionDenied {
                action: format!(
                    "{} {resource} in namespace {}",
                    missing[0],
                    self.client.namespace()
                ),
                message: format!(
                    "the Role of taskgate's identity lacks: {} on {resource}",
                    missing.join(", ")
                ),
            });
        }
        match self
            .client
            .create_object(&self.bound.api, &object, true)
            .await
        {
            Err(EngineError::NotFound) => Err(EngineError::InvalidInput {
                message: format!(
                    "the API server does not serve {resource} ({} {}): is its CRD installed?",
                    self.bound.api.api_version, self.bound.api.kind
                ),
            }),
            Ok(_) => Ok(vec![format!(
                "the {} template renders and passes a server-side dry run in namespace {}",
                self.kind(),
                self.client.namespace()
            )]),
            Err(EngineError::InvalidInput { message }) => Err(EngineError::InvalidInput {
                message: format!(
                    "the API server rejects the rendered {}: {message}",
                    self.kind()
                ),
            }),
            Err(e) => Err(e),
        }
    }
}
