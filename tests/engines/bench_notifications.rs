//! Numbers, not assertions (`#[ignore]`): upstream calls per minute for one
//! Step Functions run on moto, watched by three `subscriptions/listen` streams
//! (one shared watch) vs polled by three clients with `tasks/get` at the task's
//! `pollIntervalMs`; and the same for one GitHub run on the double, where the
//! watch asks with `ETag`s and a 304 spends no rate budget.
//!
//! ```sh
//! TASKGATE_MOTO_URL=http://127.0.0.1:5005 \
//!   cargo test --test engines bench_notifications:: -- --ignored --nocapture
//! ```

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{modern_meta, tool_entry, Server, Setup, SseReader, MODERN};
use serde_json::json;
use taskgate_engine::testing::e2e_endpoint;

const WINDOW: Duration = Duration::from_secs(20);
/// How many clients watch (or poll) the one run.
const STREAMS: usize = 3;

async fn create_sleeper(url: &str) -> String {
    let conf = aws_sdk_sfn::config::Builder::new()
        .behavior_version(aws_sdk_sfn::config::BehaviorVersion::latest())
        .region(aws_sdk_sfn::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_sfn::config::Credentials::new(
            "testing", "testing", None, None, "bench",
        ))
        .build();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    aws_sdk_sfn::Client::from_conf(conf)
        .create_state_machine()
        .name(format!("bench-listen-{nanos}"))
        .definition(
            json!({"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 600, "End": true}}})
                .to_string(),
        )
        .role_arn("arn:aws:iam::123456789012:role/taskgate-tests")
        .r#type(aws_sdk_sfn::types::StateMachineType::Standard)
        .send()
        .await
        .expect("create state machine")
        .state_machine_arn()
        .to_owned()
}

/// Opens STREAMS listen streams on `task` and reads each one's
/// acknowledgement and first notification.
async fn open_streams(server: &Server, task: &str) -> Vec<SseReader> {
    let listen = json!({ "jsonrpc": "2.0", "id": "bench", "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": [task] }, "_meta": modern_meta(true) } });
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let response = reqwest::Client::new()
            .post(server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "subscriptions/listen")
            .body(listen.to_string())
            .send()
            .await
            .unwrap();
        let mut stream = SseReader::new(response);
        stream.next(Duration::from_secs(30)).await.expect("ack");
        stream.next(Duration::from_secs(30)).await.expect("state");
        streams.push(stream);
    }
    streams
}

/// STREAMS clients polling `tasks/get` at `pollIntervalMs` until WINDOW has
/// passed since `began`; returns the poll interval.
async fn poll_for(c: &common::Client, task: &str, began: Instant) -> Duration {
    let poll = Duration::from_millis(c.get(task).await["pollIntervalMs"].as_u64().unwrap());
    let pollers: Vec<_> = (0..STREAMS)
        .map(|i| {
            let (c, task) = (c.clone(), task.to_owned());
            tokio::spawn(async move {
                // Clients are not in step (in step, single-flight joins their reads).
                tokio::time::sleep(poll * i as u32 / STREAMS as u32).await;
                while began.elapsed() < WINDOW {
                    c.get(&task).await;
                    tokio::time::sleep(poll).await;
                }
            })
        })
        .collect();
    for p in pollers {
        p.await.unwrap();
    }
    poll
}

fn per_minute(calls: u64, over: Duration) -> f64 {
    calls as f64 * 60.0 / over.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn upstream_calls_watched_vs_polled() {
    let Some(url) = e2e_endpoint("TASKGATE_MOTO_URL") else {
        return;
    };
    let arn = create_sleeper(&url).await;
    let body = format!(
        "[engines.aws]\nkind = \"stepfunctions\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\n\n{}",
        tool_entry(
            "analyze",
            "bench",
            "aws",
            r#"{ type = "object" }"#,
            &format!(r#"state_machine_arn = "{arn}""#),
        )
        .replace("poll_interval = \"200ms\"", "poll_interval = \"1s\"")
    );
    let setup = Setup::config(
        &body,
        &[
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    let server = Server::start(&setup).await;
    let c = server.client();
    let task = c.start_task("analyze", json!({})).await;

    // STREAMS listen streams on the one run for WINDOW (they share one watch).
    let streams = open_streams(&server, &task).await;
    let before = server.engine_calls().await;
    let began = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let watched = server.engine_calls().await - before;
    let watched_over = began.elapsed();
    drop(streams);

    // STREAMS clients polling tasks/get at pollIntervalMs for WINDOW.
    let before = server.engine_calls().await;
    let began = Instant::now();
    let poll = poll_for(&c, &task, began).await;
    let polled = server.engine_calls().await - before;
    let polled_over = began.elapsed();
    c.cancel(&task).await;
    println!(
        "Step Functions on moto, poll_interval {poll:?}, {STREAMS} clients on one run: listen streams {:.1} upstream calls/min ({watched} in {watched_over:.1?}); tasks/get polling {:.1} calls/min ({polled} in {polled_over:.1?})",
        per_minute(watched, watched_over),
        per_minute(polled, polled_over),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn github_requests_and_budget_watched_vs_polled() {
    use taskgate_github_double::{Double, OWNER, REF, REPO, TOKEN, WORKFLOW};
    let d = Double::start().await;
    let body = format!(
        "[engines.gh]\nkind = \"github\"\ntoken_env = \"BENCH_GITHUB_TOKEN\"\nbase_url = \"{}\"\n\n{}",
        d.url,
        tool_entry(
            "deploy",
            "bench",
            "gh",
            r#"{ type = "object", required = ["version"], properties = { version = { type = "string" } } }"#,
            &format!(r#"owner = "{OWNER}", repo = "{REPO}", workflow = "{WORKFLOW}", ref = "{REF}""#),
        )
        .replace("poll_interval = \"200ms\"", "poll_interval = \"1s\"")
    );
    let setup = Setup::config(&body, &[("BENCH_GITHUB_TOKEN", TOKEN)]);
    let server = Server::start(&setup).await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "1"})).await;
    let id = d.run_ids()[0];
    // In progress: a read is the run and its jobs.
    d.set_run(id, "in_progress", None);

    let streams = open_streams(&server, &task).await;
    let (seen, budget) = (d.seen().len(), d.remaining());
    let began = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let watched = (d.seen().len() - seen) as u64;
    let watched_spent = budget - d.remaining();
    let watched_over = began.elapsed();
    drop(streams);

    let (seen, budget) = (d.seen().len(), d.remaining());
    let began = Instant::now();
    let poll = poll_for(&c, &task, began).await;
    let polled = (d.seen().len() - seen) as u64;
    let polled_spent = budget - d.remaining();
    let polled_over = began.elapsed();
    println!(
        "GitHub double, run in progress (run + jobs per read), poll_interval {poll:?}, {STREAMS} clients on one run: listen streams {:.1} requests/min, {:.1} of them spending rate budget ({watched} requests, {watched_spent} spent, in {watched_over:.1?}); tasks/get polling {:.1} requests/min, all spending ({polled} requests, {polled_spent} spent, in {polled_over:.1?})",
        per_minute(watched, watched_over),
        per_minute(watched_spent, watched_over),
        per_minute(polled, polled_over),
    );
    d.assert_clean();
}
