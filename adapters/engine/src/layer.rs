//! Layers around a [`Pipeline`]: a deadline on every upstream call, and a meter
//! counting them. The server wraps every bound pipeline in [`Deadlines`], so no
//! engine needs its own timeout loop.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::EngineError;
use crate::pipeline::{Capabilities, NativeRef, Pipeline, StartRequest};
use crate::state::{InputResponse, Snapshot};

/// Counts calls made to engines. Shared by every pipeline of a server and shown
/// on its metrics endpoint; an idle server's count does not move.
#[derive(Debug, Default)]
pub struct CallMeter {
    calls: AtomicU64,
    failures: AtomicU64,
}

impl CallMeter {
    /// Calls made so far.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Calls that ended in an error so far.
    #[must_use]
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// A pipeline whose every call runs under a deadline and is counted.
pub struct Deadlines {
    inner: Arc<dyn Pipeline>,
    deadline: Duration,
    meter: Arc<CallMeter>,
}

impl Deadlines {
    /// Wraps `inner`: each call may take at most `deadline` (a wait for change may
    /// take its wait plus `deadline`).
    #[must_use]
    pub fn new(inner: Arc<dyn Pipeline>, deadline: Duration, meter: Arc<CallMeter>) -> Self {
        Self {
            inner,
            deadline,
            meter,
        }
    }

    async fn run<T>(
        &self,
        operation: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T, EngineError>>,
    ) -> Result<T, EngineError> {
        self.meter.calls.fetch_add(1, Ordering::Relaxed);
        let outcome = match tokio::time::timeout(limit, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(EngineError::DeadlineExceeded {
                operation,
                after: limit,
            }),
        };
        if outcome.is_err() {
            self.meter.failures.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }
}

#[async_trait]
impl Pipeline for Deadlines {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        self.run("start", self.deadline, self.inner.start(request))
            .await
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        self.run("read", self.deadline, self.inner.read(run)).await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.run("cancel", self.deadline, self.inner.cancel(run))
            .await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.run(
            "answer input",
            self.deadline,
            self.inner.answer(run, key, response),
        )
        .await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        self.run("locate", self.deadline, self.inner.locate(run_name))
            .await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        self.run(
            "wait for change",
            wait + self.deadline,
            self.inner.wait_for_change(run, last, wait),
        )
        .await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        self.run("check", self.deadline, self.inner.check()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RunState;

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
        let p = Deadlines::new(Arc::new(Slow), Duration::from_secs(5), meter.clone());
        let req = StartRequest {
            run_name: "tg-x".into(),
            arguments: serde_json::json!({}),
            caller_tag: "0".repeat(16),
            keep_alive: None,
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
    }

    #[tokio::test]
    async fn defaults_answer_unsupported() {
        let p = Slow;
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
    }
}
