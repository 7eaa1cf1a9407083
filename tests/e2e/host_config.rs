//! `taskgate host-config HOST` through the built binary: each host's output
//! parses as that host's documented format (field names and types, the
//! variable syntax it expands); a stdio entry's command, run the way the
//! host runs it (Claude Desktop: its reduced environment; Claude Code: its
//! `${VAR}` expansion), answers `initialize`; a remote entry names the
//! token's variable and never holds the token, even with the token in the
//! environment; bad names, variables and URLs are refused with exit 2 and
//! nothing on stdout.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{Setup, KEY_SECRET, KEY_VAR};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

const HOSTS: [&str; 5] = [
    "claude-desktop",
    "claude-code",
    "vscode",
    "cursor",
    "generic",
];
/// A token that must never be printed.
const TOKEN: &str = "tg-secret-token-5f1e0c9a7b";
const URL: &str = "https://taskgate.example.com/mcp";

fn host_config(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(common::bin());
    cmd.arg("host-config").args(args);
    cmd.env_remove("TASKGATE_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run taskgate host-config")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The fields each host documents for an entry, and the JSON type of each
/// ("string", "array of strings", "object of strings"); `type` values too.
struct Format {
    top: &'static str,
    stdio: &'static [(&'static str, &'static str)],
    remote: &'static [(&'static str, &'static str)],
    /// `type` of a stdio / remote entry, when the host has one.
    stdio_type: Option<&'static str>,
    remote_type: Option<&'static str>,
}

fn format(host: &str) -> Format {
    const STDIO: &[(&str, &str)] = &[("command", "string"), ("args", "strings"), ("env", "map")];
    const TYPED_STDIO: &[(&str, &str)] = &[
        ("type", "string"),
        ("command", "string"),
        ("args", "strings"),
        ("env", "map"),
    ];
    const REMOTE: &[(&str, &str)] = &[("url", "string"), ("headers", "map")];
    const TYPED_REMOTE: &[(&str, &str)] =
        &[("type", "string"), ("url", "string"), ("headers", "map")];
    match host {
        // https://modelcontextprotocol.io/docs/develop/connect-local-servers
        "claude-desktop" => Format {
            top: "mcpServers",
            stdio: STDIO,
            remote: &[],
            stdio_type: None,
            remote_type: None,
        },
        // https://code.claude.com/docs/en/mcp
        "claude-code" => Format {
            top: "mcpServers",
            stdio: TYPED_STDIO,
            remote: TYPED_REMOTE,
            stdio_type: Some("stdio"),
            remote_type: Some("http"),
        },
        // https://code.visualstudio.com/docs/copilot/reference/mcp-configuration
        "vscode" => Format {
            top: "servers",
            stdio: TYPED_STDIO,
            remote: TYPED_REMOTE,
            stdio_type: Some("stdio"),
            remote_type: Some("http"),
        },
        // https://cursor.com/docs/mcp
        "cursor" | "generic" => Format {
            top: "mcpServers",
            stdio: STDIO,
            remote: REMOTE,
            stdio_type: None,
            remote_type: None,
        },
        other => panic!("no format for {other}"),
    }
}

/// Checks `entry` against the documented fields: none other, each of its type.
fn assert_fields(host: &str, entry: &Value, fields: &[(&str, &str)], want_type: Option<&str>) {
    let obj = entry
        .as_object()
        .unwrap_or_else(|| panic!("{host}: {entry}"));
    for (k, v) in obj {
        let kind = fields
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, kind)| *kind)
            .unwrap_or_else(|| panic!("{host}: field {k:?} is not documented: {entry}"));
        let ok = match kind {
            "string" => v.is_string(),
            "strings" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "map" => v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string)),
            _ => unreachable!(),
        };
        assert!(ok, "{host}: {k} is not a {kind}: {entry}");
    }
    assert_eq!(entry["type"].as_str(), want_type, "{host}: {entry}");
}

/// Parses stdout as the host's file and returns the one entry, named `name`.
fn the_entry(host: &str, out: &Output, name: &str) -> Value {
    assert!(
        out.status.success(),
        "{host}: {:?} {}",
        out.status,
        text(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{host}: stdout is not JSON ({e}): {}", text(&out.stdout)));
    let f = format(host);
    let servers = doc[f.top]
        .as_object()
        .unwrap_or_else(|| panic!("{host}: no {:?} object: {doc}", f.top));
    assert_eq!(doc.as_object().unwrap().len(), 1, "{host}: {doc}");
    assert_eq!(servers.len(), 1, "{host}: {doc}");
    servers
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("{host}: no server {name:?}: {doc}"))
}

/// A stdio setup whose seal key comes from a file: what a host that passes
/// no variables can start.
fn setup_with_key_file() -> Setup {
    let setup = Setup::new();
    let key = setup.dir.path().join("seal.key");
    std::fs::write(&key, KEY_SECRET).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let toml = std::fs::read_to_string(&setup.config).unwrap();
    let from_env = format!("secret_env = \"{KEY_VAR}\"");
    assert!(toml.contains(&from_env), "{toml}");
    let from_file = format!("secret_file = {}", common::toml_str(&key));
    std::fs::write(&setup.config, toml.replace(&from_env, &from_file)).unwrap();
    setup
}

/// Runs a stdio entry the way a host does: its `command` and `args`, with
/// only `env` (plus HOME and PATH), sends `initialize` and returns the answer.
async fn initialize_through(entry: &Value, env: &BTreeMap<String, String>) -> Value {
    let command = entry["command"].as_str().unwrap();
    let args: Vec<&str> = entry["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in ["HOME", "PATH"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let mut child = cmd.spawn().expect("spawn the entry's command");
    let mut stdin = child.stdin.take().unwrap();
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "host-config-test", "version": "1" } } });
    stdin
        .write_all(format!("{request}\n").as_bytes())
        .await
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("an answer to initialize within 30 s");
    drop(stdin);
    let Ok(Some(line)) = line else {
        let out = child.wait_with_output().await.unwrap();
        panic!("no answer to initialize; stderr: {}", text(&out.stderr));
    };
    let _ = child.kill().await;
    serde_json::from_str(&line).expect("a JSON-RPC line")
}

fn assert_initialized(answer: &Value) {
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-06-18",
        "{answer}"
    );
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
}

/// The variable reference syntax each host documents.
fn reference(host: &str, var: &str) -> Option<String> {
    match host {
        "claude-code" => Some(format!("${{{var}}}")),
        "cursor" | "vscode" => Some(format!("${{env:{var}}}")),
        _ => None,
    }
}

#[test]
fn each_host_gets_its_documented_stdio_entry_with_absolute_paths() {
    let setup = Setup::new();
    // A relative --config, from the setup's folder: written absolute.
    for host in HOSTS {
        let out = std::process::Command::new(common::bin())
            .current_dir(setup.dir.path())
            .args(["host-config", host, "--config", "taskgate.toml"])
            .args(["--env", "AWS_PROFILE"])
            .env_remove("TASKGATE_CONFIG")
            .output()
            .unwrap();
        let entry = the_entry(host, &out, "taskgate");
        let f = format(host);
        assert_fields(host, &entry, f.stdio, f.stdio_type);

        let command = Path::new(entry["command"].as_str().unwrap());
        assert!(command.is_absolute(), "{host}: {entry}");
        let mode = std::fs::metadata(command).unwrap().permissions().mode();
        assert!(mode & 0o111 != 0, "{host}: the command is executable");
        let config = std::fs::canonicalize(&setup.config).unwrap();
        assert_eq!(
            entry["args"],
            json!(["serve", "--stdio", "--config", config.to_str().unwrap()]),
            "{host}"
        );

        // The seal key's variable (from the config) and --env, by reference
        // only, in the host's own syntax; or not at all, with a note saying so.
        let stderr = text(&out.stderr);
        for var in [KEY_VAR, "AWS_PROFILE"] {
            match reference(host, var) {
                Some(r) => assert_eq!(entry["env"][var], json!(r), "{host}: {entry}"),
                None => {
                    assert!(entry.get("env").is_none(), "{host}: {entry}");
                    assert!(
                        stderr.contains(var),
                        "{host}: the note names {var}: {stderr}"
                    );
                }
            }
        }
        assert!(!text(&out.stdout).contains(KEY_SECRET), "{host}");
    }
}

#[tokio::test]
async fn a_claude_desktop_entry_answers_initialize_in_the_environment_it_gets() {
    let setup = setup_with_key_file();
    let out = host_config(
        &[
            "claude-desktop",
            "--config",
            setup.config.to_str().unwrap(),
            "--name",
            "pipelines",
        ],
        &[],
    );
    let entry = the_entry("claude-desktop", &out, "pipelines");
    // Claude Desktop passes only its entry's env (none here), HOME and PATH.
    let answer = initialize_through(&entry, &BTreeMap::new()).await;
    assert_initialized(&answer);
}

#[tokio::test]
async fn a_claude_code_entry_passes_the_key_variable_by_reference() {
    let setup = Setup::new();
    let out = host_config(
        &["claude-code", "--config", setup.config.to_str().unwrap()],
        &[(KEY_VAR, KEY_SECRET)],
    );
    let entry = the_entry("claude-code", &out, "taskgate");
    assert!(!text(&out.stdout).contains(KEY_SECRET));
    // Claude Code expands `${VAR}` in env from its own environment.
    let host_env = BTreeMap::from([(KEY_VAR.to_owned(), KEY_SECRET.to_owned())]);
    let env: BTreeMap<String, String> = entry["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let v = v.as_str().unwrap();
            let var = v
                .strip_prefix("${")
                .and_then(|r| r.strip_suffix('}'))
                .unwrap_or_else(|| panic!("{v} is a ${{VAR}} reference"));
            (k.clone(), host_env[var].clone())
        })
        .collect();
    assert_initialized(&initialize_through(&entry, &env).await);
}

#[test]
fn remote_entries_name_the_token_variable_and_never_hold_the_token() {
    for host in HOSTS {
        let out = host_config(
            &[host, "--url", URL, "--token-env", "TASKGATE_TOKEN"],
            &[("TASKGATE_TOKEN", TOKEN)],
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(!stdout.contains(TOKEN), "{host}: {stdout}");
        assert!(!stderr.contains(TOKEN), "{host}: {stderr}");
        let f = format(host);
        if host == "claude-desktop" {
            // No file entry for a remote server: the connector's name and URL,
            // and why no token can be sent.
            assert!(out.status.success(), "{stderr}");
            assert_eq!(
                stdout,
                format!("Name: taskgate\nRemote MCP server URL: {URL}\n")
            );
            assert!(stderr.contains("Connectors"), "{stderr}");
            assert!(stderr.contains("cannot send a bearer token"), "{stderr}");
            continue;
        }
        let entry = the_entry(host, &out, "taskgate");
        assert_fields(host, &entry, f.remote, f.remote_type);
        assert_eq!(entry["url"], URL, "{host}");
        let want =
            reference(host, "TASKGATE_TOKEN").unwrap_or_else(|| "${TASKGATE_TOKEN}".to_owned());
        assert_eq!(
            entry["headers"],
            json!({ "Authorization": format!("Bearer {want}") }),
            "{host}"
        );
    }
    // Without --token-env: no header, and a note on how the host signs in.
    let out = host_config(&["vscode", "--url", URL], &[("TASKGATE_TOKEN", TOKEN)]);
    let entry = the_entry("vscode", &out, "taskgate");
    assert!(entry.get("headers").is_none(), "{entry}");
    assert!(text(&out.stderr).contains("OAuth"));
}

#[test]
fn bad_names_variables_urls_and_configs_are_refused() {
    let setup = Setup::new();
    let config = setup.config.to_str().unwrap();
    let cases: [(&[&str], &str); 10] = [
        (
            &["cursor", "--url", URL, "--token-env", "T}\"x"],
            "--token-env",
        ),
        (
            &["cursor", "--url", URL, "--token-env", "A B"],
            "--token-env",
        ),
        (
            &[
                "vscode",
                "--url",
                "https://user:pw@taskgate.example.com/mcp",
            ],
            "credential",
        ),
        (&["vscode", "--url", "file:///etc/passwd"], "http"),
        (
            &[
                "claude-code",
                "--url",
                "https://taskgate.example.com/mcp?k=${HOME}",
            ],
            "expand",
        ),
        (&["vscode", "--url", "not a url"], "--url"),
        (&["generic", "--config", config, "--name", "a\"b"], "--name"),
        (&["generic", "--config", config, "--env", "X=1"], "--env"),
        (
            &["generic", "--config", "/nonexistent/taskgate.toml"],
            "config file",
        ),
        // Both ways at once.
        (
            &["generic", "--config", config, "--url", URL],
            "cannot be used with",
        ),
    ];
    for (args, says) in cases {
        let out = host_config(args, &[]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // A config that does not parse is refused before anything is printed.
    std::fs::write(&setup.config, "[keys]\nseal = []\nbogus = 1\n").unwrap();
    let out = host_config(&["cursor", "--config", config], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("bogus"), "{}", text(&out.stderr));
}
