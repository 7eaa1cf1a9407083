//! The HTTP header names of MCP's Streamable HTTP transport that taskgate
//! reads or writes, made once: a lookup by a string parses the name again on
//! every request. Every use names them from here, never as a string.

use axum::http::HeaderName;

/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Session-Id` (legacy sessions over HTTP).
pub const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `Mcp-Method` (2026-07-28).
pub const METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name` (2026-07-28: the tool, resource or task a request names).
pub const NAME: HeaderName = HeaderName::from_static("mcp-name");
/// `X-Accel-Buffering`, set to `no` so proxies pass streams on at once.
pub const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
