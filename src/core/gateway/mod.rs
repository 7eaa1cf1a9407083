//! The core every dialect translates to: the tool catalog, argument checks,
//! sealed task handles, and the four things one can do with a run — start, read,
//! cancel, answer — each one conversation with the engine.
//!
//! Nothing here is stored between requests: a task is its handle plus whatever
//! the engine says about the native run right now.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use taskgate_engine::{
    CallMeter, Capabilities, Deadlines, EngineError, InputRequest, InputResponse, Pipeline,
    RetryCancel, RunState, SingleFlight, Snapshot, StartRequest, ToolDecl,
};

use super::access::{AccessPolicy, Caller, Decision};
use super::audit::{self, Action, Outcome};
use super::config::{
    ConfigFileError, ConfigProblem, FileConfig, ServerConfig, ToolConfig, ToolMode,
};
use super::engines;
use super::handle::{
    caller_tag, random_run_name, short, unix_ms, Dialect, Keyring, Purpose, TaskClaims,
};
use super::slots::{Full, WaitSlot, WaitSlots};
use super::validate;

/// What the core refuses or fails with. Dialects turn these into their wire
/// errors (one mapping, in `rpc.rs`); the core knows nothing of JSON-RPC.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// No tool has this name.
    #[error("Unknown tool: {0}")]
    UnknownTool(String),
    /// The arguments fail the tool's input schema (or name arguments it does not
    /// declare); nothing reached the engine.
    #[error("Invalid arguments for tool {tool}: {}", problems.join("; "))]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// One line per failing field.
        problems: Vec<String>,
    },
    /// The handle does not open (forged, altered, foreign, expired, unknown) or
    /// the engine no longer has the run: alike for every reason.
    #[error("not found")]
    NotFound,
    /// The tool's engine cannot stop a run.
    #[error("Tool {0} cannot be cancelled: its engine has no way to stop a run")]
    NotCancellable(String),
    /// An answer to an input request is malformed or does not fit its schema.
    #[error("{0}")]
    InvalidAnswer(String),
    /// A bound on blocking requests is reached; retry later.
    #[error("taskgate is busy: {0}; retry later")]
    Busy(Full),
    /// A per-caller quota is used up; retry later. Nothing reached the engine.
    #[error("{0}")]
    OverQuota(super::quota::Exceeded),
    /// The engine said something the client must hear.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The caller's credentials lack scopes the tool's access rule asks for; a
    /// token with them would be admitted (step-up). Nothing reached the engine.
    #[error("Tool {tool} needs the scope {}", scopes.join(" "))]
    InsufficientScope {
        /// The tool.
        tool: String,
        /// The scopes that would admit the caller.
        scopes: Vec<String>,
    },
    /// The tool's access rule does not admit the caller to cancel its runs, or
    /// its `answer_access` to answer them. Nothing reached the engine.
    #[error("Not allowed to act on runs of tool {0}")]
    Forbidden(String),
    /// A `taskgate_logs` cursor does not open for this caller and run (forged,
    /// altered, another run's). Nothing reached the engine.
    #[error("{0}")]
    InvalidCursor(String),
    /// The tool's engine keeps no logs taskgate can read.
    #[error("Tool {0} has no logs taskgate can read: its engine does not keep them")]
    NoLogs(String),
    /// An answer to an approval gate that this caller may not give here: inside
    /// the call that started the run, or (four eyes) by the run's starter.
    /// Nothing reached the engine.
    #[error("{message}")]
    ApprovalRefused {
        /// The audit reason word (`approval_in_call`, `four_eyes`).
        reason: &'static str,
        /// What the client is told.
        message: String,
    },
}

/// The prefix of approval tickets.
pub const TICKET_PREFIX: &str = "tg-ap.";

/// What an approval ticket holds: one approval question of one run, and the
/// caller who started the run. Sealed for no caller ([`Purpose::Approval`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketClaims {
    /// Tool name.
    #[serde(rename = "t")]
    pub tool: String,
    /// The engine's native reference.
    #[serde(rename = "r")]
    pub native: String,
    /// The input request's key.
    #[serde(rename = "k")]
    pub key: String,
    /// The caller who started the run.
    #[serde(rename = "s")]
    pub starter: String,
    /// When the ticket was issued, milliseconds since the Unix epoch.
    #[serde(rename = "c")]
    pub created_ms: u64,
    /// How long it stays valid (the tool's `keep_alive`), milliseconds.
    #[serde(rename = "l")]
    pub ttl_ms: u64,
}

/// Who answers a run's input requests, and how they reached them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answering<'a> {
    /// Through the run's task handle (or an input-request id sealed for the same
    /// caller), which only the caller who started the run opens: the starter,
    /// after the call that started the run.
    Starter,
    /// The starter, inside the `tools/call` that started the run (MRTR
    /// `inputResponses`, a call that waits): forms are answered, approvals
    /// refused.
    StarterInCall,
    /// Any caller, with an approval ticket for the question `key` of a run
    /// that `starter` started.
    Ticket {
        /// The caller who started the run (from the ticket).
        starter: &'a str,
        /// The one question the ticket answers.
        key: &'a str,
    },
}

/// A configured tool, bound to its engine.
pub struct Tool {
    /// Its configuration.
    pub config: ToolConfig,
    validator: jsonschema::Validator,
    /// The engine pipeline, wrapped in the single-flight and deadline layers.
    pub pipeline: Arc<dyn Pipeline>,
    /// What the pipeline can do.
    pub capabilities: Capabilities,
}

impl Tool {
    /// The tool's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// True when the tool runs long (its calls can become tasks).
    #[must_use]
    pub fn is_long_running(&self) -> bool {
        self.config.mode != ToolMode::Sync
    }

    /// True when the input request `key` is an approval gate: the engine says
    /// so, or the tool's `approval_inputs` names it (or is `*`).
    #[must_use]
    pub fn is_approval(&self, key: &str, request: &InputRequest) -> bool {
        request.approval
            || self
                .config
                .approval_inputs
                .iter()
                .any(|k| k == "*" || k == key)
    }
}

/// The server's core.
pub struct Gateway {
    /// Server settings.
    pub server: ServerConfig,
    /// The sealing keys.
    pub keys: Keyring,
    tools: Vec<Tool>,
    /// Counts engine calls (shown on `/metrics`).
    pub meter: Arc<CallMeter>,
    /// Every Prometheus series of this server (`/metrics`).
    pub metrics: super::metrics::Metrics,
    /// Static bearer tokens: token → caller.
    pub bearer: Vec<(String, Caller)>,
    /// Who may use which tool.
    pub access: AccessPolicy,
    /// OAuth 2.1 resource-server settings (`[auth.oauth]`), for the front door.
    pub oauth: Option<super::validate::OAuthSettings>,
    /// The stdio caller's scopes and groups (`[auth.local]`).
    pub local: super::config::LocalCallerConfig,
    /// The limit on failed authentications per peer (`[auth.failures]`).
    pub failures: super::config::FailureLimitConfig,
    /// The engine instances by name (for `check-config` probes).
    pub engines: BTreeMap<String, Arc<dyn taskgate_engine::Engine>>,
    waits: Arc<WaitSlots>,
    /// The watches of open listen streams (one per watched run).
    pub watches: Arc<super::watch::Watches>,
    /// The per-caller quotas (starts, look-ups, wait reads, watched runs).
    pub quotas: Arc<super::quota::Quotas>,
}

/// A started run: its claims and the sealed handle the client gets.
#[derive(Debug, Clone)]
pub struct Started {
    /// What the handle holds.
    pub claims: TaskClaims,
    /// The sealed handle.
    pub handle: String,
}

impl Gateway {
    /// Validates the configuration, builds each engine and binds each tool. No
    /// engine is called. Every problem found is reported, not just the first:
    /// the checks of keys, callers and tools, each engine's settings and each
    /// tool's target all run before the error is returned.
    ///
    /// # Errors
    ///
    /// A [`ConfigFileError`] listing every problem, each with its key path.
    pub async fn build(cfg: FileConfig, file: &Path) -> Result<Self, ConfigFileError> {
        let mut problems = Vec::new();
        let checked = validate::check(&cfg, &mut problems);

        let mut built = BTreeMap::new();
        for (name, settings) in &cfg.engines {
            match engines::build(settings.clone()).await {
                Ok(engine) => {
                    built.insert(name.clone(), engine);
                }
                Err(e) => problems.push(ConfigProblem::new(
                    format!("engines.{name}.{}", e.key)
                        .trim_end_matches('.')
                        .to_owned(),
                    e.message,
                )),
            }
        }

        let access = AccessPolicy::from_config(&cfg);
        let local = cfg.auth.local.clone();
        let meter = Arc::new(CallMeter::default());
        let mut tools = Vec::new();
        for (i, (mut tool, validator)) in cfg.tools.into_iter().zip(checked.validators).enumerate()
        {
            let (Some(validator), Some(engine)) = (validator, built.get(&tool.engine)) else {
                continue;
            };
            let decl = ToolDecl {
                name: tool.name.clone(),
                target: tool.target.clone(),
                input_schema: tool.input_schema.clone(),
                keep_alive: Some(tool.keep_alive),
            };
            let inner = match engine.bind(&decl) {
                Ok(inner) => inner,
                Err(e) => {
                    problems.push(ConfigProblem::new(
                        format!("tools[{i}].{}", e.key),
                        e.message,
                    ));
                    continue;
                }
            };
            let capabilities = inner.capabilities();
            if let Some(max) = capabilities.max_retention {
                if tool.keep_alive > max {
                    tracing::warn!(tool = %tool.name, "keep_alive is longer than the engine keeps runs; using {}", humantime::format_duration(max));
                    tool.keep_alive = max;
                }
            }
            // Every call under a deadline and counted; concurrent reads of one
            // run share one call.
            // Each request's calls count against server.max_engine_calls.
            let pipeline: Arc<dyn Pipeline> = Arc::new(super::budget::Budgeted::new(Arc::new(
                SingleFlight::new(Arc::new(RetryCancel::new(
                    // A cancel that met a retryable error is sent again, each
                    // attempt under its own deadline, for up to one more call
                    // timeout: a cancel notification has no reply to carry the error.
                    Arc::new(Deadlines::new(
                        inner,
                        cfg.server.call_timeout,
                        meter.for_tool(&tool.engine, &tool.name),
                    )),
                    cfg.server.call_timeout,
                ))),
            )));
            tools.push(Tool {
                config: tool,
                validator,
                pipeline,
                capabilities,
            });
        }

        match checked.keys {
            Some(keys) if problems.is_empty() => Ok(Self {
                waits: Arc::new(WaitSlots::new(
                    cfg.server.max_waits,
                    cfg.server.max_waits_per_caller,
                )),
                watches: Arc::default(),
                quotas: Arc::new(super::quota::Quotas::new(&cfg.server)),
                server: cfg.server,
                keys,
                tools,
                metrics: super::metrics::Metrics::new(&meter),
                meter,
                bearer: checked.bearer,
                access,
                local,
                oauth: checked.oauth,
                failures: cfg.auth.failures.clone(),
                engines: built,
            }),
            _ => Err(ConfigFileError {
                file: file.display().to_string(),
                problems,
            }),
        }
    }

    /// Every tool, in config order.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tool called `name`.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownTool`].
    pub fn tool(&self, name: &str) -> Result<&Tool, CoreError> {
        self.tools
            .iter()
            .find(|t| t.config.name == name)
            .ok_or_else(|| CoreError::UnknownTool(name.to_owned()))
    }

    /// Checks `arguments` against the tool's input schema. A top-level argument
    /// the schema does not declare is refused unless the schema's root sets
    /// `additionalProperties` or `unevaluatedProperties` (see
    /// [`validate::declared_only`]).
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidArguments`] naming each failing field (and each
    /// undeclared argument) and the reason. Nothing reaches the engine.
    pub fn check_arguments(
        &self,
        tool: &Tool,
        arguments: Option<&Value>,
    ) -> Result<Value, CoreError> {
        let args = match arguments {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v.clone(),
        };
        let problems: Vec<String> = tool
            .validator
            .iter_errors(&args)
            .map(|e| {
                let path = e.instance_path.to_string();
                if let (
                    true,
                    jsonschema::error::ValidationErrorKind::UnevaluatedProperties { unexpected }
                    | jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected },
                ) = (path.is_empty(), &e.kind)
                {
                    let names: Vec<String> = unexpected.iter().map(|n| format!("{n:?}")).collect();
                    format!(
                        "undeclared arguments {}: the tool's input schema does not declare them",
                        names.join(", ")
                    )
                } else if path.is_empty() {
                    format!("arguments: {e}")
                } else {
                    format!("arguments{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(args)
        } else {
            Err(CoreError::InvalidArguments {
                tool: tool.name().to_owned(),
                problems,
            })
        }
    }

    /// Starts a run of `tool` for `caller`, returning once the engine has accepted
    /// it. `run_name` is derived from a client token when there is one; otherwise
    /// a random name is used.
    ///
    /// # Errors
    ///
    /// [`CoreError::Engine`].
    pub async fn start(
        &self,
        caller: &Caller,
        tool: &Tool,
        arguments: Value,
        dialect: Dialect,
        run_name: Option<String>,
    ) -> Result<Started, CoreError> {
        self.start_retained(
            caller,
            tool,
            arguments,
            dialect,
            run_name,
            tool.config.keep_alive,
        )
        .await
    }

    /// As [`Gateway::start`], asking the engine to keep the run for `retention`
    /// after it ends (SEP-1391 keeps runs a little past their `keepAlive`, so a
    /// late status request hears "expired" rather than "not found").
    ///
    /// # Errors
    ///
    /// [`CoreError::Engine`]; the refusals of [`Gateway::authorize`].
    pub async fn start_retained(
        &self,
        caller: &Caller,
        tool: &Tool,
        arguments: Value,
        dialect: Dialect,
        run_name: Option<String>,
        retention: Duration,
    ) -> Result<Started, CoreError> {
        self.authorize(caller, tool, Action::Start, dialect, None)?;
        if let Err(over) = self.quotas.starts.take(caller.id()) {
            audit::record(
                Action::Start,
                caller.id(),
                Some(tool.name()),
                Some(dialect),
                None,
                Outcome::Refused("quota"),
            );
            return Err(CoreError::OverQuota(over));
        }
        let run_name = run_name.unwrap_or_else(random_run_name);
        let request = StartRequest {
            run_name,
            arguments,
            caller_tag: caller_tag(caller),
            keep_alive: Some(retention),
        };
        let native = match tool.pipeline.start(request).await {
            Ok(native) => native,
            Err(e) => {
                audit::record(
                    Action::Start,
                    caller,
                    Some(tool.name()),
                    Some(dialect),
                    None,
                    Outcome::Failed,
                );
                return Err(e.into());
            }
        };
        audit::record(
            Action::Start,
            caller,
            Some(tool.name()),
            Some(dialect),
            Some(&audit::run_ref(tool.name(), &native)),
            Outcome::Ok,
        );
        let claims = TaskClaims {
            dialect,
            tool: tool.config.name.clone(),
            native,
            created_ms: unix_ms(SystemTime::now()),
            ttl_ms: Some(tool.config.keep_alive.as_millis() as u64),
        };
        let handle = self.keys.seal(Purpose::Task, caller, &claims);
        tracing::info!(tool = %tool.name(), task = %short(&handle), "run started");
        Ok(Started { claims, handle })
    }

    /// Opens a task handle presented by `caller` in `dialect`.
    ///
    /// # Errors
    ///
    /// [`CoreError::NotFound`], alike for every reason.
    pub fn open(
        &self,
        caller: &str,
        dialect: Dialect,
        handle: &str,
    ) -> Result<(TaskClaims, &Tool), CoreError> {
        use super::metrics::Refusal;
        let claims = self.keys.open_task(caller, handle);
        let refuse = |why: Refusal| {
            self.metrics.refused(why);
            audit::record(
                Action::Read,
                caller,
                None,
                Some(dialect),
                None,
                Outcome::Refused(why.label()),
            );
            CoreError::NotFound
        };
        let c = claims.ok_or_else(|| refuse(Refusal::Unopenable))?;
        if c.dialect != dialect {
            return Err(refuse(Refusal::WrongDialect));
        }
        if c.expired_at(SystemTime::now()) {
            return Err(refuse(Refusal::Expired));
        }
        let tool = self
            .tools
            .iter()
            .find(|t| t.config.name == c.tool)
            .ok_or_else(|| refuse(Refusal::UnknownTool))?;
        audit::record(
            Action::Read,
            caller,
            Some(tool.name()),
            Some(dialect),
            Some(&audit::run_ref(tool.name(), &c.native)),
            Outcome::Ok,
        );
        Ok((c, tool))
    }

    /// Reads the run once.
    ///
    /// # Errors
    ///
    /// [`CoreError::NotFound`] when the engine no longer has it; engine errors.
    pub async fn read(&self, tool: &Tool, native: &str) -> Result<Snapshot, CoreError> {
        tool.pipeline
            .read(&native.to_owned())
            .await
            .map_err(not_found)
    }

    /// Blocking requests waiting for runs right now.
    #[must_use]
    pub fn waits_in_flight(&self) -> usize {
        self.waits.held()
    }

    /// Takes a slot for a request of `caller` that is going to wait for a run;
    /// hold it for the life of the request.
    ///
    /// # Errors
    ///
    /// [`CoreError::Busy`] when `server.max_waits` or
    /// `server.max_waits_per_caller` is reached.
    pub fn hold_wait(&self, caller: &str) -> Result<WaitSlot, CoreError> {
        self.waits.take(caller).map_err(CoreError::Busy)
    }

    /// Takes `count` of the runs `caller`'s listen streams may watch at once
    /// (`server.max_watched_runs_per_caller`); hold it while they are watched.
    ///
    /// # Errors
    ///
    /// [`CoreError::OverQuota`] when the caller would watch more.
    pub fn hold_watched(
        &self,
        caller: &str,
        count: usize,
    ) -> Result<super::quota::Holding, CoreError> {
        self.quotas
            .watched
            .take(caller, count)
            .map_err(CoreError::OverQuota)
    }

    /// Counts one SEP-1391 token look-up of `caller`
    /// (`server.max_lookups_per_minute`).
    ///
    /// # Errors
    ///
    /// [`CoreError::OverQuota`] past the caller's rate.
    pub fn count_lookup(&self, caller: &str) -> Result<(), CoreError> {
        self.quotas
            .lookups
            .take(caller)
            .map_err(CoreError::OverQuota)
    }

    /// Requests waiting for runs right now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waits.held()
    }

    /// Waits, within this request, until the run is terminal or asks for input,
    /// or `limit` has passed; re-reads the engine only while waiting. `on_change`
    /// sees every snapshot (for progress notifications).
    ///
    /// Its reads do not count against `server.max_engine_calls` (`max_wait` and
    /// `max_waits` bound them).
    ///
    /// # Errors
    ///
    /// As [`Gateway::read`].
    pub async fn wait(
        &self,
        tool: &Tool,
        native: &str,
        limit: Duration,
        on_change: impl FnMut(&Snapshot),
    ) -> Result<Snapshot, CoreError> {
        super::budget::exempt(self.wait_unbudgeted(tool, native, limit, on_change)).await
    }

    async fn wait_unbudgeted(
        &self,
        tool: &Tool,
        native: &str,
        limit: Duration,
        mut on_change: impl FnMut(&Snapshot),
    ) -> Result<Snapshot, CoreError> {
        let deadline = Instant::now() + limit;
        let mut snapshot = self.read(tool, native).await?;
        loop {
            on_change(&snapshot);
            let settled = snapshot.state.is_terminal()
                || matches!(snapshot.state, RunState::InputRequired { .. });
            let now = Instant::now();
            if settled || now >= deadline {
                return Ok(snapshot);
            }
            let step = tool.config.poll_interval.min(deadline - now);
            snapshot = tool
                .pipeline
                .wait_for_change(&native.to_owned(), &snapshot, step)
                .await
                .map_err(not_found)?;
        }
    }

    /// Asks the engine to stop the run. A run that already finished is left as it is.
    ///
    /// # Errors
    ///
    /// As [`Gateway::read`]; [`CoreError::NotCancellable`] when the engine cannot
    /// stop runs; the refusals of [`Gateway::authorize`] (before any engine call).
    pub async fn cancel(
        &self,
        caller: &Caller,
        dialect: Dialect,
        tool: &Tool,
        native: &str,
    ) -> Result<Snapshot, CoreError> {
        self.authorize(caller, tool, Action::Cancel, dialect, Some(native))?;
        let outcome = self.cancel_authorized(tool, native).await;
        audit_outcome(Action::Cancel, caller, dialect, tool, native, &outcome);
        outcome
    }

    async fn cancel_authorized(&self, tool: &Tool, native: &str) -> Result<Snapshot, CoreError> {
        let snapshot = self.read(tool, native).await?;
        if snapshot.state.is_terminal() {
            return Ok(snapshot);
        }
        if !tool.capabilities.cancel {
            return Err(CoreError::NotCancellable(tool.name().to_owned()));
        }
        match tool.pipeline.cancel(&native.to_owned()).await {
            Ok(()) | Err(EngineError::Conflict { .. }) => {}
            Err(e) => return Err(not_found(e)),
        }
        tracing::info!(tool = %tool.name(), "run cancel requested");
        Ok(snapshot)
    }

    /// Forwards answers to outstanding input requests. Answers to keys that are
    /// not outstanding are dropped; an answer whose content does not fit the
    /// request's schema is refused before it reaches the engine, and so is an
    /// answer to an approval gate given inside the call that started the run,
    /// or (the tool's `four_eyes`) by the caller who started it. `how` says who
    /// answers: the starter through its task handle, or anyone with a ticket.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidAnswer`] for malformed or non-conforming answers;
    /// [`CoreError::ApprovalRefused`]; engine errors; the refusals of the
    /// tool's `answer_access` (before any engine call).
    pub async fn answer(
        &self,
        caller: &Caller,
        dialect: Dialect,
        tool: &Tool,
        native: &str,
        responses: &Map<String, Value>,
        how: Answering<'_>,
    ) -> Result<usize, CoreError> {
        let starter = match how {
            Answering::Ticket { starter, .. } => starter,
            Answering::Starter | Answering::StarterInCall => caller.id(),
        };
        let run = audit::run_ref(tool.name(), native);
        let event = |approval: bool, outcome: Outcome| {
            let who = audit::Answerer {
                caller: caller.id(),
                starter,
                approval,
            };
            audit::record_answer(who, tool.name(), Some(dialect), Some(&run), outcome);
        };
        if let Some(refusal) = self.refusal(caller, tool, Action::Answer) {
            event(
                matches!(how, Answering::Ticket { .. }),
                Outcome::Refused(refusal_reason(&refusal)),
            );
            return Err(refusal);
        }
        let outcome = self
            .answer_authorized(caller, tool, native, responses, how)
            .await;
        // An answer event is written when one reached the engine, it failed, or
        // it was refused.
        match &outcome {
            Ok((0, _)) => {}
            Ok((_, approval)) => event(*approval, Outcome::Ok),
            Err(CoreError::ApprovalRefused { reason, .. }) => {
                event(true, Outcome::Refused(reason));
            }
            Err(_) => event(matches!(how, Answering::Ticket { .. }), Outcome::Failed),
        }
        outcome.map(|(n, _)| n)
    }

    /// Checks and forwards the answers; the count forwarded, and whether one of
    /// them answered an approval.
    async fn answer_authorized(
        &self,
        caller: &Caller,
        tool: &Tool,
        native: &str,
        responses: &Map<String, Value>,
        how: Answering<'_>,
    ) -> Result<(usize, bool), CoreError> {
        let snapshot = self.read(tool, native).await?;
        let RunState::InputRequired { requests, .. } = &snapshot.state else {
            return Ok((0, false));
        };
        let mut parsed = Vec::new();
        let mut approval = false;
        for (key, value) in responses {
            if let Answering::Ticket { key: only, .. } = how {
                if key != only {
                    continue;
                }
            }
            let Some(request) = requests.get(key) else {
                continue;
            };
            if tool.is_approval(key, request) {
                approval = true;
                let own = match how {
                    Answering::Ticket { starter, .. } => starter == caller.id(),
                    Answering::Starter | Answering::StarterInCall => true,
                };
                if how == Answering::StarterInCall {
                    return Err(CoreError::ApprovalRefused {
                        reason: "approval_in_call",
                        message: format!(
                            "inputResponses.{key}: an approval is not taken inside the call that \
                             started the run; answer it once the task exists (tasks/update), or \
                             have another caller allowed to approve it answer with its approval ticket"
                        ),
                    });
                }
                if own && tool.config.four_eyes {
                    return Err(CoreError::ApprovalRefused {
                        reason: "four_eyes",
                        message: format!(
                            "inputResponses.{key}: tool {} asks for four eyes: the caller who \
                             started the run may not approve it; another caller allowed to answer \
                             must, with the approval ticket",
                            tool.name()
                        ),
                    });
                }
            }
            let response: InputResponse = serde_json::from_value(value.clone()).map_err(|e| {
                CoreError::InvalidAnswer(format!(
                    "inputResponses.{key}: not an elicitation result: {e}"
                ))
            })?;
            if response.action == taskgate_engine::InputAction::Accept {
                let content = response
                    .content
                    .clone()
                    .unwrap_or(Value::Object(Map::new()));
                if let Ok(v) = jsonschema::draft202012::new(&request.requested_schema) {
                    let problems: Vec<String> = v
                        .iter_errors(&content)
                        .map(|e| format!("{}: {e}", e.instance_path))
                        .collect();
                    if !problems.is_empty() {
                        return Err(CoreError::InvalidAnswer(format!(
                            "inputResponses.{key}: the answer does not fit the requested schema: {}",
                            problems.join("; ")
                        )));
                    }
                }
            }
            parsed.push((key.clone(), response));
        }
        for (key, response) in &parsed {
            tool.pipeline
                .answer(&native.to_owned(), key, response)
                .await
                .map_err(not_found)?;
        }
        Ok((parsed.len(), approval))
    }

    /// The approval ticket of the question `key` of a run of `tool` that
    /// `starter` started: `tg-ap.` and a value sealed for no caller, valid
    /// for the tool's `keep_alive`.
    #[must_use]
    pub fn approval_ticket(&self, starter: &str, tool: &Tool, native: &str, key: &str) -> String {
        let claims = TicketClaims {
            tool: tool.name().to_owned(),
            native: native.to_owned(),
            key: key.to_owned(),
            starter: starter.to_owned(),
            created_ms: unix_ms(SystemTime::now()),
            ttl_ms: tool.config.keep_alive.as_millis() as u64,
        };
        format!(
            "{TICKET_PREFIX}{}",
            self.keys.seal(Purpose::Approval, "", &claims)
        )
    }

    /// Checks that `caller` may answer input requests of a run of `tool` (its
    /// `answer_access`), auditing a refusal.
    ///
    /// # Errors
    ///
    /// As [`Gateway::authorize`].
    pub fn authorize_answer(
        &self,
        caller: &Caller,
        tool: &Tool,
        dialect: Dialect,
        native: &str,
    ) -> Result<(), CoreError> {
        self.authorize(caller, tool, Action::Answer, dialect, Some(native))
    }

    /// Opens an approval ticket.
    ///
    /// # Errors
    ///
    /// [`CoreError::NotFound`], alike for every reason (not a ticket, altered,
    /// expired, a tool no longer configured).
    pub fn open_ticket(&self, ticket: &str) -> Result<(TicketClaims, &Tool), CoreError> {
        let claims = ticket
            .strip_prefix(TICKET_PREFIX)
            .and_then(|sealed| {
                self.keys
                    .open::<TicketClaims>(Purpose::Approval, "", sealed)
            })
            .filter(|c| unix_ms(SystemTime::now()) < c.created_ms.saturating_add(c.ttl_ms))
            .ok_or_else(|| {
                self.metrics.refused(super::metrics::Refusal::Unopenable);
                CoreError::NotFound
            })?;
        let tool = self.tool(&claims.tool).map_err(|_| CoreError::NotFound)?;
        Ok((claims, tool))
    }

    /// Answers the question an approval ticket names, as `caller`: the tool's
    /// `answer_access` must admit it and, with `four_eyes`, it must not be the
    /// caller who started the run. Answers to other keys are dropped.
    ///
    /// # Errors
    ///
    /// As [`Gateway::answer`]; [`CoreError::NotFound`] for a ticket that does
    /// not open.
    pub async fn answer_ticket(
        &self,
        caller: &Caller,
        dialect: Dialect,
        ticket: &str,
        responses: &Map<String, Value>,
    ) -> Result<usize, CoreError> {
        let (claims, tool) = self.open_ticket(ticket)?;
        let how = Answering::Ticket {
            starter: &claims.starter,
            key: &claims.key,
        };
        self.answer(caller, dialect, tool, &claims.native, responses, how)
            .await
    }
}

/// Access rules, applied by the gateway (the rules themselves are in `access.rs`).
impl Gateway {
    /// True when `caller` may see and use `tool` (it is listed for it).
    #[must_use]
    pub fn visible_to(&self, caller: &Caller, tool: &Tool) -> bool {
        self.access.decide(caller, tool.name()) == Decision::Allowed
    }

    /// The tool called `name`, for `caller` to call. A tool it may not use
    /// reads as unknown, unless scopes would let it in.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownTool`] for a tool that does not exist or that the
    /// caller may not use; [`CoreError::InsufficientScope`] when scopes would help.
    /// Both are audited as refusals.
    pub fn tool_for(
        &self,
        caller: &Caller,
        name: &str,
        dialect: Dialect,
    ) -> Result<&Tool, CoreError> {
        let tool = self.tool(name)?;
        self.authorize(caller, tool, Action::Start, dialect, None)?;
        Ok(tool)
    }

    /// Checks that `caller` may do `action` on a run of `tool`, auditing a refusal.
    ///
    /// # Errors
    ///
    /// [`CoreError::InsufficientScope`] when scopes would help; otherwise
    /// [`CoreError::UnknownTool`] for a start and [`CoreError::Forbidden`] for a
    /// cancel or an answer (the caller already knows the tool).
    pub fn authorize(
        &self,
        caller: &Caller,
        tool: &Tool,
        action: Action,
        dialect: Dialect,
        native: Option<&str>,
    ) -> Result<(), CoreError> {
        let Some(refusal) = self.refusal(caller, tool, action) else {
            return Ok(());
        };
        audit::record(
            action,
            caller.id(),
            Some(tool.name()),
            Some(dialect),
            native.map(|n| audit::run_ref(tool.name(), n)).as_deref(),
            Outcome::Refused(refusal_reason(&refusal)),
        );
        Err(refusal)
    }

    /// What the access rules say against `caller` doing `action` on a run of
    /// `tool` (an answer follows the tool's `answer_access`), if anything.
    fn refusal(&self, caller: &Caller, tool: &Tool, action: Action) -> Option<CoreError> {
        let decision = if action == Action::Answer {
            self.access.decide_answer(caller, tool.name())
        } else {
            self.access.decide(caller, tool.name())
        };
        match decision {
            Decision::Allowed => None,
            Decision::NeedsScopes(scopes) => Some(CoreError::InsufficientScope {
                tool: tool.name().to_owned(),
                scopes,
            }),
            Decision::Denied if action == Action::Start => {
                Some(CoreError::UnknownTool(tool.name().to_owned()))
            }
            Decision::Denied => Some(CoreError::Forbidden(tool.name().to_owned())),
        }
    }
}

/// The audit reason word of an access refusal.
fn refusal_reason(refusal: &CoreError) -> &'static str {
    match refusal {
        CoreError::InsufficientScope { .. } => "insufficient_scope",
        _ => "access_rule",
    }
}

/// The audit event of an action on a run that was authorized: done or failed.
fn audit_outcome<T>(
    action: Action,
    caller: &Caller,
    dialect: Dialect,
    tool: &Tool,
    native: &str,
    outcome: &Result<T, CoreError>,
) {
    let word = if outcome.is_ok() {
        Outcome::Ok
    } else {
        Outcome::Failed
    };
    let run = audit::run_ref(tool.name(), native);
    audit::record(
        action,
        caller,
        Some(tool.name()),
        Some(dialect),
        Some(&run),
        word,
    );
}

/// An engine's "no such run" is the core's [`CoreError::NotFound`].
fn not_found(e: EngineError) -> CoreError {
    match e {
        EngineError::NotFound => CoreError::NotFound,
        other => CoreError::Engine(other),
    }
}
