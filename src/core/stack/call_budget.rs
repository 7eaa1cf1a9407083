//! The bound on engine calls per request (`server.max_engine_calls`): a layer
//! around every pipeline that counts the calls the request being served has
//! made, and refuses the ones past the bound with a retryable error. The count
//! lives with the request (a task-local scope opened by the front door) and
//! ends with it; nothing is kept between requests.
//!
//! Starts, reads, cancels, answers, lookups and log pages count. The reads of a request
//! that waits for a run ([`exempt`], and every `wait_for_change`) do not: they are paced by the
//! tool's poll interval and bounded by `max_wait` and `max_waits`, and, when the
//! front door named the caller ([`within_for`]), they count against the
//! caller's `server.max_wait_reads_per_minute`. Outside a scope (`check-config`,
//! tests of the core) nothing is counted.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use taskgate_engine::{
    EngineError, InputResponse, LogPage, NativeRef, Pipeline, Snapshot, StartRequest,
};

use super::Layer;
use crate::core::quota::Quotas;

/// How long a client is told to wait before sending the refused rest.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The engine calls one request may still make.
#[derive(Debug)]
struct Allowance {
    limit: usize,
    used: AtomicUsize,
    /// The caller whose wait reads the request's waits count against.
    paced: Option<Paced>,
    /// Inside [`exempt`]: every call is a wait read.
    waiting: bool,
}

/// A caller's allowance of wait reads.
#[derive(Debug, Clone)]
struct Paced {
    quotas: Arc<Quotas>,
    caller: String,
}

tokio::task_local! {
    static BUDGET: Arc<Allowance>;
}

/// Runs `work` (the serving of one request, or of one whole batch) with a budget
/// of `limit` engine calls. Inside a scope already open (an entry of a batch),
/// the outer budget holds and no new one is opened.
///
/// Not an `async fn`: the future returned is `work` itself or `work` in the
/// budget's scope, no larger (a request's future is moved whole, per request).
pub fn within<F: Future>(limit: usize, work: F) -> impl Future<Output = F::Output> {
    scoped(
        (BUDGET.try_with(|_| ()).is_err()).then(|| Allowance {
            limit,
            used: AtomicUsize::new(0),
            paced: None,
            waiting: false,
        }),
        work,
    )
}

/// `work` in the scope of `budget`, or as it is when there is none.
fn scoped<F: Future>(budget: Option<Allowance>, work: F) -> impl Future<Output = F::Output> {
    match budget {
        None => Either::Left(work),
        Some(budget) => Either::Right(BUDGET.scope(Arc::new(budget), work)),
    }
}

/// As [`within`], the waits of the request counting against `caller`'s
/// `server.max_wait_reads_per_minute` in `quotas`.
pub fn within_for<F: Future>(
    limit: usize,
    quotas: &Arc<Quotas>,
    caller: &str,
    work: F,
) -> impl Future<Output = F::Output> {
    scoped(
        (BUDGET.try_with(|_| ()).is_err()).then(|| Allowance {
            limit,
            used: AtomicUsize::new(0),
            paced: Some(Paced {
                quotas: quotas.clone(),
                caller: caller.to_owned(),
            }),
            waiting: false,
        }),
        work,
    )
}

/// Runs `work` outside the request's budget: the reads of a request that waits
/// for a run, which `max_wait` and `max_waits` bound instead.
pub async fn exempt<F: Future>(work: F) -> F::Output {
    let paced = BUDGET.try_with(|b| b.paced.clone()).ok().flatten();
    let unbounded = Arc::new(Allowance {
        limit: usize::MAX,
        used: AtomicUsize::new(0),
        paced,
        waiting: true,
    });
    BUDGET.scope(unbounded, work).await
}

/// Counts one call against the current request's budget.
fn spend() -> Result<(), EngineError> {
    let Ok(budget) = BUDGET.try_with(Arc::clone) else {
        return Ok(());
    };
    if budget.waiting {
        return spend_wait_read();
    }
    let before = budget.used.fetch_add(1, Ordering::Relaxed);
    if before < budget.limit {
        return Ok(());
    }
    if let Some(paced) = &budget.paced {
        paced.quotas.refusals.count("max_engine_calls");
    }
    Err(EngineError::Throttled {
        retry_after: Some(RETRY_AFTER),
        message: format!(
            "this request reached taskgate's bound of {} engine calls (server.max_engine_calls); \
             send the rest in another request",
            budget.limit
        ),
    })
}

/// Counts one read of a waiting request against its caller's
/// `server.max_wait_reads_per_minute`.
fn spend_wait_read() -> Result<(), EngineError> {
    let Ok(Some(paced)) = BUDGET.try_with(|b| b.paced.clone()) else {
        return Ok(());
    };
    paced
        .quotas
        .wait_reads
        .take(&paced.caller)
        .map_err(|over| EngineError::Throttled {
            retry_after: Some(over.retry_after),
            message: over.to_string(),
        })
}

/// A pipeline whose calls count against the request's engine-call budget.
pub struct CallBudget {
    inner: Arc<dyn Pipeline>,
}

impl CallBudget {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Pipeline>) -> Self {
        Self { inner }
    }
}

// Every call but `check` counts.
impl Layer for CallBudget {
    fn inner(&self) -> &dyn Pipeline {
        &*self.inner
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        spend()?;
        self.inner.start(request).await
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        spend()?;
        self.inner.read(run).await
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        spend()?;
        self.inner.cancel(run).await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        spend()?;
        self.inner.answer(run, key, response).await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        spend()?;
        self.inner.locate(run_name).await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        spend_wait_read()?;
        self.inner.wait_for_change(run, last, wait).await
    }

    /// A page of logs is one engine call.
    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        spend()?;
        self.inner.logs(run, cursor, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scope_refuses_past_its_limit_and_nests_into_the_outer_one() {
        assert!(spend().is_ok(), "outside a scope nothing is counted");
        within(2, async {
            assert!(spend().is_ok());
            within(100, async { assert!(spend().is_ok()) }).await;
            let refused = spend().unwrap_err();
            assert!(
                matches!(
                    refused,
                    EngineError::Throttled {
                        retry_after: Some(_),
                        ..
                    }
                ),
                "{refused:?}"
            );
            assert!(refused.to_string().contains("server.max_engine_calls"));
        })
        .await;
        within(1, async {
            exempt(async {
                for _ in 0..3 {
                    assert!(spend().is_ok(), "a wait's reads are not counted");
                }
            })
            .await;
            assert!(spend().is_ok(), "a new request, a new budget");
            assert!(spend().is_err());
        })
        .await;
    }

    #[tokio::test]
    async fn a_waits_reads_count_against_its_callers_quota_only() {
        let server = crate::core::config::ServerConfig {
            max_wait_reads_per_minute: 2,
            ..Default::default()
        };
        let quotas = Arc::new(Quotas::new(&server));
        within_for(1, &quotas, "alice", async {
            assert!(spend().is_ok(), "the request's own call");
            exempt(async {
                assert!(spend().is_ok());
                assert!(spend_wait_read().is_ok());
                let refused = spend().unwrap_err();
                assert!(
                    refused
                        .to_string()
                        .contains("server.max_wait_reads_per_minute"),
                    "{refused}"
                );
            })
            .await;
        })
        .await;
        within_for(1, &quotas, "bob", async {
            exempt(async { assert!(spend().is_ok(), "another caller's own quota") }).await;
            assert!(spend().is_ok(), "the request's own call");
            assert!(spend().is_err(), "past server.max_engine_calls");
        })
        .await;
        let refused = |key| quotas.refusals.counter(key).get();
        assert_eq!(refused("max_wait_reads_per_minute"), 1);
        assert_eq!(refused("max_engine_calls"), 1);
        exempt(async {
            assert!(
                spend_wait_read().is_ok(),
                "outside a caller's scope: not counted"
            );
        })
        .await;
    }
}
