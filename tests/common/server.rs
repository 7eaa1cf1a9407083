//! The real `taskgate` binary as a child: `serve` over HTTP on a free loopback
//! port ([`Server`]), or `serve --stdio` ([`StdioServer`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{modern_meta, Client, Legacy};
use super::setup::Setup;
use super::{bin, wait_for};

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
    /// Its own HOME, working directory and TMPDIR, when started isolated.
    private: Option<Private>,
}

/// The fresh folders of an isolated server: HOME, working directory, TMPDIR.
pub struct Private {
    /// The folder holding `home/`, `work/` and `tmp/` (removed on drop).
    pub root: tempfile::TempDir,
}

impl Private {
    fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("taskgate-replica-")
            .tempdir()
            .expect("tempdir");
        for sub in ["home", "work", "tmp"] {
            std::fs::create_dir(root.path().join(sub)).unwrap();
        }
        Self { root }
    }

    /// Its HOME.
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// Its working directory.
    pub fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// Its TMPDIR.
    pub fn tmp(&self) -> PathBuf {
        self.root.path().join("tmp")
    }

    /// Every file under the three folders (what the server left there).
    pub fn files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root.path(), &mut out);
        out
    }
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

    /// Starts a server on `setup` with its own fresh HOME, working directory
    /// and TMPDIR (nothing shared with other servers but the config and the
    /// exec spool the config names), and waits (at most 30 s) until `/healthz`
    /// answers.
    pub async fn start_isolated(setup: &Setup) -> Self {
        Self::spawn_in(
            setup.dir.path(),
            &setup.config,
            &setup.env(),
            Duration::from_secs(30),
            true,
        )
        .await
    }

    /// The isolated server's own folders (`None` unless started isolated).
    pub fn private(&self) -> Option<&Private> {
        self.private.as_ref()
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
        Self::spawn_in(dir, config, env, limit, false).await
    }

    /// [`Server::spawn`]; when `isolated`, with fresh HOME, working directory
    /// and TMPDIR of its own.
    pub async fn spawn_in(
        dir: &Path,
        config: &Path,
        env: &[(String, String)],
        limit: Duration,
        isolated: bool,
    ) -> Self {
        let mut last = String::new();
        for _attempt in 0..3 {
            let private = isolated.then(Private::new);
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
            if let Some(p) = &private {
                cmd.env("HOME", p.home())
                    .env("TMPDIR", p.tmp())
                    .current_dir(p.work());
            }
            let child = cmd.spawn().expect("spawn taskgate");
            let mut server = Self {
                child,
                port,
                base: format!("http://127.0.0.1:{port}"),
                stderr,
                private,
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

    /// The server's process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a pid")
    }

    /// The exit status once the server has exited (reaped), else `None`.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `taskgate_engine_calls_total` from `/metrics`, summed over every engine,
    /// tool and operation.
    pub async fn engine_calls(&self) -> u64 {
        let text = self.metrics().await;
        assert!(
            text.contains("# TYPE taskgate_engine_calls_total counter"),
            "no taskgate_engine_calls in {text}"
        );
        metric_sum(&text, "taskgate_engine_calls_total", &[])
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap()
    }

    /// A 2026-07-28 client of this server, declaring the tasks extension.
    pub fn client(&self) -> Client {
        Client::new(&self.url())
    }

    /// A legacy client of this server, before `initialize`.
    pub fn legacy(&self) -> Legacy {
        Legacy::new(&self.url())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
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

    /// Writes one JSON-RPC message.
    pub async fn send(&mut self, message: &Value) {
        self.send_line(&message.to_string()).await;
    }

    /// Sends a request without `_meta` and without waiting; returns its id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> Value {
        self.ids += 1;
        let id = json!(self.ids);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        id
    }

    /// Reads stdout lines until the response with `id` (at most `limit`); a
    /// server request that happens to carry the same id is not it.
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
            if message.get("id") == Some(id) && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends a request and waits for its response (at most 60 s).
    pub async fn request_raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
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
        wait_for("the expected task state", limit, async || {
            let task = self.result("tasks/get", json!({ "taskId": task_id })).await;
            if done(&task) {
                Ok(task)
            } else {
                Err(task.to_string())
            }
        })
        .await
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

/// The sum of the samples of `name` in a `/metrics` text whose labels include
/// every `key="value"` of `labels` (0 when none match).
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (set, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let pairs: Vec<&str> = set.split(',').collect();
            labels
                .iter()
                .all(|(k, v)| pairs.contains(&format!("{k}=\"{v}\"").as_str()))
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .map(|v| v as u64)
        .sum()
}
