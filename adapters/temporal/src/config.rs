//! The `[engines.NAME]` table of a Temporal engine ([`EngineSettings`]) and a
//! tool's `target` ([`ToolTarget`]). Their doc comments are the user
//! documentation; `README.md` beside this crate shows them as tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use taskgate_engine::ConfigError;

/// How long connecting may take when unset.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take when unset.
pub(crate) const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a read waits for the workflow to answer a query when unset.
pub(crate) const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The `[engines.NAME]` table of an engine with `kind = "temporal"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// The Temporal frontend's gRPC address, `host:port` (such as
    /// `127.0.0.1:7233` or `my-ns.a1b2c.tmprl.cloud:7233`).
    pub address: String,
    /// The namespace the tools' workflows run in (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Speak TLS to the frontend. Default: off, unless a CA file, a client
    /// certificate or an API key is set (then on). With TLS on and no
    /// `tls_ca_file`, the system's trusted roots verify the server.
    #[serde(default)]
    pub tls: Option<bool>,
    /// A PEM file of the CA that signed the frontend's certificate, instead of
    /// the system's roots. Read once when the server starts.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// The name to verify the frontend's certificate against, when it is not
    /// the host of `address`.
    #[serde(default)]
    pub tls_server_name: Option<String>,
    /// mTLS: a PEM file with taskgate's client certificate (chain). Needs
    /// `tls_key_file`. Read once when the server starts.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    /// mTLS: a PEM file with the private key of `tls_cert_file`. Read once when
    /// the server starts; never logged.
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// Name of the environment variable holding an API key (Temporal Cloud),
    /// sent as a bearer token on every call. Read once when the server starts.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A file holding the API key (surrounding whitespace is ignored). Read once
    /// when the server starts.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// How long connecting (TCP and TLS) may take (default `5s`).
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    /// How long one gRPC call may take, answer included (default `20s`). A
    /// history long poll of `wait_for_change` lasts as long as the watch asks
    /// instead.
    #[serde(default, with = "humantime_serde")]
    pub rpc_timeout: Option<Duration>,
    /// How long a read waits for a worker to answer the tool's queries (default
    /// `5s`, at most `rpc_timeout`). A workflow whose worker does not answer in
    /// time reads as working, saying so.
    #[serde(default, with = "humantime_serde")]
    pub query_timeout: Option<Duration>,
}

/// TLS material after validation. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Tls {
    pub(crate) ca: Option<Vec<u8>>,
    pub(crate) server_name: Option<String>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.as_ref().map(Vec::len))
            .field("server_name", &self.server_name)
            .field("client", &self.client.is_some())
            .finish()
    }
}

/// Settings after validation.
#[derive(Clone)]
pub(crate) struct Validated {
    /// `http://host:port` or `https://host:port`.
    pub(crate) url: String,
    pub(crate) namespace: String,
    pub(crate) tls: Option<Tls>,
    pub(crate) api_key: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) rpc_timeout: Duration,
    pub(crate) query_timeout: Duration,
}

impl std::fmt::Debug for Validated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validated")
            .field("url", &self.url)
            .field("namespace", &self.namespace)
            .field("tls", &self.tls)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

fn read_file(key: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ConfigError::new(key, format!("cannot read {}: {e}", path.display())))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ConfigError::new(
            key,
            format!("{} is empty", path.display()),
        ));
    }
    Ok(bytes)
}

/// A Temporal namespace name: letters, digits, `-`, `_`, `.`; at most 255.
fn valid_namespace(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= 255
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl EngineSettings {
    /// Checks the settings and reads the files and secrets they point at. No
    /// network.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the offending key.
    pub(crate) fn validate(&self) -> Result<Validated, ConfigError> {
        self.validate_with(|name| std::env::var(name).ok())
    }

    /// As [`EngineSettings::validate`], reading environment variables through `env`.
    pub(crate) fn validate_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Validated, ConfigError> {
        let address = self.address.trim();
        let (host, port) = address.rsplit_once(':').ok_or_else(|| {
            ConfigError::new("address", "must be host:port, such as 127.0.0.1:7233")
        })?;
        if host.is_empty()
            || host.contains('/')
            || host.contains('@')
            || port.parse::<u16>().map_or(true, |p| p == 0)
        {
            return Err(ConfigError::new(
                "address",
                "must be host:port (no scheme or path), such as 127.0.0.1:7233",
            ));
        }
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        if !valid_namespace(&namespace) {
            return Err(ConfigError::new(
                "namespace",
                "must be a namespace name (letters, digits, - _ .; at most 255)",
            ));
        }
        let api_key = match (&self.api_key_env, &self.api_key_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "api_key_env",
                    "set only one of api_key_env and api_key_file",
                ))
            }
            (Some(name), None) => {
                let value = env(name).map(|v| v.trim().to_owned()).unwrap_or_default();
                if value.is_empty() {
                    return Err(ConfigError::new(
                        "api_key_env",
                        format!("the environment variable {name} is not set or empty"),
                    ));
                }
                Some(value)
            }
            (None, Some(path)) => {
                let bytes = read_file("api_key_file", path)?;
                Some(
                    String::from_utf8(bytes)
                        .map_err(|_| ConfigError::new("api_key_file", "is not UTF-8 text"))?
                        .trim()
                        .to_owned(),
                )
            }
            (None, None) => None,
        };
        let client = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some((
                read_file("tls_cert_file", cert)?,
                read_file("tls_key_file", key)?,
            )),
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "tls_key_file",
                    "required with tls_cert_file",
                ))
            }
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "tls_cert_file",
                    "required with tls_key_file",
                ))
            }
            (None, None) => None,
        };
        let ca = self
            .tls_ca_file
            .as_deref()
            .map(|p| read_file("tls_ca_file", p))
            .transpose()?;
        let wants_tls = ca.is_some() || client.is_some() || api_key.is_some();
        let tls_on = match self.tls {
            Some(false) if wants_tls => {
                return Err(ConfigError::new(
                    "tls",
                    "must not be false with a CA file, a client certificate or an API key (they need TLS)",
                ))
            }
            Some(on) => on,
            None => wants_tls,
        };
        if !tls_on && self.tls_server_name.is_some() {
            return Err(ConfigError::new("tls_server_name", "needs TLS"));
        }
        let tls = tls_on.then(|| Tls {
            ca,
            server_name: self.tls_server_name.clone(),
            client,
        });
        let connect_timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let rpc_timeout = self.rpc_timeout.unwrap_or(DEFAULT_RPC_TIMEOUT);
        let query_timeout = self.query_timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
        for (key, value) in [
            ("connect_timeout", connect_timeout),
            ("rpc_timeout", rpc_timeout),
            ("query_timeout", query_timeout),
        ] {
            if value < Duration::from_millis(1) || value > Duration::from_secs(600) {
                return Err(ConfigError::new(key, "must be between 1ms and 10m"));
            }
        }
        if query_timeout > rpc_timeout {
            return Err(ConfigError::new(
                "query_timeout",
                "must not be longer than rpc_timeout",
            ));
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        Ok(Validated {
            url: format!("{scheme}://{address}"),
            namespace,
            tls,
            api_key,
            connect_timeout,
            rpc_timeout,
            query_timeout,
        })
    }
}

/// How a tool's arguments become the workflow's input (`target.input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// One payload: the arguments object (the default).
    #[default]
    Object,
    /// One payload per name in `target.args`, in that order (a missing argument
    /// is `null`).
    Positional,
}

/// What cancelling a task does to its workflow (`target.cancel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CancelMode {
    /// RequestCancelWorkflowExecution: the workflow is asked to stop and may
    /// clean up (the default).
    #[default]
    Request,
    /// TerminateWorkflowExecution: the workflow stops at once, running no code.
    Terminate,
}

/// A tool's `target` on a Temporal engine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolTarget {
    /// The workflow type a tool call starts.
    pub workflow_type: String,
    /// The task queue its workers poll.
    pub task_queue: String,
    /// How the arguments become the workflow's input: `object` (default, one
    /// JSON payload) or `positional` (one payload per name in `args`).
    #[serde(default)]
    pub input: InputMode,
    /// With `input = "positional"`: the argument names, in the order of the
    /// workflow's parameters.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Memo fields set on every execution (constant values; taskgate adds its
    /// own `taskgate-input`, the hash of the arguments, which tells a retried
    /// start from a conflicting one).
    #[serde(default)]
    pub memo: BTreeMap<String, Value>,
    /// Search attributes set on every execution (constant values; each must be
    /// registered in the namespace).
    #[serde(default)]
    pub search_attributes: BTreeMap<String, Value>,
    /// The longest one run of the workflow may take (Temporal's run timeout);
    /// unset, no limit.
    #[serde(default, with = "humantime_serde")]
    pub run_timeout: Option<Duration>,
    /// The query that tells the workflow's question to a person: it answers
    /// `null` while nothing is asked, or `{"key", "message", "schema"}` (and
    /// `"approval": true` for a gate). Unset, the tool never asks.
    #[serde(default)]
    pub input_query: Option<String>,
    /// The update that carries the answer: its argument is `{"key", "action",
    /// "content"}`; its validator refuses a stale answer (a failure whose type
    /// names `stale` or `conflict`: a conflict) or an invalid one (any other
    /// failure: invalid input). Required
    /// with `input_query` unless `input_signal` is set.
    #[serde(default)]
    pub input_update: Option<String>,
    /// A signal that carries the answer instead of an update (the same
    /// argument), for workflows without an update handler. A signal cannot be
    /// refused: the answer's fate shows only in later reads.
    #[serde(default)]
    pub input_signal: Option<String>,
    /// A query that tells progress while the workflow runs: it answers
    /// `{"message", "progress", "total"}` (each optional). Unset, the message names
    /// the pending activities.
    #[serde(default)]
    pub progress_query: Option<String>,
    /// What a cancel does: `request` (default, RequestCancelWorkflowExecution)
    /// or `terminate` (TerminateWorkflowExecution).
    #[serde(default)]
    pub cancel: CancelMode,
}

/// A tool target after validation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoundTarget {
    pub(crate) workflow_type: String,
    pub(crate) task_queue: String,
    pub(crate) args: Option<Vec<String>>,
    pub(crate) memo: BTreeMap<String, Value>,
    pub(crate) search_attributes: BTreeMap<String, Value>,
    pub(crate) run_timeout: Option<Duration>,
    pub(crate) input_query: Option<String>,
    pub(crate) input_update: Option<String>,
    pub(crate) input_signal: Option<String>,
    pub(crate) progress_query: Option<String>,
    pub(crate) cancel: CancelMode,
}

/// The memo key taskgate writes on every execution it starts.
pub(crate) const INPUT_MEMO: &str = "taskgate-input";

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && !name.chars().any(char::is_control)
}

impl ToolTarget {
    /// Checks the target. Pure.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed `target.FIELD`.
    pub(crate) fn validate(&self) -> Result<BoundTarget, ConfigError> {
        for (key, value) in [
            ("target.workflow_type", Some(&self.workflow_type)),
            ("target.task_queue", Some(&self.task_queue)),
            ("target.input_query", self.input_query.as_ref()),
            ("target.input_update", self.input_update.as_ref()),
            ("target.input_signal", self.input_signal.as_ref()),
            ("target.progress_query", self.progress_query.as_ref()),
        ] {
            if let Some(v) = value {
                if !valid_name(v) {
                    return Err(ConfigError::new(
                        key,
                        "must be a non-empty name without control characters (at most 255 bytes)",
                    ));
                }
            }
        }
        let args =
            match (self.input, &self.args) {
                (InputMode::Object, None) => None,
                (InputMode::Object, Some(_)) => {
                    return Err(ConfigError::new(
                        "target.args",
                        "only with input = \"positional\"",
                    ))
                }
                (InputMode::Positional, None) => return Err(ConfigError::new(
                    "target.args",
                    "required with input = \"positional\": the argument names in parameter order",
                )),
                (InputMode::Positional, Some(names)) => {
                    if names.iter().any(String::is_empty) {
                        return Err(ConfigError::new("target.args", "names must not be empty"));
                    }
                    Some(names.clone())
                }
            };
        if self.memo.contains_key(INPUT_MEMO) {
            return Err(ConfigError::new(
                "target.memo",
                format!("{INPUT_MEMO} is taskgate's own memo field"),
            ));
        }
        if self.input_query.is_some() && self.input_update.is_none() && self.input_signal.is_none()
        {
            return Err(ConfigError::new(
                "target.input_update",
                "required with input_query (or set input_signal): how the answer reaches the workflow",
            ));
        }
        if self.input_query.is_none()
            && (self.input_update.is_some() || self.input_signal.is_some())
        {
            return Err(ConfigError::new(
                "target.input_query",
                "required with input_update or input_signal: the query that tells the question",
            ));
        }
        if self.input_update.is_some() && self.input_signal.is_some() {
            return Err(ConfigError::new(
                "target.input_signal",
                "set input_update or input_signal, not both",
            ));
        }
        if self.run_timeout.is_some_and(|t| t < Duration::from_secs(1)) {
            return Err(ConfigError::new("target.run_timeout", "at least 1s"));
        }
        Ok(BoundTarget {
            workflow_type: self.workflow_type.clone(),
            task_queue: self.task_queue.clone(),
            args,
            memo: self.memo.clone(),
            search_attributes: self.search_attributes.clone(),
            run_timeout: self.run_timeout,
            input_query: self.input_query.clone(),
            input_update: self.input_update.clone(),
            input_signal: self.input_signal.clone(),
            progress_query: self.progress_query.clone(),
            cancel: self.cancel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(v: Value) -> Result<Validated, ConfigError> {
        let s: EngineSettings = taskgate_engine::from_value(v)?;
        s.validate_with(|name| (name == "KEY").then(|| "secret-key".to_owned()))
    }

    #[test]
    fn plain_tls_and_api_key() {
        let v = settings(json!({"address": "127.0.0.1:7233"})).unwrap();
        assert_eq!(v.url, "http://127.0.0.1:7233");
        assert_eq!(v.namespace, "default");
        assert!(v.tls.is_none());
        let v = settings(json!({"address": "ns.example:7233", "namespace": "prod.x", "api_key_env": "KEY", "rpc_timeout": "9s"})).unwrap();
        assert_eq!(v.url, "https://ns.example:7233");
        assert_eq!(v.api_key.as_deref(), Some("secret-key"));
        assert!(v.tls.is_some());
        assert_eq!(v.rpc_timeout, Duration::from_secs(9));
        assert!(!format!("{v:?}").contains("secret-key"));
        let v = settings(json!({"address": "h:1", "tls": true})).unwrap();
        assert_eq!(v.url, "https://h:1");
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (v, key) in [
            (json!({"address": "127.0.0.1"}), "address"),
            (json!({"address": "http://a:7233"}), "address"),
            (json!({"address": "a:0"}), "address"),
            (json!({"address": "a:1", "namespace": "a b"}), "namespace"),
            (
                json!({"address": "a:1", "api_key_env": "NOPE"}),
                "api_key_env",
            ),
            (
                json!({"address": "a:1", "api_key_env": "KEY", "tls": false}),
                "tls",
            ),
            (
                json!({"address": "a:1", "tls_cert_file": "/x"}),
                "tls_key_file",
            ),
            (
                json!({"address": "a:1", "tls_ca_file": "/no/such/file"}),
                "tls_ca_file",
            ),
            (
                json!({"address": "a:1", "rpc_timeout": "0s"}),
                "rpc_timeout",
            ),
            (
                json!({"address": "a:1", "query_timeout": "30s", "rpc_timeout": "10s"}),
                "query_timeout",
            ),
            (
                json!({"address": "a:1", "tls_server_name": "x"}),
                "tls_server_name",
            ),
            (json!({"address": "a:1", "extra": 1}), "extra"),
        ] {
            let e = settings(v.clone()).unwrap_err();
            assert_eq!(e.key, key, "{v}: {e}");
        }
    }

    #[test]
    fn targets() {
        let t: ToolTarget = taskgate_engine::from_value(json!({
            "workflow_type": "Release", "task_queue": "q", "input": "positional",
            "args": ["version", "dry"], "input_query": "taskgate_question",
            "input_update": "taskgate_answer", "run_timeout": "1h", "cancel": "terminate"
        }))
        .unwrap();
        let b = t.validate().unwrap();
        assert_eq!(b.args, Some(vec!["version".into(), "dry".into()]));
        assert_eq!(b.cancel, CancelMode::Terminate);
        for (v, key) in [
            (
                json!({"workflow_type": "", "task_queue": "q"}),
                "target.workflow_type",
            ),
            (
                json!({"workflow_type": "w", "task_queue": "q", "input": "positional"}),
                "target.args",
            ),
            (
                json!({"workflow_type": "w", "task_queue": "q", "args": ["a"]}),
                "target.args",
            ),
            (
                json!({"workflow_type": "w", "task_queue": "q", "input_query": "q"}),
                "target.input_update",
            ),
            (
                json!({"workflow_type": "w", "task_queue": "q", "input_update": "u"}),
                "target.input_query",
            ),
            (
                json!({"workflow_type": "w", "task_queue": "q", "input_query": "q", "input_update": "u", "input_signal": "s"}),
                "target.input_signal",
            ),
            (
                json!({"workflow_type": "w", "task_queue": "q", "memo": {"taskgate-input": 1}}),
                "target.memo",
            ),
        ] {
            let t: ToolTarget = taskgate_engine::from_value(v.clone()).unwrap();
            assert_eq!(t.validate().unwrap_err().key, key, "{v}");
        }
        let e = taskgate_engine::from_value::<ToolTarget>(
            json!({"workflow_type": "w", "task_queue": "q", "nope": 1}),
        )
        .unwrap_err();
        assert_eq!(e.key, "nope");
    }
}
