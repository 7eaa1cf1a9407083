//! Typed errors every engine returns. The server maps them to JSON-RPC codes in one
//! place; engines never think about the wire.

use std::time::Duration;

/// A boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong when taskgate asks an engine something.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine cannot do this operation at all (for example, answering input on
    /// an engine that never asks for any).
    #[error("this engine does not support {operation}")]
    Unsupported {
        /// The operation, such as "cancel" or "answer input".
        operation: &'static str,
    },
    /// The native run does not exist (never did, was deleted, or retention elapsed).
    #[error("the run was not found")]
    NotFound,
    /// The request clashes with what exists: a start with the same name and other
    /// input, or a cancel of a run that already finished.
    #[error("conflict: {message}")]
    Conflict {
        /// What clashed.
        message: String,
    },
    /// The engine refused the input (an answer that does not fit, a run input the
    /// engine rejects).
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What is wrong with it.
        message: String,
    },
    /// The engine refused taskgate's credentials for an action.
    #[error("permission denied for {action}: {message}")]
    PermissionDenied {
        /// The refused action, named as the engine's permission system names it
        /// (an IAM action, a Kubernetes verb and resource, a GitHub permission).
        action: String,
        /// The engine's explanation.
        message: String,
    },
    /// The engine asks taskgate to slow down. Retryable; never a failed run.
    #[error("the engine is throttling requests: {message}")]
    Throttled {
        /// How long to wait, when the engine says.
        retry_after: Option<Duration>,
        /// The engine's explanation.
        message: String,
    },
    /// The engine could not be reached or answered with a server error. Retryable.
    #[error("the engine is unavailable: {message}")]
    Unavailable {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A call did not finish within its deadline. Retryable.
    #[error("{operation} did not finish within {after:?}")]
    DeadlineExceeded {
        /// The operation.
        operation: &'static str,
        /// The deadline it ran into.
        after: Duration,
    },
    /// Anything else: a bug or an answer taskgate cannot interpret.
    #[error("internal engine error: {message}")]
    Internal {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
}

impl EngineError {
    /// An [`EngineError::Unsupported`] for `operation`.
    #[must_use]
    pub fn unsupported(operation: &'static str) -> Self {
        Self::Unsupported { operation }
    }

    /// An [`EngineError::Unavailable`] wrapping `source`.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`EngineError::Internal`] without a source.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal {
            message: message.into(),
            source: None,
        }
    }

    /// A short, fixed name for this kind of error, used as a metrics label:
    /// `unsupported`, `not_found`, `conflict`, `invalid_input`, `permission`,
    /// `throttled`, `unavailable`, `deadline` or `internal`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unsupported { .. } => "unsupported",
            Self::NotFound => "not_found",
            Self::Conflict { .. } => "conflict",
            Self::InvalidInput { .. } => "invalid_input",
            Self::PermissionDenied { .. } => "permission",
            Self::Throttled { .. } => "throttled",
            Self::Unavailable { .. } => "unavailable",
            Self::DeadlineExceeded { .. } => "deadline",
            Self::Internal { .. } => "internal",
        }
    }

    /// True when the same request may succeed later unchanged.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Throttled { .. } | Self::Unavailable { .. } | Self::DeadlineExceeded { .. }
        )
    }

    /// A copy of this error for another waiter on the same call (errors carry
    /// boxed sources, which do not clone): the same variant and fields, the
    /// source kept as its text.
    #[must_use]
    pub fn duplicate(&self) -> Self {
        let text = |source: &Option<BoxError>| -> Option<BoxError> {
            source
                .as_ref()
                .map(|s| Box::new(SourceText(s.to_string())) as BoxError)
        };
        match self {
            Self::Unsupported { operation } => Self::Unsupported { operation },
            Self::NotFound => Self::NotFound,
            Self::Conflict { message } => Self::Conflict {
                message: message.clone(),
            },
            Self::InvalidInput { message } => Self::InvalidInput {
                message: message.clone(),
            },
            Self::PermissionDenied { action, message } => Self::PermissionDenied {
                action: action.clone(),
                message: message.clone(),
            },
            Self::Throttled {
                retry_after,
                message,
            } => Self::Throttled {
                retry_after: *retry_after,
                message: message.clone(),
            },
            Self::Unavailable { message, source } => Self::Unavailable {
                message: message.clone(),
                source: text(source),
            },
            Self::DeadlineExceeded { operation, after } => Self::DeadlineExceeded {
                operation,
                after: *after,
            },
            Self::Internal { message, source } => Self::Internal {
                message: message.clone(),
                source: text(source),
            },
        }
    }

    /// How long the client should wait before retrying, when known.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The text of an error source, for [`EngineError::duplicate`].
#[derive(Debug)]
struct SourceText(String);

impl std::fmt::Display for SourceText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceText {}

/// A configuration error: names the key (a dotted path such as
/// `tools[2].target.state_machine_arn`) and what is wrong with it. The server adds
/// the file name.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// The dotted path of the offending key.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// A configuration error for `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The same error with `prefix` put before its key (`prefix.key`).
    #[must_use]
    pub fn within(mut self, prefix: &str) -> Self {
        self.key = if self.key.is_empty() {
            prefix.to_owned()
        } else if self.key.starts_with('[') {
            format!("{prefix}{}", self.key)
        } else {
            format!("{prefix}.{}", self.key)
        };
        self
    }
}
