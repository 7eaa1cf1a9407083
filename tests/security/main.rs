//! The threat model as executable checks (README "Security").
//!
//! Trusted: the operator, the configuration file, the engines. Not trusted: MCP
//! callers (on any interface), tool arguments, answers, pipeline output, other
//! local users. Each module stands where an attacker stands — another host,
//! another caller, another user on the box, a hostile argument or line of
//! output — and asserts the refusal, through the built binary where the
//! behaviour is the binary's. The items are those of the issue that set them.
//!
//! - `front_door`: no anonymous network access (a peer in a network namespace,
//!   not loopback), a missing `Host`, OAuth closed by default, keys that carry
//!   32 random bytes, no working key in the example, `dev_secret` only on
//!   loopback (items 1, 5, 10);
//! - `exec_env`: exec tools never see taskgate's secrets; `run_as`; the spool's
//!   owner and mode; the result size cap (items 2, 10);
//! - `arguments`: arguments are held to their schema; one mapping to env names
//!   (item 3);
//! - `approvals`: `answer_access`, four eyes, no approval inside the creating
//!   call (item 4);
//! - `introspection`: one issuer per opaque token, cached answers, the per-peer
//!   failure limit (item 6);
//! - `lookups`: SEP-1391 look-ups only over the caller's tools and rated;
//!   per-caller quotas; stdio and HTTP token namespaces apart (items 7, 8);
//! - `references`: a sealed reference outside the tool's target goes nowhere
//!   (item 9);
//! - `terminal`: the terminal client shows text, not escape codes; bounds; the
//!   plain-http warning (item 11);
//! - `audit`: who, from where, saw what, on a sink the log filter cannot
//!   silence (item 12);
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
mod arguments;
mod audit;
mod deploy;
mod exec_env;
mod front_door;
mod introspection;
mod lookups;
mod references;
mod terminal;
