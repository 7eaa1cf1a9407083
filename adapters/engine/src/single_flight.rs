//! Single-flight reads: concurrent reads of one run share one engine call.
//!
//! A read that arrives while another read of the same run is in flight waits for
//! that call's answer instead of making its own; the entry is removed the moment
//! the call returns, so the next read after it asks the engine again. Nothing is
//! kept: this is not a cache, only a meeting point for requests that overlap in
//! time. For remote engines it is what protects an upstream API from a crowd of
//! pollers.
//!
//! A read that starts a call first lets the requests already ready on its
//! thread run (one `yield_now`), so those for the same run join it instead of
//! queueing behind it. An engine whose reads block (exec: local files) asks
//! [`read_is_shared`] whether anyone joined: alone, it reads on the spot; with
//! a crowd waiting, it hands the read to a worker thread, which keeps the
//! async threads serving and lets more of the crowd join while it runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::{BoxFuture, FutureExt, Shared};

use crate::error::EngineError;
use crate::logs::LogPage;
use crate::pipeline::{Capabilities, NativeRef, Pipeline, StartRequest};
use crate::state::{InputResponse, Snapshot};

type SharedRead = Shared<BoxFuture<'static, Result<Snapshot, Arc<EngineError>>>>;

tokio::task_local! {
    /// Set around an engine read made by [`SingleFlight`]: whether other
    /// requests joined it before it began.
    static SHARED: bool;
}

/// Called from inside an engine's `read`: whether other requests were already
/// waiting on this read when it began (a crowd polling one run). `false`
/// outside a [`SingleFlight`] read.
#[must_use]
pub fn read_is_shared() -> bool {
    SHARED.try_with(|shared| *shared).unwrap_or(false)
}

/// The reads in flight, by run: an id (so a finished call removes only its own
/// entry) and the shared call.
type InFlight = Mutex<HashMap<NativeRef, (u64, SharedRead, Arc<AtomicUsize>)>>;

/// A pipeline whose concurrent reads of one run share one call. Every other
/// operation passes straight through.
pub struct SingleFlight {
    inner: Arc<dyn Pipeline>,
    in_flight: Arc<InFlight>,
    next_id: AtomicU64,
}

impl SingleFlight {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Pipeline>) -> Self {
        Self {
            inner,
            in_flight: Arc::default(),
            next_id: AtomicU64::new(0),
        }
    }

    /// How many runs have a read in flight right now (zero when idle: nothing
    /// outlives the calls).
    #[must_use]
    pub fn reads_in_flight(&self) -> usize {
        self.in_flight.lock().expect("lock").len()
    }
}

/// One waiter on a shared read. When the last waiter goes away before the call
/// finished (every request was cancelled), the entry goes too, so a later read
/// never joins a call nobody drives any more.
struct Waiter {
    in_flight: Arc<InFlight>,
    run: NativeRef,
    id: u64,
    call: SharedRead,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut map = self.in_flight.lock().expect("lock");
        let ours = map.get(&self.run).is_some_and(|(id, ..)| *id == self.id);
        // Ours, and only the map's copy and this waiter's are left.
        if ours && self.call.strong_count().is_some_and(|n| n <= 2) {
            map.remove(&self.run);
        }
    }
}

#[async_trait]
impl Pipeline for SingleFlight {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        self.inner.start(request).await
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let waiter = {
            let mut map = self.in_flight.lock().expect("lock");
            match map.get(run) {
                Some((id, call, joined)) => {
                    joined.fetch_add(1, Ordering::Relaxed);
                    Waiter {
                        in_flight: self.in_flight.clone(),
                        run: run.clone(),
                        id: *id,
                        call: call.clone(),
                    }
                }
                None => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let inner = self.inner.clone();
                    let in_flight = self.in_flight.clone();
                    let key = run.clone();
                    let joined = Arc::new(AtomicUsize::new(0));
                    let joiners = joined.clone();
                    let call = async move {
                        // Requests ready on this thread join before the read
                        // begins, rather than queue behind it.
                        tokio::task::yield_now().await;
                        let shared = joiners.load(Ordering::Relaxed) > 0;
                        let outcome = SHARED
                            .scope(shared, inner.read(&key))
                            .await
                            .map_err(Arc::new);
                        // Returned: the next read asks the engine again.
                        let mut map = in_flight.lock().expect("lock");
                        if map.get(&key).is_some_and(|(entry, ..)| *entry == id) {
                            map.remove(&key);
                        }
                        outcome
                    }
                    .boxed()
                    .shared();
                    map.insert(run.clone(), (id, call.clone(), joined));
                    Waiter {
                        in_flight: self.in_flight.clone(),
                        run: run.clone(),
                        id,
                        call,
                    }
                }
            }
        };
        let mut waiter = waiter;
        // Polled in place: the map's copy and this waiter's are the only ones.
        let outcome = (&mut waiter.call).await;
        drop(waiter);
        outcome.map_err(|e| Arc::try_unwrap(e).unwrap_or_else(|shared| shared.duplicate()))
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.inner.cancel(run).await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.inner.answer(run, key, response).await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        self.inner.locate(run_name).await
    }

    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        self.inner.wait_for_change(run, last, wait).await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        self.inner.check().await
    }

    /// Not single-flighted: each client reads from its own cursor.
    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        self.inner.logs(run, cursor, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RunState;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Notify;

    /// Counts reads; each read waits until released.
    #[derive(Default)]
    struct Gate {
        reads: AtomicUsize,
        release: Notify,
        /// [`read_is_shared`] as each read found it.
        shared: Mutex<Vec<bool>>,
    }

    #[async_trait]
    impl Pipeline for Gate {
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        async fn start(&self, _: StartRequest) -> Result<NativeRef, EngineError> {
            Err(EngineError::unsupported("start"))
        }
        async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
            let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
            self.shared.lock().unwrap().push(read_is_shared());
            self.release.notified().await;
            if run == "missing" {
                return Err(EngineError::unavailable(
                    "down",
                    std::io::Error::other("refused"),
                ));
            }
            Ok(Snapshot::new(RunState::working(format!("read {n}"))))
        }
    }

    async fn until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn concurrent_reads_share_one_call_and_nothing_outlives_it() {
        let gate = Arc::new(Gate::default());
        let p = Arc::new(SingleFlight::new(gate.clone()));
        let run: NativeRef = "r".into();
        let mut waiting = Vec::new();
        for _ in 0..50 {
            let (p, run) = (p.clone(), run.clone());
            waiting.push(tokio::spawn(async move { p.read(&run).await }));
        }
        until("the first read reaches the engine", || {
            gate.reads.load(Ordering::SeqCst) == 1
        })
        .await;
        // Let every request join before the engine answers.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        gate.release.notify_waiters();
        for w in waiting {
            let snapshot = w.await.unwrap().unwrap();
            assert_eq!(snapshot.state, RunState::working("read 1"));
        }
        assert_eq!(
            gate.reads.load(Ordering::SeqCst),
            1,
            "one engine call for 50 reads"
        );
        assert_eq!(p.reads_in_flight(), 0, "nothing kept after the call");
        assert_eq!(
            *gate.shared.lock().unwrap(),
            [true],
            "the engine is told a crowd waits on its read"
        );
    }

    #[tokio::test]
    async fn a_read_nobody_joined_is_not_shared() {
        let gate = Arc::new(Gate::default());
        let p = Arc::new(SingleFlight::new(gate.clone()));
        let (p2, run) = (p.clone(), "r".to_owned());
        let read = tokio::spawn(async move { p2.read(&run).await });
        until("the read reaches the engine", || {
            gate.reads.load(Ordering::SeqCst) == 1
        })
        .await;
        gate.release.notify_waiters();
        read.await.unwrap().unwrap();
        assert_eq!(*gate.shared.lock().unwrap(), [false]);
        // Outside a single-flight read the answer is no.
        assert!(!read_is_shared());
        let direct = tokio::spawn({
            let gate = gate.clone();
            async move { gate.read(&"r".to_owned()).await }
        });
        until("the direct read", || gate.reads.load(Ordering::SeqCst) == 2).await;
        gate.release.notify_waiters();
        direct.await.unwrap().unwrap();
        assert_eq!(*gate.shared.lock().unwrap(), [false, false]);
    }

    #[tokio::test]
    async fn reads_one_after_another_each_ask_the_engine() {
        let gate = Arc::new(Gate::default());
        let p = Arc::new(SingleFlight::new(gate.clone()));
        for expected in 1..=2 {
            let (p2, run) = (p.clone(), "r".to_owned());
            let read = tokio::spawn(async move { p2.read(&run).await });
            until("the read reaches the engine", || {
                gate.reads.load(Ordering::SeqCst) == expected
            })
            .await;
            gate.release.notify_waiters();
            let snapshot = read.await.unwrap().unwrap();
            assert_eq!(
                snapshot.state,
                RunState::working(format!("read {expected}"))
            );
        }
        assert_eq!(p.reads_in_flight(), 0);
    }

    #[tokio::test]
    async fn followers_get_the_error_too_and_abandoned_calls_are_forgotten() {
        let gate = Arc::new(Gate::default());
        let p = Arc::new(SingleFlight::new(gate.clone()));
        let run: NativeRef = "missing".into();
        let a = {
            let (p, run) = (p.clone(), run.clone());
            tokio::spawn(async move { p.read(&run).await })
        };
        until("first read", || gate.reads.load(Ordering::SeqCst) == 1).await;
        let b = {
            let (p, run) = (p.clone(), run.clone());
            tokio::spawn(async move { p.read(&run).await })
        };
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        gate.release.notify_waiters();
        for outcome in [a.await.unwrap(), b.await.unwrap()] {
            let e = outcome.unwrap_err();
            assert!(matches!(e, EngineError::Unavailable { .. }), "{e:?}");
            assert!(e.is_retryable());
        }
        assert_eq!(gate.reads.load(Ordering::SeqCst), 1);

        // A read whose every waiter is cancelled leaves nothing behind.
        let c = {
            let (p, run) = (p.clone(), "r".to_owned());
            tokio::spawn(async move { p.read(&run).await })
        };
        until("second call", || gate.reads.load(Ordering::SeqCst) == 2).await;
        assert_eq!(p.reads_in_flight(), 1);
        c.abort();
        let _ = c.await;
        assert_eq!(p.reads_in_flight(), 0, "an abandoned call is forgotten");
    }
}
