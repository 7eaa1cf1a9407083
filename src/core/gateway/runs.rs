//! The four things one can do with a run, less answering: start it, open its
//! handle, read it (once, or waiting within the request), cancel it. Each is one
//! conversation with the engine.

use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use taskgate_engine::{EngineError, RunState, Snapshot, StartRequest};
use tracing::Instrument as _;

use super::errors::{not_found, CoreError};
use super::{Gateway, Tool};
use crate::core::access::Caller;
use crate::core::audit::{self, Action, Outcome};
use crate::core::handle::{
    caller_tag, random_run_name, short, unix_ms, Dialect, Purpose, TaskClaims,
};
use crate::core::slots::WaitSlot;
use crate::core::trace_link;
use crate::telemetry;

/// A started run: its claims and the sealed handle the client gets.
#[derive(Debug, Clone)]
pub struct Started {
    /// What the handle holds.
    pub claims: TaskClaims,
    /// The sealed handle.
    pub handle: String,
}

impl Gateway {
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
        // The span of this request, sealed into the handle: every later
        // request on the task links to it.
        let start_span = trace_link::current_start();
        // The engine-start span, a child of the request's: its context is what
        // the engine carries into the run (when tracing is on).
        let span = telemetry::engine_span(&tool.config.engine, tool.name(), "start");
        let request = StartRequest {
            run_name,
            arguments,
            caller_tag: caller_tag(caller),
            keep_alive: Some(retention),
            trace: telemetry::trace_context(&span),
        };
        let started = tool.pipeline.start(request).instrument(span.clone()).await;
        telemetry::record_outcome(&span, started.as_ref().err());
        let native = match started {
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
            trace: start_span,
        };
        let handle = self.keys.seal(Purpose::Task, caller, &claims);
        tracing::info!(tool = %tool.name(), task = %short(&handle), "run started");
        Ok(Started { claims, handle })
    }

    /// Opens a task handle presented by `caller` in `dialect`. Once it has
    /// opened (and only then), the current span gets a link to the span that
    /// started the run, when the handle names one.
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
        use crate::core::metrics::Refusal;
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
        if let Some(start) = &c.trace {
            trace_link::link_to_start(start);
        }
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

    /// What `/metrics` samples at a scrape: waits in flight, watched runs.
    #[must_use]
    pub fn in_flight(&self) -> crate::core::metrics::InFlight {
        crate::core::metrics::InFlight {
            waits: self.waits.held(),
            watched_runs: self.watches.open(),
        }
    }

    /// Takes a slot for a request of `caller` that is going to wait for a run;
    /// hold it for the life of the request.
    ///
    /// # Errors
    ///
    /// [`CoreError::Busy`] when `server.max_waits` or
    /// `server.max_waits_per_caller` is reached.
    pub fn hold_wait(&self, caller: &str) -> Result<WaitSlot, CoreError> {
        self.waits.take(caller).map_err(|full| {
            self.quotas.refusals.count(match full {
                crate::core::slots::Full::Server(_) => "max_waits",
                crate::core::slots::Full::Caller(_) => "max_waits_per_caller",
            });
            CoreError::Busy(full)
        })
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
    ) -> Result<crate::core::quota::Holding, CoreError> {
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
        crate::core::stack::call_budget::exempt(
            self.wait_unbudgeted(tool, native, limit, on_change),
        )
        .await
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
