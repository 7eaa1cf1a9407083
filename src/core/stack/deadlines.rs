//! A deadline on every engine call, and the count of every call: the layer
//! nearest the engine, so no engine needs its own timeout loop and every
//! attempt of a retried call is timed and counted.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate_engine::{
    EngineError, InputResponse, LogPage, NativeRef, Pipeline, Snapshot, StartRequest,
};

use super::Layer;
use crate::core::metrics::{Operation, ToolMeter};

/// A pipeline whose every call runs under a deadline and is counted.
pub struct Deadlines {
    inner: Arc<dyn Pipeline>,
    deadline: Duration,
    meter: ToolMeter,
}

impl Deadlines {
    /// Wraps `inner`: each call may take at most `deadline` (a wait for change may
    /// take its wait plus `deadline`), and is counted on `meter`.
    #[must_use]
    pub fn new(inner: Arc<dyn Pipeline>, deadline: Duration, meter: ToolMeter) -> Self {
        Self {
            inner,
            deadline,
            meter,
        }
    }

    async fn run<T>(
        &self,
        op: Operation,
        operation: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T, EngineError>>,
    ) -> Result<T, EngineError> {
        let began = Instant::now();
        let outcome = match tokio::time::timeout(limit, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(EngineError::DeadlineExceeded {
                operation,
                after: limit,
            }),
        };
        self.meter
            .record(op, began.elapsed(), outcome.as_ref().err());
        outcome
    }
}

impl Layer for Deadlines {
    fn inner(&self) -> &dyn Pipeline {
        &*self.inner
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        self.run(
            Operation::Start,
            "start",
            self.deadline,
            self.inner.start(request),
        )
        .await
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        self.run(Operation::Read, "read", self.deadline, self.inner.read(run))
            .await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.run(
            Operation::Cancel,
            "cancel",
            self.deadline,
            self.inner.cancel(run),
        )
        .await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.run(
            Operation::Answer,
            "answer input",
            self.deadline,
            self.inner.answer(run, key, response),
        )
        .await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        self.run(
            Operation::Locate,
            "locate",
            self.deadline,
            self.inner.locate(run_name),
        )
        .await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        self.run(
            Operation::WaitForChange,
            "wait for change",
            wait + self.deadline,
            self.inner.wait_for_change(run, last, wait),
        )
        .await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        self.run(Operation::Check, "check", self.deadline, self.inner.check())
            .await
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        self.run(
            Operation::Logs,
            "logs",
            self.deadline,
            self.inner.logs(run, cursor, limit),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use taskgate_engine::{async_trait, Capabilities, RunState};

    use super::*;
    use crate::core::metrics::CallMeter;

    struct Slow;

    #[async_trait]
    impl Pipeline for Slow {
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

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_hits_its_deadline() {
        let meter = Arc::new(CallMeter::default());
        let p = Deadlines::new(
            Arc::new(Slow),
            Duration::from_secs(5),
            meter.for_tool("e", "t"),
        );
        let req = StartRequest {
            run_name: "tg-x".into(),
            arguments: serde_json::json!({}),
            caller_tag: "0".repeat(16),
            keep_alive: None,
            trace: None,
        };
        let err = p.start(req).await.unwrap_err();
        assert!(matches!(
            err,
            EngineError::DeadlineExceeded {
                operation: "start",
                ..
            }
        ));
        assert!(err.is_retryable());
        p.read(&"r".to_owned()).await.unwrap();
        assert_eq!(meter.calls(), 2);
        assert_eq!(meter.failures(), 1);
        let mut registry = Registry::default();
        meter.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(
            "taskgate_engine_calls_total{engine=\"e\",tool=\"t\",operation=\"start\"} 1"
        ));
        assert!(
            text.contains(
                "taskgate_engine_errors_total{engine=\"e\",tool=\"t\",kind=\"deadline\"} 1"
            ),
            "{text}"
        );
    }
}
