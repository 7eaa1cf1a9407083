//! The tool catalog: the configured tools, their argument checks, and who may
//! see and use them (the access rules themselves are in `access.rs`).

use serde_json::{Map, Value};

use super::errors::{refusal_reason, CoreError};
use super::{Gateway, Tool};
use crate::core::access::{Caller, Decision};
use crate::core::audit::{self, Action, Outcome};
use crate::core::handle::Dialect;

impl Gateway {
    /// Every tool, in config order.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tool called `name`.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownTool`].
    pub fn tool(&self, name: &str) -> Result<&Tool, CoreError> {
        self.tools
            .iter()
            .find(|t| t.config.name == name)
            .ok_or_else(|| CoreError::UnknownTool(name.to_owned()))
    }

    /// Checks `arguments` against the tool's input schema. A top-level argument
    /// the schema does not declare is refused unless the schema's root sets
    /// `additionalProperties` or `unevaluatedProperties` (see
    /// [`crate::core::validate::declared_only`]).
    ///
    /// # Errors
    ///
    /// [`CoreError::InvalidArguments`] naming each failing field (and each
    /// undeclared argument) and the reason. Nothing reaches the engine.
    pub fn check_arguments(
        &self,
        tool: &Tool,
        arguments: Option<&Value>,
    ) -> Result<Value, CoreError> {
        let args = match arguments {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v.clone(),
        };
        let problems: Vec<String> = tool
            .validator
            .iter_errors(&args)
            .map(|e| {
                let path = e.instance_path.to_string();
                if let (
                    true,
                    jsonschema::error::ValidationErrorKind::UnevaluatedProperties { unexpected }
                    | jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected },
                ) = (path.is_empty(), &e.kind)
                {
                    let names: Vec<String> = unexpected.iter().map(|n| format!("{n:?}")).collect();
                    format!(
                        "undeclared arguments {}: the tool's input schema does not declare them",
                        names.join(", ")
                    )
                } else if path.is_empty() {
                    format!("arguments: {e}")
                } else {
                    format!("arguments{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(args)
        } else {
            Err(CoreError::InvalidArguments {
                tool: tool.name().to_owned(),
                problems,
            })
        }
    }
}

/// Access rules, applied by the gateway (the rules themselves are in `access.rs`).
impl Gateway {
    /// True when `caller` may see and use `tool` (it is listed for it).
    #[must_use]
    pub fn visible_to(&self, caller: &Caller, tool: &Tool) -> bool {
        self.access.decide(caller, tool.name()) == Decision::Allowed
    }

    /// The tool called `name`, for `caller` to call. A tool it may not use
    /// reads as unknown, unless scopes would let it in.
    ///
    /// # Errors
    ///
    /// [`CoreError::UnknownTool`] for a tool that does not exist or that the
    /// caller may not use; [`CoreError::InsufficientScope`] when scopes would help.
    /// Both are audited as refusals.
    pub fn tool_for(
        &self,
        caller: &Caller,
        name: &str,
        dialect: Dialect,
    ) -> Result<&Tool, CoreError> {
        let tool = self.tool(name)?;
        self.authorize(caller, tool, Action::Start, dialect, None)?;
        Ok(tool)
    }

    /// Checks that `caller` may do `action` on a run of `tool`, auditing a refusal.
    ///
    /// # Errors
    ///
    /// [`CoreError::InsufficientScope`] when scopes would help; otherwise
    /// [`CoreError::UnknownTool`] for a start and [`CoreError::Forbidden`] for a
    /// cancel or an answer (the caller already knows the tool).
    pub fn authorize(
        &self,
        caller: &Caller,
        tool: &Tool,
        action: Action,
        dialect: Dialect,
        native: Option<&str>,
    ) -> Result<(), CoreError> {
        let Some(refusal) = self.refusal(caller, tool, action) else {
            return Ok(());
        };
        self.metrics
            .auth_refused(if matches!(refusal, CoreError::InsufficientScope { .. }) {
                crate::core::metrics::AuthRefusal::InsufficientScope
            } else {
                crate::core::metrics::AuthRefusal::AccessRule
            });
        audit::record(
            action,
            caller.id(),
            Some(tool.name()),
            Some(dialect),
            native.map(|n| audit::run_ref(tool.name(), n)).as_deref(),
            Outcome::Refused(refusal_reason(&refusal)),
        );
        Err(refusal)
    }

    /// What the access rules say against `caller` doing `action` on a run of
    /// `tool` (an answer follows the tool's `answer_access`), if anything.
    pub(super) fn refusal(
        &self,
        caller: &Caller,
        tool: &Tool,
        action: Action,
    ) -> Option<CoreError> {
        let decision = if action == Action::Answer {
            self.access.decide_answer(caller, tool.name())
        } else {
            self.access.decide(caller, tool.name())
        };
        match decision {
            Decision::Allowed => None,
            Decision::NeedsScopes(scopes) => Some(CoreError::InsufficientScope {
                tool: tool.name().to_owned(),
                scopes,
            }),
            Decision::Denied if action == Action::Start => {
                Some(CoreError::UnknownTool(tool.name().to_owned()))
            }
            Decision::Denied => Some(CoreError::Forbidden(tool.name().to_owned())),
        }
    }
}
