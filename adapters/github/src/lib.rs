//! The GitHub Actions engine of taskgate: a tool call dispatches a workflow
//! (`workflow_dispatch`), its status is the workflow run's, cancel cancels the run,
//! and a run waiting on a protected environment asks the client to approve or
//! reject the deployment.
//!
//! The engine keeps nothing: a [`NativeRef`] names the run (`owner/repo/run_id`),
//! and every read asks GitHub once (plus at most two calls for jobs, artifacts or
//! pending deployments) and translates the answer with the pure functions of
//! [`translate`].

mod api;
mod config;
mod discover;
mod logs;
mod rate_budget;
mod translate;
mod workflow;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::Method;
use serde_json::Value;
use taskgate_engine::{
    async_trait, from_value, Capabilities, ConfigError, DiscoverOptions, Discovered, Engine,
    EngineError, InputResponse, LogLine, LogPage, NativeRef, Pipeline, Snapshot, StartRequest,
    ToolDecl, MAX_PAGE_BYTES,
};

pub use config::{ApprovalSettings, Correlate, EngineSettings, ToolTarget, WorkflowRef};

use api::{etag, map_error, now_epoch, Client};
use config::{BoundTarget, Validated};
use logs::Pos;
use rate_budget::{poll_hint, RateBudget};
use taskgate_engine::http::{percent_encode, percent_encode_path};
use translate::{DispatchResponse, WorkflowRun};

/// The `kind` of this engine in `[engines.NAME]`.
pub const KIND: &str = "github";

/// How many listings a start makes, at most, looking for a run a dispatch could not
/// return.
pub(crate) const LOOKUPS: u32 = 3;

/// How long after its dispatch a run that cannot be found by its name is given up
/// as lost.
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(15 * 60);

/// The most jobs one page of logs visits.
const MAX_JOBS_PER_PAGE: usize = 8;

/// How far back a run listing reaches before the dispatch, against clock skew.
pub(crate) const SKEW: u64 = 120;

/// Builds the engine from its `[engines.NAME]` table (without `kind`). Reads the
/// token or private key; makes no request.
///
/// # Errors
///
/// A [`ConfigError`] keyed relative to the engine table.
pub async fn build(settings: Value) -> Result<Arc<dyn Engine>, ConfigError> {
    let settings: EngineSettings = from_value(settings)?;
    let validated = settings.validate()?;
    Ok(Arc::new(GithubEngine::new(validated)?))
}

/// A configured GitHub engine: one API root, one way to authenticate. Built by
/// [`build`].
#[derive(Debug)]
pub struct GithubEngine {
    client: Client,
    settings: Validated,
}

impl GithubEngine {
    /// Builds the engine from validated settings. No request is made.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when the client cannot be built from them.
    pub(crate) fn new(settings: Validated) -> Result<Self, ConfigError> {
        Ok(Self {
            client: Client::new(&settings)?,
            settings,
        })
    }
}

#[async_trait]
impl Engine for GithubEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError> {
        let target = tool.target::<ToolTarget>()?.validate()?;
        if let Some(trace) = &target.trace_input {
            if tool
                .input_schema
                .get("properties")
                .and_then(|p| p.get(trace))
                .is_some()
            {
                return Err(ConfigError::new(
                    "target.trace_input",
                    format!("{trace:?} is an argument of the tool (its input_schema); the trace input is taskgate's"),
                ));
            }
        }
        Ok(Arc::new(GithubPipeline {
            client: self.client.clone(),
            target,
            input_schema: tool.input_schema.clone(),
            low_budget: self.settings.low_budget,
            lookup_delay: self.settings.lookup_delay,
        }))
    }

    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        let mut rate_budget = RateBudget::default();
        let answer = self
            .client
            .send(Method::GET, "/rate_limit", None, &mut rate_budget)
            .await?;
        if answer.status == 404 {
            return Ok(vec![format!(
                "{} answers; rate limiting is not enabled there",
                self.settings.base_url
            )]);
        }
        if !answer.ok() {
            return Err(map_error(&answer, "authentication"));
        }
        let mut findings = vec![format!(
            "{} accepts the credentials",
            self.settings.base_url
        )];
        if let (Some(remaining), Some(limit)) = (rate_budget.remaining, rate_budget.limit) {
            findings.push(format!(
                "API rate budget: {remaining} of {limit} requests left"
            ));
        }
        Ok(findings)
    }

    /// The workflows with a `workflow_dispatch` trigger (active ones; with
    /// `all`, disabled ones too) in the repositories of `discover_repos`, or
    /// those the credentials see. See the `discover` module for the calls.
    async fn discover(&self, options: &DiscoverOptions) -> Result<Vec<Discovered>, EngineError> {
        discover::discover(&self.client, &self.settings, options).await
    }
}

/// A tool bound to a workflow. Made by [`GithubEngine`]'s [`Engine::bind`].
#[derive(Debug)]
pub struct GithubPipeline {
    client: Client,
    target: BoundTarget,
    input_schema: Value,
    low_budget: Option<u64>,
    lookup_delay: Duration,
}

/// Which run a [`NativeRef`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunKey {
    /// A run by id: `owner/repo/12345`.
    Id(u64),
    /// A run dispatched without run details and not yet seen:
    /// `owner/repo/~run-name~since`, found by listing the workflow's dispatch runs
    /// created since `since` (seconds since the epoch) whose title carries the name.
    Name {
        /// The run name (the correlation input's value).
        run_name: String,
        /// The earliest creation time to look at.
        since: u64,
    },
}

/// A parsed [`NativeRef`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunRef {
    /// The repository owner.
    pub owner: String,
    /// The repository.
    pub repo: String,
    /// The run.
    pub key: RunKey,
}

impl RunRef {
    /// Writes the reference.
    #[must_use]
    pub fn encode(&self) -> NativeRef {
        match &self.key {
            RunKey::Id(id) => format!("{}/{}/{id}", self.owner, self.repo),
            RunKey::Name { run_name, since } => {
                format!("{}/{}/~{run_name}~{since}", self.owner, self.repo)
            }
        }
    }

    /// Reads a reference written by [`RunRef::encode`].
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] for anything else.
    pub fn parse(native: &str) -> Result<Self, EngineError> {
        let mut parts = native.splitn(3, '/');
        let (Some(owner), Some(repo), Some(run)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(EngineError::NotFound);
        };
        if owner.is_empty() || repo.is_empty() {
            return Err(EngineError::NotFound);
        }
        let key = if let Some(rest) = run.strip_prefix('~') {
            let (name, since) = rest.split_once('~').ok_or(EngineError::NotFound)?;
            RunKey::Name {
                run_name: name.to_owned(),
                since: since.parse().map_err(|_| EngineError::NotFound)?,
            }
        } else {
            RunKey::Id(run.parse().map_err(|_| EngineError::NotFound)?)
        };
        Ok(Self {
            owner: owner.to_owned(),
            repo: repo.to_owned(),
            key,
        })
    }
}

#[async_trait]
impl Pipeline for GithubPipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: self.target.approval.is_some(),
            // With the correlation input on every dispatch, a start first looks
            // for a run of the same name (and compares the inputs' tag).
            idempotent_start: self.target.correlate == config::Correlate::Always,
            // A run can be found by its name only when every dispatch carries the
            // correlation input.
            locate: self.target.correlate == config::Correlate::Always,
            logs: true,
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        let t = &self.target;
        let mut inputs = translate::dispatch_inputs(
            &request.arguments,
            &t.correlation_input,
            t.trace_input.as_deref(),
        )?;
        // The correlation value carries a tag of the inputs after the run name,
        // so a retry can tell the same arguments from other ones (GitHub does
        // not return a run's inputs). The trace input is added after it: a
        // retry under another trace is the same start.
        let tag = translate::inputs_tag(&inputs);
        if let (Some(name), Some(trace)) = (&t.trace_input, &request.trace) {
            inputs.insert(name.clone(), Value::String(trace.traceparent().to_owned()));
        }
        let correlation = Value::String(format!("{}.{tag}", request.run_name));
        let mut rate_budget = RateBudget::default();
        if t.correlate == Correlate::Always {
            // A retried name (a client's operation token) finds its run instead
            // of dispatching again; other arguments under it are a conflict.
            let existing = self
                .list_find(&t.owner, &t.repo, &request.run_name, None, &mut rate_budget)
                .await?;
            if let Some(run) = existing {
                return match translate::title_tag(&run, &request.run_name) {
                    Some(found) if found != tag => Err(EngineError::Conflict {
                        message: "a run with this name was dispatched with other inputs".into(),
                    }),
                    _ => Ok(self.reference(RunKey::Id(run.id))),
                };
            }
            inputs.insert(t.correlation_input.clone(), correlation.clone());
        }
        let since = now_epoch().saturating_sub(SKEW);
        let answer = self.dispatch(&inputs, true, &mut rate_budget).await?;
        match answer.status {
            200 => {
                let details: DispatchResponse = answer.json()?;
                Ok(self.reference(RunKey::Id(details.workflow_run_id)))
            }
            204 if t.correlate == Correlate::Always => {
                self.find_dispatched(&request.run_name, since, &mut rate_budget)
                    .await
            }
            204 => Err(EngineError::internal(
                "GitHub dispatched the run but returned no run details; set correlate = \"always\" on this tool",
            )),
            400 | 422
                if answer.status == 400 || api::message(&answer).contains("return_run_details") =>
            {
                // An older server that does not know return_run_details: dispatch
                // again without it, with the correlation input, and look the run up.
                tracing::info!("dispatch without run details (older server)");
                inputs.insert(t.correlation_input.clone(), correlation);
                let again = self.dispatch(&inputs, false, &mut rate_budget).await?;
                if !again.ok() {
                    return Err(self.dispatch_refused(&again));
                }
                self.find_dispatched(&request.run_name, since, &mut rate_budget)
                    .await
            }
            _ => Err(self.dispatch_refused(&answer)),
        }
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let r = self.own_ref(run)?;
        let mut rate_budget = RateBudget::default();
        match &r.key {
            RunKey::Id(id) => {
                let answer = self
                    .client
                    .call(
                        Method::GET,
                        &self.run_path(&r, *id),
                        None,
                        "actions: read",
                        &mut rate_budget,
                    )
                    .await?;
                let tag = etag(&answer);
                self.read_run(&r, answer.json()?, tag, rate_budget).await
            }
            RunKey::Name { .. } => match self.fetch(&r, &mut rate_budget).await? {
                Err(state) => {
                    let mut snapshot = Snapshot::new(state);
                    snapshot.poll_hint = poll_hint(&rate_budget, now_epoch(), 1, self.low_budget);
                    Ok(snapshot)
                }
                Ok(wr) => self.read_run(&r, wr, None, rate_budget).await,
            },
        }
    }

    /// Waits `wait`, then asks GitHub whether the run (and, while it runs,
    /// its jobs) changed since `last`, with the `ETag`s `last` carries
    /// (`If-None-Match`): a 304 spends no rate budget and returns `last` as
    /// it was. Anything changed is read in full, as [`Pipeline::read`] does.
    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        tokio::time::sleep(wait).await;
        let r = self.own_ref(run)?;
        let (RunKey::Id(id), Some((run_tag, jobs_tag))) = (
            &r.key,
            last.revision.as_deref().and_then(|t| t.split_once('\n')),
        ) else {
            return self.read(run).await;
        };
        let mut rate_budget = RateBudget::default();
        let path = self.run_path(&r, *id);
        let answer = self
            .client
            .get_if_changed(&path, run_tag, &mut rate_budget)
            .await?;
        match answer.status {
            304 => {}
            200 => {
                let tag = etag(&answer);
                return self.read_run(&r, answer.json()?, tag, rate_budget).await;
            }
            _ => return Err(map_error(&answer, "actions: read")),
        }
        if !jobs_tag.is_empty() {
            let jobs = self
                .client
                .get_if_changed(
                    &format!("{path}/jobs?per_page=100"),
                    jobs_tag,
                    &mut rate_budget,
                )
                .await?;
            match jobs.status {
                304 => {}
                200 => return self.read(run).await,
                _ => return Err(map_error(&jobs, "actions: read")),
            }
        }
        let mut same = last.clone();
        same.poll_hint = poll_hint(&rate_budget, now_epoch(), 1, self.low_budget);
        Ok(same)
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let mut pos = Pos::parse(cursor)?;
        let r = self.own_ref(run)?;
        let mut rate_budget = RateBudget::default();
        let id = match self.listed_id(&r, &mut rate_budget).await? {
            Ok(id) => id,
            // Not listed yet: nothing to read (or never will be).
            Err(state) => {
                return Ok(LogPage {
                    lines: Vec::new(),
                    cursor: pos.cursor(),
                    complete: state.is_terminal(),
                })
            }
        };
        let base = self.run_path(&r, id);
        let mut list: translate::JobList = self
            .get_json(
                &format!("{base}/jobs?per_page=100"),
                "actions: read",
                &mut rate_budget,
            )
            .await?;
        list.jobs.sort_by_key(|j| j.id);
        let mut lines = Vec::new();
        let mut room = MAX_PAGE_BYTES;
        let mut visited = 0;
        let mut every_job_read = false;
        while lines.len() < limit {
            let Some((job, steps, offset)) = logs::current(&list.jobs, pos) else {
                every_job_read = true;
                break;
            };
            visited += 1;
            if visited > MAX_JOBS_PER_PAGE {
                break;
            }
            let events = logs::step_events(job);
            let take = events.len().saturating_sub(steps).min(limit - lines.len());
            lines.extend(
                events
                    .iter()
                    .skip(steps)
                    .take(take)
                    .map(|e| LogLine::new(job.name.as_str(), e)),
            );
            let steps = steps + take;
            pos = Pos::In {
                job: job.id,
                steps,
                offset,
            };
            if steps < events.len() || !logs::finished(job) {
                break;
            }
            if !logs::has_log(job) {
                pos = Pos::After { job: job.id };
                continue;
            }
            if lines.len() >= limit || room == 0 {
                break;
            }
            let (next, go_on) = self
                .job_log_piece(&r, job, (steps, offset), &mut room, limit, &mut lines)
                .await?;
            pos = next;
            if !go_on {
                break;
            }
        }
        // Every listed job was read: nothing more comes once the run has ended.
        let complete = every_job_read && {
            let wr: WorkflowRun = self
                .get_json(&base, "actions: read", &mut rate_budget)
                .await?;
            wr.status.as_deref() == Some("completed")
        };
        Ok(LogPage {
            lines,
            cursor: pos.cursor(),
            complete,
        })
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let r = self.own_ref(run)?;
        let mut rate_budget = RateBudget::default();
        let id = self.resolve_id(&r, &mut rate_budget).await?;
        let answer = self
            .client
            .send(
                Method::POST,
                &format!("{}/cancel", self.run_path(&r, id)),
                None,
                &mut rate_budget,
            )
            .await?;
        if answer.ok() {
            return Ok(());
        }
        if answer.status == 409 {
            // GitHub refuses to cancel a run that already finished: the next read
            // reports its real final state. Any other 409 is a real conflict.
            let current: WorkflowRun = self
                .get_json(&self.run_path(&r, id), "actions: read", &mut rate_budget)
                .await?;
            if current.status.as_deref() == Some("completed") {
                return Ok(());
            }
            return Err(EngineError::Conflict {
                message: format!(
                    "GitHub cannot cancel the run now: {}",
                    api::message(&answer)
                ),
            });
        }
        Err(map_error(&answer, "actions: write"))
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        if self.target.approval.is_none() {
            return Err(EngineError::unsupported("answer input"));
        }
        let body = translate::review_body(key, response)?;
        let r = self.own_ref(run)?;
        let mut rate_budget = RateBudget::default();
        let id = self.resolve_id(&r, &mut rate_budget).await?;
        let answer = self
            .client
            .send(
                Method::POST,
                &format!("{}/pending_deployments", self.run_path(&r, id)),
                Some(&body),
                &mut rate_budget,
            )
            .await?;
        match answer.status {
            s if (200..300).contains(&s) => Ok(()),
            422 | 409 => Err(EngineError::Conflict {
                message: format!(
                    "the deployment review is no longer outstanding: {}",
                    api::message(&answer)
                ),
            }),
            _ => Err(map_error(
                &answer,
                "deployments: write (and being a required reviewer of the environment)",
            )),
        }
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        let mut rate_budget = RateBudget::default();
        let found = self
            .list_find(
                &self.target.owner,
                &self.target.repo,
                run_name,
                None,
                &mut rate_budget,
            )
            .await?;
        Ok(found.map(|run| self.reference(RunKey::Id(run.id))))
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let t = &self.target;
        let mut rate_budget = RateBudget::default();
        let wf: Value = self
            .get_json(&self.workflow_path(), "actions: read", &mut rate_budget)
            .await
            .map_err(|e| match e {
                EngineError::NotFound => EngineError::InvalidInput {
                    message: format!(
                        "workflow {} not found in {}/{} (or the token cannot see it)",
                        t.workflow, t.owner, t.repo
                    ),
                },
                other => other,
            })?;
        let path = wf.get("path").and_then(Value::as_str).unwrap_or_default();
        let state = wf.get("state").and_then(Value::as_str).unwrap_or("unknown");
        let mut findings = vec![format!(
            "workflow {:?} ({path}) is {state}",
            wf.get("name").and_then(Value::as_str).unwrap_or("?")
        )];
        if state != "active" {
            findings.push("the workflow is not active: dispatches will be refused".to_owned());
        }
        let contents: Value = self
            .get_json(
                &format!(
                    "{}/contents/{}?ref={}",
                    self.own_repo(),
                    percent_encode_path(path),
                    percent_encode(&t.git_ref)
                ),
                "contents: read",
                &mut rate_budget,
            )
            .await
            .map_err(|e| match e {
                EngineError::NotFound => EngineError::InvalidInput {
                    message: format!("{path} not found at ref {:?}", t.git_ref),
                },
                other => other,
            })?;
        let encoded: String = contents
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let yaml = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| EngineError::internal("the workflow file is not base64 UTF-8 text"))?;
        let declared = workflow::declared_inputs(&yaml).map_err(|e| EngineError::InvalidInput {
            message: e.to_string(),
        })?;
        let names: Vec<&str> = declared.keys().map(String::as_str).collect();
        findings.push(format!("declared inputs: {names:?}"));
        let corr = &t.correlation_input;
        if let Some(trace) = &t.trace_input {
            if !declared.contains_key(trace) {
                return Err(EngineError::InvalidInput {
                    message: format!(
                        "the workflow does not declare the trace input {trace:?} (target.trace_input); \
                         GitHub would refuse every dispatch that carries it"
                    ),
                });
            }
        }
        let mut reserved = vec![corr.as_str()];
        reserved.extend(t.trace_input.as_deref());
        let in_run_name = yaml.contains(&format!("inputs.{corr}"));
        if !declared.contains_key(corr) || !in_run_name {
            let message = format!(
                "the workflow does not declare the input {corr:?} and use it in its run-name \
                 (run-name: \"deploy ${{{{ inputs.{corr} }}}}\"): runs cannot be found by name \
                 on servers without dispatch run details, nor by client-token retries"
            );
            if t.correlate == Correlate::Always {
                return Err(EngineError::InvalidInput { message });
            }
            findings.push(message);
        }
        let suggested = workflow::suggest_input_schema(&yaml, &reserved).map_err(|e| {
            EngineError::InvalidInput {
                message: e.to_string(),
            }
        })?;
        let mismatches = workflow::compare_inputs(&self.input_schema, &yaml, &reserved);
        if !mismatches.is_empty() {
            return Err(EngineError::InvalidInput {
                message: format!(
                    "the tool's input_schema does not match the workflow's inputs: {}; suggested input_schema: {suggested}",
                    mismatches.join("; ")
                ),
            });
        }
        findings.push("the tool's input_schema matches the workflow's inputs".to_owned());
        Ok(findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::iso;

    #[test]
    fn references_round_trip() {
        for r in [
            RunRef {
                owner: "octo-org".into(),
                repo: "octo.repo".into(),
                key: RunKey::Id(30_433_642),
            },
            RunRef {
                owner: "o".into(),
                repo: "r".into(),
                key: RunKey::Name {
                    run_name: "tg-abc".into(),
                    since: 1_700_000_000,
                },
            },
        ] {
            let text = r.encode();
            assert!(text.len() < 300);
            assert_eq!(RunRef::parse(&text).unwrap(), r);
        }
        assert_eq!(
            RunRef::parse("o/r/30433642").unwrap().key,
            RunKey::Id(30_433_642)
        );
        for bad in ["", "o/r", "o/r/x", "/r/1", "o/r/~n", "o/r/~n~x"] {
            assert!(
                matches!(RunRef::parse(bad), Err(EngineError::NotFound)),
                "{bad}"
            );
        }
    }

    #[test]
    fn search_dates() {
        assert_eq!(iso(1_579_721_588), "2020-01-22T19:33:08Z");
    }
}
