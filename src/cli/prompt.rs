//! Input requests a run asks (`elicitation/create`, form mode), answered in the
//! terminal following their requested schema — an enum is a choice, a boolean
//! y/n, strings and numbers are checked against their schema as they are typed
//! — or, without a terminal, from `--answer FIELD=VALUE` words and `--decline`.

use dialoguer::theme::{ColorfulTheme, SimpleTheme, Theme};
use dialoguer::{Confirm, Input, MultiSelect, Select};
use serde_json::{json, Map, Value};

use super::args;

/// One open input request.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its key in `inputRequests` (the key of its answer in `inputResponses`).
    pub key: String,
    /// The question.
    pub message: String,
    /// The requested schema (an object of simple properties).
    pub schema: Value,
}

/// The requests of an `inputRequests` map.
#[must_use]
pub fn requests(map: &Value) -> Vec<Request> {
    map.as_object()
        .into_iter()
        .flatten()
        .map(|(key, r)| Request {
            key: key.clone(),
            message: r["params"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            schema: r["params"]["requestedSchema"].clone(),
        })
        .collect()
}

/// A person's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Answered, with this content.
    Accept(Map<String, Value>),
    /// Said no.
    Decline,
    /// Dismissed the question.
    Cancel,
}

impl Answer {
    /// The elicitation result sent in `inputResponses`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Accept(content) => json!({ "action": "accept", "content": content }),
            Self::Decline => json!({ "action": "decline" }),
            Self::Cancel => json!({ "action": "cancel" }),
        }
    }
}

/// Answers given before the question: `--answer` words and `--decline`.
#[derive(Debug, Clone, Default)]
pub struct Presets {
    /// `FIELD=VALUE` / `FIELD:=JSON` words; each applies to every request
    /// whose schema has that field.
    pub words: Vec<String>,
    /// Decline every request.
    pub decline: bool,
}

impl Presets {
    /// True when nothing was given in advance.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && !self.decline
    }

    /// The preset values for the fields of `schema`.
    ///
    /// # Errors
    ///
    /// A word whose value does not fit its field.
    pub fn values_for(&self, schema: &Value) -> Result<Map<String, Value>, String> {
        let props = schema["properties"].as_object();
        let mut out = Map::new();
        for word in &self.words {
            let key = word.split('=').next().unwrap_or_default();
            let key = key.strip_suffix(':').unwrap_or(key);
            if props.is_some_and(|p| p.contains_key(key)) {
                let (k, v) = args::pair(word, schema, "the question").map_err(|e| e.to_string())?;
                out.insert(k, v);
            }
        }
        Ok(out)
    }
}

/// Why a request could not be answered without a terminal.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    /// Required fields no `--answer` gives.
    #[error("no answer given for {}", .0.join(", "))]
    Missing(Vec<String>),
    /// The answer does not fit the schema.
    #[error("{0}")]
    Invalid(String),
}

/// The problems of `content` against `schema`, joined; `None` when it fits.
fn problems(schema: &Value, content: &Value) -> Option<String> {
    let validator = jsonschema::draft202012::new(schema).ok()?;
    let problems: Vec<String> = validator
        .iter_errors(content)
        .map(|e| {
            let at = e.instance_path.to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn required(schema: &Value) -> Vec<String> {
    schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Answers `request` from `presets` alone.
///
/// # Errors
///
/// [`Unanswered`] when the presets leave required fields open or do not fit.
pub fn from_presets(request: &Request, presets: &Presets) -> Result<Answer, Unanswered> {
    if presets.decline {
        return Ok(Answer::Decline);
    }
    let content = presets
        .values_for(&request.schema)
        .map_err(Unanswered::Invalid)?;
    let missing: Vec<String> = required(&request.schema)
        .into_iter()
        .filter(|f| !content.contains_key(f))
        .collect();
    if !missing.is_empty() {
        return Err(Unanswered::Missing(missing));
    }
    let value = Value::Object(content);
    if let Some(p) = problems(&request.schema, &value) {
        return Err(Unanswered::Invalid(p));
    }
    let Value::Object(content) = value else {
        unreachable!()
    };
    Ok(Answer::Accept(content))
}

/// Why a terminal prompt ended without an answer.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// Ctrl-C.
    #[error("interrupted")]
    Interrupted,
    /// The terminal failed.
    #[error("terminal: {0}")]
    Io(#[source] std::io::Error),
}

impl From<dialoguer::Error> for PromptError {
    fn from(e: dialoguer::Error) -> Self {
        let dialoguer::Error::IO(io) = e;
        if io.kind() == std::io::ErrorKind::Interrupted {
            Self::Interrupted
        } else {
            Self::Io(io)
        }
    }
}

fn theme() -> Box<dyn Theme> {
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        Box::new(SimpleTheme)
    } else {
        Box::new(ColorfulTheme::default())
    }
}

/// The choices a property offers (`enum`, or `oneOf`/`anyOf` of `const`s with
/// titles), as (value, label).
fn choices(prop: &Value) -> Option<Vec<(Value, String)>> {
    let label = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    if let Some(values) = prop["enum"].as_array() {
        let names = prop["enumNames"].as_array();
        return Some(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let name = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map_or_else(|| label(v), str::to_owned);
                    (v.clone(), name)
                })
                .collect(),
        );
    }
    let options = prop["oneOf"].as_array().or(prop["anyOf"].as_array())?;
    options
        .iter()
        .map(|o| {
            let v = o.get("const")?.clone();
            let name = o["title"].as_str().map_or_else(|| label(&v), str::to_owned);
            Some((v, name))
        })
        .collect()
}

/// Asks `request` in the terminal (blocking). Fields `presets` gives are not
/// asked again.
///
/// # Errors
///
/// [`PromptError::Interrupted`] on Ctrl-C; terminal failures.
pub fn ask(request: &Request, presets: &Presets) -> Result<Answer, PromptError> {
    if presets.decline {
        return Ok(Answer::Decline);
    }
    let theme = theme();
    let theme = theme.as_ref();
    let term = console::Term::stderr();
    let _ = term.write_line("");
    let _ = term.write_line(&console::style(&request.message).bold().to_string());
    let given = presets.values_for(&request.schema).unwrap_or_default();
    let required = required(&request.schema);
    loop {
        let mut content = Map::new();
        let props = request.schema["properties"].as_object();
        for (name, prop) in props.into_iter().flatten() {
            if let Some(v) = given.get(name) {
                let _ = term.write_line(&format!("{name}: {v} (from --answer)"));
                content.insert(name.clone(), v.clone());
                continue;
            }
            if let Some(v) = ask_field(theme, name, prop, required.contains(name))? {
                content.insert(name.clone(), v);
            }
        }
        let choice = Select::with_theme(theme)
            .with_prompt("Send this answer?")
            .items(["send", "decline", "dismiss (no answer)"])
            .default(0)
            .interact_opt()?;
        match choice {
            Some(0) => {}
            Some(1) => return Ok(Answer::Decline),
            _ => return Ok(Answer::Cancel),
        }
        let value = Value::Object(content);
        match problems(&request.schema, &value) {
            None => {
                let Value::Object(content) = value else {
                    unreachable!()
                };
                return Ok(Answer::Accept(content));
            }
            Some(p) => {
                let _ = term.write_line(&format!("The answer does not fit: {p}. Once more:"));
            }
        }
    }
}

fn ask_field(
    theme: &dyn Theme,
    name: &str,
    prop: &Value,
    required: bool,
) -> Result<Option<Value>, PromptError> {
    let mut label = prop["title"].as_str().unwrap_or(name).to_owned();
    if let Some(d) = prop["description"].as_str() {
        label = format!("{label} ({d})");
    }
    if let Some(options) = choices(prop) {
        let mut items: Vec<String> = options.iter().map(|(_, l)| l.clone()).collect();
        if !required {
            items.push("(none)".into());
        }
        let default = prop
            .get("default")
            .and_then(|d| options.iter().position(|(v, _)| v == d))
            .unwrap_or(0);
        let i = Select::with_theme(theme)
            .with_prompt(label)
            .items(&items)
            .default(default)
            .interact()?;
        return Ok(options.get(i).map(|(v, _)| v.clone()));
    }
    let types = match &prop["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types == ["boolean"] {
        let mut confirm = Confirm::with_theme(theme).with_prompt(label);
        if let Some(d) = prop["default"].as_bool() {
            confirm = confirm.default(d);
        }
        return Ok(Some(Value::Bool(confirm.interact()?)));
    }
    if types == ["array"] {
        if let Some(options) = choices(&prop["items"]) {
            let items: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
            let picked = MultiSelect::with_theme(theme)
                .with_prompt(format!("{label} (space to pick, enter to finish)"))
                .items(&items)
                .interact()?;
            let values: Vec<Value> = picked.into_iter().map(|i| options[i].0.clone()).collect();
            return Ok(Some(Value::Array(values)));
        }
    }
    let validator = jsonschema::draft202012::new(prop).ok();
    let check = |text: &String| -> Result<(), String> {
        if text.is_empty() {
            return if required {
                Err("an answer is required".into())
            } else {
                Ok(())
            };
        }
        let value = args::coerce(text, prop)?;
        match &validator {
            Some(v) => match v.iter_errors(&value).next() {
                Some(e) => Err(e.to_string()),
                None => Ok(()),
            },
            None => Ok(()),
        }
    };
    let mut input = Input::<String>::with_theme(theme)
        .with_prompt(label)
        .allow_empty(!required)
        .validate_with(check);
    if let Some(d) = prop.get("default") {
        input = input.default(d.as_str().map_or_else(|| d.to_string(), str::to_owned));
    }
    let text = input.interact_text()?;
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        args::coerce(&text, prop).map_err(|e| PromptError::Io(std::io::Error::other(e)))?,
    ))
}

/// What the person chose after Ctrl-C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// Cancel the task.
    Cancel,
    /// Go on watching it.
    KeepWaiting,
    /// Leave it running and exit (the handle is printed).
    Detach,
}

/// Asks what to do after Ctrl-C (blocking). Another Ctrl-C means cancel; Esc
/// means keep waiting.
///
/// # Errors
///
/// Terminal failures.
pub fn interrupt_menu() -> Result<Interrupt, std::io::Error> {
    let theme = theme();
    let chosen = Select::with_theme(theme.as_ref())
        .with_prompt("Interrupted. Cancel the task?")
        .items([
            "cancel the task",
            "keep waiting",
            "leave it running and exit",
        ])
        .default(0)
        .interact_opt();
    let _ = console::Term::stderr().show_cursor();
    match chosen.map_err(PromptError::from) {
        Ok(Some(0)) | Err(PromptError::Interrupted) => Ok(Interrupt::Cancel),
        Ok(Some(2)) => Ok(Interrupt::Detach),
        Ok(_) => Ok(Interrupt::KeepWaiting),
        Err(PromptError::Io(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approve() -> Request {
        Request {
            key: "approve".into(),
            message: "Deploy?".into(),
            schema: json!({ "type": "object", "required": ["ok"], "properties": {
                "ok": { "type": "boolean" }, "note": { "type": "string", "maxLength": 5 } } }),
        }
    }

    fn presets(words: &[&str]) -> Presets {
        Presets {
            words: words.iter().map(|w| (*w).to_owned()).collect(),
            decline: false,
        }
    }

    #[test]
    fn presets_answer_the_fields_they_name() {
        let a = from_presets(&approve(), &presets(&["ok=yes", "other=1"])).unwrap();
        assert_eq!(
            a.to_json(),
            json!({ "action": "accept", "content": { "ok": true } })
        );
    }

    #[test]
    fn missing_and_invalid_presets_are_refused() {
        assert!(matches!(
            from_presets(&approve(), &presets(&["note=hi"])),
            Err(Unanswered::Missing(m)) if m == ["ok"]
        ));
        assert!(matches!(
            from_presets(&approve(), &presets(&["ok=true", "note=too long"])),
            Err(Unanswered::Invalid(_))
        ));
        assert!(matches!(
            from_presets(&approve(), &presets(&["ok=maybe"])),
            Err(Unanswered::Invalid(_))
        ));
    }

    #[test]
    fn decline_preset_declines() {
        let p = Presets {
            words: vec![],
            decline: true,
        };
        assert_eq!(from_presets(&approve(), &p).unwrap(), Answer::Decline);
    }

    #[test]
    fn choices_come_from_enum_or_titled_consts() {
        let c = choices(&json!({ "enum": ["a", "b"] })).unwrap();
        assert_eq!(c[1], (json!("b"), "b".to_owned()));
        let c = choices(&json!({ "oneOf": [{ "const": "p", "title": "Production" }] })).unwrap();
        assert_eq!(c[0], (json!("p"), "Production".to_owned()));
        assert!(choices(&json!({ "type": "string" })).is_none());
    }

    #[test]
    fn requests_read_the_input_requests_map() {
        let map = json!({ "approve": { "method": "elicitation/create", "params": {
            "mode": "form", "message": "Deploy?", "requestedSchema": { "type": "object" } } } });
        let r = requests(&map);
        assert_eq!(
            (r[0].key.as_str(), r[0].message.as_str()),
            ("approve", "Deploy?")
        );
    }
}
