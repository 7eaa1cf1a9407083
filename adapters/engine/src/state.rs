//! The one canonical run state every engine translates into.
//!
//! Engines produce a [`Snapshot`] from one read of the native run; the
//! protocol dialects in the server map it to their own wire shapes.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What one read of a native run says about it.
///
/// Two snapshots are equal when they say the same of the run: the
/// [`Snapshot::revision`] is not compared.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The run's state, translated from the engine's own vocabulary.
    pub state: RunState,
    /// When the engine accepted the run, if it reports it.
    pub created_at: Option<SystemTime>,
    /// When the run last changed, if the engine reports it.
    pub updated_at: Option<SystemTime>,
    /// When the run reached a terminal state, if it has and the engine reports it.
    pub ended_at: Option<SystemTime>,
    /// How long the client should wait before asking again, when the engine wants
    /// a longer interval than the tool's configured one (a low API budget, say).
    pub poll_hint: Option<Duration>,
    /// The engine's own mark of what this read saw (GitHub's `ETag`s), for
    /// [`crate::Pipeline::wait_for_change`] to ask the engine "changed since?"
    /// cheaply. Never shown to a client and never kept between requests.
    pub revision: Option<String>,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        self.state == other.state
            && self.created_at == other.created_at
            && self.updated_at == other.updated_at
            && self.ended_at == other.ended_at
            && self.poll_hint == other.poll_hint
    }
}

impl Snapshot {
    /// A snapshot with only a state and no timestamps.
    #[must_use]
    pub fn new(state: RunState) -> Self {
        Self {
            state,
            created_at: None,
            updated_at: None,
            ended_at: None,
            poll_hint: None,
            revision: None,
        }
    }
}

/// The canonical state of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunState {
    /// Accepted or running.
    Working {
        /// A short human-readable status, such as "2/5 completions, 3 active".
        message: Option<String>,
        /// Progress, when the engine can count it.
        progress: Option<Progress>,
    },
    /// The run waits for an answer from the client (a human step).
    InputRequired {
        /// Outstanding requests by key. Keys stay unique for the run's life.
        requests: BTreeMap<String, InputRequest>,
        /// A short human-readable status.
        message: Option<String>,
    },
    /// The run finished and produced a tool result, which may be a tool error
    /// (`is_error`): a pipeline that ran and failed is a completed call whose
    /// result says so.
    Completed(ToolOutput),
    /// The run cannot produce a tool result: it was lost, or the engine reports a
    /// state that taskgate cannot interpret. This maps to protocol-level failure.
    Failed {
        /// Why, for the client.
        message: String,
    },
    /// The run was cancelled.
    Cancelled {
        /// Why, when the engine knows.
        message: Option<String>,
    },
}

impl RunState {
    /// A working state with a message.
    #[must_use]
    pub fn working(message: impl Into<String>) -> Self {
        Self::Working {
            message: Some(message.into()),
            progress: None,
        }
    }

    /// True for completed, failed and cancelled.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Completed(_) | Self::Failed { .. } | Self::Cancelled { .. }
        )
    }
}

/// Countable progress.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Units done so far.
    pub done: f64,
    /// Units in all, when known.
    pub total: Option<f64>,
}

/// A question the run asks the client: a message and the JSON Schema of the answer
/// (a flat object schema, as MCP elicitation requires).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// The question, shown to a person.
    pub message: String,
    /// JSON Schema of the expected answer.
    #[serde(rename = "requestedSchema")]
    pub requested_schema: Value,
    /// The question is an approval gate (a person lets the run go on) rather
    /// than a form. Engines set it for their own gates (a Kubernetes `approval`,
    /// a GitHub environment review, a Step Functions human step, an Airflow
    /// `ApprovalOperator`); the server refuses answers to it given inside the
    /// call that started the run and, where the tool asks for four eyes, by
    /// the caller who started it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval: bool,
}

/// What the client answered to an [`InputRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputResponse {
    /// Accept, decline or cancel.
    pub action: InputAction,
    /// The answer's content, present with `accept`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

/// The client's choice on an input request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputAction {
    /// The person answered.
    Accept,
    /// The person said no.
    Decline,
    /// The person dismissed the question.
    Cancel,
}

/// A finished run's tool result, shaped like MCP's `CallToolResult`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// Content blocks for the model.
    pub content: Vec<Content>,
    /// Structured output (a JSON object), when the pipeline produced one.
    pub structured: Option<Value>,
    /// True when the pipeline ran and failed: a tool error, not a protocol error.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result with one text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text(text.into())],
            structured: None,
            is_error: false,
        }
    }

    /// A tool error with one text block.
    #[must_use]
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text(text.into())],
            structured: None,
            is_error: true,
        }
    }

    /// Builds the output from a JSON value the pipeline produced: an object becomes
    /// `structured` and is also rendered as text; anything else is rendered as text.
    #[must_use]
    pub fn from_json(value: Value, is_error: bool) -> Self {
        let text = match &value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let structured = value.is_object().then_some(value);
        Self {
            content: vec![Content::Text(text)],
            structured,
            is_error,
        }
    }
}

/// A content block of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// A link to something the run produced (an artifact, a log, a run page).
    Link {
        /// Where it is.
        uri: String,
        /// Its name.
        name: String,
        /// Its media type, when known.
        mime_type: Option<String>,
    },
}
