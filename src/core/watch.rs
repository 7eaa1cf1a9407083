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

    /// A change as a watch would publish it, for tests of its subscribers.
    #[cfg(test)]
    pub(crate) fn for_test(seen: Seen) -> Arc<Self> {
        Self::new(seen)
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
///
/// Subscribers do not hang on a watch directly but on a relay of it, one per
/// serving thread (runtime) that has subscribers of the run: a change wakes
/// each relay once, and each relay wakes its subscribers on its own thread.
/// Thousands of streams on two lanes are then woken by two cross-thread
/// wake-ups, not thousands, and each lane sends its streams' notifications
/// in the order they were woken, before the work that arrives meanwhile (a
/// task woken from another thread waits behind the lane's own).
#[derive(Debug, Default)]
pub struct Watches {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: HashMap<Key, watch::Sender<Arc<Change>>>,
    relays: HashMap<(Key, tokio::runtime::Id), watch::Sender<Arc<Change>>>,
}

/// Replaces `slot` with `change` unless it holds that very change.
fn offer(slot: &watch::Sender<Arc<Change>>, change: &Arc<Change>) {
    slot.send_if_modified(|held| {
        let new = !Arc::ptr_eq(held, change);
        if new {
            *held = Arc::clone(change);
        }
        new
    });
}

impl Watches {
    /// Watches open right now (for tests and `/metrics`).
    #[must_use]
    pub fn open(&self) -> usize {
        self.inner.lock().expect("lock").runs.len()
    }

    /// Relays open right now (for tests).
    #[cfg(test)]
    fn relays(&self) -> usize {
        self.inner.lock().expect("lock").relays.len()
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
        let lane = tokio::runtime::Handle::current().id();
        let mut inner = self.inner.lock().expect("lock");
        let main = match inner.runs.get(&key) {
            Some(main) => main.clone(),
            None => self.start(&mut inner, key.clone(), pipeline, poll, seed),
        };
        let relay_key = (key, lane);
        let mut rx = match inner.relays.get(&relay_key) {
            Some(relay) => {
                // The relay may not have passed the latest change on yet.
                offer(relay, &main.borrow());
                relay.subscribe()
            }
            None => self.relay(&mut inner, relay_key, main.subscribe()),
        };
        drop(inner);
        if !matches!(&rx.borrow_and_update().seen, Seen::Run(s) if s == seed) {
            rx.mark_changed();
        }
        rx
    }

    /// Starts the watch of `key`'s run, seeded with `seed`.
    fn start(
        self: &Arc<Self>,
        inner: &mut Inner,
        key: Key,
        pipeline: &Arc<dyn Pipeline>,
        poll: Duration,
        seed: &Snapshot,
    ) -> watch::Sender<Arc<Change>> {
        let (tx, _) = watch::channel(Change::new(Seen::Run(seed.clone())));
        inner.runs.insert(key.clone(), tx.clone());
        let hub = Arc::clone(self);
        let pipeline = Arc::clone(pipeline);
        let seed = seed.clone();
        let main = tx.clone();
        tokio::spawn(async move {
            let following = follow(&*pipeline, &key.1, poll, seed, &tx);
            tokio::pin!(following);
            loop {
                tokio::select! {
                    () = tx.closed() => {
                        // A relay may have joined since the last one left.
                        let mut inner = hub.inner.lock().expect("lock");
                        if tx.receiver_count() == 0 {
                            if inner.runs.get(&key).is_some_and(|t| t.same_channel(&tx)) {
                                inner.runs.remove(&key);
                            }
                            return;
                        }
                    }
                    () = &mut following => break,
                }
            }
            let mut inner = hub.inner.lock().expect("lock");
            if inner.runs.get(&key).is_some_and(|t| t.same_channel(&tx)) {
                inner.runs.remove(&key);
            }
        });
        main
    }

    /// Starts the relay of `from` on this thread, for `key`.
    fn relay(
        self: &Arc<Self>,
        inner: &mut Inner,
        key: (Key, tokio::runtime::Id),
        mut from: watch::Receiver<Arc<Change>>,
    ) -> watch::Receiver<Arc<Change>> {
        let (tx, rx) = watch::channel(Arc::clone(&from.borrow_and_update()));
        inner.relays.insert(key.clone(), tx.clone());
        let hub = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tx.closed() => {
                        // A subscriber may have joined since the last one left.
                        let mut inner = hub.inner.lock().expect("lock");
                        if tx.receiver_count() == 0 {
                            if inner.relays.get(&key).is_some_and(|t| t.same_channel(&tx)) {
                                inner.relays.remove(&key);
                            }
                            return;
                        }
                    }
                    changed = from.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let change = Arc::clone(&from.borrow_and_update());
                        offer(&tx, &change);
                    }
                }
            }
            let mut inner = hub.inner.lock().expect("lock");
            if inner.relays.get(&key).is_some_and(|t| t.same_channel(&tx)) {
                inner.relays.remove(&key);
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

    /// Two serving threads, two subscribers each on one run: one watch, one
    /// relay per thread, every subscriber sees the changes, and nothing is
    /// left once they are gone.
    #[test]
    fn each_thread_relays_the_one_watch_to_its_own_subscribers() {
        let hub = Arc::new(Watches::default());
        let counting = Arc::new(Counting::default());
        let pipeline: Arc<dyn Pipeline> = counting.clone();
        let all_subscribed = Arc::new(std::sync::Barrier::new(3));
        let checked = Arc::new(std::sync::Barrier::new(3));
        let lanes: Vec<_> = (0..2)
            .map(|_| {
                let (hub, pipeline) = (hub.clone(), pipeline.clone());
                let (all_subscribed, checked) = (all_subscribed.clone(), checked.clone());
                std::thread::spawn(move || {
                    let lane = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    lane.block_on(async {
                        let poll = Duration::from_millis(20);
                        let mut a = hub.subscribe("t", &pipeline, "run", poll, &working());
                        let mut b = hub.subscribe("t", &pipeline, "run", poll, &working());
                        a.changed().await.unwrap();
                        b.changed().await.unwrap();
                        all_subscribed.wait();
                        checked.wait();
                        // Changes keep coming through this thread's relay.
                        let seen = a.borrow_and_update().clone();
                        a.changed().await.unwrap();
                        assert!(!Arc::ptr_eq(&seen, &a.borrow_and_update()));
                        drop((a, b));
                        until("no relay and no watch left", || {
                            hub.relays() == 0 && hub.open() == 0
                        })
                        .await;
                    });
                })
            })
            .collect();
        all_subscribed.wait();
        assert_eq!(hub.open(), 1, "one watch for the run");
        assert_eq!(hub.relays(), 2, "one relay per thread");
        checked.wait();
        for lane in lanes {
            lane.join().unwrap();
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
