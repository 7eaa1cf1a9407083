//! JSON-RPC envelopes, and the one place where errors become JSON-RPC error
//! objects, codes and HTTP statuses. Every error a client sees is made here.

use serde_json::{json, Value};
use taskgate_engine::EngineError;

use crate::core::CoreError;

pub mod header;
mod params;

use params::Walked;
pub use params::{Facts, Member, Params, META_CAPABILITIES, META_VERSION, TASKS_EXTENSION};

/// How long a client refused by a server bound is told to wait.
const BUSY_RETRY_MS: u64 = 1000;

/// The answer to every task handle that does not open, whatever the reason.
pub const TASK_NOT_FOUND: &str = "Failed to retrieve task: Task not found";

/// Parse error.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// Method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// A required HTTP header is missing or does not match the body (2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request needs a client capability it did not declare (2026-07-28).
pub const MISSING_CAPABILITY: i64 = -32021;
/// The protocol version is not served (2026-07-28).
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// Every error a request can end in.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The body is not JSON.
    #[error("Parse error: {0}")]
    Parse(String),
    /// The body is JSON but not a valid request.
    #[error("Invalid request: {0}")]
    InvalidRequest(String),
    /// No such method (in this dialect).
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// Bad parameters: unknown tool, arguments that fail the schema, …
    #[error("{0}")]
    InvalidParams(String),
    /// A required `_meta` key is missing (2026-07-28; HTTP 400).
    #[error("{0}")]
    MissingMeta(String),
    /// The task, operation or handle is unknown — or forged, altered, foreign or
    /// expired, which read exactly the same.
    #[error("{0}")]
    NotFound(String),
    /// An HTTP header is missing or disagrees with the body.
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// A client capability is required.
    #[error("Missing required client capability")]
    MissingCapability(Value),
    /// The protocol version is not served.
    #[error("Unsupported protocol version: {requested}")]
    UnsupportedVersion {
        /// Versions served on this path.
        supported: Vec<&'static str>,
        /// What the client asked for.
        requested: String,
        /// Advice for the client.
        hint: &'static str,
    },
    /// The engine said something the client must hear.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The run itself failed (a task's `error` member, not a failed request).
    #[error("{0}")]
    RunFailed(String),
    /// An HTTP request refused before it is read: its `Host` or `Origin` is not
    /// allowed (HTTP 403).
    #[error("Forbidden: {0}")]
    Forbidden(&'static str),
    /// An HTTP request without a valid bearer token (HTTP 401).
    #[error("Unauthorized: a valid bearer token is required")]
    Unauthorized,
    /// A bound of the server is reached; retryable.
    #[error("{0}")]
    Busy(String),
    /// A per-caller quota is used up; retryable after `retry_after_ms`.
    #[error("{message}")]
    OverQuota {
        /// What was refused, naming the key.
        message: String,
        /// When to retry.
        retry_after_ms: u64,
    },
    /// The peer presented too many refused bearer tokens within its window
    /// (`[auth.failures]`); HTTP 429 with `Retry-After`.
    #[error("Too many failed authentications from this address; retry in {}s", .0.as_secs().max(1))]
    TooManyFailures(std::time::Duration),
    /// A valid token lacks scopes a tool's access rule asks for (HTTP 403, with a
    /// `WWW-Authenticate: Bearer error="insufficient_scope"` challenge naming them).
    #[error("Insufficient scope: {message}")]
    InsufficientScope {
        /// What was refused.
        message: String,
        /// The scopes that would admit the caller.
        scopes: Vec<String>,
    },
    /// An access rule does not admit the caller to act on a run (HTTP 403).
    #[error("Forbidden: {0}")]
    AccessDenied(String),
    /// A legacy `Mcp-Session-Id` that does not open (HTTP 404).
    #[error("Session not found: initialize again")]
    SessionNotFound,
    /// Anything else.
    #[error("Internal error: {0}")]
    Internal(String),
}

impl RpcError {
    /// The JSON-RPC code.
    #[must_use]
    pub fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => PARSE_ERROR,
            Self::InvalidRequest(_) => INVALID_REQUEST,
            Self::MethodNotFound(_) => METHOD_NOT_FOUND,
            Self::InvalidParams(_) | Self::MissingMeta(_) | Self::NotFound(_) => INVALID_PARAMS,
            Self::HeaderMismatch(_) => HEADER_MISMATCH,
            Self::MissingCapability(_) => MISSING_CAPABILITY,
            Self::UnsupportedVersion { .. } => UNSUPPORTED_VERSION,
            Self::Engine(e) => match e {
                EngineError::NotFound
                | EngineError::Conflict { .. }
                | EngineError::InvalidInput { .. }
                | EngineError::Unsupported { .. } => INVALID_PARAMS,
                _ => INTERNAL_ERROR,
            },
            Self::Internal(_) | Self::RunFailed(_) | Self::Busy(_) | Self::OverQuota { .. } => {
                INTERNAL_ERROR
            }
            Self::Forbidden(_) | Self::Unauthorized | Self::TooManyFailures(_) => INVALID_REQUEST,
            Self::InsufficientScope { .. } | Self::AccessDenied(_) => INVALID_PARAMS,
            Self::SessionNotFound => INVALID_PARAMS,
        }
    }

    /// The error of a core failure, `not_found` being what this dialect calls a
    /// task or operation that does not exist (alike for every reason).
    #[must_use]
    pub fn from_core(e: CoreError, not_found: &str) -> Self {
        match e {
            CoreError::NotFound => Self::NotFound(not_found.to_owned()),
            CoreError::Engine(e) => Self::Engine(e),
            busy @ CoreError::Busy(_) => Self::Busy(busy.to_string()),
            CoreError::OverQuota(over) => Self::OverQuota {
                message: over.to_string(),
                retry_after_ms: over.retry_after.as_millis().max(1) as u64,
            },
            CoreError::InsufficientScope { ref scopes, .. } => Self::InsufficientScope {
                scopes: scopes.clone(),
                message: e.to_string(),
            },
            CoreError::Forbidden(_) | CoreError::ApprovalRefused { .. } => {
                Self::AccessDenied(e.to_string())
            }
            other @ (CoreError::UnknownTool(_)
            | CoreError::InvalidArguments { .. }
            | CoreError::NotCancellable(_)
            | CoreError::InvalidAnswer(_)
            | CoreError::InvalidCursor(_)
            | CoreError::NoLogs(_)) => Self::InvalidParams(other.to_string()),
        }
    }

    /// The HTTP status on the modern (2026-07-28) path; legacy sessions answer 200
    /// for every JSON-RPC error but parse and envelope errors.
    #[must_use]
    pub fn http_status(&self, modern: bool) -> u16 {
        match self {
            Self::Forbidden(_) | Self::InsufficientScope { .. } | Self::AccessDenied(_) => 403,
            Self::Unauthorized => 401,
            Self::TooManyFailures(_) => 429,
            Self::SessionNotFound => 404,
            Self::Parse(_) | Self::InvalidRequest(_) => 400,
            Self::MethodNotFound(_) if modern => 404,
            Self::MissingMeta(_)
            | Self::HeaderMismatch(_)
            | Self::MissingCapability(_)
            | Self::UnsupportedVersion { .. } => 400,
            _ => 200,
        }
    }

    /// The message clients see. Engine errors are phrased for a model to act on;
    /// their sources stay in the server log.
    #[must_use]
    pub fn message(&self) -> String {
        match self {
            Self::Engine(e) => match e {
                EngineError::NotFound => "The run was not found".to_owned(),
                EngineError::Throttled { .. } => format!(
                    "The engine is throttling requests; retry later ({e}). The task itself is unaffected."
                ),
                EngineError::Unavailable { message, .. } => format!(
                    "The engine is unavailable; retry later ({message}). The task itself is unaffected."
                ),
                EngineError::DeadlineExceeded { .. } => {
                    format!("{e}; retry later. The task itself is unaffected.")
                }
                // The engine's own text can name accounts and resources (an ARN, a
                // role): clients get the refused action; the server log has the rest.
                EngineError::PermissionDenied { action, .. } => format!(
                    "taskgate's credentials are not allowed to {action}; ask the operator (details are in the server log)"
                ),
                other => other.to_string(),
            },
            other => other.to_string(),
        }
    }

    /// The `data` member, if any.
    #[must_use]
    pub fn data(&self) -> Option<Value> {
        match self {
            Self::MissingCapability(required) => Some(json!({ "requiredCapabilities": required })),
            Self::UnsupportedVersion {
                supported,
                requested,
                hint,
            } => Some(json!({ "supported": supported, "requested": requested, "hint": hint })),
            Self::Engine(e) if e.is_retryable() => {
                let mut data = json!({ "retryable": true });
                if let Some(after) = e.retry_after() {
                    data["retryAfterMs"] = json!(after.as_millis() as u64);
                }
                Some(data)
            }
            Self::Busy(_) => Some(json!({ "retryable": true, "retryAfterMs": BUSY_RETRY_MS })),
            Self::OverQuota { retry_after_ms, .. } => {
                Some(json!({ "retryable": true, "retryAfterMs": retry_after_ms }))
            }
            Self::TooManyFailures(wait) => Some(json!({
                "retryable": true,
                "retryAfterMs": wait.as_millis().max(1000) as u64,
            })),
            Self::Engine(EngineError::PermissionDenied { action, .. }) => {
                Some(json!({ "deniedAction": action }))
            }
            Self::InsufficientScope { scopes, .. } => {
                Some(json!({ "error": "insufficient_scope", "scope": scopes.join(" ") }))
            }
            _ => None,
        }
    }

    /// The scopes a step-up challenge names, for an insufficient-scope refusal.
    #[must_use]
    pub fn required_scopes(&self) -> Option<&[String]> {
        match self {
            Self::InsufficientScope { scopes, .. } => Some(scopes),
            _ => None,
        }
    }

    /// The JSON-RPC error object.
    #[must_use]
    pub fn to_object(&self) -> Value {
        let mut obj = json!({ "code": self.code(), "message": self.message() });
        if let Some(data) = self.data() {
            obj["data"] = data;
        }
        obj
    }

    /// A whole error response for request `id`.
    #[must_use]
    pub fn response(&self, id: &Value) -> Value {
        json!({ "jsonrpc": "2.0", "id": id, "error": self.to_object() })
    }

    /// An error response to an HTTP request refused before its body was read
    /// (there is no id to answer).
    #[must_use]
    pub fn refusal(&self) -> Value {
        json!({ "jsonrpc": "2.0", "error": self.to_object() })
    }
}

impl From<CoreError> for RpcError {
    /// Core failures of task requests; a missing run reads [`TASK_NOT_FOUND`].
    fn from(e: CoreError) -> Self {
        Self::from_core(e, TASK_NOT_FOUND)
    }
}

/// A result or a whole response: a JSON value, or JSON already written. A
/// reply whose members are known in advance (`tasks/get`) is written straight
/// to bytes, without a tree of values built only to be serialized and dropped.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A value, serialized when sent.
    Value(Value),
    /// JSON text, written by `serde_json` (always one valid JSON value).
    Written(Vec<u8>),
}

impl Body {
    /// The JSON text.
    #[must_use]
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Value(value) => {
                let mut bytes = Vec::with_capacity(1024);
                // Serializing a `Value` into a `Vec` cannot fail.
                let _ = serde_json::to_writer(&mut bytes, &value);
                bytes
            }
            Self::Written(bytes) => bytes,
        }
    }

    /// The value (written text parsed back: for the few paths that hold values,
    /// such as a batch's array).
    #[must_use]
    pub fn into_value(self) -> Value {
        match self {
            Self::Value(value) => value,
            Self::Written(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }
}

impl From<Value> for Body {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

impl std::fmt::Display for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value(value) => value.fmt(f),
            Self::Written(bytes) => f.write_str(&String::from_utf8_lossy(bytes)),
        }
    }
}

/// A success response.
#[must_use]
pub fn ok(id: &Value, result: Body) -> Body {
    match result {
        // Built by hand: `json!` would copy `result` member by member
        // (`to_value(&result)`), a whole second tree per response.
        Body::Value(result) => Body::Value(envelope(("id", id.clone()), ("result", result))),
        Body::Written(result) => {
            let mut bytes = Vec::with_capacity(result.len() + 64);
            bytes.extend_from_slice(br#"{"id":"#);
            // An id is a string or a number: it serializes.
            let _ = serde_json::to_writer(&mut bytes, id);
            bytes.extend_from_slice(br#","jsonrpc":"2.0","result":"#);
            bytes.extend_from_slice(&result);
            bytes.push(b'}');
            Body::Written(bytes)
        }
    }
}

fn envelope(first: (&str, Value), second: (&str, Value)) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("jsonrpc".to_owned(), Value::String("2.0".to_owned()));
    object.insert(first.0.to_owned(), first.1);
    object.insert(second.0.to_owned(), second.1);
    Value::Object(object)
}

/// A notification.
#[must_use]
pub fn notification(method: &str, params: Value) -> Value {
    envelope(
        ("method", Value::String(method.to_owned())),
        ("params", params),
    )
}

/// What a JSON-RPC message is.
#[derive(Debug, Clone)]
pub enum Message {
    /// A request: it gets a response.
    Request {
        /// Its id.
        id: Value,
        /// Its method.
        method: String,
        /// Its params (an empty object when absent).
        params: Params,
    },
    /// A notification: no response.
    Notification {
        /// Its method.
        method: String,
        /// Its params (an empty object when absent).
        params: Params,
    },
    /// A response from the client to a request of ours.
    Response {
        /// The id of our request.
        id: Value,
        /// The result, or None with an error.
        result: Option<Value>,
        /// The error object, if any.
        error: Option<Value>,
    },
}

/// The members of a JSON-RPC message that taskgate looks at, read straight from
/// the body without building a map of the whole object first. `Some(Null)` is a
/// member written as `null`; `None` one that is absent. `params` is walked, not
/// built: see [`Params`].
#[derive(serde::Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Walked>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
    /// The key `serde_json` reads as a raw value when it comes first (its
    /// `raw_value` feature is on in this build): a body that holds it goes to
    /// the general path, so it is read exactly as the tree reads it.
    #[serde(default, rename = "$serde_json::private::RawValue")]
    raw_value_key: Option<serde::de::IgnoredAny>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

impl Message {
    /// Parses and classifies one message from a request body.
    ///
    /// # Errors
    ///
    /// [`RpcError::Parse`] for a body that is not JSON, [`RpcError::InvalidRequest`]
    /// for JSON that is not a JSON-RPC 2.0 message; each with the message's id
    /// when it has a usable one (else null), for the error response.
    pub fn from_slice(body: &[u8]) -> Result<Self, (RpcError, Value)> {
        // The common case, an object with the usual members, skips the map of
        // the whole message; anything unusual (not an object, a repeated member)
        // takes the general path, which answers it exactly as before.
        // (A derived struct would also accept an array, so only objects go there.)
        // So do params that are not an object, which the general path refuses.
        // The body's UTF-8 is checked once, as a whole, rather than string by
        // string as the parser reads them (a body that is not UTF-8 also goes
        // to the general path, which names where it breaks).
        let object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let envelope = object
            .then(|| std::str::from_utf8(body).ok())
            .flatten()
            .and_then(|text| serde_json::from_str::<Envelope>(text).ok());
        if let Some(e) = envelope.filter(|e| e.raw_value_key.is_none()) {
            let params = match e.params {
                None | Some(Walked::Null) => Some(ParamsIn::Absent),
                Some(Walked::Object(facts)) => {
                    Some(ParamsIn::Object(Params::from_body(body, facts)))
                }
                Some(Walked::Other) => None,
            };
            if let Some(params) = params {
                let id = e.id.clone().unwrap_or(Value::Null);
                return Self::from_members(e.jsonrpc, e.id, e.method, params, e.result, e.error)
                    .map_err(|err| (err, id));
            }
        }
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| (RpcError::Parse(e.to_string()), Value::Null))?;
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        Self::parse(value).map_err(|e| (e, id))
    }

    /// Classifies a parsed JSON value.
    ///
    /// # Errors
    ///
    /// [`RpcError::InvalidRequest`] for anything that is not a JSON-RPC 2.0 message.
    pub fn parse(value: Value) -> Result<Self, RpcError> {
        let Value::Object(mut obj) = value else {
            return Err(RpcError::InvalidRequest("expected a JSON object".into()));
        };
        let params = match obj.remove("params") {
            None | Some(Value::Null) => ParamsIn::Absent,
            Some(p @ Value::Object(_)) => ParamsIn::Object(Params::from_value(p)),
            Some(_) => ParamsIn::NotObject,
        };
        Self::from_members(
            obj.remove("jsonrpc"),
            obj.remove("id"),
            obj.remove("method"),
            params,
            obj.remove("result"),
            obj.remove("error"),
        )
    }

    fn from_members(
        jsonrpc: Option<Value>,
        id: Option<Value>,
        method: Option<Value>,
        params: ParamsIn,
        result: Option<Value>,
        error: Option<Value>,
    ) -> Result<Self, RpcError> {
        if jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(RpcError::InvalidRequest("jsonrpc must be \"2.0\"".into()));
        }
        if let Some(id) = &id {
            if !(id.is_string() || id.is_number()) {
                return Err(RpcError::InvalidRequest(
                    "id must be a string or number".into(),
                ));
            }
        }
        match (method, id) {
            (Some(Value::String(method)), id) => {
                let params = match params {
                    ParamsIn::Absent => Params::default(),
                    ParamsIn::Object(p) => p,
                    ParamsIn::NotObject => {
                        return Err(RpcError::InvalidRequest("params must be an object".into()))
                    }
                };
                Ok(match id {
                    Some(id) => Self::Request { id, method, params },
                    None => Self::Notification { method, params },
                })
            }
            (Some(_), _) => Err(RpcError::InvalidRequest("method must be a string".into())),
            (None, Some(id)) if result.is_some() || error.is_some() => {
                Ok(Self::Response { id, result, error })
            }
            (None, _) => Err(RpcError::InvalidRequest("missing method".into())),
        }
    }
}

/// A message's `params` member, as the envelope found it.
enum ParamsIn {
    /// Absent or `null`: an empty object.
    Absent,
    /// An object.
    Object(Params),
    /// Anything else (refused).
    NotObject,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_written_result_makes_the_same_response_text_as_a_value() {
        let result = json!({"status": "working", "taskId": "tg2.k.abc", "ttlMs": null,
                            "createdAt": "2026-12-04T22:15:00.123Z", "pollIntervalMs": 5000});
        for id in [json!(7), json!("req-\"1\"")] {
            let from_value = ok(&id, Body::Value(result.clone()));
            let from_text = ok(&id, Body::Written(serde_json::to_vec(&result).unwrap()));
            assert!(matches!(from_text, Body::Written(_)));
            assert_eq!(from_text.to_string(), from_value.to_string());
            assert_eq!(
                from_text.clone().into_bytes(),
                from_value.clone().into_bytes()
            );
            assert_eq!(from_text.into_value(), from_value.into_value());
        }
    }

    #[test]
    fn codes_and_statuses() {
        let table: Vec<(RpcError, i64, u16, u16)> = vec![
            (RpcError::Parse("x".into()), -32700, 400, 400),
            (RpcError::MethodNotFound("x".into()), -32601, 404, 200),
            (RpcError::NotFound("x".into()), -32602, 200, 200),
            (RpcError::HeaderMismatch("x".into()), -32020, 400, 400),
            (RpcError::MissingCapability(json!({})), -32021, 400, 400),
            (
                RpcError::Engine(EngineError::Throttled {
                    retry_after: Some(Duration::from_secs(2)),
                    message: "slow".into(),
                }),
                -32603,
                200,
                200,
            ),
            (RpcError::Engine(EngineError::NotFound), -32602, 200, 200),
            (RpcError::Forbidden("Host not allowed"), -32600, 403, 403),
            (RpcError::Unauthorized, -32600, 401, 401),
            (
                RpcError::TooManyFailures(Duration::from_secs(30)),
                -32600,
                429,
                429,
            ),
            (RpcError::SessionNotFound, -32602, 404, 404),
            (
                RpcError::from(CoreError::InsufficientScope {
                    tool: "t".into(),
                    scopes: vec!["deploy".into()],
                }),
                -32602,
                403,
                403,
            ),
            (
                RpcError::from(CoreError::Forbidden("t".into())),
                -32602,
                403,
                403,
            ),
            (RpcError::RunFailed("x".into()), -32603, 200, 200),
            (RpcError::from(CoreError::NotFound), -32602, 200, 200),
            (
                RpcError::from(CoreError::UnknownTool("x".into())),
                -32602,
                200,
                200,
            ),
        ];
        for (e, code, modern, legacy) in table {
            assert_eq!(e.code(), code, "{e:?}");
            assert_eq!(e.http_status(true), modern, "{e:?}");
            assert_eq!(e.http_status(false), legacy, "{e:?}");
        }
    }

    #[test]
    fn core_not_found_reads_as_the_dialects_own_words() {
        let task = RpcError::from(CoreError::NotFound).to_object();
        assert_eq!(task["message"], TASK_NOT_FOUND);
        let op = RpcError::from_core(CoreError::NotFound, "Operation not found").to_object();
        assert_eq!(op["message"], "Operation not found");
        let refused = RpcError::Unauthorized.refusal();
        assert!(refused.get("id").is_none(), "{refused}");
        assert_eq!(refused["error"]["code"], INVALID_REQUEST);
    }

    #[test]
    fn permission_errors_name_the_action_but_not_the_engines_text() {
        let e = RpcError::Engine(EngineError::PermissionDenied {
            action: "states:StartExecution".into(),
            message: "User: arn:aws:sts::123456789012:assumed-role/taskgate is not authorized"
                .into(),
        });
        let obj = e.to_object();
        let text = obj.to_string();
        assert!(text.contains("states:StartExecution"), "{text}");
        assert!(!text.contains("123456789012"), "{text}");
        assert_eq!(obj["data"]["deniedAction"], "states:StartExecution");
    }

    #[test]
    fn throttling_says_retry_with_delay() {
        let e = RpcError::Engine(EngineError::Throttled {
            retry_after: Some(Duration::from_millis(1500)),
            message: "Rate exceeded".into(),
        });
        let obj = e.to_object();
        assert_eq!(obj["data"]["retryable"], true);
        assert_eq!(obj["data"]["retryAfterMs"], 1500);
    }

    #[test]
    fn message_kinds() {
        assert!(matches!(
            Message::parse(json!({"jsonrpc":"2.0","id":1,"method":"ping"})).unwrap(),
            Message::Request { .. }
        ));
        assert!(matches!(
            Message::parse(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).unwrap(),
            Message::Notification { .. }
        ));
        assert!(matches!(
            Message::parse(json!({"jsonrpc":"2.0","id":"s-1","result":{}})).unwrap(),
            Message::Response { .. }
        ));
        assert!(Message::parse(json!({"id":1,"method":"ping"})).is_err());
        assert!(Message::parse(json!([1])).is_err());
    }

    /// The fast path over raw bytes classifies every body as the general path
    /// over a parsed value does, including the odd ones it hands over.
    #[test]
    fn from_slice_agrees_with_parse() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":null}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"x","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":7}"#,
            r#"{"jsonrpc":"1.0","id":2,"method":"x"}"#,
            r#"{"id":2,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":3}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"a","method":"b"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"x","extra":{"deep":[1,2]}}"#,
            r#"[1]"#,
            r#""text""#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tasks/get","params":{"taskId":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}},"elicitation":{}}}}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tasks/get","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tasks/get","params":{"taskId":"a","taskId":1}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":{"a":1},"params":{"b":2}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":{"a":"\ud800"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":["\ud800"]}"#,
            r#"{"jsonrpc":"1.0","id":6,"method":"x","params":{"a":"\ud800"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":"text"}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":{"$serde_json::private::RawValue":"{\"taskId\":\"t\"}"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":{"taskId":"t","$serde_json::private::RawValue":"{}"}}"#,
            r#"{"$serde_json::private::RawValue":"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"}"#,
            r#"{"$serde_json::private::RawValue":"{}","jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"$serde_json::private::RawValue":"{}"}"#,
        ];
        let agree = |body: &str| {
            let general = serde_json::from_slice::<Value>(body.as_bytes())
                .map_err(|e| RpcError::Parse(e.to_string()).to_string())
                .and_then(|v| Message::parse(v).map_err(|e| e.to_string()));
            let fast = Message::from_slice(body.as_bytes()).map_err(|(e, _)| e.to_string());
            // Params print their tree and their facts: both agree.
            assert_eq!(format!("{fast:?}"), format!("{general:?}"), "{body}");
        };
        bodies.into_iter().for_each(agree);
        // Nested as deep as the parser allows, and one deeper.
        let deep = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":8,"method":"x","params":{{"a":{}0{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let limit = (1..200)
            .find(|n| serde_json::from_str::<Value>(&deep(*n)).is_err())
            .expect("the parser has a nesting limit");
        agree(&deep(limit - 1));
        agree(&deep(limit));
        // A body that is not UTF-8 is refused as the general path refuses it.
        let latin1 = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":\"\xe9\"}}";
        let general = serde_json::from_slice::<Value>(latin1)
            .unwrap_err()
            .to_string();
        let (e, _) = Message::from_slice(latin1).unwrap_err();
        assert_eq!(e.to_string(), RpcError::Parse(general).to_string());
        let (e, id) = Message::from_slice(b"{not json").unwrap_err();
        assert!(matches!(e, RpcError::Parse(_)) && id.is_null());
        let (_, id) = Message::from_slice(br#"{"jsonrpc":"1.0","id":9,"method":"x"}"#).unwrap_err();
        assert_eq!(id, json!(9));
    }
}
