//! The audit trail: one structured event, target `taskgate::audit`, for every
//! start, cancel and input answer, and for every attempt refused at the front
//! door or by an access rule.
//!
//! An event holds the time (from the log subscriber), the caller, the tool, the
//! dialect, a short reference to the run, and the outcome. An answer's event
//! also names the caller who started the run (`starter`) and, for an approval,
//! the caller who gave or refused it (`approver`). It never holds tool
//! arguments, answers, tokens or task handles. The run reference is the first 12
//! hex digits of SHA-256 over the tool and the engine's native reference: one
//! run always gets the same reference, on every replica, and an operator who
//! knows a run (an execution ARN, a Job name) can compute it, but the reference
//! does not give the run back.

use sha2::{Digest, Sha256};

use super::handle::Dialect;

/// The log target of audit events (`TASKGATE_LOG=taskgate::audit=info` keeps
/// only them).
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
    /// Any request, refused at the front door (no valid credentials).
    Request,
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
    match d {
        Dialect::TasksExtension => "tasks-2026-07-28",
        Dialect::TasksSep1686 => "tasks-2025-11-25",
        Dialect::PlainHandle => "plain",
    }
}

/// The short, non-reversible reference of a run in events.
#[must_use]
pub fn run_ref(tool: &str, native: &str) -> String {
    let digest = Sha256::digest(format!("taskgate run\0{tool}\0{native}").as_bytes());
    hex::encode(&digest[..6])
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
    let (word, reason) = match outcome {
        Outcome::Ok => ("ok", ""),
        Outcome::Failed => ("failed", ""),
        Outcome::Refused(why) => ("refused", why),
    };
    tracing::info!(
        target: TARGET,
        action = action.label(),
        caller = caller,
        tool = tool.unwrap_or(""),
        dialect = dialect.map_or("", dialect_label),
        run = run.unwrap_or(""),
        outcome = word,
        reason = reason,
        "audit"
    );
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
    let (word, reason) = match outcome {
        Outcome::Ok => ("ok", ""),
        Outcome::Failed => ("failed", ""),
        Outcome::Refused(why) => ("refused", why),
    };
    tracing::info!(
        target: TARGET,
        action = Action::Answer.label(),
        caller = who.caller,
        starter = who.starter,
        approver = if who.approval { who.caller } else { "" },
        approval = who.approval,
        tool = tool,
        dialect = dialect.map_or("", dialect_label),
        run = run.unwrap_or(""),
        outcome = word,
        reason = reason,
        "audit"
    );
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
