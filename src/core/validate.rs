//! Checks of a parsed configuration that serde cannot make: secrets present,
//! key ids well formed, tool names unique, schemas valid, engines named. Every
//! check runs; every problem is collected, each with its key path, so one pass
//! reports all of them.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::access::Caller;
use super::config::{AccessRule, ConfigProblem, FileConfig, OAuthConfig, ToolConfig};
use super::handle::Keyring;

/// What the checks produced for building the gateway.
pub(crate) struct Checked {
    /// The sealing keys (absent when a key was at fault).
    pub keys: Option<Keyring>,
    /// Static bearer tokens: token → caller.
    pub bearer: Vec<(String, Caller)>,
    /// OAuth settings with their secrets read (absent when not configured).
    pub oauth: Option<OAuthSettings>,
    /// Each tool's argument validator, in tool order (`None` for a tool at fault).
    pub validators: Vec<Option<jsonschema::Validator>>,
}

/// The server's bounds must let something through: a zero would refuse every
/// request (or close every connection) and is surely a mistake.
fn check_bounds(server: &super::config::ServerConfig, problems: &mut Vec<ConfigProblem>) {
    let counts = [
        ("max_body_bytes", server.max_body_bytes),
        ("max_batch", server.max_batch),
        ("max_waits", server.max_waits),
        ("max_waits_per_caller", server.max_waits_per_caller),
        ("max_engine_calls", server.max_engine_calls),
        ("workers", server.workers.unwrap_or(1)),
    ];
    for (key, value) in counts {
        if value == 0 {
            problems.push(ConfigProblem::new(
                format!("server.{key}"),
                "must be at least 1".to_owned(),
            ));
        }
    }
    let deadlines = [
        ("header_read_timeout", server.header_read_timeout),
        ("body_read_timeout", server.body_read_timeout),
        ("max_listen", server.max_listen),
        ("listen_keep_alive", server.listen_keep_alive),
    ];
    for (key, value) in deadlines {
        if value.is_zero() {
            problems.push(ConfigProblem::new(
                format!("server.{key}"),
                "must be longer than 0s".to_owned(),
            ));
        }
    }
}

/// Runs every check of `cfg`, appending what is wrong to `problems`.
pub(crate) fn check(cfg: &FileConfig, problems: &mut Vec<ConfigProblem>) -> Checked {
    let keys = check_keys(cfg, problems);
    check_bounds(&cfg.server, problems);
    let mut bearer = Vec::new();
    for (i, b) in cfg.auth.bearer.iter().enumerate() {
        if b.caller.is_empty() || b.caller.contains('#') {
            problems.push(ConfigProblem::new(
                format!("auth.bearer[{i}].caller"),
                format!(
                    "{:?} must be non-empty and without '#' (OAuth callers are ISSUER#SUBJECT)",
                    b.caller
                ),
            ));
        }
        match secret_from(b.token_env.as_deref(), b.token_file.as_deref(), None) {
            Ok(token) => bearer.push((
                token,
                Caller::new(b.caller.clone(), b.scopes.clone(), b.groups.clone()),
            )),
            Err(m) => problems.push(ConfigProblem::new(format!("auth.bearer[{i}]"), m)),
        }
    }
    if let Some(rule) = &cfg.auth.default_access {
        check_rule("auth.default_access", rule, problems);
    }
    for (i, tool) in cfg.tools.iter().enumerate() {
        if let Some(rule) = &tool.access {
            check_rule(&format!("tools[{i}].access"), rule, problems);
        }
    }
    let oauth = cfg
        .auth
        .oauth
        .as_ref()
        .and_then(|o| check_oauth(o, problems));
    let open_tools = cfg.tools.iter().any(|t| t.access.is_none());
    if oauth.is_some() && cfg.auth.default_access.is_none() && open_tools {
        tracing::warn!(
            "auth.oauth is set and auth.default_access is not: tools without `access` are open to \
             every valid token for this resource; set auth.default_access (a scope, say) to narrow them"
        );
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
        oauth,
        validators,
    }
}

/// `[auth.oauth]` with the introspection secrets read. `Debug` never shows
/// the secrets.
#[derive(Clone)]
pub struct OAuthSettings {
    /// The configuration.
    pub config: OAuthConfig,
    /// Per issuer (in order): its introspection client secret, if one is configured.
    pub introspection_secrets: Vec<Option<String>>,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secrets: Vec<Option<&str>> = self
            .introspection_secrets
            .iter()
            .map(|s| s.as_ref().map(|_| "<redacted>"))
            .collect();
        f.debug_struct("OAuthSettings")
            .field("config", &self.config)
            .field("introspection_secrets", &secrets)
            .finish()
    }
}

fn check_rule(key: &str, rule: &[AccessRule], problems: &mut Vec<ConfigProblem>) {
    for (j, alt) in rule.iter().enumerate() {
        if alt.callers.is_empty() && alt.scopes.is_empty() && alt.groups.is_empty() {
            problems.push(ConfigProblem::new(
                format!("{key}[{j}]"),
                "give at least one of callers, scopes, groups (callers = [\"*\"] admits every caller)",
            ));
        }
        let blank = alt
            .callers
            .iter()
            .chain(&alt.scopes)
            .chain(&alt.groups)
            .any(|v| v.trim().is_empty());
        if blank {
            problems.push(ConfigProblem::new(
                format!("{key}[{j}]"),
                "empty names are not allowed",
            ));
        }
    }
}

/// Asymmetric JWS algorithms taskgate accepts for access tokens. Symmetric ones
/// (`HS*`) would need a secret shared with the issuer; `none` is never accepted.
pub const JWT_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn is_http_url(s: &str) -> bool {
    s.strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'))
}

fn check_oauth(o: &OAuthConfig, problems: &mut Vec<ConfigProblem>) -> Option<OAuthSettings> {
    let before = problems.len();
    let mut problem =
        |k: &str, m: String| problems.push(ConfigProblem::new(format!("auth.oauth.{k}"), m));
    if !is_http_url(&o.resource) || o.resource.contains('#') {
        problem("resource", format!("{:?} must be an absolute http(s) URL without a fragment (the URL clients use for /mcp)", o.resource));
    }
    if o.issuers.is_empty() {
        problem("issuers", "name at least one authorization server".into());
    }
    if o.caller_claim.is_empty() {
        problem("caller_claim", "must name a claim".into());
    }
    if o.timeout.is_zero() {
        problem("timeout", "must be greater than zero".into());
    }
    let mut secrets = Vec::new();
    for (i, issuer) in o.issuers.iter().enumerate() {
        if !is_http_url(&issuer.issuer) {
            problem(
                &format!("issuers[{i}].issuer"),
                format!("{:?} must be an absolute http(s) URL", issuer.issuer),
            );
        }
        if let Some(u) = &issuer.jwks_uri {
            if !is_http_url(u) {
                problem(
                    &format!("issuers[{i}].jwks_uri"),
                    format!("{u:?} must be an absolute http(s) URL"),
                );
            }
        }
        if issuer.algorithms.is_empty() {
            problem(
                &format!("issuers[{i}].algorithms"),
                "name at least one algorithm".into(),
            );
        }
        for alg in &issuer.algorithms {
            if !JWT_ALGORITHMS.contains(&alg.as_str()) {
                problem(
                    &format!("issuers[{i}].algorithms"),
                    format!(
                        "{alg:?} is not accepted; use one of {}",
                        JWT_ALGORITHMS.join(", ")
                    ),
                );
            }
        }
        let secret = match &issuer.introspection {
            None => None,
            Some(intro) => {
                if let Some(u) = &intro.endpoint {
                    if !is_http_url(u) {
                        problem(
                            &format!("issuers[{i}].introspection.endpoint"),
                            format!("{u:?} must be an absolute http(s) URL"),
                        );
                    }
                }
                match (
                    &intro.client_id,
                    &intro.client_secret_env,
                    &intro.client_secret_file,
                ) {
                    (None, None, None) => None,
                    (Some(_), env, file) => {
                        match secret_from(env.as_deref(), file.as_deref(), None) {
                            Ok(s) => Some(s),
                            Err(m) => {
                                problem(&format!("issuers[{i}].introspection"), m);
                                None
                            }
                        }
                    }
                    (None, _, _) => {
                        problem(
                            &format!("issuers[{i}].introspection.client_id"),
                            "a client secret needs its client_id".into(),
                        );
                        None
                    }
                }
            }
        };
        secrets.push(secret);
    }
    (problems.len() == before).then(|| OAuthSettings {
        config: o.clone(),
        introspection_secrets: secrets,
    })
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
    } else if tool.name.starts_with("taskgate_") {
        // taskgate's own companion tools (taskgate_logs, taskgate_task_status, …).
        problem(
            "name",
            format!(
                "{:?}: names starting with taskgate_ are taskgate's own",
                tool.name
            ),
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
        match jsonschema::draft202012::new(&declared_only(&tool.input_schema)) {
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

/// The schema arguments are checked against: `input_schema` itself when its
/// root says what becomes of undeclared arguments (`additionalProperties` or
/// `unevaluatedProperties`), else with `unevaluatedProperties = false` added at
/// the root, so a top-level argument that neither `properties`,
/// `patternProperties` nor a subschema (`allOf`, `$ref`, …) declares is refused.
pub(crate) fn declared_only(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(root) = &mut schema {
        if !root.contains_key("additionalProperties") && !root.contains_key("unevaluatedProperties")
        {
            root.insert("unevaluatedProperties".to_owned(), Value::Bool(false));
        }
    }
    schema
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

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(extra: &str) -> Vec<String> {
        let text = format!(
            "[keys]\nseal = [{{ id = \"k\", dev_secret = \"0123456789abcdef0123456789abcdef\" }}]\n{extra}"
        );
        let cfg: FileConfig = config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        let mut problems = Vec::new();
        check(&cfg, &mut problems);
        problems
            .iter()
            .map(|p| format!("{}: {}", p.key, p.message))
            .collect()
    }

    /// Item 10 of the security issue: `Debug` of the configuration and of the
    /// OAuth settings read from it never shows a key or a secret.
    #[test]
    fn debug_never_shows_a_key_or_secret() {
        let dir = tempfile::tempdir().unwrap();
        let secret_file = dir.path().join("introspection");
        std::fs::write(&secret_file, "introspection-SECRET-value\n").unwrap();
        let text = format!(
            "[keys]\nseal = [{{ id = \"k\", dev_secret = \"dev-SECRET-0123456789abcdef0123456789\" }}]\n\
             [auth.oauth]\nresource = \"https://mcp.example.com/mcp\"\n\
             issuers = [{{ issuer = \"https://idp.example.com\", introspection = {{ client_id = \"tg\", client_secret_file = {:?} }} }}]\n",
            secret_file.display().to_string()
        );
        let cfg: FileConfig = config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        let shown = format!("{cfg:?} {:?}", cfg.keys.seal[0]);
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let mut problems = Vec::new();
        let checked = check(&cfg, &mut problems);
        let oauth = checked.oauth.expect("the OAuth settings are read");
        assert_eq!(
            oauth.introspection_secrets[0].as_deref(),
            Some("introspection-SECRET-value")
        );
        let shown = format!("{oauth:?} {oauth:#?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn auth_and_rule_checks() {
        let table: Vec<(&str, &str)> = vec![
            ("[auth]\ndefault_access = [{}]\n", "auth.default_access[0]: give at least one"),
            ("[auth]\ndefault_access = [{ callers = [\"\"] }]\n", "auth.default_access[0]: empty names"),
            (
                "[auth.oauth]\nresource = \"/mcp\"\nissuers = [{ issuer = \"https://idp.test/\" }]\n",
                "auth.oauth.resource: \"/mcp\" must be an absolute",
            ),
            ("[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = []\n", "auth.oauth.issuers: name at least one"),
            (
                "[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [{ issuer = \"https://idp.test/\", algorithms = [\"HS256\"] }]\n",
                "auth.oauth.issuers[0].algorithms: \"HS256\" is not accepted",
            ),
            (
                "[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [{ issuer = \"https://idp.test/\", algorithms = [\"none\"] }]\n",
                "auth.oauth.issuers[0].algorithms: \"none\" is not accepted",
            ),
            (
                "[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [{ issuer = \"https://idp.test/\", introspection = { client_id = \"tg\", client_secret_env = \"TASKGATE_TEST_UNSET_SECRET\" } }]\n",
                "auth.oauth.issuers[0].introspection: the environment variable TASKGATE_TEST_UNSET_SECRET is not set",
            ),
            (
                "[[tools]]\nname = \"t\"\nengine = \"e\"\naccess = [{ scopes = [\"a\"] }, {}]\n",
                "tools[0].access[1]: give at least one",
            ),
            (
                "[[tools]]\nname = \"taskgate_logs\"\nengine = \"e\"\n",
                "tools[0].name: \"taskgate_logs\": names starting with taskgate_ are taskgate's own",
            ),
        ];
        for (extra, want) in table {
            let got = problems_of(extra);
            assert!(
                got.iter().any(|p| p.starts_with(want)),
                "{extra}: want {want:?}, got {got:?}"
            );
        }
        let fine = problems_of(
            "[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [{ issuer = \"https://idp.test/\" }]\n",
        );
        assert!(fine.is_empty(), "{fine:?}");
    }
}
