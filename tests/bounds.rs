//! The front door's bounds, through the binary: a batch longer than
//! `server.max_batch` is refused whole and serves none of its entries, and a
//! caller past `server.max_waits_per_caller` is refused at once with a
//! retryable error before its run starts.

mod common;

use std::time::Duration;

use common::{wait_for, Legacy, Server, Setup};
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
    let e = refused.error();
    assert_eq!(e["code"], -32603, "{e}");
    assert_eq!(e["data"]["retryable"], true, "{e}");
    assert!(e["data"]["retryAfterMs"].as_u64().is_some(), "{e}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("server.max_waits_per_caller")),
        "{e}"
    );
    assert_eq!(setup.runs().len(), 1, "the refused call started nothing");
    waiting.abort();
}
