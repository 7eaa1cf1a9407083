//! The server's layers around every engine pipeline, and the one function that
//! stacks them.
//!
//! An engine crate implements [`Pipeline`] and knows nothing of what follows.
//! When the gateway binds a tool, [`build`] wraps the engine's pipeline in five
//! layers, outermost first (a call passes them in this order on its way to the
//! engine):
//!
//! 1. [`CallBudget`] (`call_budget.rs`): each request's engine calls count
//!    against `server.max_engine_calls`; a wait's reads against the caller's
//!    `server.max_wait_reads_per_minute`.
//! 2. [`SingleFlight`] (`single_flight.rs`): concurrent reads of one run share
//!    one engine call.
//! 3. [`RetryCancel`] (`retry.rs`): a cancel that met a retryable error is sent
//!    again, within one more call timeout.
//! 4. [`Traced`] (`traced.rs`): each call but `start` is one span of the
//!    request's trace (the gateway opens the start span, whose context goes
//!    into the run); off with tracing.
//! 5. [`Deadlines`] (`deadlines.rs`): every call under `server.call_timeout`,
//!    and counted on the engine-call series of `/metrics`.
//!
//! # Writing a layer
//!
//! A layer implements [`Layer`], not [`Pipeline`]: it names the pipeline it
//! wraps ([`Layer::inner`]) and writes only the calls it changes; every other
//! call keeps the trait's default, which hands it to the inner pipeline as it
//! is. [`Layered`] turns any layer into a [`Pipeline`] by calling the layer's
//! methods. (Rust does not let this crate implement the engine crate's
//! `Pipeline` for every `L: Layer` at once, hence the one wrapper type.)
//!
//! The layer methods return futures the compiler knows to be `Send`, so a layer
//! may write them as plain `async fn`s; the only boxing is the one
//! [`Layered`] does to implement `Pipeline`, one allocation per layer per call
//! as before.

pub mod call_budget;
mod deadlines;
mod retry;
mod single_flight;
mod traced;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use taskgate_engine::{
    Capabilities, EngineError, InputResponse, LogPage, NativeRef, Pipeline, Snapshot, StartRequest,
};

pub use call_budget::CallBudget;
pub use deadlines::Deadlines;
pub use retry::{retrying, RetryCancel};
pub use single_flight::{SingleFlight, GATHER_TURNS};
pub use traced::Traced;

use super::metrics::ToolMeter;

/// Wraps `engine`, the pipeline an engine bound a tool to, in the server's
/// layers (in the order listed above). `call_timeout` is the deadline of one
/// engine call and the bound of a cancel's retries; `meter` counts the tool's
/// calls.
#[must_use]
pub fn build(
    engine: Arc<dyn Pipeline>,
    call_timeout: Duration,
    meter: ToolMeter,
) -> Arc<dyn Pipeline> {
    let (engine_name, tool) = (meter.engine().to_owned(), meter.tool().to_owned());
    let deadlines = layered(Deadlines::new(engine, call_timeout, meter));
    let traced = layered(Traced::new(deadlines, &engine_name, &tool));
    let retry = layered(RetryCancel::new(traced, call_timeout));
    let single_flight = layered(SingleFlight::new(retry));
    layered(CallBudget::new(single_flight))
}

/// `layer` as a shared [`Pipeline`].
fn layered<L: Layer>(layer: L) -> Arc<dyn Pipeline> {
    Arc::new(Layered(layer))
}

/// One of the server's layers around a pipeline. Each method has the meaning
/// of the [`Pipeline`] method of the same name; its default passes the call to
/// [`Layer::inner`] unchanged, so a layer writes only the methods it changes.
pub trait Layer: Send + Sync + 'static {
    /// The pipeline this layer wraps.
    fn inner(&self) -> &dyn Pipeline;

    /// As [`Pipeline::capabilities`].
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// As [`Pipeline::start`].
    fn start(
        &self,
        request: StartRequest,
    ) -> impl Future<Output = Result<NativeRef, EngineError>> + Send {
        self.inner().start(request)
    }

    /// As [`Pipeline::read`].
    fn read<'a>(
        &'a self,
        run: &'a NativeRef,
    ) -> impl Future<Output = Result<Snapshot, EngineError>> + Send + 'a {
        self.inner().read(run)
    }

    /// As [`Pipeline::cancel`].
    fn cancel<'a>(
        &'a self,
        run: &'a NativeRef,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'a {
        self.inner().cancel(run)
    }

    /// As [`Pipeline::answer`].
    fn answer<'a>(
        &'a self,
        run: &'a NativeRef,
        key: &'a str,
        response: &'a InputResponse,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'a {
        self.inner().answer(run, key, response)
    }

    /// As [`Pipeline::locate`].
    fn locate<'a>(
        &'a self,
        run_name: &'a str,
    ) -> impl Future<Output = Result<Option<NativeRef>, EngineError>> + Send + 'a {
        self.inner().locate(run_name)
    }

    /// As [`Pipeline::wait_for_change`].
    fn wait_for_change<'a>(
        &'a self,
        run: &'a NativeRef,
        last: &'a Snapshot,
        wait: Duration,
    ) -> impl Future<Output = Result<Snapshot, EngineError>> + Send + 'a {
        self.inner().wait_for_change(run, last, wait)
    }

    /// As [`Pipeline::check`].
    fn check(&self) -> impl Future<Output = Result<Vec<String>, EngineError>> + Send {
        self.inner().check()
    }

    /// As [`Pipeline::logs`].
    fn logs<'a>(
        &'a self,
        run: &'a NativeRef,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> impl Future<Output = Result<LogPage, EngineError>> + Send + 'a {
        self.inner().logs(run, cursor, limit)
    }
}

/// A [`Layer`] as a [`Pipeline`]: every call goes to the layer's method of the
/// same name.
pub struct Layered<L>(pub L);

#[async_trait]
impl<L: Layer> Pipeline for Layered<L> {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        self.0.start(request).await
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        self.0.read(run).await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.0.cancel(run).await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.0.answer(run, key, response).await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        self.0.locate(run_name).await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        self.0.wait_for_change(run, last, wait).await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        self.0.check().await
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        self.0.logs(run, cursor, limit).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use taskgate_engine::{InputAction, LogLine, RunState};

    use super::*;
    use crate::core::metrics::CallMeter;

    /// An engine that writes down every call it gets, with its arguments. Its
    /// first cancel fails with a retryable error.
    #[derive(Default)]
    struct Probe {
        calls: Mutex<Vec<String>>,
        cancels: Mutex<usize>,
    }

    impl Probe {
        fn note(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    fn capabilities() -> Capabilities {
        Capabilities {
            cancel: true,
            input: true,
            locate: true,
            logs: true,
            ..Capabilities::default()
        }
    }

    #[async_trait]
    impl Pipeline for Probe {
        fn capabilities(&self) -> Capabilities {
            capabilities()
        }
        async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
            self.note(format!("start {}", request.run_name));
            Ok(format!("native-{}", request.run_name))
        }
        async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
            self.note(format!("read {run}"));
            Ok(Snapshot::new(RunState::working(format!("read {run}"))))
        }
        async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
            self.note(format!("cancel {run}"));
            let mut cancels = self.cancels.lock().unwrap();
            *cancels += 1;
            if *cancels == 1 {
                return Err(EngineError::unavailable(
                    "down",
                    std::io::Error::other("refused"),
                ));
            }
            Ok(())
        }
        async fn answer(
            &self,
            run: &NativeRef,
            key: &str,
            response: &InputResponse,
        ) -> Result<(), EngineError> {
            self.note(format!("answer {run} {key} {:?}", response.action));
            Ok(())
        }
        async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
            self.note(format!("locate {run_name}"));
            Ok(Some(format!("native-{run_name}")))
        }
        async fn wait_for_change(
            &self,
            run: &NativeRef,
            last: &Snapshot,
            wait: Duration,
        ) -> Result<Snapshot, EngineError> {
            self.note(format!("wait {run} {:?} {wait:?}", last.state));
            Ok(Snapshot::new(RunState::working("changed")))
        }
        async fn check(&self) -> Result<Vec<String>, EngineError> {
            self.note("check".to_owned());
            Ok(vec!["fine".to_owned()])
        }
        async fn logs(
            &self,
            run: &NativeRef,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<LogPage, EngineError> {
            self.note(format!("logs {run} {cursor:?} {limit}"));
            Ok(LogPage {
                lines: vec![LogLine {
                    source: "stdout".into(),
                    text: "hello".into(),
                }],
                cursor: "next".into(),
                complete: false,
            })
        }
    }

    /// The probe behind the whole stack, and the meter of its calls.
    fn stacked() -> (Arc<Probe>, Arc<CallMeter>, Arc<dyn Pipeline>) {
        let probe = Arc::new(Probe::default());
        let meter = Arc::new(CallMeter::default());
        let pipeline = build(
            probe.clone(),
            Duration::from_secs(5),
            meter.for_tool("e", "t"),
        );
        (probe, meter, pipeline)
    }

    #[tokio::test(start_paused = true)]
    async fn every_call_reaches_the_engine_through_the_stack_with_its_arguments() {
        let (probe, meter, p) = stacked();
        let run: NativeRef = "native-tg-x".into();
        assert_eq!(p.capabilities(), capabilities());
        let started = p
            .start(StartRequest {
                run_name: "tg-x".into(),
                arguments: serde_json::json!({}),
                caller_tag: "0".repeat(16),
                keep_alive: None,
                trace: None,
            })
            .await
            .unwrap();
        assert_eq!(started, run);
        let read = p.read(&run).await.unwrap();
        assert_eq!(read.state, RunState::working("read native-tg-x"));
        p.cancel(&run).await.unwrap();
        let response = InputResponse {
            action: InputAction::Decline,
            content: None,
        };
        p.answer(&run, "approve", &response).await.unwrap();
        assert_eq!(p.locate("tg-x").await.unwrap(), Some(run.clone()));
        let changed = p
            .wait_for_change(&run, &read, Duration::from_secs(7))
            .await
            .unwrap();
        assert_eq!(changed.state, RunState::working("changed"));
        assert_eq!(p.check().await.unwrap(), vec!["fine".to_owned()]);
        let page = p.logs(&run, Some("from"), 12).await.unwrap();
        assert_eq!((page.lines.len(), page.cursor.as_str()), (1, "next"));
        let working = format!("{:?}", RunState::working("read native-tg-x"));
        assert_eq!(
            probe.calls(),
            [
                "start tg-x".to_owned(),
                "read native-tg-x".to_owned(),
                "cancel native-tg-x".to_owned(),
                "cancel native-tg-x".to_owned(),
                "answer native-tg-x approve Decline".to_owned(),
                "locate tg-x".to_owned(),
                format!("wait native-tg-x {working} 7s"),
                "check".to_owned(),
                "logs native-tg-x Some(\"from\") 12".to_owned(),
            ]
        );
        // Every attempt is counted, the failed first cancel among them.
        assert_eq!((meter.calls(), meter.failures()), (9, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_call_budget_stands_outside_the_rest_and_retry_outside_deadlines() {
        let (probe, meter, p) = stacked();
        let run: NativeRef = "r".into();
        call_budget::within(2, async {
            p.read(&run).await.unwrap();
            // Two attempts of one cancel: the budget counts the call once, the
            // meter (under retry) counts each attempt.
            p.cancel(&run).await.unwrap();
            let refused = p.read(&run).await.unwrap_err();
            assert!(
                matches!(refused, EngineError::Throttled { .. }),
                "{refused:?}"
            );
        })
        .await;
        assert_eq!(probe.calls(), ["read r", "cancel r", "cancel r"]);
        assert_eq!(
            (meter.calls(), meter.failures()),
            (3, 1),
            "a call the budget refused reaches neither the engine nor the meter"
        );
    }
}
