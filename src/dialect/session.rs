//! What a legacy client negotiated at `initialize` (2024-11-05 … 2025-11-25).
//!
//! Over HTTP the session travels sealed in `Mcp-Session-Id`, so any replica can
//! serve the next request without a session table; on stdio it lives with the
//! connection. The front door opens and seals it; dialects only read it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{Version, SEP1391_CAPABILITY};

/// What a legacy client negotiated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The negotiated version.
    #[serde(rename = "v")]
    pub version: String,
    /// The client declared `elicitation`.
    #[serde(rename = "e", default)]
    pub elicitation: bool,
    /// The client opted in to SEP-1391 operations.
    #[serde(rename = "o", default)]
    pub operations: bool,
}

impl Session {
    /// The session a request without one is served as (no `initialize` seen):
    /// the version from the `MCP-Protocol-Version` header, else 2025-03-26.
    #[must_use]
    pub fn assumed(version: Option<Version>) -> Self {
        Self {
            version: version.unwrap_or(Version::V2025_03_26).as_str().to_owned(),
            elicitation: false,
            operations: false,
        }
    }

    /// The session `initialize` with these params opens: the requested version
    /// when it is a legacy one taskgate serves (else the newest legacy one), and
    /// the capabilities the client declared.
    #[must_use]
    pub fn negotiate(params: &Value) -> Self {
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let version = Version::parse(requested)
            .filter(|v| Version::LEGACY.contains(v))
            .unwrap_or(Version::LEGACY[0]);
        let caps = params.get("capabilities").cloned().unwrap_or(Value::Null);
        Self {
            version: version.as_str().to_owned(),
            elicitation: caps.get("elicitation").is_some() && version.has_structured(),
            operations: caps
                .get("experimental")
                .and_then(|e| e.get(SEP1391_CAPABILITY))
                .is_some(),
        }
    }

    /// The negotiated version.
    #[must_use]
    pub fn version(&self) -> Version {
        Version::parse(&self.version).unwrap_or(Version::V2025_03_26)
    }

    /// The session speaks 2025-11-25 tasks.
    #[must_use]
    pub fn tasks(&self) -> bool {
        self.version() == Version::V2025_11_25
    }

    /// The client can hold a task or an operation.
    #[must_use]
    pub fn long_running(&self) -> bool {
        self.tasks() || self.operations
    }
}
