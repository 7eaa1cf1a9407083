//! The front door both transports share: it parses a message, decides its
//! protocol era once (a typed [`Era`]), opens or seals the legacy session,
//! identifies the caller, and routes the message to the dialect layer.
//!
//! Transports hand it bytes and headers and get back a body, a status and, for
//! HTTP, a sealed session id to send; they never call a dialect themselves.

pub mod auth;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use axum::http::HeaderMap;
use serde_json::Value;
use subtle::ConstantTimeEq;
use tracing::Instrument;

use crate::core::audit::{self, Action, Outcome};
use crate::core::handle::Purpose;
use crate::core::stack::call_budget;
use crate::core::{Caller, Gateway};
use crate::dialect::session::Session;
use crate::dialect::stateless::Following;
use crate::dialect::wire::{Outbound, Version};
use crate::dialect::{self};
use crate::rpc::{self, Message, RpcError};
use crate::telemetry;

/// How many SEP-1391 calls of one stdio connection are remembered for
/// cancellation by request id.
const MAX_REMEMBERED_CALLS: usize = 4096;

/// The protocol era of a message, decided once by the front door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: every request carries its version and capabilities in `_meta`.
    Stateless,
    /// An `initialize`-based session (2024-11-05 … 2025-11-25), as negotiated,
    /// or as assumed for a request that comes without one.
    Session(Session),
}

/// What lives with one stdio connection (HTTP has no connection state): the
/// session `initialize` opened, and the SEP-1391 calls made on it, so a
/// `notifications/cancelled` naming a call's request id reaches its operation.
#[derive(Debug, Default)]
pub struct Connection {
    session: Mutex<Option<Session>>,
    operations: Mutex<HashMap<String, String>>,
}

impl Connection {
    /// A new connection, before `initialize`.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

/// Where a message came from.
#[derive(Clone, Copy)]
pub struct Inbound<'a> {
    /// The caller (its identity is bound into every handle).
    pub caller: &'a Caller,
    /// HTTP headers (absent on stdio).
    pub headers: Option<&'a HeaderMap>,
    /// The stdio connection (absent on HTTP).
    pub connection: Option<&'a Connection>,
    /// The peer's socket address (HTTP), for the audit trail; `None` on stdio.
    pub peer: Option<std::net::SocketAddr>,
}

/// A message the front door accepted, with its era.
#[derive(Debug)]
pub struct Admitted {
    message: Message,
    era: Era,
}

impl Admitted {
    /// True when the server may have messages to send before the response
    /// (progress, input requests), so a transport that can stream should. Only
    /// requests that wait for a run or ask on the client's behalf ever do:
    /// 2026-07-28 a `tools/call` carrying a progress token; legacy sessions a
    /// `tools/call`, a blocking `tasks/result` and a SEP-1391 status request.
    /// Everything else (`tasks/get`, `tools/list`, …) is answered as plain JSON.
    #[must_use]
    pub fn may_stream(&self) -> bool {
        let Message::Request { method, params, .. } = &self.message else {
            return false;
        };
        match self.era {
            Era::Stateless => {
                method == "subscriptions/listen"
                    || method == "tools/call"
                        && params
                            .get("_meta")
                            .and_then(|m| m.get("progressToken"))
                            .is_some()
            }
            Era::Session(_) => matches!(
                method.as_str(),
                "tools/call" | "tasks/result" | "tools/async/status"
            ),
        }
    }

    /// The key of a request (its id as JSON text), to cancel it in flight.
    #[must_use]
    pub fn request_key(&self) -> Option<String> {
        match &self.message {
            Message::Request { id, .. } => Some(id.to_string()),
            _ => None,
        }
    }

    /// For `notifications/cancelled`: the key of the request it names.
    #[must_use]
    pub fn cancelled_request_key(&self) -> Option<String> {
        match &self.message {
            Message::Notification { method, params } if method == "notifications/cancelled" => {
                Some(
                    params
                        .get("requestId")
                        .map(Value::to_string)
                        .unwrap_or_default(),
                )
            }
            _ => None,
        }
    }
}

/// A message refused before it reached a dialect: the HTTP status and body.
#[derive(Debug)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The JSON-RPC error response.
    pub body: Value,
}

impl Refusal {
    fn new(error: &RpcError, id: &Value) -> Self {
        Self {
            status: error.http_status(true),
            body: error.response(id),
        }
    }
}

/// What a message turned into.
#[derive(Debug)]
pub struct Dispatched {
    /// The response, if the message was a request.
    pub body: Option<rpc::Body>,
    /// The HTTP status to use.
    pub status: u16,
    /// A sealed `Mcp-Session-Id` to send back (HTTP `initialize`).
    pub session_id: Option<String>,
    /// For a 403 `insufficient_scope` refusal: the scopes to name in the challenge.
    pub required_scopes: Option<Vec<String>>,
    /// A listen stream's notifications after its request: the transport
    /// sends them, then `body`.
    pub following: Option<Following>,
}

impl Dispatched {
    /// A notification or a client's response, taken: no body, 202.
    fn accepted() -> Self {
        Self {
            body: None,
            status: 202,
            session_id: None,
            required_scopes: None,
            following: None,
        }
    }
}

/// The caller of an HTTP request, from its bearer token: a static token's caller,
/// or the issuer and subject of a valid OAuth access token; `anonymous` when
/// neither static tokens nor OAuth are configured. A refusal is audited (without
/// the token).
///
/// # Errors
///
/// [`auth::AuthError`] when a token is required and none valid was presented.
pub async fn identify(
    gw: &Gateway,
    oauth: Option<&auth::Authenticator>,
    headers: &HeaderMap,
) -> Result<Caller, auth::AuthError> {
    if gw.bearer.is_empty() && oauth.is_none() {
        return Ok(Caller::plain("anonymous"));
    }
    let outcome = identify_token(gw, oauth, headers).await;
    if let Err(e) = &outcome {
        tracing::debug!(reason = e.reason(), "request without valid credentials");
        if let auth::AuthError::Unavailable { .. } = e {
            tracing::warn!(error = %e, "a token could not be checked");
        }
        audit::record(
            Action::Request,
            "",
            None,
            None,
            None,
            Outcome::Refused(e.reason()),
        );
    }
    outcome
}

async fn identify_token(
    gw: &Gateway,
    oauth: Option<&auth::Authenticator>,
    headers: &HeaderMap,
) -> Result<Caller, auth::AuthError> {
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .unwrap_or("");
    if presented.is_empty() {
        return Err(auth::AuthError::Missing);
    }
    let mut found = None;
    for (token, caller) in &gw.bearer {
        if bool::from(token.as_bytes().ct_eq(presented.as_bytes())) {
            found = Some(caller);
        }
    }
    if let Some(caller) = found {
        return Ok(caller.clone());
    }
    match oauth {
        Some(oauth) => oauth.validate(presented).await,
        None => Err(auth::AuthError::Invalid("unknown_token")),
    }
}

/// The caller on stdio: the local user running the server (`local:USER`), with
/// the scopes and groups of `[auth.local]`.
#[must_use]
pub fn local_caller(gw: &Gateway) -> Caller {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "local".to_owned());
    Caller::new(
        format!("local:{user}"),
        gw.local.scopes.clone(),
        gw.local.groups.clone(),
    )
}

/// True when a message is 2026-07-28: its `_meta` names a version, or its
/// `MCP-Protocol-Version` header names a version newer than every legacy one (a
/// body that then lacks the `_meta` keys is a malformed 2026-07-28 request,
/// answered -32602 with HTTP 400, not a legacy one: legacy sessions never send
/// such a header).
fn is_stateless(params: &rpc::Params, headers: Option<&HeaderMap>) -> bool {
    params.facts().version != rpc::Member::Absent
        || header_version(headers).is_some_and(|v| !Version::LEGACY.contains(&v))
}

fn header_version(headers: Option<&HeaderMap>) -> Option<Version> {
    headers?
        .get(rpc::header::PROTOCOL_VERSION)?
        .to_str()
        .ok()
        .and_then(Version::parse)
}

/// The era of `message`, given the session its transport knows of (`None`:
/// none was presented).
fn era_of(message: &Message, headers: Option<&HeaderMap>, session: Option<Session>) -> Era {
    let stateless = match message {
        Message::Request { params, .. } | Message::Notification { params, .. } => {
            is_stateless(params, headers)
        }
        Message::Response { .. } => false,
    };
    if stateless {
        Era::Stateless
    } else {
        Era::Session(session.unwrap_or_else(|| Session::assumed(header_version(headers))))
    }
}

/// Opens an HTTP request's `Mcp-Session-Id`: `Ok(None)` when it has none.
fn presented_session(gw: &Gateway, inbound: &Inbound<'_>) -> Result<Option<Session>, ()> {
    let Some(id) = inbound.headers.and_then(|h| h.get(rpc::header::SESSION_ID)) else {
        return Ok(None);
    };
    id.to_str()
        .ok()
        .and_then(|id| {
            gw.keys
                .open::<Session>(Purpose::Session, inbound.caller, id)
        })
        .map(Some)
        .ok_or(())
}

fn parse(body: &[u8]) -> Result<Message, Refusal> {
    Message::from_slice(body).map_err(|(e, id)| Refusal::new(&e, &id))
}

/// Parses one message and decides its era. On stdio, a SEP-1391 `tools/call` is
/// remembered with the connection here, before it is served, so a cancel that
/// follows it on the wire finds it.
///
/// # Errors
///
/// A [`Refusal`] for a parse error, an invalid request, or an HTTP session id
/// that does not open.
pub fn admit(gw: &Gateway, inbound: &Inbound<'_>, body: &[u8]) -> Result<Admitted, Refusal> {
    let message = parse(body)?;
    let session = if let Some(connection) = inbound.connection {
        connection.session.lock().expect("lock").clone()
    } else if is_stateless_message(&message, inbound.headers) {
        None
    } else {
        presented_session(gw, inbound).map_err(|()| {
            let id = match &message {
                Message::Request { id, .. } => id.clone(),
                _ => Value::Null,
            };
            Refusal::new(&RpcError::SessionNotFound, &id)
        })?
    };
    if let (Some(connection), Message::Request { id, method, params }) =
        (inbound.connection, &message)
    {
        if let Some(token) = dialect::call_operation_token(method, params) {
            let mut calls = connection.operations.lock().expect("lock");
            // Bounded: a long-lived connection does not grow without end; older
            // calls can still be cancelled by _operation.token.
            if calls.len() >= MAX_REMEMBERED_CALLS {
                calls.clear();
            }
            calls.insert(id.to_string(), token.to_owned());
        }
    }
    let era = era_of(&message, inbound.headers, session);
    Ok(Admitted { message, era })
}

fn is_stateless_message(message: &Message, headers: Option<&HeaderMap>) -> bool {
    matches!(era_of(message, headers, None), Era::Stateless)
}

/// Serves one admitted message. `out` carries what the server sends before the
/// response (an SSE stream, stdout). Its engine calls are bounded by
/// `server.max_engine_calls` (an entry of a batch shares the batch's bound).
///
/// Not an `async fn`: the future returned is the request's own, in its scopes,
/// no larger (hyper moves a request's future whole).
pub fn dispatch<'a>(
    gw: &'a Gateway,
    inbound: &'a Inbound<'a>,
    admitted: Admitted,
    out: Option<Outbound>,
) -> impl Future<Output = Dispatched> + 'a {
    let method = match &admitted.message {
        Message::Request { method, .. } | Message::Notification { method, .. } => method.as_str(),
        _ => "",
    };
    let context = if inbound.connection.is_some() {
        audit::Context::stdio(method)
    } else {
        audit::Context::new(inbound.peer, method)
    };
    let work = call_budget::within_for(
        gw.server.max_engine_calls,
        &gw.quotas,
        inbound.caller.id(),
        dispatch_unbounded(gw, inbound, admitted, out),
    );
    audit::scope(context, work)
}

async fn dispatch_unbounded(
    gw: &Gateway,
    inbound: &Inbound<'_>,
    admitted: Admitted,
    out: Option<Outbound>,
) -> Dispatched {
    let Admitted { message, era } = admitted;
    match message {
        Message::Request { id, method, params } => {
            let span = tracing::info_span!("request", method = %method, id = %id, task = tracing::field::Empty);
            let request = Incoming {
                id: &id,
                method: &method,
                params: &params,
            };
            let traced = trace_request(gw, inbound, &era, request);
            // The trace's server span is the current one while the request
            // is served (entered inside the log's `request` span), so the
            // engine spans are its children, and the start span sealed into a
            // handle and the links from later requests are this span.
            dispatch_request(gw, inbound, &era, request, out.as_ref(), &traced)
                .instrument(traced.clone())
                .instrument(span)
                .await
        }
        Message::Notification { method, params } => {
            tracing::debug!(method = %method, "notification");
            if method == "notifications/cancelled" {
                if let Some(refused) = unmappable_cancel(inbound, &era, &params) {
                    return refused;
                }
                // Boxed: a cancel's future (an engine call through the
                // stack) is KiBs, and inline it would make every request's
                // future as large, copied whole each time it is moved.
                Box::pin(cancel_operations(gw, inbound, &params)).await;
            }
            Dispatched::accepted()
        }
        Message::Response { id, result, error } => {
            // Boxed, as the cancel above: an answer reaches an engine.
            if let Err(e) = Box::pin(dialect::client_response(
                gw,
                inbound.caller,
                &id,
                result.as_ref(),
                error.as_ref(),
            ))
            .await
            {
                log_error(&e);
            }
            Dispatched::accepted()
        }
    }
}

/// One request's id, method and params.
#[derive(Clone, Copy)]
struct Incoming<'a> {
    id: &'a Value,
    method: &'a str,
    params: &'a rpc::Params,
}

/// The SERVER span of a request (disabled, and nothing read, when tracing is
/// off): its method, id and protocol version, the tool of a `tools/call`
/// (when it is one of ours), continuing the caller's context from
/// `params._meta` or the HTTP headers.
fn trace_request(
    gw: &Gateway,
    inbound: &Inbound<'_>,
    era: &Era,
    request: Incoming<'_>,
) -> tracing::Span {
    let transport = if inbound.connection.is_some() {
        telemetry::Transport::Stdio
    } else {
        telemetry::Transport::Http
    };
    let method = crate::core::metrics::Metrics::method_label(request.method);
    let span = telemetry::request_span(method, request.id, transport);
    if span.is_disabled() {
        return span;
    }
    let version = era_label(era, request);
    if version != crate::core::metrics::OTHER {
        telemetry::record_version(&span, version);
    }
    let params: &Value = request.params;
    if let Some(remote) = telemetry::remote_parent(params.get("_meta"), inbound.headers) {
        telemetry::continue_remote(&span, remote);
    }
    if request.method == "tools/call" {
        if let Some(tool) = params
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| gw.tool(name).is_ok())
        {
            telemetry::record_tool(&span, method, tool);
        }
    }
    span
}

/// A request: routed to its dialect, counted in the metrics, answered.
/// `traced` is its span, which learns how it ended.
async fn dispatch_request(
    gw: &Gateway,
    inbound: &Inbound<'_>,
    era: &Era,
    request: Incoming<'_>,
    out: Option<&Outbound>,
    traced: &tracing::Span,
) -> Dispatched {
    let began = std::time::Instant::now();
    let method_label = crate::core::metrics::Metrics::method_label(request.method);
    let mut opened = None;
    let mut following = None;
    let outcome = route(gw, inbound, era, request, out, &mut opened, &mut following).await;
    gw.metrics.request(
        method_label,
        era_label(era, request),
        outcome.is_ok(),
        began.elapsed(),
    );
    if !traced.is_disabled() {
        match &outcome {
            Ok(rpc::Body::Value(result)) => telemetry::record_error(
                traced,
                None,
                result.get("isError") == Some(&Value::Bool(true)),
            ),
            Ok(rpc::Body::Written(_)) => {}
            Err(e) => telemetry::record_error(traced, Some(e.code()), false),
        }
    }
    match outcome {
        Ok(result) => Dispatched {
            body: Some(rpc::ok(request.id, result)),
            status: 200,
            session_id: opened.and_then(|s| keep_session(gw, inbound, s)),
            required_scopes: None,
            following,
        },
        Err(e) => {
            log_error(&e);
            Dispatched {
                status: e.http_status(*era == Era::Stateless),
                body: Some(e.response(request.id).into()),
                session_id: None,
                required_scopes: e.required_scopes().map(<[String]>::to_vec),
                following: None,
            }
        }
    }
}

/// The protocol version a request is counted under in the metrics.
fn era_label(era: &Era, request: Incoming<'_>) -> &'static str {
    let version = |v: &str| {
        dialect::wire::Version::parse(v)
            .map_or(crate::core::metrics::OTHER, dialect::wire::Version::as_str)
    };
    match era {
        Era::Stateless => dialect::wire::Version::V2026_07_28.as_str(),
        // No session yet: the version the client asks for.
        Era::Session(_) if request.method == "initialize" => version(
            request.params["protocolVersion"]
                .as_str()
                .unwrap_or_default(),
        ),
        Era::Session(s) => version(&s.version),
    }
}

/// Hands a request to the dialect that speaks its era; an `initialize` opens
/// a session, left in `opened`; a `subscriptions/listen` leaves its stream's
/// notifications in `following`.
async fn route(
    gw: &Gateway,
    inbound: &Inbound<'_>,
    era: &Era,
    request: Incoming<'_>,
    out: Option<&Outbound>,
    opened: &mut Option<Session>,
    following: &mut Option<Following>,
) -> Result<rpc::Body, RpcError> {
    let Incoming { id, method, params } = request;
    let caller = inbound.caller;
    match era {
        // The dialects' futures are boxed: each is several KiB, and
        // unboxed they would make every future around them as large,
        // copied whole each time one is moved (per request).
        Era::Stateless if method == "subscriptions/listen" => {
            let (closing, stream) = Box::pin(dialect::stateless::listen(
                gw,
                caller,
                inbound.headers,
                out,
                id,
                params,
            ))
            .await?;
            *following = Some(stream);
            Ok(rpc::Body::Value(closing))
        }
        Era::Stateless => {
            Box::pin(dialect::stateless::serve(dialect::wire::Request {
                gw,
                caller,
                version: Version::V2026_07_28,
                headers: inbound.headers,
                out,
                method,
                params,
            }))
            .await
        }
        Era::Session(_) if method == "initialize" => {
            let (session, result) = dialect::initialize(params);
            *opened = Some(session);
            Ok(rpc::Body::Value(result))
        }
        Era::Session(session) => {
            Box::pin(dialect::in_session(
                gw, caller, session, out, method, params,
            ))
            .await
        }
    }
}

/// A session `initialize` opened: kept with a stdio connection, or sealed into
/// the `Mcp-Session-Id` an HTTP client sends back.
fn keep_session(gw: &Gateway, inbound: &Inbound<'_>, session: Session) -> Option<String> {
    match inbound.connection {
        Some(connection) => {
            *connection.session.lock().expect("lock") = Some(session);
            None
        }
        None => Some(gw.keys.seal(Purpose::Session, inbound.caller, &session)),
    }
}

/// SEP-1391 over HTTP: a `notifications/cancelled` of an opted-in session that
/// names only a `requestId` cannot reach an operation, because taskgate keeps no
/// table from request ids to tokens (any replica may get the notification).
/// Rather than drop it silently it is refused with 400 and a JSON-RPC error
/// (no id) saying how to cancel: `params._operation.token`. Ordinary HTTP
/// requests are cancelled by closing their stream, so nothing else is lost.
fn unmappable_cancel(inbound: &Inbound<'_>, era: &Era, params: &Value) -> Option<Dispatched> {
    let Era::Session(session) = era else {
        return None;
    };
    if inbound.connection.is_some()
        || !session.operations
        || dialect::cancelled_operation_token(params).is_some()
    {
        return None;
    }
    let e = RpcError::InvalidParams(
        "notifications/cancelled over HTTP must name the operation with params._operation.token: \
         taskgate keeps no table from request ids to operations (nothing was cancelled; \
         in-flight requests are cancelled by closing their stream)"
            .into(),
    );
    Some(Dispatched {
        body: Some(e.response(&Value::Null).into()),
        status: 400,
        session_id: None,
        required_scopes: None,
        following: None,
    })
}

/// SEP-1391: a cancel may name the operation by its token, or (on stdio) by the
/// request id of the call that started it.
async fn cancel_operations(gw: &Gateway, inbound: &Inbound<'_>, params: &Value) {
    let mut tokens: Vec<String> = dialect::cancelled_operation_token(params)
        .map(str::to_owned)
        .into_iter()
        .collect();
    if let Some(connection) = inbound.connection {
        let key = params
            .get("requestId")
            .map(Value::to_string)
            .unwrap_or_default();
        if let Some(token) = connection.operations.lock().expect("lock").get(&key) {
            if !tokens.contains(token) {
                tokens.push(token.clone());
            }
        }
    }
    for token in tokens {
        if let Err(e) = dialect::cancel_operation(gw, inbound.caller, &token).await {
            tracing::info!(error = %e, "cancel of an operation failed");
        }
    }
}

/// Serves a JSON-RPC batch: accepted only in 2025-03-26 sessions, the one
/// version that has them. Messages are served one after another; the answers
/// come back as an array, `None` when the batch held no requests.
///
/// # Errors
///
/// A [`Refusal`] for a body that is not a batch, an empty batch, or a session
/// of another version.
pub async fn dispatch_batch(
    gw: &Gateway,
    inbound: &Inbound<'_>,
    body: &[u8],
) -> Result<Option<Value>, Refusal> {
    let invalid = |why: &str| {
        let err = RpcError::InvalidRequest(why.to_owned());
        Refusal::new(&err, &Value::Null)
    };
    let items: Vec<Value> = serde_json::from_slice(body)
        .map_err(|e| Refusal::new(&RpcError::Parse(e.to_string()), &Value::Null))?;
    if items.is_empty() {
        return Err(invalid("an empty batch"));
    }
    if items.len() > gw.server.max_batch {
        return Err(invalid(&format!(
            "a batch of {} entries is longer than this server accepts ({}, server.max_batch)",
            items.len(),
            gw.server.max_batch
        )));
    }
    let session = presented_session(gw, inbound).ok().flatten();
    let version = session
        .as_ref()
        .map(Session::version)
        .or_else(|| header_version(inbound.headers));
    if version.is_some_and(|v| v != Version::V2025_03_26) {
        return Err(invalid("batches exist only in protocol version 2025-03-26"));
    }
    // One bound on engine calls for the whole batch: entries past it get a
    // retryable error each.
    let answers = call_budget::within_for(
        gw.server.max_engine_calls,
        &gw.quotas,
        inbound.caller.id(),
        async {
            let mut answers = Vec::new();
            for item in items {
                let id = item.get("id").cloned().unwrap_or(Value::Null);
                match Message::parse(item) {
                    Ok(message) => {
                        let era = era_of(&message, inbound.headers, session.clone());
                        let admitted = Admitted { message, era };
                        if let Some(body) = dispatch(gw, inbound, admitted, None).await.body {
                            answers.push(body.into_value());
                        }
                    }
                    Err(e) => answers.push(e.response(&id)),
                }
            }
            answers
        },
    )
    .await;
    Ok((!answers.is_empty()).then_some(Value::Array(answers)))
}

fn log_error(e: &RpcError) {
    match e {
        RpcError::Engine(inner) => {
            tracing::warn!(error = %inner, source = ?std::error::Error::source(inner), "engine error");
        }
        RpcError::Internal(m) => tracing::error!(error = %m, "internal error"),
        other => tracing::debug!(code = other.code(), "request refused"),
    }
}
