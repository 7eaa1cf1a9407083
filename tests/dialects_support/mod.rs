//! Helpers of the dialect tests (`tests/dialects_*.rs`): a temporary
//! configuration whose tools are the scripts in `tests/dialect-tools/`, the real
//! `taskgate` binary serving HTTP on a loopback port, and a raw JSON-RPC client
//! for legacy sessions (2025-06-18, 2025-11-25, SEP-1391) that reads both JSON
//! and SSE answers.
//!
//! Every wait polls a condition against a deadline; nothing sleeps and hopes.

#![allow(dead_code)]

#[path = "../common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{header, sse_data, toml_str};
use serde_json::{json, Value};

// Shared helpers, re-exported for the dialect tests (each test binary uses some).
#[allow(unused_imports)]
pub use common::{alive, free_port, recorded_pid as record_pid, wait_for};

/// The variable the test configs name as their sealing key.
pub const KEY_VAR: &str = "TASKGATE_DIALECT_TEST_KEY";
/// Its value (set on the server children only).
pub const KEY_SECRET: &str = "dialect-test-key-0123456789abcdef-0123456789";
/// The SEP-1391 opt-in capability key.
pub const SEP1391: &str = "taskgate/sep-1391";
/// The related-task `_meta` key of 2025-11-25.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The absolute path of a script in `tests/dialect-tools/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/dialect-tools")
        .join(name)
}

/// Argument schema with a required `label` and an optional `steps`.
pub const WORK_SCHEMA: &str = r#"{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" }, steps = { type = "integer", minimum = 0, maximum = 600 } } }"#;
/// Argument schema with a required `label`.
pub const LABEL_SCHEMA: &str = r#"{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" } } }"#;

/// One `[[tools]]` entry.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// `async`, `hybrid` or `sync`.
    pub mode: &'static str,
    /// The script in `tests/dialect-tools/`.
    pub script: &'static str,
    /// The input schema (TOML inline table).
    pub schema: &'static str,
    /// `keep_alive`.
    pub keep_alive: &'static str,
    /// `legacy` policy, when set.
    pub legacy: Option<&'static str>,
    /// `max_wait`, when set.
    pub max_wait: Option<&'static str>,
}

impl ToolSpec {
    /// A tool with keep_alive 1h and no legacy policy or max_wait.
    pub fn new(name: &str, mode: &'static str, script: &'static str, schema: &'static str) -> Self {
        Self {
            name: name.to_owned(),
            mode,
            script,
            schema,
            keep_alive: "1h",
            legacy: None,
            max_wait: None,
        }
    }

    /// Sets `legacy`.
    pub fn legacy(mut self, policy: &'static str) -> Self {
        self.legacy = Some(policy);
        self
    }

    /// Sets `keep_alive`.
    pub fn keep_alive(mut self, keep: &'static str) -> Self {
        self.keep_alive = keep;
        self
    }

    /// Sets `max_wait`.
    pub fn max_wait(mut self, wait: &'static str) -> Self {
        self.max_wait = Some(wait);
        self
    }

    fn toml(&self) -> String {
        let mut t = format!(
            "[[tools]]\nname = \"{}\"\ndescription = \"dialect test tool {}\"\nengine = \"local\"\nmode = \"{}\"\n\
             poll_interval = \"200ms\"\nkeep_alive = \"{}\"\ninput_schema = {}\ntarget = {{ command = [{}] }}\n",
            self.name,
            self.name,
            self.mode,
            self.keep_alive,
            self.schema,
            toml_str(&script(self.script))
        );
        if let Some(p) = self.legacy {
            writeln!(t, "legacy = \"{p}\"").unwrap();
        }
        if let Some(w) = self.max_wait {
            writeln!(t, "max_wait = \"{w}\"").unwrap();
        }
        t.push('\n');
        t
    }
}

/// The tools most tests use:
/// - `work` (hybrid, `wait`): `work.sh`;
/// - `fail` (hybrid): `fail.sh`, a tool error;
/// - `ask` (async, `hide`): `ask.sh`, asks for approval;
/// - `sleeper` (async, `hide`): `sleeper.sh`, never ends by itself;
/// - `brief` (hybrid, keep_alive 2 s): `work.sh`;
/// - `quick` (sync): `work.sh`.
pub fn default_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new("work", "hybrid", "work.sh", WORK_SCHEMA),
        ToolSpec::new("fail", "hybrid", "fail.sh", LABEL_SCHEMA),
        ToolSpec::new("ask", "async", "ask.sh", LABEL_SCHEMA),
        ToolSpec::new("sleeper", "async", "sleeper.sh", r#"{ type = "object" }"#),
        ToolSpec::new("brief", "hybrid", "work.sh", WORK_SCHEMA).keep_alive("2s"),
        ToolSpec::new("quick", "sync", "work.sh", WORK_SCHEMA),
    ]
}

/// A temporary folder with a config file and the exec engine's spool.
pub struct Setup {
    /// The folder (removed on drop).
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    /// The spool folder.
    pub spool: PathBuf,
}

impl Setup {
    /// A configuration with `tools`.
    pub fn new(tools: &[ToolSpec]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("taskgate-dialects-")
            .tempdir()
            .expect("tempdir");
        let spool = dir.path().join("spool");
        let config = dir.path().join("taskgate.toml");
        let mut text = String::new();
        writeln!(
            text,
            "[server]\nlisten = \"127.0.0.1:0\"\ncall_timeout = \"10s\"\nmax_wait = \"30s\"\n\n\
             [keys]\nseal = [{{ id = \"k1\", secret_env = \"{KEY_VAR}\" }}]\n\n\
             [engines.local]\nkind = \"exec\"\nspool_dir = {}\ngrace_period = \"1s\"\n",
            toml_str(&spool)
        )
        .unwrap();
        for tool in tools {
            text.push_str(&tool.toml());
        }
        std::fs::write(&config, text).expect("write config");
        Self { dir, config, spool }
    }

    /// The run folders in the spool (hidden folders are the engine's own).
    pub fn runs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.spool) else {
            return Vec::new();
        };
        let mut runs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        runs.sort();
        runs
    }

    /// The run folders whose `meta.json` names `tool`.
    pub fn runs_of(&self, tool: &str) -> Vec<PathBuf> {
        self.runs()
            .into_iter()
            .filter(|dir| {
                std::fs::read(dir.join("meta.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .is_some_and(|m| m["tool"] == tool)
            })
            .collect()
    }
}

/// A running `taskgate serve` child on a loopback port: the shared
/// [`common::Server`] (its `base`, `url()` and `engine_calls()`).
pub struct Server {
    inner: common::Server,
}

impl Server {
    /// Starts the binary on `setup`'s config and waits (at most 20 s) until
    /// `/healthz` answers.
    pub async fn start(setup: &Setup) -> Self {
        let env = [(KEY_VAR.to_owned(), KEY_SECRET.to_owned())];
        let inner = common::Server::spawn(
            setup.dir.path(),
            &setup.config,
            &env,
            Duration::from_secs(20),
        )
        .await;
        Self { inner }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.inner.stderr_text()
    }

    /// A client for this server.
    pub fn client(&self) -> Client {
        Client::new(&self.url())
    }
}

impl Deref for Server {
    type Target = common::Server;
    fn deref(&self) -> &common::Server {
        &self.inner
    }
}

/// An HTTP answer: the status, the `Mcp-Session-Id` it set, and the JSON-RPC
/// messages it carried (one for JSON, any number for SSE, the response last).
#[derive(Debug, Clone)]
pub struct Posted {
    /// The HTTP status.
    pub status: u16,
    /// The content type.
    pub content_type: String,
    /// The `Mcp-Session-Id` header of the answer.
    pub session: Option<String>,
    /// The messages.
    pub messages: Vec<Value>,
}

impl Posted {
    /// The last message: the response.
    pub fn response(&self) -> &Value {
        self.messages
            .last()
            .unwrap_or_else(|| panic!("no message in the answer (HTTP {})", self.status))
    }

    /// The response's `result` (panics on an error).
    pub fn result(&self) -> &Value {
        let r = self.response();
        assert!(r.get("error").is_none(), "expected a result, got {r}");
        &r["result"]
    }

    /// The response's error code (panics on a result).
    pub fn code(&self) -> i64 {
        let r = self.response();
        r["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("expected an error, got {r}"))
    }

    /// The response's error message.
    pub fn message(&self) -> String {
        self.response()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// True when the answer was an SSE stream.
    pub fn is_sse(&self) -> bool {
        self.content_type.starts_with("text/event-stream")
    }
}

/// Incremental SSE reader over a response body.
pub struct SseReader {
    response: reqwest::Response,
    buffer: String,
    done: bool,
}

impl SseReader {
    /// The next JSON-RPC message, or `None` at the end of the stream.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                match sse_data(&event) {
                    Some(message) => return Some(message),
                    None => continue, // a comment or priming event
                }
            }
            if self.done {
                return None;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .unwrap_or_else(|_| {
                    panic!("no SSE event within {limit:?}; buffered: {:?}", self.buffer)
                })
                .expect("SSE body");
            match chunk {
                Some(bytes) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                None => self.done = true,
            }
        }
    }
}

/// A raw JSON-RPC client of one legacy session over Streamable HTTP.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    /// The sealed session id, once `initialize` returned one.
    pub session: Option<String>,
    /// The negotiated version, sent as `MCP-Protocol-Version`.
    pub version: Option<String>,
    /// Whether to accept SSE answers.
    pub accept_sse: bool,
    ids: Arc<AtomicU64>,
}

impl Client {
    /// A client of `url` that accepts JSON and SSE.
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
            version: None,
            accept_sse: true,
            ids: Arc::new(AtomicU64::new(1)),
        }
    }

    /// The same session, sent to another server.
    pub fn to(&self, url: &str) -> Self {
        let mut c = self.clone();
        c.url = url.to_owned();
        c
    }

    /// A fresh request id.
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    fn builder(&self, body: &Value) -> reqwest::RequestBuilder {
        let accept = if self.accept_sse {
            "application/json, text/event-stream"
        } else {
            "application/json"
        };
        let mut b = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(body.to_string());
        if let Some(s) = &self.session {
            b = b.header("mcp-session-id", s);
        }
        if let Some(v) = &self.version {
            b = b.header("mcp-protocol-version", v);
        }
        b
    }

    /// Posts `body` and reads the whole answer.
    pub async fn post(&self, body: &Value) -> Posted {
        let response = self.builder(body).send().await.expect("POST");
        let status = response.status().as_u16();
        let content_type = header(&response, "content-type").unwrap_or_default();
        let session = header(&response, "mcp-session-id");
        let messages = if content_type.starts_with("text/event-stream") {
            let mut reader = SseReader {
                response,
                buffer: String::new(),
                done: false,
            };
            let mut all = Vec::new();
            while let Some(m) = reader.next(Duration::from_secs(60)).await {
                all.push(m);
            }
            all
        } else {
            let text = response.text().await.expect("body");
            if text.trim().is_empty() {
                Vec::new()
            } else {
                vec![serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))]
            }
        };
        Posted {
            status,
            content_type,
            session,
            messages,
        }
    }

    /// Posts a request and returns the response as a stream to read step by step.
    pub async fn open_stream(&self, method: &str, params: Value) -> (u16, String, SseReader) {
        let body =
            json!({ "jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params });
        let response = self.builder(&body).send().await.expect("POST");
        let status = response.status().as_u16();
        let content_type = header(&response, "content-type").unwrap_or_default();
        (
            status,
            content_type,
            SseReader {
                response,
                buffer: String::new(),
                done: false,
            },
        )
    }

    /// Sends a request.
    pub async fn request(&self, method: &str, params: Value) -> Posted {
        self.post(
            &json!({ "jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params }),
        )
        .await
    }

    /// Sends a notification; returns the HTTP status.
    pub async fn notify(&self, method: &str, params: Value) -> u16 {
        self.post(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await
            .status
    }

    /// Answers a server request; returns the HTTP status.
    pub async fn respond(&self, id: &Value, result: Value) -> u16 {
        self.post(&json!({ "jsonrpc": "2.0", "id": id, "result": result }))
            .await
            .status
    }

    /// `initialize` with `version` and `capabilities`, then
    /// `notifications/initialized`; keeps the session id. Returns the result.
    pub async fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let answer = self
            .request(
                "initialize",
                json!({ "protocolVersion": version, "capabilities": capabilities,
                        "clientInfo": { "name": "dialect-tests", "version": "1.0.0" } }),
            )
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let result = answer.result().clone();
        self.session = Some(
            answer
                .session
                .clone()
                .expect("initialize sets Mcp-Session-Id"),
        );
        self.version = Some(
            result["protocolVersion"]
                .as_str()
                .expect("version")
                .to_owned(),
        );
        assert_eq!(
            self.notify("notifications/initialized", json!({})).await,
            202
        );
        result
    }

    /// `tools/list` → the tools.
    pub async fn tools(&self) -> Vec<Value> {
        self.request("tools/list", json!({})).await.result()["tools"]
            .as_array()
            .expect("tools")
            .clone()
    }

    /// `tools/call`.
    pub async fn call(&self, name: &str, arguments: Value) -> Posted {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
    }
}

/// Names of `tools`.
pub fn names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The tool called `name` in `tools`.
pub fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:?}"))
}

/// The text of the first content block of a CallToolResult.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A `taskgate serve --stdio` child: newline-delimited JSON-RPC.
pub struct StdioServer {
    child: Child,
    stdin: std::process::ChildStdin,
    incoming: std::sync::mpsc::Receiver<Value>,
    /// Messages read while waiting for something else.
    pub seen: Vec<Value>,
    next: u64,
}

impl StdioServer {
    /// Starts the binary on `setup`'s config.
    pub fn start(setup: &Setup) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_taskgate"))
            .args(["serve", "--stdio", "--config"])
            .arg(&setup.config)
            .env(KEY_VAR, KEY_SECRET)
            .env("TASKGATE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn taskgate --stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, incoming) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            incoming,
            seen: Vec::new(),
            next: 1,
        }
    }

    /// Writes one message.
    pub fn send(&mut self, message: &Value) {
        use std::io::Write;
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).expect("write stdin");
        self.stdin.flush().expect("flush stdin");
    }

    /// Sends a request; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next);
        self.next += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// Reads messages until the response to `id`; others are kept in `seen`.
    pub fn response(&mut self, id: &Value, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.incoming.recv_timeout(left).unwrap_or_else(|_| {
                panic!("no response to {id} within {limit:?}; seen {:?}", self.seen)
            });
            if m.get("method").is_none() && m.get("id") == Some(id) {
                return m;
            }
            self.seen.push(m);
        }
    }

    /// Sends a request and waits for its response.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response(&id, Duration::from_secs(30))
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
