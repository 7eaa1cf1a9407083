//! Settings of a `kind = "github"` engine and the `target` of its tools.
//!
//! The doc comments on these structs are the user documentation of the keys.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use taskgate_engine::ConfigError;

/// The most repositories one discover looks in (one listing page).
pub(crate) const MAX_REPOS: usize = 100;

/// The public GitHub REST API.
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.github.com";

/// The workflow input that carries the run name when a dispatch cannot return the
/// run it created (see [`ToolTarget::correlation_input`]).
pub(crate) const DEFAULT_CORRELATION_INPUT: &str = "taskgate_run";

/// `[engines.NAME]` with `kind = "github"`.
///
/// Exactly one way to authenticate: `token_env`, `token_file`, or the three GitHub
/// App keys `app_id`, `private_key_file` and `installation_id` together.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Name of the environment variable holding a token (a fine-grained personal
    /// access token, or any token GitHub accepts as `Authorization: Bearer`). Read once
    /// when the server starts.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A file holding the token (surrounding whitespace is ignored). Read once when
    /// the server starts.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// GitHub App authentication: the App's id.
    #[serde(default)]
    pub app_id: Option<u64>,
    /// GitHub App authentication: the App's private key (PEM), as a file.
    #[serde(default)]
    pub private_key_file: Option<PathBuf>,
    /// GitHub App authentication: the id of the App's installation on the owner of
    /// the repositories the tools use. Installation tokens are minted on demand and
    /// renewed before they expire.
    #[serde(default)]
    pub installation_id: Option<u64>,
    /// The REST API root. Default: the public API. For GitHub Enterprise Server use
    /// `https://HOST/api/v3`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// When the remaining rate budget (`x-ratelimit-remaining`) falls below this many
    /// requests, snapshots ask clients to poll less often, spreading the remaining
    /// requests until the window resets. Default: 10% of the limit.
    #[serde(default)]
    pub low_budget: Option<u64>,
    /// How long to wait between the listings that look for a run after a dispatch
    /// that could not return it (older GitHub Enterprise Server). Default `1s`;
    /// at most 4 listings are made within the start request.
    #[serde(default, with = "humantime_serde")]
    pub lookup_delay: Option<Duration>,
    /// The repositories `taskgate discover` looks in, as `owner/repo` (at most
    /// 100). Default: the repositories the credentials can see (a token's
    /// `GET /user/repos`, an App installation's `GET /installation/repositories`),
    /// the first 100 of them. Serving tools does not use it.
    #[serde(default)]
    pub discover_repos: Vec<String>,
}

/// How a token is obtained. `Debug` shows neither the token nor the key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    /// A bearer token (personal access token, or similar).
    Token(String),
    /// A GitHub App installation.
    App {
        /// The App id.
        app_id: u64,
        /// The App's private key, PEM.
        private_key_pem: Vec<u8>,
        /// The installation id.
        installation_id: u64,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::App {
                app_id,
                installation_id,
                ..
            } => f
                .debug_struct("App")
                .field("app_id", app_id)
                .field("installation_id", installation_id)
                .field("private_key_pem", &"<redacted>")
                .finish(),
        }
    }
}

/// Settings after validation.
#[derive(Debug, Clone)]
pub(crate) struct Validated {
    /// How to authenticate.
    pub auth: Auth,
    /// The API root, without a trailing `/`.
    pub base_url: String,
    /// See [`EngineSettings::low_budget`].
    pub low_budget: Option<u64>,
    /// See [`EngineSettings::lookup_delay`].
    pub lookup_delay: Duration,
    /// See [`EngineSettings::discover_repos`]: `(owner, repo)` pairs.
    pub discover_repos: Vec<(String, String)>,
}

impl EngineSettings {
    /// Checks the settings and reads the token or key they point at. No network.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the offending key.
    pub(crate) fn validate(&self) -> Result<Validated, ConfigError> {
        self.validate_with(|name| std::env::var(name).ok())
    }

    /// As [`EngineSettings::validate`], reading environment variables through `env`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the offending key.
    pub(crate) fn validate_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Validated, ConfigError> {
        let app_keys = [
            self.app_id.is_some(),
            self.private_key_file.is_some(),
            self.installation_id.is_some(),
        ];
        let app = app_keys.iter().any(|set| *set);
        let modes = usize::from(self.token_env.is_some())
            + usize::from(self.token_file.is_some())
            + usize::from(app);
        if modes == 0 {
            return Err(ConfigError::new(
                "",
                "set one of token_env, token_file, or app_id + private_key_file + installation_id",
            ));
        }
        if modes > 1 {
            return Err(ConfigError::new(
                "",
                "set only one of token_env, token_file, or the GitHub App keys",
            ));
        }
        let auth = if let Some(name) = &self.token_env {
            let token = env(name).map(|t| t.trim().to_owned()).unwrap_or_default();
            if token.is_empty() {
                return Err(ConfigError::new(
                    "token_env",
                    format!("the environment variable {name} is not set or empty"),
                ));
            }
            Auth::Token(token)
        } else if let Some(path) = &self.token_file {
            let token = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::new("token_file", format!("cannot read {}: {e}", path.display()))
            })?;
            let token = token.trim().to_owned();
            if token.is_empty() {
                return Err(ConfigError::new(
                    "token_file",
                    format!("{} is empty", path.display()),
                ));
            }
            Auth::Token(token)
        } else {
            let (Some(app_id), Some(key), Some(installation_id)) =
                (self.app_id, &self.private_key_file, self.installation_id)
            else {
                let missing = ["app_id", "private_key_file", "installation_id"]
                    .iter()
                    .zip(app_keys)
                    .find(|(_, set)| !set)
                    .map_or("app_id", |(k, _)| *k);
                return Err(ConfigError::new(
                    missing,
                    "GitHub App authentication needs app_id, private_key_file and installation_id",
                ));
            };
            let pem = std::fs::read(key).map_err(|e| {
                ConfigError::new(
                    "private_key_file",
                    format!("cannot read {}: {e}", key.display()),
                )
            })?;
            if !String::from_utf8_lossy(&pem).contains("PRIVATE KEY") {
                return Err(ConfigError::new(
                    "private_key_file",
                    format!("{} is not a PEM private key", key.display()),
                ));
            }
            Auth::App {
                app_id,
                private_key_pem: pem,
                installation_id,
            }
        };
        let base_url = self
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/')
            .to_owned();
        let parsed: http::Uri = base_url
            .parse()
            .map_err(|e| ConfigError::new("base_url", format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
            return Err(ConfigError::new(
                "base_url",
                "must be an http(s) URL such as https://github.example.com/api/v3",
            ));
        }
        if parsed.query().is_some() {
            return Err(ConfigError::new("base_url", "must not carry a query"));
        }
        if self.low_budget == Some(0) {
            return Err(ConfigError::new("low_budget", "must be at least 1"));
        }
        let lookup_delay = self.lookup_delay.unwrap_or(Duration::from_secs(1));
        if lookup_delay > Duration::from_secs(10) {
            return Err(ConfigError::new("lookup_delay", "must be at most 10s"));
        }
        if self.discover_repos.len() > MAX_REPOS {
            return Err(ConfigError::new(
                "discover_repos",
                format!("at most {} repositories", MAX_REPOS),
            ));
        }
        let mut discover_repos = Vec::new();
        for (i, full) in self.discover_repos.iter().enumerate() {
            match full.split_once('/') {
                Some((owner, repo))
                    if is_name(owner, &[]) && owner.len() <= 39 && is_name(repo, &['.', '_']) =>
                {
                    discover_repos.push((owner.to_owned(), repo.to_owned()));
                }
                _ => {
                    return Err(ConfigError::new(
                        format!("discover_repos[{i}]"),
                        format!("{full:?} is not owner/repo"),
                    ))
                }
            }
        }
        Ok(Validated {
            auth,
            base_url,
            low_budget: self.low_budget,
            lookup_delay,
            discover_repos,
        })
    }
}

/// A tool's `target` on a GitHub engine: the workflow a call dispatches.
///
/// The tool's arguments become the dispatch `inputs`. GitHub inputs are strings:
/// strings pass as they are, numbers and booleans are written out (`3`, `true`),
/// arrays and objects as JSON text (read them with `fromJSON`), nulls are left out.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolTarget {
    /// The repository owner (user or organization).
    pub owner: String,
    /// The repository name.
    pub repo: String,
    /// The workflow: its file name (`deploy.yml`) or its numeric id.
    pub workflow: WorkflowRef,
    /// The branch or tag the workflow runs on.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The workflow input that carries the run name so a run can be found by it.
    /// Default `taskgate_run`. The workflow declares it and puts it in its
    /// `run-name` (`run-name: "deploy ${{ inputs.taskgate_run }}"`).
    #[serde(default)]
    pub correlation_input: Option<String>,
    /// When to send the correlation input: `fallback` (default) only when the server
    /// cannot return the run it created (older GitHub Enterprise Server); `always`
    /// on every dispatch, so that retried starts with a client token find the run
    /// they already made (the workflow must declare the input).
    #[serde(default)]
    pub correlate: Correlate,
    /// Turns a run waiting on a protected environment into a question to the client
    /// (approve or reject the deployment). Without it such a run simply reports that
    /// it waits for a reviewer on GitHub. The question is an approval, given with
    /// taskgate's token: the tool's `answer_access` says who may give it, and its
    /// `four_eyes` keeps the caller who started the run from giving it.
    #[serde(default)]
    pub environment_approval: Option<ApprovalSettings>,
    /// The workflow input that receives the W3C `traceparent` the run was
    /// started under (`trace_input = "traceparent"`), so the workflow's steps
    /// can continue the trace (`TRACEPARENT: ${{ inputs.traceparent }}`). Unset
    /// (the default): no trace input is sent, since GitHub refuses inputs a
    /// workflow does not declare. The workflow declares it (optional, type
    /// string; `taskgate check-config` refuses a workflow without it); it is
    /// not an argument of the tool, and a call without a trace context leaves
    /// it out. It counts toward GitHub's 25 inputs.
    #[serde(default)]
    pub trace_input: Option<String>,
}

/// A workflow, by file name or numeric id.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum WorkflowRef {
    /// A numeric workflow id.
    Id(u64),
    /// A file name under `.github/workflows/` (or a numeric id written as text).
    Name(String),
}

impl std::fmt::Display for WorkflowRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Id(id) => write!(f, "{id}"),
            Self::Name(name) => f.write_str(name),
        }
    }
}

/// When to send the correlation input. See [`ToolTarget::correlate`].
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Correlate {
    /// Only in the fallback dispatch.
    #[default]
    Fallback,
    /// On every dispatch.
    Always,
}

/// `environment_approval` of a target.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSettings {
    /// The question shown to the person. `{environment}` is replaced by the
    /// environment's name. Default: `Approve deployment to {environment}?`.
    #[serde(default)]
    pub message: Option<String>,
    /// The JSON Schema of the answer (a flat object). Default: an optional
    /// `comment` string. An answer with `approve: false` rejects like a decline; a
    /// `comment` string becomes the review comment on GitHub.
    #[serde(default)]
    pub schema: Option<Value>,
}

/// A target after validation.
#[derive(Debug, Clone)]
pub(crate) struct BoundTarget {
    /// Owner.
    pub owner: String,
    /// Repository.
    pub repo: String,
    /// Workflow file name or id, as it goes in a path.
    pub workflow: String,
    /// Branch or tag.
    pub git_ref: String,
    /// The correlation input name.
    pub correlation_input: String,
    /// When to send it.
    pub correlate: Correlate,
    /// Approval settings, when the human step is on.
    pub approval: Option<ApprovalSettings>,
    /// The trace input's name, when the tool declares one.
    pub trace_input: Option<String>,
}

fn is_name(s: &str, extra: &[char]) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || extra.contains(&c))
        && s != "."
        && s != ".."
}

impl ToolTarget {
    /// Checks the target. Pure.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed `target.FIELD`.
    pub(crate) fn validate(self) -> Result<BoundTarget, ConfigError> {
        if !is_name(&self.owner, &[]) || self.owner.len() > 39 {
            return Err(ConfigError::new(
                "target.owner",
                "must be a GitHub user or organization name",
            ));
        }
        if !is_name(&self.repo, &['.', '_']) {
            return Err(ConfigError::new(
                "target.repo",
                "must be a repository name (letters, digits, '.', '-', '_')",
            ));
        }
        let workflow = match &self.workflow {
            WorkflowRef::Id(id) => id.to_string(),
            WorkflowRef::Name(name) => {
                let numeric = !name.is_empty() && name.chars().all(|c| c.is_ascii_digit());
                let file = is_name(name, &['.', '_'])
                    && (name.ends_with(".yml") || name.ends_with(".yaml"));
                if !numeric && !file {
                    return Err(ConfigError::new(
                        "target.workflow",
                        "must be a workflow file name ending in .yml or .yaml, or a workflow id",
                    ));
                }
                name.clone()
            }
        };
        if self.git_ref.trim().is_empty() || self.git_ref.chars().any(char::is_control) {
            return Err(ConfigError::new(
                "target.ref",
                "must be a branch or tag name",
            ));
        }
        let correlation_input = self
            .correlation_input
            .unwrap_or_else(|| DEFAULT_CORRELATION_INPUT.to_owned());
        if !is_name(&correlation_input, &['_']) {
            return Err(ConfigError::new(
                "target.correlation_input",
                "must be an input name (letters, digits, '-', '_')",
            ));
        }
        if let Some(trace) = &self.trace_input {
            if !is_name(trace, &['_']) {
                return Err(ConfigError::new(
                    "target.trace_input",
                    "must be an input name (letters, digits, '-', '_')",
                ));
            }
            if *trace == correlation_input {
                return Err(ConfigError::new(
                    "target.trace_input",
                    "must differ from the correlation input",
                ));
            }
        }
        if let Some(approval) = &self.environment_approval {
            if let Some(schema) = &approval.schema {
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(ConfigError::new(
                        "target.environment_approval.schema",
                        "must be a JSON Schema of type object",
                    ));
                }
            }
        }
        Ok(BoundTarget {
            owner: self.owner,
            repo: self.repo,
            workflow,
            git_ref: self.git_ref,
            correlation_input,
            correlate: self.correlate,
            approval: self.environment_approval,
            trace_input: self.trace_input,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Item 10 of the security issue: `Debug` prints neither the token nor the
    /// App's private key.
    #[test]
    fn debug_never_shows_the_token_or_key() {
        let token = Auth::Token("ghp_0123456789abcdefSECRET".into());
        let app = Auth::App {
            app_id: 7,
            private_key_pem: b"-----BEGIN PRIVATE KEY-----\nSECRETKEY\n".to_vec(),
            installation_id: 9,
        };
        for (auth, secret) in [(&token, "ghp_0123"), (&app, "SECRETKEY")] {
            let text = format!("{auth:?} {auth:#?}");
            assert!(!text.contains(secret), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
        // Nor does the validated engine configuration holding it.
        let v = settings(json!({"token_env": "GH_TOKEN"})).unwrap();
        assert!(!format!("{v:?}").contains("ghp_x"), "{v:?}");
        // The private key bytes would otherwise print as numbers.
        assert!(!format!("{app:?}").contains("45, 45"), "{app:?}");
    }

    fn settings(v: Value) -> Result<Validated, ConfigError> {
        taskgate_engine::from_value::<EngineSettings>(v)?
            .validate_with(|n| (n == "GH_TOKEN").then(|| "ghp_x".to_owned()))
    }

    #[test]
    fn one_auth_mode_is_required() {
        assert_eq!(settings(json!({})).unwrap_err().key, "");
        let err = settings(json!({"token_env": "GH_TOKEN", "app_id": 1})).unwrap_err();
        assert!(err.message.contains("only one"), "{err}");
        let ok = settings(json!({"token_env": "GH_TOKEN"})).unwrap();
        assert_eq!(ok.auth, Auth::Token("ghp_x".into()));
        assert_eq!(ok.base_url, DEFAULT_BASE_URL);
        assert_eq!(
            settings(json!({"token_env": "NOPE"})).unwrap_err().key,
            "token_env"
        );
        assert_eq!(
            settings(json!({"app_id": 1, "installation_id": 2}))
                .unwrap_err()
                .key,
            "private_key_file"
        );
    }

    #[test]
    fn unknown_keys_and_bad_urls_are_named() {
        assert_eq!(
            settings(json!({"token_env": "GH_TOKEN", "tokn": 1}))
                .unwrap_err()
                .key,
            "tokn"
        );
        assert_eq!(
            settings(json!({"token_env": "GH_TOKEN", "base_url": "ftp://x"}))
                .unwrap_err()
                .key,
            "base_url"
        );
        let ghes =
            settings(json!({"token_env": "GH_TOKEN", "base_url": "https://ghe.example/api/v3/"}))
                .unwrap();
        assert_eq!(ghes.base_url, "https://ghe.example/api/v3");
    }

    fn target(v: Value) -> Result<BoundTarget, ConfigError> {
        taskgate_engine::from_value::<ToolTarget>(v)
            .map_err(|e| e.within("target"))?
            .validate()
    }

    #[test]
    fn the_example_target_validates() {
        // tools[0].target of config.example.toml.snippet, as JSON.
        let t = target(json!({"owner": "octo-org", "repo": "octo-repo", "workflow": "deploy.yml", "ref": "main", "correlate": "always", "environment_approval": {"message": "Approve deployment to {environment}?", "schema": {"type": "object", "properties": {"comment": {"type": "string", "description": "Review comment"}}}}}))
            .unwrap();
        assert_eq!(t.correlate, Correlate::Always);
        assert!(t.approval.is_some());
    }

    #[test]
    fn targets_are_checked() {
        let t = target(json!({"owner": "octo-org", "repo": "octo.repo", "workflow": "deploy.yml", "ref": "main"}))
            .unwrap();
        assert_eq!(t.workflow, "deploy.yml");
        assert_eq!(t.correlation_input, DEFAULT_CORRELATION_INPUT);
        assert_eq!(t.correlate, Correlate::Fallback);
        let t = target(json!({"owner": "o", "repo": "r", "workflow": 161335, "ref": "v1", "correlate": "always"}))
            .unwrap();
        assert_eq!(t.workflow, "161335");
        assert_eq!(t.correlate, Correlate::Always);
        for (bad, key) in [
            (
                json!({"owner": "o/x", "repo": "r", "workflow": "a.yml", "ref": "m"}),
                "target.owner",
            ),
            (
                json!({"owner": "o", "repo": "..", "workflow": "a.yml", "ref": "m"}),
                "target.repo",
            ),
            (
                json!({"owner": "o", "repo": "r", "workflow": "../a", "ref": "m"}),
                "target.workflow",
            ),
            (
                json!({"owner": "o", "repo": "r", "workflow": "a.yml", "ref": " "}),
                "target.ref",
            ),
            (
                json!({"owner": "o", "repo": "r", "workflow": "a.yml", "ref": "m", "x": 1}),
                "target.x",
            ),
            (
                json!({"owner": "o", "repo": "r", "workflow": "a.yml", "ref": "m", "environment_approval": {"schema": {"type": "string"}}}),
                "target.environment_approval.schema",
            ),
        ] {
            assert_eq!(target(bad).unwrap_err().key, key);
        }
    }
}
