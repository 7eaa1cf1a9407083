//! The Temporal engine of taskgate: a tool call starts a workflow execution
//! whose workflow id is taskgate's run name; its status is the execution's
//! description (the latest run of its continue-as-new chain) and, while it runs,
//! the workflow's own queries; its result is the close event's payload; cancel
//! asks the workflow to stop (or terminates it); a question the workflow asks
//! through a query is answered through a Workflow Update (or a signal); a
//! listened task waits on a history long poll. Everything goes through
//! Temporal's official Rust client (`temporalio-client`) and its raw
//! `WorkflowService` gRPC calls.
//!
//! The engine keeps nothing: a [`NativeRef`] is `workflow_id/first_run_id`, and
//! every read asks Temporal again. See `README.md` beside this crate for the
//! settings, the tool target, the state mapping and the calls each request
//! makes.

mod api;
mod config;
mod discover;
mod translate;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use taskgate_engine::{
    async_trait, from_value, spec_hash, Capabilities, ConfigError, DiscoverOptions, Discovered,
    Engine, EngineError, InputAction, InputResponse, LogPage, NativeRef, Pipeline, Snapshot,
    StartRequest, ToolDecl, MAX_CURSOR_BYTES, MAX_PAGE_BYTES,
};
use temporalio_common::protos::temporal::api::common::v1::{
    Memo, SearchAttributes, WorkflowExecution, WorkflowType,
};
use temporalio_common::protos::temporal::api::enums::v1::{
    HistoryEventFilterType, QueryRejectCondition, TaskQueueKind, TaskQueueType,
    UpdateWorkflowExecutionLifecycleStage, WorkflowExecutionStatus, WorkflowIdConflictPolicy,
    WorkflowIdReusePolicy,
};
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::query::v1::WorkflowQuery;
use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
use temporalio_common::protos::temporal::api::update::v1 as upd;
use temporalio_common::protos::temporal::api::workflowservice::v1 as ws;

use api::{Api, IDENTITY};
use config::{BoundTarget, CancelMode, INPUT_MEMO};
pub use config::{EngineSettings, InputMode, ToolTarget};
use translate::Observed;

/// The `kind` of this engine in `[engines.NAME]`.
pub const KIND: &str = "temporal";

/// Events asked for per history page.
const HISTORY_PAGE: i32 = 256;
/// The shortest history long poll Temporal accepts is 2 s; a little more.
const MIN_LONG_POLL: Duration = Duration::from_millis(2500);
/// The most history pages one wait reads to reach the end of the history
/// before it can long-poll.
const MAX_CATCH_UP_PAGES: usize = 40;

/// Builds the engine from its `[engines.NAME]` table (without `kind`). Reads the
/// TLS files and the API key; makes no connection.
///
/// # Errors
///
/// A [`ConfigError`] keyed relative to the engine table.
pub async fn build(settings: Value) -> Result<Arc<dyn Engine>, ConfigError> {
    Ok(Arc::new(TemporalEngine::new(settings)?))
}

/// A configured Temporal engine.
#[derive(Debug)]
pub struct TemporalEngine {
    api: Api,
}

impl TemporalEngine {
    /// Builds the engine from its `[engines.NAME]` table (without `kind`). No
    /// connection is made.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the engine table.
    pub fn new(settings: Value) -> Result<Self, ConfigError> {
        let settings: EngineSettings = from_value(settings)?;
        Ok(Self {
            api: Api::new(settings.validate()?),
        })
    }

    /// Binds a tool, returning the concrete pipeline type.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the tool (`target.workflow_type`, …).
    pub fn bind_pipeline(&self, tool: &ToolDecl) -> Result<TemporalPipeline, ConfigError> {
        let target = tool.target::<ToolTarget>()?.validate()?;
        Ok(TemporalPipeline {
            api: self.api.clone(),
            target,
        })
    }
}

#[async_trait]
impl Engine for TemporalEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError> {
        Ok(Arc::new(self.bind_pipeline(tool)?))
    }

    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        let ns = self
            .api
            .describe_namespace(
                ws::DescribeNamespaceRequest {
                    namespace: self.api.namespace().to_owned(),
                    ..Default::default()
                },
                None,
            )
            .await
            .map_err(|e| match e {
                EngineError::NotFound => EngineError::InvalidInput {
                    message: format!("Temporal has no namespace {:?}", self.api.namespace()),
                },
                other => other,
            })?;
        let state = ns
            .namespace_info
            .as_ref()
            .and_then(|i| {
                temporalio_common::protos::temporal::api::enums::v1::NamespaceState::try_from(
                    i.state,
                )
                .ok()
            })
            .map_or("?", |s| s.as_str_name());
        Ok(vec![format!(
            "Temporal namespace {} exists ({state})",
            self.api.namespace()
        )])
    }

    /// The workflow types of the namespace's most recent executions, with
    /// their task queues: ListWorkflowExecutions, at most
    /// [`discover::MAX_PAGES`] pages of [`discover::PAGE`], each under the
    /// engine's `rpc_timeout`. Reads only.
    async fn discover(&self, options: &DiscoverOptions) -> Result<Vec<Discovered>, EngineError> {
        let _ = options;
        let mut seen = Vec::new();
        let mut token = Vec::new();
        for _ in 0..discover::MAX_PAGES {
            let page = self
                .api
                .list_workflow_executions(
                    ws::ListWorkflowExecutionsRequest {
                        namespace: self.api.namespace().to_owned(),
                        page_size: discover::PAGE,
                        next_page_token: token,
                        query: String::new(),
                    },
                    None,
                )
                .await?;
            seen.extend(page.executions.iter().map(|e| {
                discover::Seen {
                    workflow_type: e
                        .r#type
                        .as_ref()
                        .map(|t| t.name.clone())
                        .unwrap_or_default(),
                    task_queue: e.task_queue.clone(),
                }
            }));
            token = page.next_page_token;
            if token.is_empty() {
                break;
            }
        }
        Ok(discover::workflow_tools(
            &seen,
            self.api.namespace(),
            seen.len(),
        ))
    }
}

/// A tool bound to a workflow type.
#[derive(Debug)]
pub struct TemporalPipeline {
    api: Api,
    target: BoundTarget,
}

/// The current run of a task's workflow, as one description showed it.
struct Current {
    workflow_id: String,
    run_id: String,
    describe: ws::DescribeWorkflowExecutionResponse,
}

/// What a watch keeps between waits in [`Snapshot::revision`]: the run, the
/// last event id the snapshot reflects, and the history long-poll token once
/// one is known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mark {
    run_id: String,
    last_event: i64,
    token: Option<Vec<u8>>,
}

impl Mark {
    fn encode(&self) -> String {
        let mut s = format!("{}:{}", self.run_id, self.last_event);
        if let Some(t) = &self.token {
            s.push(':');
            s.push_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(t));
        }
        s
    }

    fn decode(s: &str) -> Option<Self> {
        let mut parts = s.splitn(3, ':');
        let run_id = parts.next()?.to_owned();
        let last_event = parts.next()?.parse().ok()?;
        let token = match parts.next() {
            Some(t) => Some(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(t)
                    .ok()?,
            ),
            None => None,
        };
        Some(Self {
            run_id,
            last_event,
            token,
        })
    }
}

/// The history events of a page, or none.
fn events(response: &ws::GetWorkflowExecutionHistoryResponse) -> &[HistoryEvent] {
    response
        .history
        .as_ref()
        .map(|h| h.events.as_slice())
        .unwrap_or_default()
}

impl TemporalPipeline {
    /// How many gRPC calls this pipeline's engine has sent so far (all its
    /// pipelines share one client).
    #[must_use]
    pub fn api_calls(&self) -> u64 {
        self.api.calls()
    }

    fn execution(workflow_id: &str, run_id: &str) -> Option<WorkflowExecution> {
        Some(WorkflowExecution {
            workflow_id: workflow_id.to_owned(),
            run_id: run_id.to_owned(),
        })
    }

    /// The workflow id and first run id of a reference; anything malformed
    /// reads as not found.
    fn own(run: &NativeRef) -> Result<(&str, &str), EngineError> {
        let (workflow_id, first) = run.split_once('/').ok_or(EngineError::NotFound)?;
        if workflow_id.is_empty() || first.is_empty() || workflow_id.len() > 255 {
            return Err(EngineError::NotFound);
        }
        Ok((workflow_id, first))
    }

    /// Describes the latest run of the task's chain and checks it is this
    /// tool's: the same first run, workflow type and task queue; anything else
    /// is not found (a reference outside the tool's target).
    async fn current(&self, run: &NativeRef) -> Result<Current, EngineError> {
        let (workflow_id, first) = Self::own(run)?;
        let describe = self
            .api
            .describe_workflow_execution(
                ws::DescribeWorkflowExecutionRequest {
                    namespace: self.api.namespace().to_owned(),
                    execution: Self::execution(workflow_id, ""),
                },
                None,
            )
            .await?;
        let info = describe
            .workflow_execution_info
            .as_ref()
            .ok_or_else(|| EngineError::internal("Temporal described no execution"))?;
        let run_id = info
            .execution
            .as_ref()
            .map(|e| e.run_id.clone())
            .unwrap_or_default();
        let first_run = if info.first_run_id.is_empty() {
            run_id.as_str()
        } else {
            info.first_run_id.as_str()
        };
        let kind = info.r#type.as_ref().map_or("", |t| t.name.as_str());
        if first_run != first || kind != self.target.workflow_type {
            return Err(EngineError::NotFound);
        }
        Ok(Current {
            workflow_id: workflow_id.to_owned(),
            run_id,
            describe,
        })
    }

    /// Runs a query on the current run: its JSON, or why there is none.
    /// Throttling is passed on; every other trouble is the reason.
    async fn query(
        &self,
        workflow_id: &str,
        run_id: &str,
        name: &str,
    ) -> Result<Result<Value, String>, EngineError> {
        let answer = self
            .api
            .query_workflow(
                ws::QueryWorkflowRequest {
                    namespace: self.api.namespace().to_owned(),
                    execution: Self::execution(workflow_id, run_id),
                    query: Some(WorkflowQuery {
                        query_type: name.to_owned(),
                        ..Default::default()
                    }),
                    query_reject_condition: QueryRejectCondition::NotOpen as i32,
                },
                Some(self.api.query_timeout()),
            )
            .await;
        match answer {
            Ok(r) if r.query_rejected.is_some() => Ok(Err("the workflow is closed".into())),
            Ok(r) => {
                let len = translate::payloads_len(r.query_result.as_ref());
                if len > translate::MAX_QUERY_BYTES {
                    return Ok(Err(format!(
                        "the answer to query {name} is {len} bytes, more than {} taskgate reads",
                        translate::MAX_QUERY_BYTES
                    )));
                }
                Ok(translate::payloads_value(r.query_result.as_ref()))
            }
            Err(e @ EngineError::Throttled { .. }) => Err(e),
            Err(e @ EngineError::PermissionDenied { .. }) => Err(e),
            Err(EngineError::DeadlineExceeded { .. }) => {
                Ok(Err(format!("no worker answered query {name} in time")))
            }
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    async fn close_event(
        &self,
        workflow_id: &str,
        run_id: &str,
    ) -> Result<Option<HistoryEvent>, EngineError> {
        let page = self
            .api
            .get_workflow_execution_history(
                ws::GetWorkflowExecutionHistoryRequest {
                    namespace: self.api.namespace().to_owned(),
                    execution: Self::execution(workflow_id, run_id),
                    history_event_filter_type: HistoryEventFilterType::CloseEvent as i32,
                    ..Default::default()
                },
                None,
            )
            .await?;
        Ok(events(&page).last().cloned())
    }

    /// One read of the task's workflow.
    async fn read_current(&self, run: &NativeRef) -> Result<(Snapshot, Mark), EngineError> {
        let current = self.current(run).await?;
        let d = &current.describe;
        let mut seen = Observed::default();
        let close;
        match translate::status(d) {
            WorkflowExecutionStatus::Running => {
                if let Some(q) = &self.target.input_query {
                    seen.question =
                        Some(self.query(&current.workflow_id, &current.run_id, q).await?);
                }
                if let Some(p) = &self.target.progress_query {
                    seen.progress = if Some(p) == self.target.input_query.as_ref() {
                        seen.question.clone()
                    } else {
                        Some(self.query(&current.workflow_id, &current.run_id, p).await?)
                    };
                }
            }
            WorkflowExecutionStatus::Completed
            | WorkflowExecutionStatus::Failed
            | WorkflowExecutionStatus::Terminated => {
                close = self
                    .close_event(&current.workflow_id, &current.run_id)
                    .await?;
                seen.close = close.as_ref();
                let snap = translate::snapshot(d, &seen);
                return Ok((snap, self.mark(&current)));
            }
            _ => {}
        }
        Ok((translate::snapshot(d, &seen), self.mark(&current)))
    }

    fn mark(&self, current: &Current) -> Mark {
        Mark {
            run_id: current.run_id.clone(),
            last_event: current
                .describe
                .workflow_execution_info
                .as_ref()
                .map_or(0, |i| i.history_length),
            token: None,
        }
    }

    fn reference(workflow_id: &str, first_run_id: &str) -> NativeRef {
        format!("{workflow_id}/{first_run_id}")
    }

    /// The argument hash a start with `arguments` writes in its memo.
    fn input_hash(arguments: &Value) -> String {
        spec_hash(&serde_json::to_vec(arguments).unwrap_or_default())
    }

    /// The hash in an execution's memo, if it has one.
    fn memo_hash(describe: &ws::DescribeWorkflowExecutionResponse) -> Option<String> {
        let payload = describe
            .workflow_execution_info
            .as_ref()?
            .memo
            .as_ref()?
            .fields
            .get(INPUT_MEMO)?;
        translate::payload_value(payload)
            .ok()?
            .as_str()
            .map(str::to_owned)
    }

    /// A start that met an existing execution with this workflow id: the same
    /// arguments (its memo says) → that execution; other arguments → conflict.
    async fn existing(&self, workflow_id: &str, hash: &str) -> Result<NativeRef, EngineError> {
        let describe = self
            .api
            .describe_workflow_execution(
                ws::DescribeWorkflowExecutionRequest {
                    namespace: self.api.namespace().to_owned(),
                    execution: Self::execution(workflow_id, ""),
                },
                None,
            )
            .await?;
        let info = describe
            .workflow_execution_info
            .as_ref()
            .ok_or_else(|| EngineError::internal("Temporal described no execution"))?;
        let run_id = info
            .execution
            .as_ref()
            .map(|e| e.run_id.clone())
            .unwrap_or_default();
        let first = if info.first_run_id.is_empty() {
            run_id.clone()
        } else {
            info.first_run_id.clone()
        };
        let mut theirs = Self::memo_hash(&describe);
        if theirs.is_none() && first != run_id {
            // A run continued as new without the memo: the first run has it.
            let first_run = self
                .api
                .describe_workflow_execution(
                    ws::DescribeWorkflowExecutionRequest {
                        namespace: self.api.namespace().to_owned(),
                        execution: Self::execution(workflow_id, &first),
                    },
                    None,
                )
                .await?;
            theirs = Self::memo_hash(&first_run);
        }
        let same_type =
            info.r#type.as_ref().map(|t| t.name.as_str()) == Some(&self.target.workflow_type);
        if same_type && theirs.as_deref() == Some(hash) {
            tracing::info!(
                workflow_id,
                "workflow already started with the same arguments"
            );
            Ok(Self::reference(workflow_id, &first))
        } else {
            Err(EngineError::Conflict {
                message: format!(
                    "a workflow with id {workflow_id} already exists with other arguments"
                ),
            })
        }
    }

    /// Long-polls the run's history from `mark` until a new event or
    /// `deadline`: `Ok(Some(mark))` when nothing changed (with the token to go on
    /// from), `Ok(None)` when the run changed.
    async fn poll_history(
        &self,
        workflow_id: &str,
        mut mark: Mark,
        deadline: Instant,
    ) -> Result<Option<Mark>, EngineError> {
        let request = |token: Vec<u8>| ws::GetWorkflowExecutionHistoryRequest {
            namespace: self.api.namespace().to_owned(),
            execution: Self::execution(workflow_id, &mark.run_id),
            maximum_page_size: HISTORY_PAGE,
            next_page_token: token,
            wait_new_event: true,
            history_event_filter_type: HistoryEventFilterType::AllEvent as i32,
            skip_archival: true,
        };
        if mark.token.is_none() {
            // Page to the end of what the snapshot saw: the last page's token
            // is the long poll's.
            let mut token = Vec::new();
            for _ in 0..MAX_CATCH_UP_PAGES {
                let page = self
                    .api
                    .get_workflow_execution_history(request(token), None)
                    .await?;
                let last = events(&page).last().map_or(0, |e| e.event_id);
                if last > mark.last_event || page.next_page_token.is_empty() {
                    return Ok(None);
                }
                token = page.next_page_token;
                if last == mark.last_event {
                    break;
                }
            }
            mark.token = Some(token);
        }
        let mut first = true;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // Temporal refuses a long poll whose deadline is under 2 s: the first
            // poll of a short wait lasts that long (a change still ends it at
            // once); later polls only when that much time is left.
            if !first && left < MIN_LONG_POLL {
                return Ok(Some(mark));
            }
            first = false;
            let token = mark.token.clone().unwrap_or_default();
            match self
                .api
                .get_workflow_execution_history(request(token), Some(left.max(MIN_LONG_POLL)))
                .await
            {
                Ok(page) => {
                    if let Some(last) = events(&page).last() {
                        mark.last_event = last.event_id;
                        return Ok(None);
                    }
                    if page.next_page_token.is_empty() {
                        return Ok(None);
                    }
                    mark.token = Some(page.next_page_token);
                }
                Err(EngineError::DeadlineExceeded { .. }) => return Ok(Some(mark)),
                Err(e) => return Err(e),
            }
        }
    }
}

#[async_trait]
impl Pipeline for TemporalPipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: self.target.input_query.is_some(),
            idempotent_start: true,
            locate: true,
            logs: true,
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        let hash = Self::input_hash(&request.arguments);
        let mut memo = Memo::default();
        for (k, v) in &self.target.memo {
            memo.fields.insert(k.clone(), translate::json_payload(v));
        }
        memo.fields
            .insert(INPUT_MEMO.to_owned(), translate::json_payload(&json!(hash)));
        let search_attributes =
            (!self.target.search_attributes.is_empty()).then(|| SearchAttributes {
                indexed_fields: self
                    .target
                    .search_attributes
                    .iter()
                    .map(|(k, v)| (k.clone(), translate::json_payload(v)))
                    .collect(),
            });
        let body = ws::StartWorkflowExecutionRequest {
            namespace: self.api.namespace().to_owned(),
            workflow_id: request.run_name.clone(),
            workflow_type: Some(WorkflowType {
                name: self.target.workflow_type.clone(),
            }),
            task_queue: Some(TaskQueue {
                name: self.target.task_queue.clone(),
                kind: TaskQueueKind::Normal as i32,
                ..Default::default()
            }),
            input: Some(translate::input_payloads(
                &request.arguments,
                self.target.args.as_deref(),
            )),
            workflow_run_timeout: self.target.run_timeout.map(|d| prost_wkt_types::Duration {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            identity: IDENTITY.to_owned(),
            // The same request id for the same run name and arguments: Temporal
            // answers a repeated start with the run it made.
            request_id: format!("taskgate-{}-{hash}", request.run_name),
            workflow_id_reuse_policy: WorkflowIdReusePolicy::RejectDuplicate as i32,
            workflow_id_conflict_policy: WorkflowIdConflictPolicy::Fail as i32,
            memo: Some(memo),
            search_attributes,
            // Outside the request id: a retry under another trace is the same start.
            header: request.trace.as_ref().map(translate::trace_header),
            ..Default::default()
        };
        match self.api.start_workflow_execution(body, None).await {
            Ok(started) if started.started => {
                tracing::info!(workflow_id = %request.run_name, "workflow started");
                Ok(Self::reference(&request.run_name, &started.run_id))
            }
            // The same request id again: Temporal answers with the execution it
            // made (whose run may have continued as new since).
            Ok(_) => self.existing(&request.run_name, &hash).await,
            Err(EngineError::Conflict { .. }) => self.existing(&request.run_name, &hash).await,
            Err(EngineError::NotFound) => Err(EngineError::InvalidInput {
                message: format!("Temporal has no namespace {:?}", self.api.namespace()),
            }),
            Err(e) => Err(e),
        }
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let (mut snap, mark) = self.read_current(run).await?;
        snap.revision = Some(mark.encode());
        Ok(snap)
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let current = self.current(run).await?;
        let (_, first) = Self::own(run)?;
        match translate::status(&current.describe) {
            WorkflowExecutionStatus::Running | WorkflowExecutionStatus::Paused => {}
            WorkflowExecutionStatus::Canceled | WorkflowExecutionStatus::Terminated => {
                return Ok(())
            }
            other => {
                return Err(EngineError::Conflict {
                    message: format!("the workflow already ended ({})", other.as_str_name()),
                })
            }
        }
        let execution = Self::execution(&current.workflow_id, "");
        let sent = match self.target.cancel {
            CancelMode::Request => self
                .api
                .request_cancel_workflow_execution(
                    ws::RequestCancelWorkflowExecutionRequest {
                        namespace: self.api.namespace().to_owned(),
                        workflow_execution: execution,
                        identity: IDENTITY.to_owned(),
                        request_id: format!("taskgate-cancel-{first}"),
                        first_execution_run_id: first.to_owned(),
                        reason: "taskgate: the task was cancelled".to_owned(),
                        ..Default::default()
                    },
                    None,
                )
                .await
                .map(|_| ()),
            CancelMode::Terminate => self
                .api
                .terminate_workflow_execution(
                    ws::TerminateWorkflowExecutionRequest {
                        namespace: self.api.namespace().to_owned(),
                        workflow_execution: execution,
                        reason: "taskgate: the task was cancelled".to_owned(),
                        identity: IDENTITY.to_owned(),
                        first_execution_run_id: first.to_owned(),
                        ..Default::default()
                    },
                    None,
                )
                .await
                .map(|_| ()),
        };
        match sent {
            // Closed between the description and the request.
            Err(EngineError::NotFound) => Err(EngineError::Conflict {
                message: "the workflow already ended".into(),
            }),
            other => other,
        }
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        let current = self.current(run).await?;
        let (_, first) = Self::own(run)?;
        if translate::status(&current.describe) != WorkflowExecutionStatus::Running {
            return Err(EngineError::Conflict {
                message: "the workflow is no longer running".into(),
            });
        }
        let action = match response.action {
            InputAction::Accept => "accept",
            InputAction::Decline => "decline",
            InputAction::Cancel => "cancel",
        };
        let body = json!({
            "key": key,
            "action": action,
            "content": response.content.clone().unwrap_or(Value::Null),
        });
        let args = temporalio_common::protos::temporal::api::common::v1::Payloads {
            payloads: vec![translate::json_payload(&body)],
        };
        if let Some(update) = &self.target.input_update {
            // The same answer to the same question is the same update: a
            // retried answer is not applied twice.
            let update_id = format!(
                "taskgate-{}",
                spec_hash(format!("{first}\n{key}\n{body}").as_bytes())
            );
            let answer = self
                .api
                .update_workflow_execution(
                    ws::UpdateWorkflowExecutionRequest {
                        namespace: self.api.namespace().to_owned(),
                        workflow_execution: Self::execution(&current.workflow_id, ""),
                        first_execution_run_id: first.to_owned(),
                        wait_policy: Some(upd::WaitPolicy {
                            lifecycle_stage: UpdateWorkflowExecutionLifecycleStage::Completed
                                as i32,
                        }),
                        request: Some(upd::Request {
                            meta: Some(upd::Meta {
                                update_id,
                                identity: IDENTITY.to_owned(),
                            }),
                            input: Some(upd::Input {
                                name: update.clone(),
                                args: Some(args),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    },
                    None,
                )
                .await
                .map_err(|e| match e {
                    EngineError::NotFound => EngineError::Conflict {
                        message: "the workflow is no longer running".into(),
                    },
                    other => other,
                })?;
            return match answer.outcome.and_then(|o| o.value) {
                Some(upd::outcome::Value::Success(_)) => Ok(()),
                Some(upd::outcome::Value::Failure(f)) => {
                    let (stale, message) = translate::refusal(&f);
                    if stale {
                        Err(EngineError::Conflict { message })
                    } else {
                        Err(EngineError::InvalidInput { message })
                    }
                }
                None => Err(EngineError::Unavailable {
                    message: "the workflow has not finished the answer's update yet".into(),
                    source: None,
                }),
            };
        }
        let Some(signal) = &self.target.input_signal else {
            return Err(EngineError::unsupported("answer input"));
        };
        // A signal cannot be refused: ask first whether the question is still
        // the one answered.
        let asked = match &self.target.input_query {
            Some(q) => self.query(&current.workflow_id, &current.run_id, q).await?,
            None => Ok(Value::Null),
        };
        let current_id = asked
            .ok()
            .and_then(|v| translate::question(&v).ok().flatten())
            .map(|(id, _)| id);
        if current_id.as_deref() != Some(key) {
            return Err(EngineError::Conflict {
                message: "the workflow no longer asks this question".into(),
            });
        }
        self.api
            .signal_workflow_execution(
                ws::SignalWorkflowExecutionRequest {
                    namespace: self.api.namespace().to_owned(),
                    workflow_execution: Self::execution(&current.workflow_id, ""),
                    signal_name: signal.clone(),
                    input: Some(args),
                    identity: IDENTITY.to_owned(),
                    request_id: format!(
                        "taskgate-{}",
                        spec_hash(format!("{first}\n{key}\n{body}").as_bytes())
                    ),
                    ..Default::default()
                },
                None,
            )
            .await
            .map(|_| ())
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        let describe = match self
            .api
            .describe_workflow_execution(
                ws::DescribeWorkflowExecutionRequest {
                    namespace: self.api.namespace().to_owned(),
                    execution: Self::execution(run_name, ""),
                },
                None,
            )
            .await
        {
            Ok(d) => d,
            Err(EngineError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(info) = describe.workflow_execution_info.as_ref() else {
            return Ok(None);
        };
        if info.r#type.as_ref().map(|t| t.name.as_str()) != Some(&self.target.workflow_type) {
            return Ok(None);
        }
        let run_id = info.execution.as_ref().map_or("", |e| e.run_id.as_str());
        let first = if info.first_run_id.is_empty() {
            run_id
        } else {
            info.first_run_id.as_str()
        };
        Ok(Some(Self::reference(run_name, first)))
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        let deadline = Instant::now() + wait;
        let mark = last.revision.as_deref().and_then(Mark::decode);
        let Some(mark) = mark.filter(|_| !last.state.is_terminal()) else {
            tokio::time::sleep(wait).await;
            return self.read(run).await;
        };
        let (workflow_id, _) = Self::own(run)?;
        match self.poll_history(workflow_id, mark, deadline).await? {
            Some(unchanged) => {
                let mut same = last.clone();
                same.revision = Some(unchanged.encode());
                Ok(same)
            }
            None => self.read(run).await,
        }
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        // The cursor: the last event id shown, and the page token that reads
        // the page holding it (when the history had more pages).
        let (after, mut token) = match cursor {
            None => (0_i64, Vec::new()),
            Some(c) => {
                let bad = || EngineError::InvalidInput {
                    message: "not a cursor of this engine".into(),
                };
                let (id, tok) = c.split_once('.').unwrap_or((c, ""));
                let id: i64 = id.parse().map_err(|_| bad())?;
                let tok = if tok.is_empty() {
                    Vec::new()
                } else {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(tok)
                        .map_err(|_| bad())?
                };
                (id, tok)
            }
        };
        let current = self.current(run).await?;
        let mut lines = Vec::new();
        let mut last_id = after;
        let mut bytes = 0_usize;
        // The token that resumes at the page holding `last_id`.
        let mut resume = token.clone();
        let mut complete = false;
        'pages: loop {
            let page = self
                .api
                .get_workflow_execution_history(
                    ws::GetWorkflowExecutionHistoryRequest {
                        namespace: self.api.namespace().to_owned(),
                        execution: Self::execution(&current.workflow_id, &current.run_id),
                        maximum_page_size: HISTORY_PAGE,
                        next_page_token: token.clone(),
                        history_event_filter_type: HistoryEventFilterType::AllEvent as i32,
                        skip_archival: true,
                        ..Default::default()
                    },
                    None,
                )
                .await?;
            resume.clone_from(&token);
            for event in events(&page) {
                bytes += prost::Message::encoded_len(event);
                if event.event_id <= last_id {
                    continue;
                }
                if lines.len() >= limit {
                    break 'pages;
                }
                if let Some(line) = translate::event_line(event) {
                    lines.push(line);
                }
                last_id = event.event_id;
            }
            if page.next_page_token.is_empty() {
                // The end of the history as it is now: the next read starts
                // from the beginning again and skips what was shown.
                resume.clear();
                let info = current.describe.workflow_execution_info.as_ref();
                complete = translate::status(&current.describe) != WorkflowExecutionStatus::Running
                    && last_id >= info.map_or(0, |i| i.history_length);
                break;
            }
            token = page.next_page_token;
            resume.clone_from(&token);
            if bytes >= MAX_PAGE_BYTES {
                break;
            }
        }
        let mut cursor = last_id.to_string();
        if !resume.is_empty() {
            let t = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&resume);
            if cursor.len() + 1 + t.len() <= MAX_CURSOR_BYTES {
                cursor = format!("{cursor}.{t}");
            }
        }
        Ok(LogPage {
            lines,
            cursor,
            complete,
        })
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let queue = self
            .api
            .describe_task_queue(
                ws::DescribeTaskQueueRequest {
                    namespace: self.api.namespace().to_owned(),
                    task_queue: Some(TaskQueue {
                        name: self.target.task_queue.clone(),
                        kind: TaskQueueKind::Normal as i32,
                        ..Default::default()
                    }),
                    task_queue_type: TaskQueueType::Workflow as i32,
                    ..Default::default()
                },
                None,
            )
            .await?;
        Ok(vec![if queue.pollers.is_empty() {
            format!(
                "warning: no worker polls task queue {} (workflow {} would wait until one does)",
                self.target.task_queue, self.target.workflow_type
            )
        } else {
            format!(
                "task queue {} has {} workflow poller(s)",
                self.target.task_queue,
                queue.pollers.len()
            )
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_engine::TraceContext;

    #[test]
    fn marks_round_trip() {
        for m in [
            Mark {
                run_id: "0193-abc".into(),
                last_event: 17,
                token: None,
            },
            Mark {
                run_id: "r".into(),
                last_event: 3,
                token: Some(vec![0, 1, 2, 255, b':']),
            },
        ] {
            assert_eq!(Mark::decode(&m.encode()), Some(m.clone()));
        }
        assert_eq!(Mark::decode("nonsense"), None);
    }

    /// Against the Temporal server of `scripts/temporal/up.sh` (skipped without
    /// `TASKGATE_TEMPORAL_ADDRESS`, failed under `TASKGATE_REQUIRE_E2E=1`): the
    /// started workflow's history holds the trace context in its start header,
    /// as the SDKs' OpenTelemetry interceptors read it; a retry under another
    /// trace is the same run. No worker is needed: the start event is enough.
    #[tokio::test]
    async fn the_start_header_carries_the_trace_context() {
        use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;
        let Some(address) = taskgate_engine::testing::e2e_endpoint("TASKGATE_TEMPORAL_ADDRESS")
        else {
            return;
        };
        let engine =
            TemporalEngine::new(json!({"address": address, "namespace": "taskgate-test"})).unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let queue = format!("tq-trace-{}-{}", std::process::id(), nanos % 1_000_000_000);
        let pipeline = engine
            .bind_pipeline(&ToolDecl {
                name: "wf".into(),
                target: json!({"workflow_type": "Traced", "task_queue": queue}),
                input_schema: json!({"type": "object"}),
                keep_alive: None,
            })
            .unwrap();
        let run_name = format!("tg-trace-{}", nanos % 1_000_000_000);
        let request = |traceparent: Option<&str>| StartRequest {
            run_name: run_name.clone(),
            arguments: json!({"a": 1}),
            caller_tag: "0123456789abcdef".into(),
            keep_alive: None,
            trace: traceparent.map(|t| TraceContext::new(t, Some("vendor=abc")).unwrap()),
        };
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let run = pipeline.start(request(Some(TP))).await.unwrap();
        let again = pipeline
            .start(request(Some(
                "00-11111111111111111111111111111111-2222222222222222-01",
            )))
            .await
            .unwrap();
        assert_eq!(again, run);
        let (workflow_id, run_id) = TemporalPipeline::own(&run).unwrap();
        let history = pipeline
            .api
            .get_workflow_execution_history(
                ws::GetWorkflowExecutionHistoryRequest {
                    namespace: "taskgate-test".into(),
                    execution: TemporalPipeline::execution(workflow_id, run_id),
                    maximum_page_size: 1,
                    ..Default::default()
                },
                None,
            )
            .await
            .unwrap();
        let first = &history.history.unwrap().events[0];
        let Some(Attributes::WorkflowExecutionStartedEventAttributes(started)) = &first.attributes
        else {
            panic!("{first:?}")
        };
        let header = started.header.clone().expect("a start header");
        let data = &header.fields[translate::TRACE_HEADER_KEY];
        assert_eq!(
            translate::payload_value(data).unwrap(),
            json!({"traceparent": TP, "tracestate": "vendor=abc"})
        );
        pipeline.cancel(&run).await.unwrap();
    }

    #[test]
    fn references_must_name_a_workflow_and_a_run() {
        assert!(TemporalPipeline::own(&"wf/run".to_owned()).is_ok());
        for bad in ["", "wf", "/run", "wf/"] {
            assert!(TemporalPipeline::own(&bad.to_owned()).is_err(), "{bad}");
        }
    }
}
