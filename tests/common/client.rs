//! Raw JSON-RPC clients of `POST /mcp` and the one [`Reply`] they return:
//! [`Client`] speaks 2026-07-28 (every request carries `_meta` and the header
//! mirrors), [`Legacy`] holds an `initialize` session and its sealed
//! `Mcp-Session-Id`. Both read JSON and SSE answers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{wait_for, MODERN, TASKS};

/// How long an SSE answer may stay silent before the test fails.
const SSE_SILENCE: Duration = Duration::from_secs(60);

/// One HTTP answer to a JSON-RPC message.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The content type.
    pub content_type: String,
    /// The `Mcp-Session-Id` header of the answer.
    pub session: Option<String>,
    /// The body as sent.
    pub raw: String,
    /// The JSON-RPC response: the body parsed as JSON, or for SSE the message
    /// answering the request (`Null` when there is none).
    pub body: Value,
    /// For SSE, the messages the server sent before the response, in order.
    pub before: Vec<Value>,
    /// Every JSON-RPC message of the answer, in order (the response among them).
    pub messages: Vec<Value>,
}

impl Reply {
    /// Reads `response` whole. For SSE the response is the message answering
    /// `id` (or, without one, the last response in the stream); no event may
    /// take longer than a minute.
    pub async fn read(response: reqwest::Response, id: Option<&Value>) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let content_type = header(&response, "content-type").unwrap_or_default();
        let session = header(&response, "mcp-session-id");
        if !content_type.starts_with("text/event-stream") {
            let raw = response.text().await.unwrap_or_default();
            let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
            let messages = if body.is_null() {
                Vec::new()
            } else {
                vec![body.clone()]
            };
            return Self {
                status,
                headers,
                content_type,
                session,
                raw,
                body,
                before: Vec::new(),
                messages,
            };
        }
        let mut reader = SseReader::new(response);
        let mut messages = Vec::new();
        while let Some(m) = reader.next(SSE_SILENCE).await {
            messages.push(m);
        }
        let is_response = |m: &Value| m.get("method").is_none() && m.get("id").is_some();
        let at = match id {
            Some(id) => messages
                .iter()
                .position(|m| is_response(m) && m.get("id") == Some(id)),
            None => None,
        }
        .or_else(|| messages.iter().rposition(is_response));
        let (body, before) = match at {
            Some(at) => (messages[at].clone(), messages[..at].to_vec()),
            None => (Value::Null, messages.clone()),
        };
        Self {
            status,
            headers,
            content_type,
            session,
            raw: reader.raw,
            body,
            before,
            messages,
        }
    }

    /// The response (panics when the answer carried none).
    #[track_caller]
    pub fn response(&self) -> &Value {
        assert!(
            !self.body.is_null(),
            "no response in the answer (HTTP {}): {}",
            self.status,
            self.raw
        );
        &self.body
    }

    /// The `result` member, or a panic showing the reply.
    #[track_caller]
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
    #[track_caller]
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
    #[track_caller]
    pub fn code(&self) -> i64 {
        self.error()["code"].as_i64().expect("numeric code")
    }

    /// The error message.
    #[track_caller]
    pub fn message(&self) -> String {
        self.error()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// True when the reply is a result.
    pub fn is_ok(&self) -> bool {
        self.body.get("result").is_some()
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
    /// Everything read so far, as sent.
    pub raw: String,
    done: bool,
}

impl SseReader {
    /// A reader of `response`'s body.
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: String::new(),
            raw: String::new(),
            done: false,
        }
    }

    /// The next JSON-RPC message, or `None` at the end of the stream; panics
    /// when nothing arrives within `limit`.
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
                Some(bytes) => {
                    let text = String::from_utf8_lossy(&bytes);
                    self.raw.push_str(&text);
                    self.buffer.push_str(&text.replace("\r\n", "\n"));
                }
                None => self.done = true,
            }
        }
    }
}

/// The `_meta` of a 2026-07-28 request; with `tasks`, declaring the extension.
pub fn modern_meta(tasks: bool) -> Value {
    modern_meta_as("taskgate-tests", tasks)
}

/// [`modern_meta`] with `client` as the client name. A client with the tasks
/// extension also declares form elicitation (it answers input requests with
/// `tasks/update`); see [`Client::without_elicitation`].
pub fn modern_meta_as(client: &str, tasks: bool) -> Value {
    let caps = if tasks {
        json!({ "extensions": { TASKS: {} }, "elicitation": { "form": {} } })
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
    /// The endpoint.
    pub url: String,
    /// A bearer token sent with every request.
    pub token: Option<String>,
    /// Whether requests declare the tasks extension.
    pub tasks: bool,
    /// Whether requests (with the extension) declare form elicitation.
    pub elicitation: bool,
    ids: Arc<AtomicU64>,
}

impl Client {
    /// A client of `url` that declares the tasks extension.
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            token: None,
            tasks: true,
            elicitation: true,
            ids: Arc::default(),
        }
    }

    /// The same client, pointed at another server (after a restart).
    pub fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
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

    /// The same client, declaring the tasks extension but no input type.
    pub fn without_elicitation(mut self) -> Self {
        self.elicitation = false;
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
        self.post_for(headers, body, None).await
    }

    async fn post_for(
        &self,
        headers: &[(&str, String)],
        body: impl Into<reqwest::Body>,
        id: Option<&Value>,
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
        Reply::read(response, id).await
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
        if !self.elicitation {
            if let Some(caps) =
                params["_meta"]["io.modelcontextprotocol/clientCapabilities"].as_object_mut()
            {
                caps.remove("elicitation");
            }
        }
        let headers = Self::headers_for(method, &params);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post_for(&headers, body.to_string(), Some(&id)).await
    }

    /// `tools/call`.
    pub async fn call(&self, tool: &str, arguments: Value) -> Reply {
        self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )
        .await
    }

    /// `tools/call` that must create a working task; returns its id.
    /// A start the server answers as retryable (the engine unavailable or
    /// throttling for a moment: a loaded Airflow's database busy) is
    /// sent again, as a client would, for up to a minute; any other error fails.
    pub async fn start_task(&self, tool: &str, arguments: Value) -> String {
        let reply = super::wait_for(
            "a start that is not refused as retryable",
            std::time::Duration::from_secs(60),
            async || {
                let reply = self.call(tool, arguments.clone()).await;
                if reply.status == 200
                    && reply
                        .body
                        .get("error")
                        .is_some_and(|e| e["data"]["retryable"] == true)
                {
                    Err(reply.raw)
                } else {
                    Ok(reply)
                }
            },
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        let result = reply.result();
        assert_eq!(result["resultType"], "task", "{}", reply.raw);
        assert_eq!(result["status"], "working", "{}", reply.raw);
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

    /// `tasks/update` with `inputResponses`.
    pub async fn update(&self, task_id: &str, responses: Value) -> Reply {
        self.request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": responses }),
        )
        .await
    }

    /// `tasks/cancel`, returning the raw reply.
    pub async fn cancel_reply(&self, task_id: &str) -> Reply {
        self.request("tasks/cancel", json!({ "taskId": task_id }))
            .await
    }

    /// `tasks/cancel` that must succeed.
    pub async fn cancel(&self, task_id: &str) -> Value {
        let reply = self.cancel_reply(task_id).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        reply.result().clone()
    }

    /// Polls `tasks/get` until `done(result)` holds, at most `limit`. An answer
    /// the server marks retryable (its engine unavailable for a moment) is a
    /// poll to repeat, as a client would; any other error fails.
    pub async fn poll_until(
        &self,
        task_id: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for("the expected task state", limit, async || {
            let reply = self.get_reply(task_id).await;
            if reply.status == 200
                && reply
                    .body
                    .get("error")
                    .is_some_and(|e| e["data"]["retryable"] == true)
            {
                return Err(reply.raw);
            }
            assert_eq!(reply.status, 200, "{}", reply.raw);
            let task = reply.result().clone();
            if done(&task) {
                Ok(task)
            } else {
                Err(task.to_string())
            }
        })
        .await
    }

    /// Polls until the task's status is `status`; returns the task.
    pub async fn until_status(&self, task_id: &str, status: &str, limit: Duration) -> Value {
        self.poll_until(task_id, limit, |t| t["status"] == status)
            .await
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

/// Asserts that `error` is a bound's refusal: the retryable -32603 with a
/// `retryAfterMs`, its message naming the configuration key `key` (for
/// example `server.max_engine_calls`).
#[track_caller]
pub fn assert_bound_refusal(error: &Value, key: &str) {
    assert_eq!(error["code"], -32603, "{error}");
    assert_eq!(error["data"]["retryable"], true, "{error}");
    assert!(error["data"]["retryAfterMs"].as_u64().is_some(), "{error}");
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains(key)),
        "not a refusal naming {key}: {error}"
    );
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

/// A raw JSON-RPC client of one legacy (`initialize`) session over
/// Streamable HTTP: its sealed `Mcp-Session-Id` and negotiated version go with
/// every request once `initialize` set them.
#[derive(Clone)]
pub struct Legacy {
    http: reqwest::Client,
    /// The endpoint.
    pub url: String,
    /// The sealed session id, once `initialize` returned one.
    pub session: Option<String>,
    /// The negotiated version, sent as `MCP-Protocol-Version`.
    pub version: Option<String>,
    /// Whether to accept SSE answers.
    pub accept_sse: bool,
    ids: Arc<AtomicU64>,
}

impl Legacy {
    /// A client of `url` that accepts JSON and SSE, before `initialize`.
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

    /// A session of `url` that negotiated exactly `version` with `capabilities`.
    pub async fn connect(url: &str, version: &str, capabilities: Value) -> Self {
        let mut client = Self::new(url);
        let result = client.initialize(version, capabilities).await;
        assert_eq!(result["protocolVersion"], version, "{result}");
        client
    }

    /// The same session, sent to another server (after a restart).
    pub fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
        }
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

    /// Posts `message` and reads the whole answer.
    pub async fn post(&self, message: &Value) -> Reply {
        let response = self.builder(message).send().await.expect("POST /mcp");
        let id = message.get("method").and(message.get("id"));
        Reply::read(response, id).await
    }

    /// Posts a request and returns the answer as a stream to read step by step.
    pub async fn open_stream(&self, method: &str, params: Value) -> (u16, String, SseReader) {
        let body =
            json!({ "jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params });
        let response = self.builder(&body).send().await.expect("POST /mcp");
        let status = response.status().as_u16();
        let content_type = header(&response, "content-type").unwrap_or_default();
        (status, content_type, SseReader::new(response))
    }

    /// Sends a request.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
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
                        "clientInfo": { "name": "taskgate-tests", "version": "1.0.0" } }),
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
    pub async fn call(&self, name: &str, arguments: Value) -> Reply {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
    }

    /// A 2025-11-25 task-augmented `tools/call` (ttl 60 s) that must create a
    /// working task with its timestamps and poll interval; returns its id.
    pub async fn start_task(&self, name: &str, arguments: Value) -> String {
        let answer = self
            .request(
                "tools/call",
                json!({ "name": name, "arguments": arguments, "task": { "ttl": 60000 } }),
            )
            .await;
        let task = &answer.result()["task"];
        assert_eq!(task["status"], "working", "{task}");
        for field in ["createdAt", "lastUpdatedAt", "pollInterval"] {
            assert!(task.get(field).is_some(), "{field} in {task}");
        }
        task["taskId"].as_str().expect("taskId").to_owned()
    }

    /// A SEP-1391 `tools/call` starting (or finding) the operation `token`,
    /// kept `keep_alive` seconds.
    pub async fn call_op(
        &self,
        name: &str,
        arguments: Value,
        token: &str,
        keep_alive: u64,
    ) -> Reply {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments,
                    "operation": { "token": token, "keepAlive": keep_alive } }),
        )
        .await
    }

    /// `tools/async/status` of the operation `token`.
    pub async fn op_status(&self, token: &str) -> Reply {
        self.request("tools/async/status", json!({ "token": token }))
            .await
    }

    /// `tools/async/result` of the operation `token`.
    pub async fn op_result(&self, token: &str) -> Reply {
        self.request("tools/async/result", json!({ "token": token }))
            .await
    }

    /// Polls `tools/async/status` until the operation's status is `status`
    /// (every read must succeed); returns that status result.
    pub async fn until_op_status(&self, token: &str, status: &str, limit: Duration) -> Value {
        wait_for(&format!("operation {token} {status}"), limit, async || {
            let r = self.op_status(token).await.result().clone();
            if r["status"] == status {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        })
        .await
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
        let id = json!(self.next_id());
        let (status, content_type, mut reader) = {
            let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
            let response = self.builder(&body).send().await.expect("POST /mcp");
            if !header(&response, "content-type")
                .is_some_and(|c| c.starts_with("text/event-stream"))
            {
                return (Reply::read(response, Some(&id)).await, Vec::new());
            }
            let status = response.status().as_u16();
            let content_type = header(&response, "content-type").unwrap_or_default();
            (status, content_type, SseReader::new(response))
        };
        let mut asked = Vec::new();
        let mut before = Vec::new();
        while let Some(message) = reader.next(SSE_SILENCE).await {
            if message.get("id") == Some(&id) && message.get("method").is_none() {
                let mut messages = before.clone();
                messages.push(message.clone());
                let reply = Reply {
                    status,
                    headers: reqwest::header::HeaderMap::new(),
                    content_type,
                    session: None,
                    raw: reader.raw.clone(),
                    body: message,
                    before,
                    messages,
                };
                return (reply, asked);
            }
            if message.get("method").is_some() && message.get("id").is_some() {
                let posted = self.respond(&message["id"], answer(&message)).await;
                assert!(posted < 300, "posting the answer got HTTP {posted}");
                asked.push(message.clone());
            }
            before.push(message);
        }
        panic!("the stream ended without a response to {id}; saw {before:?}");
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
