//! `taskgate host-config HOST`: the entry an AI host needs to use taskgate,
//! in that host's own configuration format, on stdout (JSON only, so it can
//! be redirected to a file); where to put it and what the host cannot do go
//! to stderr.
//!
//! Two ways in:
//!
//! - **stdio** (`--config FILE`, the default `taskgate.toml`): the host spawns
//!   this binary as `taskgate serve --stdio --config FILE`, both paths
//!   absolute. The config file is parsed first (no engine is built or
//!   called); the environment variables it names for secrets (`[keys]`
//!   `secret_env`, an engine's `*_env` keys) and those given with `--env`
//!   are passed on *by reference*, in the host's own variable syntax, for
//!   hosts that expand variables in `env`; a host that does not is told so.
//! - **remote** (`--url URL`): a running server's MCP endpoint. With
//!   `--token-env VAR` the entry sends `Authorization: Bearer …` with the
//!   value the host reads from `VAR` when it connects. The token itself is
//!   never read, let alone printed.
//!
//! Each host's format is the one its documentation gives (the URL is cited
//! beside each one below); the tests in `tests/e2e/host_config.rs` parse the
//! output against those field names and types.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::collections::BTreeMap;

/// The AI hosts `host-config` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Host {
    /// Claude Desktop (`claude_desktop_config.json`, `mcpServers`).
    ClaudeDesktop,
    /// Claude Code (`.mcp.json`, `mcpServers`).
    ClaudeCode,
    /// VS Code (`.vscode/mcp.json` or the user `mcp.json`, `servers`).
    Vscode,
    /// Cursor (`~/.cursor/mcp.json` or `.cursor/mcp.json`, `mcpServers`).
    Cursor,
    /// The `mcpServers` object many other hosts read.
    Generic,
}

/// `taskgate host-config`.
#[derive(Debug, Clone, clap::Args)]
pub struct HostConfigArgs {
    /// The host to write the entry for.
    #[arg(value_enum)]
    pub host: Host,
    /// stdio: the config file the host's `taskgate serve --stdio` reads
    /// (default `taskgate.toml`); written as an absolute path.
    #[arg(long, short, value_name = "FILE", conflicts_with = "url")]
    pub config: Option<PathBuf>,
    /// stdio: one more environment variable the server needs from the host
    /// (an engine's cloud credentials, say); repeatable. Passed by name,
    /// never by value.
    #[arg(long = "env", value_name = "VAR", conflicts_with = "url")]
    pub env: Vec<String>,
    /// remote: the MCP endpoint of a running taskgate (https://…/mcp).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// remote: the environment variable, on the host's side, holding the
    /// bearer token; the entry refers to it and never holds the token.
    #[arg(long, value_name = "VAR", requires = "url")]
    pub token_env: Option<String>,
    /// The server's name in the host's list (letters, digits, `_`, `-`;
    /// starting with a letter).
    #[arg(long, value_name = "NAME", default_value = "taskgate")]
    pub name: String,
}

/// Why no entry could be written.
#[derive(Debug, thiserror::Error)]
pub enum HostConfigError {
    /// A name that is not `[A-Za-z][A-Za-z0-9_-]*`.
    #[error("--name {0:?}: use letters, digits, '_' and '-', starting with a letter")]
    Name(String),
    /// An environment variable name a host could not expand safely.
    #[error("{what} {name:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")]
    VarName {
        /// Where the name came from.
        what: String,
        /// The name.
        name: String,
    },
    /// A `--url` that is not an absolute http(s) URL.
    #[error("--url {url:?}: {why}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The config file cannot be found.
    #[error("the config file {path}: {source}")]
    ConfigPath {
        /// The path as given.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The config file does not parse.
    #[error("{0}")]
    Config(String),
    /// This binary's own path cannot be found.
    #[error("cannot find this program's own path: {0}")]
    OwnPath(#[source] std::io::Error),
    /// A path a host cannot be given in JSON.
    #[error("the path {0} is not UTF-8; a host's JSON configuration cannot name it")]
    NotUtf8(String),
}

/// How the host reaches taskgate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Server {
    /// The host spawns `command serve --stdio --config config`, passing the
    /// named environment variables on.
    Stdio {
        /// The taskgate binary, absolute.
        command: String,
        /// The config file, absolute.
        config: String,
        /// Variables the server needs, each with where it was named.
        env: Vec<(String, String)>,
    },
    /// The host connects to a running server.
    Remote {
        /// The MCP endpoint.
        url: String,
        /// The variable holding the bearer token, if any.
        token_env: Option<String>,
    },
}

/// What `host-config` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// stdout: the JSON document (or, where the host has no file for it,
    /// the text to type into its settings).
    pub out: String,
    /// stderr: where to put it, and what the host cannot do.
    pub notes: Vec<String>,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && name.len() <= 64
}

fn valid_var(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 128
}

fn check_var(what: &str, name: &str) -> Result<(), HostConfigError> {
    if valid_var(name) {
        Ok(())
    } else {
        Err(HostConfigError::VarName {
            what: what.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// Checks a `--url`: absolute http(s), no user name or password in it (a
/// credential in the host's file), no `${` (which hosts would expand), no
/// fragment.
fn check_url(url: &str) -> Result<String, HostConfigError> {
    let bad = |why: &str| HostConfigError::Url {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("use an http:// or https:// URL"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "a user name or password in the URL would put a credential in the host's file; \
             use --token-env",
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("the URL names no host"));
    }
    if url.contains("${") {
        return Err(bad(
            "hosts expand ${...} in a URL: it could send one of their environment variables \
             to the server",
        ));
    }
    if parsed.fragment().is_some() {
        return Err(bad("a URL fragment is never sent to a server"));
    }
    Ok(url.to_owned())
}

fn utf8(path: &Path) -> Result<String, HostConfigError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| HostConfigError::NotUtf8(path.display().to_string()))
}

/// The environment variables a config names for secrets: each seal key's
/// `secret_env`, and every engine's top-level `*_env` key with a text value
/// (`token_env`, `password_env`, `api_key_env`, …), each with its key path.
fn named_vars(cfg: &taskgate::core::config::FileConfig) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for (i, key) in cfg.keys.seal.iter().enumerate() {
        if let Some(var) = &key.secret_env {
            vars.push((var.clone(), format!("keys.seal[{i}].secret_env")));
        }
    }
    for (engine, table) in &cfg.engines {
        if let Some(table) = table.as_object() {
            for (k, v) in table {
                if let (true, Some(var)) = (k.ends_with("_env"), v.as_str()) {
                    vars.push((var.to_owned(), format!("engines.{engine}.{k}")));
                }
            }
        }
    }
    vars
}

/// Resolves the arguments into a [`Server`]: paths made absolute, the config
/// parsed (nothing built, no engine called), every name checked.
///
/// # Errors
///
/// A [`HostConfigError`] saying which argument is wrong.
pub fn resolve(args: &HostConfigArgs) -> Result<Server, HostConfigError> {
    if !valid_name(&args.name) {
        return Err(HostConfigError::Name(args.name.clone()));
    }
    if let Some(url) = &args.url {
        if let Some(var) = &args.token_env {
            check_var("--token-env", var)?;
        }
        return Ok(Server::Remote {
            url: check_url(url)?,
            token_env: args.token_env.clone(),
        });
    }
    let given = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from("taskgate.toml"));
    let config = std::fs::canonicalize(&given).map_err(|source| HostConfigError::ConfigPath {
        path: given.display().to_string(),
        source,
    })?;
    let cfg = taskgate::core::config::load(&config)
        .map_err(|e| HostConfigError::Config(e.lines().join("; ")))?;
    let mut env: Vec<(String, String)> = Vec::new();
    for (var, from) in named_vars(&cfg)
        .into_iter()
        .chain(args.env.iter().map(|v| (v.clone(), "--env".to_owned())))
    {
        check_var(&from, &var)?;
        if !env.iter().any(|(v, _)| *v == var) {
            env.push((var, from));
        }
    }
    let command = std::env::current_exe().map_err(HostConfigError::OwnPath)?;
    Ok(Server::Stdio {
        command: utf8(&command)?,
        config: utf8(&config)?,
        env,
    })
}

/// How a host writes "the value of environment variable VAR", if it expands
/// variables at all.
fn reference(host: Host, var: &str) -> Option<String> {
    match host {
        // Claude Code: `${VAR}` (and `${VAR:-default}`) in command, args,
        // env, url and headers (https://code.claude.com/docs/en/mcp,
        // "Environment variable expansion in .mcp.json").
        Host::ClaudeCode => Some(format!("${{{var}}}")),
        // Cursor: `${env:NAME}` in command, args, env, url and headers
        // (https://cursor.com/docs/mcp).
        Host::Cursor => Some(format!("${{env:{var}}}")),
        // VS Code: mcp.json takes VS Code's variables
        // (https://code.visualstudio.com/docs/copilot/reference/mcp-configuration),
        // whose form for an environment variable is `${env:Name}`
        // (https://code.visualstudio.com/docs/reference/variables-reference#_environment-variables).
        // (Its page suggests `${input:…}` prompts for secrets; an input would
        // be typed into VS Code, not read from the environment.)
        Host::Vscode => Some(format!("${{env:{var}}}")),
        // Claude Desktop documents no expansion in claude_desktop_config.json
        // (https://modelcontextprotocol.io/docs/develop/connect-local-servers):
        // `env` values are taken literally.
        Host::ClaudeDesktop => None,
        // Hosts differ; nothing is assumed.
        Host::Generic => None,
    }
}

/// Where the entry goes, for each host.
fn placement(host: Host, name: &str) -> String {
    match host {
        Host::ClaudeDesktop => format!(
            "merge \"{name}\" into \"mcpServers\" of claude_desktop_config.json (Settings > \
             Developer > Edit Config; macOS: ~/Library/Application Support/Claude/, Windows: \
             %APPDATA%\\Claude\\), then restart Claude Desktop"
        ),
        Host::ClaudeCode => format!(
            "merge \"{name}\" into \"mcpServers\" of .mcp.json at the project root (shared \
             with the project), or pass the entry to `claude mcp add-json {name} '<entry>'`"
        ),
        Host::Vscode => format!(
            "merge \"{name}\" into \"servers\" of .vscode/mcp.json (this workspace) or of the \
             user mcp.json (command \"MCP: Open User Configuration\")"
        ),
        Host::Cursor => format!(
            "merge \"{name}\" into \"mcpServers\" of ~/.cursor/mcp.json (every project) or \
             .cursor/mcp.json (this project)"
        ),
        Host::Generic => format!(
            "merge \"{name}\" into your host's \"mcpServers\"; check its documentation for how \
             it passes environment variables and headers"
        ),
    }
}

/// One server entry, its fields in the order the hosts' documentation shows
/// them (a struct, as `serde_json`'s maps here sort their keys).
#[derive(Debug, Default, serde::Serialize)]
struct Entry<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<[&'a str; 4]>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<&'a str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<&'static str, String>,
}

/// The entry for `host` (pure: the tests and the command share it).
#[must_use]
pub fn render(host: Host, name: &str, server: &Server) -> Rendered {
    let mut notes = Vec::new();
    let entry = match server {
        Server::Stdio {
            command,
            config,
            env,
        } => {
            // Claude Desktop: command, args, env
            // (https://modelcontextprotocol.io/docs/develop/connect-local-servers).
            // Claude Code: type "stdio", command, args, env
            // (https://code.claude.com/docs/en/mcp).
            // VS Code: type "stdio", command, args, env, envFile
            // (https://code.visualstudio.com/docs/copilot/reference/mcp-configuration).
            // Cursor: command, args, env (https://cursor.com/docs/mcp).
            let entry = Entry {
                kind: matches!(host, Host::ClaudeCode | Host::Vscode).then_some("stdio"),
                command: Some(command),
                args: Some(["serve", "--stdio", "--config", config]),
                env: env
                    .iter()
                    .filter_map(|(var, _)| reference(host, var).map(|r| (var.as_str(), r)))
                    .collect(),
                ..Entry::default()
            };
            let expands = reference(host, "VAR").is_some();
            if !expands && !env.is_empty() {
                let list: Vec<String> = env
                    .iter()
                    .map(|(v, from)| format!("{v} ({from})"))
                    .collect();
                notes.push(match host {
                    Host::ClaudeDesktop => format!(
                        "Claude Desktop expands no variables in its config and starts servers \
                         with a reduced environment, so these may not reach taskgate: {}. Name \
                         secrets with files instead (a key's secret_file, an engine's *_file), or \
                         put them in the entry's \"env\" yourself, knowing the file then holds them",
                        list.join(", ")
                    ),
                    _ => format!(
                        "taskgate needs these environment variables from the host: {}; the \
                         entry passes none, as hosts write variable references differently",
                        list.join(", ")
                    ),
                });
            }
            entry
        }
        Server::Remote { url, token_env } => {
            if host == Host::ClaudeDesktop {
                // Claude Desktop reaches remote servers only as custom
                // connectors, added in Settings > Connectors and called from
                // Anthropic's cloud, authenticated by OAuth or not at all
                // (https://support.claude.com/en/articles/11175166-getting-started-with-custom-connectors-using-remote-mcp,
                // https://modelcontextprotocol.io/docs/develop/connect-remote-servers).
                notes.push(
                    "Claude Desktop's config file starts local (stdio) servers only. Add a remote \
                     taskgate in Settings > Connectors > Add custom connector with the name and \
                     URL above; Claude connects to it from Anthropic's cloud, so the URL must be \
                     reachable from the internet, and it signs in with OAuth (taskgate's \
                     [auth.oauth]) or not at all"
                        .to_owned(),
                );
                if let Some(var) = token_env {
                    notes.push(format!(
                        "Claude Desktop cannot send a bearer token from an environment variable \
                         (--token-env {var} is not used): use OAuth, or a stdio entry \
                         (`taskgate host-config claude-desktop --config FILE`)"
                    ));
                }
                return Rendered {
                    out: format!("Name: {name}\nRemote MCP server URL: {url}\n"),
                    notes,
                };
            }
            // Claude Code: type "http", url, headers
            // (https://code.claude.com/docs/en/mcp). VS Code: type "http",
            // url, headers
            // (https://code.visualstudio.com/docs/copilot/reference/mcp-configuration).
            // Cursor: url, headers (https://cursor.com/docs/mcp).
            let mut entry = Entry {
                kind: matches!(host, Host::ClaudeCode | Host::Vscode).then_some("http"),
                url: Some(url),
                ..Entry::default()
            };
            match token_env {
                Some(var) => {
                    let value = match reference(host, var) {
                        Some(r) => r,
                        None => {
                            notes.push(format!(
                                "\"${{{var}}}\" is the common way to name a variable in a header; \
                                 check that your host expands it (one that does not sends the \
                                 text itself, and taskgate refuses it)"
                            ));
                            format!("${{{var}}}")
                        }
                    };
                    entry
                        .headers
                        .insert("Authorization", format!("Bearer {value}"));
                    notes.push(format!(
                        "set {var} in the environment the host starts from; the entry holds \
                         only its name"
                    ));
                }
                None => notes.push(
                    "no Authorization header (--token-env VAR adds one): the host signs in with \
                     OAuth when the server has [auth.oauth]; without [auth], taskgate serves \
                     loopback callers only"
                        .to_owned(),
                ),
            }
            if super::plain_http_off_host(url) {
                notes.push(format!(
                    "{url} is plain http:// to another host: the token would cross the network \
                     readable; use https://"
                ));
            }
            entry
        }
    };
    let top = if host == Host::Vscode {
        "servers"
    } else {
        "mcpServers"
    };
    let doc = BTreeMap::from([(top, BTreeMap::from([(name, entry)]))]);
    notes.insert(0, placement(host, name));
    Rendered {
        out: format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).expect("an entry serializes")
        ),
        notes,
    }
}

/// Runs `taskgate host-config`: the entry on stdout, notes on stderr; exit 2
/// when an argument is refused.
pub fn run(args: &HostConfigArgs) -> ExitCode {
    let server = match resolve(args) {
        Ok(s) => s,
        Err(e) => {
            tell!("taskgate: host-config: {e}");
            return ExitCode::from(2);
        }
    };
    let rendered = render(args.host, &args.name, &server);
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout();
        let _ = write!(stdout, "{}", rendered.out);
        let _ = stdout.flush();
    }
    for note in &rendered.notes {
        tell!("note: {note}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn stdio() -> Server {
        Server::Stdio {
            command: "/opt/taskgate/bin/taskgate".into(),
            config: "/etc/taskgate/taskgate.toml".into(),
            env: vec![("TASKGATE_SEAL_KEY".into(), "keys.seal[0].secret_env".into())],
        }
    }

    fn entry(host: Host, server: &Server) -> Value {
        let out: Value = serde_json::from_str(&render(host, "taskgate", server).out).unwrap();
        let top = if host == Host::Vscode {
            "servers"
        } else {
            "mcpServers"
        };
        out[top]["taskgate"].clone()
    }

    #[test]
    fn each_host_refers_to_a_variable_in_its_own_syntax() {
        let cases = [
            (Host::ClaudeCode, Some("${TASKGATE_SEAL_KEY}")),
            (Host::Cursor, Some("${env:TASKGATE_SEAL_KEY}")),
            (Host::Vscode, Some("${env:TASKGATE_SEAL_KEY}")),
            (Host::ClaudeDesktop, None),
            (Host::Generic, None),
        ];
        for (host, want) in cases {
            let e = entry(host, &stdio());
            assert_eq!(
                e["env"]["TASKGATE_SEAL_KEY"].as_str(),
                want,
                "{host:?}: {e}"
            );
        }
        let notes = render(Host::ClaudeDesktop, "taskgate", &stdio()).notes;
        assert!(
            notes.iter().any(|n| n.contains("TASKGATE_SEAL_KEY")),
            "{notes:?}"
        );
    }

    #[test]
    fn names_and_variables_that_could_break_out_are_refused() {
        for bad in ["", "1abc", "a b", "a}${HOME", "ключ", "a=b"] {
            assert!(!valid_var(bad), "{bad}");
        }
        for good in ["TOKEN", "_T1", "taskgate_token"] {
            assert!(valid_var(good), "{good}");
        }
        for bad in ["", "-x", "a b", "a\"b", "9"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn urls_with_credentials_or_other_schemes_are_refused() {
        for bad in [
            "https://user:secret@tg.example.com/mcp",
            "https://user@tg.example.com/mcp",
            "file:///etc/passwd",
            "tg.example.com/mcp",
            "https://tg.example.com/mcp#x",
            "https://tg.example.com/mcp?t=${GITHUB_TOKEN}",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert!(check_url("https://tg.example.com/mcp").is_ok());
    }
}
