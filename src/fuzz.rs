//! Front-door fuzzing: structure-aware generators of bad JSON-RPC — malformed
//! bytes, truncated messages, deep nesting, huge numbers, and well-formed
//! envelopes whose members have the wrong types — thrown at both transports
//! in-process (the HTTP router and a stdio connection) for every method of
//! every dialect. Each case must be answered within a deadline, with a
//! JSON-RPC error or a valid answer, without a panic, and without any engine
//! call (the gateway's meter counts every call below the deadline layer).
//!
//! Every generated case is invalid by construction: tool arguments never fit a
//! schema, handles and tokens are never well-formed, so no case may start,
//! read or locate a run. `TASKGATE_FUZZ_CASES` sets the cases per property
//! (default 256, well under a second); set it higher to search longer.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

use crate::core::Gateway;

/// How long one case may take before it counts as a hang.
const CASE_DEADLINE: Duration = Duration::from_secs(10);

/// Every method some dialect serves, and a few no dialect does.
const METHODS: &[&str] = &[
    "server/discover",
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
    "tools/async/status",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "resources/read",
    "",
];

/// Tool names worth calling: real ones (long-running, synchronous, the legacy
/// companions of `handles`) and unknown ones.
const TOOLS: &[&str] = &[
    "work",
    "quick",
    "taskgate_task_status",
    "taskgate_task_result",
    "nope",
];

fn cases() -> u32 {
    std::env::var("TASKGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// A gateway whose exec tools all require a string `label` matching
/// `^[a-z]+$`, whose supervisor could not run anyway (`/bin/false`).
async fn gateway(dir: &std::path::Path) -> Arc<Gateway> {
    let spool = dir.join("spool");
    let tool = |name: &str, mode: &str, extra: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\nengine = \"local\"\nmode = \"{mode}\"\n{extra}\
             input_schema = {{ type = \"object\", required = [\"label\"], additionalProperties = false, \
             properties = {{ label = {{ type = \"string\", pattern = \"^[a-z]+$\" }} }} }}\n\
             target = {{ command = [\"/bin/true\"] }}\n\n"
        )
    };
    let text = format!(
        "[keys]\nseal = [{{ id = \"k\", dev_secret = \"pMB786Hyqn13qKAg6PJpP+906egOk+Zaf0+qlrAiAeU=\" }}]\n\n\
         [engines.local]\nkind = \"exec\"\nspool_dir = \"{}\"\nsupervisor = [\"/bin/false\"]\n\n{}{}{}",
        spool.display(),
        tool("work", "hybrid", "legacy = \"handles\"\n"),
        tool("quick", "sync", ""),
        tool("later", "async", ""),
    );
    let path = dir.join("fuzz.toml");
    std::fs::write(&path, text).unwrap();
    Arc::new(crate::load(&path).await.expect("the fuzz config loads"))
}

/// Any JSON value, nested a little.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_/]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value that is not a string: where a string is required, always wrong.
fn not_a_string() -> impl Strategy<Value = Value> {
    any_json().prop_filter("not a string", |v| !v.is_string())
}

/// A string no sealed handle or client token can be.
fn bad_handle() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[ -~]{0,40}".prop_map(Value::String),
        "tg[12]\\.k\\.[A-Za-z0-9_-]{0,120}".prop_map(Value::String),
        not_a_string(),
    ]
}

/// Tool arguments that fail every tool's schema.
fn bad_arguments() -> impl Strategy<Value = Value> {
    prop_oneof![
        // Not an object at all.
        any_json().prop_filter("not an object", |v| !v.is_object() && !v.is_null()),
        // No label.
        prop::collection::btree_map("[a-km-z]{1,6}", any_json(), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        // A label of the wrong type.
        not_a_string().prop_map(|v| json!({ "label": v })),
        // A label that misses the pattern.
        "[A-Z0-9 ]{0,8}".prop_map(|s| json!({ "label": s })),
        // A huge, deeply nested label.
        (1usize..200).prop_map(|depth| json!({ "label": nested(depth) })),
    ]
}

/// `[[[…1…]]]`, `depth` deep.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| Value::Array(vec![inner]))
}

/// Numbers JSON allows and machines do not hold.
fn huge_number() -> impl Strategy<Value = String> {
    prop_oneof![
        "[1-9][0-9]{20,60}".prop_map(|s| s),
        "-[1-9][0-9]{20,60}".prop_map(|s| s),
        "[1-9]e[3-9][0-9]{2}".prop_map(|s| s),
        "-?0\\.[0-9]{1,5}e-[3-9][0-9]{2}".prop_map(|s| s),
        Just("1.7976931348623157e309".to_owned()),
    ]
}

/// `_meta` of a 2026-07-28 request with or without the tasks extension and
/// elicitation, or a `_meta` of the wrong shape, or none (a legacy message).
fn meta() -> impl Strategy<Value = Option<Value>> {
    let caps = prop_oneof![
        Just(json!({})),
        Just(json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } })),
        Just(json!({ "extensions": { "io.modelcontextprotocol/tasks": {} }, "elicitation": {} })),
        not_a_string().prop_filter("not an object", |v| !v.is_object()),
    ];
    prop_oneof![
        Just(None),
        caps.prop_map(|c| Some(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": c,
        }))),
        any_json().prop_map(Some),
    ]
}

/// Params of `method` whose members are wrong: bad handles, bad arguments,
/// wrong types everywhere a dialect reads something.
fn bad_params(method: &'static str) -> BoxedStrategy<Value> {
    let handle_params = || {
        (bad_handle(), any_json(), any_json()).prop_map(|(h, responses, extra)| {
            json!({ "taskId": h, "inputResponses": responses, "extra": extra })
        })
    };
    match method {
        "tools/call" => (
            prop::sample::select(TOOLS),
            bad_arguments(),
            prop::option::of(any_json()),
            prop::option::of(bad_handle()),
        )
            .prop_map(|(name, arguments, task, token)| {
                let mut p = json!({ "name": name, "arguments": arguments });
                if let Some(t) = task {
                    p["task"] = t;
                }
                if let Some(t) = token {
                    p["operation"] = json!({ "token": t });
                    p["requestState"] = p["operation"]["token"].clone();
                }
                p
            })
            .boxed(),
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result" => handle_params().boxed(),
        "tools/async/status" => bad_handle()
            .prop_filter("not a string", |v| !v.is_string())
            .prop_map(|t| json!({ "token": t, "operation": { "token": t } }))
            .boxed(),
        "notifications/cancelled" => not_a_string()
            .prop_map(|t| json!({ "requestId": t, "_operation": { "token": t } }))
            .boxed(),
        _ => any_json()
            .prop_filter("no stray token", |v| !v.to_string().contains("token"))
            .boxed(),
    }
}

/// One message as bytes, and the method it names (for the `Mcp-Method` header).
#[derive(Clone)]
struct Case {
    body: Vec<u8>,
    method: &'static str,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = String::from_utf8_lossy(&self.body);
        let shown: String = text.chars().take(300).collect();
        write!(f, "{} bytes: {shown}", self.body.len())
    }
}

/// A well-formed envelope of `method` with wrong members and a random id.
fn envelope(method: &'static str) -> impl Strategy<Value = Value> {
    (
        bad_params(method),
        meta(),
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            "[a-z0-9-]{0,8}".prop_map(Value::String),
            Just(Value::Null),
            any_json(),
        ],
        prop::bool::weighted(0.9),
    )
        .prop_map(move |(mut params, meta, id, with_id)| {
            if let (Some(m), Some(p)) = (meta, params.as_object_mut()) {
                p.insert("_meta".into(), m);
            }
            let mut message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
            if with_id {
                message["id"] = id;
            }
            message
        })
}

/// Every kind of bad message.
fn bad_message() -> impl Strategy<Value = Case> {
    let method = || prop::sample::select(METHODS);
    prop_oneof![
        // Wrong-typed members in a well-formed envelope.
        4 => method().prop_flat_map(|m| envelope(m).prop_map(move |v| Case { body: v.to_string().into_bytes(), method: m })),
        // Truncated: a strict prefix of a message (never valid JSON).
        2 => (method().prop_flat_map(envelope), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
            let text = v.to_string();
            let at = cut.index(text.len().max(1));
            Case { body: text.as_bytes()[..at].to_vec(), method: "" }
        }),
        // Deeply nested, past any parser's recursion limit or just deep.
        1 => (1usize..5000).prop_map(|depth| {
            let mut body = vec![b'['; depth];
            body.extend(std::iter::repeat_n(b']', depth));
            Case { body, method: "" }
        }),
        1 => (method(), 100usize..3000).prop_map(|(m, depth)| {
            let mut params = "{\"a\":".repeat(depth);
            params.push('1');
            params.push_str(&"}".repeat(depth));
            let body = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"{m}\",\"params\":{params}}}");
            Case { body: body.into_bytes(), method: m }
        }),
        // Huge numbers as the id, and as a tool argument.
        1 => (method(), huge_number()).prop_map(|(m, n)| {
            let body = format!("{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"{m}\",\"params\":{{\"name\":\"work\",\"arguments\":{{\"label\":{n}}},\"taskId\":{n}}}}}");
            Case { body: body.into_bytes(), method: m }
        }),
        // Wrong envelopes: jsonrpc, method and params of the wrong type.
        1 => (any_json(), any_json(), any_json()).prop_map(|(j, m, p)| {
            let body = json!({ "jsonrpc": j, "id": 1, "method": m, "params": p }).to_string();
            Case { body: body.into_bytes(), method: "" }
        }),
        // Bytes.
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|body| Case { body, method: "" }),
    ]
}

/// True when `v` is one JSON-RPC response: `jsonrpc` 2.0 and exactly one of
/// `result` or an `error` with an integer code and a message.
fn is_response(v: &Value) -> bool {
    let error_ok = v.get("error").is_some_and(|e| {
        e.get("code").is_some_and(Value::is_i64) && e.get("message").is_some_and(Value::is_string)
    });
    v["jsonrpc"] == "2.0"
        && (v.get("result").is_some() != v.get("error").is_some())
        && (v.get("result").is_some() || error_ok)
}

fn check_http(status: u16, body: &[u8]) -> Result<(), String> {
    if !matches!(status, 200 | 202 | 400 | 403 | 404 | 405 | 406 | 413 | 415) {
        return Err(format!("unexpected HTTP status {status}"));
    }
    if body.is_empty() {
        return if status == 202 {
            Ok(())
        } else {
            Err(format!("{status} without a body"))
        };
    }
    // A stream (a legacy request that may stream): its last event is the answer.
    let sse = String::from_utf8_lossy(body);
    let last_event = sse.lines().rev().find_map(|l| l.strip_prefix("data: "));
    let body = match last_event {
        Some(data) if sse.starts_with("event:") => data.as_bytes(),
        _ => body,
    };
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(body)))?;
    let ok = match &v {
        Value::Array(items) => !items.is_empty() && items.iter().all(is_response),
        one => is_response(one),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("not a JSON-RPC response: {v}"))
    }
}

async fn post(app: &axum::Router, case: &Case, modern_headers: bool) -> (u16, Vec<u8>) {
    use tower::ServiceExt as _;
    let mut req = axum::http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("host", "127.0.0.1:8808");
    if modern_headers {
        req = req
            .header(crate::rpc::header::PROTOCOL_VERSION, "2026-07-28")
            .header(crate::rpc::header::METHOD, case.method);
    }
    let resp = app
        .clone()
        .oneshot(req.body(axum::body::Body::from(case.body.clone())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 8 << 20)
        .await
        .unwrap();
    (status, bytes.to_vec())
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// A runtime and a gateway over a fresh spool folder (kept alive by the
/// returned guard) for one transport's property test.
fn fixture() -> (tokio::runtime::Runtime, tempfile::TempDir, Arc<Gateway>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = rt.block_on(gateway(dir.path()));
    (rt, dir, gw)
}

#[test]
fn http_answers_every_bad_message_with_a_json_rpc_error_and_no_engine_call() {
    let (rt, dir, gw) = fixture();
    let app = crate::transport::http::router(gw.clone());
    runner()
        .run(&(bad_message(), any::<bool>()), |(case, modern_headers)| {
            let before = gw.meter.calls();
            let (status, body) = rt
                .block_on(async {
                    tokio::time::timeout(CASE_DEADLINE, post(&app, &case, modern_headers)).await
                })
                .map_err(|_| TestCaseError::fail("no answer within the deadline"))?;
            check_http(status, &body).map_err(TestCaseError::fail)?;
            prop_assert_eq!(
                gw.meter.calls(),
                before,
                "an engine was called for {:?}",
                String::from_utf8_lossy(&case.body)
            );
            Ok(())
        })
        .unwrap();
    assert!(
        std::fs::read_dir(dir.path().join("spool")).map_or(true, |mut d| d
            .all(|e| e.unwrap().file_name() == ".staging")),
        "no run folder"
    );
}

#[test]
fn stdio_answers_every_bad_message_with_a_json_rpc_error_and_no_engine_call() {
    let (rt, _spool, gw) = fixture();
    runner()
        .run(&bad_message(), |case| {
            let before = gw.meter.calls();
            // One line per message: a newline inside would make two.
            let mut line: Vec<u8> = case
                .body
                .iter()
                .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
                .collect();
            line.push(b'\n');
            // A connection of its own: the message, then the end of the input;
            // the server answers, finishes what it started and closes its output.
            let answers = rt.block_on(async {
                tokio::time::timeout(CASE_DEADLINE, async {
                    let (client, server) = tokio::io::duplex(1 << 16);
                    let (server_in, server_out) = tokio::io::split(server);
                    let serving = tokio::spawn(crate::transport::stdio::serve(
                        gw.clone(),
                        server_in,
                        server_out,
                    ));
                    let (client_in, mut client_out) = tokio::io::split(client);
                    client_out.write_all(&line).await.unwrap();
                    client_out.shutdown().await.unwrap();
                    let mut lines = tokio::io::BufReader::new(client_in).lines();
                    let mut seen = Vec::new();
                    while let Some(l) = lines.next_line().await.unwrap() {
                        seen.push(serde_json::from_str(&l).unwrap_or(Value::String(l)));
                    }
                    (seen, serving.await)
                })
                .await
            });
            let (answers, served) =
                answers.map_err(|_| TestCaseError::fail("no answer within the deadline"))?;
            prop_assert!(
                matches!(served, Ok(Ok(()))),
                "the stdio server failed: {:?}",
                served
            );
            prop_assert!(
                answers.len() <= 1,
                "one message, one answer at most: {:?}",
                answers
            );
            for a in &answers {
                prop_assert!(is_response(a), "not a JSON-RPC response: {}", a);
            }
            prop_assert_eq!(gw.meter.calls(), before, "an engine was called");
            Ok(())
        })
        .unwrap();
}
