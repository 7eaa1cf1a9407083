//! The engine API of taskgate.
//!
//! Every engine (exec, Step Functions, Kubernetes, GitHub Actions, Airflow) implements
//! [`Engine`] and [`Pipeline`] and translates its native run state into the one
//! canonical [`RunState`]. This crate does no I/O of its own: translation lives in
//! pure functions in each engine crate, and the server talks to engines only
//! through these traits, wrapped in the [`Deadlines`] and [`SingleFlight`] layers.

mod env;
mod error;
pub mod http;
mod layer;
mod logs;
mod pipeline;
mod retry;
mod single_flight;
mod state;
pub mod testing;

pub use env::canonical_json;
pub use env::{arg_env_name, arg_env_value, arguments_env};
pub use error::{BoxError, ConfigError, EngineError};
pub use layer::{CallLabels, CallMeter, Deadlines, ErrorLabels, ToolMeter};
pub use logs::{
    log_limit, LogLine, LogPage, DEFAULT_LOG_LINES, MAX_CURSOR_BYTES, MAX_LINE_BYTES,
    MAX_LOG_LINES, MAX_PAGE_BYTES,
};
pub use pipeline::{from_value, Capabilities, Engine, NativeRef, Pipeline, StartRequest, ToolDecl};
pub use retry::{retrying, RetryCancel};
pub use single_flight::{SingleFlight, GATHER_TURNS};
pub use state::{
    Content, InputAction, InputRequest, InputResponse, Progress, RunState, Snapshot, ToolOutput,
};

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
