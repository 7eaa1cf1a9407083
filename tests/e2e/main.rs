//! The server end to end, through the built binary, with exec tools only: one
//! test binary (so `tests/common` is compiled once for all of these), one
//! module per area. Needs the `exec` feature (`required-features` in
//! `Cargo.toml`).
//!
//! A test's name is its module path: `cargo test --test e2e core_http::`
//! runs one area, `cargo test --test e2e core_http::NAME` one test.
//!
//! - `core_http`, `core_stdio`: the core over Streamable HTTP and over stdio;
//! - `dialects_legacy`, `dialects_sep1391`: the older protocol versions;
//! - `auth_oauth`: OAuth 2.1 access tokens from a real authorization server;
//! - `http2`: h2c on the MCP port (`server.http2`), with curl and a raw client;
//! - `bounds`, `shutdown`, `config_check`: the front door's limits, SIGTERM,
//!   configuration errors;
//! - `logs`, `metrics`, `notifications`: `taskgate_logs`, `/metrics`, push
//!   notifications;
//! - `dashboard`: every panel of the Grafana dashboard against a real
//!   Prometheus scraping taskgate;
//! - `cli_call`: `taskgate call` and `taskgate tasks`;
//! - `host_config`: `taskgate host-config`, each host's entry; `log_colour`:
//!   colour in log lines only on a terminal;
//! - `rmcp_client`: the Rust MCP SDK as a client;
//! - `trace_links`: span links from every request on a task to its start.
//! - `traces`: OpenTelemetry traces, read back from Jaeger.
//!
//! Adding a file: put `tests/e2e/NAME.rs` next to this one, start it with
//! `use crate::common;` (not `mod common;`), and add `mod NAME;` below. Tests
//! that need an engine other than exec go to `tests/engines/` instead.

#[path = "../common/mod.rs"]
mod common;

mod auth_oauth;
mod bounds;
mod cli_call;
mod config_check;
mod core_http;
mod core_stdio;
mod dashboard;
mod dialects_legacy;
mod dialects_sep1391;
mod host_config;
mod http2;
mod log_colour;
mod logs;
mod metrics;
mod notifications;
mod rmcp_client;
mod shutdown;
mod trace_links;
mod traces;
