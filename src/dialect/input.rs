//! Input requests sent to clients as real JSON-RPC requests (`elicitation/create`),
//! for the dialects that use them (2025-11-25 tasks, SEP-1391 operations, and
//! 2025-06-18 calls that wait).
//!
//! taskgate keeps no table of what it asked: the request id is itself sealed and
//! names the tool, the native run and the input key, so the client's answer can
//! arrive on any connection or replica and still reach the right run.
//!
//! The id is sealed for the caller who started the run. An approval gate's
//! request also carries, in `_meta["taskgate/approval"]`, a ticket sealed for
//! no caller: another person's client answers with it as the id of its JSON-RPC
//! response (or as the `taskId` of a 2026-07-28 `tasks/update`), and the tool's
//! `answer_access` and `four_eyes` decide whether that person may.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use taskgate_engine::InputRequest;

use super::wire::{Outbound, Version};
use crate::core::gateway::answers::{Answering, TICKET_PREFIX};
use crate::core::handle::{Dialect, Purpose};
use crate::core::{Caller, Gateway, Tool};
use crate::rpc::RpcError;

/// Prefix of the ids of taskgate's own requests.
pub const ID_PREFIX: &str = "tg-in.";

/// What a sealed input-request id holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct InputClaims {
    #[serde(rename = "t")]
    tool: String,
    #[serde(rename = "r")]
    native: String,
    #[serde(rename = "k")]
    key: String,
    /// Asked inside the call that started the run (a call that waits).
    #[serde(rename = "w", default)]
    in_call: bool,
}

/// The `_meta` key of an approval gate's input request.
pub const APPROVAL_META: &str = "taskgate/approval";

/// The `_meta` of the input request `key` of a run of `tool` that `starter`
/// started, when it is an approval gate: its ticket and whether four eyes
/// apply. `None` for a form.
#[must_use]
pub fn approval_meta(
    gw: &Gateway,
    starter: &str,
    tool: &Tool,
    native: &str,
    key: &str,
    request: &InputRequest,
) -> Option<Value> {
    tool.is_approval(key, request).then(|| {
        json!({ APPROVAL_META: {
            "ticket": gw.approval_ticket(starter, tool, native, key),
            "fourEyes": tool.config.four_eyes,
        } })
    })
}

/// Sends an `elicitation/create` request for each outstanding input request not
/// sent yet during this client request. `decorate` adds the dialect's marker
/// (`_meta` related-task, or `_operation`); `in_call` says the request is the
/// call that started the run (its answers to approvals are refused).
#[allow(clippy::too_many_arguments)]
pub fn ask(
    gw: &Gateway,
    caller: &Caller,
    out: &Outbound,
    tool: &Tool,
    native: &str,
    requests: &BTreeMap<String, InputRequest>,
    version: Version,
    sent: &mut HashSet<String>,
    decorate: &dyn Fn(&mut Map<String, Value>),
    in_call: bool,
) {
    for (key, request) in requests {
        if !sent.insert(key.clone()) {
            continue;
        }
        let claims = InputClaims {
            tool: tool.name().to_owned(),
            native: native.to_owned(),
            key: key.clone(),
            in_call,
        };
        // The id expires as the tool's tasks do, counted from this request.
        let id = format!(
            "{ID_PREFIX}{}",
            gw.keys
                .seal_expiring(Purpose::Input, caller, &claims, tool.config.keep_alive)
        );
        let mut params = Map::new();
        if version >= Version::V2025_11_25 {
            params.insert("mode".into(), json!("form"));
        }
        params.insert("message".into(), json!(request.message));
        params.insert("requestedSchema".into(), request.requested_schema.clone());
        decorate(&mut params);
        if let Some(Value::Object(approval)) = approval_meta(gw, caller, tool, native, key, request)
        {
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.extend(approval);
            }
        }
        let message =
            json!({ "jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params });
        if out.send(message.into()).is_err() {
            tracing::debug!("the client stream closed before an input request could be sent");
        }
    }
}

/// Forwards a client's answer to one of taskgate's input requests. Answers to
/// ids taskgate did not seal (for this caller), or whose id has expired (the
/// tool's `keep_alive` after the request was sent), are dropped. An id that is
/// an approval ticket is answered by whoever sends it, as the tool's
/// `answer_access` and `four_eyes` allow.
///
/// An answer is a JSON-RPC response, which gets no reply: a retryable engine
/// error (throttled, unavailable, past its deadline) cannot reach the client,
/// which would wait for a run that never got its answer. So forwarding is tried
/// again, each attempt under its own call deadline, while the error is
/// retryable and less than `server.max_wait` has passed; the client's POST
/// waits that long at most. A repeated answer is safe: the run is read before
/// each attempt, and an answer that did land leaves nothing outstanding to
/// answer again.
///
/// # Errors
///
/// Engine errors while forwarding; a retryable one once `server.max_wait` has
/// passed.
pub async fn route_response(
    gw: &Gateway,
    caller: &Caller,
    id: &Value,
    result: Option<&Value>,
    error: Option<&Value>,
) -> Result<bool, RpcError> {
    let ticket = id.as_str().filter(|s| s.starts_with(TICKET_PREFIX));
    let (claims, tool, starter) = if let Some(ticket) = ticket {
        let Ok((t, tool)) = gw.open_ticket(ticket) else {
            tracing::debug!("dropped an answer to an unknown approval ticket");
            return Ok(false);
        };
        let claims = InputClaims {
            tool: t.tool,
            native: t.native,
            key: t.key,
            in_call: false,
        };
        (claims, tool, Some(t.starter))
    } else {
        let Some(sealed) = id.as_str().and_then(|s| s.strip_prefix(ID_PREFIX)) else {
            return Ok(false);
        };
        let opened = gw.keys.open_unexpired::<InputClaims>(
            Purpose::Input,
            caller,
            sealed,
            std::time::SystemTime::now(),
        );
        let Some(claims) = opened else {
            tracing::debug!("dropped an answer to an unknown input request");
            return Ok(false);
        };
        let Ok(tool) = gw.tool(&claims.tool) else {
            return Ok(false);
        };
        (claims, tool, None)
    };
    let how = match &starter {
        Some(starter) => Answering::Ticket {
            starter,
            key: &claims.key,
        },
        None if claims.in_call => Answering::StarterInCall,
        None => Answering::Starter,
    };
    let answer = match (result, error) {
        (Some(result), _) => result.clone(),
        // The client failed the request: treat it as dismissed.
        (None, _) => json!({ "action": "cancel" }),
    };
    let mut responses = Map::new();
    responses.insert(claims.key.clone(), answer);
    let forwarded = crate::core::stack::retrying(gw.server.max_wait, || async {
        match gw
            .answer(
                caller,
                Dialect::PlainHandle,
                tool,
                &claims.native,
                &responses,
                how,
            )
            .await
        {
            Err(crate::core::CoreError::Engine(e)) if e.is_retryable() => {
                tracing::warn!(tool = %tool.name(), error = %e, "forwarding an answer failed; trying again");
                Err(e)
            }
            other => Ok(other),
        }
    })
    .await
    .map_err(RpcError::Engine)?
    .map_err(|e| RpcError::from_core(e, "the run was not found"))?;
    tracing::info!(tool = %tool.name(), forwarded, "client answered an input request");
    Ok(forwarded > 0)
}
