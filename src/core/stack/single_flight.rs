//! Single-flight reads: concurrent reads of one run share one engine call.
//!
//! A read that arrives while another read of the same run is in flight waits for
//! that call's answer instead of making its own; the entry is removed the moment
//! the call returns, so the next read after it asks the engine again. Nothing is
//! kept: this is not a cache, only a meeting point for requests that overlap in
//! time. For remote engines it is what protects an upstream API from a crowd of
//! pollers.
//!
//! A read that starts a call gathers its crowd before it asks the engine: it
//! lets the requests already ready on its thread run first (one
//! `yield_now`), so those for the same run join it instead of queueing behind
//! it; when some did (a crowd is polling the run), it gives the crowd more
//! turns, as long as each turn brings more of it, up to [`GATHER_TURNS`].
//! Every request that joins this way arrived before the engine was asked, so
//! its answer is as fresh as a read of its own would have been. A read nobody
//! joins costs one turn.
//!
//! Requests waiting on another thread than the read's are woken through a
//! relay: the first of them on each thread waits on the read, the others on
//! it. When the read answers, one wake-up crosses to each such thread instead
//! of one per waiting request (on a server whose connections each live on
//! one thread, a wake-up across threads is a system call; one on the same
//! thread is not).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::channel::oneshot;
use futures::future::{FutureExt, Shared};
use taskgate_engine::{EngineError, NativeRef, Pipeline, Snapshot};

use super::Layer;

/// One read's answer, as its followers get it.
type Answer = Result<Snapshot, Arc<EngineError>>;
/// What followers wait on: the answer, or `Canceled` when the request leading
/// the read went away before it answered.
type SharedAnswer = Shared<oneshot::Receiver<Answer>>;

/// How many more turns a read a crowd has joined gives the crowd to gather,
/// each turn letting every request ready on the thread run; gathering stops
/// early at a turn that brings nobody.
pub const GATHER_TURNS: usize = 2;

/// A thread requests wait on.
type Lane = std::thread::ThreadId;

/// A read in flight.
struct Flight {
    /// Tells this read from a later one of the same run, so a finished read
    /// removes only its own entry.
    id: u64,
    /// The answer, as the requests on the leading request's thread (and the
    /// relays) wait on it.
    answer: SharedAnswer,
    /// How many requests joined.
    joined: Arc<AtomicUsize>,
    /// The thread of the leading request.
    lane: Lane,
    /// The relay of each other thread requests wait on: its id and the answer
    /// as it passes it on.
    relays: HashMap<Lane, (u64, SharedAnswer)>,
}

/// The reads in flight, by run.
type InFlight = Mutex<HashMap<NativeRef, Flight>>;

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

    /// How many requests joined the read of `run` in flight, and how many
    /// relays they have (zero when no read is in flight).
    #[cfg(test)]
    fn crowd(&self, run: &NativeRef) -> (usize, usize) {
        self.in_flight
            .lock()
            .expect("lock")
            .get(run)
            .map_or((0, 0), |f| {
                (f.joined.load(Ordering::Relaxed), f.relays.len())
            })
    }
}

/// The entry of the read a request leads. Dropped when the read has
/// answered, or when the request goes away first (cancelled): either way the
/// entry goes with it, so the next request reads again (followers still
/// waiting learn the leader left, and one of them leads a new read).
struct Lead {
    in_flight: Arc<InFlight>,
    run: NativeRef,
    id: u64,
}

impl Lead {
    /// Removes the entry; returns how many requests joined the read.
    fn close(&self) -> usize {
        let mut map = self.in_flight.lock().expect("lock");
        match map.get(&self.run) {
            Some(flight) if flight.id == self.id => {
                let joined = flight.joined.load(Ordering::Relaxed);
                map.remove(&self.run);
                joined
            }
            _ => 0,
        }
    }
}

/// The place of a relay in the read it waits on. Dropped when the relay's
/// request goes away before the answer: its place goes with it, so the
/// requests that waited on it (they learn it left) rejoin the read, and one
/// of them relays in its stead.
struct RelayPlace {
    in_flight: Arc<InFlight>,
    run: NativeRef,
    flight: u64,
    lane: Lane,
    id: u64,
}

impl Drop for RelayPlace {
    fn drop(&mut self) {
        let mut map = self.in_flight.lock().expect("lock");
        if let Some(flight) = map.get_mut(&self.run).filter(|f| f.id == self.flight) {
            if flight
                .relays
                .get(&self.lane)
                .is_some_and(|(id, _)| *id == self.id)
            {
                flight.relays.remove(&self.lane);
            }
        }
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        self.close();
    }
}

/// A request's part in a read: it leads it, follows one in flight (on the
/// read's thread, or through its thread's relay), or relays it to its thread.
enum Part {
    Leads(Lead, oneshot::Sender<Answer>, Arc<AtomicUsize>),
    Follows(SharedAnswer),
    Relays(RelayPlace, SharedAnswer, oneshot::Sender<Answer>),
}

/// An answer as the request that waited for it returns it.
fn returned(answer: Answer) -> Result<Snapshot, EngineError> {
    answer.map_err(|e| Arc::try_unwrap(e).unwrap_or_else(|shared| shared.duplicate()))
}

/// Lets the crowd of a read gather before the engine is asked: one turn of
/// the thread (every request ready on it runs first, and those for the same
/// run join), then, while each turn brings more of the crowd, up to
/// [`GATHER_TURNS`] more. The turns are the leading request's own yields:
/// the requests waiting on the read are not woken by them.
async fn gather(joined: &AtomicUsize) {
    tokio::task::yield_now().await;
    let mut seen = joined.load(Ordering::Relaxed);
    let mut turns = 0;
    while seen > 0 && turns < GATHER_TURNS {
        tokio::task::yield_now().await;
        let now = joined.load(Ordering::Relaxed);
        if now == seen {
            break;
        }
        seen = now;
        turns += 1;
    }
}

// Only reads meet; logs are not single-flighted (each client reads from its
// own cursor).
impl Layer for SingleFlight {
    fn inner(&self) -> &dyn Pipeline {
        &*self.inner
    }

    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        let lane = std::thread::current().id();
        loop {
            let part = {
                let mut map = self.in_flight.lock().expect("lock");
                match map.get_mut(run) {
                    Some(flight) => {
                        flight.joined.fetch_add(1, Ordering::Relaxed);
                        if flight.lane == lane {
                            Part::Follows(flight.answer.clone())
                        } else if let Some((_, relayed)) = flight.relays.get(&lane) {
                            Part::Follows(relayed.clone())
                        } else {
                            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                            let (tx, rx) = oneshot::channel();
                            flight.relays.insert(lane, (id, rx.shared()));
                            let place = RelayPlace {
                                in_flight: self.in_flight.clone(),
                                run: run.clone(),
                                flight: flight.id,
                                lane,
                                id,
                            };
                            Part::Relays(place, flight.answer.clone(), tx)
                        }
                    }
                    None => {
                        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                        let (tx, rx) = oneshot::channel();
                        let joined = Arc::new(AtomicUsize::new(0));
                        map.insert(
                            run.clone(),
                            Flight {
                                id,
                                answer: rx.shared(),
                                joined: joined.clone(),
                                lane,
                                relays: HashMap::new(),
                            },
                        );
                        let lead = Lead {
                            in_flight: self.in_flight.clone(),
                            run: run.clone(),
                            id,
                        };
                        Part::Leads(lead, tx, joined)
                    }
                }
            };
            match part {
                Part::Follows(answer) => {
                    // `Canceled`: the leading request (or the relay) went away
                    // before the engine answered; ask again (one of those
                    // asking leads, or relays).
                    if let Ok(answer) = answer.await {
                        return returned(answer);
                    }
                }
                Part::Relays(place, answer, tx) => {
                    // `Canceled`: the leading request went away; dropping `tx`
                    // tells those waiting on this relay to ask again too.
                    if let Ok(answer) = answer.await {
                        drop(place);
                        // Someone waits on this relay while its answer is held.
                        if !tx.is_canceled() {
                            let _ = tx.send(answer.clone());
                        }
                        return returned(answer);
                    }
                }
                Part::Leads(lead, tx, joined) => {
                    gather(&joined).await;
                    let outcome = self.inner.read(run).await;
                    // Answered: the next read asks the engine again.
                    if lead.close() > 0 {
                        let _ = tx.send(match &outcome {
                            Ok(snapshot) => Ok(snapshot.clone()),
                            Err(e) => Err(Arc::new(e.duplicate())),
                        });
                    }
                    return outcome;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    use taskgate_engine::{async_trait, Capabilities, RunState, StartRequest};
    use tokio::sync::Notify;

    /// Counts reads; each read waits until released, or answers at once.
    #[derive(Default)]
    struct Gate {
        reads: AtomicUsize,
        release: Notify,
        answers_at_once: bool,
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
            if !self.answers_at_once {
                self.release.notified().await;
            }
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
    }

    /// Requests for the same run: two at once (the first leads, the second
    /// makes it a crowd), then one more in each of the next `turns` turns of
    /// the thread (as requests arrive from the network: spawned, ready to
    /// run); returns the engine reads they made.
    async fn arriving_one_per_turn(turns: usize) -> usize {
        let engine = Arc::new(Gate {
            answers_at_once: true,
            ..Gate::default()
        });
        let p = Arc::new(SingleFlight::new(engine.clone()));
        let request = |p: Arc<SingleFlight>| {
            tokio::spawn(async move { p.read(&"r".to_owned()).await.unwrap() })
        };
        let mut requests = vec![request(p.clone()), request(p.clone())];
        let arrivals = {
            let p = p.clone();
            tokio::spawn(async move {
                let mut requests = Vec::new();
                for _ in 0..turns {
                    requests.push(request(p.clone()));
                    tokio::task::yield_now().await;
                }
                requests
            })
        };
        requests.extend(arrivals.await.unwrap());
        for request in requests {
            request.await.unwrap();
        }
        assert_eq!(p.reads_in_flight(), 0);
        engine.reads.load(Ordering::SeqCst)
    }

    /// An engine that answers at once: only requests that join before the
    /// read begins share it, so this shows the gathering.
    #[tokio::test]
    async fn a_crowd_that_keeps_arriving_is_gathered_into_one_read() {
        assert_eq!(
            arriving_one_per_turn(GATHER_TURNS).await,
            1,
            "a crowd arriving one request per turn shares one read"
        );
    }

    #[tokio::test]
    async fn gathering_ends_after_its_turns() {
        let reads = arriving_one_per_turn(4 * GATHER_TURNS).await;
        assert!(
            reads > 1,
            "a crowd that never stops arriving is not held up past {GATHER_TURNS} turns"
        );
    }

    #[tokio::test]
    async fn a_lone_read_asks_the_engine_after_one_turn() {
        let engine = Arc::new(Gate {
            answers_at_once: true,
            ..Gate::default()
        });
        let p = Arc::new(SingleFlight::new(engine.clone()));
        let leader = {
            let p = p.clone();
            tokio::spawn(async move { p.read(&"r".to_owned()).await })
        };
        // The leader's first turn, then its read: a request that comes two
        // turns later finds it done and reads again.
        let late = {
            let p = p.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                p.read(&"r".to_owned()).await
            })
        };
        leader.await.unwrap().unwrap();
        late.await.unwrap().unwrap();
        assert_eq!(engine.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn followers_of_a_cancelled_read_ask_again() {
        let gate = Arc::new(Gate::default());
        let p = Arc::new(SingleFlight::new(gate.clone()));
        let spawn =
            |p: Arc<SingleFlight>| tokio::spawn(async move { p.read(&"r".to_owned()).await });
        let leader = spawn(p.clone());
        let follower = spawn(p.clone());
        until("the first read", || gate.reads.load(Ordering::SeqCst) == 1).await;
        leader.abort();
        let _ = leader.await;
        // The follower leads a read of its own, which answers it.
        until("the second read", || gate.reads.load(Ordering::SeqCst) == 2).await;
        gate.release.notify_waiters();
        let snapshot = follower.await.unwrap().unwrap();
        assert_eq!(snapshot.state, RunState::working("read 2"));
        assert_eq!(p.reads_in_flight(), 0);
    }

    /// A second thread with its own event loop, as a serving lane is.
    fn other_thread() -> (tokio::runtime::Handle, impl Drop) {
        struct Stop(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Stop {
            fn drop(&mut self) {
                let _ = self.0.take().map(|s| s.send(()));
            }
        }
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            handle_tx.send(rt.handle().clone()).unwrap();
            let _ = rt.block_on(stop_rx);
        });
        (handle_rx.recv().unwrap(), Stop(Some(stop_tx)))
    }

    /// A gated engine behind single-flight, and a second thread to read from.
    fn on_two_threads() -> (
        Arc<Gate>,
        Arc<SingleFlight>,
        tokio::runtime::Handle,
        impl Drop,
    ) {
        let gate = Arc::new(Gate::default());
        let p = Arc::new(SingleFlight::new(gate.clone()));
        let (there, stop) = other_thread();
        (gate, p, there, stop)
    }

    /// A read of run `r`, to spawn on either thread.
    async fn read(p: Arc<SingleFlight>) -> Result<Snapshot, EngineError> {
        p.read(&"r".to_owned()).await
    }

    #[tokio::test]
    async fn a_crowd_on_another_thread_shares_the_read_through_one_relay() {
        let (gate, p, there, _stop) = on_two_threads();
        let mut requests = vec![tokio::spawn(read(p.clone())), tokio::spawn(read(p.clone()))];
        until("the read reaches the engine", || {
            gate.reads.load(Ordering::SeqCst) == 1
        })
        .await;
        for _ in 0..5 {
            requests.push(there.spawn(read(p.clone())));
        }
        until("the other thread's crowd joins", || {
            p.crowd(&"r".to_owned()).0 == 6
        })
        .await;
        assert_eq!(
            p.crowd(&"r".to_owned()),
            (6, 1),
            "the five requests of the other thread wait through one relay"
        );
        gate.release.notify_waiters();
        for request in requests {
            let snapshot = request.await.unwrap().unwrap();
            assert_eq!(snapshot.state, RunState::working("read 1"));
        }
        assert_eq!(gate.reads.load(Ordering::SeqCst), 1);
        assert_eq!(p.reads_in_flight(), 0);
    }

    #[tokio::test]
    async fn the_crowd_of_a_relay_that_went_away_rejoins_the_read() {
        let (gate, p, there, _stop) = on_two_threads();
        let leader = tokio::spawn(read(p.clone()));
        until("the read reaches the engine", || {
            gate.reads.load(Ordering::SeqCst) == 1
        })
        .await;
        let relay = there.spawn(read(p.clone()));
        until("the relay joins", || p.crowd(&"r".to_owned()) == (1, 1)).await;
        let follower = there.spawn(read(p.clone()));
        until("its follower joins", || p.crowd(&"r".to_owned()).0 == 2).await;
        relay.abort();
        assert!(relay.await.unwrap_err().is_cancelled());
        // The follower learns its relay left, joins the read again and
        // relays in its stead: still one read in flight.
        until("the follower relays", || p.crowd(&"r".to_owned()) == (3, 1)).await;
        gate.release.notify_waiters();
        let snapshot = follower.await.unwrap().unwrap();
        assert_eq!(snapshot.state, RunState::working("read 1"));
        leader.await.unwrap().unwrap();
        assert_eq!(gate.reads.load(Ordering::SeqCst), 1);
        assert_eq!(p.reads_in_flight(), 0);
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
