//! The core every dialect translates to: configuration and its validation, the
//! engine registry, sealed handles, and the gateway (the tool catalog and the
//! four things one can do with a run). It knows nothing of JSON-RPC or of any
//! wire shape: dialects translate its values and errors to their wire. Of the
//! protocol generations it knows only their names, in one enum
//! ([`handle::Dialect`]): which dialect issued a task handle (a handle opens
//! only in its own) and how audit events name it.

pub mod access;
pub mod audit;
pub mod config;
pub mod engines;
pub mod gateway;
pub mod handle;
pub mod metrics;
pub mod quota;
pub mod slots;
pub mod stack;
pub mod trace_link;
pub mod validate;
pub mod watch;

pub use access::Caller;
pub use config::{ConfigFileError, ConfigProblem};
pub use gateway::errors::CoreError;
pub use gateway::runs::Started;
pub use gateway::{Gateway, Tool};
