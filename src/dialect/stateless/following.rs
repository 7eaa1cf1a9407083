//! A listen stream once its request is served: the notifications of its runs'
//! changes, as a stream the transport drives.
//!
//! `subscriptions/listen` answers in two parts. The request (its headers,
//! params, checks, the first read of each run, the acknowledgement and the
//! first notifications) is served like any other and then freed. What stays
//! for the stream's life is a [`Following`]: per watched task, the stream's
//! own head of the notification, the last text sent and the watch of its run;
//! the stream's bounds (its wait slot, its watched runs, its gauge on
//! `/metrics`), held until it is dropped; and when it must end
//! (`server.max_listen`). Nothing of the request is kept, so an idle stream
//! costs what these hold, and a change reaches the transport without passing
//! through the layers that served the request.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use futures::stream::{SelectAll, Stream, StreamExt as _};
use tokio::sync::watch;

use super::notification::{render, same_pieces, Own};
use crate::core::metrics::Listening;
use crate::core::quota::Holding;
use crate::core::slots::WaitSlot;
use crate::core::watch::{Change, Seen};
use crate::dialect::wire::{Outbound, Outgoing};

/// The notifications of a listen stream after its request, until each of its
/// tasks is terminal or gone; its bounds are held until it is dropped.
pub struct Following {
    tasks: Tasks,
    /// Tasks not yet seen terminal (a task whose run is gone ends unseen).
    open: usize,
    deadline: tokio::time::Instant,
    _held: Held,
}

/// What a stream holds for its life, released when it is dropped (each
/// guard's `Drop` gives back what it holds; nothing reads them).
#[allow(dead_code)]
pub(super) struct Held {
    pub(super) slot: WaitSlot,
    pub(super) watched: Holding,
    pub(super) listening: Listening,
}

enum Tasks {
    One(Pin<Box<TaskStream>>),
    Many(SelectAll<Pin<Box<TaskStream>>>),
}

/// One watched task's notifications.
type TaskStream = dyn Stream<Item = Notification> + Send;

/// A notification, and whether it is the task's last.
struct Notification {
    message: Outgoing,
    terminal: bool,
}

/// A task whose run is watched: what its notifications hold of its own, and
/// the text last sent.
pub(super) struct Watched {
    pub(super) own: Own,
    pub(super) last: [Bytes; 3],
    pub(super) rx: watch::Receiver<std::sync::Arc<Change>>,
    /// The tool's `poll_interval` (the `pollIntervalMs` of the run's state).
    pub(super) poll_interval: Duration,
}

impl Following {
    pub(super) fn new(watched: Vec<Watched>, max_listen: Duration, held: Held) -> Self {
        let open = watched.len();
        let mut streams: Vec<_> = watched.into_iter().map(task_stream).collect();
        let tasks = if streams.len() == 1 {
            Tasks::One(streams.pop().expect("one"))
        } else {
            Tasks::Many(futures::stream::select_all(streams))
        };
        Self {
            tasks,
            open,
            deadline: tokio::time::Instant::now() + max_listen,
            _held: held,
        }
    }

    /// When the stream must end (`server.max_listen` after it opened).
    #[must_use]
    pub fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    /// Every task was seen terminal: nothing more will come.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.open == 0
    }

    /// Sends every notification on `out` until the stream ends by itself, at
    /// its deadline, or when `out`'s receiver is gone (stdio drives a stream
    /// so; HTTP interleaves keep-alive comments).
    pub async fn send_all(mut self, out: &Outbound) {
        let deadline = self.deadline;
        let all = async {
            while let Some(message) = self.next().await {
                if out.send(message).is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout_at(deadline, all).await.is_err() {
            reached_max_listen();
        }
    }
}

/// Logs that a stream reached `server.max_listen` (it then ends with its
/// closing result).
pub fn reached_max_listen() {
    tracing::debug!("a listen stream reached server.max_listen");
}

impl std::fmt::Debug for Following {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Following")
            .field("open", &self.open)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Stream for Following {
    type Item = Outgoing;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outgoing>> {
        if self.open == 0 {
            return Poll::Ready(None);
        }
        let next = match &mut self.tasks {
            Tasks::One(task) => task.poll_next_unpin(cx),
            Tasks::Many(tasks) => tasks.poll_next_unpin(cx),
        };
        match next {
            Poll::Ready(Some(n)) => {
                if n.terminal {
                    self.open -= 1;
                }
                Poll::Ready(Some(n.message))
            }
            Poll::Ready(None) => {
                self.open = 0;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The notifications of one task: one per change of its run's text, the last
/// when the run is terminal; the stream ends without one when the run is gone
/// or its watch ended.
fn task_stream(watched: Watched) -> Pin<Box<TaskStream>> {
    Box::pin(futures::stream::unfold(Some(watched), |state| async move {
        let mut w = state?;
        while w.rx.changed().await.is_ok() {
            let change = w.rx.borrow_and_update().clone();
            let Seen::Run(snapshot) = change.seen() else {
                return None;
            };
            let poll_interval = w.poll_interval;
            let rendered = change.rendered(|seen| render(poll_interval, seen));
            let next = w.own.pieces(snapshot, rendered);
            let terminal = snapshot.state.is_terminal();
            if !same_pieces(&next, &w.last) {
                w.last = next.clone();
                let message = Outgoing::Pieces(next.to_vec());
                let state = (!terminal).then_some(w);
                return Some((Notification { message, terminal }, state));
            }
            if terminal {
                return None;
            }
        }
        None
    }))
}
