//! The engine registry: `kind` in `[engines.NAME]` → the engine crate that builds it.

use std::sync::Arc;

use serde_json::Value;
use taskgate_engine::{ConfigError, Engine};

/// The kinds this build knows.
pub const KINDS: &[&str] = &[
    taskgate_exec::KIND,
    taskgate_stepfunctions::KIND,
    taskgate_github::KIND,
    taskgate_kubernetes::KIND,
    taskgate_airflow::KIND,
    taskgate_temporal::KIND,
];

/// Builds one engine from its `[engines.NAME]` table.
///
/// # Errors
///
/// A [`ConfigError`] keyed relative to the engine table (`kind`, or the engine's
/// own keys).
pub async fn build(settings: Value) -> Result<Arc<dyn Engine>, ConfigError> {
    let Value::Object(mut table) = settings else {
        return Err(ConfigError::new("", "must be a table"));
    };
    let kind = match table.remove("kind") {
        Some(Value::String(kind)) => kind,
        Some(_) => return Err(ConfigError::new("kind", "must be a string")),
        None => {
            return Err(ConfigError::new(
                "kind",
                format!("missing; one of {}", KINDS.join(", ")),
            ))
        }
    };
    let settings = Value::Object(table);
    match kind.as_str() {
        taskgate_exec::KIND => taskgate_exec::build(settings).await,
        taskgate_stepfunctions::KIND => taskgate_stepfunctions::build(settings).await,
        taskgate_github::KIND => taskgate_github::build(settings).await,
        taskgate_kubernetes::KIND => taskgate_kubernetes::build(settings).await,
        taskgate_airflow::KIND => taskgate_airflow::build(settings).await,
        taskgate_temporal::KIND => taskgate_temporal::build(settings).await,
        other => Err(ConfigError::new(
            "kind",
            format!("unknown engine kind {other:?}; one of {}", KINDS.join(", ")),
        )),
    }
}
