//! What the core refuses or fails with, and the small mappings onto it.

use taskgate_engine::EngineError;

use crate::core::slots::Full;

/// What the core refuses or fails with. Dialects turn these into their wire
/// errors (one mapping, in `rpc.rs`); the core knows nothing of JSON-RPC.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// No tool has this name.
    #[error("Unknown tool: {0}")]
    UnknownTool(String),
    /// The arguments fail the tool's input schema (or name arguments it does not
    /// declare); nothing reached the engine.
    #[error("Invalid arguments for tool {tool}: {}", problems.join("; "))]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// One line per failing field.
        problems: Vec<String>,
    },
    /// The handle does not open (forged, altered, foreign, expired, unknown) or
    /// the engine no longer has the run: alike for every reason.
    #[error("not found")]
    NotFound,
    /// The tool's engine cannot stop a run.
    #[error("Tool {0} cannot be cancelled: its engine has no way to stop a run")]
    NotCancellable(String),
    /// An answer to an input request is malformed or does not fit its schema.
    #[error("{0}")]
    InvalidAnswer(String),
    /// A bound on blocking requests is reached; retry later.
    #[error("taskgate is busy: {0}; retry later")]
    Busy(Full),
    /// A per-caller quota is used up; retry later. Nothing reached the engine.
    #[error("{0}")]
    OverQuota(crate::core::quota::Exceeded),
    /// The engine said something the client must hear.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The caller's credentials lack scopes the tool's access rule asks for; a
    /// token with them would be admitted (step-up). Nothing reached the engine.
    #[error("Tool {tool} needs the scope {}", scopes.join(" "))]
    InsufficientScope {
        /// The tool.
        tool: String,
        /// The scopes that would admit the caller.
        scopes: Vec<String>,
    },
    /// The tool's access rule does not admit the caller to cancel its runs, or
    /// its `answer_access` to answer them. Nothing reached the engine.
    #[error("Not allowed to act on runs of tool {0}")]
    Forbidden(String),
    /// A `taskgate_logs` cursor does not open for this caller and run (forged,
    /// altered, another run's). Nothing reached the engine.
    #[error("{0}")]
    InvalidCursor(String),
    /// The tool's engine keeps no logs taskgate can read.
    #[error("Tool {0} has no logs taskgate can read: its engine does not keep them")]
    NoLogs(String),
    /// An answer to an approval gate that this caller may not give here: inside
    /// the call that started the run, or (four eyes) by the run's starter.
    /// Nothing reached the engine.
    #[error("{message}")]
    ApprovalRefused {
        /// The audit reason word (`approval_in_call`, `four_eyes`).
        reason: &'static str,
        /// What the client is told.
        message: String,
    },
}

/// The audit reason word of an access refusal.
pub(super) fn refusal_reason(refusal: &CoreError) -> &'static str {
    match refusal {
        CoreError::InsufficientScope { .. } => "insufficient_scope",
        _ => "access_rule",
    }
}

/// An engine's "no such run" is the core's [`CoreError::NotFound`].
pub(super) fn not_found(e: EngineError) -> CoreError {
    match e {
        EngineError::NotFound => CoreError::NotFound,
        other => CoreError::Engine(other),
    }
}
