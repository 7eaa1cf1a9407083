//! The client's side of the wire: MCP 2026-07-28 with the tasks extension, over
//! Streamable HTTP (`POST URL`) or over stdio to a `taskgate serve --stdio`
//! child started from the running binary.
//!
//! Every request carries its protocol version and client capabilities in
//! `_meta`; over HTTP the `Mcp-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
//! headers repeat them, and arguments whose schema names an `x-mcp-header` are
//! mirrored in `Mcp-Param-*` headers.
//!
//! What comes back is bounded — at most [`Connection::max_response_bytes`] per
//! answer, each request within its deadline, body included — and every string
//! in it (results, errors, the stdio server's stderr) is passed through
//! [`sanitize`](super::sanitize) before anything else sees it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::sanitize;
use taskgate::rpc::header;
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The protocol version the client speaks.
pub const VERSION: &str = "2026-07-28";
/// The tasks extension id.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The default bound of one answer: 16 MiB.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Where the server is. `Debug` never shows the token.
#[derive(Clone)]
pub enum Target {
    /// A Streamable HTTP endpoint, with an optional bearer token.
    Http {
        /// The MCP endpoint (`http://host:port/mcp`).
        url: String,
        /// The bearer token (read from the variable `--token-env` named).
        token: Option<String>,
    },
    /// A config file: the client runs `taskgate serve --stdio` on it.
    Stdio {
        /// The config file.
        config: PathBuf,
    },
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Http { url, token } => f
                .debug_struct("Http")
                .field("url", url)
                .field("token", &token.as_ref().map(|_| "<redacted>"))
                .finish(),
            Self::Stdio { config } => f.debug_struct("Stdio").field("config", config).finish(),
        }
    }
}

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The HTTP request failed before an answer came.
    #[error("cannot reach {url}: {source}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The server refused the request without a JSON-RPC answer.
    #[error("the server answered HTTP {status}{hint}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// A hint for the person.
        hint: &'static str,
    },
    /// The server answered with a JSON-RPC error.
    #[error("{message} (error {code})")]
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
        /// Its data member.
        data: Option<Value>,
    },
    /// The server wants a (valid) bearer token.
    #[error("{message} (HTTP 401): pass the token's variable with --token-env")]
    Unauthorized {
        /// The server's message.
        message: String,
    },
    /// The answer is not a JSON-RPC response.
    #[error("the server's answer is not a JSON-RPC response: {0}")]
    Malformed(String),
    /// No answer within the deadline.
    #[error("no answer from the server within {0:?}")]
    Timeout(Duration),
    /// The answer is larger than `--max-response-bytes`.
    #[error("the server's answer is larger than {0} bytes (--max-response-bytes)")]
    TooLarge(usize),
    /// The stdio server could not be started.
    #[error("cannot start `taskgate serve --stdio`: {source}")]
    Spawn {
        /// The process error.
        #[source]
        source: std::io::Error,
    },
    /// The stdio server went away.
    #[error("the stdio server stopped{}", tail_note(.stderr))]
    ServerGone {
        /// The end of what it wrote on stderr.
        stderr: String,
    },
}

fn tail_note(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!(":\n{}", stderr.trim_end())
    }
}

impl WireError {
    /// The JSON-RPC error code, for errors the server answered.
    #[must_use]
    pub fn code(&self) -> Option<i64> {
        match self {
            Self::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// How long to wait before retrying, for errors the server marked
    /// retryable (throttling upstream).
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Rpc { data: Some(d), .. } if d["retryable"] == json!(true) => Some(
                Duration::from_millis(d["retryAfterMs"].as_u64().unwrap_or(1000)),
            ),
            _ => None,
        }
    }

    /// True for a failure to reach the server at all (worth a few retries
    /// while watching a task).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout(_))
    }
}

/// A connection to one server.
pub struct Connection {
    transport: Transport,
    next_id: u64,
    /// Whether requests declare the elicitation capability (the client can
    /// answer input requests).
    pub elicitation: bool,
    /// The deadline of each request.
    pub timeout: Duration,
    /// The largest answer accepted, in bytes.
    pub max_response_bytes: usize,
}

enum Transport {
    Http {
        http: reqwest::Client,
        url: String,
        token: Option<String>,
    },
    Stdio(Box<StdioServer>),
}

struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
}

/// How much of the stdio server's stderr is kept to show when it fails.
const STDERR_TAIL: usize = 4096;

impl Connection {
    /// Opens a connection: builds the HTTP client, or starts the stdio server.
    ///
    /// # Errors
    ///
    /// [`WireError::Spawn`] when the stdio server cannot be started.
    pub fn open(target: &Target, elicitation: bool, timeout: Duration) -> Result<Self, WireError> {
        let transport = match target {
            Target::Http { url, token } => Transport::Http {
                http: reqwest::Client::builder()
                    .connect_timeout(timeout)
                    .build()
                    .map_err(|source| WireError::Unreachable {
                        url: url.clone(),
                        source,
                    })?,
                url: url.clone(),
                token: token.clone(),
            },
            Target::Stdio { config } => Transport::Stdio(Box::new(StdioServer::start(config)?)),
        };
        Ok(Self {
            transport,
            next_id: 0,
            elicitation,
            timeout,
            max_response_bytes: MAX_RESPONSE_BYTES,
        })
    }

    /// The `_meta` every request carries. Requests about a task declare form
    /// elicitation always (the client shows, and can later answer, what a run
    /// asks); a `tools/call` only when it can answer at once, so a call that
    /// cannot is not held for a question before its task exists.
    fn meta(&self, method: &str) -> Value {
        let mut caps = json!({ "extensions": { TASKS_EXTENSION: {} } });
        if self.elicitation || method != "tools/call" {
            caps["elicitation"] = json!({ "form": {} });
        }
        json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientInfo": {
                "name": "taskgate-call", "version": env!("CARGO_PKG_VERSION")
            },
            "io.modelcontextprotocol/clientCapabilities": caps,
        })
    }

    /// Sends one request and returns its result.
    ///
    /// `param_headers` are the `Mcp-Param-*` headers (name without prefix,
    /// value) of a `tools/call`.
    ///
    /// # Errors
    ///
    /// Every way the request can fail, as a [`WireError`].
    pub async fn request(
        &mut self,
        method: &str,
        params: Value,
        param_headers: &[(String, String)],
    ) -> Result<Value, WireError> {
        let timeout = self.timeout;
        self.request_within(method, params, param_headers, timeout)
            .await
    }

    /// As [`Connection::request`], with its own deadline (a `tools/call` of a
    /// synchronous tool may take longer than other requests).
    ///
    /// # Errors
    ///
    /// Every way the request can fail, as a [`WireError`].
    pub async fn request_within(
        &mut self,
        method: &str,
        mut params: Value,
        param_headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<Value, WireError> {
        params["_meta"] = self.meta(method);
        self.next_id += 1;
        let id = self.next_id;
        let name = mcp_name(method, &params);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let max = self.max_response_bytes;
        let message = match &mut self.transport {
            Transport::Http { http, url, token } => {
                let mut req = http
                    .post(url.as_str())
                    .timeout(timeout)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header(header::PROTOCOL_VERSION.as_str(), VERSION)
                    .header(header::METHOD.as_str(), method);
                if let Some(name) = name {
                    req = req.header(header::NAME.as_str(), header_text(&name));
                }
                for (header, value) in param_headers {
                    req = req.header(format!("mcp-param-{header}"), header_text(value));
                }
                if let Some(token) = token {
                    req = req.bearer_auth(token);
                }
                tokio::time::timeout(
                    timeout,
                    http_exchange(req.body(body.to_string()), url, id, timeout, max),
                )
                .await
                .map_err(|_| WireError::Timeout(timeout))??
            }
            Transport::Stdio(server) => {
                tokio::time::timeout(timeout, server.exchange(&body, id, max))
                    .await
                    .map_err(|_| WireError::Timeout(timeout))??
            }
        };
        into_result(sanitize::value(message))
    }
}

/// The `Mcp-Name` a request carries, if any.
fn mcp_name(method: &str, params: &Value) -> Option<String> {
    let field = match method {
        "tools/call" => "name",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params[field].as_str().map(str::to_owned)
}

/// A header value: as is when it is plain visible ASCII, else the
/// `=?base64?…?=` form.
#[must_use]
pub fn header_text(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with("=?");
    if plain {
        value.to_owned()
    } else {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

async fn http_exchange(
    req: reqwest::RequestBuilder,
    url: &str,
    id: u64,
    timeout: Duration,
    max: usize,
) -> Result<Value, WireError> {
    let unreachable = |source: reqwest::Error| {
        if source.is_timeout() {
            WireError::Timeout(timeout)
        } else {
            WireError::Unreachable {
                url: url.to_owned(),
                source,
            }
        }
    };
    let mut response = req.send().await.map_err(unreachable)?;
    let status = response.status().as_u16();
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(WireError::TooLarge(max));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if bytes.len() + chunk.len() > max {
            return Err(WireError::TooLarge(max));
        }
        bytes.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&bytes);
    let message = if sse {
        sse_response(&text, id)
    } else {
        serde_json::from_str::<Value>(&text).ok()
    };
    match message {
        Some(m) if status == 401 && m.get("error").is_some() => Err(WireError::Unauthorized {
            message: sanitize::line(m["error"]["message"].as_str().unwrap_or("unauthorized")),
        }),
        Some(m) if m.get("result").is_some() || m.get("error").is_some() => Ok(m),
        _ => Err(WireError::Http {
            status,
            hint: match status {
                401 => " (unauthorized: pass the token's variable with --token-env)",
                403 => " (forbidden: this Host or Origin is not allowed)",
                404 | 405 => " (is the URL the MCP endpoint, ending in /mcp?)",
                413 => " (the request is too large)",
                _ => "",
            },
        }),
    }
}

/// The response with `id` among the events of an SSE body.
fn sse_response(text: &str, id: u64) -> Option<Value> {
    text.split("\n\n").find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        let message: Value = serde_json::from_str(&data.join("\n")).ok()?;
        (message["id"] == json!(id)).then_some(message)
    })
}

fn into_result(mut message: Value) -> Result<Value, WireError> {
    if let Some(error) = message.get("error") {
        return Err(WireError::Rpc {
            code: error["code"].as_i64().unwrap_or_default(),
            message: error["message"].as_str().unwrap_or("error").to_owned(),
            data: error.get("data").cloned(),
        });
    }
    match message.get_mut("result").map(Value::take) {
        Some(result @ Value::Object(_)) => Ok(result),
        _ => Err(WireError::Malformed(shown(&message.to_string()))),
    }
}

impl StdioServer {
    fn start(config: &std::path::Path) -> Result<Self, WireError> {
        let exe = std::env::current_exe().map_err(|source| WireError::Spawn { source })?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(["serve", "--stdio", "--config"])
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: Ctrl-C in the terminal reaches the
            // client (which may cancel the task through it), not the server.
            .process_group(0)
            .kill_on_drop(true);
        if std::env::var_os("TASKGATE_LOG").is_none() {
            cmd.env("TASKGATE_LOG", "warn");
        }
        let mut child = cmd.spawn().map_err(|source| WireError::Spawn { source })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let keep = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = err.read(&mut buf).await {
                let mut tail = keep.lock().expect("stderr tail");
                tail.extend(&buf[..n]);
                while tail.len() > STDERR_TAIL {
                    tail.pop_front();
                }
            }
        });
        Ok(Self {
            child,
            stdin,
            out: BufReader::new(stdout),
            stderr,
        })
    }

    async fn gone(&mut self) -> WireError {
        // Give its stderr a moment to drain into the tail.
        let _ = tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let tail = self.stderr.lock().expect("stderr tail");
        let bytes: Vec<u8> = tail.iter().copied().collect();
        WireError::ServerGone {
            stderr: sanitize::text(&String::from_utf8_lossy(&bytes)),
        }
    }

    async fn exchange(&mut self, body: &Value, id: u64, max: usize) -> Result<Value, WireError> {
        let mut line = body.to_string();
        line.push('\n');
        if self.stdin.write_all(line.as_bytes()).await.is_err() || self.stdin.flush().await.is_err()
        {
            return Err(self.gone().await);
        }
        loop {
            match read_line_within(&mut self.out, max).await {
                Ok(Some(None)) => return Err(WireError::TooLarge(max)),
                Ok(Some(Some(line))) => {
                    let Ok(message) = serde_json::from_str::<Value>(&line) else {
                        return Err(WireError::Malformed(shown(&line)));
                    };
                    // Notifications (progress) and other ids are not ours.
                    if message["id"] == json!(id) {
                        return Ok(message);
                    }
                }
                Ok(None) | Err(_) => return Err(self.gone().await),
            }
        }
    }
}

/// Unparsable text from the server, cleaned and cut to a length fit for an
/// error line.
fn shown(text: &str) -> String {
    let clean = sanitize::line(text);
    match clean.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &clean[..i]),
        None => clean,
    }
}

/// The next line of `out` (without its line feed): `Some(None)` when it is
/// longer than `max` bytes, `None` at the end of the stream.
async fn read_line_within(
    out: &mut BufReader<ChildStdout>,
    max: usize,
) -> std::io::Result<Option<Option<String>>> {
    let mut line = Vec::new();
    loop {
        let available = out.fill_buf().await?;
        if available.is_empty() {
            return Ok(
                (!line.is_empty()).then(|| Some(String::from_utf8_lossy(&line).into_owned()))
            );
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..take]);
        out.consume(if done { take + 1 } else { take });
        if line.len() > max {
            return Ok(Some(None));
        }
        if done {
            return Ok(Some(Some(String::from_utf8_lossy(&line).into_owned())));
        }
    }
}

/// The `Mcp-Param-*` headers of a `tools/call` of a tool with `schema`.
#[must_use]
pub fn param_headers(schema: &Value, arguments: &Map<String, Value>) -> Vec<(String, String)> {
    let Some(props) = schema["properties"].as_object() else {
        return Vec::new();
    };
    props
        .iter()
        .filter_map(|(prop, s)| {
            let header = s["x-mcp-header"].as_str()?;
            let value = match arguments.get(prop)? {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((header.to_ascii_lowercase(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 10 of the security issue: the bearer token never shows in `Debug`.
    #[test]
    fn debug_never_shows_the_token() {
        let target = Target::Http {
            url: "http://127.0.0.1:1/mcp".into(),
            token: Some("bearer-SECRET-token".into()),
        };
        let text = format!("{target:?}");
        assert!(
            !text.contains("SECRET") && text.contains("<redacted>"),
            "{text}"
        );
        assert!(text.contains("127.0.0.1"), "{text}");
    }

    #[test]
    fn header_values_outside_visible_ascii_are_base64() {
        assert_eq!(header_text("work"), "work");
        assert_eq!(header_text("café"), "=?base64?Y2Fmw6k=?=");
        assert_eq!(header_text(" padded"), "=?base64?IHBhZGRlZA==?=");
    }

    #[test]
    fn sse_bodies_yield_the_response_with_our_id() {
        let body =
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                    event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":1}}\n\n";
        assert_eq!(sse_response(body, 7).unwrap()["result"]["x"], 1);
        assert!(sse_response(body, 8).is_none());
    }

    #[test]
    fn errors_keep_code_and_retry_hint() {
        let e = into_result(json!({ "jsonrpc": "2.0", "id": 1, "error": {
            "code": -32603, "message": "throttled", "data": { "retryable": true, "retryAfterMs": 250 } } }))
        .unwrap_err();
        assert_eq!(e.code(), Some(-32603));
        assert_eq!(e.retry_after(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn param_headers_mirror_marked_arguments() {
        let schema = json!({ "properties": { "region": { "type": "string", "x-mcp-header": "Region" }, "n": { "type": "integer" } } });
        let args = json!({ "region": "eu", "n": 3 });
        assert_eq!(
            param_headers(&schema, args.as_object().unwrap()),
            vec![("region".to_owned(), "eu".to_owned())]
        );
    }
}
