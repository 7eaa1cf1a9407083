//! The threat model as executable checks (README "Security").
//!
//! Trusted: the operator, the configuration file, the engines. Not trusted: MCP
//! callers (on any interface), tool arguments, pipeline output, other local users.
//! Each module stands where an attacker stands — another host, another caller,
//! another user on the box, a hostile argument or line of output — and asserts the
//! refusal, through the built binary where the behaviour is the binary's.
//!
//! One module per control, numbered as in the issue that set them:
//!
//! - `front_door`: no anonymous network access; OAuth defaults closed; keys
//!   (items 1, 5, 10);
//! - `exec_env`: exec tools never see taskgate's secrets (item 2);
//! - `arguments`: arguments are held to their schema (item 3);
//! - `approvals`: approvals are given by someone allowed to approve (item 4);
//! - `introspection`: introspection is bounded (item 6);
//! - `lookups`: SEP-1391 look-ups bounded and checked; per-caller quotas (items 7, 8);
//! - `references`: forged references go nowhere (item 9);
//! - `terminal`: the terminal client shows text, not escape codes (item 11);
//! - `audit`: audit answers who, from where, saw what (item 12);
//! - `deploy`: `/metrics` on a port of its own that serves no MCP (item 13, the
//!   server's part); the dependency audit refuses a vulnerable or unmaintained
//!   crate and a missing database, and passes `Cargo.lock` (item 14).
//!
//! The chart's controls (items 1 and 13: no anonymous standalone deployment, the
//! NetworkPolicy, secret modes, token mounting, the admission policy on a real API
//! server) are checked by `tests/helm/chart.sh`; `.ci/run` runs `scripts/audit.sh`.

#[path = "../common/mod.rs"]
mod common;

mod approvals;
mod audit;
mod deploy;
mod exec_env;
mod front_door;
mod introspection;
mod lookups;
mod terminal;
