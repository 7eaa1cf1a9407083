//! `taskgate_logs` through the built binary: an exec tool that prints a line a
//! second is read while it runs, each line once and in order, by following
//! the cursor; every client generation gets the tool; a forged or altered
//! cursor is -32602 and reaches no engine; another caller's task reads as
//! unknown.

use crate::common;

use std::time::Duration;

use common::{metric_sum, wait_for, Bearer, Legacy, Options, Reply, Server, Setup, Tool, SEP1391};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

const LINES_SCHEMA: &str = r#"{ type = "object", properties = { lines = { type = "integer", minimum = 1, maximum = 20 }, go = { type = "string" } } }"#;

fn lines_tool() -> Tool {
    Tool::new("lines", "async", "lines.sh", LINES_SCHEMA).legacy("handles")
}

fn setup_with(bearer: Vec<Bearer>) -> Setup {
    Setup::with(Options {
        bearer,
        extra: lines_tool().toml(),
        ..Options::default()
    })
}

/// One page of `taskgate_logs`.
#[derive(Debug)]
struct Page {
    lines: Vec<(String, String)>,
    cursor: String,
    complete: bool,
}

/// Reads a page from `structuredContent`, or, for clients without it, from
/// the text (`[source] text` lines, then `cursor: …`).
fn page(reply: &Reply) -> Page {
    assert!(reply.is_ok(), "{}", reply.raw);
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    if let Some(s) = result.get("structuredContent") {
        return Page {
            lines: s["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l["source"].as_str().unwrap().to_owned(),
                        l["text"].as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
            cursor: s["cursor"].as_str().unwrap().to_owned(),
            complete: s["complete"].as_bool().unwrap(),
        };
    }
    let text = result["content"][0]["text"].as_str().unwrap();
    let mut lines = Vec::new();
    let mut cursor = None;
    let mut complete = false;
    for l in text.lines() {
        if let Some(c) = l.strip_prefix("cursor: ") {
            cursor = Some(c.to_owned());
        } else if let Some(rest) = l.strip_prefix('[') {
            let (source, text) = rest.split_once("] ").unwrap();
            lines.push((source.to_owned(), text.to_owned()));
        } else if l.starts_with("(the run has ended") {
            complete = true;
        }
    }
    Page {
        lines,
        cursor: cursor.expect("a cursor line"),
        complete,
    }
}

fn logs_args(task: &str, cursor: Option<&str>, limit: Option<u64>) -> Value {
    let mut args = json!({ "taskId": task });
    if let Some(c) = cursor {
        args["cursor"] = json!(c);
    }
    if let Some(n) = limit {
        args["limit"] = json!(n);
    }
    args
}

/// Follows the cursor until `enough(all lines so far)` holds, collecting
/// every page's lines; returns them and the last cursor.
async fn follow(
    mut call: impl AsyncFnMut(Value) -> Reply,
    task: &str,
    mut cursor: Option<String>,
    limit: Option<u64>,
    enough: impl Fn(&[(String, String)], bool) -> bool,
) -> (Vec<(String, String)>, String) {
    let mut all = Vec::new();
    wait_for("the expected log lines", LIMIT, async || {
        let p = page(&call(logs_args(task, cursor.as_deref(), limit)).await);
        if let Some(n) = limit {
            assert!(p.lines.len() <= n as usize, "{p:?}");
        }
        all.extend(p.lines);
        cursor = Some(p.cursor);
        if enough(&all, p.complete) {
            Ok(())
        } else {
            Err(format!("{all:?}"))
        }
    })
    .await;
    (all, cursor.unwrap())
}

fn stdout(lines: &[(String, String)]) -> Vec<&str> {
    lines
        .iter()
        .filter(|(s, _)| s == "stdout")
        .map(|(_, t)| t.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_lines_are_read_while_the_run_runs_each_once_in_order() {
    let setup = setup_with(Vec::new());
    let server = Server::start(&setup).await;
    let client = server.client();
    let go = setup.dir.path().join("go");
    let task = client
        .start_task("lines", json!({ "lines": 3, "go": go.to_str().unwrap() }))
        .await;

    let tools = client.request("tools/list", json!({})).await;
    let entry = tools.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "taskgate_logs")
        .cloned()
        .expect("taskgate_logs is listed");
    assert_eq!(entry["inputSchema"]["required"], json!(["taskId"]));

    // One line a page: the three lines arrive while the run waits for `go`.
    let call = async |args: Value| client.call("taskgate_logs", args).await;
    let (first, cursor) = follow(call, &task, None, Some(1), |all, _| stdout(all).len() >= 3).await;
    assert_eq!(stdout(&first), ["line 1", "line 2", "line 3"], "{first:?}");
    let task_now = client.get(&task).await;
    assert_eq!(
        task_now["status"], "working",
        "read while it runs: {task_now}"
    );

    std::fs::write(&go, b"").unwrap();
    let call = async |args: Value| client.call("taskgate_logs", args).await;
    let (rest, end) = follow(call, &task, Some(cursor), None, |_, complete| complete).await;
    let mut all = first.clone();
    all.extend(rest);
    assert_eq!(
        stdout(&all),
        ["line 1", "line 2", "line 3", "done"],
        "each line once, in order: {all:?}"
    );
    let stderr: Vec<&(String, String)> = all.iter().filter(|(s, _)| s == "stderr").collect();
    assert_eq!(
        stderr,
        [&("stderr".to_owned(), "note on stderr".to_owned())]
    );
    client.wait_terminal(&task, LIMIT).await;

    // From the last cursor: nothing more, ever.
    let last = page(
        &client
            .call("taskgate_logs", logs_args(&task, Some(&end), None))
            .await,
    );
    assert!(last.lines.is_empty() && last.complete, "{last:?}");
    // Without a cursor: everything again, from the start.
    let again = page(
        &client
            .call("taskgate_logs", logs_args(&task, None, None))
            .await,
    );
    assert_eq!(stdout(&again.lines), ["line 1", "line 2", "line 3", "done"]);
    assert!(again.complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_generation_reads_logs() {
    let setup = setup_with(Vec::new());
    let server = Server::start(&setup).await;
    let args = json!({ "lines": 1 });
    let done =
        |all: &[(String, String)], complete: bool| complete && stdout(all) == ["line 1", "done"];

    // 2025-11-25 tasks: the task id.
    let tasks = Legacy::connect(&server.url(), "2025-11-25", json!({ "tasks": {} })).await;
    let task = tasks.start_task("lines", args.clone()).await;
    assert!(names_of(&tasks).await.contains(&"taskgate_logs".to_owned()));
    let call = async |a: Value| tasks.call("taskgate_logs", a).await;
    follow(call, &task, None, None, done).await;

    // SEP-1391: the operation token.
    let mut ops = server.legacy();
    ops.initialize("2025-06-18", json!({ "experimental": { SEP1391: {} } }))
        .await;
    let reply = ops.call_op("lines", args.clone(), "op-logs-1", 600).await;
    assert!(reply.is_ok(), "{}", reply.raw);
    let call = async |a: Value| ops.call("taskgate_logs", a).await;
    follow(call, "op-logs-1", None, None, done).await;

    // A plain 2025-03-26 client (no structured content): the handle, and the
    // cursor from the text.
    let mut old = server.legacy();
    old.initialize("2025-03-26", json!({})).await;
    let started = old.call("lines", args.clone()).await;
    let text = started.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let handle = text
        .split_whitespace()
        .find(|w| w.starts_with("tg3."))
        .unwrap()
        .trim_end_matches('.')
        .to_owned();
    let call = async |a: Value| old.call("taskgate_logs", a).await;
    let (_, cursor) = follow(call, &handle, None, None, done).await;
    let last = page(
        &old.call("taskgate_logs", logs_args(&handle, Some(&cursor), None))
            .await,
    );
    assert!(last.lines.is_empty() && last.complete, "{last:?}");
}

async fn names_of(c: &Legacy) -> Vec<String> {
    c.tools()
        .await
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Flips one character of the payload of a sealed value.
fn altered(sealed: &str) -> String {
    let mut chars: Vec<char> = sealed.chars().collect();
    let i = chars.len() * 2 / 3;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

fn logs_calls(metrics: &str) -> u64 {
    metric_sum(
        metrics,
        "taskgate_engine_calls_total",
        &[("operation", "logs")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_altered_and_foreign_cursors_are_invalid_params() {
    let setup = setup_with(Vec::new());
    let server = Server::start(&setup).await;
    let client = server.client();
    let one = client.start_task("lines", json!({ "lines": 1 })).await;
    let other = client.start_task("lines", json!({ "lines": 1 })).await;
    let first = page(
        &client
            .call("taskgate_logs", logs_args(&one, None, None))
            .await,
    );
    let of_other = page(
        &client
            .call("taskgate_logs", logs_args(&other, None, None))
            .await,
    );
    let before = logs_calls(&server.metrics().await);

    for (why, cursor) in [
        ("made up", "o0.e0".to_owned()),
        ("forged", format!("tg3.k1.{}", "A".repeat(60))),
        ("altered", altered(&first.cursor)),
        ("another run's", of_other.cursor.clone()),
        ("empty", String::new()),
    ] {
        let reply = client
            .call("taskgate_logs", logs_args(&one, Some(&cursor), None))
            .await;
        assert_eq!(reply.code(), -32602, "{why}: {}", reply.raw);
        assert!(
            reply.message().starts_with("cursor is invalid"),
            "{why}: {}",
            reply.raw
        );
    }
    for (why, args) in [
        ("no taskId", json!({})),
        ("limit 0", json!({ "taskId": one, "limit": 0 })),
        ("limit too big", json!({ "taskId": one, "limit": 1001 })),
        ("cursor not a string", json!({ "taskId": one, "cursor": 7 })),
    ] {
        let reply = client.call("taskgate_logs", args).await;
        assert_eq!(reply.code(), -32602, "{why}: {}", reply.raw);
    }
    assert_eq!(
        logs_calls(&server.metrics().await),
        before,
        "a refused cursor reaches no engine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_callers_task_reads_as_unknown() {
    let (alice, bob) = (Bearer::new("alice"), Bearer::new("bob"));
    let setup = setup_with(vec![alice.clone(), bob.clone()]);
    let server = Server::start(&setup).await;
    let as_alice = server.client().with_token(&alice.token);
    let as_bob = server.client().with_token(&bob.token);
    let task = as_alice.start_task("lines", json!({ "lines": 1 })).await;
    let mine = page(
        &as_alice
            .call("taskgate_logs", logs_args(&task, None, None))
            .await,
    );

    let unknown = as_bob
        .call("taskgate_logs", logs_args("tsk_unknown", None, None))
        .await;
    let foreign = as_bob
        .call("taskgate_logs", logs_args(&task, None, None))
        .await;
    let foreign_cursor = as_bob
        .call("taskgate_logs", logs_args(&task, Some(&mine.cursor), None))
        .await;
    for reply in [&unknown, &foreign, &foreign_cursor] {
        assert_eq!(reply.code(), -32602, "{}", reply.raw);
        assert_eq!(reply.error(), unknown.error(), "no oracle: {}", reply.raw);
    }
    assert_eq!(
        unknown.error()["message"],
        "Failed to retrieve task: Task not found"
    );
}
