//! Answers to a run's input requests: through its task handle by the caller
//! who started it, or by anyone allowed with an approval ticket.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use taskgate_engine::{InputRequest, InputResponse, RunState};

use super::errors::{not_found, refusal_reason, CoreError};
use super::{Gateway, Tool};
use crate::core::access::Caller;
use crate::core::audit::{self, Action, Outcome};
use crate::core::handle::{unix_ms, Dialect, Purpose};

/// The prefix of approval tickets.
pub const TICKET_PREFIX: &str = "tg-ap.";

/// What an approval ticket holds: one approval question of one run, and the
/// caller who started the run. Sealed for no caller ([`Purpose::Approval`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketClaims {
    /// Tool name.
    #[serde(rename = "t")]
    pub tool: String,
    /// The engine's native reference.
    #[serde(rename = "r")]
    pub native: String,
    /// The input request's key.
    #[serde(rename = "k")]
    pub key: String,
    /// The caller who started the run.
    #[serde(rename = "s")]
    pub starter: String,
    /// When the ticket was issued, milliseconds since the Unix epoch.
    #[serde(rename = "c")]
    pub created_ms: u64,
    /// How long it stays valid (the tool's `keep_alive`), milliseconds.
    #[serde(rename = "l")]
    pub ttl_ms: u64,
}

/// Who answers a run's input requests, and how they reached them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answering<'a> {
    /// Through the run's task handle (or an input-request id sealed for the same
    /// caller), which only the caller who started the run opens: the starter,
    /// after the call that started the run.
    Starter,
    /// The starter, inside the `tools/call` that started the run (MRTR
    /// `inputResponses`, a call that waits): forms are answered, approvals
    /// refused.
    StarterInCall,
    /// Any caller, with an approval ticket for the question `key` of a run
    /// that `starter` started.
    Ticket {
        /// The caller who started the run (from the ticket).
        starter: &'a str,
        /// The one question the ticket answers.
        key: &'a str,
    },
}

impl Gateway {
    /// Forwards answers to outstanding input requests. Answers to keys that are
    /// not outstanding are dropped; an answer whose content does not fit the
    /// request's schema is refused before it reaches the engine, and so is an
    /// answer to an approval gate given inside the call that started the run,
    /// or (the tool's `four_eyes`) by the caller who started it. `how` says who
    /// answers: the starter through its task handle, or anyone with a ticket.
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidAnswer`] for malformed or non-conforming answers;
    /// [`CoreError::ApprovalRefused`]; engine errors; the refusals of the
    /// tool's `answer_access` (before any engine call).
    pub async fn answer(
        &self,
        caller: &Caller,
        dialect: Dialect,
        tool: &Tool,
        native: &str,
        responses: &Map<String, Value>,
        how: Answering<'_>,
    ) -> Result<usize, CoreError> {
        let starter = match how {
            Answering::Ticket { starter, .. } => starter,
            Answering::Starter | Answering::StarterInCall => caller.id(),
        };
        let run = audit::run_ref(tool.name(), native);
        let event = |approval: bool, outcome: Outcome| {
            let who = audit::Answerer {
                caller: caller.id(),
                starter,
                approval,
            };
            audit::record_answer(who, tool.name(), Some(dialect), Some(&run), outcome);
        };
        if let Some(refusal) = self.refusal(caller, tool, Action::Answer) {
            event(
                matches!(how, Answering::Ticket { .. }),
                Outcome::Refused(refusal_reason(&refusal)),
            );
            return Err(refusal);
        }
        let outcome = self
            .answer_authorized(caller, tool, native, responses, how)
            .await;
        // An answer event is written when one reached the engine, it failed, or
        // it was refused.
        match &outcome {
            Ok((0, _)) => {}
            Ok((_, approval)) => event(*approval, Outcome::Ok),
            Err(CoreError::ApprovalRefused { reason, .. }) => {
                event(true, Outcome::Refused(reason));
            }
            Err(_) => event(matches!(how, Answering::Ticket { .. }), Outcome::Failed),
        }
        outcome.map(|(n, _)| n)
    }

    /// Checks and forwards the answers; the count forwarded, and whether one of
    /// them answered an approval.
    async fn answer_authorized(
        &self,
        caller: &Caller,
        tool: &Tool,
        native: &str,
        responses: &Map<String, Value>,
        how: Answering<'_>,
    ) -> Result<(usize, bool), CoreError> {
        let snapshot = self.read(tool, native).await?;
        let RunState::InputRequired { requests, .. } = &snapshot.state else {
            return Ok((0, false));
        };
        let mut parsed = Vec::new();
        let mut approval = false;
        for (key, value) in responses {
            if let Answering::Ticket { key: only, .. } = how {
                if key != only {
                    continue;
                }
            }
            let Some(request) = requests.get(key) else {
                continue;
            };
            if tool.is_approval(key, request) {
                approval = true;
                approval_allowed(caller, tool, key, how)?;
            }
            let response = checked_answer(key, value, request)?;
            parsed.push((key.clone(), response));
        }
        for (key, response) in &parsed {
            tool.pipeline
                .answer(&native.to_owned(), key, response)
                .await
                .map_err(not_found)?;
        }
        Ok((parsed.len(), approval))
    }

    /// The approval ticket of the question `key` of a run of `tool` that
    /// `starter` started: `tg-ap.` and a value sealed for no caller, valid
    /// for the tool's `keep_alive`.
    #[must_use]
    pub fn approval_ticket(&self, starter: &str, tool: &Tool, native: &str, key: &str) -> String {
        let claims = TicketClaims {
            tool: tool.name().to_owned(),
            native: native.to_owned(),
            key: key.to_owned(),
            starter: starter.to_owned(),
            created_ms: unix_ms(SystemTime::now()),
            ttl_ms: tool.config.keep_alive.as_millis() as u64,
        };
        format!(
            "{TICKET_PREFIX}{}",
            self.keys.seal(Purpose::Approval, "", &claims)
        )
    }

    /// Checks that `caller` may answer input requests of a run of `tool` (its
    /// `answer_access`), auditing a refusal.
    ///
    /// # Errors
    ///
    /// As [`Gateway::authorize`].
    pub fn authorize_answer(
        &self,
        caller: &Caller,
        tool: &Tool,
        dialect: Dialect,
        native: &str,
    ) -> Result<(), CoreError> {
        self.authorize(caller, tool, Action::Answer, dialect, Some(native))
    }

    /// Opens an approval ticket.
    ///
    /// # Errors
    ///
    /// [`CoreError::NotFound`], alike for every reason (not a ticket, altered,
    /// expired, a tool no longer configured).
    pub fn open_ticket(&self, ticket: &str) -> Result<(TicketClaims, &Tool), CoreError> {
        let claims = ticket
            .strip_prefix(TICKET_PREFIX)
            .and_then(|sealed| {
                self.keys
                    .open::<TicketClaims>(Purpose::Approval, "", sealed)
            })
            .filter(|c| unix_ms(SystemTime::now()) < c.created_ms.saturating_add(c.ttl_ms))
            .ok_or_else(|| {
                self.metrics
                    .refused(crate::core::metrics::Refusal::Unopenable);
                CoreError::NotFound
            })?;
        let tool = self.tool(&claims.tool).map_err(|_| CoreError::NotFound)?;
        Ok((claims, tool))
    }

    /// Answers the question an approval ticket names, as `caller`: the tool's
    /// `answer_access` must admit it and, with `four_eyes`, it must not be the
    /// caller who started the run. Answers to other keys are dropped.
    ///
    /// # Errors
    ///
    /// As [`Gateway::answer`]; [`CoreError::NotFound`] for a ticket that does
    /// not open.
    pub async fn answer_ticket(
        &self,
        caller: &Caller,
        dialect: Dialect,
        ticket: &str,
        responses: &Map<String, Value>,
    ) -> Result<usize, CoreError> {
        let (claims, tool) = self.open_ticket(ticket)?;
        let how = Answering::Ticket {
            starter: &claims.starter,
            key: &claims.key,
        };
        self.answer(caller, dialect, tool, &claims.native, responses, how)
            .await
    }
}

/// Refuses an answer to the approval gate `key` given inside the call that
/// started the run, or (the tool's `four_eyes`) by the run's starter.
fn approval_allowed(
    caller: &Caller,
    tool: &Tool,
    key: &str,
    how: Answering<'_>,
) -> Result<(), CoreError> {
    let own = match how {
        Answering::Ticket { starter, .. } => starter == caller.id(),
        Answering::Starter | Answering::StarterInCall => true,
    };
    if how == Answering::StarterInCall {
        return Err(CoreError::ApprovalRefused {
            reason: "approval_in_call",
            message: format!(
                "inputResponses.{key}: an approval is not taken inside the call that \
                 started the run; answer it once the task exists (tasks/update), or \
                 have another caller allowed to approve it answer with its approval ticket"
            ),
        });
    }
    if own && tool.config.four_eyes {
        return Err(CoreError::ApprovalRefused {
            reason: "four_eyes",
            message: format!(
                "inputResponses.{key}: tool {} asks for four eyes: the caller who \
                 started the run may not approve it; another caller allowed to answer \
                 must, with the approval ticket",
                tool.name()
            ),
        });
    }
    Ok(())
}

/// The answer `value` to the input request `key`, read as an elicitation
/// result; an accepted answer's content must fit the requested schema.
fn checked_answer(
    key: &str,
    value: &Value,
    request: &InputRequest,
) -> Result<InputResponse, CoreError> {
    let response: InputResponse = serde_json::from_value(value.clone()).map_err(|e| {
        CoreError::InvalidAnswer(format!(
            "inputResponses.{key}: not an elicitation result: {e}"
        ))
    })?;
    if response.action == taskgate_engine::InputAction::Accept {
        let content = response
            .content
            .clone()
            .unwrap_or(Value::Object(Map::new()));
        if let Ok(v) = jsonschema::draft202012::new(&request.requested_schema) {
            let problems: Vec<String> = v
                .iter_errors(&content)
                .map(|e| format!("{}: {e}", e.instance_path))
                .collect();
            if !problems.is_empty() {
                return Err(CoreError::InvalidAnswer(format!(
                    "inputResponses.{key}: the answer does not fit the requested schema: {}",
                    problems.join("; ")
                )));
            }
        }
    }
    Ok(response)
}
