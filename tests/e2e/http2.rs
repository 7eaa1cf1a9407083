//! HTTP/2 without TLS (h2c, prior knowledge) on the MCP port, `server.http2`:
//! - many `subscriptions/listen` streams on one connection (Go's standard
//!   library client, `tests/clients/h2c`), each with its own notifications to
//!   its run's end;
//! - the per-caller bound counts streams: the stream past it is refused and the
//!   others on the connection go on;
//! - a client that opens more streams than `http2_max_concurrent_streams` has
//!   the extra one refused by the protocol (REFUSED_STREAM), the others served;
//! - `:authority` and Origin are held to the Host and Origin rules (curl, which
//!   speaks HTTP/2 through nghttp2);
//! - off by default: a connection that opens with the HTTP/2 preface is closed
//!   unanswered, and HTTP/1.1 is served as before.
//!
//! The refusal of anonymous peers that are not loopback, over HTTP/2, is in
//! `tests/security/front_door.rs` (it needs a network namespace).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{dialect_tools, sse_messages, wait_for, Server, Setup, MODERN};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const LIMIT: Duration = Duration::from_secs(30);
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

/// A server with `server.http2 = true` and `extra` settings (environment).
async fn h2_server(extra: &[(&str, &str)]) -> (Setup, Server) {
    let mut setup = Setup::with_tools(&dialect_tools());
    setup
        .extra_env
        .push(("TASKGATE__SERVER__HTTP2".into(), "true".into()));
    for (k, v) in extra {
        setup.extra_env.push(((*k).into(), (*v).into()));
    }
    let server = Server::start(&setup).await;
    (setup, server)
}

/// Why a tool this test needs is missing: the test is skipped (or fails under
/// `TASKGATE_REQUIRE_E2E=1`).
fn skip(why: &str) {
    assert!(
        std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
        "required (TASKGATE_REQUIRE_E2E=1): {why}"
    );
    eprintln!("skipping: {why}");
}

/// Whether curl here speaks HTTP/2.
fn curl_has_http2() -> bool {
    match std::process::Command::new("curl").arg("-V").output() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).contains("HTTP2") => true,
        Ok(_) => {
            skip("curl here has no HTTP/2");
            false
        }
        Err(e) => {
            skip(&format!("no curl: {e}"));
            false
        }
    }
}

/// The Go client of `tests/clients/h2c` (Go's standard library over h2c),
/// built once per test run; `None` (skipped) without a Go toolchain.
fn h2c_client() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let bin = root.join("target").join("h2c-test-client");
        let out = std::process::Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg("tests/clients/h2c/main.go")
            .current_dir(root)
            .output()
            .map_err(|e| format!("no Go toolchain: {e}"))?;
        if out.status.success() {
            Ok(bin)
        } else {
            Err(format!(
                "go build tests/clients/h2c: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    match built {
        Ok(bin) => Some(bin.clone()),
        Err(why) => {
            skip(why);
            None
        }
    }
}

/// One request of an [`h2c`] run: its body and extra headers; its answer
/// goes to `out` as it arrives.
struct Transfer {
    body: String,
    headers: Vec<(String, String)>,
    out: PathBuf,
}

impl Transfer {
    fn listen(dir: &Path, id: &str, task_id: &str) -> Self {
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": { "notifications": { "taskIds": [task_id] }, "_meta": common::modern_meta(true) },
        });
        let header = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        Self {
            body: body.to_string(),
            headers: vec![
                header("content-type", "application/json"),
                header("accept", "application/json, text/event-stream"),
                header("mcp-protocol-version", MODERN),
                header("mcp-method", "subscriptions/listen"),
            ],
            out: dir.to_path_buf(),
        }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

/// The Go client sending every transfer at once on one HTTP/2 connection;
/// each transfer's answer is written to its own file in `dir`.
async fn h2c(
    client: &Path,
    url: &str,
    dir: &Path,
    transfers: &mut [Transfer],
) -> tokio::process::Child {
    let requests: Vec<Value> = transfers
        .iter_mut()
        .enumerate()
        .map(|(i, t)| {
            t.out = dir.join(i.to_string());
            let headers: serde_json::Map<String, Value> = t
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            json!({ "body": t.body, "headers": headers })
        })
        .collect();
    let mut child = tokio::process::Command::new(client)
        .args(["-url", url, "-out"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the h2c client");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(Value::Array(requests).to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    child
}

/// Waits for the client to end: each request's (HTTP major version, status),
/// in order, and the connections it opened.
async fn h2c_done(child: tokio::process::Child) -> (Vec<(u8, u16)>, u32) {
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("the client ends once the streams do")
        .expect("the client's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "h2c: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ended = Vec::new();
    let mut connections = 0;
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f[0] == "connections" {
            connections = f[1].parse().unwrap();
        } else {
            ended.push((f[1].parse().unwrap(), f[2].parse().unwrap()));
        }
    }
    (ended, connections)
}

/// The listen stream of subscription `id` in `text`: acknowledged, its last
/// notification for `task_id` in `status`, closed by its result.
#[track_caller]
fn assert_stream_ended(text: &str, id: &str, task_id: &str, status: &str) {
    let messages = sse_messages(text);
    assert!(messages.len() >= 3, "ack, notifications, result: {text}");
    assert_eq!(
        messages[0]["method"], "notifications/subscriptions/acknowledged",
        "{text}"
    );
    let closing = messages.last().unwrap();
    assert_eq!(closing["id"], id, "{text}");
    assert_eq!(closing["result"]["_meta"][SUBSCRIPTION_ID], id, "{text}");
    let last = &messages[messages.len() - 2];
    assert_eq!(last["method"], "notifications/tasks", "{text}");
    assert_eq!(last["params"]["_meta"][SUBSCRIPTION_ID], id, "{text}");
    assert_eq!(last["params"]["taskId"], task_id, "{text}");
    assert_eq!(last["params"]["status"], status, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_listen_streams_share_one_connection_and_each_gets_its_own_notifications() {
    let Some(client) = h2c_client() else { return };
    let (_setup, server) = h2_server(&[]).await;
    // HTTP/1.1 is still served beside HTTP/2 on the same port.
    let c = server.client();
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(c.start_task("sleeper", json!({})).await);
    }
    let dir = tempfile::tempdir().unwrap();
    // Two streams per run, each its own subscription.
    let mut transfers: Vec<Transfer> = (0..6)
        .map(|i| Transfer::listen(dir.path(), &format!("s{i}"), &runs[i % 3]))
        .collect();
    let h2c = h2c(&client, &server.url(), dir.path(), &mut transfers).await;
    for t in &transfers {
        wait_for("each stream's first notification", LIMIT, async || {
            let text = t.text();
            text.contains("\"notifications/tasks\"")
                .then_some(())
                .ok_or(text)
        })
        .await;
    }
    for run in &runs {
        c.cancel(run).await;
    }
    let (ended, connections) = h2c_done(h2c).await;
    assert_eq!(ended, vec![(2, 200); 6]);
    assert_eq!(connections, 1, "every stream on one connection");
    for (i, t) in transfers.iter().enumerate() {
        assert_stream_ended(&t.text(), &format!("s{i}"), &runs[i % 3], "cancelled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_past_the_callers_bound_is_refused_and_the_others_on_its_connection_go_on() {
    let Some(client) = h2c_client() else { return };
    let (_setup, server) = h2_server(&[("TASKGATE__SERVER__MAX_WAITS_PER_CALLER", "2")]).await;
    let c = server.client();
    let run = c.start_task("sleeper", json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let mut transfers: Vec<Transfer> = (0..3)
        .map(|i| Transfer::listen(dir.path(), &format!("s{i}"), &run))
        .collect();
    let h2c = h2c(&client, &server.url(), dir.path(), &mut transfers).await;
    // Two streams open, one refused: which one is the order they arrived in.
    let refused = wait_for("two streams open and one refused", LIMIT, async || {
        let texts: Vec<String> = transfers.iter().map(Transfer::text).collect();
        let open = texts
            .iter()
            .filter(|t| t.contains("\"notifications/tasks\""))
            .count();
        let refused: Vec<usize> = (0..3).filter(|&i| texts[i].contains("\"error\"")).collect();
        (open == 2 && refused.len() == 1)
            .then(|| refused[0])
            .ok_or_else(|| format!("{texts:?}"))
    })
    .await;
    let error: Value = serde_json::from_str(&transfers[refused].text()).unwrap();
    common::assert_bound_refusal(&error["error"], "max_waits_per_caller");
    c.cancel(&run).await;
    let (ended, connections) = h2c_done(h2c).await;
    assert_eq!(connections, 1, "{ended:?}");
    assert!(ended.iter().all(|e| e.0 == 2), "{ended:?}");
    for (i, t) in transfers.iter().enumerate() {
        if i != refused {
            assert_stream_ended(&t.text(), &format!("s{i}"), &run, "cancelled");
        }
    }
}

/// curl over HTTP/2 (prior knowledge): POSTs `body` with `headers`; the HTTP
/// version, the status and the body (with curl's errors).
///
/// A request refused before its body is read is sent without one: its answer
/// is then followed by RST_STREAM(NO_ERROR) (RFC 9113, 8.1: "stop sending"),
/// which curl 7.88 reports as an error when it arrives before its upload ended.
async fn curl_post(url: &str, headers: &[&str], body: &str) -> (String, String, String) {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "--http2-prior-knowledge", "--max-time", "20"]);
    cmd.args(["-H", "content-type: application/json"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    cmd.args([
        "--data-binary",
        body,
        "-w",
        "\n%{http_version} %{http_code}",
        url,
    ]);
    let out = cmd.output().await.expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (version, status) = tail.split_once(' ').unwrap_or(("", tail));
    let stderr = String::from_utf8_lossy(&out.stderr);
    (
        version.to_owned(),
        status.to_owned(),
        format!("{body}{stderr}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_and_origin_rules_hold_for_http2_requests() {
    if !curl_has_http2() {
        return;
    }
    let (_setup, server) = h2_server(&[]).await;
    let (version, status, body) = curl_post(&server.url(), &[], PING).await;
    assert_eq!((version.as_str(), status.as_str()), ("2", "200"), "{body}");
    assert!(body.contains("\"result\""), "{body}");
    // curl sends a Host header over HTTP/2 as `:authority`.
    let (version, status, body) = curl_post(&server.url(), &["host: evil.example"], "").await;
    assert_eq!((version.as_str(), status.as_str()), ("2", "403"), "{body}");
    assert!(body.contains("Host not allowed"), "{body}");
    let (version, status, body) =
        curl_post(&server.url(), &["origin: http://evil.example"], "").await;
    assert_eq!((version.as_str(), status.as_str()), ("2", "403"), "{body}");
    assert!(body.contains("Origin not allowed"), "{body}");
}

// A minimal HTTP/2 client written frame by frame: it opens more streams than
// the server allows, which a well-behaved client (curl, Go) never does.

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const REFUSED_STREAM: u32 = 0x7;

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

async fn write_frame(
    conn: &mut tokio::net::TcpStream,
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &[u8],
) {
    let len = payload.len() as u32;
    let mut frame = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    conn.write_all(&frame).await.unwrap();
}

async fn read_frame(conn: &mut tokio::net::TcpStream) -> Option<Frame> {
    let mut head = [0u8; 9];
    match tokio::time::timeout(LIMIT, conn.read_exact(&mut head)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => return None,
        Err(_) => panic!("no HTTP/2 frame within {LIMIT:?}"),
    }
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0; len];
    conn.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// A header block of literal fields, never indexed (RFC 7541, 6.2.3), names
/// and values shorter than 127 bytes.
fn header_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x10);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// Reads frames until `want` says it is the one, answering nothing; panics
/// when the connection ends or goes away first.
async fn frame_until(conn: &mut tokio::net::TcpStream, want: impl Fn(&Frame) -> bool) -> Frame {
    loop {
        let frame = read_frame(conn).await.expect("the connection stays open");
        assert_ne!(frame.kind, GOAWAY, "the server ended the connection");
        if want(&frame) {
            return frame;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_max_concurrent_are_refused_by_the_protocol_and_the_others_served() {
    let (_setup, server) =
        h2_server(&[("TASKGATE__SERVER__HTTP2_MAX_CONCURRENT_STREAMS", "2")]).await;
    let authority = format!("127.0.0.1:{}", server.port);
    let mut conn = tokio::net::TcpStream::connect(&authority).await.unwrap();
    conn.write_all(PREFACE).await.unwrap();
    write_frame(&mut conn, SETTINGS, 0, 0, &[]).await;
    // The server announces its limit, and applies it once acknowledged.
    let settings = frame_until(&mut conn, |f| f.kind == SETTINGS && f.flags & ACK == 0).await;
    let announced: Vec<(u16, u32)> = settings
        .payload
        .chunks(6)
        .map(|s| {
            (
                u16::from_be_bytes([s[0], s[1]]),
                u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
            )
        })
        .collect();
    assert!(
        announced.contains(&(SETTINGS_MAX_CONCURRENT_STREAMS, 2)),
        "{announced:?}"
    );
    write_frame(&mut conn, SETTINGS, ACK, 0, &[]).await;
    frame_until(&mut conn, |f| f.kind == SETTINGS && f.flags & ACK != 0).await;

    // Three requests whose bodies have not come yet: each stays open.
    let block = header_block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/mcp"),
        (":authority", &authority),
        ("content-type", "application/json"),
    ]);
    for stream in [1, 3, 5] {
        write_frame(&mut conn, HEADERS, END_HEADERS, stream, &block).await;
    }
    let reset = frame_until(&mut conn, |f| f.kind == RST_STREAM).await;
    assert_eq!(reset.stream, 5, "the third stream is the one refused");
    assert_eq!(
        u32::from_be_bytes(reset.payload[..4].try_into().unwrap()),
        REFUSED_STREAM
    );
    // The two admitted streams are served on the same connection.
    for stream in [1, 3] {
        write_frame(&mut conn, DATA, END_STREAM, stream, PING.as_bytes()).await;
        let answer = frame_until(&mut conn, |f| f.kind == DATA && f.stream == stream).await;
        let text = String::from_utf8_lossy(&answer.payload);
        assert!(text.contains("\"result\""), "stream {stream}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default_an_http2_preface_is_closed_unanswered() {
    let setup = Setup::with_tools(&dialect_tools());
    let server = Server::start(&setup).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    // The preface and an empty SETTINGS frame, as an HTTP/2 client opens.
    let mut opening = PREFACE.to_vec();
    opening.extend_from_slice(&[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]);
    let _ = conn.write_all(&opening).await;
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, conn.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection")
        .ok();
    assert!(
        answer.is_empty(),
        "nothing is answered: {:?}",
        String::from_utf8_lossy(&answer)
    );
    // HTTP/1.1 is served as ever.
    let tools = server.client().request("tools/list", json!({})).await;
    assert!(tools.is_ok(), "{:?}", tools.response());
}
