//! Each engine through the built binary, against its real service or the most
//! faithful emulator (moto, a Kubernetes control plane with kwok nodes, the
//! GitHub double, Airflow): one test binary (so `tests/common` is compiled once
//! for all of them), one module per former test file, each compiled only when
//! the build has its engine's Cargo feature.
//!
//! A test's name is its module path: `cargo test --test engines
//! engine_kubernetes::` runs one engine's tests.
//!
//! Adding an engine's tests (e.g. `engine_temporal`):
//!
//! 1. put them in `tests/engines/engine_NAME.rs`, starting with
//!    `use crate::common;` (not `mod common;`);
//! 2. add `#[cfg(feature = "NAME")] mod engine_NAME;` below, with the engine's
//!    feature (a test that also needs exec tools: `all(feature = "NAME",
//!    feature = "exec")`);
//! 3. in scripts and docs, run them as `cargo test --test engines engine_NAME::`.
//!
//! A test that skips without its service (`e2e_endpoint`) does so here as it
//! did on its own. The fault-injection suite is its own binary
//! (`tests/faults/main.rs`).

#[path = "../common/mod.rs"]
mod common;

/// `taskgate discover` on the GitHub double and the real Airflow.
#[cfg(any(feature = "github", feature = "airflow"))]
mod discover;
#[cfg(feature = "airflow")]
mod engine_airflow;
#[cfg(feature = "github")]
mod engine_github;
#[cfg(feature = "kubernetes")]
mod engine_kubernetes;
/// Resource targets (Argo Workflows on the real controller).
#[cfg(feature = "kubernetes")]
mod engine_kubernetes_resources;
#[cfg(feature = "stepfunctions")]
mod engine_stepfunctions;
#[cfg(all(feature = "temporal", feature = "exec"))]
mod engine_temporal;

/// The in-cluster deployment (ServiceAccount credentials, no kubeconfig).
#[cfg(feature = "kubernetes")]
mod deploy_incluster;

/// Measurements, `#[ignore]`d: `cargo test --test engines bench_notifications::
/// -- --ignored --nocapture`.
#[cfg(all(feature = "stepfunctions", feature = "github"))]
mod bench_notifications;
