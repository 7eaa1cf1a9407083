//! Measurements `scripts/bench.sh` takes besides its wrk runs:
//!
//! ```sh
//! load handles                      # in-process cost of sealing and opening a handle
//! load calls URL N [TOOL]           # tools/call → CreateTaskResult latency, N calls one after another
//! load get URL CLIENTS SECONDS      # tasks/get from many concurrent clients (reqwest)
//! ```
//!
//! `calls` and `get` expect a taskgate whose tool (default `bench_sleep`; `get`
//! uses `analyze_dataset` of config.example.toml) runs long; every task it starts
//! is cancelled before it exits. Numbers go in the README, never in test assertions.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskgate::core::handle::{Dialect, Keyring, Purpose, TaskClaims};

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } }
    })
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    method: &str,
    name: &str,
    params: Value,
) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    client
        .post(url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&body)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

fn handle_costs() {
    // A fresh secret of the strength the keyring asks for (32 random bytes).
    let keys = Keyring::new(&[("k1".into(), taskgate::core::handle::new_secret())]).expect("keys");
    let claims = TaskClaims {
        dialect: Dialect::TasksExtension,
        tool: "analyze_dataset".into(),
        native:
            "arn:aws:states:us-east-1:123456789012:execution:Analyze:tg-abcdefghijklmnopqrstuvwxyz"
                .into(),
        created_ms: 1_700_000_000_000,
        ttl_ms: Some(86_400_000),
        trace: None,
    };
    let n = 100_000;
    let t = Instant::now();
    let mut handle = String::new();
    for _ in 0..n {
        handle = keys.seal(Purpose::Task, "alice", &claims);
    }
    let seal = t.elapsed() / n;
    let t = Instant::now();
    for _ in 0..n {
        let _: Option<TaskClaims> = keys.open(Purpose::Task, "alice", &handle);
    }
    let open = t.elapsed() / n;
    let t = Instant::now();
    for _ in 0..n {
        let _: Option<TaskClaims> = keys.open(Purpose::Task, "mallory", &handle);
    }
    let refuse = t.elapsed() / n;
    println!(
        "handle: {} bytes; seal {seal:?}, open {open:?}, refuse (foreign caller) {refuse:?}",
        handle.len()
    );
}

fn percentiles(mut all: Vec<Duration>) -> (Duration, Duration, Duration) {
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    (pct(0.50), pct(0.99), all[all.len() - 1])
}

async fn calls(url: &str, n: usize, tool: &str) {
    let client = reqwest::Client::new();
    let mut latencies = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let created = post(
            &client,
            url,
            "tools/call",
            tool,
            json!({ "name": tool, "arguments": {}, "_meta": meta() }),
        )
        .await;
        latencies.push(t.elapsed());
        let task = created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {created}"))
            .to_owned();
        tasks.push(task);
    }
    for task in &tasks {
        let _ = post(
            &client,
            url,
            "tasks/cancel",
            task,
            json!({ "taskId": task, "_meta": meta() }),
        )
        .await;
    }
    let (p50, p99, max) = percentiles(latencies);
    println!("tools/call → CreateTaskResult (exec, {n} calls one after another): p50 {p50:?}, p99 {p99:?}, max {max:?}");
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("handles") => return handle_costs(),
        Some("calls") => {
            let url = args.next().expect("URL");
            let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
            let tool = args.next().unwrap_or_else(|| "bench_sleep".to_owned());
            return calls(&url, n, &tool).await;
        }
        Some("get") => {}
        _ => {
            eprintln!("usage: load handles | calls URL N [TOOL] | get URL CLIENTS SECONDS");
            std::process::exit(2);
        }
    }
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8808/mcp".into());
    let clients: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);

    let client = reqwest::Client::new();
    let created = post(
        &client,
        &url,
        "tools/call",
        "analyze_dataset",
        json!({ "name": "analyze_dataset", "arguments": { "dataset": "bench", "seconds": seconds + 30 }, "_meta": meta() }),
    )
    .await;
    let task = created["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();

    let until = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for _ in 0..clients {
        let client = client.clone();
        let url = url.clone();
        let task = task.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                let r = post(
                    &client,
                    &url,
                    "tasks/get",
                    &task,
                    json!({ "taskId": task, "_meta": meta() }),
                )
                .await;
                assert!(r["result"]["status"].is_string(), "{r}");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.expect("worker"));
    }
    let count = all.len();
    let (p50, p99, max) = percentiles(all);
    println!(
        "tasks/get: {count} requests from {clients} clients in {seconds}s = {:.0}/s; p50 {p50:?}, p99 {p99:?}, max {max:?}",
        count as f64 / seconds as f64,
    );
    let _ = post(
        &client,
        &url,
        "tasks/cancel",
        &task,
        json!({ "taskId": task, "_meta": meta() }),
    )
    .await;
}
