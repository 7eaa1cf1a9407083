//! The threads that serve HTTP connections: `server.workers` lanes, each a
//! thread with its own single-threaded event loop. The listener hands every
//! connection it accepts to the next lane in turn, and the connection lives
//! on that lane until it closes: its requests, their engine reads and the
//! wake-ups between them stay on one thread.
//!
//! Why not one work-stealing pool for every connection: a `tasks/get` that
//! waits for a read another request leads (single-flight) is woken when the
//! read answers, and in a shared pool each such wake-up, and each turn the
//! leading read yields to gather its crowd, may rouse an idle worker to steal
//! it, which costs a system call and a context switch per request. A lane
//! wakes nobody but itself; a connection's requests are served one after
//! another anyway, so nothing waits on a busy lane that a pool would have run
//! sooner, apart from requests of other connections on it.

use std::io;
use std::num::NonZeroUsize;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// One lane: its event loop, and what stops it.
struct Lane {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The serving lanes. Dropping them stops every lane: connections still open
/// on one are closed (the server has given them their grace period by then).
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
    next: usize,
}

impl Lanes {
    /// Starts `count` lanes, threads named `taskgate-lane-N`, each with a
    /// standing timer due every `tick` (see [`standing_timer`]).
    ///
    /// # Errors
    ///
    /// When a thread or its event loop cannot be made (out of threads or file
    /// descriptors).
    pub(crate) fn start(count: NonZeroUsize, tick: Duration) -> io::Result<Self> {
        let mut lanes = Vec::with_capacity(count.get());
        for n in 0..count.get() {
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("taskgate-lane-{n}"))
                .spawn(move || {
                    // The lane's read audit lines go out together as its
                    // event loop goes idle (see `core::audit::sink`), and
                    // what is kept when the lane ends is written as it ends.
                    let _batch = crate::core::audit::sink::Batch::start();
                    let runtime = match Builder::new_current_thread()
                        .enable_all()
                        .on_thread_park(crate::core::audit::sink::flush)
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(runtime.handle().clone()));
                    // Runs the lane's connections until told to stop (or until
                    // the lanes are gone).
                    runtime.block_on(async move {
                        tokio::select! {
                            _ = stop_rx => {}
                            () = standing_timer(tick) => {}
                        }
                    });
                    // Whatever is left is cut off: nothing waits on it.
                    runtime.shutdown_background();
                })?;
            let handle = ready_rx
                .recv()
                .map_err(|_| io::Error::other("a serving lane ended as it started"))??;
            lanes.push(Lane {
                handle,
                stop: Some(stop_tx),
                thread: Some(thread),
            });
        }
        Ok(Self { lanes, next: 0 })
    }

    /// The lane the next connection goes to (each in turn).
    pub(crate) fn next(&mut self) -> &Handle {
        let lane = &self.lanes[self.next];
        self.next = (self.next + 1) % self.lanes.len();
        &lane.handle
    }

    /// How many lanes serve.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lanes.len()
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        for lane in &mut self.lanes {
            if let Some(stop) = lane.stop.take() {
                let _ = stop.send(());
            }
        }
        // A lane stops at once (its remaining tasks are dropped, not awaited),
        // so waiting for its thread is short.
        for lane in &mut self.lanes {
            if let Some(thread) = lane.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// A timer that is always set on its lane, due within `tick`; it never ends.
///
/// Why: the event loop learns when its next timer is due only as it goes to
/// sleep, and a timer set while it knows of none due sooner wakes it (a system
/// call) so it can sleep again with the new deadline in mind. Every request sets
/// timers (the header and body deadlines, the engine call's): on a busy lane
/// whose requests' timers had all been cleared, that was one system call for
/// nearly every request. With this timer always due sooner than theirs (`tick`
/// is shorter than the server's shortest deadline), setting theirs wakes
/// nothing. Its own cost: one wake-up of an idle lane per `tick`; it reads
/// nothing and calls no engine.
async fn standing_timer(tick: Duration) {
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
    }
}

/// The tick of the lanes' standing timer: half the shortest of `deadlines`,
/// at most 5 s and at least 10 ms.
pub(crate) fn tick_within(deadlines: &[Duration]) -> Duration {
    let shortest = deadlines
        .iter()
        .copied()
        .min()
        .unwrap_or(Duration::from_secs(10));
    (shortest / 2).clamp(Duration::from_millis(10), Duration::from_secs(5))
}

/// How many lanes to start: `server.workers` when set, else one per CPU this
/// process may use (a container's CPU quota counts).
pub(crate) fn lane_count(workers: Option<usize>) -> NonZeroUsize {
    workers
        .and_then(NonZeroUsize::new)
        .or_else(|| std::thread::available_parallelism().ok())
        .unwrap_or(NonZeroUsize::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    #[tokio::test]
    async fn connections_go_to_each_lane_in_turn_and_stay_there() {
        let mut lanes =
            Lanes::start(NonZeroUsize::new(3).unwrap(), Duration::from_secs(5)).unwrap();
        assert_eq!(lanes.len(), 3);
        let mut names = Vec::new();
        for _ in 0..6 {
            // A "connection" that is served in several steps, each after a
            // wake-up: every step runs on the lane it was handed to.
            let served = lanes.next().spawn(async {
                let first = lane_name();
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    assert_eq!(lane_name(), first, "a connection moved between lanes");
                }
                first
            });
            names.push(served.await.unwrap());
        }
        assert_eq!(
            names,
            [
                "taskgate-lane-0",
                "taskgate-lane-1",
                "taskgate-lane-2",
                "taskgate-lane-0",
                "taskgate-lane-1",
                "taskgate-lane-2"
            ]
        );
    }

    #[tokio::test]
    async fn dropping_the_lanes_cuts_off_what_they_still_serve() {
        let mut lanes =
            Lanes::start(NonZeroUsize::new(2).unwrap(), Duration::from_secs(5)).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        // A connection that would never end on its own; it holds `tx`.
        let stuck = lanes.next().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        drop(lanes);
        // Its task was dropped with its lane: `tx` is gone, the join handle
        // says cancelled.
        assert!(rx.await.is_err());
        assert!(stuck.await.unwrap_err().is_cancelled());
    }

    #[test]
    fn the_tick_is_due_before_any_deadline() {
        let secs = Duration::from_secs;
        assert_eq!(tick_within(&[secs(10), secs(30), secs(15)]), secs(5));
        assert_eq!(tick_within(&[secs(30), secs(4)]), secs(2));
        assert_eq!(tick_within(&[secs(60)]), secs(5));
        assert_eq!(
            tick_within(&[Duration::from_millis(1)]),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn the_count_is_the_setting_or_one_per_cpu() {
        assert_eq!(lane_count(Some(3)).get(), 3);
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(lane_count(None).get(), cpus);
    }
}
