//! `taskgate discover` on a real Temporal server (`scripts/temporal/up.sh`):
//! workflows started through the engine (no worker is needed: an execution is
//! listed as soon as it is started) show up as one tool per workflow type and
//! task queue, each target bindable by the same engine.
//!
//! Needs `TASKGATE_TEMPORAL_ADDRESS` (and `TASKGATE_TEMPORAL_NAMESPACE`,
//! default `taskgate-test`): skipped when unset, failed when
//! `TASKGATE_REQUIRE_E2E=1`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;
use taskgate_engine::{DiscoverOptions, Discovered, StartRequest, ToolDecl};

fn decl(target: Value) -> ToolDecl {
    ToolDecl {
        name: "wf".into(),
        target,
        input_schema: json!({"type": "object"}),
        keep_alive: None,
    }
}

#[tokio::test]
async fn discover_lists_recent_workflow_types_with_their_task_queues() {
    let Some(address) = e2e_endpoint("TASKGATE_TEMPORAL_ADDRESS") else {
        return;
    };
    let namespace =
        std::env::var("TASKGATE_TEMPORAL_NAMESPACE").unwrap_or_else(|_| "taskgate-test".into());
    let engine = taskgate_temporal::build(json!({"address": address, "namespace": namespace}))
        .await
        .unwrap();
    let tag = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000;
    let (kind_a, kind_b) = (format!("DiscoverA{tag}"), format!("DiscoverB{tag}"));
    let queue = format!("tq-discover-{tag}");
    let mut runs = Vec::new();
    for (i, kind) in [&kind_a, &kind_a, &kind_b].into_iter().enumerate() {
        let p = engine
            .bind(&decl(
                json!({"workflow_type": kind, "task_queue": queue, "cancel": "terminate"}),
            ))
            .unwrap();
        let run = p
            .start(StartRequest {
                run_name: format!("tg-disc-{tag}-{i}"),
                arguments: json!({"secret": "never-listed"}),
                caller_tag: "0123456789abcdef".into(),
                keep_alive: None,
                trace: None,
            })
            .await
            .unwrap();
        runs.push((p, run));
    }
    // Visibility is eventually consistent: wait (with a deadline) until both
    // types are listed.
    let ours = |found: &[Discovered]| -> Vec<Discovered> {
        found
            .iter()
            .filter(|d| d.target["task_queue"] == queue)
            .cloned()
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let found = engine.discover(&DiscoverOptions::default()).await.unwrap();
        let mine = ours(&found);
        if mine.len() == 2 {
            break mine;
        }
        assert!(
            Instant::now() < deadline,
            "not listed within 30 s: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Newest first: B was started last.
    assert_eq!(found[0].name, kind_b);
    assert_eq!(found[1].name, kind_a);
    assert_eq!(
        found[1].target,
        json!({"workflow_type": kind_a, "task_queue": queue})
    );
    assert!(found[1].origin.contains("2 of the"), "{}", found[1].origin);
    assert!(!format!("{found:?}").contains("never-listed"));
    for d in &found {
        engine.bind(&decl(d.target.clone())).unwrap();
    }
    for (p, run) in runs {
        p.cancel(&run).await.unwrap();
    }
}
