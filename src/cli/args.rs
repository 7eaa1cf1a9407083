//! `key=value` words into JSON values, by the JSON Schema of the object they
//! fill (a tool's input schema, or an input request's requested schema).
//!
//! `key=value` takes the type the schema gives `key` (string, integer, number,
//! boolean; JSON text for objects and arrays); `key:=json` takes raw JSON.

use serde_json::{Map, Value};

/// A word that does not make an argument.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgError {
    /// No `=` in the word.
    #[error("`{0}` is not key=value (or key:=json)")]
    NotAPair(String),
    /// The same key twice.
    #[error("`{0}` is given twice")]
    Twice(String),
    /// A key the schema does not allow.
    #[error("`{key}` is not an argument of {of} (known: {known})")]
    Unknown {
        /// The key.
        key: String,
        /// What the schema describes ("tool work").
        of: String,
        /// The keys it knows.
        known: String,
    },
    /// A value that does not have the key's type.
    #[error("`{key}`: {problem}")]
    Value {
        /// The key.
        key: String,
        /// What is wrong.
        problem: String,
    },
}

/// Builds the object `words` describe, typed by `schema`; `of` names what the
/// schema describes, for error messages.
///
/// # Errors
///
/// An [`ArgError`] for the first word that does not make an argument.
pub fn parse(words: &[String], schema: &Value, of: &str) -> Result<Map<String, Value>, ArgError> {
    let mut out = Map::new();
    for word in words {
        let (key, value) = pair(word, schema, of)?;
        if out.insert(key.clone(), value).is_some() {
            return Err(ArgError::Twice(key));
        }
    }
    Ok(out)
}

/// One `key=value` / `key:=json` word, typed by `schema`.
///
/// # Errors
///
/// An [`ArgError`] when the word does not make an argument.
pub fn pair(word: &str, schema: &Value, of: &str) -> Result<(String, Value), ArgError> {
    let eq = word
        .find('=')
        .ok_or_else(|| ArgError::NotAPair(word.to_owned()))?;
    let (raw_key, text) = (&word[..eq], &word[eq + 1..]);
    let (key, raw) = match raw_key.strip_suffix(':') {
        Some(k) => (k, true),
        None => (raw_key, false),
    };
    if key.is_empty() {
        return Err(ArgError::NotAPair(word.to_owned()));
    }
    let props = schema["properties"].as_object();
    let prop = props.and_then(|p| p.get(key));
    if prop.is_none() && schema["additionalProperties"] == Value::Bool(false) {
        let known = props
            .map(|p| p.keys().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        return Err(ArgError::Unknown {
            key: key.to_owned(),
            of: of.to_owned(),
            known,
        });
    }
    let value = if raw {
        serde_json::from_str(text).map_err(|e| ArgError::Value {
            key: key.to_owned(),
            problem: format!("not JSON: {e}"),
        })?
    } else {
        coerce(text, prop.unwrap_or(&Value::Null)).map_err(|problem| ArgError::Value {
            key: key.to_owned(),
            problem,
        })?
    };
    Ok((key.to_owned(), value))
}

/// The types a property schema allows, in the order given (`null` last).
fn types(schema: &Value) -> Vec<&str> {
    let mut types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    types.sort_by_key(|t| *t == "null");
    types
}

/// `text` as a value of the property `schema` describes.
///
/// # Errors
///
/// Why `text` is not such a value.
pub fn coerce(text: &str, schema: &Value) -> Result<Value, String> {
    // An enum names its values: take the one whose text matches.
    if let Some(values) = schema["enum"].as_array() {
        return values
            .iter()
            .find(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned) == text)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<String> = values
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect();
                format!("must be one of {}", names.join(", "))
            });
    }
    let types = types(schema);
    let Some(first) = types.first() else {
        return Ok(Value::String(text.to_owned()));
    };
    let mut problem = String::new();
    for t in &types {
        let attempt = match *t {
            "string" => Ok(Value::String(text.to_owned())),
            "integer" => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{text:?} is not an integer")),
            "number" => number(text),
            "boolean" => boolean(text).map(Value::Bool),
            "null" if text == "null" || text.is_empty() => Ok(Value::Null),
            "object" | "array" => serde_json::from_str::<Value>(text)
                .ok()
                .filter(|v| {
                    if *t == "object" {
                        v.is_object()
                    } else {
                        v.is_array()
                    }
                })
                .ok_or_else(|| format!("{text:?} is not a JSON {t}")),
            _ => Err(format!("{text:?} is not a {t}")),
        };
        match attempt {
            Ok(v) => return Ok(v),
            Err(p) if *t == *first => problem = p,
            Err(_) => {}
        }
    }
    Err(problem)
}

fn number(text: &str) -> Result<Value, String> {
    let not = || format!("{text:?} is not a number");
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::from(i));
    }
    let f: f64 = text.parse().map_err(|_| not())?;
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(not)
}

fn boolean(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "1" | "on" => Ok(true),
        "false" | "no" | "n" | "0" | "off" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (true or false)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_owned()).collect()
    }

    fn schema() -> Value {
        json!({ "type": "object", "properties": {
            "label": { "type": "string" },
            "seconds": { "type": "integer" },
            "ratio": { "type": "number" },
            "dry_run": { "type": "boolean" },
            "env": { "type": "string", "enum": ["staging", "production"] },
            "level": { "enum": [1, 2, 3] },
            "tags": { "type": "array" },
            "opts": { "type": "object" },
            "maybe": { "type": ["integer", "null"] },
        } })
    }

    #[test]
    fn values_take_the_type_the_schema_gives_them() {
        let args = parse(
            &words(&[
                "label=42",
                "seconds=3",
                "ratio=0.5",
                "dry_run=yes",
                "env=staging",
                "level=2",
                "tags=[\"a\",\"b\"]",
                "opts={\"k\":1}",
                "maybe=7",
                "extra=x=y",
            ]),
            &schema(),
            "tool t",
        )
        .unwrap();
        assert_eq!(
            Value::Object(args),
            json!({ "label": "42", "seconds": 3, "ratio": 0.5, "dry_run": true, "env": "staging",
                    "level": 2, "tags": ["a", "b"], "opts": { "k": 1 }, "maybe": 7, "extra": "x=y" })
        );
    }

    #[test]
    fn raw_json_with_colon_equals() {
        let args = parse(&words(&["label:=17", "opts:={\"a\":[1]}"]), &schema(), "t").unwrap();
        assert_eq!(args["label"], json!(17));
        assert_eq!(args["opts"], json!({ "a": [1] }));
    }

    #[test]
    fn bad_words_are_named() {
        let s = schema();
        assert_eq!(
            parse(&words(&["seconds=abc"]), &s, "t").unwrap_err(),
            ArgError::Value {
                key: "seconds".into(),
                problem: "\"abc\" is not an integer".into()
            }
        );
        assert!(matches!(
            parse(&words(&["env=prod"]), &s, "t").unwrap_err(),
            ArgError::Value { problem, .. } if problem == "must be one of staging, production"
        ));
        assert_eq!(
            parse(&words(&["label"]), &s, "t").unwrap_err(),
            ArgError::NotAPair("label".into())
        );
        assert_eq!(
            parse(&words(&["label=a", "label=b"]), &s, "t").unwrap_err(),
            ArgError::Twice("label".into())
        );
        assert!(parse(&words(&["opts={"]), &s, "t").is_err());
        assert!(parse(&words(&["x:=nope"]), &s, "t").is_err());
    }

    #[test]
    fn closed_schemas_refuse_unknown_keys() {
        let s =
            json!({ "type": "object", "additionalProperties": false, "properties": { "a": {} } });
        assert!(matches!(
            parse(&words(&["b=1"]), &s, "tool t").unwrap_err(),
            ArgError::Unknown { key, known, .. } if key == "b" && known == "a"
        ));
    }
}
