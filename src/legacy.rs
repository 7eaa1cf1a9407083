//! Legacy sessions: clients that `initialize` (2024-11-05 … 2025-11-25).
//!
//! What a client negotiated travels in a sealed `Mcp-Session-Id` over HTTP, so any
//! replica can serve the next request without a session table; on stdio it lives
//! with the connection.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use taskgate_engine::{RunState, Snapshot};

use crate::config::{LegacyPolicy, ToolMode};
use crate::gateway::{Gateway, Tool, TASK_NOT_FOUND};
use crate::handle::Dialect;
use crate::rpc::RpcError;
use crate::wire::{call_tool_result, server_info, tool_entry, Version, INSTRUCTIONS};

/// What a legacy client negotiated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The negotiated version.
    #[serde(rename = "v")]
    pub version: String,
    /// The client declared `elicitation`.
    #[serde(rename = "e", default)]
    pub elicitation: bool,
}

impl Session {
    /// The session a request without one is served as (no `initialize` seen):
    /// the version from the `MCP-Protocol-Version` header, else 2025-03-26.
    #[must_use]
    pub fn assumed(version: Option<Version>) -> Self {
        Self {
            version: version.unwrap_or(Version::V2025_03_26).as_str().to_owned(),
            elicitation: false,
        }
    }

    /// The negotiated version.
    #[must_use]
    pub fn version(&self) -> Version {
        Version::parse(&self.version).unwrap_or(Version::V2025_03_26)
    }
}

/// Answers `initialize`: the session it opens and the result.
#[must_use]
pub fn initialize(params: &Value) -> (Session, Value) {
    let requested = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
    let version = Version::parse(requested)
        .filter(|v| Version::LEGACY.contains(v))
        .unwrap_or(Version::LEGACY[0]);
    let caps = params.get("capabilities").cloned().unwrap_or(Value::Null);
    let session = Session {
        version: version.as_str().to_owned(),
        elicitation: caps.get("elicitation").is_some(),
    };
    let result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    });
    (session, result)
}

/// True when `tool` is listed for a client of `session`.
#[must_use]
pub fn visible(tool: &Tool, _session: &Session) -> bool {
    !(tool.config.mode == ToolMode::Async && tool.config.legacy_policy() == LegacyPolicy::Hide)
}

/// Handles one request of a legacy session.
///
/// # Errors
///
/// Every failure as an [`RpcError`].
pub async fn handle(
    gw: &Gateway,
    caller: &str,
    session: &Session,
    method: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    let version = session.version();
    match method {
        "ping" => Ok(json!({})),
        "tools/list" => {
            let tools: Vec<Value> = gw
                .tools()
                .iter()
                .filter(|t| visible(t, session))
                .map(|t| tool_entry(t, version, None))
                .collect();
            Ok(json!({ "tools": tools }))
        }
        "tools/call" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::InvalidParams("name is required".into()))?;
            let tool = gw
                .tool(name)
                .ok()
                .filter(|t| visible(t, session))
                .ok_or_else(|| RpcError::InvalidParams(format!("Unknown tool: {name}")))?;
            let args = gw.check_arguments(tool, params.get("arguments"))?;
            let started = gw.start(caller, tool, args, Dialect::LegacyHandle, None).await?;
            let limit = tool.config.max_wait.unwrap_or(gw.server.max_wait);
            let snapshot = gw
                .wait(tool, &started.claims, limit, TASK_NOT_FOUND, |_| {})
                .await?;
            sync_outcome(tool, &snapshot, version, limit)
        }
        other => Err(RpcError::MethodNotFound(other.to_owned())),
    }
}

/// The result of a call that waited for its run, for a client that cannot hold
/// a task: the tool result when the run finished, a clear tool error otherwise.
///
/// # Errors
///
/// A failed run (protocol-level failure) → -32603.
pub fn sync_outcome(tool: &Tool, snapshot: &Snapshot, version: Version, limit: Duration) -> Result<Value, RpcError> {
    let text = |t: String| json!({ "content": [{ "type": "text", "text": t }], "isError": true });
    match &snapshot.state {
        RunState::Completed(output) => Ok(call_tool_result(output, version)),
        RunState::Failed { message } => Err(RpcError::Internal(message.clone())),
        RunState::Cancelled { .. } => Ok(text(format!("The {} run was cancelled.", tool.name()))),
        RunState::InputRequired { .. } => Ok(text(format!(
            "The {} run is waiting for input, which this client cannot give. Use a client with MCP tasks support.",
            tool.name()
        ))),
        RunState::Working { message, .. } => Ok(text(format!(
            "The {} run is still going after {}{}; it continues in its engine. Use a client with MCP tasks support to follow it.",
            tool.name(),
            humantime::format_duration(limit),
            message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default(),
        ))),
    }
}
