//! Protocol versions and the wire shapes every dialect shares (tools and tool
//! results, the `_meta` keys, capability names), with the fields each version
//! knows.

use std::time::SystemTime;

use serde_json::{json, Map, Value};
use taskgate_engine::{Content, ToolOutput};

use crate::core::Tool;

/// Messages the server sends to the client before a response (progress
/// notifications, input requests): the SSE stream of the POST, or stdout.
pub type Outbound = tokio::sync::mpsc::UnboundedSender<Value>;

/// `_meta` key of the protocol version (2026-07-28).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client capabilities (2026-07-28).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The tasks extension id (2026-07-28).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The experimental capability a legacy client declares at `initialize` to opt
/// in to SEP-1391 operations, and that taskgate echoes back.
pub const SEP1391_CAPABILITY: &str = "taskgate/sep-1391";

/// The HTTP headers the dialects read, as names made once: a lookup by a
/// string parses the name again on every request.
pub mod header {
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
}

/// A protocol version taskgate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// 2024-11-05.
    V2024_11_05,
    /// 2025-03-26.
    V2025_03_26,
    /// 2025-06-18.
    V2025_06_18,
    /// 2025-11-25 (experimental tasks).
    V2025_11_25,
    /// 2026-07-28 (stateless; the tasks extension).
    V2026_07_28,
}

impl Version {
    /// Every version, newest first.
    pub const ALL: [Version; 5] = [
        Self::V2026_07_28,
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// The legacy (`initialize`) versions, newest first.
    pub const LEGACY: [Version; 4] = [
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// The version string.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Parses a version string.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// `title`, `outputSchema`, `structuredContent`, `resource_link`, elicitation.
    #[must_use]
    pub fn has_structured(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// Tool `annotations`.
    #[must_use]
    pub fn has_annotations(self) -> bool {
        self >= Self::V2025_03_26
    }
}

/// The list entry of `tool` in `version`; `extra` adds dialect fields
/// (`execution`, `invocationMode`).
#[must_use]
pub fn tool_entry(tool: &Tool, version: Version, extra: Option<(&str, Value)>) -> Value {
    let cfg = &tool.config;
    let mut entry = Map::new();
    entry.insert("name".into(), json!(cfg.name));
    if version.has_structured() {
        if let Some(title) = &cfg.title {
            entry.insert("title".into(), json!(title));
        }
    }
    if let Some(d) = &cfg.description {
        entry.insert("description".into(), json!(d));
    }
    entry.insert("inputSchema".into(), cfg.input_schema.clone());
    if version.has_structured() {
        if let Some(out) = &cfg.output_schema {
            entry.insert("outputSchema".into(), out.clone());
        }
    }
    if version.has_annotations() {
        let mut ann = json!({ "openWorldHint": true });
        if let Some(title) = &cfg.title {
            ann["title"] = json!(title);
        }
        entry.insert("annotations".into(), ann);
    }
    if let Some((k, v)) = extra {
        entry.insert(k.into(), v);
    }
    Value::Object(entry)
}

/// A `CallToolResult` for `version` (without `resultType`).
#[must_use]
pub fn call_tool_result(output: &ToolOutput, version: Version) -> Value {
    let content: Vec<Value> = output
        .content
        .iter()
        .map(|c| match c {
            Content::Text(text) => json!({ "type": "text", "text": text }),
            Content::Link {
                uri,
                name,
                mime_type,
            } if version.has_structured() => {
                let mut link = json!({ "type": "resource_link", "uri": uri, "name": name });
                if let Some(m) = mime_type {
                    link["mimeType"] = json!(m);
                }
                link
            }
            Content::Link { uri, name, .. } => {
                json!({ "type": "text", "text": format!("{name}: {uri}") })
            }
        })
        .collect();
    let mut result = json!({ "content": content, "isError": output.is_error });
    if version.has_structured() {
        if let Some(s) = &output.structured {
            result["structuredContent"] = s.clone();
        }
    }
    result
}

/// RFC 3339 with milliseconds, UTC.
#[must_use]
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// The server's name and version.
#[must_use]
pub fn server_info() -> Value {
    json!({ "name": "taskgate", "version": env!("CARGO_PKG_VERSION") })
}

/// Server-level instructions shown to models.
pub const INSTRUCTIONS: &str = "taskgate runs existing pipelines as long-running tools. \
A call may return a task handle: keep it, poll its status, then fetch the result. \
Only handles returned by a call are valid; never make one up.";
