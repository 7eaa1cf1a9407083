//! Helpers of the engine end-to-end tests (`engine_stepfunctions.rs`,
//! `engine_github.rs`): the real `taskgate` binary on a free loopback port with a
//! configuration written by the test, and raw JSON-RPC clients over HTTP in three
//! dialects: 2026-07-28 with the tasks extension, 2025-11-25 tasks (legacy
//! session, blocking `tasks/result` with input requests on its SSE stream), and
//! SEP-1391 operations (legacy session opting in to `taskgate/sep-1391`).
//!
//! Every wait polls a condition against a deadline; nothing sleeps and hopes.

#![allow(dead_code)]

#[path = "../common/mod.rs"]
mod common;

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{header, sse_messages};
use serde_json::{json, Value};

/// The environment variable the configs name as their sealing key.
pub const KEY_VAR: &str = "TASKGATE_ENGINE_E2E_KEY";
/// Its value (set on the server child only).
pub const KEY_SECRET: &str = "engine-e2e-sealing-key-0123456789abcdef";

/// The `[server]` and `[keys]` head of every test configuration.
#[must_use]
pub fn config_head() -> String {
    format!(
        "[server]\ncall_timeout = \"10s\"\nmax_wait = \"30s\"\n\n\
         [keys]\nseal = [{{ id = \"k1\", secret_env = \"{KEY_VAR}\" }}]\n\n"
    )
}

/// Polls `check` every 100 ms until it returns `Some`, panicking after `limit`
/// with `what` and the last thing `check` saw.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last seen: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A temporary folder with a configuration file, and the variables the server
/// child gets.
pub struct Setup {
    /// The folder (removed on drop).
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    /// Environment of the server child.
    pub env: Vec<(String, String)>,
}

impl Setup {
    /// Writes `config_head()` followed by `body`.
    #[must_use]
    pub fn new(body: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("taskgate-engine-e2e-")
            .tempdir()
            .expect("tempdir");
        let config = dir.path().join("taskgate.toml");
        std::fs::write(&config, format!("{}{body}", config_head())).expect("write config");
        let mut all = vec![(KEY_VAR.to_owned(), KEY_SECRET.to_owned())];
        all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        Self {
            dir,
            config,
            env: all,
        }
    }

    /// Starts a server on this setup.
    pub async fn server(&self) -> Server {
        Server::start(self).await
    }
}

/// A running `taskgate serve` (HTTP on 127.0.0.1): the shared
/// [`common::Server`], plus its MCP endpoint.
pub struct Server {
    inner: common::Server,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl Server {
    /// Starts the binary and waits (at most 30 s) until `/healthz` answers.
    pub async fn start(setup: &Setup) -> Self {
        let inner = common::Server::spawn(
            setup.dir.path(),
            &setup.config,
            &setup.env,
            Duration::from_secs(30),
        )
        .await;
        Self {
            url: inner.url(),
            inner,
        }
    }

    /// A 2026-07-28 client declaring the tasks extension.
    #[must_use]
    pub fn modern(&self) -> Modern {
        Modern::new(&self.url)
    }
}

impl Deref for Server {
    type Target = common::Server;
    fn deref(&self) -> &common::Server {
        &self.inner
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut common::Server {
        &mut self.inner
    }
}

/// One JSON-RPC answer over HTTP.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON-RPC response.
    pub body: Value,
    /// Messages the server sent before the response (SSE), in order.
    pub before: Vec<Value>,
    /// The `Mcp-Session-Id` header, if any.
    pub session: Option<String>,
}

impl Reply {
    /// The `result`, or a panic showing the reply.
    #[track_caller]
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("result").is_some(),
            "expected a result, got HTTP {}: {}",
            self.status,
            self.body
        );
        &self.body["result"]
    }

    /// The `error`, or a panic showing the reply.
    #[track_caller]
    pub fn error(&self) -> &Value {
        assert!(
            self.body.get("error").is_some(),
            "expected an error, got HTTP {}: {}",
            self.status,
            self.body
        );
        &self.body["error"]
    }

    /// True when the reply is a result.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.body.get("result").is_some()
    }
}

async fn into_reply(response: reqwest::Response, id: &Value) -> Reply {
    let status = response.status().as_u16();
    let session = header(&response, "mcp-session-id");
    let sse = header(&response, "content-type").is_some_and(|c| c.starts_with("text/event-stream"));
    let text = response.text().await.expect("body");
    if sse {
        let mut before = sse_messages(&text);
        let at = before
            .iter()
            .position(|m| m.get("id") == Some(id) && m.get("method").is_none())
            .unwrap_or_else(|| panic!("no response to {id} in the stream: {text}"));
        let body = before.remove(at);
        Reply {
            status,
            body,
            before,
            session,
        }
    } else {
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            before: Vec::new(),
            session,
        }
    }
}

/// A raw JSON-RPC client of `POST /mcp` speaking 2026-07-28 with the tasks
/// extension: every request carries `_meta` and the header mirrors.
#[derive(Clone)]
pub struct Modern {
    http: reqwest::Client,
    /// The endpoint.
    pub url: String,
    ids: Arc<AtomicU64>,
}

/// The `_meta` of a 2026-07-28 request declaring the tasks extension.
#[must_use]
pub fn modern_meta() -> Value {
    common::modern_meta_as("taskgate-engine-e2e", true)
}

impl Modern {
    /// A client of `url`.
    #[must_use]
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            ids: Arc::new(AtomicU64::new(1)),
        }
    }

    /// The same client, pointed at another server (after a restart).
    #[must_use]
    pub fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
        }
    }

    /// Sends one request with `_meta` and the `MCP-Protocol-Version`,
    /// `Mcp-Method` and `Mcp-Name` headers.
    pub async fn request(&self, method: &str, mut params: Value) -> Reply {
        params["_meta"] = modern_meta();
        let id = json!(self.ids.fetch_add(1, Ordering::Relaxed));
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (k, v) in common::Client::headers_for(method, &params) {
            req = req.header(k, v);
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let response = req.json(&body).send().await.expect("POST /mcp");
        into_reply(response, &id).await
    }

    /// `tools/call`.
    pub async fn call(&self, tool: &str, arguments: Value) -> Reply {
        self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )
        .await
    }

    /// `tools/call` that must answer with a task: its id.
    pub async fn start(&self, tool: &str, arguments: Value) -> String {
        let reply = self.call(tool, arguments).await;
        let r = reply.result();
        assert_eq!(r["resultType"], "task", "{}", reply.body);
        assert_eq!(r["status"], "working", "{}", reply.body);
        r["taskId"].as_str().expect("taskId").to_owned()
    }

    /// `tasks/get`.
    pub async fn get(&self, task: &str) -> Reply {
        self.request("tasks/get", json!({ "taskId": task })).await
    }

    /// `tasks/update` with `inputResponses`.
    pub async fn update(&self, task: &str, responses: Value) -> Reply {
        self.request(
            "tasks/update",
            json!({ "taskId": task, "inputResponses": responses }),
        )
        .await
    }

    /// `tasks/cancel`.
    pub async fn cancel(&self, task: &str) -> Reply {
        self.request("tasks/cancel", json!({ "taskId": task }))
            .await
    }

    /// Polls `tasks/get` until the task's status is `status`; returns the task.
    /// Errors of single reads fail the test.
    pub async fn until_status(&self, task: &str, status: &str, limit: Duration) -> Value {
        until(&format!("task status {status}"), limit, || async {
            let reply = self.get(task).await;
            let r = reply.result().clone();
            if r["status"] == status {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        })
        .await
    }
}

/// A legacy (`initialize`) session over HTTP: its sealed `Mcp-Session-Id` goes
/// with every request.
#[derive(Clone)]
pub struct Legacy {
    http: reqwest::Client,
    /// The endpoint.
    pub url: String,
    /// The negotiated version.
    pub version: String,
    /// The session id.
    pub session: String,
    ids: Arc<AtomicU64>,
}

impl Legacy {
    /// `initialize` with `version` and `capabilities`, then `notifications/initialized`.
    pub async fn initialize(url: &str, version: &str, capabilities: Value) -> Self {
        let http = reqwest::Client::new();
        let id = json!(0);
        let response = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(
                &json!({ "jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": capabilities,
                "clientInfo": { "name": "taskgate-engine-e2e", "version": "0.0.0" } } }),
            )
            .send()
            .await
            .expect("POST initialize");
        let reply = into_reply(response, &id).await;
        assert_eq!(
            reply.result()["protocolVersion"],
            version,
            "{:?}",
            reply.body
        );
        let session = reply.session.clone().expect("an Mcp-Session-Id");
        let client = Self {
            http,
            url: url.to_owned(),
            version: version.to_owned(),
            session,
            ids: Arc::new(AtomicU64::new(1)),
        };
        client
            .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        client
    }

    fn builder(&self) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", &self.version)
            .header("mcp-session-id", &self.session)
    }

    /// The same session, against another server (after a restart).
    #[must_use]
    pub fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
        }
    }

    /// Posts a notification or a response; returns the HTTP status.
    pub async fn post(&self, message: &Value) -> u16 {
        self.builder()
            .json(message)
            .send()
            .await
            .expect("POST /mcp")
            .status()
            .as_u16()
    }

    /// One request.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        let id = json!(self.ids.fetch_add(1, Ordering::Relaxed));
        let response = self
            .builder()
            .json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .send()
            .await
            .expect("POST /mcp");
        into_reply(response, &id).await
    }

    /// One request whose SSE stream may carry requests from the server
    /// (`elicitation/create`): each is answered, while the stream is still open,
    /// with what `answer` returns (posted as a JSON-RPC response). Returns the
    /// final reply and the server requests seen.
    pub async fn request_answering(
        &self,
        method: &str,
        params: Value,
        answer: impl Fn(&Value) -> Value,
    ) -> (Reply, Vec<Value>) {
        let id = json!(self.ids.fetch_add(1, Ordering::Relaxed));
        let mut response = self
            .builder()
            .json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .send()
            .await
            .expect("POST /mcp");
        let status = response.status().as_u16();
        let sse =
            header(&response, "content-type").is_some_and(|c| c.starts_with("text/event-stream"));
        if !sse {
            let body = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
            return (
                Reply {
                    status,
                    body,
                    before: Vec::new(),
                    session: None,
                },
                Vec::new(),
            );
        }
        let mut buffer = String::new();
        let mut asked = Vec::new();
        let mut before = Vec::new();
        while let Some(chunk) = response.chunk().await.expect("SSE chunk") {
            buffer.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                for message in sse_messages(&event) {
                    if message.get("id") == Some(&id) && message.get("method").is_none() {
                        let reply = Reply {
                            status,
                            body: message,
                            before,
                            session: None,
                        };
                        return (reply, asked);
                    }
                    if message.get("method").is_some() && message.get("id").is_some() {
                        let result = answer(&message);
                        let posted = self
                            .post(
                                &json!({ "jsonrpc": "2.0", "id": message["id"], "result": result }),
                            )
                            .await;
                        assert!(posted < 300, "posting the answer got HTTP {posted}");
                        asked.push(message.clone());
                    }
                    before.push(message);
                }
            }
        }
        panic!("the stream ended without a response to {id}; saw {before:?}");
    }
}
