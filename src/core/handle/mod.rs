//! Sealed handles: task ids and session ids that carry their own state.
//!
//! A handle reads `tg3.<key id>.<base64url(nonce ‖ ciphertext)>`: AES-256-GCM-SIV
//! with a random 96-bit nonce (misuse-resistant: even a repeated nonce reveals
//! no more than that two handles are equal), under a key derived from the
//! configured secret with HKDF-SHA256 for that generation alone; the run-name
//! MAC key is derived apart from it. A secret is the base64 text of at least 32
//! random bytes (`taskgate keygen` makes one).
//!
//! Handles sealed by earlier releases still open, so an upgrade loses no task:
//! `tg2` (AES-256-GCM-SIV) and `tg1` (XChaCha20-Poly1305, 192-bit nonce), both
//! under the one key those releases derived from the secret's text with
//! SHA-256. That key only opens; nothing is sealed under it any more. Run
//! names those releases derived are not looked up again: a SEP-1391 token
//! retried across the upgrade starts a new run.
//!
//! The plaintext names the tool, the native run and the times;
//! the caller's identity is associated data, so a handle presented by another
//! caller does not open. Any failure to open — unknown key, altered bytes,
//! another caller, expiry — is one and the same answer to the client: not found.
//!
//! Opening a handle is on the path of every request; AES-GCM-SIV runs on the
//! processor's AES and carry-less multiply instructions and opens a task handle
//! in a fraction of the time the `tg1` cipher takes (`scripts/profile.sh`).
//!
//! One concern a file: `keyring.rs` (keys, sealing and opening), `tg3.rs` (the
//! cipher of what is sealed now), `legacy.rs` (the generations that only
//! open), `claims.rs` (what a task handle holds) and `run_name.rs` (names
//! derived for runs).

mod claims;
mod keyring;
mod legacy;
mod run_name;
mod tg3;

#[cfg(test)]
mod tests;

use std::time::{SystemTime, UNIX_EPOCH};

pub use claims::{Dialect, TaskClaims};
pub use keyring::{new_secret, secret_bytes, KeyError, Keyring, MIN_SECRET_BYTES};
pub use run_name::{caller_tag, random_run_name};

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

/// The last characters of a handle, for logs (never the whole bearer secret).
#[must_use]
pub fn short(handle: &str) -> String {
    let start = handle.char_indices().rev().nth(7).map_or(0, |(at, _)| at);
    format!("…{}", &handle[start..])
}

/// Milliseconds since the Unix epoch.
#[must_use]
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
