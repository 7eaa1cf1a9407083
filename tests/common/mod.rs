//! Shared helpers of the integration tests: a temporary configuration whose
//! tools are the scripts in `tests/tools/`, the real `taskgate` binary on a free
//! loopback port (or on stdio), and a raw JSON-RPC client that speaks the
//! 2026-07-28 dialect.
//!
//! Every wait is a condition polled against a deadline; nothing sleeps and hopes.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The environment variable the test configs name as their sealing key.
pub const KEY_VAR: &str = "TASKGATE_TEST_KEY_K1";
/// Its value (set on the server child only, never in the test process).
pub const KEY_SECRET: &str = "integration-test-key-0123456789abcdef-xyz";
/// The 2026-07-28 protocol version.
pub const MODERN: &str = "2026-07-28";
/// The tasks extension id.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The taskgate binary cargo built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_taskgate"))
}

/// The absolute path of a script in `tests/tools/`.
pub fn tool_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tools")
        .join(name)
}

/// A bearer token: the caller it names, the variable that holds it, its value.
#[derive(Debug, Clone)]
pub struct Bearer {
    /// The caller.
    pub caller: String,
    /// The environment variable (set on the server child).
    pub var: String,
    /// The token.
    pub token: String,
}

impl Bearer {
    /// A token for `caller`, held in `TASKGATE_TEST_TOKEN_<CALLER>`.
    pub fn new(caller: &str) -> Self {
        Self {
            caller: caller.to_owned(),
            var: format!("TASKGATE_TEST_TOKEN_{}", caller.to_ascii_uppercase()),
            token: format!("token-of-{caller}-0123456789"),
        }
    }
}

/// What goes into a test configuration besides the defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `[auth] bearer` entries.
    pub bearer: Vec<Bearer>,
    /// `server.max_body_bytes` (default 65536).
    pub max_body_bytes: Option<usize>,
    /// `server.max_wait` (default "30s").
    pub max_wait: Option<&'static str>,
    /// Extra TOML appended as is (more `[[tools]]`).
    pub extra: String,
}

/// A temporary folder holding a config file and the exec engine's spool.
pub struct Setup {
    /// The folder (removed on drop).
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    /// The exec engine's spool folder.
    pub spool: PathBuf,
    /// The options it was written with.
    pub options: Options,
}

/// The default tools, by name:
/// - `work` (hybrid): `work.sh`, arguments `label` (required) and `seconds`;
/// - `fail` (hybrid): `fail.sh`, exits 3;
/// - `ask` (async only): `ask.sh`, asks for approval;
/// - `sleeper` (async only): `sleeper.sh`, never ends by itself;
/// - `brief` (hybrid, keep_alive 1 s): `work.sh`.
pub const TOOL_NAMES: &[&str] = &["work", "fail", "ask", "sleeper", "brief"];

const LABEL_SCHEMA: &str =
    r#"label = { type = "string", pattern = "^[A-Za-z0-9_-]+$", minLength = 1 }"#;

impl Setup {
    /// Writes the default configuration.
    pub fn new() -> Self {
        Self::with(Options::default())
    }

    /// Writes a configuration with `options`.
    pub fn with(options: Options) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("taskgate-it-")
            .tempdir()
            .expect("tempdir");
        let spool = dir.path().join("spool");
        let config = dir.path().join("taskgate.toml");
        let mut text = String::new();
        writeln!(
            text,
            "[server]\nlisten = \"127.0.0.1:0\"\nmax_body_bytes = {}\ncall_timeout = \"10s\"\nmax_wait = \"{}\"\n",
            options.max_body_bytes.unwrap_or(65536),
            options.max_wait.unwrap_or("30s"),
        )
        .unwrap();
        writeln!(
            text,
            "[keys]\nseal = [{{ id = \"k1\", secret_env = \"{KEY_VAR}\" }}]\n"
        )
        .unwrap();
        if !options.bearer.is_empty() {
            let entries: Vec<String> = options
                .bearer
                .iter()
                .map(|b| format!("{{ caller = \"{}\", token_env = \"{}\" }}", b.caller, b.var))
                .collect();
            writeln!(text, "[auth]\nbearer = [{}]\n", entries.join(", ")).unwrap();
        }
        writeln!(
            text,
            "[engines.local]\nkind = \"exec\"\nspool_dir = {}\ngrace_period = \"1s\"\n",
            toml_str(&spool)
        )
        .unwrap();
        let tool = |name: &str, mode: &str, keep: &str, script: &str, schema: &str| {
            format!(
                "[[tools]]\nname = \"{name}\"\ndescription = \"test tool {name}\"\nengine = \"local\"\nmode = \"{mode}\"\n\
                 poll_interval = \"200ms\"\nkeep_alive = \"{keep}\"\ninput_schema = {schema}\n\
                 target = {{ command = [{}] }}\n\n",
                toml_str(&tool_script(script))
            )
        };
        let work_schema = format!(
            "{{ type = \"object\", required = [\"label\"], properties = {{ {LABEL_SCHEMA}, seconds = {{ type = \"integer\", minimum = 0, maximum = 120 }} }} }}"
        );
        let label_only = format!(
            "{{ type = \"object\", required = [\"label\"], properties = {{ {LABEL_SCHEMA} }} }}"
        );
        text.push_str(&tool("work", "hybrid", "1h", "work.sh", &work_schema));
        text.push_str(&tool("fail", "hybrid", "1h", "fail.sh", &label_only));
        text.push_str(&tool("ask", "async", "1h", "ask.sh", &label_only));
        text.push_str(&tool(
            "sleeper",
            "async",
            "1h",
            "sleeper.sh",
            "{ type = \"object\" }",
        ));
        text.push_str(&tool("brief", "hybrid", "1s", "work.sh", &work_schema));
        text.push_str(&options.extra);
        std::fs::write(&config, text).expect("write config");
        Self {
            dir,
            config,
            spool,
            options,
        }
    }

    /// The variables the server child needs (the key, the bearer tokens).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![(KEY_VAR.to_owned(), KEY_SECRET.to_owned())];
        for b in &self.options.bearer {
            env.push((b.var.clone(), b.token.clone()));
        }
        env
    }

    /// A `Command` running `taskgate ARGS` with this setup's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd.env("TASKGATE_LOG", "info");
        cmd
    }

    /// True when the spool holds no file at all (folders, such as the
    /// engine's staging folder, may exist but must be empty).
    pub fn spool_has_no_files(&self) -> bool {
        fn walk(dir: &Path) -> bool {
            std::fs::read_dir(dir).map_or(true, |entries| {
                entries
                    .flatten()
                    .all(|e| e.path().is_dir() && walk(&e.path()))
            })
        }
        walk(&self.spool)
    }

    /// The run folders in the spool (each run the engine started; hidden
    /// folders such as the engine's staging area are not runs).
    pub fn runs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.spool) else {
            return Vec::new();
        };
        let mut runs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        runs
    }

    /// The only run folder (panics unless there is exactly one).
    pub fn only_run(&self) -> PathBuf {
        let runs = self.runs();
        assert_eq!(
            runs.len(),
            1,
            "expected exactly one run folder, found {runs:?}"
        );
        runs.into_iter().next().unwrap()
    }
}

impl Default for Setup {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Setup {
    /// Runs outlive servers by design: end every process group this setup's
    /// runs started (identified by their recorded pids), then the folder goes.
    fn drop(&mut self) {
        for run in self.runs() {
            for file in ["pid.json", "supervisor.json"] {
                if let Some(pid) = recorded_pid(&run.join(file)) {
                    kill_group_if_present(pid);
                }
            }
        }
    }
}

/// A TOML basic string holding `path`.
pub fn toml_str(path: &Path) -> String {
    serde_json::to_string(&path.display().to_string()).unwrap()
}

/// The pid in a spool `pid.json` / `supervisor.json`.
pub fn recorded_pid(file: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(file).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.get("pid")?.as_i64().map(|p| p as i32)
}

/// The live (not zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return members;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut fields = stat[close + 1..].split_ascii_whitespace();
        let state = fields.next().unwrap_or("");
        let _ppid = fields.next();
        let pgrp: i32 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        if pgrp == pgid && !matches!(state, "Z" | "X" | "x") {
            members.push(pid);
        }
    }
    members
}

/// True when `pid` is a live (not zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_ascii_whitespace().next())
                .unwrap_or("");
            !matches!(state, "Z" | "X" | "x")
        }
        Err(_) => false,
    }
}

fn kill_group_if_present(pgid: i32) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    if pgid <= 1 {
        return;
    }
    if !group_members(pgid).is_empty() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    } else if alive(pgid) {
        let _ = kill(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Polls `check` until it returns `Some`, or panics after `limit` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free loopback port (the listener is closed again before the server binds).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .unwrap()
        .port()
}

/// A running `taskgate serve` over HTTP.
pub struct Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    stderr: PathBuf,
}

static SERVERS: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// Starts a server on `setup` and waits (at most 30 s) until `/healthz` answers.
    pub async fn start(setup: &Setup) -> Self {
        Self::spawn(
            setup.dir.path(),
            &setup.config,
            &setup.env(),
            Duration::from_secs(30),
        )
        .await
    }

    /// Starts `taskgate serve --config CONFIG` on a free loopback port, with
    /// `TASKGATE_LOG=info` and then `env`, its stderr in a file under `dir`, and
    /// waits (at most `limit`) until `/healthz` answers; tries three ports.
    pub async fn spawn(
        dir: &Path,
        config: &Path,
        env: &[(String, String)],
        limit: Duration,
    ) -> Self {
        let mut last = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let n = SERVERS.fetch_add(1, Ordering::Relaxed);
            let stderr = dir.join(format!("server-{n}.stderr"));
            let mut cmd = Command::new(bin());
            cmd.args(["serve", "--config"])
                .arg(config)
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .env("TASKGATE_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap());
            for (k, v) in env {
                cmd.env(k, v);
            }
            let child = cmd.spawn().expect("spawn taskgate");
            let mut server = Self {
                child,
                port,
                base: format!("http://127.0.0.1:{port}"),
                stderr,
            };
            match server.wait_healthy(limit).await {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        panic!("taskgate did not come up: {last}");
    }

    async fn wait_healthy(&mut self, limit: Duration) -> Result<(), String> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited with {status}: {}", self.stderr_text()));
            }
            if let Ok(r) = http.get(format!("{}/healthz", self.base)).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "no /healthz within {limit:?}: {}",
                    self.stderr_text()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// What the server wrote on stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `taskgate_engine_calls_total` from `/metrics`.
    pub async fn engine_calls(&self) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.base))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("taskgate_engine_calls_total "))
            .unwrap_or_else(|| panic!("no taskgate_engine_calls_total in {text}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// A D1 client of this server.
    pub fn client(&self) -> Client {
        Client::new(&self.url())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One HTTP reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as sent.
    pub raw: String,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

impl Reply {
    /// The `result` member, or a panic showing the reply.
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("result").is_some(),
            "expected a result, got HTTP {}: {}",
            self.status,
            self.raw
        );
        &self.body["result"]
    }

    /// The `error` member, or a panic showing the reply.
    pub fn error(&self) -> &Value {
        assert!(
            self.body.get("error").is_some(),
            "expected an error, got HTTP {}: {}",
            self.status,
            self.raw
        );
        &self.body["error"]
    }

    /// The error code.
    pub fn code(&self) -> i64 {
        self.error()["code"].as_i64().expect("numeric code")
    }
}

/// The `_meta` of a 2026-07-28 request; with `tasks`, declaring the extension.
pub fn modern_meta(tasks: bool) -> Value {
    modern_meta_as("taskgate-tests", tasks)
}

/// [`modern_meta`] with `client` as the client name.
pub fn modern_meta_as(client: &str, tasks: bool) -> Value {
    let caps = if tasks {
        json!({ "extensions": { TASKS: {} } })
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": { "name": client, "version": "0.0.0" },
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// The `Mcp-Name` a request must carry, if any.
pub fn mcp_name(method: &str, params: &Value) -> Option<String> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params.get(field).and_then(Value::as_str).map(str::to_owned)
}

/// The JSON-RPC message in the `data` lines of one SSE event; `None` for an
/// event without data (a comment or priming event).
pub fn sse_data(event: &str) -> Option<Value> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
        .collect();
    if data.is_empty() || data.iter().all(|d| d.is_empty()) {
        return None;
    }
    Some(serde_json::from_str(&data.join("\n")).expect("SSE data is JSON"))
}

/// The JSON-RPC messages of a whole SSE body.
pub fn sse_messages(text: &str) -> Vec<Value> {
    text.split("\n\n").filter_map(sse_data).collect()
}

/// A response header as a string.
pub fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A raw JSON-RPC client of `POST /mcp` speaking 2026-07-28.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    /// A bearer token sent with every request.
    pub token: Option<String>,
    /// Whether requests declare the tasks extension.
    pub tasks: bool,
    ids: std::sync::Arc<AtomicU64>,
}

impl Client {
    /// A client of `url` that declares the tasks extension.
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            token: None,
            tasks: true,
            ids: std::sync::Arc::default(),
        }
    }

    /// The same client with a bearer token.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// The same client, not declaring the tasks extension.
    pub fn without_tasks(mut self) -> Self {
        self.tasks = false;
        self
    }

    /// The next request id.
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// POSTs `body` with exactly `headers` (plus content type, accept and the token).
    pub async fn post_raw(
        &self,
        headers: &[(&str, String)],
        body: impl Into<reqwest::Body>,
    ) -> Reply {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let response = req.body(body).send().await.expect("POST /mcp");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let raw = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&raw).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            raw,
            body,
        }
    }

    /// The standard headers of a modern request.
    pub fn headers_for(method: &str, params: &Value) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("mcp-protocol-version", MODERN.to_owned()),
            ("mcp-method", method.to_owned()),
        ];
        if let Some(name) = mcp_name(method, params) {
            headers.push(("mcp-name", name));
        }
        headers
    }

    /// Sends a modern request: `_meta` is added to `params`, and the headers set.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        let id = self.next_id();
        self.request_with_id(json!(id), method, params).await
    }

    /// As [`Client::request`], with a chosen id.
    pub async fn request_with_id(&self, id: Value, method: &str, mut params: Value) -> Reply {
        params["_meta"] = modern_meta(self.tasks);
        let headers = Self::headers_for(method, &params);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post_raw(&headers, body.to_string()).await
    }

    /// `tools/call`.
    pub async fn call(&self, tool: &str, arguments: Value) -> Reply {
        self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )
        .await
    }

    /// `tools/call` that must create a task; returns its id.
    pub async fn start_task(&self, tool: &str, arguments: Value) -> String {
        let reply = self.call(tool, arguments).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        let result = reply.result();
        assert_eq!(result["resultType"], "task", "{}", reply.raw);
        result["taskId"].as_str().expect("taskId").to_owned()
    }

    /// `tasks/get`, returning the raw reply.
    pub async fn get_reply(&self, task_id: &str) -> Reply {
        self.request("tasks/get", json!({ "taskId": task_id }))
            .await
    }

    /// `tasks/get` that must succeed; returns the result.
    pub async fn get(&self, task_id: &str) -> Value {
        let reply = self.get_reply(task_id).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        reply.result().clone()
    }

    /// `tasks/cancel` that must succeed.
    pub async fn cancel(&self, task_id: &str) -> Value {
        let reply = self
            .request("tasks/cancel", json!({ "taskId": task_id }))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        reply.result().clone()
    }

    /// Polls `tasks/get` until `done(result)` holds, at most `limit`.
    pub async fn poll_until(
        &self,
        task_id: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let task = self.get(task_id).await;
            if done(&task) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task did not reach the expected state within {limit:?}; last: {task}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until the task is terminal (completed, failed or cancelled).
    pub async fn wait_terminal(&self, task_id: &str, limit: Duration) -> Value {
        self.poll_until(task_id, limit, |t| {
            matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
        .await
    }
}

/// Asserts that `task` is a well-formed D1 `DetailedTask` for `task_id`.
pub fn assert_detailed_task(task: &Value, task_id: &str) {
    assert_eq!(task["resultType"], "complete", "{task}");
    assert_eq!(task["taskId"], task_id, "{task}");
    for field in ["status", "createdAt", "lastUpdatedAt"] {
        assert!(task[field].is_string(), "{field} missing in {task}");
    }
    assert!(task.get("ttlMs").is_some(), "ttlMs missing in {task}");
}

/// A running `taskgate serve --stdio`: newline-delimited JSON-RPC on its
/// stdin/stdout. Every stdout line is kept, to check that all are JSON-RPC.
pub struct StdioServer {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Every stdout line so far, in order.
    pub seen: Vec<String>,
    stderr: PathBuf,
    ids: u64,
}

impl StdioServer {
    /// Starts `taskgate serve --stdio` on `setup`.
    pub fn start(setup: &Setup) -> Self {
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let stderr = setup.dir.path().join(format!("stdio-{n}.stderr"));
        let std_cmd = setup.command(&[
            "serve",
            "--stdio",
            "--config",
            setup.config.to_str().unwrap(),
        ]);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn taskgate --stdio");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
            ids: 0,
        }
    }

    /// Writes one line to the server.
    pub async fn send_line(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Reads stdout lines until the response with `id` (at most `limit`).
    pub async fn response(&mut self, id: &Value, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no response to {id} within {limit:?}; stderr: {}",
                        self.stderr_text()
                    )
                })
                .unwrap_or_else(|| panic!("stdout closed; stderr: {}", self.stderr_text()));
            self.seen.push(line.clone());
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
            if message.get("id") == Some(id) {
                return message;
            }
        }
    }

    /// Sends a request and waits for its response (at most 60 s).
    pub async fn request_raw(&mut self, method: &str, params: Value) -> Value {
        self.ids += 1;
        let id = json!(self.ids);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send_line(&body.to_string()).await;
        self.response(&id, Duration::from_secs(60)).await
    }

    /// Sends a 2026-07-28 request (with `_meta` declaring the tasks extension).
    pub async fn request(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"] = modern_meta(true);
        self.request_raw(method, params).await
    }

    /// A request that must succeed: its result.
    pub async fn result(&mut self, method: &str, params: Value) -> Value {
        let reply = self.request(method, params).await;
        assert!(reply.get("result").is_some(), "{method}: {reply}");
        reply["result"].clone()
    }

    /// Polls `tasks/get` until `done` holds (at most `limit`).
    pub async fn poll_until(
        &mut self,
        task_id: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let task = self.result("tasks/get", json!({ "taskId": task_id })).await;
            if done(&task) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "no expected state within {limit:?}: {task}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Closes stdin and waits (at most `limit`) for the server to exit; drains
    /// the rest of stdout into `seen`.
    pub async fn close(&mut self, limit: Duration) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("taskgate did not exit on stdin EOF within {limit:?}"))
            .unwrap();
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        status
    }

    /// What the server wrote on stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}
