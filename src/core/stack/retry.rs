//! Cancels that outlive a passing upstream fault: a layer that sends a cancel
//! again while the engine answers with a retryable error (throttled, unavailable,
//! a call past its deadline), until a bound.
//!
//! A cancel often reaches taskgate as a notification (SEP-1391's
//! `notifications/cancelled`) that gets no answer: an error there would be
//! logged and the run would go on. And a cancel is the one write every engine can
//! repeat safely: an engine cancels a run it has already cancelled as a no-op
//! (or answers `Conflict`, which the server takes as done). Every other operation
//! passes straight through; the client retries those itself.

use std::sync::Arc;
use std::time::Duration;

use taskgate_engine::{EngineError, NativeRef, Pipeline};
use tokio::time::Instant;

use super::Layer;

/// The first pause between two attempts; each next pause doubles, up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);

/// The longest pause between two attempts (an engine's `retry-after` may ask
/// for longer, within the bound).
const MAX_PAUSE: Duration = Duration::from_secs(4);

/// Runs `attempt` again while it fails with a retryable error and the next
/// attempt can start within `bound` of the first one. Pauses between attempts
/// double from 250 ms up to 4 s, or follow the error's `retry_after`.
///
/// # Errors
///
/// The last attempt's error: a non-retryable one at once, a retryable one once
/// the bound is reached.
pub async fn retrying<T, F, Fut>(bound: Duration, mut attempt: F) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EngineError>>,
{
    let began = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match attempt().await {
            Err(e) if e.is_retryable() => {
                let wait = e.retry_after().unwrap_or(pause);
                if began.elapsed() + wait >= bound {
                    return Err(e);
                }
                tokio::time::sleep(wait).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            other => return other,
        }
    }
}

/// A pipeline whose cancels are sent again after a retryable error, within a
/// bound (see [`retrying`]). It stands outside [`super::Deadlines`] (see
/// [`super::build`]), so every attempt has its own deadline and is counted.
pub struct RetryCancel {
    inner: Arc<dyn Pipeline>,
    bound: Duration,
}

impl RetryCancel {
    /// Wraps `inner`: a cancel is tried again while it fails retryably and less
    /// than `bound` has passed since its first attempt.
    #[must_use]
    pub fn new(inner: Arc<dyn Pipeline>, bound: Duration) -> Self {
        Self { inner, bound }
    }
}

impl Layer for RetryCancel {
    fn inner(&self) -> &dyn Pipeline {
        &*self.inner
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        retrying(self.bound, || self.inner.cancel(run)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use taskgate_engine::{async_trait, Capabilities, RunState, Snapshot, StartRequest};

    use super::*;

    /// A pipeline whose cancels answer the queued errors first, then succeed.
    struct Flaky {
        cancels: AtomicUsize,
        errors: Mutex<Vec<EngineError>>,
    }

    impl Flaky {
        fn new(mut errors: Vec<EngineError>) -> Arc<Self> {
            errors.reverse();
            Arc::new(Self {
                cancels: AtomicUsize::new(0),
                errors: Mutex::new(errors),
            })
        }
    }

    #[async_trait]
    impl Pipeline for Flaky {
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        async fn start(&self, _: StartRequest) -> Result<NativeRef, EngineError> {
            Err(EngineError::Unavailable {
                message: "down".into(),
                source: None,
            })
        }
        async fn read(&self, _: &NativeRef) -> Result<Snapshot, EngineError> {
            Ok(Snapshot::new(RunState::working("ok")))
        }
        async fn cancel(&self, _: &NativeRef) -> Result<(), EngineError> {
            self.cancels.fetch_add(1, Ordering::Relaxed);
            match self.errors.lock().unwrap().pop() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
    }

    fn unavailable() -> EngineError {
        EngineError::Unavailable {
            message: "HTTP 500: Database error".into(),
            source: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_that_met_retryable_errors_is_sent_again_until_it_succeeds() {
        let flaky = Flaky::new(vec![
            unavailable(),
            EngineError::Throttled {
                retry_after: Some(Duration::from_secs(2)),
                message: "slow down".into(),
            },
            EngineError::DeadlineExceeded {
                operation: "cancel",
                after: Duration::from_secs(5),
            },
        ]);
        let p = RetryCancel::new(flaky.clone(), Duration::from_secs(30));
        let began = tokio::time::Instant::now();
        p.cancel(&"r".to_owned()).await.unwrap();
        assert_eq!(flaky.cancels.load(Ordering::Relaxed), 4);
        // 250 ms, then the 2 s the engine asked for, then 1 s.
        assert_eq!(began.elapsed(), Duration::from_millis(3250));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_gives_up_at_the_bound_with_the_last_error() {
        let flaky = Flaky::new((0..100).map(|_| unavailable()).collect());
        let p = RetryCancel::new(flaky.clone(), Duration::from_secs(10));
        let err = p.cancel(&"r".to_owned()).await.unwrap_err();
        assert!(err.is_retryable(), "{err}");
        // Pauses 0.25 + 0.5 + 1 + 2 + 4 = 7.75 s; the next 4 s would pass the bound.
        assert_eq!(flaky.cancels.load(Ordering::Relaxed), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_refused_for_good_is_not_sent_again() {
        for e in [
            EngineError::NotFound,
            EngineError::Conflict {
                message: "ended".into(),
            },
            EngineError::PermissionDenied {
                action: "DAG Runs: edit".into(),
                message: "no".into(),
            },
        ] {
            let flaky = Flaky::new(vec![e]);
            let p = RetryCancel::new(flaky.clone(), Duration::from_secs(30));
            assert!(p.cancel(&"r".to_owned()).await.is_err());
            assert_eq!(flaky.cancels.load(Ordering::Relaxed), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn other_operations_are_not_retried() {
        let flaky = Flaky::new(Vec::new());
        let p = RetryCancel::new(flaky, Duration::from_secs(30));
        let req = StartRequest {
            run_name: "tg-x".into(),
            arguments: serde_json::json!({}),
            caller_tag: "0".repeat(16),
            keep_alive: None,
            trace: None,
        };
        let began = tokio::time::Instant::now();
        assert!(p.start(req).await.unwrap_err().is_retryable());
        assert_eq!(began.elapsed(), Duration::ZERO);
    }
}
