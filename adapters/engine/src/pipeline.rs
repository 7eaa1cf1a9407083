//! The traits every engine implements: an [`Engine`] binds tools to native
//! pipelines; a [`Pipeline`] starts, reads, cancels and answers native runs.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::discover::{DiscoverOptions, Discovered};
use crate::error::{ConfigError, EngineError};
use crate::logs::LogPage;
use crate::state::{InputResponse, Snapshot};
use crate::trace::TraceContext;

/// An opaque reference to a native run: an execution ARN, a Job name, a run id,
/// a spool folder name. It travels sealed inside task handles and is never shown
/// to clients in clear.
pub type NativeRef = String;

/// A configured engine instance (`[engines.NAME]` in the config file).
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// The engine kind, as written in config (`exec`, `stepfunctions`, …).
    fn kind(&self) -> &'static str;

    /// Validates a tool's `target` table and binds the tool to a pipeline. Pure: no
    /// upstream call happens here.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] whose key is relative to the tool (for example
    /// `target.state_machine_arn`).
    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError>;

    /// Probes reachability and permissions (used by `taskgate check-config`).
    /// Returns human-readable findings; the default has nothing to probe.
    ///
    /// # Errors
    ///
    /// An [`EngineError`] when the engine cannot be reached or refuses taskgate.
    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        Ok(Vec::new())
    }

    /// Tidies what the engine itself keeps on this host (the exec engine: run
    /// folders past their retention), a bounded amount of work and never an
    /// upstream call; `taskgate serve` calls it once when it starts. Returns
    /// human-readable findings; the default keeps nothing and does nothing.
    async fn tidy(&self) -> Vec<String> {
        Vec::new()
    }

    /// Lists the pipelines the engine already runs, each as a tool entry
    /// (`taskgate discover`). Reads only; starts nothing. The default answers
    /// [`EngineError::Unsupported`].
    ///
    /// # Errors
    ///
    /// [`EngineError::Unsupported`] by default; any other [`EngineError`] from
    /// the engine.
    async fn discover(&self, options: &DiscoverOptions) -> Result<Vec<Discovered>, EngineError> {
        let _ = options;
        Err(EngineError::unsupported("discover"))
    }
}

/// What the server tells an engine about a tool when binding it.
#[derive(Debug, Clone)]
pub struct ToolDecl {
    /// The tool's name as clients see it.
    pub name: String,
    /// The engine-specific `target` table, as JSON.
    pub target: Value,
    /// The tool's input schema (JSON Schema 2020-12), for engines that can check
    /// it against the pipeline's own declared inputs (`check`).
    pub input_schema: Value,
    /// How long the tool's runs should be kept after they finish, if configured.
    /// Engines that can enforce retention natively (Kubernetes'
    /// `ttlSecondsAfterFinished`) use it.
    pub keep_alive: Option<Duration>,
}

impl ToolDecl {
    /// Deserializes the `target` table into an engine's own type. Use a type with
    /// `#[serde(deny_unknown_fields)]`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed `target` (or `target.FIELD` when serde names it).
    pub fn target<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        from_value(self.target.clone()).map_err(|e| e.within("target"))
    }
}

/// Deserializes a config table into `T`, mapping serde's message into a
/// [`ConfigError`] with the offending field as key when serde names one.
///
/// # Errors
///
/// A [`ConfigError`] describing the first problem serde met.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, ConfigError> {
    serde_json::from_value(value).map_err(|e| {
        let message = e.to_string();
        // serde names the field in backquotes: "unknown field `x`, expected ...".
        let key = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field"))
            .unwrap_or("")
            .to_owned();
        ConfigError::new(key, message)
    })
}

/// What a pipeline can do. Capabilities are data: the server checks them instead
/// of calling and catching [`EngineError::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// The engine can stop a run.
    pub cancel: bool,
    /// The pipeline may ask for input midway (it has a human step).
    pub input: bool,
    /// Starting twice with the same [`StartRequest::run_name`] and arguments yields
    /// the same run (deterministic native names).
    pub idempotent_start: bool,
    /// [`Pipeline::locate`] works: a run can be found again from its run name alone.
    pub locate: bool,
    /// [`Pipeline::logs`] works: a run's output can be read while it runs.
    pub logs: bool,
    /// The longest the engine keeps a finished run, when it has a fixed limit
    /// (Step Functions keeps Standard executions 90 days).
    pub max_retention: Option<Duration>,
}

/// A request to start a run.
#[derive(Debug, Clone)]
pub struct StartRequest {
    /// A deterministic name for the native run, derived by the server from the
    /// handle or the client's operation token: lowercase ASCII letters, digits and
    /// `-`, starting with a letter, at most 40 characters. Engines use it as (or in)
    /// the native name so a retried start finds the same run.
    pub run_name: String,
    /// The tool's arguments, already validated against the tool's input schema.
    pub arguments: Value,
    /// A short, label-safe hash of the caller (lowercase hex, 16 characters), for
    /// labels and tags. Never the caller's identity itself.
    pub caller_tag: String,
    /// How long to keep the run after it finishes, when the server decided one.
    pub keep_alive: Option<Duration>,
    /// The trace context of taskgate's span that starts the run, when tracing
    /// is on: engines that can carry it into the run do (see each engine's
    /// README), so the pipeline's own spans join the same trace.
    pub trace: Option<TraceContext>,
}

/// A tool bound to a native pipeline.
///
/// Every method is one short conversation with the engine; the server wraps the
/// pipeline in its own layers, one of which puts a deadline on every call, so
/// none waits forever. Methods an engine cannot do keep their default, which
/// answers [`EngineError::Unsupported`].
#[async_trait]
pub trait Pipeline: Send + Sync + 'static {
    /// What this pipeline can do.
    fn capabilities(&self) -> Capabilities;

    /// Starts a run and returns its native reference once the engine has accepted
    /// it (a read right after must find it).
    ///
    /// # Errors
    ///
    /// [`EngineError::Conflict`] when a run with the same name and other input
    /// exists; any other [`EngineError`] from the engine.
    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError>;

    /// Reads the run once and translates its native state.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] when the run is gone; any other [`EngineError`].
    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError>;

    /// Asks the engine to stop the run. Returning means the engine accepted the
    /// request; the run may still end otherwise.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unsupported`] by default; [`EngineError::NotFound`]; any other.
    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        let _ = run;
        Err(EngineError::unsupported("cancel"))
    }

    /// Forwards the client's answer to the outstanding input request `key`.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unsupported`] by default; [`EngineError::Conflict`] when the
    /// request is no longer outstanding; [`EngineError::InvalidInput`].
    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        let _ = (run, key, response);
        Err(EngineError::unsupported("answer input"))
    }

    /// Finds a run again from the run name it was started with, without any table
    /// (used for client-chosen operation tokens). `Ok(None)` when no such run exists.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unsupported`] by default; any other [`EngineError`].
    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        let _ = run_name;
        Err(EngineError::unsupported("locate"))
    }

    /// Waits until the run may have changed since `last`, or until `wait` has
    /// passed, and returns a fresh snapshot. Called only while a client request is
    /// waiting (a blocking result); the default sleeps `wait` and reads again.
    /// Engines with a native watch (Kubernetes) override it.
    ///
    /// # Errors
    ///
    /// As [`Pipeline::read`].
    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        let _ = last;
        tokio::time::sleep(wait).await;
        self.read(run).await
    }

    /// Reads up to `limit` lines of what the run printed, from `cursor` (a
    /// cursor an earlier page returned; `None` from the start of what the
    /// engine keeps). One short conversation: an engine reads at most
    /// [`crate::MAX_PAGE_BYTES`] upstream for a page and returns the lines it
    /// has, with the cursor to go on from.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unsupported`] by default; [`EngineError::InvalidInput`]
    /// for a cursor this engine did not make; [`EngineError::NotFound`]; any
    /// other [`EngineError`].
    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let _ = (run, cursor, limit);
        Err(EngineError::unsupported("logs"))
    }

    /// Checks the binding against the engine (used by `taskgate check-config`):
    /// that the target exists, is of a supported kind, and that taskgate may use it.
    /// Returns human-readable findings.
    ///
    /// # Errors
    ///
    /// [`EngineError::InvalidInput`] when the target is unusable; any other.
    async fn check(&self) -> Result<Vec<String>, EngineError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RunState;

    /// A pipeline that writes only the two required methods.
    struct Minimal;

    #[async_trait]
    impl Pipeline for Minimal {
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        async fn start(&self, _: StartRequest) -> Result<NativeRef, EngineError> {
            std::future::pending().await
        }
        async fn read(&self, _: &NativeRef) -> Result<Snapshot, EngineError> {
            Ok(Snapshot::new(RunState::working("ok")))
        }
    }

    #[tokio::test]
    async fn defaults_answer_unsupported() {
        let p = Minimal;
        let err = p.cancel(&"r".to_owned()).await.unwrap_err();
        assert!(matches!(
            err,
            EngineError::Unsupported {
                operation: "cancel"
            }
        ));
        assert!(matches!(
            p.locate("tg-x").await.unwrap_err(),
            EngineError::Unsupported {
                operation: "locate"
            }
        ));
        assert!(matches!(
            p.logs(&"r".to_owned(), None, 10).await.unwrap_err(),
            EngineError::Unsupported { operation: "logs" }
        ));
    }
}
