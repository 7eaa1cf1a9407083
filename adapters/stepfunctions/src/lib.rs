//! The AWS Step Functions engine of taskgate: a tool call starts an execution of a
//! Standard state machine; its status, result, cancellation and human step are read
//! from and sent to Step Functions on each client request. Nothing is kept between
//! requests: the native reference is the execution ARN.
//!
//! See `README.md` beside this crate for settings, the tool target and the IAM
//! policy.

mod api;
mod config;
mod discover;
mod translate;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use taskgate_engine::{
    async_trait, Capabilities, ConfigError, DiscoverOptions, Discovered, Engine, EngineError,
    InputAction, InputResponse, LogPage, NativeRef, Pipeline, Snapshot, StartRequest, ToolDecl,
};

pub use api::{ClientOptions, MAX_ATTEMPTS};
pub use config::{EngineSettings, HumanStep, ToolTarget};
pub use translate::DECLINED_ERROR;

use api::{SfnClient, Started};
use config::StateMachineArn;
use translate::{
    ends_execution, execution_input, find_token, log_page, parse_log_cursor, parse_request_key,
    pending_human_task, same_input, snapshot, xray_trace_header,
};

/// The most history pages one log read goes through: 25 pages of 1,000 events
/// reach Step Functions' limit of 25,000 events per execution. A read starts at
/// the first page (the API's page tokens are longer than a cursor may be) and
/// skips the events the cursor has passed.
const MAX_LOG_PAGES: usize = 25;

/// The engine kind written in `[engines.NAME]`.
pub const KIND: &str = "stepfunctions";

/// How long Step Functions keeps a Standard execution after it ends.
pub(crate) const RETENTION: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// Builds a Step Functions engine from its settings (the `[engines.NAME]` table
/// without `kind` and `call_timeout`). Makes no upstream call.
///
/// # Errors
///
/// A [`ConfigError`] keyed by the offending setting.
pub async fn build(settings: Value) -> Result<Arc<dyn Engine>, ConfigError> {
    build_with(settings, ClientOptions::default()).await
}

/// As [`build`], with extra wiring for the SDK client (a custom HTTP client or
/// interceptors, such as a fault-injecting one in tests).
///
/// # Errors
///
/// A [`ConfigError`] keyed by the offending setting.
pub async fn build_with(
    settings: Value,
    options: ClientOptions,
) -> Result<Arc<dyn Engine>, ConfigError> {
    let settings = EngineSettings::from_value(settings)?;
    let client = SfnClient::new(&settings, options).await;
    Ok(Arc::new(StepFunctionsEngine { settings, client }))
}

/// A configured Step Functions engine: one region, one set of credentials.
/// Built by [`build`] or [`build_with`].
#[derive(Debug)]
pub struct StepFunctionsEngine {
    settings: EngineSettings,
    client: SfnClient,
}

#[async_trait]
impl Engine for StepFunctionsEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError> {
        let target: ToolTarget = tool.target()?;
        let arn = target.validate(&self.settings.region)?;
        Ok(Arc::new(StepFunctionsPipeline {
            client: self.client.clone(),
            target,
            arn,
        }))
    }

    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        self.client.list_one_state_machine().await?;
        Ok(vec![format!(
            "Step Functions answers in {} and allows states:ListStateMachines",
            self.settings.region
        )])
    }

    /// The account's Standard state machines in the region (at most
    /// [`discover::MAX_STATE_MACHINES`], ListStateMachines pages of
    /// [`discover::PAGE`], one DescribeStateMachine each; Express ones are
    /// left out: they cannot run as tools). With `sample` N (at most
    /// [`discover::MAX_SAMPLE`]) the input schema is inferred from the inputs
    /// of the N most recent executions: one ListExecutions and N
    /// DescribeExecution calls per state machine. Every call has the client's
    /// deadline (`OPERATION_TIMEOUT`). Reads only.
    async fn discover(&self, options: &DiscoverOptions) -> Result<Vec<Discovered>, EngineError> {
        let mut machines = Vec::new();
        let mut next = None;
        loop {
            let (page, token) = self
                .client
                .list_state_machines(discover::PAGE, next)
                .await?;
            machines.extend(page);
            next = token;
            if next.is_none() || machines.len() >= discover::MAX_STATE_MACHINES {
                break;
            }
        }
        let truncated = next.is_some() || machines.len() > discover::MAX_STATE_MACHINES;
        machines.truncate(discover::MAX_STATE_MACHINES);
        let sample = options.sample.min(discover::MAX_SAMPLE);
        let mut found = Vec::new();
        for (arn, name) in machines {
            let info = self.client.describe_state_machine(&arn).await?;
            if info.express {
                continue;
            }
            let mut samples = Vec::new();
            let mut sampled = 0;
            if sample > 0 {
                let max = i32::try_from(sample).unwrap_or(i32::MAX);
                for execution in self.client.recent_executions(&arn, max).await? {
                    sampled += 1;
                    let described = match self.client.describe_execution(&execution).await {
                        Ok(e) => e,
                        // Gone since it was listed (90 days passed): skip it.
                        Err(EngineError::NotFound) => continue,
                        Err(e) => return Err(e),
                    };
                    if let Some(input) = described
                        .input
                        .as_deref()
                        .and_then(|i| serde_json::from_str::<Value>(i).ok())
                    {
                        samples.push(input);
                    }
                }
            }
            let described = discover::Described {
                arn,
                name,
                description: info.description,
                definition: info.definition,
            };
            found.push(discover::state_machine_tool(&described, &samples, sampled));
        }
        if truncated {
            if let Some(last) = found.last_mut() {
                last.notes.push(format!(
                    "only the first {} state machines were read",
                    discover::MAX_STATE_MACHINES
                ));
            }
        }
        Ok(found)
    }
}

/// A tool bound to a state machine. Made by [`StepFunctionsEngine`]'s
/// [`Engine::bind`].
#[derive(Debug)]
pub struct StepFunctionsPipeline {
    client: SfnClient,
    target: ToolTarget,
    arn: StateMachineArn,
}

impl StepFunctionsPipeline {
    /// The execution ARN, when `run` is an execution of this tool's state machine;
    /// anything else reads as not found.
    fn own<'a>(&self, run: &'a NativeRef) -> Result<&'a str, EngineError> {
        let name = run
            .strip_prefix(&self.arn.execution_prefix())
            .ok_or(EngineError::NotFound)?;
        if name.is_empty() || name.contains(':') {
            return Err(EngineError::NotFound);
        }
        Ok(run)
    }
}

#[async_trait]
impl Pipeline for StepFunctionsPipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: self.target.human_step.is_some(),
            idempotent_start: true,
            locate: true,
            logs: true,
            max_retention: Some(RETENTION),
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        let input = execution_input(&request.arguments, self.target.input_key.as_deref());
        let started = self
            .client
            .start_execution(
                &self.target.state_machine_arn,
                &request.run_name,
                input.clone(),
                request.trace.as_ref().map(xray_trace_header),
            )
            .await?;
        match started {
            Started::Execution(arn) => {
                tracing::info!(state_machine = %self.arn.name, run_name = %request.run_name, "execution started");
                Ok(arn)
            }
            Started::AlreadyExists => {
                let arn = self.arn.execution_arn(&request.run_name);
                let existing = match self.client.describe_execution(&arn).await {
                    Ok(existing) => existing,
                    Err(EngineError::NotFound) => {
                        return Err(EngineError::Conflict {
                            message: format!(
                                "an execution named {} exists but is not an execution of this state machine",
                                request.run_name
                            ),
                        })
                    }
                    Err(e) => return Err(e),
                };
                match existing.input.as_deref() {
                    Some(previous) if same_input(previous, &input) => {
                        tracing::info!(state_machine = %self.arn.name, run_name = %request.run_name, "execution already started with the same input");
                        Ok(arn)
                    }
                    _ => Err(EngineError::Conflict {
                        message: format!(
                            "an execution named {} already exists with other input",
                            request.run_name
                        ),
                    }),
                }
            }
        }
    }

    /// The execution's history events as lines (type, time, state, error and
    /// cause; never input or output), from the event after the cursor's.
    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let arn = self.own(run)?;
        let after = parse_log_cursor(cursor)?;
        let mut events = Vec::new();
        let mut fresh = 0;
        let mut token = None;
        let mut history_end = false;
        for _ in 0..MAX_LOG_PAGES {
            let (page, next) = self.client.history_forward(arn, token.take()).await?;
            fresh += page.iter().filter(|e| e.id > after).count();
            events.extend(page);
            match next {
                None => {
                    history_end = true;
                    break;
                }
                // Enough new lines for the page: the rest waits for the next read.
                Some(_) if fresh >= limit => break,
                Some(next) => token = Some(next),
            }
        }
        history_end |= events.last().is_some_and(|e| ends_execution(&e.kind));
        Ok(log_page(&events, after, limit, history_end))
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let arn = self.own(run)?;
        let execution = self.client.describe_execution(arn).await?;
        // The history is read only where it changes the answer: a waiting human
        // step, or the current state's name when the tool asks for it.
        let wants_history = self.target.human_step.is_some() || self.target.state_in_status;
        let history = if execution.status == "RUNNING" && wants_history {
            match self.client.history_page(arn).await {
                Ok(page) => Some(page),
                // Without a human step, the history only names the current state:
                // a read still answers without it.
                Err(e) if self.target.human_step.is_none() && !e.is_retryable() => {
                    tracing::warn!(error = %e, "cannot read the execution history; status without the current state");
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        Ok(snapshot(
            &execution,
            history.as_ref(),
            self.target.human_step.as_ref(),
        ))
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let arn = self.own(run)?;
        self.client.stop_execution(arn).await?;
        tracing::info!(state_machine = %self.arn.name, "execution stop requested");
        Ok(())
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        let Some(step) = &self.target.human_step else {
            return Err(EngineError::unsupported("answer input"));
        };
        let arn = self.own(run)?;
        let not_outstanding = || EngineError::Conflict {
            message: format!("input request {key:?} is not outstanding"),
        };
        let (state, scheduled_id) = parse_request_key(key).ok_or_else(not_outstanding)?;
        if state != step.state {
            return Err(not_outstanding());
        }
        let page = self.client.history_page(arn).await?;
        let task = pending_human_task(&page, &step.state)
            .filter(|t| t.scheduled_id == scheduled_id)
            .ok_or_else(not_outstanding)?;
        let token = find_token(&task.scheduled.parameters, step.token_pointer.as_deref())
            .ok_or_else(|| {
                EngineError::internal(format!(
                    "no task token in the parameters of state {}: put $$.Task.Token in its Parameters, or set target.human_step.token_pointer",
                    step.state
                ))
            })?;
        match response.action {
            InputAction::Accept => {
                let output = response
                    .content
                    .clone()
                    .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
                self.client
                    .send_task_success(&token, output.to_string())
                    .await?;
            }
            InputAction::Decline => {
                self.client
                    .send_task_failure(&token, DECLINED_ERROR, "the person declined")
                    .await?;
            }
            InputAction::Cancel => {
                self.client
                    .send_task_failure(&token, DECLINED_ERROR, "the person dismissed the question")
                    .await?;
            }
        }
        tracing::info!(state_machine = %self.arn.name, state = %step.state, action = ?response.action, "human step answered");
        Ok(())
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        let arn = self.arn.execution_arn(run_name);
        match self.client.describe_execution(&arn).await {
            Ok(_) => Ok(Some(arn)),
            Err(EngineError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let arn = self.arn.unqualified();
        let machine = match self.client.describe_state_machine(&arn).await {
            Ok(machine) => machine,
            Err(EngineError::NotFound) => {
                return Err(EngineError::InvalidInput {
                    message: format!("state machine {arn} does not exist"),
                })
            }
            Err(e) => return Err(e),
        };
        if machine.express {
            return Err(EngineError::InvalidInput {
                message: format!(
                    "state machine {arn} is an Express workflow. Express workflows cannot be described; taskgate needs Standard"
                ),
            });
        }
        let mut findings = vec![format!("state machine {arn} exists and is Standard")];
        if let Some(step) = &self.target.human_step {
            match waits_for_token(&machine.definition, &step.state) {
                Some(true) => findings.push(format!(
                    "human step: state {} waits for a task token",
                    step.state
                )),
                Some(false) => {
                    return Err(EngineError::InvalidInput {
                        message: format!(
                            "human step: state {} of {arn} is not a .waitForTaskToken task",
                            step.state
                        ),
                    })
                }
                None => {
                    return Err(EngineError::InvalidInput {
                        message: format!("human step: {arn} has no state named {}", step.state),
                    })
                }
            }
        }
        Ok(findings)
    }
}

/// Whether the state named `state` (anywhere in the definition, including
/// Parallel branches and Map processors) is a `.waitForTaskToken` task; `None`
/// when there is no such state.
fn waits_for_token(definition: &str, state: &str) -> Option<bool> {
    fn find<'a>(value: &'a Value, state: &str) -> Option<&'a Value> {
        match value {
            Value::Object(map) => {
                if let Some(found) = map
                    .get("States")
                    .and_then(Value::as_object)
                    .and_then(|states| states.get(state))
                {
                    return Some(found);
                }
                map.values().find_map(|v| find(v, state))
            }
            Value::Array(items) => items.iter().find_map(|v| find(v, state)),
            _ => None,
        }
    }
    let definition: Value = serde_json::from_str(definition).ok()?;
    let found = find(&definition, state)?;
    Some(
        found.get("Type").and_then(Value::as_str) == Some("Task")
            && found
                .get("Resource")
                .and_then(Value::as_str)
                .is_some_and(|r| r.ends_with(".waitForTaskToken")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_definition_says_which_state_waits_for_a_token() {
        let machine = fixture("describe_state_machine_standard.json");
        let definition = machine["definition"].as_str().unwrap();
        assert_eq!(waits_for_token(definition, "Approve"), Some(true));
        assert_eq!(waits_for_token(definition, "Prepare"), Some(false));
        assert_eq!(waits_for_token(definition, "Nope"), None);
        let nested = json!({"StartAt": "P", "States": {"P": {"Type": "Parallel", "Branches": [
            {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken", "End": true}}}
        ], "End": true}}});
        assert_eq!(waits_for_token(&nested.to_string(), "A"), Some(true));
    }

    #[tokio::test]
    async fn build_validates_and_bind_checks_targets() {
        let err = build(json!({"region": "us-east-1", "bogus": 1}))
            .await
            .err()
            .unwrap();
        assert_eq!(err.key, "bogus");
        let engine = build(json!({"region": "us-east-1", "endpoint_url": "http://127.0.0.1:1"}))
            .await
            .unwrap();
        assert_eq!(engine.kind(), KIND);
        let tool = |target: Value| ToolDecl {
            name: "t".into(),
            target,
            input_schema: json!({"type": "object"}),
            keep_alive: None,
        };
        let err = engine
            .bind(&tool(json!({"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:A", "inputkey": "x"})))
            .err()
            .unwrap();
        assert_eq!(err.key, "target.inputkey");
        let pipeline = engine
            .bind(&tool(json!({"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:A"})))
            .unwrap();
        let caps = pipeline.capabilities();
        assert!(caps.cancel && caps.idempotent_start && caps.locate && !caps.input);
        assert_eq!(caps.max_retention, Some(RETENTION));
        // A reference to another state machine's execution is not found, without
        // asking upstream (the endpoint above does not answer).
        let foreign = "arn:aws:states:us-east-1:123456789012:execution:B:tg-x".to_owned();
        assert!(matches!(
            pipeline.read(&foreign).await,
            Err(EngineError::NotFound)
        ));
        // Item 9 of the security issue: the same for cancel and answer, and for
        // references to the same name in another account or region, or to a
        // machine whose name merely starts like this one's.
        let gated = engine
            .bind(&tool(json!({"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:A",
                "human_step": {"state": "Approve", "message": "Approve?", "schema": {"type": "object"}}})))
            .unwrap();
        let yes = InputResponse {
            action: taskgate_engine::InputAction::Accept,
            content: Some(json!({})),
        };
        for foreign in [
            "arn:aws:states:us-east-1:123456789012:execution:B:tg-x",
            "arn:aws:states:us-east-1:999999999999:execution:A:tg-x",
            "arn:aws:states:eu-west-1:123456789012:execution:A:tg-x",
            "arn:aws:states:us-east-1:123456789012:execution:AB:tg-x",
            "arn:aws:states:us-east-1:123456789012:execution:A:tg-x:extra",
            "arn:aws:states:us-east-1:123456789012:execution:A:",
            "tg-x",
        ] {
            let foreign = foreign.to_owned();
            for p in [&pipeline, &gated] {
                assert!(
                    matches!(p.read(&foreign).await, Err(EngineError::NotFound)),
                    "{foreign}"
                );
                assert!(
                    matches!(p.cancel(&foreign).await, Err(EngineError::NotFound)),
                    "{foreign}"
                );
            }
            let answered = gated.answer(&foreign, "Approve", &yes).await;
            assert!(
                matches!(answered, Err(EngineError::NotFound)),
                "{foreign}: {answered:?}"
            );
        }
    }
}
