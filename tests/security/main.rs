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
//! - `audit`: audit answers who, from where, saw what (item 12).
//!
//! The chart's controls (item 13) are checked by `tests/helm/chart.sh`; the
//! dependency audit (item 14) by `scripts/audit.sh` under `.ci/run`.

mod arguments;
#[path = "../common/mod.rs"]
mod common;
mod references;
