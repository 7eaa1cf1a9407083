//! MCP 2026-07-28, stateless, with the tasks extension
//! `io.modelcontextprotocol/tasks`: `tools/call` → `CreateTaskResult`,
//! `tasks/get|update|cancel`, MRTR `input_required` before a task exists, and
//! the header rules of the HTTP binding.
//!
//! Every request carries its protocol version and client capabilities in
//! `_meta`; nothing carries over between requests.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use taskgate_engine::{RunState, Snapshot};

use super::input::{approval_meta, APPROVAL_META};
use super::logs;
use super::outcome::{notify_progress, sync_outcome};
use super::task_ref::open_task;
use super::wire::Request;
use super::wire::{
    call_tool_result, server_info, task_times, timestamp, tool_entry, Outbound, Version,
    INSTRUCTIONS, META_CAPABILITIES, META_VERSION, TASKS_EXTENSION,
};
use crate::core::config::ToolMode;
use crate::core::gateway::answers::{Answering, TICKET_PREFIX};
use crate::core::handle::{Dialect, Purpose, TaskClaims};
use crate::core::{Caller, Gateway, Tool};
use crate::rpc::{header, Body, Member, Params, RpcError};
use taskgate_engine::InputRequest;

mod following;
mod listen;
mod notification;
pub use following::{reached_max_listen, Following};
pub use listen::{listen, MAX_TASK_IDS};
pub use notification::SUBSCRIPTION_ID;

/// What one modern request declared.
struct Declared {
    tasks: bool,
    elicitation: bool,
}

/// Serves one modern request. `headers` is present on HTTP, where the header
/// rules apply.
///
/// # Errors
///
/// Every failure as an [`RpcError`].
pub async fn serve(req: Request<'_>) -> Result<Body, RpcError> {
    let Request {
        gw,
        caller,
        headers,
        out,
        method,
        params,
        ..
    } = req;
    if let (Some(headers), Some(version)) = (headers, params.meta_version()) {
        // A header that disagrees with the body is a HeaderMismatch, whether or
        // not the body's version is served.
        require_header(headers, &header::PROTOCOL_VERSION, version)?;
    }
    let declared = check_meta(params)?;
    if let Some(headers) = headers {
        check_headers(gw, headers, method, params)?;
    }
    match method {
        "server/discover" => Ok(discover().into()),
        "tools/list" => Ok(list_tools(gw, caller, declared.tasks).into()),
        "tools/call" => call_tool(gw, caller, out, params, &declared)
            .await
            .map(Body::Value),
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            if !declared.tasks {
                return Err(missing_tasks());
            }
            // An approval ticket in place of a task id: an approver's view of,
            // and answer to, the one question it names.
            if let Some(ticket) = params.task_id().filter(|id| id.starts_with(TICKET_PREFIX)) {
                return by_ticket(gw, caller, method, params, ticket, &declared).await;
            }
            task_method(gw, caller, method, params, &declared).await
        }
        other => Err(RpcError::MethodNotFound(other.to_owned())),
    }
}

/// `tasks/get`, `tasks/update` or `tasks/cancel` of a task handle.
async fn task_method(
    gw: &Gateway,
    caller: &Caller,
    method: &str,
    params: &Params,
    declared: &Declared,
) -> Result<Body, RpcError> {
    let (task_id, claims, tool) = open_task(gw, caller, Dialect::TasksExtension, params)?;
    match method {
        "tasks/get" => {
            let snapshot = gw.read(tool, &claims.native).await?;
            // An input request goes only to a request that declared its
            // type (elicitation); any other gets -32021 naming it.
            if matches!(snapshot.state, RunState::InputRequired { .. }) && !declared.elicitation {
                return Err(missing_elicitation());
            }
            let tickets = |key: &str, r: &InputRequest| {
                approval_meta(gw, caller, tool, &claims.native, key, r)
            };
            // Written straight to bytes: the hot path of every poll.
            Ok(Body::Written(
                DetailedTask::of(task_id, &claims, tool, &snapshot, &tickets).to_json(),
            ))
        }
        "tasks/update" => {
            let empty = Map::new();
            let responses = input_responses(params, &empty)?;
            gw.answer(
                caller,
                Dialect::TasksExtension,
                tool,
                &claims.native,
                responses,
                Answering::Starter,
            )
            .await?;
            Ok(json!({ "resultType": "complete" }).into())
        }
        _ => {
            gw.cancel(caller, Dialect::TasksExtension, tool, &claims.native)
                .await?;
            Ok(json!({ "resultType": "complete" }).into())
        }
    }
}

/// `tasks/get` or `tasks/update` with an approval ticket as the task id. A get
/// shows the run's status and, while it is outstanding, the one question the
/// ticket names (never the run's result or its other questions); an update
/// answers that question. Either needs the tool's `answer_access`; a ticket
/// that does not open reads as an unknown task.
async fn by_ticket(
    gw: &Gateway,
    caller: &Caller,
    method: &str,
    params: &Params,
    ticket: &str,
    declared: &Declared,
) -> Result<Body, RpcError> {
    let responses = match params.get("inputResponses") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(RpcError::InvalidParams(
                "inputResponses must be an object".into(),
            ))
        }
    };
    let not_found = "Failed to retrieve task: Task not found";
    match method {
        "tasks/update" => {
            gw.answer_ticket(caller, Dialect::TasksExtension, ticket, &responses)
                .await
                .map_err(|e| RpcError::from_core(e, not_found))?;
            Ok(json!({ "resultType": "complete" }).into())
        }
        "tasks/get" => {
            let (claims, tool) = gw
                .open_ticket(ticket)
                .map_err(|e| RpcError::from_core(e, not_found))?;
            gw.authorize_answer(caller, tool, Dialect::TasksExtension, &claims.native)
                .map_err(|e| RpcError::from_core(e, not_found))?;
            let snapshot = gw.read(tool, &claims.native).await?;
            let status = match &snapshot.state {
                RunState::InputRequired { requests, .. } if requests.contains_key(&claims.key) => {
                    if !declared.elicitation {
                        return Err(missing_elicitation());
                    }
                    let only: std::collections::BTreeMap<_, _> = requests
                        .iter()
                        .filter(|(k, _)| **k == claims.key)
                        .map(|(k, r)| (k.clone(), r.clone()))
                        .collect();
                    let four_eyes = tool.config.four_eyes;
                    let meta = |_: &str, _: &InputRequest| {
                        Some(json!({ APPROVAL_META: { "ticket": ticket, "fourEyes": four_eyes } }))
                    };
                    return Ok(json!({
                        "resultType": "complete",
                        "taskId": ticket,
                        "status": "input_required",
                        "inputRequests": input_requests(&only, &meta),
                    })
                    .into());
                }
                RunState::Completed(_) => "completed",
                RunState::Failed { .. } => "failed",
                RunState::Cancelled { .. } => "cancelled",
                RunState::Working { .. } | RunState::InputRequired { .. } => "working",
            };
            Ok(json!({ "resultType": "complete", "taskId": ticket, "status": status }).into())
        }
        _ => Err(RpcError::InvalidParams(
            "an approval ticket answers (tasks/update) or shows (tasks/get) its question; it cancels nothing".into(),
        )),
    }
}

fn missing_tasks() -> RpcError {
    RpcError::MissingCapability(json!({ "extensions": { TASKS_EXTENSION: {} } }))
}

/// The run waits for an answer to an input request (elicitation, the only type
/// taskgate's engines ask), which the request did not declare it can take.
fn missing_elicitation() -> RpcError {
    RpcError::MissingCapability(json!({ "elicitation": {} }))
}

fn check_meta(params: &Params) -> Result<Declared, RpcError> {
    let facts = params.facts();
    let version = facts.version.as_str().ok_or_else(|| {
        RpcError::MissingMeta(format!("_meta[\"{META_VERSION}\"] must be a string"))
    })?;
    if version != Version::V2026_07_28.as_str() {
        return Err(RpcError::UnsupportedVersion {
            supported: vec![Version::V2026_07_28.as_str()],
            requested: version.to_owned(),
            hint: "for 2025-11-25 and older versions, start with initialize",
        });
    }
    match facts.capabilities {
        Member::Object => Ok(Declared {
            tasks: facts.tasks,
            elicitation: facts.elicitation,
        }),
        Member::Absent => Err(RpcError::MissingMeta(format!(
            "_meta[\"{META_CAPABILITIES}\"] is required on every request"
        ))),
        _ => Err(RpcError::MissingMeta(format!(
            "_meta[\"{META_CAPABILITIES}\"] must be an object"
        ))),
    }
}

/// Decodes a header value, including the `=?base64?…?=` form for non-ASCII values.
fn header_value<'h>(
    headers: &'h HeaderMap,
    name: impl axum::http::header::AsHeaderName,
) -> Option<Result<std::borrow::Cow<'h, str>, ()>> {
    let raw = headers.get(name)?;
    let Ok(text) = raw.to_str() else {
        return Some(Err(()));
    };
    if let Some(inner) = text
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        use base64::Engine as _;
        return Some(
            base64::engine::general_purpose::STANDARD
                .decode(inner)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .map(std::borrow::Cow::Owned)
                .ok_or(()),
        );
    }
    Some(Ok(std::borrow::Cow::Borrowed(text)))
}

fn require_header(headers: &HeaderMap, name: &HeaderName, expected: &str) -> Result<(), RpcError> {
    // The usual case first: the header carries the body's value as it is.
    if headers
        .get(name)
        .is_some_and(|v| v.as_bytes() == expected.as_bytes())
    {
        return Ok(());
    }
    match header_value(headers, name) {
        None => Err(RpcError::HeaderMismatch(format!(
            "the {name} header is required"
        ))),
        Some(Err(())) => Err(RpcError::HeaderMismatch(format!(
            "the {name} header is malformed"
        ))),
        Some(Ok(v)) if v == expected => Ok(()),
        Some(Ok(v)) => Err(RpcError::HeaderMismatch(format!(
            "the {name} header ({v:?}) does not match the body ({expected:?})"
        ))),
    }
}

fn check_headers(
    gw: &Gateway,
    headers: &HeaderMap,
    method: &str,
    params: &Params,
) -> Result<(), RpcError> {
    let version = params.meta_version().unwrap_or_default();
    require_header(headers, &header::PROTOCOL_VERSION, version)?;
    require_header(headers, &header::METHOD, method)?;
    let name_field = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = name_field {
        let expected = if field == "taskId" {
            params.task_id()
        } else {
            params.get(field).and_then(Value::as_str)
        }
        .unwrap_or_default();
        require_header(headers, &header::NAME, expected)?;
    }
    if method == "tools/call" {
        if let Some(tool) = params
            .get("name")
            .and_then(Value::as_str)
            .and_then(|n| gw.tool(n).ok())
        {
            check_param_headers(tool, headers, params.get("arguments"))?;
        }
    }
    Ok(())
}

/// Arguments whose schema says `x-mcp-header: NAME` must be mirrored in the
/// `Mcp-Param-NAME` header.
fn check_param_headers(
    tool: &Tool,
    headers: &HeaderMap,
    args: Option<&Value>,
) -> Result<(), RpcError> {
    let Some(props) = tool
        .config
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    for (prop, schema) in props {
        let Some(header) = schema.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let name = format!("mcp-param-{}", header.to_ascii_lowercase());
        let arg = args.and_then(|a| a.get(prop)).filter(|v| !v.is_null());
        match (arg, header_value(headers, &name)) {
            (None, None) => {}
            (Some(v), Some(Ok(h))) => {
                let same = match v {
                    Value::String(s) => *s == h,
                    Value::Number(n) => h
                        .parse::<f64>()
                        .ok()
                        .zip(n.as_f64())
                        .is_some_and(|(a, b)| a == b),
                    Value::Bool(b) => h == b.to_string(),
                    _ => true,
                };
                if !same {
                    return Err(RpcError::HeaderMismatch(format!(
                        "the Mcp-Param-{header} header does not match arguments.{prop}"
                    )));
                }
            }
            (Some(_), None) => {
                return Err(RpcError::HeaderMismatch(format!(
                    "the Mcp-Param-{header} header is required with arguments.{prop}"
                )))
            }
            (None, Some(_)) => {
                return Err(RpcError::HeaderMismatch(format!(
                    "the Mcp-Param-{header} header is present but arguments.{prop} is not"
                )))
            }
            (Some(_), Some(Err(()))) => {
                return Err(RpcError::HeaderMismatch(format!(
                    "the Mcp-Param-{header} header is malformed"
                )))
            }
        }
    }
    Ok(())
}

fn discover() -> Value {
    let versions: Vec<&str> = Version::ALL.iter().map(|v| v.as_str()).collect();
    json!({
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": { "tools": {}, "extensions": { TASKS_EXTENSION: {} } },
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
        "_meta": { "io.modelcontextprotocol/serverInfo": server_info() },
        "ttlMs": 3_600_000,
        "cacheScope": "public",
    })
}

/// The tools `caller` may use; `taskgate_logs` too when the request declared
/// the tasks extension (a client without it never holds a task).
fn list_tools(gw: &Gateway, caller: &Caller, tasks: bool) -> Value {
    let tools: Vec<Value> = gw
        .tools()
        .iter()
        .filter(|t| gw.visible_to(caller, t))
        .map(|t| tool_entry(t, Version::V2026_07_28, None))
        .chain((tasks && logs::listed(gw, caller)).then(|| logs::entry(Version::V2026_07_28)))
        .collect();
    // With access rules the list depends on the caller: no shared cache.
    let scope = if gw.access.is_uniform() {
        "public"
    } else {
        "private"
    };
    json!({ "resultType": "complete", "tools": tools, "ttlMs": 60_000, "cacheScope": scope })
}

async fn call_tool(
    gw: &Gateway,
    caller: &Caller,
    out: Option<&Outbound>,
    params: &Value,
    declared: &Declared,
) -> Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::InvalidParams("name is required".into()))?;
    if name == logs::TOOL && logs::listed(gw, caller) {
        return call_logs(gw, caller, params).await;
    }
    let tool = gw.tool_for(caller, name, Dialect::TasksExtension)?;
    let args = gw.check_arguments(tool, params.get("arguments"))?;
    let as_task = declared.tasks && tool.is_long_running();
    if !as_task && tool.config.mode == ToolMode::Async {
        return Err(missing_tasks());
    }
    let empty = Map::new();
    let responses = input_responses(params, &empty)?;
    let limit = wait_limit(gw, tool, as_task, declared);
    // A call that will wait holds a slot from before its run starts.
    let _slot = if limit.is_zero() {
        None
    } else {
        Some(gw.hold_wait(caller)?)
    };
    let digest = arguments_digest(&args);
    let (claims, handle) = start_or_resume(gw, caller, tool, args, params, &digest).await?;
    let call = Call {
        gw,
        caller,
        tool,
        claims: &claims,
        out,
        as_task,
        elicitation: declared.elicitation,
        // A synchronous call with a progress token reports progress on its stream.
        progress_token: params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|_| !as_task),
    };
    let snapshot = match call.settle(limit, responses).await? {
        Settled::Read(snapshot) => snapshot,
        Settled::InputRequired(requests) => {
            let state = RequestState {
                claims: claims.clone(),
                arguments: digest,
            };
            let tickets = |key: &str, r: &InputRequest| {
                approval_meta(gw, caller, tool, &claims.native, key, r)
            };
            return Ok(json!({
                "resultType": "input_required",
                "inputRequests": input_requests(&requests, &tickets),
                "requestState": gw.keys.seal(Purpose::RequestState, caller, &state),
            }));
        }
    };
    if as_task {
        return Ok(task_created(tool, &claims, &handle));
    }
    let snapshot = snapshot.expect("a synchronous call always reads its run");
    let mut result = sync_outcome(tool, &snapshot, Version::V2026_07_28, limit, None)?;
    result["resultType"] = json!("complete");
    Ok(result)
}

/// `taskgate_logs`: a page of a task's log.
async fn call_logs(gw: &Gateway, caller: &Caller, params: &Value) -> Result<Value, RpcError> {
    let args = logs::args(params)?;
    let (claims, tool) = gw.open_for_logs(caller, &args.task)?;
    let mut result = logs::page(
        gw,
        caller,
        Version::V2026_07_28,
        tool,
        &claims.native,
        &args,
    )
    .await?;
    result["resultType"] = json!("complete");
    Ok(result)
}

/// The call's `inputResponses` (an object, or `empty` when absent).
fn input_responses<'p>(
    params: &'p Value,
    empty: &'p Map<String, Value>,
) -> Result<&'p Map<String, Value>, RpcError> {
    match params.get("inputResponses") {
        None => Ok(empty),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(RpcError::InvalidParams(
            "inputResponses must be an object".into(),
        )),
    }
}

/// How long to wait for input before answering: a task is created after
/// `input_wait` (or at once); a synchronous call waits for the outcome.
fn wait_limit(gw: &Gateway, tool: &Tool, as_task: bool, declared: &Declared) -> Duration {
    if as_task {
        if declared.elicitation {
            tool.config.input_wait.unwrap_or_default()
        } else {
            Duration::ZERO
        }
    } else {
        tool.config.max_wait.unwrap_or(gw.server.max_wait)
    }
}

/// The run of this call and its task handle: the retry of an input_required
/// result names its run in requestState; a first call starts one.
async fn start_or_resume(
    gw: &Gateway,
    caller: &Caller,
    tool: &Tool,
    args: Value,
    params: &Value,
    digest: &str,
) -> Result<(TaskClaims, String), RpcError> {
    let Some(state) = params.get("requestState") else {
        let started = gw
            .start(caller, tool, args, Dialect::TasksExtension, None)
            .await?;
        return Ok((started.claims, started.handle));
    };
    let claims = state
        .as_str()
        .and_then(|s| {
            gw.keys
                .open::<RequestState>(Purpose::RequestState, caller, s)
        })
        .filter(|r| r.claims.tool == tool.config.name && r.arguments == digest)
        .filter(|r| !r.claims.expired_at(std::time::SystemTime::now()))
        .map(|r| r.claims)
        .ok_or_else(|| {
            RpcError::InvalidParams(
                "requestState is invalid: altered, expired, or from another call".into(),
            )
        })?;
    let handle = gw.keys.seal(Purpose::Task, caller, &claims);
    Ok((claims, handle))
}

/// The `task` result of a call that became a task.
fn task_created(tool: &Tool, claims: &TaskClaims, handle: &str) -> Value {
    let now = claims.created_at();
    json!({
        "resultType": "task",
        "taskId": handle,
        "status": "working",
        "createdAt": timestamp(now),
        "lastUpdatedAt": timestamp(now),
        "ttlMs": claims.ttl_ms,
        "pollIntervalMs": tool.config.poll_interval.as_millis() as u64,
    })
}

/// One `tools/call` whose run has started (or resumed).
struct Call<'a> {
    gw: &'a Gateway,
    caller: &'a Caller,
    tool: &'a Tool,
    claims: &'a TaskClaims,
    out: Option<&'a Outbound>,
    as_task: bool,
    elicitation: bool,
    progress_token: Option<&'a Value>,
}

/// Where a call's wait for its run ended.
enum Settled {
    /// The last read of the run (`None`: a task created without reading it).
    Read(Option<Snapshot>),
    /// The run asks for input this call can take: these requests.
    InputRequired(BTreeMap<String, InputRequest>),
}

impl Call<'_> {
    /// Waits up to `limit` for the run to settle, forwarding the answers the
    /// client already sent (`responses`) as their requests open.
    async fn settle(
        &self,
        limit: Duration,
        responses: &Map<String, Value>,
    ) -> Result<Settled, RpcError> {
        let (gw, tool, native) = (self.gw, self.tool, &self.claims.native);
        let deadline = Instant::now() + limit;
        let mut answered = HashSet::new();
        let mut last_progress = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && self.as_task && answered.is_empty() && responses.is_empty() {
                return Ok(Settled::Read(None));
            }
            let snapshot = gw
                .wait(tool, native, left, |s| {
                    if let (Some(out), Some(token)) = (self.out, self.progress_token) {
                        notify_progress(out, token, s, Version::V2026_07_28, &mut last_progress);
                    }
                })
                .await?;
            let RunState::InputRequired { requests, .. } = &snapshot.state else {
                return Ok(Settled::Read(Some(snapshot)));
            };
            if !self.elicitation {
                return Ok(Settled::Read(Some(snapshot)));
            }
            // Answers the client already sent (on this retry) for open requests.
            // They are answers inside the call that starts the run: an approval
            // among them is refused (before any answer reaches the engine).
            let fresh: Map<String, Value> = responses
                .iter()
                .filter(|(k, _)| requests.contains_key(*k) && !answered.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !fresh.is_empty() {
                gw.answer(
                    self.caller,
                    Dialect::TasksExtension,
                    tool,
                    native,
                    &fresh,
                    Answering::StarterInCall,
                )
                .await?;
                answered.extend(fresh.keys().cloned());
                continue;
            }
            // Only approvals are open: this call cannot take them, so the task is
            // created (an approver answers it with the ticket its `tasks/get` shows).
            if self.as_task && requests.iter().all(|(k, r)| tool.is_approval(k, r)) {
                return Ok(Settled::Read(Some(snapshot)));
            }
            return Ok(Settled::InputRequired(requests.clone()));
        }
    }
}

/// What a `requestState` holds: the run a `tools/call` started, bound to the
/// tool and a digest of its arguments, so it resumes only the same call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RequestState {
    #[serde(rename = "k")]
    claims: TaskClaims,
    #[serde(rename = "a")]
    arguments: String,
}

fn arguments_digest(args: &Value) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(args.to_string().as_bytes()))
}

/// The `inputRequests` map of a run's open input requests; `approval` gives
/// the `_meta` of an approval gate's request (its ticket), `None` for a form.
fn input_requests(
    requests: &std::collections::BTreeMap<String, taskgate_engine::InputRequest>,
    approval: Approvals<'_>,
) -> Value {
    let map: Map<String, Value> = requests
        .iter()
        .map(|(key, r)| {
            let mut request = json!({ "method": "elicitation/create", "params": {
                "mode": "form", "message": r.message, "requestedSchema": r.requested_schema } });
            if let Some(meta) = approval(key, r) {
                request["params"]["_meta"] = meta;
            }
            (key.clone(), request)
        })
        .collect();
    Value::Object(map)
}

/// What an input request of an approval gate carries besides the question
/// (its `_meta`: the ticket), by key; `None` for a form.
pub type Approvals<'a> = &'a dyn Fn(&str, &taskgate_engine::InputRequest) -> Option<Value>;

/// No approval tickets (a listen stream: tickets are read with `tasks/get`).
pub fn no_tickets(_: &str, _: &taskgate_engine::InputRequest) -> Option<Value> {
    None
}

/// The `DetailedTask` view of a run, as a value: what a listen stream's
/// notification is checked against in its tests.
#[cfg(test)]
#[must_use]
pub fn detailed_task(
    task_id: &str,
    claims: &TaskClaims,
    tool: &Tool,
    snapshot: &Snapshot,
    approvals: Approvals<'_>,
) -> Value {
    serde_json::to_value(DetailedTask::of(task_id, claims, tool, snapshot, approvals))
        .unwrap_or(Value::Null)
}

/// The members of a `DetailedTask`, serialized in place: a `tasks/get` reply
/// is written from it straight to bytes. Fields are in alphabetical order, the
/// order a `serde_json::Map` would give them, so both ways write the same text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetailedTask<'a> {
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_requests: Option<Value>,
    last_updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    poll_interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    result_type: &'static str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    task_id: &'a str,
    /// `null` for a run kept as long as its engine keeps it.
    ttl_ms: Option<u64>,
}

impl<'a> DetailedTask<'a> {
    /// The view of `snapshot`, the run of task `task_id`; `approvals` gives
    /// the tickets of its approval gates.
    #[must_use]
    pub fn of(
        task_id: &'a str,
        claims: &TaskClaims,
        tool: &Tool,
        snapshot: &'a Snapshot,
        approvals: Approvals<'_>,
    ) -> Self {
        let (created_at, last_updated_at, poll_ms) = task_times(claims, tool, snapshot);
        Self {
            created_at,
            error: None,
            input_requests: None,
            last_updated_at,
            poll_interval_ms: None,
            result: None,
            result_type: "complete",
            status: "working",
            status_message: None,
            task_id,
            ttl_ms: claims.ttl_ms,
        }
        .with_state(snapshot, poll_ms, approvals)
    }

    /// The members that depend on the run's state (status, message, poll
    /// interval, result, error, input requests) set from `snapshot`.
    fn with_state(self, snapshot: &'a Snapshot, poll_ms: u64, approvals: Approvals<'_>) -> Self {
        let mut task = self;
        let poll_ms = Some(poll_ms);
        match &snapshot.state {
            RunState::Working { message, .. } => {
                task.poll_interval_ms = poll_ms;
                task.status_message = message.as_deref();
            }
            RunState::InputRequired { requests, message } => {
                task.status = "input_required";
                task.poll_interval_ms = poll_ms;
                task.status_message = message.as_deref();
                task.input_requests = Some(input_requests(requests, approvals));
            }
            RunState::Completed(output) => {
                task.status = "completed";
                let mut result = call_tool_result(output, Version::V2026_07_28);
                result["resultType"] = json!("complete");
                task.result = Some(result);
            }
            RunState::Failed { message } => {
                task.status = "failed";
                task.status_message = Some(message.as_str());
                task.error = Some(RpcError::RunFailed(message.clone()).to_object());
            }
            RunState::Cancelled { message } => {
                task.status = "cancelled";
                task.status_message = message.as_deref();
            }
        }
        task
    }

    /// The view of a run's state alone, without a task's own members (its
    /// id, creation time and TTL, left empty): what every listen stream on
    /// the run shares (see `listen`).
    fn of_run(poll_interval: Duration, snapshot: &'a Snapshot) -> Self {
        let poll = snapshot.poll_hint.unwrap_or_default().max(poll_interval);
        Self {
            created_at: String::new(),
            error: None,
            input_requests: None,
            last_updated_at: String::new(),
            poll_interval_ms: None,
            result: None,
            result_type: "complete",
            status: "working",
            status_message: None,
            task_id: "",
            ttl_ms: None,
        }
        .with_state(
            snapshot,
            u64::try_from(poll.as_millis()).unwrap_or(u64::MAX),
            &no_tickets,
        )
    }

    /// The JSON text of the view: what `serde_json` writes for it (tested),
    /// written member by member so that the task id and the timestamps are
    /// copied rather than scanned for escapes.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        use super::wire::json;
        let mut out = Vec::with_capacity(256 + self.task_id.len());
        json::key(&mut out, "createdAt", true);
        json::string(&mut out, &self.created_at);
        if let Some(error) = &self.error {
            json::key(&mut out, "error", false);
            json::value(&mut out, error);
        }
        if let Some(requests) = &self.input_requests {
            json::key(&mut out, "inputRequests", false);
            json::value(&mut out, requests);
        }
        json::key(&mut out, "lastUpdatedAt", false);
        json::string(&mut out, &self.last_updated_at);
        if let Some(poll) = self.poll_interval_ms {
            json::key(&mut out, "pollIntervalMs", false);
            json::number(&mut out, Some(poll));
        }
        if let Some(result) = &self.result {
            json::key(&mut out, "result", false);
            json::value(&mut out, result);
        }
        json::key(&mut out, "resultType", false);
        json::string(&mut out, self.result_type);
        json::key(&mut out, "status", false);
        json::string(&mut out, self.status);
        if let Some(message) = self.status_message {
            json::key(&mut out, "statusMessage", false);
            json::string(&mut out, message);
        }
        json::key(&mut out, "taskId", false);
        json::string(&mut out, self.task_id);
        json::key(&mut out, "ttlMs", false);
        json::number(&mut out, self.ttl_ms);
        out.push(b'}');
        out
    }
}

#[cfg(test)]
mod view_tests {
    use super::*;

    #[test]
    fn the_written_view_is_what_serde_json_writes() {
        let base = DetailedTask {
            created_at: "2026-12-04T22:15:00.123Z".into(),
            error: None,
            input_requests: None,
            last_updated_at: "2026-12-04T22:16:00.000Z".into(),
            poll_interval_ms: Some(5000),
            result: None,
            result_type: "complete",
            status: "working",
            status_message: Some("step 2 of 3"),
            task_id: "tg2.k.AbC-_9",
            ttl_ms: Some(86_400_000),
        };
        let odd = "quote \" backslash \\ newline \n tab \t bell \u{7} é ✓ \u{7f}";
        let views = [
            DetailedTask {
                ..base_clone(&base)
            },
            DetailedTask {
                ttl_ms: None,
                status_message: None,
                ..base_clone(&base)
            },
            DetailedTask {
                status_message: Some(odd),
                ..base_clone(&base)
            },
            DetailedTask {
                status: "completed",
                poll_interval_ms: None,
                result: Some(json!({"content": [{"type": "text", "text": odd}], "isError": false})),
                ..base_clone(&base)
            },
            DetailedTask {
                status: "failed",
                error: Some(json!({"code": -32603, "message": odd})),
                ..base_clone(&base)
            },
            DetailedTask {
                status: "input_required",
                input_requests: Some(json!({"ask": {"method": "elicitation/create"}})),
                ..base_clone(&base)
            },
        ];
        for view in &views {
            let serde = serde_json::to_vec(view).unwrap();
            assert_eq!(
                String::from_utf8(view.to_json()).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
    }

    fn base_clone<'a>(v: &DetailedTask<'a>) -> DetailedTask<'a> {
        DetailedTask {
            created_at: v.created_at.clone(),
            error: v.error.clone(),
            input_requests: v.input_requests.clone(),
            last_updated_at: v.last_updated_at.clone(),
            poll_interval_ms: v.poll_interval_ms,
            result: v.result.clone(),
            result_type: v.result_type,
            status: v.status,
            status_message: v.status_message,
            task_id: v.task_id,
            ttl_ms: v.ttl_ms,
        }
    }
}
