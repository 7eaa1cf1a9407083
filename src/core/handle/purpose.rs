//! What a sealed value is for, and the associated data that binds it to that
//! purpose, its generation, its key and its caller.

/// What a sealed value is for. The purpose is part of the associated data, so a
/// value sealed for one purpose never opens as another (a task handle is not a
/// session id, an input-request id is not a `requestState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A task handle (2026-07-28 and 2025-11-25 tasks, legacy `handles`).
    Task,
    /// A legacy `Mcp-Session-Id`: what a client negotiated at `initialize`.
    Session,
    /// The id of an input request taskgate sent (`elicitation/create`).
    Input,
    /// A 2026-07-28 `requestState` (an `input_required` result's resumption).
    RequestState,
    /// A `taskgate_logs` cursor: where a client's reading of a run's log stands.
    LogCursor,
    /// An approval ticket: one approval question of one run, with the caller
    /// who started the run. Sealed for no caller (any caller admitted by the
    /// tool's `answer_access` may present it), and only ever opened as a
    /// ticket: it reads no task, and no task handle opens as one.
    Approval,
}

impl Purpose {
    /// The label bound into the associated data. These strings are part of every
    /// sealed value already handed out: never change them.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Session => "session",
            Self::Input => "input",
            Self::RequestState => "mrtr",
            Self::LogCursor => "logs",
            Self::Approval => "approval",
        }
    }
}

/// The associated data of a sealed value: its prefix (the generation), purpose,
/// key id and caller, each length-prefixed.
pub(super) fn associated_data(
    prefix: &str,
    purpose: Purpose,
    key_id: &str,
    caller: &str,
) -> Vec<u8> {
    let purpose = purpose.label();
    let mut aad =
        Vec::with_capacity(prefix.len() + purpose.len() + key_id.len() + caller.len() + 16);
    for part in [prefix, purpose, key_id, caller] {
        aad.extend_from_slice(&(part.len() as u32).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}
