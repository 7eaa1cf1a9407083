//! The Apache Airflow engine of taskgate: a tool call triggers a DAG run whose
//! `dag_run_id` is taskgate's run name; its status is the run's state and its task
//! instances; cancel marks the run failed with a note saying taskgate cancelled it;
//! a task awaiting human input (Airflow's HITL operators) asks the client, and the
//! answer goes back through Airflow's HITL API. Everything goes through Airflow's
//! stable REST API (`/api/v2`, Airflow 3).
//!
//! The engine keeps nothing: a [`NativeRef`] is `dag_id/dag_run_id`, and every read
//! asks Airflow again. See `README.md` beside this crate for the settings, the tool
//! target, the state mapping and the calls each request makes.

mod api;
mod config;
mod discover;
mod logs;
mod translate;

use std::sync::Arc;

use reqwest::Method;
use serde_json::{json, Value};
use taskgate_engine::http::percent_encode;
use taskgate_engine::{
    async_trait, from_value, Capabilities, ConfigError, DiscoverOptions, Discovered, Engine,
    EngineError, InputResponse, LogLine, LogPage, NativeRef, Pipeline, Snapshot, StartRequest,
    ToolDecl, MAX_PAGE_BYTES,
};

use api::{action, Client};
use config::{BoundTarget, Validated};
pub use config::{EngineSettings, ResultXcom, ToolTarget};
use logs::{Pos, Step};
use translate::{FailedTask, HitlDetail, Observed};
pub use translate::{CANCEL_NOTE, OPTIONS_FIELD, OPTION_FIELD};

/// The `kind` of this engine in `[engines.NAME]`.
pub const KIND: &str = "airflow";

/// The most task instances one read lists (Airflow's default page limit).
pub(crate) const TASK_PAGE: u32 = 100;

/// A page reads no further log once fewer bytes than this are left of its
/// [`MAX_PAGE_BYTES`]: the next page goes on with the whole bound.
const MIN_LOG_READ: usize = 16 * 1024;

/// Builds the engine from its `[engines.NAME]` table (without `kind`). Reads the
/// password or token; makes no request.
///
/// # Errors
///
/// A [`ConfigError`] keyed relative to the engine table.
pub async fn build(settings: Value) -> Result<Arc<dyn Engine>, ConfigError> {
    Ok(Arc::new(AirflowEngine::new(settings)?))
}

/// A configured Airflow engine.
#[derive(Debug)]
pub struct AirflowEngine {
    client: Client,
    base_url: String,
}

impl AirflowEngine {
    /// Builds the engine from its `[engines.NAME]` table (without `kind`). No request
    /// is made.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the engine table.
    pub fn new(settings: Value) -> Result<Self, ConfigError> {
        let settings: EngineSettings = from_value(settings)?;
        let validated: Validated = settings.validate()?;
        Ok(Self {
            client: Client::new(&validated)?,
            base_url: validated.base_url,
        })
    }

    /// Binds a tool, returning the concrete pipeline type (tests use it to count
    /// requests with [`AirflowPipeline::api_calls`]).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the tool (`target.dag_id`, …).
    pub fn bind_pipeline(&self, tool: &ToolDecl) -> Result<AirflowPipeline, ConfigError> {
        let target = tool.target::<ToolTarget>()?.validate()?;
        if let (Some(key), None) = (&target.trace_conf_key, &target.conf_key) {
            if tool
                .input_schema
                .get("properties")
                .and_then(|p| p.get(key))
                .is_some()
            {
                return Err(ConfigError::new(
                    "target.trace_conf_key",
                    format!("{key:?} is an argument of the tool (its input_schema); choose another key or set target.conf_key"),
                ));
            }
        }
        Ok(AirflowPipeline {
            client: self.client.clone(),
            target,
            input_schema: tool.input_schema.clone(),
        })
    }
}

#[async_trait]
impl Engine for AirflowEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError> {
        Ok(Arc::new(self.bind_pipeline(tool)?))
    }

    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        let version: Value = self
            .client
            .call(Method::GET, "/api/v2/version", None, "authentication")
            .await?;
        Ok(vec![format!(
            "Airflow {} at {} accepts the credentials",
            version
                .get("version")
                .and_then(Value::as_str)
                .unwrap_or("?"),
            self.base_url
        )])
    }

    /// The DAGs Airflow lists (not paused; with `all`, paused ones too), their
    /// `params` as the input schema. See the `discover` module for the calls.
    async fn discover(&self, options: &DiscoverOptions) -> Result<Vec<Discovered>, EngineError> {
        discover::discover(&self.client, options).await
    }
}

/// A tool bound to a DAG.
#[derive(Debug)]
pub struct AirflowPipeline {
    client: Client,
    target: BoundTarget,
    input_schema: Value,
}

#[async_trait]
impl Pipeline for AirflowPipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: true,
            idempotent_start: true,
            locate: true,
            logs: true,
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        let conf = translate::conf_for(&request.arguments, self.target.conf_key.as_deref())
            .map_err(|message| EngineError::InvalidInput { message })?;
        let trace_key = self.target.trace_conf_key.as_deref();
        let sent = translate::conf_with_trace(&conf, trace_key, request.trace.as_ref())
            .map_err(|message| EngineError::InvalidInput { message })?;
        self.dag_ready().await?;
        let body = json!({
            "dag_run_id": request.run_name,
            "logical_date": null,
            "conf": sent,
        });
        let answer = self
            .client
            .send(
                Method::POST,
                &format!("{}/dagRuns", self.dag()),
                Some(&body),
            )
            .await?;
        if answer.ok() {
            tracing::info!(dag_id = %self.target.dag_id, run_name = %request.run_name, "DAG run triggered");
            return Ok(self.reference(&request.run_name));
        }
        if answer.status != 409 {
            return Err(api::map_error(&answer, action::RUN_CREATE));
        }
        // A run with this id exists: the same start again, or another one.
        let existing = self.get_run(&request.run_name).await?;
        let existing_conf = translate::conf_without_trace(existing.conf.as_ref(), trace_key);
        if translate::same_conf(existing_conf.as_ref(), &conf) {
            tracing::info!(dag_id = %self.target.dag_id, run_name = %request.run_name, "DAG run already triggered with the same conf");
            Ok(self.reference(&request.run_name))
        } else {
            Err(EngineError::Conflict {
                message: format!(
                    "a run {} of DAG {} already exists with another conf",
                    request.run_name, self.target.dag_id
                ),
            })
        }
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let run_id = self.own(run)?;
        let dag_run = self.get_run(run_id).await?;
        if translate::is_cancelled(&dag_run) {
            return Ok(translate::snapshot(&dag_run, &Observed::default()));
        }
        match dag_run.state.as_str() {
            "running" => {
                let tasks = self.tasks(run_id).await?.task_instances;
                let (questions, now) = if tasks
                    .iter()
                    .any(|t| translate::may_await_input(t.state.as_deref()))
                {
                    self.questions(run_id).await?
                } else {
                    (Vec::new(), None)
                };
                Ok(translate::snapshot(
                    &dag_run,
                    &Observed {
                        tasks: Some(&tasks),
                        questions: &questions,
                        now,
                        ..Observed::default()
                    },
                ))
            }
            "success" => {
                let xcom = match &self.target.result {
                    Some((task_id, key)) => match self.xcom(run_id, task_id, key).await {
                        Ok(v) => Some(v),
                        Err(EngineError::NotFound) => {
                            let mut snap = translate::snapshot(&dag_run, &Observed::default());
                            snap.state = taskgate_engine::RunState::Completed(
                                taskgate_engine::ToolOutput::error(format!(
                                    "the DAG run succeeded but task {task_id} left no XCom {key:?} (check target.result)"
                                )),
                            );
                            return Ok(snap);
                        }
                        Err(e) => return Err(e),
                    },
                    None => None,
                };
                Ok(translate::snapshot(
                    &dag_run,
                    &Observed {
                        xcom: xcom.as_ref(),
                        ..Observed::default()
                    },
                ))
            }
            "failed" => {
                let tasks = self.tasks(run_id).await?.task_instances;
                let mut failed = Vec::new();
                for (i, t) in translate::failed_tasks(&tasks).into_iter().enumerate() {
                    // The log of the first failed task only: one call, not one per task.
                    let log_tail = if i == 0 {
                        self.log_tail(run_id, &t.task_id, t.map_index, t.try_number.max(1))
                            .await
                    } else {
                        Vec::new()
                    };
                    failed.push(FailedTask {
                        task_id: t.task_id.clone(),
                        try_number: t.try_number,
                        log_tail,
                    });
                }
                Ok(translate::snapshot(
                    &dag_run,
                    &Observed {
                        tasks: Some(&tasks),
                        failed: &failed,
                        ..Observed::default()
                    },
                ))
            }
            _ => Ok(translate::snapshot(&dag_run, &Observed::default())),
        }
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let run_id = self.own(run)?;
        let dag_run = self.get_run(run_id).await?;
        if translate::is_cancelled(&dag_run) {
            return Ok(());
        }
        if matches!(dag_run.state.as_str(), "success" | "failed") {
            return Err(EngineError::Conflict {
                message: format!("the DAG run already ended ({})", dag_run.state),
            });
        }
        let body = json!({"state": "failed", "note": translate::cancel_note()});
        let _: Value = self
            .client
            .call(
                Method::PATCH,
                &self.run_path(run_id),
                Some(&body),
                action::RUN_EDIT,
            )
            .await?;
        tracing::info!(dag_id = %self.target.dag_id, "DAG run marked failed (cancelled)");
        Ok(())
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        let run_id = self.own(run)?;
        let not_outstanding = || EngineError::Conflict {
            message: format!("input request {key:?} is not outstanding"),
        };
        let (task_id, map_index, try_number) =
            translate::parse_request_key(key).ok_or_else(not_outstanding)?;
        let path = format!(
            "{}/taskInstances/{}/{map_index}/hitlDetails",
            self.run_path(run_id),
            percent_encode(&task_id)
        );
        let (detail, now): (HitlDetail, _) = self
            .client
            .call_dated(Method::GET, &path, None, action::HITL_READ)
            .await
            .map_err(|e| match e {
                EngineError::NotFound => not_outstanding(),
                other => other,
            })?;
        if detail.response_received || detail.task_instance.try_number != try_number {
            return Err(not_outstanding());
        }
        if !translate::settled(&detail, now) {
            return Err(EngineError::Unavailable {
                message: "Airflow is still parking the task for input; retry in a few seconds"
                    .to_owned(),
                source: None,
            });
        }
        let body = translate::answer_body(&detail, response)
            .map_err(|message| EngineError::InvalidInput { message })?;
        let answer = self.client.send(Method::PATCH, &path, Some(&body)).await?;
        if answer.ok() {
            tracing::info!(dag_id = %self.target.dag_id, task_id, "HITL answer sent");
            return Ok(());
        }
        Err(match api::map_error(&answer, action::HITL_EDIT) {
            EngineError::Conflict { .. } | EngineError::NotFound => not_outstanding(),
            other => other,
        })
    }

    /// One page of the run's task logs (see `logs.rs` for the order and the
    /// cursor): 3 calls (the run, its task instances, the DAG's tasks; 1 while
    /// the run is queued), then one per try read, at most
    /// [`logs::MAX_TRIES_PER_PAGE`] and [`MAX_PAGE_BYTES`] of log in all.
    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let mut pos = Pos::parse(cursor)?;
        let run_id = self.own(run)?;
        // The run's state before its logs: a run that had ended has written
        // every line by the time they are read.
        let dag_run = self.get_run(run_id).await?;
        let run_ended = matches!(dag_run.state.as_str(), "success" | "failed");
        if dag_run.state == "queued" {
            return Ok(LogPage {
                lines: Vec::new(),
                cursor: pos.cursor(),
                complete: false,
            });
        }
        let tis = self.tasks(run_id).await?.task_instances;
        let ranks = logs::task_ranks(&self.dag_tasks().await?.tasks);
        let tis = logs::ordered(&tis, &ranks);
        let mut lines: Vec<LogLine> = Vec::new();
        let mut room = MAX_PAGE_BYTES;
        let mut reads = 0;
        let mut every_try_read = false;
        while lines.len() < limit && reads < logs::MAX_TRIES_PER_PAGE && room >= MIN_LOG_READ {
            let (ti, over) = match logs::next(&tis, &ranks, &mut pos, run_ended) {
                Step::Read { ti, over } => (ti, over),
                Step::Wait => break,
                Step::End => {
                    every_try_read = true;
                    break;
                }
            };
            let Pos::In {
                task,
                try_number,
                token,
                entries,
                lines: lines_in_entry,
            } = pos.clone()
            else {
                return Err(EngineError::internal("the log reader lost its place"));
            };
            reads += 1;
            let source = logs::source(ti, try_number);
            let full_budget = room == MAX_PAGE_BYTES;
            let Some(read) = self
                .try_log(run_id, ti, try_number, token.as_deref(), room)
                .await?
            else {
                lines.push(LogLine::note(&format!("Airflow has no log of {source}")));
                pos = Pos::Past { task, try_number };
                continue;
            };
            room = room.saturating_sub(read.bytes);
            let body = logs::parse_body(&read.body, read.cut).map_err(EngineError::internal)?;
            let taken = logs::take(
                logs::log_entries(&body.entries, token.is_none()),
                entries,
                lines_in_entry,
                limit - lines.len(),
                &source,
            );
            let moved = (taken.entries, taken.lines_in_entry) != (entries, lines_in_entry);
            lines.extend(taken.lines);
            let stay = Pos::In {
                task: task.clone(),
                try_number,
                token: token.clone(),
                entries: taken.entries,
                lines: taken.lines_in_entry,
            };
            if !taken.all {
                // Stopped at the limit: on from here next time.
                pos = stay;
                break;
            }
            if read.cut {
                if moved || !full_budget {
                    pos = stay;
                } else {
                    // More than a page of log after the token, before the first
                    // entry that fits: what follows cannot be reached.
                    lines.push(LogLine::note(&format!(
                        "the rest of the log of {source} is not shown: it holds more than {} KiB beyond what was read (Airflow keeps it whole)",
                        MAX_PAGE_BYTES / 1024
                    )));
                    pos = Pos::Past { task, try_number };
                }
                break;
            }
            if over {
                pos = Pos::Past { task, try_number };
                continue;
            }
            // The try runs on: go on from the token Airflow returned.
            pos = match body.token {
                Some(next) if logs::usable_token(&next) => Pos::In {
                    task,
                    try_number,
                    token: Some(next),
                    entries: 0,
                    lines: 0,
                },
                _ => stay,
            };
            break;
        }
        Ok(LogPage {
            lines,
            cursor: pos.cursor(),
            complete: run_ended && every_try_read,
        })
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        match self.get_run(run_name).await {
            Ok(run) => Ok(Some(self.reference(&run.dag_run_id))),
            Err(EngineError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let details: Value = self
            .client
            .call(
                Method::GET,
                &format!("{}/details", self.dag()),
                None,
                action::DAG_READ,
            )
            .await
            .map_err(|e| match e {
                EngineError::NotFound => EngineError::InvalidInput {
                    message: format!("Airflow has no DAG {:?}", self.target.dag_id),
                },
                other => other,
            })?;
        let mut findings = vec![format!("DAG {} exists", self.target.dag_id)];
        if details.get("is_paused").and_then(Value::as_bool) == Some(true) {
            findings.push(format!(
                "warning: DAG {} is paused; taskgate refuses to trigger it until it is unpaused",
                self.target.dag_id
            ));
        }
        let params = details
            .get("params")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let suggested = translate::suggest_input_schema(&params);
        if self.target.conf_key.is_some() {
            findings.push(format!(
                "arguments go under conf.{}; the DAG's params are not compared (suggested schema from them: {suggested})",
                self.target.conf_key.as_deref().unwrap_or_default()
            ));
            return Ok(findings);
        }
        let mismatches = translate::compare_params(&self.input_schema, &params);
        if !mismatches.is_empty() {
            return Err(EngineError::InvalidInput {
                message: format!(
                    "the tool's input_schema does not match the DAG's params: {}; suggested input_schema: {suggested}",
                    mismatches.join("; ")
                ),
            });
        }
        findings.push("the tool's input_schema matches the DAG's params".to_owned());
        Ok(findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline() -> AirflowPipeline {
        let engine =
            AirflowEngine::new(json!({"base_url": "http://127.0.0.1:9", "token_env": "PATH"}))
                .unwrap();
        engine
            .bind_pipeline(&ToolDecl {
                name: "t".into(),
                target: json!({"dag_id": "etl"}),
                input_schema: json!({"type": "object"}),
                keep_alive: None,
            })
            .unwrap()
    }

    #[test]
    fn references_name_runs_of_the_tools_dag_only() {
        let p = pipeline();
        let r = p.reference("tg-abc");
        assert_eq!(r, "etl/tg-abc");
        assert_eq!(p.own(&r).unwrap(), "tg-abc");
        for bad in ["", "etl", "etl/", "other/tg-abc", "etlx/tg"] {
            assert!(
                matches!(p.own(&bad.to_owned()), Err(EngineError::NotFound)),
                "{bad}"
            );
        }
    }

    /// Item 9 of the security issue: read, cancel and answer refuse a
    /// reference to another DAG's run without asking upstream (the configured
    /// server does not answer).
    #[tokio::test]
    async fn a_reference_to_another_dag_is_not_found_by_every_operation() {
        let p = pipeline();
        let yes = InputResponse {
            action: taskgate_engine::InputAction::Accept,
            content: Some(json!({})),
        };
        for bad in [
            "other/tg-abc",
            "etl-other/tg-abc",
            "ETL/tg-abc",
            "etl",
            "/tg-abc",
        ] {
            let bad = bad.to_owned();
            assert!(
                matches!(p.read(&bad).await, Err(EngineError::NotFound)),
                "{bad}"
            );
            assert!(
                matches!(p.cancel(&bad).await, Err(EngineError::NotFound)),
                "{bad}"
            );
            let answered = p.answer(&bad, "approve", &yes).await;
            assert!(
                matches!(answered, Err(EngineError::NotFound)),
                "{bad}: {answered:?}"
            );
        }
    }

    /// A forged or oversized log cursor, and a reference to another DAG's run,
    /// are refused before any request (the configured server does not answer).
    #[tokio::test]
    async fn bad_log_cursors_are_refused_without_a_request() {
        let p = pipeline();
        let run = "etl/tg-abc".to_owned();
        let long = format!("a1/p/-1/1/{}", "t".repeat(600));
        for bad in ["", "k1.0.0", "a1/p/-1/1/../x", "a1/i/-1/1/0/0/a b/t", &long] {
            let e = p.logs(&run, Some(bad), 10).await.unwrap_err();
            assert!(
                matches!(&e, EngineError::InvalidInput { message } if message.contains("cursor")),
                "{bad}: {e:?}"
            );
        }
        assert!(matches!(
            p.logs(&"other/tg-abc".to_owned(), None, 10).await,
            Err(EngineError::NotFound)
        ));
        assert_eq!(p.api_calls(), 0);
        assert!(p.capabilities().logs);
    }

    #[test]
    fn bind_rejects_bad_targets() {
        let engine =
            AirflowEngine::new(json!({"base_url": "http://127.0.0.1:9", "token_env": "PATH"}))
                .unwrap();
        let e = engine
            .bind(&ToolDecl {
                name: "t".into(),
                target: json!({"dag_id": "etl", "nope": 1}),
                input_schema: json!({}),
                keep_alive: None,
            })
            .err()
            .unwrap();
        assert_eq!(e.key, "target.nope");
    }
}
