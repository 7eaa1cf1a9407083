//! taskgate: expose existing pipelines to MCP clients as long-running tools.
//!
//! The engine is the database: a task handle is a sealed reference to the native
//! run, and every request reads the engine once and translates. Layers, top down
//! (each imports only the ones below it):
//!
//! - [`transport`]: Streamable HTTP and stdio — bytes in, bytes out;
//! - [`server`]: the front door — parse, decide the era once, open or seal the
//!   legacy session, identify the caller, route;
//! - [`dialect`]: one translator per client generation, and the wire shapes they
//!   share;
//! - [`core`]: configuration, handles, the engine registry and the gateway — no
//!   wire types;
//! - the engine API and the engines: the `adapters/` crates.
//!
//! [`telemetry`] (traces: settings, exporter, spans) stands below them all and
//! imports none of them.
//!
//! [`rpc`] is the one place JSON-RPC error objects, codes and HTTP statuses are
//! made, and names the HTTP headers of the MCP transport ([`rpc::header`]).

pub mod core;
pub mod dialect;
pub mod rpc;
pub mod server;
pub mod telemetry;
pub mod transport;

#[cfg(test)]
mod fuzz;

use std::path::Path;

pub use crate::core::{ConfigFileError, Gateway};

/// Loads, validates and builds a gateway from a config file.
///
/// # Errors
///
/// A [`ConfigFileError`] listing every problem, each naming the file and the key.
pub async fn load(path: &Path) -> Result<Gateway, ConfigFileError> {
    load_listening(path, None).await
}

/// [`load`], with `server.listen` replaced by `listen` when given (`serve
/// --listen`) before any check, so the checks that depend on the address
/// (anonymous access, development keys) judge the one served.
///
/// # Errors
///
/// As [`load`].
pub async fn load_listening(
    path: &Path,
    listen: Option<std::net::SocketAddr>,
) -> Result<Gateway, ConfigFileError> {
    let mut cfg = crate::core::config::load(path)?;
    if let Some(listen) = listen {
        cfg.server.listen = listen;
    }
    Gateway::build(cfg, path).await
}
