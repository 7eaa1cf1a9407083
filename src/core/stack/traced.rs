//! One span per engine call (engine, tool, operation, outcome), a child of the
//! request's span: the layer just outside [`super::Deadlines`], so each attempt
//! of a retried cancel is its own span and a call cut by its deadline ends
//! with `deadline_exceeded`. Free when tracing is off (the spans are disabled
//! at their call sites).
//!
//! `start` is not spanned here: the gateway opens the engine-start span itself
//! (`src/core/gateway/runs.rs`), because its context goes into the
//! [`StartRequest`] and the run.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use taskgate_engine::{EngineError, InputResponse, LogPage, NativeRef, Pipeline, Snapshot};
use tracing::Instrument as _;

use super::Layer;
use crate::telemetry;

/// A pipeline whose calls (but `start`) are each one span.
pub struct Traced {
    inner: Arc<dyn Pipeline>,
    engine: String,
    tool: String,
}

impl Traced {
    /// Wraps `inner`, the pipeline of tool `tool` on engine `engine`.
    #[must_use]
    pub fn new(inner: Arc<dyn Pipeline>, engine: &str, tool: &str) -> Self {
        Self {
            inner,
            engine: engine.to_owned(),
            tool: tool.to_owned(),
        }
    }

    async fn traced<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, EngineError>>,
    ) -> Result<T, EngineError> {
        let span = telemetry::engine_span(&self.engine, &self.tool, operation);
        if span.is_disabled() {
            return call.await;
        }
        let outcome = call.instrument(span.clone()).await;
        telemetry::record_outcome(&span, outcome.as_ref().err());
        outcome
    }
}

impl Layer for Traced {
    fn inner(&self) -> &dyn Pipeline {
        &*self.inner
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        self.traced("read", self.inner.read(run)).await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.traced("cancel", self.inner.cancel(run)).await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.traced("answer", self.inner.answer(run, key, response))
            .await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        self.traced("locate", self.inner.locate(run_name)).await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        self.traced(
            "wait_for_change",
            self.inner.wait_for_change(run, last, wait),
        )
        .await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        self.traced("check", self.inner.check()).await
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        self.traced("logs", self.inner.logs(run, cursor, limit))
            .await
    }
}
