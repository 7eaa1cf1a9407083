//! The engine registry: `kind` in `[engines.NAME]` → the engine crate that builds it.
//!
//! Each engine is a Cargo feature of the root crate (all on by default); this
//! file names an engine's crate only under its feature, so a build without it
//! compiles none of its SDK. Registering an engine: a workspace member, an
//! optional dependency and a feature in the root `Cargo.toml`, an entry in
//! [`KINDS`] and [`KNOWN`], and one arm in [`build`].

use std::sync::Arc;

use serde_json::Value;
use taskgate_engine::{ConfigError, Engine};

/// The kinds this build knows (its enabled engine features).
pub const KINDS: &[&str] = &[
    #[cfg(feature = "exec")]
    taskgate_exec::KIND,
    #[cfg(feature = "stepfunctions")]
    taskgate_stepfunctions::KIND,
    #[cfg(feature = "github")]
    taskgate_github::KIND,
    #[cfg(feature = "kubernetes")]
    taskgate_kubernetes::KIND,
    #[cfg(feature = "airflow")]
    taskgate_airflow::KIND,
    #[cfg(feature = "temporal")]
    taskgate_temporal::KIND,
];

/// Every kind taskgate has, built in or not, with the Cargo feature that builds
/// it (the same name): a configuration naming one this build left out is told
/// so, rather than that the kind does not exist.
const KNOWN: &[&str] = &[
    "exec",
    "stepfunctions",
    "github",
    "kubernetes",
    "airflow",
    "temporal",
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
                format!("missing; one of {}", one_of()),
            ))
        }
    };
    let settings = Value::Object(table);
    match kind.as_str() {
        #[cfg(feature = "exec")]
        taskgate_exec::KIND => taskgate_exec::build(settings).await,
        #[cfg(feature = "stepfunctions")]
        taskgate_stepfunctions::KIND => taskgate_stepfunctions::build(settings).await,
        #[cfg(feature = "github")]
        taskgate_github::KIND => taskgate_github::build(settings).await,
        #[cfg(feature = "kubernetes")]
        taskgate_kubernetes::KIND => taskgate_kubernetes::build(settings).await,
        #[cfg(feature = "airflow")]
        taskgate_airflow::KIND => taskgate_airflow::build(settings).await,
        #[cfg(feature = "temporal")]
        taskgate_temporal::KIND => taskgate_temporal::build(settings).await,
        other => {
            drop(settings);
            Err(ConfigError::new("kind", unknown(other)))
        }
    }
}

/// The kinds this build knows, for an error message.
fn one_of() -> String {
    if KINDS.is_empty() {
        "none: this build has no engine (built without every engine feature)".to_owned()
    } else {
        KINDS.join(", ")
    }
}

/// Why `kind` names no engine of this build.
fn unknown(kind: &str) -> String {
    if KNOWN.contains(&kind) {
        format!(
            "engine kind {kind:?} is not in this build (built without the Cargo feature \
             {kind:?}); this build has: {}",
            one_of()
        )
    } else {
        format!("unknown engine kind {kind:?}; one of {}", one_of())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_built_kind_is_known() {
        for kind in KINDS {
            assert!(KNOWN.contains(kind), "{kind} is missing from KNOWN");
        }
    }

    #[tokio::test]
    async fn an_unknown_kind_is_refused_with_the_built_ones() {
        let Err(e) = build(json!({ "kind": "nomad" })).await else {
            panic!("an unknown kind built an engine");
        };
        let text = e.message;
        assert!(text.contains("unknown engine kind \"nomad\""), "{text}");
    }

    #[tokio::test]
    async fn a_kind_left_out_of_the_build_says_so() {
        let Some(missing) = KNOWN.iter().find(|k| !KINDS.contains(k)) else {
            // Every engine is built in (the default): nothing is left out.
            return;
        };
        let Err(e) = build(json!({ "kind": missing })).await else {
            panic!("a kind left out of the build built an engine");
        };
        let text = e.message;
        assert!(text.contains("is not in this build"), "{text}");
        assert!(
            text.contains(&format!("Cargo feature \"{missing}\"")),
            "{text}"
        );
    }
}
