//! Shared helpers of all integration tests (the groups `tests/e2e/`,
//! `tests/engines/`, `tests/faults/`, `tests/security/`, each compiling this once):
//!
//! - [`setup`]: a temporary configuration, either with exec tools that run the
//!   scripts in `tests/tools/` (the core tools, the dialect tools, or any
//!   [`Tool`]s) or with a body the test writes (engine end-to-end tests);
//! - [`server`]: the real `taskgate` binary serving HTTP on a free loopback
//!   port, or stdio;
//! - [`client`]: one reply type and raw JSON-RPC clients over HTTP: [`Client`]
//!   speaks 2026-07-28 with the tasks extension, [`Legacy`] holds an
//!   `initialize` session (2025-06-18, 2025-11-25, SEP-1391); both read JSON
//!   and SSE answers;
//! - [`procs`]: the processes a run left behind;
//! - [`proxy`]: a raw TCP proxy in front of an upstream that the test can
//!   make refuse or hang, counting what it carries;
//! - [`airflow`]: Airflow's access log, each request with when it was made;
//! - [`wait_for`]: the one polling helper.
//!
//! Every wait is a condition polled against a deadline; nothing sleeps and hopes.

#![allow(dead_code, unused_imports)]

pub mod airflow;
pub mod client;
pub mod cluster;
pub mod jaeger;
pub mod procs;
pub mod proxy;
pub mod server;
pub mod setup;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use client::{
    assert_bound_refusal, assert_detailed_task, header, mcp_name, modern_meta, modern_meta_as,
    names, sse_data, sse_messages, text, tool, Client, Legacy, Reply, SseReader,
};
pub use procs::{alive, group_members, recorded_pid};
pub use proxy::{Mode, TcpProxy};
pub use server::{free_port, metric_sum, Private, Server, StdioServer};
pub use setup::{
    core_tools, dialect_tools, more_fields, toml_str, tool_entry, Bearer, Options, Setup, Tool,
    LABEL_SCHEMA, TOOL_NAMES, WORK_SCHEMA,
};

/// The environment variable the test configs name as their sealing key.
pub const KEY_VAR: &str = "TASKGATE_TEST_KEY_K1";
/// Its value (set on the server child only, never in the test process): the
/// base64 text of 32 random bytes, as `taskgate keygen` prints.
pub const KEY_SECRET: &str = "Y5rcJ1P+CkxVbkLsLp16HbL7CjoCSs39qwx5BTxDZlo=";
/// The 2026-07-28 protocol version.
pub const MODERN: &str = "2026-07-28";
/// The tasks extension id.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";
/// The SEP-1391 opt-in capability key.
pub const SEP1391: &str = "taskgate/sep-1391";
/// The related-task `_meta` key of 2025-11-25.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The taskgate binary cargo built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_taskgate"))
}

/// The absolute path of a script in `tests/tools/`.
pub fn tool_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tools")
        .join(name)
}

/// What one look of [`wait_for`] found: done (`Some(v)` / `Ok(v)`), or not yet
/// (`None`, or `Err(what was seen)` for the failure message).
pub trait Looked<T> {
    /// `Ok` when done, else what was seen.
    fn looked(self) -> Result<T, String>;
}

impl<T> Looked<T> for Option<T> {
    fn looked(self) -> Result<T, String> {
        self.ok_or_else(|| "not yet".to_owned())
    }
}

impl<T> Looked<T> for Result<T, String> {
    fn looked(self) -> Result<T, String> {
        self
    }
}

/// Polls `check` every 100 ms until it is done (`Some` or `Ok`), or panics
/// after `limit` naming `what` and the last thing `check` saw.
pub async fn wait_for<T, L: Looked<T>>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> L,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let last = match check().await.looked() {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last seen: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
