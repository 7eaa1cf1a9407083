//! The watches of open listen streams: one per (tool, run), shared by every
//! stream that watches that run, and gone with the last of them.
//!
//! A watch is a small task that asks the engine for changes of one run
//! ([`taskgate_engine::Pipeline::wait_for_change`], paced by the tool's poll
//! interval, or the engine's native watch) and publishes each new snapshot to
//! its subscribers. It keeps nothing beyond the last snapshot it saw and ends
//! as soon as its last subscriber is dropped (the stream closed or was
//! cancelled), when the run is terminal, or when the engine no longer knows the
//! run: a watch never outlives the requests that asked for it.
//!
//! What a watch publishes is a [`Change`]: the run's state, and a slot for
//! the text its subscribers write for that state. The first subscriber to
//! need the text writes it; every other one sends the same bytes, so a change
//! seen by 10,000 streams is written once, not 10,000 times.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use taskgate_engine::{EngineError, Pipeline, Snapshot};
use tokio::sync::watch;

/// What a watch last saw of its run.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// The run as of its latest read.
    Run(Snapshot),
    /// The engine no longer knows the run.
    Gone,
}

/// One published state of a watched run, shared by every subscriber.
#[derive(Debug)]
pub struct Change {
    seen: Seen,
    rendered: OnceLock<Vec<Bytes>>,
}

impl Change {
    fn new(seen: Seen) -> Arc<Self> {
        Arc::new(Self {
            seen,
            rendered: OnceLock::new(),
        })
    }

    /// What the watch saw.
    #[must_use]
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// The text the subscribers write for this state, made by `render` the
    /// first time it is asked for and shared after that. Every subscriber of
    /// a watch must render a state the same way (one dialect, one tool):
    /// `render` sees the run's state only, never a subscriber's request.
    pub fn rendered(&self, render: impl FnOnce(&Seen) -> Vec<Bytes>) -> &[Bytes] {
        self.rendered.get_or_init(|| render(&self.seen))
    }
}

type Key = (String, String);

/// The watches of one server, by (tool, run).
#[derive(Debug, Default)]
pub struct Watches {
    runs: Mutex<HashMap<Key, watch::Sender<Arc<Change>>>>,
}

impl Watches {
    /// Watches open right now (for tests and `/metrics`).
    #[must_use]
    pub fn open(&self) -> usize {
        self.runs.lock().expect("lock").len()
    }

    /// Subscribes to the run `native` of `tool`: joins its watch, or starts one
    /// from `seed` (a snapshot the caller just read). The receiver holds the
    /// latest snapshot; it is marked changed when that differs from `seed`.
    pub fn subscribe(
        self: &Arc<Self>,
        tool: &str,
        pipeline: &Arc<dyn Pipeline>,
        native: &str,
        poll: Duration,
        seed: &Snapshot,
    ) -> watch::Receiver<Arc<Change>> {
        let key = (tool.to_owned(), native.to_owned());
        let mut runs = self.runs.lock().expect("lock");
        if let Some(tx) = runs.get(&key) {
            let mut rx = tx.subscribe();
            if !matches!(&rx.borrow_and_update().seen, Seen::Run(s) if s == seed) {
                rx.mark_changed();
            }
            return rx;
        }
        let (tx, rx) = watch::channel(Change::new(Seen::Run(seed.clone())));
        runs.insert(key.clone(), tx.clone());
        drop(runs);
        let hub = Arc::clone(self);
        let pipeline = Arc::clone(pipeline);
        let seed = seed.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tx.closed() => {}
                () = follow(&*pipeline, &key.1, poll, seed, &tx) => {}
            }
            let mut runs = hub.runs.lock().expect("lock");
            if runs.get(&key).is_some_and(|t| t.same_channel(&tx)) {
                runs.remove(&key);
            }
        });
        rx
    }
}

/// Publishes every change of the run until it is terminal or gone. Engine
/// trouble (throttling, an unreachable engine) is waited out at the poll
/// interval, never published.
async fn follow(
    pipeline: &dyn Pipeline,
    native: &str,
    poll: Duration,
    seed: Snapshot,
    tx: &watch::Sender<Arc<Change>>,
) {
    let native = native.to_owned();
    let mut last = seed;
    while !last.state.is_terminal() {
        // The engine may ask for a longer pace (GitHub, when its rate budget
        // runs low): never faster than the tool's poll interval.
        let pace = last.poll_hint.map_or(poll, |hint| hint.max(poll));
        match pipeline.wait_for_change(&native, &last, pace).await {
            Ok(snapshot) => {
                if snapshot != last {
                    tx.send_replace(Change::new(Seen::Run(snapshot.clone())));
                }
                last = snapshot;
            }
            Err(EngineError::NotFound) => {
                tx.send_replace(Change::new(Seen::Gone));
                return;
            }
            Err(e) => {
                let pause = match &e {
                    EngineError::Throttled {
                        retry_after: Some(after),
                        ..
                    } => (*after).max(poll),
                    _ => poll,
                };
                tracing::debug!(error = %e, "a watched run could not be read; trying again");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use taskgate_engine::{Capabilities, NativeRef, RunState, StartRequest};

    /// A run that keeps working and counts the reads of its watchers.
    #[derive(Default)]
    struct Counting {
        reads: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Pipeline for Counting {
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        async fn start(&self, _: StartRequest) -> Result<NativeRef, EngineError> {
            Err(EngineError::unsupported("start"))
        }
        async fn read(&self, _: &NativeRef) -> Result<Snapshot, EngineError> {
            let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Snapshot::new(RunState::Working {
                message: Some(format!("read {n}")),
                progress: None,
            }))
        }
    }

    /// A run whose reads ask for a longer pace, and the waits it was given.
    #[derive(Default)]
    struct Hinting {
        waits: Mutex<Vec<Duration>>,
    }

    #[async_trait::async_trait]
    impl Pipeline for Hinting {
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        async fn start(&self, _: StartRequest) -> Result<NativeRef, EngineError> {
            Err(EngineError::unsupported("start"))
        }
        async fn read(&self, _: &NativeRef) -> Result<Snapshot, EngineError> {
            Err(EngineError::unsupported("read"))
        }
        async fn wait_for_change(
            &self,
            _: &NativeRef,
            last: &Snapshot,
            wait: Duration,
        ) -> Result<Snapshot, EngineError> {
            self.waits.lock().unwrap().push(wait);
            tokio::time::sleep(wait).await;
            let mut next = last.clone();
            next.poll_hint = Some(Duration::from_millis(1));
            Ok(next)
        }
    }

    #[tokio::test]
    async fn a_watch_keeps_to_the_pace_the_engine_asks_for_never_faster_than_the_tool() {
        let hub = Arc::new(Watches::default());
        let hinting = Arc::new(Hinting::default());
        let pipeline: Arc<dyn Pipeline> = hinting.clone();
        let poll = Duration::from_millis(5);
        let mut seed = working();
        seed.poll_hint = Some(Duration::from_millis(40));
        let rx = hub.subscribe("t", &pipeline, "run", poll, &seed);
        until("two waits", || hinting.waits.lock().unwrap().len() >= 2).await;
        drop(rx);
        let waits = hinting.waits.lock().unwrap().clone();
        assert_eq!(waits[0], Duration::from_millis(40), "the engine's hint");
        assert_eq!(
            waits[1], poll,
            "a hint below the poll interval is not taken"
        );
    }

    fn working() -> Snapshot {
        Snapshot::new(RunState::Working {
            message: None,
            progress: None,
        })
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn subscribers_of_one_run_share_one_watch_that_ends_with_the_last() {
        let hub = Arc::new(Watches::default());
        let counting = Arc::new(Counting::default());
        let pipeline: Arc<dyn Pipeline> = counting.clone();
        let poll = Duration::from_millis(20);
        let mut a = hub.subscribe("t", &pipeline, "run", poll, &working());
        let mut b = hub.subscribe("t", &pipeline, "run", poll, &working());
        let other = hub.subscribe("t", &pipeline, "other", poll, &working());
        assert_eq!(hub.open(), 2, "one watch per run, shared");
        // Both subscribers get the changes the one watch reads.
        a.changed().await.unwrap();
        b.changed().await.unwrap();
        drop(other);
        until("the unwatched run's watch ends", || hub.open() == 1).await;
        drop((a, b));
        until("no watch after the last subscriber", || hub.open() == 0).await;
        let reads = counting.reads.load(Ordering::SeqCst);
        tokio::time::sleep(poll * 5).await;
        assert_eq!(
            counting.reads.load(Ordering::SeqCst),
            reads,
            "no read once nobody watches"
        );
    }
}
