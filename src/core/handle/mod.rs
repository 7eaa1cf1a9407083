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
//! The plaintext names the tool, the native run and the times, and, when
//! tracing sampled the request that started the run, the ids of its span
//! (`trace_ref.rs`: trace id, span id, flags; never `tracestate` or any text
//! of the caller's), so every later request on the task can link to it. The
//! caller's identity is associated data, so a handle presented by another
//! caller does not open. Any failure to open — unknown key, altered bytes,
//! another caller, expiry — is one and the same answer to the client: not found.
//!
//! Opening a handle is on the path of every request; AES-GCM-SIV runs on the
//! processor's AES and carry-less multiply instructions and opens a task handle
//! in a fraction of the time the `tg1` cipher takes (`scripts/profile.sh`).
//!
//! One concern a file: `keyring.rs` (keys, sealing and opening), `tg3.rs` (the
//! cipher of what is sealed now), `legacy.rs` (the generations that only
//! open), `claims.rs` (what a task handle holds), `trace_ref.rs` (the start
//! span it may name), `purpose.rs` (what a sealed value is for, bound into its
//! associated data) and `run_name.rs` (names derived for runs). This file
//! hands their names on, and keeps [`short`].

mod claims;
mod keyring;
mod legacy;
mod purpose;
mod run_name;
mod tg3;
mod trace_ref;

#[cfg(test)]
mod tests;

pub use claims::{unix_ms, Dialect, TaskClaims};
pub use keyring::{new_secret, secret_bytes, KeyError, Keyring, MIN_SECRET_BYTES};
pub use purpose::Purpose;
pub use run_name::{caller_tag, random_run_name};
pub use trace_ref::TraceRef;

/// The last characters of a handle, for logs (never the whole bearer secret).
#[must_use]
pub fn short(handle: &str) -> String {
    let start = handle.char_indices().rev().nth(7).map_or(0, |(at, _)| at);
    format!("…{}", &handle[start..])
}
