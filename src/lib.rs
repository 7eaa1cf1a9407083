//! taskgate: expose existing pipelines to MCP clients as long-running tools.
//!
//! The engine is the database: a task handle is a sealed reference to the native
//! run, and every request reads the engine once and translates. Layers, top down:
//! transports ([`http`], [`stdio`]) → front door ([`server`]) → dialects
//! ([`modern`], [`legacy`]) → core ([`gateway`]) → engines (the `adapters/` crates).

pub mod config;
pub mod engines;
pub mod gateway;
pub mod handle;
pub mod http;
pub mod input;
pub mod legacy;
pub mod modern;
pub mod operations;
pub mod rpc;
pub mod server;
pub mod stdio;
pub mod tasks2025;
pub mod wire;

use std::path::Path;

pub use config::ConfigFileError;
pub use gateway::Gateway;

/// Loads, validates and builds a gateway from a config file.
///
/// # Errors
///
/// A [`ConfigFileError`] naming the file and the key at fault.
pub async fn load(path: &Path) -> Result<Gateway, ConfigFileError> {
    let cfg = config::load(path)?;
    Gateway::build(cfg, path).await
}
