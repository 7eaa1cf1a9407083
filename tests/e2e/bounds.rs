//! The front door's bounds, through the binary: a batch longer than
//! `server.max_batch` is refused whole and serves none of its entries; a
//! caller past `server.max_waits_per_caller`, and any request past
//! `server.max_waits`, is refused at once with a retryable error before its run
//! starts; the entries of a request past `server.max_engine_calls` get a
//! retryable error and reach no engine; a client too slow with its headers
//! (`server.header_read_timeout`) or its body (`server.body_read_timeout`) is
//! disconnected.

use crate::common;

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use common::{assert_bound_refusal, wait_for, Legacy, Server, Setup};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

fn bounded() -> Setup {
    let mut setup = Setup::new();
    setup.extra_env = vec![
        ("TASKGATE__SERVER__MAX_BATCH".into(), "3".into()),
        ("TASKGATE__SERVER__MAX_WAITS_PER_CALLER".into(), "1".into()),
    ];
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_max_batch_is_refused_whole() {
    let setup = bounded();
    let server = Server::start(&setup).await;
    let client = server.client();
    let call = |id: u64| {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "work", "arguments": { "label": "batch", "seconds": 0 } } })
    };
    let headers = [("mcp-protocol-version", "2025-03-26".to_owned())];

    let long: Vec<Value> = (1..=4).map(call).collect();
    let refused = client
        .post_raw(&headers, serde_json::to_vec(&long).unwrap())
        .await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert_eq!(refused.body["error"]["code"], -32600, "{:?}", refused.body);
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("server.max_batch"), "{message}");
    assert!(setup.runs().is_empty(), "no entry of a refused batch ran");
    assert_eq!(server.engine_calls().await, 0);

    let short: Vec<Value> = (1..=3).map(call).collect();
    let served = client
        .post_raw(&headers, serde_json::to_vec(&short).unwrap())
        .await;
    assert_eq!(served.status, 200, "{:?}", served.body);
    assert_eq!(
        served.body.as_array().map(Vec::len),
        Some(3),
        "{:?}",
        served.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_past_max_waits_per_caller_is_refused_before_its_run_starts() {
    let setup = bounded();
    let server = Server::start(&setup).await;
    let url = server.url();
    let waiting = tokio::spawn(async move {
        let c = Legacy::connect(&url, "2025-06-18", json!({})).await;
        c.call("work", json!({ "label": "first", "seconds": 20 }))
            .await
    });
    wait_for("the first call's run", LIMIT, || {
        let runs = setup.runs().len();
        async move { (runs == 1).then_some(()) }
    })
    .await;

    let c = Legacy::connect(&server.url(), "2025-06-18", json!({})).await;
    let refused = c
        .call("work", json!({ "label": "second", "seconds": 1 }))
        .await;
    assert_bound_refusal(refused.error(), "server.max_waits_per_caller");
    assert_eq!(setup.runs().len(), 1, "the refused call started nothing");
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_max_waits_are_refused_before_their_runs_start() {
    let mut setup = Setup::new();
    // The per-caller bound stays far away: only the total can refuse.
    setup.extra_env = vec![("TASKGATE__SERVER__MAX_WAITS".into(), "2".into())];
    let server = Server::start(&setup).await;
    let mut waiting = Vec::new();
    for label in ["first", "second"] {
        let url = server.url();
        waiting.push(tokio::spawn(async move {
            let c = Legacy::connect(&url, "2025-06-18", json!({})).await;
            c.call("work", json!({ "label": label, "seconds": 20 }))
                .await
        }));
    }
    wait_for("both waiting calls' runs", LIMIT, || {
        let runs = setup.runs().len();
        async move { (runs == 2).then_some(()) }
    })
    .await;

    let c = Legacy::connect(&server.url(), "2025-06-18", json!({})).await;
    let refused = c
        .call("work", json!({ "label": "third", "seconds": 1 }))
        .await;
    // "max_waits)": the total bound, not the per-caller one.
    assert_bound_refusal(refused.error(), "server.max_waits)");
    assert_eq!(setup.runs().len(), 2, "the refused call started nothing");
    for w in waiting {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_max_engine_calls_gets_retryable_errors_for_the_rest() {
    let mut setup = Setup::new();
    setup.extra_env = vec![("TASKGATE__SERVER__MAX_ENGINE_CALLS".into(), "2".into())];
    let server = Server::start(&setup).await;
    let client = server.client();
    let headers = [("mcp-protocol-version", "2025-03-26".to_owned())];
    // Each call is one start (its wait for the result is not counted).
    let batch: Vec<Value> = (1..=4)
        .map(|id| {
            json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "work", "arguments": { "label": format!("e{id}"), "seconds": 0 } } })
        })
        .collect();
    let reply = client
        .post_raw(&headers, serde_json::to_vec(&batch).unwrap())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let answers = reply.body.as_array().expect("an array of answers");
    assert_eq!(answers.len(), 4, "every entry is answered: {answers:?}");
    for served in &answers[..2] {
        assert!(served["result"]["content"].is_array(), "{served}");
    }
    for refused in &answers[2..] {
        assert_bound_refusal(&refused["error"], "server.max_engine_calls");
    }
    assert_eq!(setup.runs().len(), 2, "the refused entries started nothing");

    // The bound is per request: the next one is served again.
    let again = client
        .post_raw(&headers, serde_json::to_vec(&batch[..1]).unwrap())
        .await;
    assert!(
        again.body[0]["result"]["content"].is_array(),
        "{}",
        again.raw
    );
}

/// Connects to the server's port, writes `head`, and reads until the server
/// closes the connection; `None` when it is still open after [`LIMIT`].
async fn written_then_left(server: &Server, head: &[u8]) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    stream.write_all(head).await.expect("write");
    let mut answer = Vec::new();
    match tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

fn slow_clients() -> Setup {
    let mut setup = Setup::new();
    setup.extra_env = vec![
        ("TASKGATE__SERVER__HEADER_READ_TIMEOUT".into(), "1s".into()),
        ("TASKGATE__SERVER__BODY_READ_TIMEOUT".into(), "1s".into()),
    ];
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slow_with_its_headers_is_disconnected() {
    let setup = slow_clients();
    let server = Server::start(&setup).await;
    // Half a request head, and then nothing.
    let answer = written_then_left(&server, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n").await;
    let answer = answer.expect("the server closes a connection whose headers never end");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "closed, or 408: {answer:?}"
    );
    // The server still serves everyone else.
    let discover = server.client().request("server/discover", json!({})).await;
    assert_eq!(discover.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slow_with_its_body_gets_408_and_nothing_runs() {
    let setup = slow_clients();
    let server = Server::start(&setup).await;
    // Whole headers announcing 400 bytes, then the first 40 of them, then nothing.
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "work", "arguments": { "label": "slow", "seconds": 0 },
                    "_meta": common::modern_meta(true) } })
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: work\r\n\
         content-length: {}\r\n\r\n{}",
        body.len(),
        &body[..40]
    );
    let answer = written_then_left(&server, head.as_bytes())
        .await
        .expect("the server closes a connection whose body never ends");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("server.body_read_timeout"), "{answer:?}");
    assert!(setup.runs().is_empty(), "nothing ran");
    assert_eq!(server.engine_calls().await, 0);
}

// ---------------------------------------------------------------- spool hygiene

/// Waits until the retention (`keep`) of the finished run in `dir` has passed,
/// by the end time its supervisor recorded.
async fn until_retention_passed(dir: &std::path::Path, keep: Duration) {
    let exit = dir.join("exit.json");
    wait_for("the run's retention to pass", LIMIT, || {
        let ended = std::fs::read(&exit)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["ended_at_ms"].as_u64());
        async move {
            let ended = ended?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            (now > ended + keep.as_millis() as u64 + 50).then_some(())
        }
    })
    .await;
}

/// Starts `tool` as a task and returns its run folder.
async fn started(
    setup: &Setup,
    client: &common::Client,
    tool: &str,
    seconds: u64,
) -> std::path::PathBuf {
    let before = setup.runs();
    client
        .start_task(tool, json!({ "label": "sweep", "seconds": seconds }))
        .await;
    setup
        .runs()
        .into_iter()
        .find(|r| !before.contains(r))
        .expect("the new run's folder")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_sweeps_runs_past_their_retention_and_never_a_live_one() {
    let setup = Setup::new();
    let server = Server::start(&setup).await;
    let client = server.client();
    // `brief` keeps a finished run 1 s.
    let finished = started(&setup, &client, "brief", 0).await;
    wait_for("the first run to finish", LIMIT, || {
        let done = finished.join("exit.json").exists();
        async move { done.then_some(()) }
    })
    .await;
    // Still running long after its own 1 s retention would have passed.
    let live = started(&setup, &client, "brief", 60).await;
    until_retention_passed(&finished, Duration::from_secs(1)).await;
    assert!(finished.exists(), "nobody read the finished run again");

    // Any start sweeps: the expired run goes, the live one stays.
    started(&setup, &client, "work", 0).await;
    assert!(
        !finished.exists(),
        "a run past its retention was left: {:?}",
        setup.runs()
    );
    assert!(live.join("meta.json").exists(), "a live run was removed");
    assert_eq!(setup.runs().len(), 2, "{:?}", setup.runs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sweeps_at_start_and_check_config_reports_the_spool() {
    let setup = Setup::new();
    let mut first = Server::start(&setup).await;
    let finished = started(&setup, &first.client(), "brief", 0).await;
    wait_for("the run to finish", LIMIT, || {
        let done = finished.join("exit.json").exists();
        async move { done.then_some(()) }
    })
    .await;
    first.kill();

    let out = setup
        .command(&["check-config", "--config", setup.config.to_str().unwrap()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(report.contains("spool: 1 runs, "), "{report}");
    assert!(!report.contains("oldest created none"), "{report}");

    until_retention_passed(&finished, Duration::from_secs(1)).await;
    let _second = Server::start(&setup).await;
    // No request at all: the new server's start removed it.
    wait_for("the sweep at server start", LIMIT, || {
        let gone = !finished.exists();
        async move { gone.then_some(()) }
    })
    .await;
    let out = setup
        .command(&["check-config", "--config", setup.config.to_str().unwrap()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        report.contains("spool: 0 runs, 0 bytes, oldest created none"),
        "{report}"
    );
}

/// `serve` raises its soft limit on open files to the hard limit (every HTTP
/// connection, an open listen stream included, holds a file descriptor) and
/// logs what it got. Started here under a soft limit of 512.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_raises_its_open_files_limit_to_the_hard_one() {
    let setup = Setup::new();
    let hard = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .unwrap();
    if hard == "unlimited" || hard.parse::<u64>().unwrap() <= 512 {
        println!("skipping: the hard limit on open files ({hard}) leaves nothing to raise");
        return;
    }
    let stderr = setup.dir.path().join("nofile.stderr");
    /// Stops the server however the test ends.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = std::process::Command::new("sh")
        .args(["-c", "ulimit -Sn 512 && exec \"$@\"", "sh"])
        .arg(common::bin())
        .args(["serve", "--config"])
        .arg(&setup.config)
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .envs(setup.env())
        .env("TASKGATE_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let child = Stopped(child);
    let pid = child.0.id();
    let logged = wait_for("the open-files line of the log", LIMIT, async || {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        text.lines()
            .find(|l| l.contains("limit on open files"))
            .map(str::to_owned)
    })
    .await;
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    drop(child);
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let soft = line.split_whitespace().nth(3).unwrap();
    assert_eq!(soft, hard, "soft limit raised to the hard one: {line}");
    assert!(
        logged.contains(&format!("limit on open files (RLIMIT_NOFILE): {hard}")),
        "{logged}"
    );
}
