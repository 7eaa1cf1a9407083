//! Checks of a parsed configuration that serde cannot make: secrets present,
//! key ids well formed, tool names unique, schemas valid, engines named. Every
//! check runs; every problem is collected, each with its key path, so one pass
//! reports all of them.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::access::Caller;
use super::config::{AccessRule, ConfigProblem, FileConfig, IpNetwork, OAuthConfig, ToolConfig};
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
        (
            "max_starts_per_minute",
            server.max_starts_per_minute as usize,
        ),
        (
            "max_lookups_per_minute",
            server.max_lookups_per_minute as usize,
        ),
        (
            "max_wait_reads_per_minute",
            server.max_wait_reads_per_minute as usize,
        ),
        (
            "max_watched_runs_per_caller",
            server.max_watched_runs_per_caller,
        ),
        ("workers", server.workers.unwrap_or(1)),
        (
            "http2_max_concurrent_streams",
            server.http2_max_concurrent_streams as usize,
        ),
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

/// True when `cfg` authenticates HTTP callers (static tokens or OAuth).
fn authenticated(cfg: &FileConfig) -> bool {
    !cfg.auth.bearer.is_empty() || cfg.auth.oauth.is_some()
}

/// True when `listen` is a loopback address (`127.0.0.0/8`, `::1`).
fn loopback(listen: &std::net::SocketAddr) -> bool {
    listen.ip().to_canonical().is_loopback()
}

/// The front door: anonymous HTTP is for loopback, unless the operator names
/// the networks to serve anonymously (`server.insecure_anonymous_networks`).
fn check_front_door(cfg: &FileConfig, problems: &mut Vec<ConfigProblem>) {
    let networks = &cfg.server.insecure_anonymous_networks;
    for (i, net) in networks.iter().enumerate() {
        if let Err(m) = IpNetwork::parse(net) {
            problems.push(ConfigProblem::new(
                format!("server.insecure_anonymous_networks[{i}]"),
                m,
            ));
        }
    }
    if authenticated(cfg) {
        if !networks.is_empty() {
            problems.push(ConfigProblem::new(
                "server.insecure_anonymous_networks",
                "applies only without [auth] (with it every HTTP caller authenticates); remove it",
            ));
        }
        return;
    }
    let listen = cfg.server.listen;
    if !loopback(&listen) && networks.is_empty() {
        problems.push(ConfigProblem::new(
            "server.listen",
            format!(
                "{listen} is not a loopback address and no [auth] is configured: every host that \
                 reaches the port would run tools as `anonymous`. Configure [auth] (bearer tokens \
                 or OAuth), listen on 127.0.0.1, or (INSECURE) list the networks to serve without \
                 authentication in server.insecure_anonymous_networks"
            ),
        ));
    }
    if !networks.is_empty() {
        tracing::warn!(
            networks = ?networks,
            "INSECURE: server.insecure_anonymous_networks is set: every host in these networks \
             that reaches {listen} runs tools as `anonymous`, without authentication"
        );
    }
}

/// Runs every check of `cfg`, appending what is wrong to `problems`.
pub(crate) fn check(cfg: &FileConfig, problems: &mut Vec<ConfigProblem>) -> Checked {
    let keys = check_keys(cfg, problems);
    check_bounds(&cfg.server, problems);
    check_front_door(cfg, problems);
    for p in crate::telemetry::check(&cfg.telemetry) {
        problems.push(ConfigProblem::new(p.key, p.message));
    }
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
        } else if b.caller == "anonymous" || b.caller.starts_with("local:") {
            // Each transport's own callers keep their own names, so their
            // handles and SEP-1391 token namespaces are never another's.
            problems.push(ConfigProblem::new(
                format!("auth.bearer[{i}].caller"),
                format!(
                    "{:?} is reserved: `anonymous` is the unauthenticated HTTP caller and `local:USER` \
                     the stdio caller; name token callers otherwise",
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
    if cfg.auth.failures.per_peer > 0 && cfg.auth.failures.window.is_zero() {
        problems.push(ConfigProblem::new(
            "auth.failures.window",
            "must be longer than 0s (per_peer = 0 turns the limit off)",
        ));
    }
    for (i, tool) in cfg.tools.iter().enumerate() {
        if let Some(rule) = &tool.access {
            check_rule(&format!("tools[{i}].access"), rule, problems);
        }
        if let Some(rule) = &tool.answer_access {
            check_rule(&format!("tools[{i}].answer_access"), rule, problems);
        }
        if tool.approval_inputs.iter().any(|k| k.trim().is_empty()) {
            problems.push(ConfigProblem::new(
                format!("tools[{i}].approval_inputs"),
                "an input request key may not be empty",
            ));
        }
    }
    let oauth = cfg
        .auth
        .oauth
        .as_ref()
        .and_then(|o| check_oauth(o, problems));
    if cfg.auth.oauth.is_some() && cfg.auth.default_access.is_none() {
        problems.push(ConfigProblem::new(
            "auth.default_access",
            "must be set with [auth.oauth]: every token a trusted issuer mints for this resource \
             gets through the front door, so say who of them may use tools without their own \
             `access`: default_access = [{ scopes = [\"taskgate:call\"] }] (a scope), \
             default_access = [] (no one: every tool names its callers), or \
             default_access = [{ callers = [\"*\"] }] (every valid token)",
        ));
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
    check_token_prefixes(o, &mut problem);
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

/// Each opaque token must go to one issuer only: prefixes are non-empty and
/// unique, and at most one introspecting issuer claims every other token.
fn check_token_prefixes(o: &OAuthConfig, problem: &mut impl FnMut(&str, String)) {
    let mut catch_all = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, issuer) in o.issuers.iter().enumerate() {
        let Some(intro) = &issuer.introspection else {
            continue;
        };
        if intro.token_prefixes.is_empty() {
            catch_all.push(i);
        }
        for p in &intro.token_prefixes {
            if p.is_empty() {
                problem(
                    &format!("issuers[{i}].introspection.token_prefixes"),
                    "an empty prefix would claim every token; leave the list empty instead".into(),
                );
            } else if !seen.insert(p.as_str()) {
                problem(
                    &format!("issuers[{i}].introspection.token_prefixes"),
                    format!("{p:?} is claimed by another issuer too"),
                );
            }
        }
    }
    if catch_all.len() > 1 {
        problem(
            &format!("issuers[{}].introspection.token_prefixes", catch_all[1]),
            format!(
                "{} introspecting issuers list no token_prefixes; an opaque token is shown to one \
                 issuer only, so give every one but (at most) one the prefixes of its tokens",
                catch_all.len()
            ),
        );
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
                let hint = match &key.secret_env {
                    Some(var) => format!(
                        " (make a secret with `taskgate keygen`: export {var}=\"$(taskgate keygen)\")"
                    ),
                    None => " (make a secret with `taskgate keygen`)".to_owned(),
                };
                problems.push(ConfigProblem::new(format!("keys.seal[{i}]"), m + &hint));
                continue;
            }
        }
        if key.dev_secret.is_some() && (authenticated(cfg) || !loopback(&cfg.server.listen)) {
            problems.push(ConfigProblem::new(
                format!("keys.seal[{i}].dev_secret"),
                "a key written in the config file is for development on loopback only: it is \
                 refused with [auth] configured or a non-loopback server.listen. Use secret_env \
                 or secret_file with a secret from `taskgate keygen`",
            ));
            complete = false;
        } else if key.dev_secret.is_some() {
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

    const SECRET: &str = "TiJKLw6A+Cpy7N/hCAOqrZAWAx3BgTT5mDneUT0Cijc=";

    /// The problems of a config of `extra` whose key is a dev_secret.
    fn problems_of(extra: &str) -> Vec<String> {
        problems_with(&format!("dev_secret = \"{SECRET}\""), extra)
    }

    /// The problems of a config of `extra` whose key reads its secret from a file.
    fn problems_with_file(extra: &str) -> Vec<String> {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), SECRET).unwrap();
        let path = file.path().display().to_string();
        problems_with(&format!("secret_file = {path:?}"), extra)
    }

    fn problems_with(secret: &str, extra: &str) -> Vec<String> {
        let text = format!("[keys]\nseal = [{{ id = \"k\", {secret} }}]\n{extra}");
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
                "[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [{ issuer = \"https://idp.test/\" }]\n",
                "auth.default_access: must be set with [auth.oauth]",
            ),
            (
                "[server]\nlisten = \"0.0.0.0:8808\"\n",
                "server.listen: 0.0.0.0:8808 is not a loopback address and no [auth]",
            ),
            (
                "[server]\nlisten = \"[::]:8808\"\ninsecure_anonymous_networks = [\"192.0.2.0/33\"]\n",
                "server.insecure_anonymous_networks[0]: \"192.0.2.0/33\": the prefix",
            ),
            (
                "[server]\ninsecure_anonymous_networks = [\"192.0.2.0/24\"]\n[auth]\nbearer = [{ caller = \"c\", token_env = \"PATH\" }]\n",
                "server.insecure_anonymous_networks: applies only without [auth]",
            ),
            (
                "[auth]\nbearer = [{ caller = \"c\", token_env = \"PATH\" }]\n",
                "keys.seal[0].dev_secret: a key written in the config file",
            ),
            (
                "[server]\nlisten = \"192.0.2.1:8808\"\ninsecure_anonymous_networks = [\"192.0.2.0/24\"]\n",
                "keys.seal[0].dev_secret: a key written in the config file",
            ),
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
                "[[tools]]\nname = \"t\"\nengine = \"e\"\nanswer_access = [{ groups = [\" \"] }]\n",
                "tools[0].answer_access[0]: empty names",
            ),
            (
                "[[tools]]\nname = \"t\"\nengine = \"e\"\napproval_inputs = [\"\"]\n",
                "tools[0].approval_inputs: an input request key may not be empty",
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
        for fine in [
            "[server]\nlisten = \"[::1]:8808\"\n",
            "[server]\nlisten = \"127.0.0.2:8808\"\n",
        ] {
            let got = problems_of(fine);
            assert!(got.is_empty(), "{fine}: {got:?}");
        }
        for fine in [
            "[auth]\ndefault_access = []\n[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [{ issuer = \"https://idp.test/\" }]\n",
            "[server]\nlisten = \"0.0.0.0:8808\"\n[auth]\nbearer = [{ caller = \"c\", token_env = \"PATH\" }]\n",
            "[server]\nlisten = \"0.0.0.0:8808\"\ninsecure_anonymous_networks = [\"192.0.2.0/24\", \"2001:db8::/32\"]\n",
        ] {
            let got = problems_with_file(fine);
            assert!(got.is_empty(), "{fine}: {got:?}");
        }
        let weak = problems_with("dev_secret = \"0123456789abcdef0123456789abcdef\"", "");
        assert!(
            weak.iter()
                .any(|p| p.contains("base64 text of at least 32 random bytes")),
            "{weak:?}"
        );
    }

    #[test]
    fn opaque_tokens_have_one_issuer_and_the_failure_window_is_positive() {
        let oauth = |a: &str, b: &str| {
            format!(
                "[auth.oauth]\nresource = \"https://tg.test/mcp\"\nissuers = [\n\
                 {{ issuer = \"https://a.test/\", introspection = {{ endpoint = \"https://a.test/i\"{a} }} }},\n\
                 {{ issuer = \"https://b.test/\", introspection = {{ endpoint = \"https://b.test/i\"{b} }} }},\n]\n"
            )
        };
        let table: Vec<(String, &str)> = vec![
            (
                oauth("", ""),
                "auth.oauth.issuers[1].introspection.token_prefixes: 2 introspecting issuers list no token_prefixes",
            ),
            (
                oauth(", token_prefixes = [\"\"]", ""),
                "auth.oauth.issuers[0].introspection.token_prefixes: an empty prefix",
            ),
            (
                oauth(", token_prefixes = [\"x_\"]", ", token_prefixes = [\"x_\"]"),
                "auth.oauth.issuers[1].introspection.token_prefixes: \"x_\" is claimed by another issuer",
            ),
            (
                "[auth.failures]\nwindow = \"0s\"\n".to_owned(),
                "auth.failures.window: must be longer than 0s",
            ),
        ];
        for (extra, want) in table {
            let got = problems_of(&extra);
            assert!(
                got.iter().any(|p| p.starts_with(want)),
                "{extra}: want {want:?}, got {got:?}"
            );
        }
        for fine in [
            oauth(", token_prefixes = [\"ory_at_\"]", ""),
            oauth(
                ", token_prefixes = [\"a_\"]",
                ", token_prefixes = [\"b_\", \"b_x\"]",
            ),
            "[auth.failures]\nper_peer = 0\nwindow = \"0s\"\n".to_owned(),
        ] {
            // The other rules of an OAuth file (a key from the environment, an
            // explicit default_access) are not what this table checks.
            let got: Vec<_> = problems_of(&fine)
                .into_iter()
                .filter(|p| !p.starts_with("keys.seal") && !p.starts_with("auth.default_access"))
                .collect();
            assert!(got.is_empty(), "{fine}: {got:?}");
        }
    }
}
