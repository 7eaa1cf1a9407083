//! The audit trail: one structured event, target `taskgate::audit`, for every
//! start, cancel and input answer, every read of a run (`tasks/get`, results,
//! logs, listen, SEP-1391 status), every handle or token that does not open,
//! and every attempt refused at the front door (credentials, `Host`, `Origin`)
//! or by an access rule or quota.
//!
//! An event holds the time (from the log subscriber), the caller, the peer it
//! came from (`IP:PORT` on HTTP, `stdio`), a request id (one per HTTP request
//! or stdio message; every event of one request carries the same), the
//! JSON-RPC method, the tool, the dialect, a short reference to the run, and the
//! outcome. An answer's event also names the caller who started the run
//! (`starter`) and, for an approval, the caller who gave or refused it
//! (`approver`). It never holds tool arguments, answers, tokens or task handles.
//!
//! The events have a sink of their own (see `taskgate serve --audit-log`): the
//! server's log filter (`TASKGATE_LOG`) neither selects nor silences them. The run reference is the first 12
//! hex digits of SHA-256 over the tool and the engine's native reference: one
//! run always gets the same reference, on every replica, and an operator who
//! knows a run (an execution ARN, a Job name) can compute it, but the reference
//! does not give the run back.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::handle::Dialect;

mod line;
pub mod sink;

pub use line::LineFormat;

/// The log target of audit events; their own sink takes every event of this
/// target at `info`, whatever `TASKGATE_LOG` says.
pub const TARGET: &str = "taskgate::audit";

/// What was attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Starting a run (a tool call).
    Start,
    /// Cancelling a run.
    Cancel,
    /// Answering a run's input request.
    Answer,
    /// Any request, refused at the front door (no valid credentials, a
    /// `Host` or `Origin` not allowed).
    Request,
    /// Reading a run: its status, result, logs, or a listen stream on it; a
    /// handle or operation token that does not open is a refused read.
    Read,
}

impl Action {
    /// The word written in the event.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Cancel => "cancel",
            Self::Answer => "answer",
            Self::Request => "request",
            Self::Read => "read",
        }
    }
}

/// How it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the engine accepted it.
    Ok,
    /// The engine was asked and failed (the server log has the error).
    Failed,
    /// Refused before any engine call, with a short reason word
    /// (`access_rule`, `insufficient_scope`, `invalid_token`, …).
    Refused(&'static str),
}

/// The dialect's name in events.
#[must_use]
pub fn dialect_label(d: Dialect) -> &'static str {
    d.label()
}

/// The short, non-reversible reference of a run in events.
#[must_use]
pub fn run_ref(tool: &str, native: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"taskgate run\0")
        .chain_update(tool.as_bytes())
        .chain_update(b"\0")
        .chain_update(native.as_bytes())
        .finalize();
    hex::encode(&digest[..6])
}

/// The socket address of an HTTP request's peer, as a request extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// The id of one request in audit events: a random prefix per process (so
/// replicas differ) and a counter, written `PREFIX-N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(u64);

impl RequestId {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    fn prefix() -> &'static str {
        static PREFIX: OnceLock<String> = OnceLock::new();
        PREFIX.get_or_init(|| super::handle::random_run_name()[3..11].to_owned())
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", Self::prefix(), self.0)
    }
}

/// Where a request came from, as events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// An HTTP peer's socket address.
    Socket(SocketAddr),
    /// An HTTP request whose transport did not say (`unknown`).
    Unknown,
    /// A stdio message (`stdio`).
    Stdio,
}

/// Who and what the events of one request are about, besides their own fields.
/// Made for every request, so it holds what it was given and writes it out only
/// when an event is written.
#[derive(Debug, Clone)]
pub struct Context {
    origin: Origin,
    request: RequestId,
    method: Box<str>,
}

tokio::task_local! {
    static CONTEXT: Context;
}

impl Context {
    /// The context of a new HTTP request from `peer` (`unknown` when the
    /// transport did not say) calling `method`, with a fresh request id. An
    /// entry of a batch gets an id of its own.
    #[must_use]
    pub fn new(peer: Option<SocketAddr>, method: &str) -> Self {
        Self {
            origin: peer.map_or(Origin::Unknown, Origin::Socket),
            request: RequestId::next(),
            method: method.into(),
        }
    }

    /// The context of a new stdio message calling `method` (peer `stdio`).
    #[must_use]
    pub fn stdio(method: &str) -> Self {
        Self {
            origin: Origin::Stdio,
            request: RequestId::next(),
            method: method.into(),
        }
    }

    /// The request id events of this request carry.
    #[must_use]
    pub fn request(&self) -> RequestId {
        self.request
    }
}

/// Runs `work` (the serving of one request) with `context`: every event it
/// records carries the peer, the request id and the method.
/// (Not an `async fn`: the future returned is no larger than `work`'s.)
pub fn scope<F: Future>(context: Context, work: F) -> impl Future<Output = F::Output> {
    CONTEXT.scope(context, work)
}

/// Writes one event of a request refused before it was read (`Host`,
/// `Origin`), from `peer`, with a request id of its own.
pub fn refused_at_door(peer: Option<SocketAddr>, reason: &'static str) {
    let context = Context::new(peer, "");
    CONTEXT.sync_scope(context, || {
        record(
            Action::Request,
            "",
            None,
            None,
            None,
            Outcome::Refused(reason),
        );
    });
}

/// Writes one audit event.
pub fn record(
    action: Action,
    caller: &str,
    tool: Option<&str>,
    dialect: Option<Dialect>,
    run: Option<&str>,
    outcome: Outcome,
) {
    emit(&Event {
        action,
        caller,
        starter: "",
        approver: "",
        tool: tool.unwrap_or(""),
        dialect,
        run,
        outcome,
    });
}

/// Who answered an input request of whose run: the answering caller, the
/// caller who started the run, and whether the question was an approval.
#[derive(Debug, Clone, Copy)]
pub struct Answerer<'a> {
    /// The caller answering.
    pub caller: &'a str,
    /// The caller who started the run.
    pub starter: &'a str,
    /// The question answered is an approval gate.
    pub approval: bool,
}

/// Writes the event of an answer (or a refused answer) to a run's input
/// request: as [`record`], with the run's `starter` and, for an approval, its
/// `approver`.
pub fn record_answer(
    who: Answerer<'_>,
    tool: &str,
    dialect: Option<Dialect>,
    run: Option<&str>,
    outcome: Outcome,
) {
    emit(&Event {
        action: Action::Answer,
        caller: who.caller,
        starter: who.starter,
        approver: if who.approval { who.caller } else { "" },
        tool,
        dialect,
        run,
        outcome,
    });
}

/// The fields of one event that its recorder gives (the peer, request id and
/// method come from the request's [`Context`]); empty strings for what does
/// not apply, so every event has the same fields.
struct Event<'a> {
    action: Action,
    caller: &'a str,
    starter: &'a str,
    approver: &'a str,
    tool: &'a str,
    dialect: Option<Dialect>,
    run: Option<&'a str>,
    outcome: Outcome,
}

fn emit(event: &Event<'_>) {
    if CONTEXT
        .try_with(|context| sink::write(event, Some(context)))
        .is_err()
    {
        sink::write(event, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_refs_are_short_stable_and_distinct() {
        let a = run_ref(
            "deploy",
            "arn:aws:states:us-east-1:123456789012:execution:x:1",
        );
        assert_eq!(a.len(), 12);
        assert_eq!(
            a,
            run_ref(
                "deploy",
                "arn:aws:states:us-east-1:123456789012:execution:x:1"
            )
        );
        assert_ne!(
            a,
            run_ref(
                "deploy",
                "arn:aws:states:us-east-1:123456789012:execution:x:2"
            )
        );
        assert_ne!(
            a,
            run_ref(
                "other",
                "arn:aws:states:us-east-1:123456789012:execution:x:1"
            )
        );
        assert!(!a.contains("123456789012"));
    }
}
