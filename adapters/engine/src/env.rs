//! The one mapping from a call's arguments to environment variables, used by
//! every engine that hands arguments to a process as its environment (exec,
//! Kubernetes).
//!
//! - **Name**: `<prefix><KEY>`, the argument's key with ASCII letters
//!   upper-cased, ASCII digits kept and every other character (`-`, `.`, a
//!   space, any non-ASCII character) turned into `_`.
//! - **Value**: a string as it is; `null` as the empty string; a boolean as
//!   `true` / `false`; a number as its JSON text (`3`, `2.5`); an array or
//!   object as compact JSON with every object's keys sorted.
//!
//! Refused (an [`EngineError::InvalidInput`] naming the arguments, never their
//! values): two arguments whose names map to one variable (`targetEnv` and
//! `targetenv`), and a value with a NUL byte (no environment can hold one).
//! Only top-level arguments of an object become variables.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::EngineError;

/// The environment variable name of argument `key` under `prefix`.
#[must_use]
pub fn arg_env_name(prefix: &str, key: &str) -> String {
    let mut name = String::with_capacity(prefix.len() + key.len());
    name.push_str(prefix);
    name.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    name
}

/// The text an argument's value becomes in its environment variable (see the
/// module documentation).
#[must_use]
pub fn arg_env_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(_) | Value::Object(_) => canonical_json(value).to_string(),
    }
}

/// `value` with every object's keys sorted, whatever order they came in: equal
/// arguments render (and hash) equally whatever order the client sent them in.
#[must_use]
pub fn canonical_json(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let by_key: BTreeMap<&String, Value> =
                map.iter().map(|(k, v)| (k, canonical_json(v))).collect();
            Value::Object(by_key.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical_json).collect()),
        other => other.clone(),
    }
}

/// The variables of every top-level argument (none when `arguments` is not an
/// object), by name.
///
/// # Errors
///
/// [`EngineError::InvalidInput`] when two arguments map to one name, or a value
/// holds a NUL byte; the message names the arguments, not their values.
pub fn arguments_env(
    prefix: &str,
    arguments: &Value,
) -> Result<BTreeMap<String, String>, EngineError> {
    let mut env = BTreeMap::new();
    let mut owner: BTreeMap<String, &str> = BTreeMap::new();
    let Value::Object(map) = arguments else {
        return Ok(env);
    };
    for (key, value) in map {
        let name = arg_env_name(prefix, key);
        if let Some(first) = owner.insert(name.clone(), key) {
            let (a, b) = if first < key.as_str() {
                (first, key.as_str())
            } else {
                (key.as_str(), first)
            };
            return Err(EngineError::InvalidInput {
                message: format!(
                    "the arguments {a:?} and {b:?} both map to the environment variable {name}; \
                     send only one of them"
                ),
            });
        }
        let text = arg_env_value(value);
        if text.contains('\0') {
            return Err(EngineError::InvalidInput {
                message: format!(
                    "the argument {key:?} holds a NUL byte, which no environment variable can carry"
                ),
            });
        }
        env.insert(name, text);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_upper_cased_with_other_characters_as_underscores() {
        for (key, name) in [
            ("label", "P_LABEL"),
            ("targetEnv", "P_TARGETENV"),
            ("dash-name", "P_DASH_NAME"),
            ("dotted.key", "P_DOTTED_KEY"),
            ("with space", "P_WITH_SPACE"),
            ("digits42", "P_DIGITS42"),
            ("ü", "P__"),
            ("", "P_"),
        ] {
            assert_eq!(arg_env_name("P_", key), name, "{key:?}");
        }
    }

    #[test]
    fn values_render_one_way() {
        for (value, text) in [
            (
                json!("$(touch /tmp/x); rm -rf /"),
                "$(touch /tmp/x); rm -rf /",
            ),
            (json!(""), ""),
            (json!(null), ""),
            (json!(true), "true"),
            (json!(false), "false"),
            (json!(3), "3"),
            (json!(-2.5), "-2.5"),
            (json!([1, "a", null]), r#"[1,"a",null]"#),
            (
                json!({"b": 1, "a": {"d": 2, "c": 3}}),
                r#"{"a":{"c":3,"d":2},"b":1}"#,
            ),
            (json!([{"y": 1, "x": 2}]), r#"[{"x":2,"y":1}]"#),
        ] {
            assert_eq!(arg_env_value(&value), text, "{value}");
        }
    }

    #[test]
    fn every_top_level_argument_becomes_a_variable() {
        let env = arguments_env(
            "TASKGATE_ARG_",
            &json!({"text": "a b", "n": 3, "none": null, "obj": {"b": 1, "a": 2}}),
        )
        .unwrap();
        let expected: BTreeMap<String, String> = [
            ("TASKGATE_ARG_N", "3"),
            ("TASKGATE_ARG_NONE", ""),
            ("TASKGATE_ARG_OBJ", r#"{"a":2,"b":1}"#),
            ("TASKGATE_ARG_TEXT", "a b"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(env, expected);
        assert!(arguments_env("A_", &json!([1])).unwrap().is_empty());
        assert!(arguments_env("A_", &json!("x")).unwrap().is_empty());
    }

    #[test]
    fn two_arguments_on_one_name_are_refused_naming_both() {
        for (a, b) in [("targetEnv", "targetenv"), ("a-b", "a_b"), ("a.b", "A-B")] {
            let mut map = serde_json::Map::new();
            map.insert(a.to_owned(), json!("production"));
            map.insert(b.to_owned(), json!("staging"));
            let err = arguments_env("ARG_", &Value::Object(map)).unwrap_err();
            let EngineError::InvalidInput { message } = &err else {
                panic!("{err:?}");
            };
            assert!(message.contains(&format!("{a:?}")), "{message}");
            assert!(message.contains(&format!("{b:?}")), "{message}");
            assert!(!message.contains("production") && !message.contains("staging"));
        }
    }

    #[test]
    fn a_nul_byte_is_refused_without_the_value() {
        let err = arguments_env("ARG_", &json!({"nul": "secret\u{0}x"})).unwrap_err();
        assert!(matches!(&err, EngineError::InvalidInput { message }
            if message.contains("\"nul\"") && !message.contains("secret")));
        // Inside an array or object the NUL is escaped by JSON: nothing to refuse.
        assert_eq!(
            arguments_env("ARG_", &json!({"list": ["a\u{0}"]})).unwrap()["ARG_LIST"],
            r#"["a\u0000"]"#
        );
    }
}
