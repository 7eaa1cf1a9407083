//! The engine contract of taskgate: what an engine implements and what it
//! returns, nothing the server does around it.
//!
//! Each of the five engines (exec, Step Functions, Kubernetes, GitHub Actions,
//! Airflow) implements [`Engine`] and [`Pipeline`] and translates its native run
//! state into the one canonical [`RunState`]. This crate holds those traits, the
//! run state and snapshot types, the typed [`EngineError`] and [`ConfigError`],
//! log pages and their bounds, [`arguments_env`] (the one mapping from a tool's
//! arguments to environment variables), [`http`] (the one mapping from an HTTP
//! status to an [`EngineError`], percent-encoding, the shared `Answer`) and [`testing`] (helpers every engine's
//! tests use). It does no I/O of its own: translation lives in pure functions in
//! each engine crate. The server talks to engines only through these traits,
//! and wraps every pipeline in its own layers (deadlines, retried cancels,
//! single-flight reads, the per-request call budget: `src/core/stack/` of the
//! server), so an engine writes none of them.

mod discover;
mod env;
mod error;
pub mod http;
mod logs;
mod pipeline;
mod state;
pub mod testing;
mod trace;

pub use discover::{DiscoverOptions, Discovered};
pub use env::canonical_json;
pub use env::{arg_env_name, arg_env_value, arguments_env};
pub use error::{BoxError, ConfigError, EngineError};
pub use logs::{
    log_limit, LogLine, LogPage, DEFAULT_LOG_LINES, MAX_CURSOR_BYTES, MAX_LINE_BYTES,
    MAX_LOG_LINES, MAX_PAGE_BYTES,
};
pub use pipeline::{from_value, Capabilities, Engine, NativeRef, Pipeline, StartRequest, ToolDecl};
pub use state::{
    Content, InputAction, InputRequest, InputResponse, Progress, RunState, Snapshot, ToolOutput,
};
pub use trace::{TraceContext, TraceContextError, MAX_TRACESTATE_BYTES};

/// Re-exported so engines implement the traits with the same macro version.
pub use async_trait::async_trait;

/// A stable short hash (lowercase hex) of `parts`, for deriving native names and
/// comparing inputs. Not a secret: the server derives run names with a keyed MAC
/// before they reach engines.
#[must_use]
pub fn spec_hash(bytes: &[u8]) -> String {
    // FNV-1a, 64 bits: deterministic across builds and platforms.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
