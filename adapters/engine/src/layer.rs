//! Layers around a [`Pipeline`]: a deadline on every upstream call, and a meter
//! counting them. The server wraps every bound pipeline in [`Deadlines`], so no
//! engine needs its own timeout loop.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::error::EngineError;
use crate::logs::LogPage;
use crate::pipeline::{Capabilities, NativeRef, Pipeline, StartRequest};
use crate::state::{InputResponse, Snapshot};

/// Seconds an engine call may take, as histogram bucket bounds: from a fast
/// read to a long wait for change.
const CALL_BUCKETS: [f64; 11] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 300.0,
];

/// The operations of a [`Pipeline`], as metrics label values.
const OPERATIONS: [&str; 8] = [
    "start",
    "read",
    "cancel",
    "answer",
    "locate",
    "wait_for_change",
    "check",
    "logs",
];

/// The labels of one engine call series. Engine and tool names come from the
/// configuration only; the operation from [`OPERATIONS`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The engine's name in the configuration.
    pub engine: String,
    /// The tool's name in the configuration.
    pub tool: String,
    /// The pipeline operation.
    pub operation: &'static str,
}

/// The labels of one engine error series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The engine's name in the configuration.
    pub engine: String,
    /// The tool's name in the configuration.
    pub tool: String,
    /// [`EngineError::kind`].
    pub kind: &'static str,
}

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// Counts and times calls made to engines. Shared by every pipeline of a server
/// and shown on its metrics endpoint; an idle server's counts do not move.
#[derive(Debug)]
pub struct CallMeter {
    calls: AtomicU64,
    failures: AtomicU64,
    by_call: Family<CallLabels, Counter>,
    durations: Family<CallLabels, Histogram, fn() -> Histogram>,
    errors: Family<ErrorLabels, Counter>,
}

impl Default for CallMeter {
    fn default() -> Self {
        Self {
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            by_call: Family::default(),
            durations: Family::new_with_constructor(call_histogram),
            errors: Family::default(),
        }
    }
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

    /// Adds this meter's series to `registry`: `taskgate_engine_calls_total`,
    /// `taskgate_engine_call_duration_seconds` and `taskgate_engine_errors_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "taskgate_engine_calls",
            "Calls made to engines, by engine, tool and operation",
            self.by_call.clone(),
        );
        registry.register_with_unit(
            "taskgate_engine_call_duration",
            "How long engine calls took, by engine, tool and operation",
            Unit::Seconds,
            self.durations.clone(),
        );
        registry.register(
            "taskgate_engine_errors",
            "Engine calls that ended in an error, by engine, tool and kind",
            self.errors.clone(),
        );
    }

    /// The series of one tool, created now so a call only touches atomics.
    #[must_use]
    pub fn for_tool(self: &Arc<Self>, engine: &str, tool: &str) -> ToolMeter {
        let handles = OPERATIONS.map(|operation| {
            let labels = CallLabels {
                engine: engine.to_owned(),
                tool: tool.to_owned(),
                operation,
            };
            (
                self.by_call.get_or_create(&labels).clone(),
                self.durations.get_or_create(&labels).clone(),
            )
        });
        ToolMeter {
            meter: self.clone(),
            engine: engine.to_owned(),
            tool: tool.to_owned(),
            handles,
        }
    }
}

/// The engine call series of one tool.
#[derive(Debug)]
pub struct ToolMeter {
    meter: Arc<CallMeter>,
    engine: String,
    tool: String,
    handles: [(Counter, Histogram); OPERATIONS.len()],
}

impl ToolMeter {
    fn record(&self, op: usize, took: Duration, error: Option<&EngineError>) {
        let (count, duration) = &self.handles[op];
        count.inc();
        duration.observe(took.as_secs_f64());
        self.meter.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = error {
            self.meter.failures.fetch_add(1, Ordering::Relaxed);
            self.meter
                .errors
                .get_or_create(&ErrorLabels {
                    engine: self.engine.clone(),
                    tool: self.tool.clone(),
                    kind: e.kind(),
                })
                .inc();
        }
    }
}

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
        op: usize,
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

#[async_trait]
impl Pipeline for Deadlines {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        self.run(0, "start", self.deadline, self.inner.start(request))
            .await
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        self.run(1, "read", self.deadline, self.inner.read(run))
            .await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.run(2, "cancel", self.deadline, self.inner.cancel(run))
            .await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.run(
            3,
            "answer input",
            self.deadline,
            self.inner.answer(run, key, response),
        )
        .await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        self.run(4, "locate", self.deadline, self.inner.locate(run_name))
            .await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        self.run(
            5,
            "wait for change",
            wait + self.deadline,
            self.inner.wait_for_change(run, last, wait),
        )
        .await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        self.run(6, "check", self.deadline, self.inner.check())
            .await
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        self.run(
            7,
            "logs",
            self.deadline,
            self.inner.logs(run, cursor, limit),
        )
        .await
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
        assert!(matches!(
            p.logs(&"r".to_owned(), None, 10).await.unwrap_err(),
            EngineError::Unsupported { operation: "logs" }
        ));
    }
}
