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

use serde_json::{Map, Value};
use taskgate_engine::{
    CallMeter, Capabilities, Deadlines, EngineError, InputResponse, Pipeline, RunState, Snapshot,
    StartRequest, ToolDecl,
};

use crate::config::{ConfigFileError, FileConfig, ServerConfig, ToolConfig, ToolMode};
use crate::engines;
use crate::handle::{caller_tag, random_run_name, unix_ms, Dialect, Keyring, TaskClaims};
use crate::rpc::RpcError;

/// The answer to every handle that does not open, whatever the reason.
pub const TASK_NOT_FOUND: &str = "Failed to retrieve task: Task not found";

/// A configured tool, bound to its engine.
pub struct Tool {
    /// Its configuration.
    pub config: ToolConfig,
    validator: jsonschema::Validator,
    /// The engine pipeline, wrapped in the deadline layer.
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
    /// Static bearer tokens: token → caller.
    pub bearer: Vec<(String, String)>,
    /// The engine instances by name (for `check-config` probes).
    pub engines: BTreeMap<String, Arc<dyn taskgate_engine::Engine>>,
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
    /// engine is called.
    ///
    /// # Errors
    ///
    /// A [`ConfigFileError`] naming the file and the key at fault.
    pub async fn build(cfg: FileConfig, file: &Path) -> Result<Self, ConfigFileError> {
        let file_name = file.display().to_string();
        let err = |key: String, message: String| ConfigFileError {
            file: file_name.clone(),
            key,
            message,
        };

        let mut pairs = Vec::new();
        for (i, key) in cfg.keys.seal.iter().enumerate() {
            let path = format!("keys.seal[{i}]");
            let secret = secret_from(
                key.secret_env.as_deref(),
                key.secret_file.as_deref(),
                key.dev_secret.as_deref(),
            )
            .map_err(|m| err(path.clone(), m))?;
            if key.dev_secret.is_some() {
                tracing::warn!(
                    key = %key.id,
                    "keys.seal[{i}] uses dev_secret: a development key written in the config file. \
                     Never use it in production: anyone with the file can forge handles."
                );
            }
            pairs.push((key.id.clone(), secret));
        }
        let keys = Keyring::new(&pairs).map_err(|e| err("keys.seal".into(), e.to_string()))?;

        let mut bearer = Vec::new();
        for (i, b) in cfg.auth.bearer.iter().enumerate() {
            let token = secret_from(b.token_env.as_deref(), b.token_file.as_deref(), None)
                .map_err(|m| err(format!("auth.bearer[{i}]"), m))?;
            bearer.push((token, b.caller.clone()));
        }

        // Validate every tool's own settings before building any engine client.
        let mut names = std::collections::BTreeSet::new();
        let mut validators = Vec::new();
        for (i, tool) in cfg.tools.iter().enumerate() {
            let at = |k: &str| format!("tools[{i}].{k}");
            let valid_name = !tool.name.is_empty()
                && tool.name.len() <= 64
                && tool
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !valid_name {
                return Err(err(
                    at("name"),
                    format!("{:?} must be 1-64 characters of [A-Za-z0-9_.-]", tool.name),
                ));
            }
            if !names.insert(tool.name.clone()) {
                return Err(err(at("name"), format!("{:?} is defined twice", tool.name)));
            }
            if !cfg.engines.contains_key(&tool.engine) {
                return Err(err(
                    at("engine"),
                    format!("no engine {:?} is configured under [engines]", tool.engine),
                ));
            }
            if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(err(
                    at("input_schema"),
                    "the schema's root must have type = \"object\"".into(),
                ));
            }
            let validator = jsonschema::draft202012::new(&tool.input_schema)
                .map_err(|e| err(at("input_schema"), format!("not a valid JSON Schema: {e}")))?;
            if let Some(out) = &tool.output_schema {
                jsonschema::draft202012::new(out).map_err(|e| {
                    err(at("output_schema"), format!("not a valid JSON Schema: {e}"))
                })?;
            }
            if tool.poll_interval.is_zero() {
                return Err(err(at("poll_interval"), "must be greater than zero".into()));
            }
            validators.push(validator);
        }

        let mut built = BTreeMap::new();
        for (name, settings) in &cfg.engines {
            let engine = engines::build(settings.clone()).await.map_err(|e| {
                err(
                    format!("engines.{name}.{}", e.key)
                        .trim_end_matches('.')
                        .to_owned(),
                    e.message,
                )
            })?;
            built.insert(name.clone(), engine);
        }

        let meter = Arc::new(CallMeter::default());
        let mut tools = Vec::new();
        for (i, (tool, validator)) in cfg.tools.into_iter().zip(validators).enumerate() {
            let engine = &built[&tool.engine];
            let mut tool = tool;
            let decl = ToolDecl {
                name: tool.name.clone(),
                target: tool.target.clone(),
                input_schema: tool.input_schema.clone(),
                keep_alive: Some(tool.keep_alive),
            };
            let inner = engine
                .bind(&decl)
                .map_err(|e| err(format!("tools[{i}].{}", e.key), e.message))?;
            let capabilities = inner.capabilities();
            if let Some(max) = capabilities.max_retention {
                if tool.keep_alive > max {
                    tracing::warn!(tool = %tool.name, "keep_alive is longer than the engine keeps runs; using {}", humantime::format_duration(max));
                    tool.keep_alive = max;
                }
            }
            let pipeline: Arc<dyn Pipeline> = Arc::new(Deadlines::new(
                inner,
                cfg.server.call_timeout,
                meter.clone(),
            ));
            tools.push(Tool {
                config: tool,
                validator,
                pipeline,
                capabilities,
            });
        }

        Ok(Self {
            server: cfg.server,
            keys,
            tools,
            meter,
            bearer,
            engines: built,
        })
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
    /// -32602 naming the unknown tool.
    pub fn tool(&self, name: &str) -> Result<&Tool, RpcError> {
        self.tools
            .iter()
            .find(|t| t.config.name == name)
            .ok_or_else(|| RpcError::InvalidParams(format!("Unknown tool: {name}")))
    }

    /// Checks `arguments` against the tool's input schema.
    ///
    /// # Errors
    ///
    /// -32602 naming each failing field and the reason. Nothing reaches the engine.
    pub fn check_arguments(
        &self,
        tool: &Tool,
        arguments: Option<&Value>,
    ) -> Result<Value, RpcError> {
        let args = match arguments {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v.clone(),
        };
        let problems: Vec<String> = tool
            .validator
            .iter_errors(&args)
            .map(|e| {
                let path = e.instance_path.to_string();
                if path.is_empty() {
                    format!("arguments: {e}")
                } else {
                    format!("arguments{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(args)
        } else {
            Err(RpcError::InvalidParams(format!(
                "Invalid arguments for tool {}: {}",
                tool.name(),
                problems.join("; ")
            )))
        }
    }

    /// Starts a run of `tool` for `caller`, returning once the engine has accepted
    /// it. `run_name` is derived from a client token when there is one; otherwise
    /// a random name is used.
    ///
    /// # Errors
    ///
    /// Engine errors, mapped in [`RpcError`].
    pub async fn start(
        &self,
        caller: &str,
        tool: &Tool,
        arguments: Value,
        dialect: Dialect,
        run_name: Option<String>,
    ) -> Result<Started, RpcError> {
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
    /// Engine errors, mapped in [`RpcError`].
    pub async fn start_retained(
        &self,
        caller: &str,
        tool: &Tool,
        arguments: Value,
        dialect: Dialect,
        run_name: Option<String>,
        retention: Duration,
    ) -> Result<Started, RpcError> {
        let run_name = run_name.unwrap_or_else(random_run_name);
        let request = StartRequest {
            run_name,
            arguments,
            caller_tag: caller_tag(caller),
            keep_alive: Some(retention),
        };
        let native = tool.pipeline.start(request).await?;
        let claims = TaskClaims {
            dialect,
            tool: tool.config.name.clone(),
            native,
            created_ms: unix_ms(SystemTime::now()),
            ttl_ms: Some(tool.config.keep_alive.as_millis() as u64),
        };
        let handle = self.keys.seal("task", caller, &claims);
        tracing::info!(tool = %tool.name(), task = %short(&handle), "run started");
        Ok(Started { claims, handle })
    }

    /// Opens a task handle presented by `caller` in `dialect`.
    ///
    /// # Errors
    ///
    /// [`RpcError::NotFound`] with `not_found` as message, alike for every reason.
    pub fn open(
        &self,
        caller: &str,
        dialect: Dialect,
        handle: &str,
        not_found: &str,
    ) -> Result<(TaskClaims, &Tool), RpcError> {
        let claims: Option<TaskClaims> = self.keys.open("task", caller, handle);
        let found = claims
            .filter(|c| c.dialect == dialect && !c.expired_at(SystemTime::now()))
            .and_then(|c| {
                let tool = self.tools.iter().find(|t| t.config.name == c.tool)?;
                Some((c, tool))
            });
        found.ok_or_else(|| RpcError::NotFound(not_found.to_owned()))
    }

    /// Opens the task named by `params.taskId` and notes it (shortened) on the
    /// request's log span.
    ///
    /// # Errors
    ///
    /// -32602 when `taskId` is missing; [`RpcError::NotFound`] as [`Gateway::open`].
    pub fn open_task_param<'p>(
        &self,
        caller: &str,
        dialect: Dialect,
        params: &'p Value,
    ) -> Result<(&'p str, TaskClaims, &Tool), RpcError> {
        let task_id = params
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::InvalidParams("taskId is required".into()))?;
        let (claims, tool) = self.open(caller, dialect, task_id, TASK_NOT_FOUND)?;
        tracing::Span::current().record("task", short(task_id));
        Ok((task_id, claims, tool))
    }

    /// Reads the run once.
    ///
    /// # Errors
    ///
    /// [`RpcError::NotFound`] when the engine no longer has it; engine errors.
    pub async fn read(
        &self,
        tool: &Tool,
        native: &str,
        not_found: &str,
    ) -> Result<Snapshot, RpcError> {
        tool.pipeline
            .read(&native.to_owned())
            .await
            .map_err(|e| not_found_as(e, not_found))
    }

    /// Waits, within this request, until the run is terminal or asks for input,
    /// or `limit` has passed; re-reads the engine only while waiting. `on_change`
    /// sees every snapshot (for progress notifications).
    ///
    /// # Errors
    ///
    /// As [`Gateway::read`].
    pub async fn wait(
        &self,
        tool: &Tool,
        native: &str,
        limit: Duration,
        not_found: &str,
        mut on_change: impl FnMut(&Snapshot),
    ) -> Result<Snapshot, RpcError> {
        let deadline = Instant::now() + limit;
        let mut snapshot = self.read(tool, native, not_found).await?;
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
                .map_err(|e| not_found_as(e, not_found))?;
        }
    }

    /// Asks the engine to stop the run. A run that already finished is left as it is.
    ///
    /// # Errors
    ///
    /// As [`Gateway::read`]; cancel not supported by the engine → -32602.
    pub async fn cancel(
        &self,
        tool: &Tool,
        native: &str,
        not_found: &str,
    ) -> Result<Snapshot, RpcError> {
        let snapshot = self.read(tool, native, not_found).await?;
        if snapshot.state.is_terminal() {
            return Ok(snapshot);
        }
        if !tool.capabilities.cancel {
            return Err(RpcError::InvalidParams(format!(
                "Tool {} cannot be cancelled: its engine has no way to stop a run",
                tool.name()
            )));
        }
        match tool.pipeline.cancel(&native.to_owned()).await {
            Ok(()) | Err(EngineError::Conflict { .. }) => {}
            Err(e) => return Err(not_found_as(e, not_found)),
        }
        tracing::info!(tool = %tool.name(), "run cancel requested");
        Ok(snapshot)
    }

    /// Forwards answers to outstanding input requests. Answers to keys that are
    /// not outstanding are dropped; an answer whose content does not fit the
    /// request's schema is refused before it reaches the engine.
    ///
    /// # Errors
    ///
    /// -32602 for malformed or non-conforming answers; engine errors.
    pub async fn answer(
        &self,
        tool: &Tool,
        native: &str,
        responses: &Map<String, Value>,
        not_found: &str,
    ) -> Result<usize, RpcError> {
        let snapshot = self.read(tool, native, not_found).await?;
        let RunState::InputRequired { requests, .. } = &snapshot.state else {
            return Ok(0);
        };
        let mut parsed = Vec::new();
        for (key, value) in responses {
            let Some(request) = requests.get(key) else {
                continue;
            };
            let response: InputResponse = serde_json::from_value(value.clone()).map_err(|e| {
                RpcError::InvalidParams(format!(
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
                        return Err(RpcError::InvalidParams(format!(
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
                .map_err(|e| not_found_as(e, not_found))?;
        }
        Ok(parsed.len())
    }
}

fn not_found_as(e: EngineError, not_found: &str) -> RpcError {
    match e {
        EngineError::NotFound => RpcError::NotFound(not_found.to_owned()),
        other => RpcError::Engine(other),
    }
}

/// The first characters of a handle, for logs (never the whole bearer secret).
#[must_use]
pub fn short(handle: &str) -> String {
    let tail: String = handle
        .chars()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

fn secret_from(
    env: Option<&str>,
    file: Option<&Path>,
    inline: Option<&str>,
) -> Result<String, String> {
    match (env, file, inline) {
        (Some(var), None, None) => match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
            _ => Err(format!("the environment variable {var} is not set")),
        },
        (None, Some(path), None) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        (None, None, Some(v)) => Ok(v.to_owned()),
        _ => Err(
            "give exactly one of secret_env/token_env, secret_file/token_file or dev_secret".into(),
        ),
    }
}
