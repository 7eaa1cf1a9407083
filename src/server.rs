//! The front door shared by both transports: classify a message, detect its era,
//! and hand it to the dialect that speaks it.

use axum::http::HeaderMap;
use serde_json::Value;
use tracing::Instrument;

use crate::gateway::Gateway;
use crate::legacy::{self, Session};
use crate::modern;
use crate::rpc::{self, Message, RpcError};

/// What a message turned into.
#[derive(Debug)]
pub struct Dispatched {
    /// The response, if the message was a request.
    pub body: Option<Value>,
    /// The HTTP status to use.
    pub status: u16,
    /// A session opened by `initialize`.
    pub opened: Option<Session>,
}

/// Where a message came from.
pub struct Origin<'a> {
    /// The caller's identity (bound into every handle).
    pub caller: &'a str,
    /// HTTP headers (absent on stdio).
    pub headers: Option<&'a HeaderMap>,
    /// The legacy session this message belongs to, when known.
    pub session: Option<&'a Session>,
    /// Where messages sent before the response go (an SSE stream, stdout).
    pub out: Option<crate::input::Outbound>,
}

/// Handles one message.
pub async fn dispatch(gw: &Gateway, message: Message, origin: &Origin<'_>) -> Dispatched {
    match message {
        Message::Request { id, method, params } => {
            let span = tracing::info_span!("request", method = %method, id = %id, task = tracing::field::Empty);
            async move {
                let modern = modern::is_modern_http(&params, origin.headers);
                let mut opened = None;
                let outcome = if modern {
                    modern::handle(
                        gw,
                        origin.caller,
                        origin.headers,
                        origin.out.as_ref(),
                        &method,
                        &params,
                    )
                    .await
                } else if method == "initialize" {
                    let (session, result) = legacy::initialize(&params);
                    opened = Some(session);
                    Ok(result)
                } else {
                    let assumed;
                    let session = match origin.session {
                        Some(s) => s,
                        None => {
                            assumed = Session::assumed(header_version(origin.headers));
                            &assumed
                        }
                    };
                    legacy::handle(
                        gw,
                        origin.caller,
                        session,
                        origin.out.as_ref(),
                        &method,
                        &params,
                    )
                    .await
                };
                match outcome {
                    Ok(result) => Dispatched {
                        body: Some(rpc::ok(&id, result)),
                        status: 200,
                        opened,
                    },
                    Err(e) => {
                        log_error(&e);
                        Dispatched {
                            status: e.http_status(modern),
                            body: Some(e.response(&id)),
                            opened: None,
                        }
                    }
                }
            }
            .instrument(span)
            .await
        }
        Message::Notification { method, params } => {
            tracing::debug!(method = %method, "notification");
            if method == "notifications/cancelled" {
                // SEP-1391: a cancel may name the operation by its token.
                if let Some(token) = params
                    .get("_operation")
                    .and_then(|o| o.get("token"))
                    .and_then(Value::as_str)
                {
                    if let Err(e) = crate::operations::cancel(gw, origin.caller, token).await {
                        tracing::info!(error = %e, "cancel by operation token failed");
                    }
                }
            }
            Dispatched {
                body: None,
                status: 202,
                opened: None,
            }
        }
        Message::Response { id, result, error } => {
            if let Err(e) = crate::input::route_response(
                gw,
                origin.caller,
                &id,
                result.as_ref(),
                error.as_ref(),
            )
            .await
            {
                log_error(&e);
            }
            Dispatched {
                body: None,
                status: 202,
                opened: None,
            }
        }
    }
}

fn header_version(headers: Option<&HeaderMap>) -> Option<crate::wire::Version> {
    headers?
        .get("mcp-protocol-version")?
        .to_str()
        .ok()
        .and_then(crate::wire::Version::parse)
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

/// Parses a body into a message, or the error response to send.
///
/// # Errors
///
/// The response for a parse error or an invalid request.
pub fn parse(body: &[u8]) -> Result<Message, (u16, Value)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let err = RpcError::Parse(e.to_string());
        (err.http_status(true), err.response(&Value::Null))
    })?;
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    Message::parse(value).map_err(|e| (e.http_status(true), e.response(&id)))
}
