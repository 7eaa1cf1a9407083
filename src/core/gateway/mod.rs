//! The core every dialect translates to: the tool catalog, argument checks,
//! sealed task handles, and the four things one can do with a run — start, read,
//! cancel, answer — each one conversation with the engine.
//!
//! Nothing here is stored between requests: a task is its handle plus whatever
//! the engine says about the native run right now.
//!
//! This file holds the [`Gateway`], the [`Tool`]s it binds, and
//! [`Gateway::build`]; the rest, one concern a file, each importing this one
//! and none importing the others but `errors.rs`: `catalog.rs` (looking tools
//! up, argument checks, visibility, authorization), `runs.rs`
//! (start, open, read, wait, cancel), `answers.rs` (input requests, approval
//! tickets), `logs.rs` (a run's log, a page at a time) and `errors.rs`.

pub mod answers;
mod catalog;
pub mod errors;
pub mod logs;
pub mod runs;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use taskgate_engine::{Capabilities, InputRequest, Pipeline, ToolDecl};

use super::access::{AccessPolicy, Caller};
use super::config::{
    ConfigFileError, ConfigProblem, FileConfig, ServerConfig, ToolConfig, ToolMode,
};
use super::engines;
use super::handle::Keyring;
use super::metrics::CallMeter;
use super::slots::WaitSlots;
use super::validate;

/// A configured tool, bound to its engine.
pub struct Tool {
    /// Its configuration.
    pub config: ToolConfig,
    /// Its input schema, compiled.
    validator: jsonschema::Validator,
    /// The engine pipeline, wrapped in the server's layers (deadlines, retried
    /// cancels, single-flight, the per-request call budget).
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
            // The server's layers: deadlines, retried cancels, single-flight
            // reads, the request's call budget.
            let pipeline = crate::core::stack::build(
                inner,
                cfg.server.call_timeout,
                meter.for_tool(&tool.engine, &tool.name),
            );
            tools.push(Tool {
                config: tool,
                validator,
                pipeline,
                capabilities,
            });
        }

        // Built first: the metrics show its refusals.
        let quotas = Arc::new(super::quota::Quotas::new(&cfg.server));
        match checked.keys {
            Some(keys) if problems.is_empty() => Ok(Self {
                waits: Arc::new(WaitSlots::new(
                    cfg.server.max_waits,
                    cfg.server.max_waits_per_caller,
                )),
                watches: Arc::default(),
                metrics: super::metrics::Metrics::new(&meter, &quotas.refusals),
                quotas,
                server: cfg.server,
                keys,
                tools,
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
}
