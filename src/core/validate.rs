//! Checks of a parsed configuration that serde cannot make: secrets present,
//! key ids well formed, tool names unique, schemas valid, engines named. Every
//! check runs; every problem is collected, each with its key path, so one pass
//! reports all of them.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::config::{ConfigProblem, FileConfig, ToolConfig};
use super::handle::Keyring;

/// What the checks produced for building the gateway.
pub(crate) struct Checked {
    /// The sealing keys (absent when a key was at fault).
    pub keys: Option<Keyring>,
    /// Static bearer tokens: token → caller.
    pub bearer: Vec<(String, String)>,
    /// Each tool's argument validator, in tool order (`None` for a tool at fault).
    pub validators: Vec<Option<jsonschema::Validator>>,
}

/// Runs every check of `cfg`, appending what is wrong to `problems`.
pub(crate) fn check(cfg: &FileConfig, problems: &mut Vec<ConfigProblem>) -> Checked {
    let keys = check_keys(cfg, problems);
    let mut bearer = Vec::new();
    for (i, b) in cfg.auth.bearer.iter().enumerate() {
        match secret_from(b.token_env.as_deref(), b.token_file.as_deref(), None) {
            Ok(token) => bearer.push((token, b.caller.clone())),
            Err(m) => problems.push(ConfigProblem::new(format!("auth.bearer[{i}]"), m)),
        }
    }
    let mut names = BTreeSet::new();
    let validators = cfg
        .tools
        .iter()
        .enumerate()
        .map(|(i, tool)| check_tool(cfg, i, tool, &mut names, problems))
        .collect();
    Checked {
        keys,
        bearer,
        validators,
    }
}

fn check_keys(cfg: &FileConfig, problems: &mut Vec<ConfigProblem>) -> Option<Keyring> {
    let mut pairs = Vec::new();
    let mut complete = true;
    for (i, key) in cfg.keys.seal.iter().enumerate() {
        match secret_from(
            key.secret_env.as_deref(),
            key.secret_file.as_deref(),
            key.dev_secret.as_deref(),
        ) {
            Ok(secret) => pairs.push((key.id.clone(), secret)),
            Err(m) => {
                complete = false;
                problems.push(ConfigProblem::new(format!("keys.seal[{i}]"), m));
                continue;
            }
        }
        if key.dev_secret.is_some() {
            tracing::warn!(
                key = %key.id,
                "keys.seal[{i}] uses dev_secret: a development key written in the config file. \
                 Never use it in production: anyone with the file can forge handles."
            );
        }
    }
    if !complete {
        return None;
    }
    match Keyring::new(&pairs) {
        Ok(keys) => Some(keys),
        Err(e) => {
            problems.push(ConfigProblem::new("keys.seal", e.to_string()));
            None
        }
    }
}

fn check_tool(
    cfg: &FileConfig,
    i: usize,
    tool: &ToolConfig,
    names: &mut BTreeSet<String>,
    problems: &mut Vec<ConfigProblem>,
) -> Option<jsonschema::Validator> {
    let before = problems.len();
    let mut problem =
        |k: &str, m: String| problems.push(ConfigProblem::new(format!("tools[{i}].{k}"), m));
    let valid_name = !tool.name.is_empty()
        && tool.name.len() <= 64
        && tool
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid_name {
        problem(
            "name",
            format!("{:?} must be 1-64 characters of [A-Za-z0-9_.-]", tool.name),
        );
    } else if !names.insert(tool.name.clone()) {
        problem("name", format!("{:?} is defined twice", tool.name));
    }
    if !cfg.engines.contains_key(&tool.engine) {
        problem(
            "engine",
            format!("no engine {:?} is configured under [engines]", tool.engine),
        );
    }
    let validator = if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        problem(
            "input_schema",
            "the schema's root must have type = \"object\"".into(),
        );
        None
    } else {
        match jsonschema::draft202012::new(&tool.input_schema) {
            Ok(v) => Some(v),
            Err(e) => {
                problem("input_schema", format!("not a valid JSON Schema: {e}"));
                None
            }
        }
    };
    if let Some(out) = &tool.output_schema {
        if let Err(e) = jsonschema::draft202012::new(out) {
            problem("output_schema", format!("not a valid JSON Schema: {e}"));
        }
    }
    if tool.poll_interval.is_zero() {
        problem("poll_interval", "must be greater than zero".into());
    }
    if problems.len() > before {
        None
    } else {
        validator
    }
}

/// Reads a secret from exactly one of an environment variable, a file or the
/// config itself.
fn secret_from(
    env: Option<&str>,
    file: Option<&Path>,
    inline: Option<&str>,
) -> Result<String, String> {
    match (env, file, inline) {
        (Some(var), None, None) => match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
            _ => Err(format!("the environment variable {var} is not set")),
        },
        (None, Some(path), None) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        (None, None, Some(v)) => Ok(v.to_owned()),
        _ => Err(
            "give exactly one of secret_env/token_env, secret_file/token_file or dev_secret".into(),
        ),
    }
}
