//! Settings of a `kind = "airflow"` engine and the `target` of its tools.
//!
//! The doc comments on these structs are the user documentation of the keys.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use taskgate_engine::ConfigError;

/// How long connecting to Airflow may take, unless `connect_timeout` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request to Airflow may take, unless `read_timeout` says otherwise.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How many log lines of a failed task a failed run's result carries by default.
pub const DEFAULT_LOG_LINES: usize = 20;

/// The most log lines a result may carry.
pub const MAX_LOG_LINES: usize = 1000;

/// `[engines.NAME]` with `kind = "airflow"`.
///
/// Exactly one way to authenticate: a username with `password_env` or
/// `password_file` (taskgate asks Airflow's token endpoint, `POST /auth/token`, for an
/// access token, renews it before it expires and once when Airflow refuses it), or a
/// static bearer token with `token_env` or `token_file`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// The Airflow API server's root URL, such as `https://airflow.example.com`
    /// (the REST API is under `/api/v2`, the token endpoint at `/auth/token`).
    pub base_url: String,
    /// The Airflow user taskgate logs in as (with `password_env` or `password_file`).
    #[serde(default)]
    pub username: Option<String>,
    /// Name of the environment variable holding the user's password. Read once when
    /// the server starts.
    #[serde(default)]
    pub password_env: Option<String>,
    /// A file holding the user's password (surrounding whitespace is ignored). Read
    /// once when the server starts.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Name of the environment variable holding a static bearer token (an access
    /// token Airflow accepts as `Authorization: Bearer`). Read once when the server
    /// starts.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A file holding a static bearer token. Read once when the server starts.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Verify the server's TLS certificate (default `true`). Turn it off only for a
    /// test instance with a self-signed certificate.
    #[serde(default = "yes")]
    pub tls_verify: bool,
    /// How long connecting may take (default `5s`).
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    /// How long one request may take, answer included (default `30s`).
    #[serde(default, with = "humantime_serde")]
    pub read_timeout: Option<Duration>,
}

fn yes() -> bool {
    true
}

/// How taskgate authenticates to Airflow.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// Log in at the token endpoint with a username and password.
    Password {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
    /// A static bearer token.
    Token(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .finish_non_exhaustive(),
            Self::Token(_) => f.write_str("Token(..)"),
        }
    }
}

/// Settings after validation.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The API server root, without a trailing `/`.
    pub base_url: String,
    /// How to authenticate.
    pub auth: Auth,
    /// See [`EngineSettings::tls_verify`].
    pub tls_verify: bool,
    /// See [`EngineSettings::connect_timeout`].
    pub connect_timeout: Duration,
    /// See [`EngineSettings::read_timeout`].
    pub read_timeout: Duration,
}

fn read_secret(key: &str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(key, format!("cannot read {}: {e}", path.display())))?;
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(ConfigError::new(
            key,
            format!("{} is empty", path.display()),
        ));
    }
    Ok(text)
}

fn env_secret(
    key: &str,
    name: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let value = env(name).map(|v| v.trim().to_owned()).unwrap_or_default();
    if value.is_empty() {
        return Err(ConfigError::new(
            key,
            format!("the environment variable {name} is not set or empty"),
        ));
    }
    Ok(value)
}

impl EngineSettings {
    /// Checks the settings and reads the secrets they point at. No network.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the offending key.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        self.validate_with(|name| std::env::var(name).ok())
    }

    /// As [`EngineSettings::validate`], reading environment variables through `env`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the offending key.
    pub fn validate_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Validated, ConfigError> {
        let base_url = self.base_url.trim().trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base_url)
            .map_err(|e| ConfigError::new("base_url", format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ConfigError::new(
                "base_url",
                "must be an http(s) URL such as https://airflow.example.com",
            ));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(ConfigError::new(
                "base_url",
                "must not carry a query or fragment",
            ));
        }
        if parsed.path().trim_end_matches('/').ends_with("/api/v2") {
            return Err(ConfigError::new(
                "base_url",
                "the API server's root, without /api/v2 (taskgate adds it)",
            ));
        }
        let password_modes =
            usize::from(self.password_env.is_some()) + usize::from(self.password_file.is_some());
        let token_modes =
            usize::from(self.token_env.is_some()) + usize::from(self.token_file.is_some());
        let auth = match (password_modes, token_modes) {
            (0, 0) => {
                return Err(ConfigError::new(
                    "",
                    "set username with password_env or password_file, or token_env or token_file",
                ))
            }
            (1, 0) => {
                let username = self
                    .username
                    .as_deref()
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| {
                        ConfigError::new("username", "required with password_env or password_file")
                    })?
                    .to_owned();
                let password = match (&self.password_env, &self.password_file) {
                    (Some(name), _) => env_secret("password_env", name, &env)?,
                    (None, Some(path)) => read_secret("password_file", path)?,
                    (None, None) => unreachable!("one password mode is set"),
                };
                Auth::Password { username, password }
            }
            (0, 1) => {
                if self.username.is_some() {
                    return Err(ConfigError::new(
                        "username",
                        "not used with a static token (token_env or token_file)",
                    ));
                }
                let token = match (&self.token_env, &self.token_file) {
                    (Some(name), _) => env_secret("token_env", name, &env)?,
                    (None, Some(path)) => read_secret("token_file", path)?,
                    (None, None) => unreachable!("one token mode is set"),
                };
                Auth::Token(token)
            }
            _ => {
                return Err(ConfigError::new(
                    "",
                    "set only one of password_env, password_file, token_env, token_file",
                ))
            }
        };
        let connect_timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let read_timeout = self.read_timeout.unwrap_or(DEFAULT_READ_TIMEOUT);
        for (key, value) in [
            ("connect_timeout", connect_timeout),
            ("read_timeout", read_timeout),
        ] {
            if value.is_zero() || value > Duration::from_secs(600) {
                return Err(ConfigError::new(key, "must be between 1ms and 10m"));
            }
        }
        Ok(Validated {
            base_url,
            auth,
            tls_verify: self.tls_verify,
            connect_timeout,
            read_timeout,
        })
    }
}

/// A tool's `target` on an Airflow engine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolTarget {
    /// The DAG a tool call triggers.
    pub dag_id: String,
    /// Where the tool's arguments go in the run's `conf`: unset (the default), the
    /// arguments object is the whole `conf`; set, `conf` is `{ KEY: arguments }`.
    #[serde(default)]
    pub conf_key: Option<String>,
    /// The XCom that becomes the tool result's `structuredContent` when the run
    /// succeeds: `{ task_id = "load" }` reads the task's `return_value`;
    /// `key = "..."` reads another key. Unset, the result is a summary of the run.
    #[serde(default)]
    pub result: Option<ResultXcom>,
    /// How many lines of a failed task's log a failed run's result carries
    /// (default 20, at most 1000; 0 leaves the log out).
    #[serde(default)]
    pub log_lines: Option<usize>,
    /// The `conf` key that carries the W3C trace context the run was started
    /// under, as `{ "traceparent": "...", "tracestate": "..." }` (a carrier a
    /// task hands to an OpenTelemetry propagator's `extract`). Unset (the
    /// default): the trace context is not passed, since a DAG may refuse conf
    /// keys it does not know. Must differ from `conf_key` and, when `conf_key`
    /// is unset, from every property of the tool's input schema; an argument
    /// of this name is refused. A retried start under another trace is the
    /// same run: this key is left out when conf is compared.
    #[serde(default)]
    pub trace_conf_key: Option<String>,
}

/// Which XCom is the result (`target.result`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultXcom {
    /// The task whose XCom is read.
    pub task_id: String,
    /// The XCom key (default `return_value`, what a task returns).
    #[serde(default)]
    pub key: Option<String>,
}

/// A tool target after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundTarget {
    /// The DAG.
    pub dag_id: String,
    /// See [`ToolTarget::conf_key`].
    pub conf_key: Option<String>,
    /// The result task and XCom key.
    pub result: Option<(String, String)>,
    /// See [`ToolTarget::log_lines`].
    pub log_lines: usize,
    /// See [`ToolTarget::trace_conf_key`].
    pub trace_conf_key: Option<String>,
}

/// Airflow's rule for DAG and task ids: letters, digits, `_`, `-`, `.`, at most 250.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 250
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl ToolTarget {
    /// Checks the target. Pure.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed `target.FIELD`.
    pub fn validate(&self) -> Result<BoundTarget, ConfigError> {
        if !valid_id(&self.dag_id) {
            return Err(ConfigError::new(
                "target.dag_id",
                "must be a DAG id (letters, digits, _ - .; at most 250)",
            ));
        }
        if let Some(key) = &self.conf_key {
            if key.is_empty() {
                return Err(ConfigError::new("target.conf_key", "must not be empty"));
            }
        }
        let result = match &self.result {
            None => None,
            Some(r) => {
                if !valid_id(&r.task_id) {
                    return Err(ConfigError::new(
                        "target.result.task_id",
                        "must be a task id (letters, digits, _ - .; at most 250)",
                    ));
                }
                let key = r.key.clone().unwrap_or_else(|| "return_value".to_owned());
                if key.is_empty() || key.contains('/') {
                    return Err(ConfigError::new(
                        "target.result.key",
                        "must be a non-empty XCom key without /",
                    ));
                }
                Some((r.task_id.clone(), key))
            }
        };
        let log_lines = self.log_lines.unwrap_or(DEFAULT_LOG_LINES);
        if log_lines > MAX_LOG_LINES {
            return Err(ConfigError::new(
                "target.log_lines",
                format!("at most {MAX_LOG_LINES}"),
            ));
        }
        if let Some(key) = &self.trace_conf_key {
            if key.is_empty() {
                return Err(ConfigError::new(
                    "target.trace_conf_key",
                    "must not be empty",
                ));
            }
            if self.conf_key.as_ref() == Some(key) {
                return Err(ConfigError::new(
                    "target.trace_conf_key",
                    "must differ from target.conf_key",
                ));
            }
        }
        Ok(BoundTarget {
            dag_id: self.dag_id.clone(),
            conf_key: self.conf_key.clone(),
            result,
            log_lines,
            trace_conf_key: self.trace_conf_key.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(v: serde_json::Value) -> Result<Validated, ConfigError> {
        let s: EngineSettings = taskgate_engine::from_value(v)?;
        s.validate_with(|name| (name == "PW").then(|| "secret".to_owned()))
    }

    #[test]
    fn password_and_token_modes() {
        let v = settings(
            json!({"base_url": "http://127.0.0.1:8080/", "username": "u", "password_env": "PW"}),
        )
        .unwrap();
        assert_eq!(v.base_url, "http://127.0.0.1:8080");
        assert_eq!(
            v.auth,
            Auth::Password {
                username: "u".into(),
                password: "secret".into()
            }
        );
        assert!(v.tls_verify);
        assert_eq!(v.read_timeout, DEFAULT_READ_TIMEOUT);
        let v = settings(json!({"base_url": "https://a.example", "token_env": "PW", "tls_verify": false, "read_timeout": "5s"})).unwrap();
        assert_eq!(v.auth, Auth::Token("secret".into()));
        assert!(!v.tls_verify);
        assert_eq!(v.read_timeout, Duration::from_secs(5));
        assert!(!format!("{:?}", v.auth).contains("secret"));
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (v, key) in [
            (json!({"base_url": "http://a"}), ""),
            (
                json!({"base_url": "http://a", "password_env": "PW"}),
                "username",
            ),
            (
                json!({"base_url": "http://a", "username": "u", "password_env": "NOPE"}),
                "password_env",
            ),
            (
                json!({"base_url": "http://a", "username": "u", "password_env": "PW", "token_env": "PW"}),
                "",
            ),
            (
                json!({"base_url": "http://a", "username": "u", "token_env": "PW"}),
                "username",
            ),
            (
                json!({"base_url": "ftp://a", "token_env": "PW"}),
                "base_url",
            ),
            (
                json!({"base_url": "http://a/api/v2", "token_env": "PW"}),
                "base_url",
            ),
            (
                json!({"base_url": "http://a", "token_env": "PW", "read_timeout": "0s"}),
                "read_timeout",
            ),
            (
                json!({"base_url": "http://a", "token_env": "PW", "extra": 1}),
                "extra",
            ),
            (
                json!({"base_url": "http://a", "token_file": "/no/such/file"}),
                "token_file",
            ),
        ] {
            let e = settings(v.clone()).unwrap_err();
            assert_eq!(e.key, key, "{v}: {e}");
        }
    }

    #[test]
    fn targets() {
        let t: ToolTarget =
            taskgate_engine::from_value(json!({"dag_id": "etl", "result": {"task_id": "load"}}))
                .unwrap();
        let b = t.validate().unwrap();
        assert_eq!(b.result, Some(("load".into(), "return_value".into())));
        assert_eq!(b.log_lines, DEFAULT_LOG_LINES);
        for (v, key) in [
            (json!({"dag_id": "bad id"}), "target.dag_id"),
            (
                json!({"dag_id": "a", "result": {"task_id": ""}}),
                "target.result.task_id",
            ),
            (
                json!({"dag_id": "a", "log_lines": 5000}),
                "target.log_lines",
            ),
            (json!({"dag_id": "a", "conf_key": ""}), "target.conf_key"),
        ] {
            let t: ToolTarget = taskgate_engine::from_value(v.clone()).unwrap();
            assert_eq!(t.validate().unwrap_err().key, key, "{v}");
        }
    }
}
