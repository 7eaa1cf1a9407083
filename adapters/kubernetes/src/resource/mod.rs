//! `resource` targets of the Kubernetes engine (issue 38): a tool runs an object
//! of any kind — an Argo Workflow first — described by configuration: where the
//! arguments go, where the phase, progress, message and result are, and what
//! patch cancels it. Jobs keep their own target (`lib.rs`): their pod-level
//! results, approval gate and deadline-based cancel are specific to them.
//!
//! A tool target is a resource target when it names `preset` or `kind`.
//!
//! Laid out like the engine crates: `config.rs` (the target's keys and their
//! validation), `translate.rs` (pure: object in, snapshot or patch out, with
//! their table tests), `pipeline.rs` (the [`Pipeline`] impl); its upstream calls
//! are `crate::api`'s.
//!
//! [`Pipeline`]: taskgate_engine::Pipeline

mod config;
mod pipeline;
mod translate;

pub(crate) use config::is_resource_target;
pub use config::{ArgumentPlace, PhaseMapping, Preset, ResourceTarget};
pub(crate) use pipeline::ResourcePipeline;
