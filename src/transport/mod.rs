//! The transports: bytes in, bytes out. Each hands messages to the front door
//! ([`crate::server`]) and frames its answers; none calls a dialect.

mod connection;
pub mod http;
mod lanes;
mod metrics_port;
pub mod stdio;
